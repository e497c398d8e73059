//! The attention backward passes: dq, dk and dv (gpe_attention_backward), with the Shaw
//! tables' gradients (gpe_attention_backward_v2) or with every learnable parameter's
//! (gpe_attention_backward_with_parameters), and the gradients' types.

use std::ptr;

use super::options::{count, shapes, with_options, Shapes};
use super::{AttentionHeads, AttentionLayout, AttentionOptions, BiasKind};
use crate::{check, checked_count, expect_len, ffi, real_tensor, real_tensor_mut, Matrix, Real, Result};

/// Gradients of `attention_backward`, shaped like q, k and v (dv's rows of
/// `AttentionHeads::value_dim()`).
pub struct AttentionGrads<T> {
    pub dq: Vec<T>,
    pub dk: Vec<T>,
    pub dv: Vec<T>,
}

// The backward calls' shapes, their inputs' lengths checked, and zeroed dq, dk, dv.
#[allow(clippy::too_many_arguments)]
fn backward_inputs<T: Real>(
    layout: &AttentionLayout,
    heads: &AttentionHeads,
    q: &[T],
    k: &[T],
    v: &[T],
    forward: Option<(&[T], &[T])>,
    d_o: &[T],
) -> Result<(Shapes, AttentionGrads<T>)> {
    let s = shapes(layout, heads)?;
    expect_len("q", q.len(), count(&s.q))?;
    expect_len("k", k.len(), count(&s.k))?;
    expect_len("v", v.len(), count(&s.v))?;
    expect_len("d_o", d_o.len(), count(&s.o))?;
    if let Some((o, lse)) = forward {
        expect_len("o", o.len(), count(&s.o))?;
        expect_len("lse", lse.len(), count(&s.lse))?;
    }
    let g = AttentionGrads { dq: vec![T::default(); q.len()], dk: vec![T::default(); k.len()], dv: vec![T::default(); v.len()] };
    Ok((s, g))
}

/// dq, dk, dv from d_o (shaped like o: q's with rows of `heads.value_dim()`), with
/// respect to q, k and v before the encoding.
/// `forward` is the forward's (o, lse), or None to recompute them.
#[allow(clippy::too_many_arguments)]
pub fn attention_backward<T: Real>(
    options: &AttentionOptions,
    layout: &AttentionLayout,
    heads: &AttentionHeads,
    q: &[T],
    k: &[T],
    v: &[T],
    forward: Option<(&[T], &[T])>,
    d_o: &[T],
) -> Result<AttentionGrads<T>> {
    let (mut s, mut g) = backward_inputs(layout, heads, q, k, v, forward, d_o)?;
    let (mut ks, mut vs, mut os, mut dos) = (s.k.clone(), s.v.clone(), s.o.clone(), s.o.clone());
    let (mut dqs, mut dks, mut dvs) = (s.q.clone(), s.k.clone(), s.v.clone());
    let tq = real_tensor(q, &mut s.q);
    let tk = real_tensor(k, &mut ks);
    let tv = real_tensor(v, &mut vs);
    let tdo = real_tensor(d_o, &mut dos);
    let to = forward.map(|(o, _)| real_tensor(o, &mut os));
    let tl = forward.map(|(_, lse)| real_tensor(lse, &mut s.lse));
    let mut tdq = real_tensor_mut(&mut g.dq, &mut dqs);
    let mut tdk = real_tensor_mut(&mut g.dk, &mut dks);
    let mut tdv = real_tensor_mut(&mut g.dv, &mut dvs);
    let to_ptr = to.as_ref().map_or(ptr::null(), |t| t as *const _);
    let tl_ptr = tl.as_ref().map_or(ptr::null(), |t| t as *const _);
    // SAFETY: every slice holds its shape's values (checked); gradients are fresh vectors.
    with_options(options, layout, |c| {
        check(unsafe { ffi::gpe_attention_backward(c, &tq, &tk, &tv, to_ptr, tl_ptr, &tdo, &mut tdq, &mut tdk, &mut tdv) })
    })?;
    Ok(g)
}

/// The Shaw tables' gradients from `attention_backward_v2`, shaped like the tables the
/// options carry ([2 shaw_max_distance + 1, head_dim] for keys, [2 shaw_max_distance + 1,
/// head_dim_v] for values; None for a table not given).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShawTableGrads {
    pub key_table: Option<Matrix>,
    pub value_table: Option<Matrix>,
}

/// `attention_backward` plus the Shaw tables' gradients (gpe_attention_backward_v2):
/// dq, dk, dv as `attention_backward` gives them, and dL/d(shaw_key_table),
/// dL/d(shaw_value_table) for the tables in `options`.
#[allow(clippy::too_many_arguments)]
pub fn attention_backward_v2<T: Real>(
    options: &AttentionOptions,
    layout: &AttentionLayout,
    heads: &AttentionHeads,
    q: &[T],
    k: &[T],
    v: &[T],
    forward: Option<(&[T], &[T])>,
    d_o: &[T],
) -> Result<(AttentionGrads<T>, ShawTableGrads)> {
    let (mut s, mut g) = backward_inputs(layout, heads, q, k, v, forward, d_o)?;
    let mut tables = ShawTableGrads {
        key_table: options.shaw_key_table.map(zeros_like).transpose()?,
        value_table: options.shaw_value_table.map(zeros_like).transpose()?,
    };
    let (mut ks, mut vs, mut os, mut dos) = (s.k.clone(), s.v.clone(), s.o.clone(), s.o.clone());
    let (mut dqs, mut dks, mut dvs) = (s.q.clone(), s.k.clone(), s.v.clone());
    let tq = real_tensor(q, &mut s.q);
    let tk = real_tensor(k, &mut ks);
    let tv = real_tensor(v, &mut vs);
    let tdo = real_tensor(d_o, &mut dos);
    let to = forward.map(|(o, _)| real_tensor(o, &mut os));
    let tl = forward.map(|(_, lse)| real_tensor(lse, &mut s.lse));
    let mut tdq = real_tensor_mut(&mut g.dq, &mut dqs);
    let mut tdk = real_tensor_mut(&mut g.dk, &mut dks);
    let mut tdv = real_tensor_mut(&mut g.dv, &mut dvs);
    let (mut sks, mut svs) = ([0i64; 2], [0i64; 2]);
    let mut tsk = tables.key_table.as_mut().map(|m| crate::matrix_tensor_mut(m, &mut sks)).transpose()?;
    let mut tsv = tables.value_table.as_mut().map(|m| crate::matrix_tensor_mut(m, &mut svs)).transpose()?;
    let tsk_ptr = tsk.as_mut().map_or(ptr::null_mut(), |t| t as *mut _);
    let tsv_ptr = tsv.as_mut().map_or(ptr::null_mut(), |t| t as *mut _);
    let to_ptr = to.as_ref().map_or(ptr::null(), |t| t as *const _);
    let tl_ptr = tl.as_ref().map_or(ptr::null(), |t| t as *const _);
    // SAFETY: every slice holds its shape's values (checked); gradients are fresh buffers,
    // the tables' shaped like the tables given.
    with_options(options, layout, |c| {
        check(unsafe { ffi::gpe_attention_backward_v2(c, &tq, &tk, &tv, to_ptr, tl_ptr, &tdo, &mut tdq, &mut tdk, &mut tdv, tsk_ptr, tsv_ptr) })
    })?;
    Ok((g, tables))
}

/// The encoding's parameter gradients from `attention_backward_with_parameters` (None
/// where the options carry no such parameter): the bias's (ALiBi and slope-form GRAPE-A
/// dL/dslopes; T5 dL/dtable; FoX and gated GRAPE-A dL/dgate_logits; GRAPE-AP dL/dw in
/// `bias_a`, dL/du in `bias_b`), GRAPE-M's generators (a, b [m, head_dim], omega [m]),
/// the Shaw tables (shaped like the tables: head_dim columns for keys, head_dim_v for
/// values), the sinks ([heads_q]) and (0.10.0) Kogkalidis et
/// al.'s skew generators: dL/dS entrywise and unprojected (for S = A - A^T, dL/dA = X -
/// X^T), summed over q's and k's tokens and heads.
#[derive(Clone, Debug, Default)]
pub struct ParameterGrads {
    pub bias_a: Option<Vec<f64>>,
    pub bias_b: Option<Vec<f64>>,
    pub grape_a: Option<Matrix>,
    pub grape_b: Option<Matrix>,
    pub grape_omega: Option<Vec<f64>>,
    /// Shaw tables' gradients, shaped like the tables given ([2 shaw_max_distance + 1,
    /// head_dim] for keys, [2 shaw_max_distance + 1, head_dim_v] for values).
    pub shaw_key_table: Option<Matrix>,
    pub shaw_value_table: Option<Matrix>,
    /// dL/dsinks, [heads_q], for the sinks given (0.9.0).
    pub sinks: Option<Vec<f64>>,
    /// dL/dS of `algebraic`'s generator, [dim, dim] (0.10.0).
    pub algebraic: Option<Matrix>,
    /// dL/dS_c of `algebraic_tree`'s branch generators, one [head_dim, head_dim] each.
    pub algebraic_tree: Option<Vec<Matrix>>,
    /// dL/dS_a of `algebraic_grid`'s axes, one [m, m] each.
    pub algebraic_grid: Option<Vec<Matrix>>,
}

// A stack of n m x m float64 gradients, [n, m, m] row-major, and its shape.
struct Stack {
    data: Vec<f64>,
    shape: [i64; 3],
}
impl Stack {
    // checked_count: the sizes fit (an Err, not an overflow or a huge allocation).
    fn new(n: usize, m: usize) -> Result<Stack> {
        let len = checked_count("generator stack", &[n, m, m])?;
        Ok(Stack { data: vec![0.0; len], shape: [n as i64, m as i64, m as i64] })
    }
    fn matrices(self) -> Vec<Matrix> {
        let m = self.shape[1] as usize;
        self.data.chunks(m * m).map(|c| Matrix { rows: m, cols: m, data: c.to_vec() }).collect()
    }
}

/// `attention_backward` plus the gradients of the encoding's learnable parameters
/// (gpe_attention_backward_with_parameters), accumulated inside the kernels.
#[allow(clippy::too_many_arguments)]
pub fn attention_backward_with_parameters<T: Real>(
    options: &AttentionOptions,
    layout: &AttentionLayout,
    heads: &AttentionHeads,
    q: &[T],
    k: &[T],
    v: &[T],
    forward: Option<(&[T], &[T])>,
    d_o: &[T],
) -> Result<(AttentionGrads<T>, ParameterGrads)> {
    let (mut s, mut g) = backward_inputs(layout, heads, q, k, v, forward, d_o)?;
    let mut p = ParameterGrads::default();
    // The bias's gradient shapes are those of gpe_bias_accumulate_gradient.
    let mut bias_shape = Vec::new();
    if let Some(b) = options.bias {
        bias_shape = b.grad_shape.clone();
        p.bias_a = Some(vec![0.0; count(&bias_shape)]);
        if b.kind == BiasKind::GrapeAp {
            p.bias_b = Some(vec![0.0; count(&bias_shape)]);
        }
    }
    let mut grape_shape = [0i64; 2];
    if let Some(gm) = options.grape_m {
        let (dim, m) = gm.shape()?;
        grape_shape = [m as i64, dim as i64];
        p.grape_a = Some(Matrix::zeros(m, dim));
        p.grape_b = Some(Matrix::zeros(m, dim));
        p.grape_omega = Some(vec![0.0; m]);
    }
    p.shaw_key_table = options.shaw_key_table.map(zeros_like).transpose()?;
    p.shaw_value_table = options.shaw_value_table.map(zeros_like).transpose()?;
    p.sinks = options.sinks.map(|z| vec![0.0; z.len()]);
    let mut sink_shape = [options.sinks.map_or(0, |z| z.len() as i64)];
    // The algebraic generators' gradients: [dim, dim] for a sequence, [count, m, m] for a
    // tree's branches or a grid's axes.
    let mut alg = match options.algebraic {
        Some(a) => Some(Stack::new(1, a.dim())?),
        None => None,
    };
    let mut alg_shape = [0i64; 2];
    let mut tree = options.algebraic_tree.map(|s| Stack::new(s.len(), s.first().map_or(0, |m| m.rows))).transpose()?;
    let mut grid = options.algebraic_grid.map(|s| Stack::new(s.len(), s.first().map_or(0, |m| m.rows))).transpose()?;
    let (mut ks, mut vs, mut os, mut dos) = (s.k.clone(), s.v.clone(), s.o.clone(), s.o.clone());
    let (mut dqs, mut dks, mut dvs) = (s.q.clone(), s.k.clone(), s.v.clone());
    let (mut bas, mut bbs) = (bias_shape.clone(), bias_shape.clone());
    let (mut gas, mut gbs, mut gos) = (grape_shape, grape_shape, [grape_shape[0]]);
    let tq = real_tensor(q, &mut s.q);
    let tk = real_tensor(k, &mut ks);
    let tv = real_tensor(v, &mut vs);
    let tdo = real_tensor(d_o, &mut dos);
    let to = forward.map(|(o, _)| real_tensor(o, &mut os));
    let tl = forward.map(|(_, lse)| real_tensor(lse, &mut s.lse));
    let mut tdq = real_tensor_mut(&mut g.dq, &mut dqs);
    let mut tdk = real_tensor_mut(&mut g.dk, &mut dks);
    let mut tdv = real_tensor_mut(&mut g.dv, &mut dvs);
    let mut tba = p.bias_a.as_mut().map(|b| crate::f64_tensor_mut(b, &mut bas));
    let mut tbb = p.bias_b.as_mut().map(|b| crate::f64_tensor_mut(b, &mut bbs));
    let mut tga = p.grape_a.as_mut().map(|m| crate::f64_tensor_mut(&mut m.data, &mut gas));
    let mut tgb = p.grape_b.as_mut().map(|m| crate::f64_tensor_mut(&mut m.data, &mut gbs));
    let mut tgo = p.grape_omega.as_mut().map(|w| crate::f64_tensor_mut(w, &mut gos));
    let (mut sks, mut svs) = ([0i64; 2], [0i64; 2]);
    let mut tsk = p.shaw_key_table.as_mut().map(|m| crate::matrix_tensor_mut(m, &mut sks)).transpose()?;
    let mut tsv = p.shaw_value_table.as_mut().map(|m| crate::matrix_tensor_mut(m, &mut svs)).transpose()?;
    let mut tsg = p.sinks.as_mut().map(|z| crate::f64_tensor_mut(z, &mut sink_shape));
    let mut talg = alg.as_mut().map(|a| {
        alg_shape = [a.shape[1], a.shape[2]];
        crate::f64_tensor_mut(&mut a.data, &mut alg_shape)
    });
    let mut ttree = tree.as_mut().map(|t| crate::f64_tensor_mut(&mut t.data, &mut t.shape));
    let mut tgrid = grid.as_mut().map(|t| crate::f64_tensor_mut(&mut t.data, &mut t.shape));
    let mut grads = ffi::gpe_attention_param_grads::init();
    grads.d_bias_a = tba.as_mut().map_or(ptr::null_mut(), |t| t as *mut _);
    grads.d_bias_b = tbb.as_mut().map_or(ptr::null_mut(), |t| t as *mut _);
    grads.d_grape_a = tga.as_mut().map_or(ptr::null_mut(), |t| t as *mut _);
    grads.d_grape_b = tgb.as_mut().map_or(ptr::null_mut(), |t| t as *mut _);
    grads.d_grape_omega = tgo.as_mut().map_or(ptr::null_mut(), |t| t as *mut _);
    grads.d_shaw_key_table = tsk.as_mut().map_or(ptr::null_mut(), |t| t as *mut _);
    grads.d_shaw_value_table = tsv.as_mut().map_or(ptr::null_mut(), |t| t as *mut _);
    grads.d_sinks = tsg.as_mut().map_or(ptr::null_mut(), |t| t as *mut _);
    grads.d_algebraic = talg.as_mut().map_or(ptr::null_mut(), |t| t as *mut _);
    grads.d_algebraic_tree = ttree.as_mut().map_or(ptr::null_mut(), |t| t as *mut _);
    grads.d_algebraic_grid = tgrid.as_mut().map_or(ptr::null_mut(), |t| t as *mut _);
    let to_ptr = to.as_ref().map_or(ptr::null(), |t| t as *const _);
    let tl_ptr = tl.as_ref().map_or(ptr::null(), |t| t as *const _);
    // SAFETY: every slice holds its shape's values (checked); gradients are fresh buffers.
    with_options(options, layout, |c| {
        check(unsafe {
            ffi::gpe_attention_backward_with_parameters(c, &tq, &tk, &tv, to_ptr, tl_ptr, &tdo, &mut tdq, &mut tdk, &mut tdv, &grads)
        })
    })?;
    p.algebraic = alg.map(|a| a.matrices().remove(0));
    p.algebraic_tree = tree.map(Stack::matrices);
    p.algebraic_grid = grid.map(Stack::matrices);
    Ok((g, p))
}

// A zero matrix of t's shape, once t's shape and data agree (the caller's public fields
// checked before anything is sized by them: an Err rather than a panic or a huge
// allocation).
fn zeros_like(t: &Matrix) -> Result<Matrix> {
    expect_len("matrix data", t.data.len(), checked_count("matrix", &[t.rows, t.cols])?)?;
    Ok(Matrix::zeros(t.rows, t.cols))
}
