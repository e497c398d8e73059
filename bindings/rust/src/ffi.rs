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
    /// Added after 0.3.0: 0 = Cholesky route; (0, 1) = truncated-SVD pseudo-inverse.
    pub rcond: f64,
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
        Self { struct_size: struct_size!(Self), float32_image_products: 0, lambda: 0.0, rcond: 0.0 }
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

// ---- Since 0.3.0: RoPE, additive biases, attention ----

pub const KDL_BFLOAT: u8 = 4;

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

pub const GPE_BIAS_ALIBI: i32 = 0;
pub const GPE_BIAS_T5: i32 = 1;
pub const GPE_BIAS_FOX: i32 = 2;
pub const GPE_BIAS_GRAPE_AP: i32 = 3;
pub const GPE_ALIBI_CAUSAL: i32 = 0;
pub const GPE_ALIBI_SYMMETRIC: i32 = 1;

#[repr(C)]
pub struct gpe_rope {
    _private: [u8; 0],
}
#[repr(C)]
pub struct gpe_rope_table {
    _private: [u8; 0],
}
#[repr(C)]
pub struct gpe_bias {
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

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_rope_tokens {
    pub struct_size: u32,
    pub layout: i32,
    pub role: i32,
    pub position_ids: *const DLTensor,
    pub offsets: *const DLTensor,
    pub cu_seqlens: *const DLTensor,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_alibi_options {
    pub struct_size: u32,
    pub form: i32,
    pub num_heads: i64,
    pub slopes: *const f64,
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

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_fox_options {
    pub struct_size: u32,
    pub length: i64,
    pub num_heads: i64,
    pub first_position: i64,
    pub gate_logits: *const f64,
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

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_attention_options {
    pub struct_size: u32,
    pub causal: i32,
    pub softmax_scale: f64,
    pub num_threads: i32,
    pub rope_dim: i64,
    pub rope_base: f64,
    pub rope_pairing: i32,
    pub grape_m: *const gpe_grape_m,
    pub algebraic: *const gpe_algebraic_sequence,
    pub bias: *const gpe_bias,
    pub q_positions: *const DLTensor,
    pub k_positions: *const DLTensor,
    pub cu_seqlens_q: *const DLTensor,
    pub cu_seqlens_k: *const DLTensor,
    // Structured positions and Shaw labels (the library reads them when struct_size
    // covers them).
    pub rope_axes: i32,
    pub rope_sections_interleaved: i32,
    pub rope_sections: *const DLTensor,
    pub algebraic_tree: *const DLTensor,
    pub algebraic_grid: *const DLTensor,
    pub q_axes: *const DLTensor,
    pub k_axes: *const DLTensor,
    pub q_tree_offsets: *const DLTensor,
    pub q_tree_children: *const DLTensor,
    pub k_tree_offsets: *const DLTensor,
    pub k_tree_children: *const DLTensor,
    pub shaw_max_distance: i64,
    pub shaw_key_table: *const DLTensor,
    pub shaw_value_table: *const DLTensor,
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
impl gpe_rope_tokens {
    pub fn init() -> Self {
        Self {
            struct_size: struct_size!(Self),
            layout: GPE_ROPE_LAYOUT_BSHD,
            role: GPE_ROPE_QUERY,
            position_ids: std::ptr::null(),
            offsets: std::ptr::null(),
            cu_seqlens: std::ptr::null(),
        }
    }
}
impl gpe_alibi_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), form: GPE_ALIBI_CAUSAL, num_heads: 0, slopes: std::ptr::null() }
    }
}
impl gpe_t5_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), bidirectional: 1, num_heads: 0, num_buckets: 32, max_distance: 128, table: std::ptr::null() }
    }
}
impl gpe_fox_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), length: 0, num_heads: 0, first_position: 0, gate_logits: std::ptr::null() }
    }
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
impl gpe_attention_options {
    pub fn init() -> Self {
        Self {
            struct_size: struct_size!(Self),
            causal: 0,
            softmax_scale: 0.0,
            num_threads: 0,
            rope_dim: 0,
            rope_base: 10000.0,
            rope_pairing: GPE_PAIRING_HALF_SPLIT,
            grape_m: std::ptr::null(),
            algebraic: std::ptr::null(),
            bias: std::ptr::null(),
            q_positions: std::ptr::null(),
            k_positions: std::ptr::null(),
            cu_seqlens_q: std::ptr::null(),
            cu_seqlens_k: std::ptr::null(),
            rope_axes: 0,
            rope_sections_interleaved: 0,
            rope_sections: std::ptr::null(),
            algebraic_tree: std::ptr::null(),
            algebraic_grid: std::ptr::null(),
            q_axes: std::ptr::null(),
            k_axes: std::ptr::null(),
            q_tree_offsets: std::ptr::null(),
            q_tree_children: std::ptr::null(),
            k_tree_offsets: std::ptr::null(),
            k_tree_children: std::ptr::null(),
            shaw_max_distance: 0,
            shaw_key_table: std::ptr::null(),
            shaw_value_table: std::ptr::null(),
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

    pub fn gpe_attention_forward(
        options: *const gpe_attention_options,
        q: *const DLTensor,
        k: *const DLTensor,
        v: *const DLTensor,
        o: *mut DLTensor,
        lse: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_attention_backward(
        options: *const gpe_attention_options,
        q: *const DLTensor,
        k: *const DLTensor,
        v: *const DLTensor,
        o: *const DLTensor,
        lse: *const DLTensor,
        d_o: *const DLTensor,
        dq: *mut DLTensor,
        dk: *mut DLTensor,
        dv: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_attention_backward_v2(
        options: *const gpe_attention_options,
        q: *const DLTensor,
        k: *const DLTensor,
        v: *const DLTensor,
        o: *const DLTensor,
        lse: *const DLTensor,
        d_o: *const DLTensor,
        dq: *mut DLTensor,
        dk: *mut DLTensor,
        dv: *mut DLTensor,
        d_shaw_key_table: *mut DLTensor,
        d_shaw_value_table: *mut DLTensor,
    ) -> gpe_status;
}

// ---- Coordinate encoders, graph encodings, embedder analysis, INR fits (0.4.0) ----

#[repr(C)]
pub struct gpe_coordinate_encoder {
    _private: [u8; 0],
}

pub const GPE_FOURIER_GAUSSIAN: i32 = 0;
pub const GPE_FOURIER_LINEAR: i32 = 1;
pub const GPE_FOURIER_LOG_LINEAR: i32 = 2;
pub const GPE_FOURIER_NERF: i32 = 3;
pub const GPE_FOURIER_TXT: i32 = 4;
pub const GPE_FREQUENCY_TWO_PI: i32 = 0;
pub const GPE_FREQUENCY_ANGULAR: i32 = 1;
pub const GPE_SHIFTED_SIMPLE: i32 = 0;
pub const GPE_SHIFTED_COMPLEX: i32 = 1;
pub const GPE_LAPLACIAN_COMBINATORIAL: i32 = 0;
pub const GPE_LAPLACIAN_SYMMETRIC: i32 = 1;
pub const GPE_EMBEDDER_GAUSSIAN: i32 = 0;
pub const GPE_EMBEDDER_RECTANGLE: i32 = 1;
pub const GPE_EMBEDDER_TRIANGLE: i32 = 2;
pub const GPE_EMBEDDER_RFF: i32 = 3;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_fourier_features_options {
    pub struct_size: u32,
    pub kind: i32,
    pub dim: i64,
    pub num_frequencies: i64,
    pub scale: f64,
    pub convention: i32,
    pub seed: u64,
}
impl gpe_fourier_features_options {
    pub fn init() -> Self {
        Self {
            struct_size: struct_size!(Self),
            kind: GPE_FOURIER_GAUSSIAN,
            dim: 2,
            num_frequencies: 16,
            scale: 1.0,
            convention: GPE_FREQUENCY_TWO_PI,
            seed: 0,
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_so2_bessel_options {
    pub struct_size: u32,
    pub polar: i32,
    pub num_terms: i64,
    pub max_scale: f64,
    pub max_k: i32,
    pub order_m: i32,
    pub seed: u64,
}
impl gpe_so2_bessel_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), polar: 0, num_terms: 16, max_scale: 1.0, max_k: 2, order_m: 0, seed: 0 }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_laplacian_options {
    pub struct_size: u32,
    pub kind: i32,
    pub skip_first: i32,
}
impl gpe_laplacian_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), kind: GPE_LAPLACIAN_COMBINATORIAL, skip_first: 0 }
    }
}

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
    pub fn gpe_coordinate_encoder_destroy(encoder: *mut gpe_coordinate_encoder);
    pub fn gpe_coordinate_encoder_dims(encoder: *const gpe_coordinate_encoder, input_dim: *mut i64, output_dim: *mut i64) -> gpe_status;
    pub fn gpe_coordinate_encode(encoder: *const gpe_coordinate_encoder, points: *const DLTensor, features: *mut DLTensor) -> gpe_status;
    pub fn gpe_coordinate_backward(
        encoder: *const gpe_coordinate_encoder,
        points: *const DLTensor,
        grad_features: *const DLTensor,
        grad_points: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_fourier_features_create(options: *const gpe_fourier_features_options, out: *mut *mut gpe_coordinate_encoder) -> gpe_status;
    pub fn gpe_fourier_features_create_from_frequencies(
        frequencies: *const DLTensor,
        convention: i32,
        out: *mut *mut gpe_coordinate_encoder,
    ) -> gpe_status;
    pub fn gpe_fourier_features_angular_frequencies(encoder: *const gpe_coordinate_encoder, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_so2_bessel_create_sampled(options: *const gpe_so2_bessel_options, out: *mut *mut gpe_coordinate_encoder) -> gpe_status;
    pub fn gpe_so2_bessel_create(
        orders: *const DLTensor,
        scales: *const DLTensor,
        weights: *const DLTensor,
        polar: i32,
        out: *mut *mut gpe_coordinate_encoder,
    ) -> gpe_status;
    pub fn gpe_so2_bessel_terms(
        encoder: *const gpe_coordinate_encoder,
        orders: *mut DLTensor,
        scales: *mut DLTensor,
        weights: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_bessel_j(order: i32, x: *const DLTensor, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_shifted_encoder_create(
        form: i32,
        axes: *const gpe_shifted_basis_options,
        num_axes: i64,
        out: *mut *mut gpe_coordinate_encoder,
    ) -> gpe_status;
    pub fn gpe_spherical_harmonics_create(max_degree: i32, out: *mut *mut gpe_coordinate_encoder) -> gpe_status;
    pub fn gpe_laplacian_eigenvectors(
        options: *const gpe_laplacian_options,
        num_nodes: i64,
        edges: *const DLTensor,
        weights: *const DLTensor,
        eigenvalues: *mut DLTensor,
        eigenvectors: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_embedded_distance_matrix(features: *const DLTensor, sample_spacing: f64, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_embedder_stable_rank(embedder: i32, parameter: f64, num_points: i64, out: *mut f64) -> gpe_status;
    pub fn gpe_embedder_distance(embedder: i32, parameter: f64, delta: f64, out: *mut f64) -> gpe_status;
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

// ---- Algebraic trees, grids, periodic domains, locality; Shaw values, Transformer-XL;
// ---- GRAPE-A; published RoPE schedules (0.4.0) ----

#[repr(C)]
pub struct gpe_algebraic_tree {
    _private: [u8; 0],
}
#[repr(C)]
pub struct gpe_algebraic_grid {
    _private: [u8; 0],
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_algebraic_tree_options {
    pub struct_size: u32,
    pub dim: i64,
    pub num_branches: i64,
    pub skews: *const f64,
}
impl gpe_algebraic_tree_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), dim: 0, num_branches: 2, skews: std::ptr::null() }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_algebraic_grid_options {
    pub struct_size: u32,
    pub num_axes: i64,
    pub dims: *const i64,
    pub skews: *const f64,
}
impl gpe_algebraic_grid_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), num_axes: 2, dims: std::ptr::null(), skews: std::ptr::null() }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_algebraic_periodic_options {
    pub struct_size: u32,
    pub dim: i64,
    pub period: i64,
    pub multipliers: *const i64,
}
impl gpe_algebraic_periodic_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), dim: 0, period: 1, multipliers: std::ptr::null() }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_transformer_xl_options {
    pub struct_size: u32,
    pub base: f64,
}
impl gpe_transformer_xl_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), base: 10000.0 }
    }
}

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
    pub fn gpe_algebraic_tree_create(options: *const gpe_algebraic_tree_options, out: *mut *mut gpe_algebraic_tree) -> gpe_status;
    pub fn gpe_algebraic_tree_destroy(tree: *mut gpe_algebraic_tree);
    pub fn gpe_algebraic_tree_shape(tree: *const gpe_algebraic_tree, dim: *mut i64, num_branches: *mut i64) -> gpe_status;
    pub fn gpe_algebraic_tree_apply(tree: *const gpe_algebraic_tree, addresses: *const DLTensor, x: *const DLTensor, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_algebraic_tree_matrix(tree: *const gpe_algebraic_tree, address: *const i64, depth: i64, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_algebraic_tree_node_matrices(tree: *const gpe_algebraic_tree, max_depth: i64, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_algebraic_tree_backward(
        tree: *const gpe_algebraic_tree,
        addresses: *const DLTensor,
        x: *const DLTensor,
        grad_out: *const DLTensor,
        grad_x: *mut DLTensor,
        grad_skews: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_algebraic_grid_create(options: *const gpe_algebraic_grid_options, out: *mut *mut gpe_algebraic_grid) -> gpe_status;
    pub fn gpe_algebraic_grid_destroy(grid: *mut gpe_algebraic_grid);
    pub fn gpe_algebraic_grid_shape(grid: *const gpe_algebraic_grid, dim: *mut i64, num_axes: *mut i64) -> gpe_status;
    pub fn gpe_algebraic_grid_apply(grid: *const gpe_algebraic_grid, positions: *const DLTensor, x: *const DLTensor, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_algebraic_grid_backward(
        grid: *const gpe_algebraic_grid,
        positions: *const DLTensor,
        x: *const DLTensor,
        grad_out: *const DLTensor,
        grad_x: *mut DLTensor,
        grad_skews: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_algebraic_periodic_apply(
        options: *const gpe_algebraic_periodic_options,
        positions: *const DLTensor,
        x: *const DLTensor,
        out: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_locality_scale(c: f64, q_positions: *const DLTensor, k_positions: *const DLTensor, scores: *mut DLTensor) -> gpe_status;
    pub fn gpe_shaw_value_output(
        probabilities: *const DLTensor,
        label_table: *const DLTensor,
        query_positions: *const DLTensor,
        key_positions: *const DLTensor,
        out: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_shaw_value_output_backward(
        probabilities: *const DLTensor,
        label_table: *const DLTensor,
        query_positions: *const DLTensor,
        key_positions: *const DLTensor,
        grad_out: *const DLTensor,
        grad_probabilities: *mut DLTensor,
        grad_label_table: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_transformer_xl_score_terms(
        options: *const gpe_transformer_xl_options,
        q: *const DLTensor,
        k: *const DLTensor,
        query_positions: *const DLTensor,
        key_positions: *const DLTensor,
        w_r: *const DLTensor,
        u: *const DLTensor,
        v: *const DLTensor,
        terms: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_transformer_xl_score_terms_backward(
        options: *const gpe_transformer_xl_options,
        q: *const DLTensor,
        k: *const DLTensor,
        query_positions: *const DLTensor,
        key_positions: *const DLTensor,
        w_r: *const DLTensor,
        u: *const DLTensor,
        v: *const DLTensor,
        grad_terms: *const DLTensor,
        grad_q: *mut DLTensor,
        grad_k: *mut DLTensor,
        grad_w_r: *mut DLTensor,
        grad_u: *mut DLTensor,
        grad_v: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_bias_create_grape_a(options: *const gpe_grape_a_options, out: *mut *mut gpe_bias) -> gpe_status;
    pub fn gpe_bias_grape_a_lift(
        bias: *const gpe_bias,
        head: i64,
        role: i32,
        positions: *const DLTensor,
        x: *const DLTensor,
        out: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_rope_options_use_schedule(schedule: i32, options: *mut gpe_rope_options) -> gpe_status;
}

// ---- Attention's parameter gradients (0.4.0) ----

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_attention_param_grads {
    pub struct_size: u32,
    pub d_bias_a: *mut DLTensor,
    pub d_bias_b: *mut DLTensor,
    pub d_grape_a: *mut DLTensor,
    pub d_grape_b: *mut DLTensor,
    pub d_grape_omega: *mut DLTensor,
    pub d_shaw_key_table: *mut DLTensor,
    pub d_shaw_value_table: *mut DLTensor,
}
impl gpe_attention_param_grads {
    pub fn init() -> Self {
        let null = std::ptr::null_mut();
        Self {
            struct_size: struct_size!(Self),
            d_bias_a: null,
            d_bias_b: null,
            d_grape_a: null,
            d_grape_b: null,
            d_grape_omega: null,
            d_shaw_key_table: null,
            d_shaw_value_table: null,
        }
    }
}

extern "C" {
    pub fn gpe_attention_backward_with_parameters(
        options: *const gpe_attention_options,
        q: *const DLTensor,
        k: *const DLTensor,
        v: *const DLTensor,
        o: *const DLTensor,
        lse: *const DLTensor,
        d_o: *const DLTensor,
        dq: *mut DLTensor,
        dk: *mut DLTensor,
        dv: *mut DLTensor,
        grads: *const gpe_attention_param_grads,
    ) -> gpe_status;
}

// ---- INR training, data and metrics (since 0.5.0) ----------------------------------

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

pub const GPE_SYNTHETIC_RADIAL: i32 = 0;
pub const GPE_SYNTHETIC_SPIRAL: i32 = 1;

#[repr(C)]
pub struct gpe_image {
    _opaque: [u8; 0],
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
    pub fn gpe_image_read(path: *const c_char, grayscale: i32, out: *mut *mut gpe_image) -> gpe_status;
    pub fn gpe_image_destroy(image: *mut gpe_image);
    pub fn gpe_image_shape(image: *const gpe_image, rows: *mut i64, cols: *mut i64, channels: *mut i64) -> gpe_status;
    pub fn gpe_image_pixels(image: *const gpe_image, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_image_write_png(path: *const c_char, pixels: *const DLTensor, lo: f64, hi: f64) -> gpe_status;
    pub fn gpe_image_write_jpeg(path: *const c_char, pixels: *const DLTensor, quality: i32, lo: f64, hi: f64) -> gpe_status;
}
