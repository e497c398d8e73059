//! gpe/inr.h: implicit neural representations fitted by least squares over a fixed
//! encoding: the separable 2-D and (0.4.0) 3-D closed forms, the blended fit of
//! scattered samples (0.4.0) and the condition number of a factor (0.4.0).

use super::{gpe_coordinate_encoder, gpe_status, DLTensor};

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_separable_fit_options {
    pub struct_size: u32,
    pub float32_image_products: i32,
    pub lambda: f64,
    /// Added after 0.3.0: 0 = Cholesky route; (0, 1) = truncated-SVD pseudo-inverse.
    pub rcond: f64,
}
impl gpe_separable_fit_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), float32_image_products: 0, lambda: 0.0, rcond: 0.0 }
    }
}

extern "C" {
    pub fn gpe_inr_fit_separable_2d(
        options: *const gpe_separable_fit_options,
        psi_y: *const DLTensor,
        psi_x: *const DLTensor,
        image: *const DLTensor,
        w: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_inr_predict_separable_2d(psi_y: *const DLTensor, psi_x: *const DLTensor, w: *const DLTensor, out: *mut DLTensor) -> gpe_status;
}

// ---- 3-D and blended fits (0.4.0) ----

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_blended_fit_options {
    pub struct_size: u32,
    pub max_iterations: i32,
    pub lambda: f64,
    pub tolerance: f64,
}
impl gpe_blended_fit_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), max_iterations: 500, lambda: 1e-6, tolerance: 1e-6 }
    }
}

extern "C" {
    pub fn gpe_inr_fit_separable_3d(
        options: *const gpe_separable_fit_options,
        psi_0: *const DLTensor,
        psi_1: *const DLTensor,
        psi_2: *const DLTensor,
        volume: *const DLTensor,
        w: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_inr_predict_separable_3d(
        psi_0: *const DLTensor,
        psi_1: *const DLTensor,
        psi_2: *const DLTensor,
        w: *const DLTensor,
        out: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_inr_fit_blended_2d(
        options: *const gpe_blended_fit_options,
        encoder_x: *const gpe_coordinate_encoder,
        encoder_y: *const gpe_coordinate_encoder,
        grid_x: *const DLTensor,
        grid_y: *const DLTensor,
        points: *const DLTensor,
        values: *const DLTensor,
        w: *mut DLTensor,
        iterations: *mut i32,
        rms_residual: *mut f64,
    ) -> gpe_status;
    pub fn gpe_inr_predict_blended_2d(
        encoder_x: *const gpe_coordinate_encoder,
        encoder_y: *const gpe_coordinate_encoder,
        grid_x: *const DLTensor,
        grid_y: *const DLTensor,
        points: *const DLTensor,
        w: *const DLTensor,
        out: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_inr_condition_number(psi: *const DLTensor, out: *mut f64) -> gpe_status;
}
