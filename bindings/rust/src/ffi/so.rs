//! gpe/so.h: SO(n) representations of the integers (gpe_so_rep), rho(p) = exp(p S) as
//! RoPE's commuting planes or one rank-2 generator.

use super::{gpe_status, DLTensor, GPE_PAIRING_INTERLEAVED};

#[repr(C)]
pub struct gpe_so_rep {
    _private: [u8; 0],
}

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

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_so_rank2_options {
    pub struct_size: u32,
    pub dim: i64,
    pub a: *const f64,
    pub b: *const f64,
    pub omega: f64,
}
impl gpe_so_rank2_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), dim: 0, a: std::ptr::null(), b: std::ptr::null(), omega: 1.0 }
    }
}

extern "C" {
    pub fn gpe_so_rep_create_planes(options: *const gpe_so_planes_options, out: *mut *mut gpe_so_rep) -> gpe_status;
    pub fn gpe_so_rep_create_rank2(options: *const gpe_so_rank2_options, out: *mut *mut gpe_so_rep) -> gpe_status;
    pub fn gpe_so_rep_destroy(rep: *mut gpe_so_rep);
    pub fn gpe_so_rep_dim(rep: *const gpe_so_rep, dim: *mut i64) -> gpe_status;
    pub fn gpe_so_rep_apply(rep: *const gpe_so_rep, positions: *const DLTensor, x: *const DLTensor, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_so_rep_matrix(rep: *const gpe_so_rep, position: i64, out: *mut DLTensor) -> gpe_status;
}
