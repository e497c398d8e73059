//! gpe/bias.h (since 0.3.0): the additive attention biases behind gpe_bias: ALiBi, T5,
//! FoX, GRAPE-AP and (0.4.0) GRAPE-A with its lift, filled and differentiated one tile at
//! a time.

use super::{gpe_status, DLTensor};

pub const GPE_BIAS_ALIBI: i32 = 0;
pub const GPE_BIAS_T5: i32 = 1;
pub const GPE_BIAS_FOX: i32 = 2;
pub const GPE_BIAS_GRAPE_AP: i32 = 3;
pub const GPE_ALIBI_CAUSAL: i32 = 0;
pub const GPE_ALIBI_SYMMETRIC: i32 = 1;

#[repr(C)]
pub struct gpe_bias {
    _private: [u8; 0],
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_alibi_options {
    pub struct_size: u32,
    pub form: i32,
    pub num_heads: i64,
    pub slopes: *const f64,
}
impl gpe_alibi_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), form: GPE_ALIBI_CAUSAL, num_heads: 0, slopes: std::ptr::null() }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_t5_options {
    pub struct_size: u32,
    pub bidirectional: i32,
    pub num_heads: i64,
    pub num_buckets: i64,
    pub max_distance: i64,
    pub table: *const f64,
}
impl gpe_t5_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), bidirectional: 1, num_heads: 0, num_buckets: 32, max_distance: 128, table: std::ptr::null() }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_fox_options {
    pub struct_size: u32,
    pub length: i64,
    pub num_heads: i64,
    pub first_position: i64,
    pub gate_logits: *const f64,
}
impl gpe_fox_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), length: 0, num_heads: 0, first_position: 0, gate_logits: std::ptr::null() }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_grape_ap_options {
    pub struct_size: u32,
    pub length: i64,
    pub num_heads: i64,
    pub rank: i64,
    pub first_position: i64,
    pub w: *const f64,
    pub u: *const f64,
}
impl gpe_grape_ap_options {
    pub fn init() -> Self {
        Self {
            struct_size: struct_size!(Self),
            length: 0,
            num_heads: 0,
            rank: 1,
            first_position: 0,
            w: std::ptr::null(),
            u: std::ptr::null(),
        }
    }
}

extern "C" {
    pub fn gpe_bias_create_alibi(options: *const gpe_alibi_options, out: *mut *mut gpe_bias) -> gpe_status;
    pub fn gpe_bias_create_t5(options: *const gpe_t5_options, out: *mut *mut gpe_bias) -> gpe_status;
    pub fn gpe_bias_create_fox(options: *const gpe_fox_options, out: *mut *mut gpe_bias) -> gpe_status;
    pub fn gpe_bias_create_grape_ap(options: *const gpe_grape_ap_options, out: *mut *mut gpe_bias) -> gpe_status;
    pub fn gpe_bias_destroy(bias: *mut gpe_bias);
    pub fn gpe_bias_info(bias: *const gpe_bias, kind: *mut i32, num_heads: *mut i64, causal: *mut i32) -> gpe_status;
    pub fn gpe_bias_alibi_slopes(bias: *const gpe_bias, slopes: *mut f64, num_slopes: i64) -> gpe_status;
    pub fn gpe_bias_fill_tile(
        bias: *const gpe_bias,
        head: i64,
        q_positions: *const DLTensor,
        k_positions: *const DLTensor,
        out: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_bias_accumulate_gradient(
        bias: *const gpe_bias,
        head: i64,
        q_positions: *const DLTensor,
        k_positions: *const DLTensor,
        grad_tile: *const DLTensor,
        grad_a: *mut DLTensor,
        grad_b: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_bias_fox_logit_gradient(bias: *const gpe_bias, grad_prefix: *const DLTensor, grad_logits: *mut DLTensor) -> gpe_status;
}

// ---- GRAPE-A (0.4.0) ----

pub const GPE_BIAS_GRAPE_A: i32 = 4;
pub const GPE_GRAPE_A_CLOSED_FORM: i32 = 0;
pub const GPE_GRAPE_A_LIFTED: i32 = 1;
pub const GPE_GRAPE_A_QUERY: i32 = 0;
pub const GPE_GRAPE_A_KEY: i32 = 1;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_grape_a_options {
    pub struct_size: u32,
    pub path: i32,
    pub num_heads: i64,
    pub head_dim: i64,
    pub slopes: *const f64,
    pub gated: i32,
    pub length: i64,
    pub first_position: i64,
    pub gate_logits: *const f64,
}
impl gpe_grape_a_options {
    pub fn init() -> Self {
        Self {
            struct_size: struct_size!(Self),
            path: GPE_GRAPE_A_CLOSED_FORM,
            num_heads: 0,
            head_dim: 0,
            slopes: std::ptr::null(),
            gated: 0,
            length: 0,
            first_position: 0,
            gate_logits: std::ptr::null(),
        }
    }
}

extern "C" {
    pub fn gpe_bias_create_grape_a(options: *const gpe_grape_a_options, out: *mut *mut gpe_bias) -> gpe_status;
    pub fn gpe_bias_grape_a_lift(
        bias: *const gpe_bias,
        head: i64,
        role: i32,
        positions: *const DLTensor,
        x: *const DLTensor,
        out: *mut DLTensor,
    ) -> gpe_status;
}
