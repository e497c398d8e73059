//! gpe/inr_data.h (since 0.5.0): data for implicit neural representations: Lim et al.'s
//! analytic images and vector fields, pixel grids, the papers' splits, and the error
//! metrics.

use super::{gpe_status, DLTensor};

pub const GPE_SYNTHETIC_RADIAL: i32 = 0;
pub const GPE_SYNTHETIC_SPIRAL: i32 = 1;

extern "C" {
    pub fn gpe_inr_synthetic_image(task: i32, signed_values: i32, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_inr_synthetic_vector_field(task: i32, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_inr_grid_coordinates(n: i64, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_inr_random_split(
        num_points: i64,
        train_fraction: f64,
        validation_fraction: f64,
        seed: u64,
        indices: *mut DLTensor,
        counts: *mut i64,
    ) -> gpe_status;
    pub fn gpe_inr_regular_grid_split(rows: i64, cols: i64, indices: *mut DLTensor, counts: *mut i64) -> gpe_status;
    pub fn gpe_inr_mse(a: *const DLTensor, b: *const DLTensor, out: *mut f64) -> gpe_status;
    pub fn gpe_inr_psnr(a: *const DLTensor, b: *const DLTensor, peak: f64, out: *mut f64) -> gpe_status;
}
