//! The attention forward pass (gpe_attention_forward): o and the rows' log-sum-exp.

use super::options::{count, shapes, with_options};
use super::{AttentionHeads, AttentionLayout, AttentionOptions};
use crate::{check, expect_len, ffi, real_tensor, real_tensor_mut, tensor, Real, Result};
use std::os::raw::c_void;

/// o = softmax(scale <T(p_i) q_i, T(p_j) k_j> + b(p_i, p_j)) v, and the per-row
/// log-sum-exp lse [tokens_q, heads_q] (-inf for rows with no allowed key). o is shaped
/// like q with rows of `heads.value_dim()`, v's row length. float32 runs the optimised
/// kernels; float64 the exact reference.
pub fn attention_forward<T: Real>(
    options: &AttentionOptions,
    layout: &AttentionLayout,
    heads: &AttentionHeads,
    q: &[T],
    k: &[T],
    v: &[T],
) -> Result<(Vec<T>, Vec<T>)> {
    let mut s = shapes(layout, heads)?;
    expect_len("q", q.len(), count(&s.q))?;
    expect_len("k", k.len(), count(&s.k))?;
    expect_len("v", v.len(), count(&s.v))?;
    let mut o = vec![T::default(); count(&s.o)];
    let mut lse = vec![T::default(); count(&s.lse)];
    let (mut ks, mut vs, mut os) = (s.k.clone(), s.v.clone(), s.o.clone());
    let tq = real_tensor(q, &mut s.q);
    let tk = real_tensor(k, &mut ks);
    let tv = real_tensor(v, &mut vs);
    let mut to = real_tensor_mut(&mut o, &mut os);
    let mut tl = real_tensor_mut(&mut lse, &mut s.lse);
    // SAFETY: every slice holds its shape's values (checked); outputs are fresh vectors.
    with_options(options, layout, |c| check(unsafe { ffi::gpe_attention_forward(c, &tq, &tk, &tv, &mut to, &mut tl) }))?;
    Ok((o, lse))
}

/// The element type of a 16-bit KV cache (k and v as raw 16-bit patterns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvCache {
    /// bfloat16: the top 16 bits of a float32.
    BFloat16,
    /// IEEE 754 binary16.
    Float16,
}

/// `attention_forward` with float32 queries against a 16-bit KV cache (`k`, `v` hold
/// bfloat16 or float16 bit patterns, half the bytes a decoding step reads). The cache is
/// widened exactly to float32 as the kernel reads it, so the result equals the float32
/// call on the widened values up to summation order. Forward only: the backward takes
/// one dtype.
pub fn attention_forward_kv16(
    options: &AttentionOptions,
    layout: &AttentionLayout,
    heads: &AttentionHeads,
    q: &[f32],
    k: &[u16],
    v: &[u16],
    cache: KvCache,
) -> Result<(Vec<f32>, Vec<f32>)> {
    let mut s = shapes(layout, heads)?;
    expect_len("q", q.len(), count(&s.q))?;
    expect_len("k", k.len(), count(&s.k))?;
    expect_len("v", v.len(), count(&s.v))?;
    let mut o = vec![0.0f32; count(&s.o)];
    let mut lse = vec![0.0f32; count(&s.lse)];
    let (mut ks, mut vs, mut os) = (s.k.clone(), s.v.clone(), s.o.clone());
    let code = match cache {
        KvCache::BFloat16 => ffi::KDL_BFLOAT,
        KvCache::Float16 => ffi::KDL_FLOAT,
    };
    let tq = real_tensor(q, &mut s.q);
    let tk = tensor(k.as_ptr() as *const c_void, code, 16, &mut ks);
    let tv = tensor(v.as_ptr() as *const c_void, code, 16, &mut vs);
    let mut to = real_tensor_mut(&mut o, &mut os);
    let mut tl = real_tensor_mut(&mut lse, &mut s.lse);
    // SAFETY: every slice holds its shape's values (checked); outputs are fresh vectors.
    with_options(options, layout, |c| check(unsafe { ffi::gpe_attention_forward(c, &tq, &tk, &tv, &mut to, &mut tl) }))?;
    Ok((o, lse))
}
