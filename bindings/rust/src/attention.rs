//! Since 0.3.0: RoPE with its frequency schedules, the additive attention biases (ALiBi,
//! T5, FoX, GRAPE-AP) and attention with the encoding applied inside the kernel
//! (gpe.h's "RoPE", "Additive attention biases" and "Attention" sections).
//!
//! Tensors are row-major slices with their shape given beside them; the crate checks
//! every slice's length against its shape before calling C, and the library checks the
//! rest (head counts, rotary_dim, positions) and reports a bad value as an `Error`.

// One idea a file, each public item re-exported here (gpe::attention::NAME): rope.rs
// (Rope, its schedules and tables), bias.rs (Bias), options.rs (what an attention call
// is given, and its C form), forward.rs and backward.rs (the passes).
mod backward;
mod bias;
mod forward;
mod options;
mod rope;

pub use backward::{
    attention_backward, attention_backward_v2, attention_backward_with_parameters, AttentionGrads, ParameterGrads, ShawTableGrads,
};
pub use bias::{Bias, BiasKind};
pub use forward::{attention_forward, attention_forward_kv16, KvCache};
pub use options::{
    AttentionHeads, AttentionLayout, AttentionOptions, AttnMask, Bf16Arithmetic, Float32Arithmetic,
    MaskValues,
};
pub use rope::{Axes, Rope, RopeLayout, RopeOptions, RopeTable, Schedule, ScheduleKind, Tokens, Xpos};

use crate::{ffi, Pairing};

fn pairing_code(p: Pairing) -> i32 {
    match p {
        Pairing::Interleaved => ffi::GPE_PAIRING_INTERLEAVED,
        Pairing::HalfSplit => ffi::GPE_PAIRING_HALF_SPLIT,
    }
}
