//! gpe/inr_training.h (since 0.5.0): implicit neural representations trained by
//! full-batch Adam: a small ReLU network (gpe_mlp_options, with a held-out set in
//! gpe_mlp_validation) and the linear layer over a fixed encoding
//! (gpe_linear_adam_options), with their progress callbacks.

use std::os::raw::c_void;

use super::{gpe_status, DLTensor};

pub type gpe_progress_callback = Option<unsafe extern "C" fn(user_data: *mut c_void, step: i64, train_loss: f64)>;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_mlp_options {
    pub struct_size: u32,
    pub hidden_width: i64,
    pub num_hidden_layers: i64,
    pub steps: i64,
    pub learning_rate: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub epsilon: f64,
    pub seed: u64,
    pub report_every: i64,
    pub progress: gpe_progress_callback,
    pub progress_user_data: *mut c_void,
}
impl gpe_mlp_options {
    /// GPE_MLP_OPTIONS_INIT.
    pub fn init() -> Self {
        Self {
            struct_size: struct_size!(Self),
            hidden_width: 128,
            num_hidden_layers: 3,
            steps: 500,
            learning_rate: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
            seed: 0,
            report_every: 0,
            progress: None,
            progress_user_data: std::ptr::null_mut(),
        }
    }
}

/// gpe_validation_progress_callback (0.7.0): step, train loss, validation loss.
pub type gpe_validation_progress_callback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, step: i64, train_loss: f64, validation_loss: f64)>;

/// gpe_mlp_validation: a held-out set (inputs), the validation curve (optional outputs)
/// and (0.7.0) a progress callback that also gets the validation loss.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_mlp_validation {
    pub struct_size: u32,
    pub features: *const DLTensor,
    pub targets: *const DLTensor,
    pub steps: *mut DLTensor,
    pub loss: *mut DLTensor,
    pub progress: gpe_validation_progress_callback,
    pub progress_user_data: *mut c_void,
}
impl gpe_mlp_validation {
    /// GPE_MLP_VALIDATION_INIT.
    pub fn init() -> Self {
        Self {
            struct_size: struct_size!(Self),
            features: std::ptr::null(),
            targets: std::ptr::null(),
            steps: std::ptr::null_mut(),
            loss: std::ptr::null_mut(),
            progress: None,
            progress_user_data: std::ptr::null_mut(),
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_linear_adam_options {
    pub struct_size: u32,
    pub steps: i64,
    pub learning_rate: f64,
    pub final_learning_rate: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub epsilon: f64,
    pub report_every: i64,
    pub progress: gpe_progress_callback,
    pub progress_user_data: *mut c_void,
}
impl gpe_linear_adam_options {
    /// GPE_LINEAR_ADAM_OPTIONS_INIT.
    pub fn init() -> Self {
        Self {
            struct_size: struct_size!(Self),
            steps: 2000,
            learning_rate: 1e-2,
            final_learning_rate: 1e-2,
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
            report_every: 0,
            progress: None,
            progress_user_data: std::ptr::null_mut(),
        }
    }
}

extern "C" {
    pub fn gpe_inr_mlp_num_parameters(options: *const gpe_mlp_options, input_dim: i64, output_dim: i64, out: *mut i64) -> gpe_status;
    pub fn gpe_inr_mlp_init(options: *const gpe_mlp_options, input_dim: i64, output_dim: i64, parameters: *mut DLTensor) -> gpe_status;
    pub fn gpe_inr_mlp_fit(
        options: *const gpe_mlp_options,
        features: *const DLTensor,
        targets: *const DLTensor,
        initial_parameters: *const DLTensor,
        parameters: *mut DLTensor,
        train_loss: *mut DLTensor,
        final_loss: *mut f64,
    ) -> gpe_status;
    pub fn gpe_inr_mlp_num_evaluations(options: *const gpe_mlp_options, out: *mut i64) -> gpe_status;
    pub fn gpe_inr_mlp_fit_v2(
        options: *const gpe_mlp_options,
        features: *const DLTensor,
        targets: *const DLTensor,
        initial_parameters: *const DLTensor,
        parameters: *mut DLTensor,
        train_loss: *mut DLTensor,
        final_loss: *mut f64,
        validation: *const gpe_mlp_validation,
    ) -> gpe_status;
    pub fn gpe_inr_mlp_predict(options: *const gpe_mlp_options, parameters: *const DLTensor, features: *const DLTensor, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_inr_fit_dense_adam(
        options: *const gpe_linear_adam_options,
        features: *const DLTensor,
        targets: *const DLTensor,
        w: *mut DLTensor,
        train_loss: *mut DLTensor,
        final_loss: *mut f64,
    ) -> gpe_status;
    pub fn gpe_inr_fit_separable_adam_2d(
        options: *const gpe_linear_adam_options,
        psi_y: *const DLTensor,
        psi_x: *const DLTensor,
        image: *const DLTensor,
        w: *mut DLTensor,
        train_loss: *mut DLTensor,
        final_loss: *mut f64,
    ) -> gpe_status;
}
