//! gpe/sequence.h: sequence encodings of int64 token positions: the sinusoidal and
//! learned absolute encodings (gpe_learned_positions) and GRAPE-M (gpe_grape_m).

use super::{gpe_status, DLTensor};

#[repr(C)]
pub struct gpe_learned_positions {
    _private: [u8; 0],
}

#[repr(C)]
pub struct gpe_grape_m {
    _private: [u8; 0],
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_sinusoidal_options {
    pub struct_size: u32,
    pub base: f64,
}
impl gpe_sinusoidal_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), base: 10000.0 }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_grape_m_options {
    pub struct_size: u32,
    pub dim: i64,
    pub num_generators: i64,
    pub a: *const f64,
    pub b: *const f64,
    pub omega: *const f64,
}
impl gpe_grape_m_options {
    pub fn init() -> Self {
        Self {
            struct_size: struct_size!(Self),
            dim: 0,
            num_generators: 1,
            a: std::ptr::null(),
            b: std::ptr::null(),
            omega: std::ptr::null(),
        }
    }
}

extern "C" {
    pub fn gpe_sinusoidal_encode(options: *const gpe_sinusoidal_options, positions: *const DLTensor, out: *mut DLTensor) -> gpe_status;

    pub fn gpe_learned_positions_create(table: *const DLTensor, out: *mut *mut gpe_learned_positions) -> gpe_status;
    pub fn gpe_learned_positions_destroy(table: *mut gpe_learned_positions);
    pub fn gpe_learned_positions_shape(table: *const gpe_learned_positions, max_positions: *mut i64, dim: *mut i64) -> gpe_status;
    pub fn gpe_learned_positions_lookup(table: *const gpe_learned_positions, positions: *const DLTensor, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_learned_positions_backward(
        table: *const gpe_learned_positions,
        positions: *const DLTensor,
        grad_out: *const DLTensor,
        grad_table: *mut DLTensor,
    ) -> gpe_status;

    pub fn gpe_grape_m_create(options: *const gpe_grape_m_options, out: *mut *mut gpe_grape_m) -> gpe_status;
    pub fn gpe_grape_m_destroy(grape: *mut gpe_grape_m);
    pub fn gpe_grape_m_shape(grape: *const gpe_grape_m, dim: *mut i64, num_generators: *mut i64) -> gpe_status;
    pub fn gpe_grape_m_apply(grape: *const gpe_grape_m, positions: *const DLTensor, x: *const DLTensor, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_grape_m_matrix(grape: *const gpe_grape_m, position: i64, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_grape_m_backward(
        grape: *const gpe_grape_m,
        positions: *const DLTensor,
        x: *const DLTensor,
        grad_out: *const DLTensor,
        grad_x: *mut DLTensor,
        grad_a: *mut DLTensor,
        grad_b: *mut DLTensor,
        grad_omega: *mut DLTensor,
    ) -> gpe_status;
}
