//! Hand-written declarations of gpe.h (c_api/include/gpe/gpe.h) and the DLPack 0.6
//! structs it uses. Field order and types follow the header exactly; option structs
//! begin with `struct_size`, set by the `*_init` constructors below to the size this
//! crate was written against.
#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int, c_void};

pub type gpe_status = i32;
pub const GPE_OK: gpe_status = 0;
pub const GPE_ERROR_INVALID_ARGUMENT: gpe_status = 1;
pub const GPE_ERROR_OUT_OF_RANGE: gpe_status = 2;
pub const GPE_ERROR_UNSUPPORTED: gpe_status = 3;
pub const GPE_ERROR_OUT_OF_MEMORY: gpe_status = 4;
pub const GPE_ERROR_INTERNAL: gpe_status = 5;
pub const GPE_ERROR_VERSION_MISMATCH: gpe_status = 6;

pub const GPE_PAIRING_INTERLEAVED: i32 = 0;
pub const GPE_PAIRING_HALF_SPLIT: i32 = 1;

pub const GPE_SHIFTED_GAUSSIAN: i32 = 0;
pub const GPE_SHIFTED_TRIANGLE: i32 = 1;
pub const GPE_SHIFTED_RECTANGLE: i32 = 2;
pub const GPE_SHIFTED_IMPULSE: i32 = 3;
pub const GPE_SHIFTED_SINE: i32 = 4;
pub const GPE_SHIFTED_SQUARE: i32 = 5;

// ---- DLPack 0.6 ----
pub const KDL_CPU: i32 = 1;
pub const KDL_INT: u8 = 0;
pub const KDL_FLOAT: u8 = 2;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

// ---- Opaque handles ----
#[repr(C)]
pub struct gpe_so_rep {
    _private: [u8; 0],
}
#[repr(C)]
pub struct gpe_learned_positions {
    _private: [u8; 0],
}
#[repr(C)]
pub struct gpe_grape_m {
    _private: [u8; 0],
}
#[repr(C)]
pub struct gpe_algebraic_sequence {
    _private: [u8; 0],
}

// ---- Option structs ----
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_so_planes_options {
    pub struct_size: u32,
    pub pairing: i32,
    pub dim: i64,
    pub rotary_dim: i64,
    pub base: f64,
    pub thetas: *const f64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_so_rank2_options {
    pub struct_size: u32,
    pub dim: i64,
    pub a: *const f64,
    pub b: *const f64,
    pub omega: f64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_sinusoidal_options {
    pub struct_size: u32,
    pub base: f64,
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

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_algebraic_sequence_options {
    pub struct_size: u32,
    pub dim: i64,
    pub skew: *const f64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_shifted_basis_options {
    pub struct_size: u32,
    pub kind: i32,
    pub num_shifts: i64,
    pub width: f64,
    pub lo: f64,
    pub hi: f64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_separable_fit_options {
    pub struct_size: u32,
    pub float32_image_products: i32,
    pub lambda: f64,
}

macro_rules! struct_size {
    ($t:ty) => {
        std::mem::size_of::<$t>() as u32
    };
}

// The *_INIT macros of gpe.h.
impl gpe_so_planes_options {
    pub fn init() -> Self {
        Self {
            struct_size: struct_size!(Self),
            pairing: GPE_PAIRING_INTERLEAVED,
            dim: 0,
            rotary_dim: 0,
            base: 10000.0,
            thetas: std::ptr::null(),
        }
    }
}
impl gpe_so_rank2_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), dim: 0, a: std::ptr::null(), b: std::ptr::null(), omega: 1.0 }
    }
}
impl gpe_sinusoidal_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), base: 10000.0 }
    }
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
impl gpe_algebraic_sequence_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), dim: 0, skew: std::ptr::null() }
    }
}
impl gpe_shifted_basis_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), kind: GPE_SHIFTED_GAUSSIAN, num_shifts: 0, width: 0.0, lo: 0.0, hi: 1.0 }
    }
}
impl gpe_separable_fit_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), float32_image_products: 0, lambda: 0.0 }
    }
}

extern "C" {
    pub fn gpe_version() -> c_int;
    pub fn gpe_version_string() -> *const c_char;
    pub fn gpe_last_error_message() -> *const c_char;
    pub fn gpe_status_name(status: gpe_status) -> *const c_char;

    pub fn gpe_so_rep_create_planes(options: *const gpe_so_planes_options, out: *mut *mut gpe_so_rep) -> gpe_status;
    pub fn gpe_so_rep_create_rank2(options: *const gpe_so_rank2_options, out: *mut *mut gpe_so_rep) -> gpe_status;
    pub fn gpe_so_rep_destroy(rep: *mut gpe_so_rep);
    pub fn gpe_so_rep_dim(rep: *const gpe_so_rep, dim: *mut i64) -> gpe_status;
    pub fn gpe_so_rep_apply(rep: *const gpe_so_rep, positions: *const DLTensor, x: *const DLTensor, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_so_rep_matrix(rep: *const gpe_so_rep, position: i64, out: *mut DLTensor) -> gpe_status;

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

    pub fn gpe_algebraic_sequence_create(options: *const gpe_algebraic_sequence_options, out: *mut *mut gpe_algebraic_sequence) -> gpe_status;
    pub fn gpe_algebraic_sequence_destroy(seq: *mut gpe_algebraic_sequence);
    pub fn gpe_algebraic_sequence_dim(seq: *const gpe_algebraic_sequence, dim: *mut i64) -> gpe_status;
    pub fn gpe_algebraic_sequence_apply(seq: *const gpe_algebraic_sequence, positions: *const DLTensor, x: *const DLTensor, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_algebraic_sequence_matrix(seq: *const gpe_algebraic_sequence, position: i64, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_algebraic_sequence_backward(
        seq: *const gpe_algebraic_sequence,
        positions: *const DLTensor,
        x: *const DLTensor,
        grad_out: *const DLTensor,
        grad_x: *mut DLTensor,
        grad_skew: *mut DLTensor,
    ) -> gpe_status;

    pub fn gpe_shaw_key_scores(
        q: *const DLTensor,
        label_table: *const DLTensor,
        query_positions: *const DLTensor,
        key_positions: *const DLTensor,
        scores: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_shaw_key_scores_backward(
        q: *const DLTensor,
        label_table: *const DLTensor,
        query_positions: *const DLTensor,
        key_positions: *const DLTensor,
        grad_scores: *const DLTensor,
        grad_q: *mut DLTensor,
        grad_label_table: *mut DLTensor,
    ) -> gpe_status;

    pub fn gpe_shifted_basis_encode(options: *const gpe_shifted_basis_options, coords: *const DLTensor, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_stable_rank(matrix: *const DLTensor, out: *mut f64) -> gpe_status;
    pub fn gpe_inr_fit_separable_2d(
        options: *const gpe_separable_fit_options,
        psi_y: *const DLTensor,
        psi_x: *const DLTensor,
        image: *const DLTensor,
        w: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_inr_predict_separable_2d(psi_y: *const DLTensor, psi_x: *const DLTensor, w: *const DLTensor, out: *mut DLTensor) -> gpe_status;
}
