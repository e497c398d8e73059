//! gpe/rope.h (since 0.3.0): rotary position embeddings as models use them: the frequency
//! schedules (and, since 0.4.0, the published ones), xPos, multi-axis RoPE, the token
//! layouts (gpe_rope_tokens), and the reusable cos/sin tables (gpe_rope_table).

use super::{gpe_status, DLTensor, GPE_PAIRING_HALF_SPLIT};

pub const GPE_ROPE_DEFAULT: i32 = 0;
pub const GPE_ROPE_LINEAR: i32 = 1;
pub const GPE_ROPE_DYNAMIC_NTK: i32 = 2;
pub const GPE_ROPE_YARN: i32 = 3;
pub const GPE_ROPE_LONGROPE: i32 = 4;
pub const GPE_ROPE_LLAMA3: i32 = 5;

pub const GPE_ROPE_AXES_SINGLE: i32 = 0;
pub const GPE_ROPE_AXES_AXIAL: i32 = 1;
pub const GPE_ROPE_AXES_MROPE: i32 = 2;
pub const GPE_ROPE_AXES_MROPE_INTERLEAVED: i32 = 3;

pub const GPE_ROPE_LAYOUT_BSHD: i32 = 0;
pub const GPE_ROPE_LAYOUT_SBHD: i32 = 1;
pub const GPE_ROPE_LAYOUT_THD: i32 = 2;
pub const GPE_ROPE_QUERY: i32 = 0;
pub const GPE_ROPE_KEY: i32 = 1;

#[repr(C)]
pub struct gpe_rope {
    _private: [u8; 0],
}
#[repr(C)]
pub struct gpe_rope_table {
    _private: [u8; 0],
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_rope_options {
    pub struct_size: u32,
    pub pairing: i32,
    pub head_dim: i64,
    pub rotary_dim: i64,
    pub base: f64,
    pub schedule: i32,
    pub num_threads: i32,
    pub factor: f64,
    pub original_max_position: i64,
    pub current_length: i64,
    pub beta_fast: f64,
    pub beta_slow: f64,
    pub yarn_truncate: i32,
    pub has_mscale: i32,
    pub mscale: f64,
    pub mscale_all_dim: f64,
    pub has_attention_factor: i32,
    pub attention_factor: f64,
    pub short_factor: *const f64,
    pub short_factor_len: i64,
    pub long_factor: *const f64,
    pub long_factor_len: i64,
    pub max_position: i64,
    pub low_freq_factor: f64,
    pub high_freq_factor: f64,
    pub xpos: i32,
    pub xpos_gamma: f64,
    pub xpos_scale_base: f64,
    pub xpos_centre: i64,
    pub axes: i32,
    pub num_axes: i32,
    pub mrope_sections: *const i64,
    pub num_mrope_sections: i64,
}
impl gpe_rope_options {
    pub fn init() -> Self {
        Self {
            struct_size: struct_size!(Self),
            pairing: GPE_PAIRING_HALF_SPLIT,
            head_dim: 0,
            rotary_dim: 0,
            base: 10000.0,
            schedule: GPE_ROPE_DEFAULT,
            num_threads: 1,
            factor: 1.0,
            original_max_position: 4096,
            current_length: 0,
            beta_fast: 32.0,
            beta_slow: 1.0,
            yarn_truncate: 1,
            has_mscale: 0,
            mscale: 1.0,
            mscale_all_dim: 1.0,
            has_attention_factor: 0,
            attention_factor: 1.0,
            short_factor: std::ptr::null(),
            short_factor_len: 0,
            long_factor: std::ptr::null(),
            long_factor_len: 0,
            max_position: 131072,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            xpos: 0,
            xpos_gamma: 0.4,
            xpos_scale_base: 512.0,
            xpos_centre: 0,
            axes: GPE_ROPE_AXES_SINGLE,
            num_axes: 1,
            mrope_sections: std::ptr::null(),
            num_mrope_sections: 0,
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_rope_tokens {
    pub struct_size: u32,
    pub layout: i32,
    pub role: i32,
    pub position_ids: *const DLTensor,
    pub offsets: *const DLTensor,
    pub cu_seqlens: *const DLTensor,
    /// Since 0.10.0: the cudaStream_t of a call on CUDA tensors (the crate passes host
    /// slices only: null).
    pub cuda_stream: *mut std::ffi::c_void,
}
impl gpe_rope_tokens {
    pub fn init() -> Self {
        Self {
            struct_size: struct_size!(Self),
            layout: GPE_ROPE_LAYOUT_BSHD,
            role: GPE_ROPE_QUERY,
            position_ids: std::ptr::null(),
            offsets: std::ptr::null(),
            cu_seqlens: std::ptr::null(),
            cuda_stream: std::ptr::null_mut(),
        }
    }
}

extern "C" {
    pub fn gpe_rope_create(options: *const gpe_rope_options, out: *mut *mut gpe_rope) -> gpe_status;
    pub fn gpe_rope_destroy(rope: *mut gpe_rope);
    pub fn gpe_rope_shape(rope: *const gpe_rope, head_dim: *mut i64, rotary_dim: *mut i64, num_axes: *mut i64) -> gpe_status;
    pub fn gpe_rope_frequencies(rope: *const gpe_rope, thetas: *mut f64, num_thetas: i64, attention_factor: *mut f64) -> gpe_status;
    pub fn gpe_rope_forward(rope: *const gpe_rope, tokens: *const gpe_rope_tokens, x: *const DLTensor, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_rope_backward(rope: *const gpe_rope, tokens: *const gpe_rope_tokens, dy: *const DLTensor, dx: *mut DLTensor) -> gpe_status;
    pub fn gpe_rope_table_create(
        rope: *const gpe_rope,
        tokens: *const gpe_rope_tokens,
        like: *const DLTensor,
        out: *mut *mut gpe_rope_table,
    ) -> gpe_status;
    pub fn gpe_rope_table_destroy(table: *mut gpe_rope_table);
    pub fn gpe_rope_table_forward(table: *const gpe_rope_table, x: *const DLTensor, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_rope_table_backward(table: *const gpe_rope_table, dy: *const DLTensor, dx: *mut DLTensor) -> gpe_status;
    // 0.4.0.
    pub fn gpe_rope_options_use_schedule(schedule: i32, options: *mut gpe_rope_options) -> gpe_status;
}
