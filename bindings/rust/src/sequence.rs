//! Sequence encodings added in the 0.4.0 ABI: Kogkalidis et al.'s algebraic encodings of
//! trees, grids and periodic domains and their locality scaling ("Algebraic Positional
//! Encodings"), Shaw et al.'s relative value terms and Transformer-XL's relative score
//! terms.
//!
//! Batches are `[n, dim]` row-major slices (float32 or float64, arithmetic in double);
//! parameter gradients are float64, overwritten, summed over the batch.
use crate::{check, checked_count, expect_len, f64_tensor, f64_tensor_mut, ffi, i64_tensor, invalid, matrix_tensor, matrix_tensor_mut, real_tensor, real_tensor_mut, to_i64, Matrix, Real, Result};
use std::ptr;

fn batch_rows(name: &str, len: usize, dim: usize) -> Result<usize> {
    if dim == 0 || len % dim != 0 {
        return Err(invalid(format!("{} has {} values: not a whole number of rows of {}", name, len, dim)));
    }
    Ok(len / dim)
}

/// Tree addresses as the C API takes them: int64 [N, L], each row's child indices then
/// -1 padding (L = the deepest address, at least 1).
fn address_table(addresses: &[&[i64]]) -> (Vec<i64>, [i64; 2]) {
    let depth = addresses.iter().map(|a| a.len()).max().unwrap_or(0).max(1);
    let mut flat = vec![-1i64; addresses.len() * depth];
    for (n, a) in addresses.iter().enumerate() {
        flat[n * depth..n * depth + a.len()].copy_from_slice(a);
    }
    (flat, [addresses.len() as i64, depth as i64])
}

/// Kogkalidis et al. sec. 3.2: branch c of a k-ary tree acts by W_c = exp(S_c); the node
/// at address (c_1, ..., c_m) by W_{c_1} ... W_{c_m}.
pub struct AlgebraicTree {
    raw: *mut ffi::gpe_algebraic_tree,
    dim: usize,
    num_branches: usize,
}
// SAFETY: immutable after creation (gpe.h, thread safety).
unsafe impl Send for AlgebraicTree {}
unsafe impl Sync for AlgebraicTree {}

impl AlgebraicTree {
    /// skews: num_branches skew-symmetric [dim, dim] matrices.
    pub fn new(skews: &[Matrix]) -> Result<AlgebraicTree> {
        let dim = skews.first().map_or(0, |s| s.rows);
        let d2 = checked_count("skews[0]", &[dim, dim])?;
        let mut flat = Vec::new();
        for (c, s) in skews.iter().enumerate() {
            if s.rows != dim || s.cols != dim || s.data.len() != d2 {
                return Err(invalid(format!("skews[{}] is {} x {}; expected {} x {}", c, s.rows, s.cols, dim, dim)));
            }
            flat.extend_from_slice(&s.data);
        }
        let mut o = ffi::gpe_algebraic_tree_options::init();
        o.dim = to_i64(dim, "skews' dim")?;
        o.num_branches = skews.len() as i64; // a slice's length: fits
        o.skews = if flat.is_empty() { ptr::null() } else { flat.as_ptr() };
        let mut raw = ptr::null_mut();
        // SAFETY: flat holds num_branches * dim * dim values.
        check(unsafe { ffi::gpe_algebraic_tree_create(&o, &mut raw) })?;
        Ok(AlgebraicTree { raw, dim, num_branches: skews.len() })
    }

    /// (dim, num_branches).
    pub fn shape(&self) -> (usize, usize) {
        (self.dim, self.num_branches)
    }

    /// Row n of x [N, dim] moved by rho(addresses[n]).
    pub fn apply<T: Real>(&self, addresses: &[&[i64]], x: &[T]) -> Result<Vec<T>> {
        expect_len("x", x.len(), addresses.len() * self.dim)?;
        let (flat, mut ashape) = address_table(addresses);
        let mut out = vec![T::default(); x.len()];
        let (mut xs, mut os) = ([addresses.len() as i64, self.dim as i64], [addresses.len() as i64, self.dim as i64]);
        let ta = i64_tensor(&flat, &mut ashape);
        let tx = real_tensor(x, &mut xs);
        let mut to = real_tensor_mut(&mut out, &mut os);
        // SAFETY: every buffer matches its shape.
        check(unsafe { ffi::gpe_algebraic_tree_apply(self.raw, &ta, &tx, &mut to) })?;
        Ok(out)
    }

    /// rho(address) [dim, dim].
    pub fn matrix(&self, address: &[i64]) -> Result<Matrix> {
        let mut m = Matrix::zeros(self.dim, self.dim);
        let mut s = [0i64; 2];
        let mut t = matrix_tensor_mut(&mut m, &mut s)?;
        let a = if address.is_empty() { ptr::null() } else { address.as_ptr() };
        // SAFETY: address holds depth entries; m is [dim, dim].
        check(unsafe { ffi::gpe_algebraic_tree_matrix(self.raw, a, address.len() as i64, &mut t) })?;
        Ok(m)
    }

    /// (grad_x [N, dim] = rho^T grad_out, dL/dS_c for each branch) of apply.
    pub fn backward(&self, addresses: &[&[i64]], x: &[f64], grad_out: &[f64]) -> Result<(Vec<f64>, Vec<Matrix>)> {
        let n = addresses.len();
        expect_len("x", x.len(), n * self.dim)?;
        expect_len("grad_out", grad_out.len(), n * self.dim)?;
        let (flat, mut ashape) = address_table(addresses);
        let mut gx = vec![0.0; x.len()];
        let mut gs = vec![0.0; self.num_branches * self.dim * self.dim];
        let b = [n as i64, self.dim as i64];
        let (mut xs, mut gos, mut gxs) = (b, b, b);
        let mut gss = [self.num_branches as i64, self.dim as i64, self.dim as i64];
        let ta = i64_tensor(&flat, &mut ashape);
        let tx = f64_tensor(x, &mut xs);
        let tg = f64_tensor(grad_out, &mut gos);
        let mut tgx = f64_tensor_mut(&mut gx, &mut gxs);
        let mut tgs = f64_tensor_mut(&mut gs, &mut gss);
        // SAFETY: every buffer matches its shape.
        check(unsafe { ffi::gpe_algebraic_tree_backward(self.raw, &ta, &tx, &tg, &mut tgx, &mut tgs) })?;
        let d2 = self.dim * self.dim;
        let skews = (0..self.num_branches).map(|c| Matrix { rows: self.dim, cols: self.dim, data: gs[c * d2..(c + 1) * d2].to_vec() }).collect();
        Ok((gx, skews))
    }
}

impl Drop for AlgebraicTree {
    fn drop(&mut self) {
        // SAFETY: created by the library, destroyed once.
        unsafe { ffi::gpe_algebraic_tree_destroy(self.raw) }
    }
}

/// Kogkalidis et al. sec. 3.3: a grid point (p_1, ..., p_A) acts by
/// blockdiag(exp(p_1 S_1), ..., exp(p_A S_A)) on dim = sum d_a coordinates.
pub struct AlgebraicGrid {
    raw: *mut ffi::gpe_algebraic_grid,
    dims: Vec<usize>,
    dim: usize,
}
// SAFETY: immutable after creation (gpe.h, thread safety).
unsafe impl Send for AlgebraicGrid {}
unsafe impl Sync for AlgebraicGrid {}

impl AlgebraicGrid {
    /// skews: one skew-symmetric [d_a, d_a] matrix per axis.
    pub fn new(skews: &[Matrix]) -> Result<AlgebraicGrid> {
        let mut dims: Vec<i64> = Vec::with_capacity(skews.len());
        let mut flat = Vec::new();
        for (a, s) in skews.iter().enumerate() {
            if s.cols != s.rows || s.data.len() != checked_count("skews", &[s.rows, s.cols])? {
                return Err(invalid(format!("skews[{}] is {} x {}: not square", a, s.rows, s.cols)));
            }
            dims.push(s.rows as i64); // checked_count: fits int64_t
            flat.extend_from_slice(&s.data);
        }
        let mut o = ffi::gpe_algebraic_grid_options::init();
        o.num_axes = skews.len() as i64;
        o.dims = if dims.is_empty() { ptr::null() } else { dims.as_ptr() };
        o.skews = if flat.is_empty() { ptr::null() } else { flat.as_ptr() };
        let mut raw = ptr::null_mut();
        // SAFETY: dims holds num_axes sizes and flat sum d_a^2 values.
        check(unsafe { ffi::gpe_algebraic_grid_create(&o, &mut raw) })?;
        let dims: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
        let dim = dims.iter().sum();
        Ok(AlgebraicGrid { raw, dims, dim })
    }

    /// (dim = sum d_a, num_axes).
    pub fn shape(&self) -> (usize, usize) {
        (self.dim, self.dims.len())
    }

    /// Row n of x [N, dim] moved by rho(positions[n]); positions [N, num_axes] row-major.
    pub fn apply<T: Real>(&self, positions: &[i64], x: &[T]) -> Result<Vec<T>> {
        let n = batch_rows("x", x.len(), self.dim)?;
        expect_len("positions", positions.len(), n * self.dims.len())?;
        let mut out = vec![T::default(); x.len()];
        let (mut ps, mut xs, mut os) = ([n as i64, self.dims.len() as i64], [n as i64, self.dim as i64], [n as i64, self.dim as i64]);
        let tp = i64_tensor(positions, &mut ps);
        let tx = real_tensor(x, &mut xs);
        let mut to = real_tensor_mut(&mut out, &mut os);
        // SAFETY: every buffer matches its shape.
        check(unsafe { ffi::gpe_algebraic_grid_apply(self.raw, &tp, &tx, &mut to) })?;
        Ok(out)
    }

    /// (grad_x [N, dim], dL/dS_a for each axis) of apply.
    pub fn backward(&self, positions: &[i64], x: &[f64], grad_out: &[f64]) -> Result<(Vec<f64>, Vec<Matrix>)> {
        let n = batch_rows("x", x.len(), self.dim)?;
        expect_len("positions", positions.len(), n * self.dims.len())?;
        expect_len("grad_out", grad_out.len(), x.len())?;
        let total: usize = self.dims.iter().map(|d| d * d).sum();
        let mut gx = vec![0.0; x.len()];
        let mut gs = vec![0.0; total];
        let b = [n as i64, self.dim as i64];
        let (mut ps, mut xs, mut gos, mut gxs, mut gss) = ([n as i64, self.dims.len() as i64], b, b, b, [total as i64]);
        let tp = i64_tensor(positions, &mut ps);
        let tx = f64_tensor(x, &mut xs);
        let tg = f64_tensor(grad_out, &mut gos);
        let mut tgx = f64_tensor_mut(&mut gx, &mut gxs);
        let mut tgs = f64_tensor_mut(&mut gs, &mut gss);
        // SAFETY: every buffer matches its shape.
        check(unsafe { ffi::gpe_algebraic_grid_backward(self.raw, &tp, &tx, &tg, &mut tgx, &mut tgs) })?;
        let mut skews = Vec::new();
        let mut at = 0;
        for &d in &self.dims {
            skews.push(Matrix { rows: d, cols: d, data: gs[at..at + d * d].to_vec() });
            at += d * d;
        }
        Ok((gx, skews))
    }
}

impl Drop for AlgebraicGrid {
    fn drop(&mut self) {
        // SAFETY: created by the library, destroyed once.
        unsafe { ffi::gpe_algebraic_grid_destroy(self.raw) }
    }
}

/// Kogkalidis et al. sec. 3.4.2: plane i of x [N, dim] rotates by
/// 2 pi multipliers[i] p / period (dim = 2 multipliers.len()). The backward pass is
/// this at -p.
pub fn algebraic_periodic_apply<T: Real>(period: i64, multipliers: &[i64], positions: &[i64], x: &[T]) -> Result<Vec<T>> {
    let dim = 2 * multipliers.len(); // a slice of i64 has at most isize::MAX / 8 values: no overflow
    expect_len("x", x.len(), positions.len() * dim)?;
    let mut o = ffi::gpe_algebraic_periodic_options::init();
    o.dim = dim as i64;
    o.period = period;
    o.multipliers = if multipliers.is_empty() { ptr::null() } else { multipliers.as_ptr() };
    let mut out = vec![T::default(); x.len()];
    let (mut ps, mut xs, mut os) = ([positions.len() as i64], [positions.len() as i64, dim as i64], [positions.len() as i64, dim as i64]);
    let tp = i64_tensor(positions, &mut ps);
    let tx = real_tensor(x, &mut xs);
    let mut to = real_tensor_mut(&mut out, &mut os);
    // SAFETY: every buffer matches its shape; multipliers holds dim / 2 values.
    check(unsafe { ffi::gpe_algebraic_periodic_apply(&o, &tp, &tx, &mut to) })?;
    Ok(out)
}

/// Kogkalidis et al. sec. 4: scores[r, c] *= c^|q_positions[r] - k_positions[c]| in place
/// (also the backward pass, applied to dL/dscores).
pub fn locality_scale(c: f64, q_positions: &[i64], k_positions: &[i64], scores: &mut Matrix) -> Result<()> {
    let (mut qs, mut ks, mut ss) = ([q_positions.len() as i64], [k_positions.len() as i64], [0i64; 2]);
    let tq = i64_tensor(q_positions, &mut qs);
    let tk = i64_tensor(k_positions, &mut ks);
    let mut ts = matrix_tensor_mut(scores, &mut ss)?;
    // SAFETY: every buffer matches its shape.
    check(unsafe { ffi::gpe_locality_scale(c, &tq, &tk, &mut ts) })
}

/// Shaw et al. eq. 3: out[a, :] = sum_b probabilities[a, b] label_table[clip(kp[b] - qp[a],
/// -k, k) + k, :], label_table [2k + 1, dv]; out [Lq, dv].
pub fn shaw_value_output(probabilities: &Matrix, label_table: &Matrix, query_positions: &[i64], key_positions: &[i64]) -> Result<Matrix> {
    let mut out = Matrix::zeros_for("output", probabilities.rows, label_table.cols)?;
    let (mut ps, mut ls, mut qs, mut ks, mut os) = ([0i64; 2], [0i64; 2], [query_positions.len() as i64], [key_positions.len() as i64], [0i64; 2]);
    let tp = matrix_tensor(probabilities, &mut ps)?;
    let tl = matrix_tensor(label_table, &mut ls)?;
    let tq = i64_tensor(query_positions, &mut qs);
    let tk = i64_tensor(key_positions, &mut ks);
    let mut to = matrix_tensor_mut(&mut out, &mut os)?;
    // SAFETY: every buffer matches its shape.
    check(unsafe { ffi::gpe_shaw_value_output(&tp, &tl, &tq, &tk, &mut to) })?;
    Ok(out)
}

/// (dL/dprobabilities [Lq, Lk], dL/dlabel_table [2k + 1, dv]) of `shaw_value_output`.
pub fn shaw_value_output_backward(
    probabilities: &Matrix,
    label_table: &Matrix,
    query_positions: &[i64],
    key_positions: &[i64],
    grad_out: &Matrix,
) -> Result<(Matrix, Matrix)> {
    let mut gp = Matrix::zeros_for("output", probabilities.rows, probabilities.cols)?;
    // The library adds into grad_label_table: start from zero.
    let mut gl = Matrix::zeros_for("output", label_table.rows, label_table.cols)?;
    let (mut ps, mut ls, mut qs, mut ks) = ([0i64; 2], [0i64; 2], [query_positions.len() as i64], [key_positions.len() as i64]);
    let (mut gos, mut gps, mut gls) = ([0i64; 2], [0i64; 2], [0i64; 2]);
    let tp = matrix_tensor(probabilities, &mut ps)?;
    let tl = matrix_tensor(label_table, &mut ls)?;
    let tq = i64_tensor(query_positions, &mut qs);
    let tk = i64_tensor(key_positions, &mut ks);
    let tgo = matrix_tensor(grad_out, &mut gos)?;
    let mut tgp = matrix_tensor_mut(&mut gp, &mut gps)?;
    let mut tgl = matrix_tensor_mut(&mut gl, &mut gls)?;
    // SAFETY: every buffer matches its shape.
    check(unsafe { ffi::gpe_shaw_value_output_backward(&tp, &tl, &tq, &tk, &tgo, &mut tgp, &mut tgl) })?;
    Ok((gp, gl))
}

/// The inputs of Transformer-XL's relative terms (Dai et al., sec. 3.3): q [Lq, d],
/// k [Lk, d], w_r [d, d_r], u and v [d]; R_t is the sinusoidal encoding (base `base`).
#[derive(Clone, Debug)]
pub struct TransformerXl<'a> {
    pub base: f64,
    pub q: &'a Matrix,
    pub k: &'a Matrix,
    pub query_positions: &'a [i64],
    pub key_positions: &'a [i64],
    pub w_r: &'a Matrix,
    pub u: &'a [f64],
    pub v: &'a [f64],
}

/// The gradients of `transformer_xl_score_terms` with respect to each input.
#[derive(Clone, Debug)]
pub struct TransformerXlGrads {
    pub q: Matrix,
    pub k: Matrix,
    pub w_r: Matrix,
    pub u: Vec<f64>,
    pub v: Vec<f64>,
}

/// terms[a, b] = q_a^T W_R R_{i_a - j_b} + u^T k_b + v^T W_R R_{i_a - j_b}: [Lq, Lk].
pub fn transformer_xl_score_terms(x: &TransformerXl) -> Result<Matrix> {
    let mut o = ffi::gpe_transformer_xl_options::init();
    o.base = x.base;
    let mut out = Matrix::zeros_for("output", x.q.rows, x.k.rows)?;
    let (mut qs, mut ks, mut ws, mut os) = ([0i64; 2], [0i64; 2], [0i64; 2], [0i64; 2]);
    let (mut qps, mut kps, mut us, mut vs) = ([x.query_positions.len() as i64], [x.key_positions.len() as i64], [x.u.len() as i64], [x.v.len() as i64]);
    let tq = matrix_tensor(x.q, &mut qs)?;
    let tk = matrix_tensor(x.k, &mut ks)?;
    let tw = matrix_tensor(x.w_r, &mut ws)?;
    let (tqp, tkp) = (i64_tensor(x.query_positions, &mut qps), i64_tensor(x.key_positions, &mut kps));
    let (tu, tv) = (f64_tensor(x.u, &mut us), f64_tensor(x.v, &mut vs));
    let mut to = matrix_tensor_mut(&mut out, &mut os)?;
    // SAFETY: every buffer matches its shape.
    check(unsafe { ffi::gpe_transformer_xl_score_terms(&o, &tq, &tk, &tqp, &tkp, &tw, &tu, &tv, &mut to) })?;
    Ok(out)
}

/// Every input's gradient given grad_terms [Lq, Lk].
pub fn transformer_xl_score_terms_backward(x: &TransformerXl, grad_terms: &Matrix) -> Result<TransformerXlGrads> {
    let mut o = ffi::gpe_transformer_xl_options::init();
    o.base = x.base;
    let mut g = TransformerXlGrads {
        q: Matrix::zeros(x.q.rows, x.q.cols),
        k: Matrix::zeros(x.k.rows, x.k.cols),
        w_r: Matrix::zeros(x.w_r.rows, x.w_r.cols),
        u: vec![0.0; x.u.len()],
        v: vec![0.0; x.v.len()],
    };
    let (mut qs, mut ks, mut ws, mut gts) = ([0i64; 2], [0i64; 2], [0i64; 2], [0i64; 2]);
    let (mut qps, mut kps, mut us, mut vs) = ([x.query_positions.len() as i64], [x.key_positions.len() as i64], [x.u.len() as i64], [x.v.len() as i64]);
    let (mut gqs, mut gks, mut gws, mut gus, mut gvs) = ([0i64; 2], [0i64; 2], [0i64; 2], [x.u.len() as i64], [x.v.len() as i64]);
    let tq = matrix_tensor(x.q, &mut qs)?;
    let tk = matrix_tensor(x.k, &mut ks)?;
    let tw = matrix_tensor(x.w_r, &mut ws)?;
    let (tqp, tkp) = (i64_tensor(x.query_positions, &mut qps), i64_tensor(x.key_positions, &mut kps));
    let (tu, tv) = (f64_tensor(x.u, &mut us), f64_tensor(x.v, &mut vs));
    let tgt = matrix_tensor(grad_terms, &mut gts)?;
    let mut tgq = matrix_tensor_mut(&mut g.q, &mut gqs)?;
    let mut tgk = matrix_tensor_mut(&mut g.k, &mut gks)?;
    let mut tgw = matrix_tensor_mut(&mut g.w_r, &mut gws)?;
    let mut tgu = f64_tensor_mut(&mut g.u, &mut gus);
    let mut tgv = f64_tensor_mut(&mut g.v, &mut gvs);
    // SAFETY: every buffer matches its shape.
    check(unsafe {
        ffi::gpe_transformer_xl_score_terms_backward(&o, &tq, &tk, &tqp, &tkp, &tw, &tu, &tv, &tgt, &mut tgq, &mut tgk, &mut tgw, &mut tgu, &mut tgv)
    })?;
    Ok(g)
}
