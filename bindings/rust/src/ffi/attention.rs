//! gpe/attention.h (since 0.3.0): multi-head attention with the positional encoding
//! inside the kernel: gpe_attention_options (the encodings of ffi/sequence.rs,
//! ffi/algebraic.rs and ffi/bias.rs, structured positions, Shaw tables), forward, and
//! the backward passes with (0.4.0) the encoding's parameter gradients
//! (gpe_attention_param_grads); (0.9.0) gpe_rope handles, sliding windows, the logit
//! softcap and sinks.

use super::{gpe_algebraic_sequence, gpe_bias, gpe_grape_m, gpe_rope, gpe_status, DLTensor, GPE_PAIRING_HALF_SPLIT};

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
    // 0.9.0: a RoPE handle, the sliding window, the softcap, the sinks (zero / null: none).
    pub rope: *const gpe_rope,
    pub window: i32,
    pub window_left: i64,
    pub window_right: i64,
    pub softcap: f64,
    pub sinks: *const DLTensor,
    // 0.9.0, after sinks: the score mask, KV lengths, a paged cache's block table.
    pub attn_mask: *const DLTensor,
    pub kv_lengths: *const DLTensor,
    pub block_table: *const DLTensor,
    /// Since 0.10.0: the cudaStream_t of a call on CUDA tensors (the crate passes host
    /// slices only: null).
    pub cuda_stream: *mut std::ffi::c_void,
    /// Since 0.10.0, after cuda_stream: the CPU kernels' arithmetic (GPE_BF16_ARITHMETIC_*,
    /// GPE_FLOAT32_ARITHMETIC_*; 0: AUTO / EXACT).
    pub bf16_arithmetic: i32,
    pub float32_arithmetic: i32,
}
pub const GPE_BF16_ARITHMETIC_AUTO: i32 = 0;
pub const GPE_BF16_ARITHMETIC_DOT_PRODUCTS: i32 = 1;
pub const GPE_BF16_ARITHMETIC_WIDEN: i32 = 2;
pub const GPE_BF16_ARITHMETIC_AMX_TILES: i32 = 3;
pub const GPE_FLOAT32_ARITHMETIC_EXACT: i32 = 0;
pub const GPE_FLOAT32_ARITHMETIC_SPLIT_BF16X6: i32 = 1;
pub const GPE_FLOAT32_ARITHMETIC_SPLIT_BF16X3: i32 = 2;
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
            rope: std::ptr::null(),
            window: 0,
            window_left: -1,
            window_right: -1,
            softcap: 0.0,
            sinks: std::ptr::null(),
            attn_mask: std::ptr::null(),
            kv_lengths: std::ptr::null(),
            block_table: std::ptr::null(),
            cuda_stream: std::ptr::null_mut(),
            bf16_arithmetic: GPE_BF16_ARITHMETIC_AUTO,
            float32_arithmetic: GPE_FLOAT32_ARITHMETIC_EXACT,
        }
    }
}

extern "C" {
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
    // 0.9.0: dL/dsinks.
    pub d_sinks: *mut DLTensor,
    // 0.10.0: dL/dS of the algebraic encodings' skew generators.
    pub d_algebraic: *mut DLTensor,
    pub d_algebraic_tree: *mut DLTensor,
    pub d_algebraic_grid: *mut DLTensor,
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
            d_sinks: null,
            d_algebraic: null,
            d_algebraic_tree: null,
            d_algebraic_grid: null,
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
