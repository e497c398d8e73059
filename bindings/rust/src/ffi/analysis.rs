//! gpe/analysis.h: analysis of embedders: the stable rank and, since 0.4.0, distance
//! preservation, measured or in the papers' closed forms (GPE_EMBEDDER_*).

use super::{gpe_status, DLTensor};

// 0.4.0.
pub const GPE_EMBEDDER_GAUSSIAN: i32 = 0;
pub const GPE_EMBEDDER_RECTANGLE: i32 = 1;
pub const GPE_EMBEDDER_TRIANGLE: i32 = 2;
pub const GPE_EMBEDDER_RFF: i32 = 3;

extern "C" {
    pub fn gpe_stable_rank(matrix: *const DLTensor, out: *mut f64) -> gpe_status;
    // 0.4.0.
    pub fn gpe_embedded_distance_matrix(features: *const DLTensor, sample_spacing: f64, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_embedder_stable_rank(embedder: i32, parameter: f64, num_points: i64, out: *mut f64) -> gpe_status;
    pub fn gpe_embedder_distance(embedder: i32, parameter: f64, delta: f64, out: *mut f64) -> gpe_status;
}
