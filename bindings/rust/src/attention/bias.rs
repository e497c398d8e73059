//! The additive attention biases (gpe.h's "Additive attention biases" section): `Bias`
//! (ALiBi, T5, FoX, GRAPE-AP, GRAPE-A and its lift), filled and differentiated one tile
//! at a time.

use std::ptr;

use crate::{check, checked_count, expect_len, ffi, i64_tensor, invalid, to_i64, Matrix, Result};

/// Which additive bias a `Bias` is (GPE_BIAS_*).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BiasKind {
    Alibi,
    T5,
    Fox,
    GrapeAp,
    /// GRAPE-A (since 0.4.0 of this crate): ALiBi-like or content-gated (FoX's gates).
    GrapeA,
}

/// An additive attention bias b_h(i, j), filled one tile at a time (gpe_bias).
pub struct Bias {
    pub(super) raw: *mut ffi::gpe_bias,
    pub(super) kind: BiasKind,
    num_heads: usize,
    // The shapes of gpe_bias_accumulate_gradient's grad_a (and grad_b for GRAPE-AP).
    pub(super) grad_shape: Vec<i64>,
}
// SAFETY: handles are immutable after creation (gpe.h, thread safety).
unsafe impl Send for Bias {}
unsafe impl Sync for Bias {}

impl Bias {
    /// ALiBi (Press et al.): -m_h (i - j) (causal) or -m_h |i - j| (symmetric); slopes
    /// None gives the published rule for any number of heads.
    pub fn alibi(num_heads: usize, symmetric: bool, slopes: Option<&[f64]>) -> Result<Bias> {
        let mut o = ffi::gpe_alibi_options::init();
        o.form = if symmetric { ffi::GPE_ALIBI_SYMMETRIC } else { ffi::GPE_ALIBI_CAUSAL };
        o.num_heads = to_i64(num_heads, "num_heads")?;
        if let Some(s) = slopes {
            expect_len("slopes", s.len(), num_heads)?;
            o.slopes = s.as_ptr();
        }
        let mut raw = ptr::null_mut();
        // SAFETY: slopes holds num_heads values (checked).
        check(unsafe { ffi::gpe_bias_create_alibi(&o, &mut raw) })?;
        Ok(Bias { raw, kind: BiasKind::Alibi, num_heads, grad_shape: vec![o.num_heads] })
    }

    /// T5's bucketed relative bias: table [num_buckets, num_heads].
    pub fn t5(bidirectional: bool, num_buckets: usize, max_distance: i64, table: &Matrix) -> Result<Bias> {
        expect_len("table data", table.data.len(), checked_count("table", &[table.rows, table.cols])?)?;
        if table.rows != num_buckets {
            return Err(invalid(format!("table has {} rows; expected num_buckets = {}", table.rows, num_buckets)));
        }
        let mut o = ffi::gpe_t5_options::init();
        o.bidirectional = bidirectional as i32;
        // checked_count: both extents fit int64_t, and num_buckets == table.rows.
        o.num_heads = table.cols as i64;
        o.num_buckets = num_buckets as i64;
        o.max_distance = max_distance;
        o.table = table.data.as_ptr();
        let mut raw = ptr::null_mut();
        // SAFETY: table holds num_buckets * num_heads values (checked).
        check(unsafe { ffi::gpe_bias_create_t5(&o, &mut raw) })?;
        Ok(Bias { raw, kind: BiasKind::T5, num_heads: table.cols, grad_shape: vec![num_buckets as i64, table.cols as i64] })
    }

    /// FoX (Lin et al.): c_i - c_j with c_t = sum_{l <= t} ln sigmoid(x_{l,h});
    /// gate_logits [length, num_heads]; token t has position first_position + t.
    pub fn fox(first_position: i64, gate_logits: &Matrix) -> Result<Bias> {
        expect_len("gate_logits data", gate_logits.data.len(), checked_count("gate_logits", &[gate_logits.rows, gate_logits.cols])?)?;
        // checked_count: both extents fit int64_t.
        let mut o = ffi::gpe_fox_options::init();
        o.length = gate_logits.rows as i64;
        o.num_heads = gate_logits.cols as i64;
        o.first_position = first_position;
        o.gate_logits = gate_logits.data.as_ptr();
        let mut raw = ptr::null_mut();
        // SAFETY: gate_logits holds length * num_heads values (checked).
        check(unsafe { ffi::gpe_bias_create_fox(&o, &mut raw) })?;
        Ok(Bias {
            raw,
            kind: BiasKind::Fox,
            num_heads: gate_logits.cols,
            grad_shape: vec![gate_logits.rows as i64, gate_logits.cols as i64],
        })
    }

    /// GRAPE-AP: sum_{l = j+1..i} -softplus(<w_{i,h}, u_{l,h}>); w and u
    /// [length, num_heads, rank] row-major.
    pub fn grape_ap(num_heads: usize, rank: usize, first_position: i64, w: &[f64], u: &[f64]) -> Result<Bias> {
        let (heads, r) = (to_i64(num_heads, "num_heads")?, to_i64(rank, "rank")?);
        if num_heads == 0 || rank == 0 || w.len() % checked_count("[num_heads, rank]", &[num_heads, rank])? != 0 {
            return Err(invalid(format!(
                "w has {} values: not a whole number of [num_heads = {}, rank = {}] rows",
                w.len(),
                num_heads,
                rank
            )));
        }
        expect_len("u", u.len(), w.len())?;
        let length = w.len() / (num_heads * rank);
        let mut o = ffi::gpe_grape_ap_options::init();
        o.length = length as i64; // at most w.len()
        o.num_heads = heads;
        o.rank = r;
        o.first_position = first_position;
        o.w = w.as_ptr();
        o.u = u.as_ptr();
        let mut raw = ptr::null_mut();
        // SAFETY: w and u hold length * num_heads * rank values each (checked).
        check(unsafe { ffi::gpe_bias_create_grape_ap(&o, &mut raw) })?;
        Ok(Bias {
            raw,
            kind: BiasKind::GrapeAp,
            num_heads,
            grad_shape: vec![length as i64, heads, r],
        })
    }

    /// GRAPE-A (additive GRAPE, unipotent lift): b_h(i, j) = m_h (j - i) with slopes
    /// m_h (None: Press et al.'s), or content-gated c_i - c_j with FoX's prefix sums of
    /// ln sigmoid(gate_logits) ([length, num_heads]; slopes must then be None). `lifted`
    /// fills tiles through the head_dim + 2 lift (the definition) instead of the closed form.
    pub fn grape_a(
        num_heads: usize,
        head_dim: usize,
        slopes: Option<&[f64]>,
        gates: Option<(i64, &Matrix)>,
        lifted: bool,
    ) -> Result<Bias> {
        let mut o = ffi::gpe_grape_a_options::init();
        o.path = if lifted { ffi::GPE_GRAPE_A_LIFTED } else { ffi::GPE_GRAPE_A_CLOSED_FORM };
        o.num_heads = to_i64(num_heads, "num_heads")?;
        o.head_dim = to_i64(head_dim, "head_dim")?;
        if let Some(s) = slopes {
            expect_len("slopes", s.len(), num_heads)?;
            o.slopes = s.as_ptr();
        }
        let mut grad_shape = vec![o.num_heads];
        if let Some((first_position, logits)) = gates {
            expect_len("gate_logits data", logits.data.len(), checked_count("gate_logits", &[logits.rows, logits.cols])?)?;
            if logits.cols != num_heads {
                return Err(invalid(format!("gate_logits has {} columns; expected num_heads = {}", logits.cols, num_heads)));
            }
            o.gated = 1;
            o.length = logits.rows as i64; // checked_count: fits int64_t
            o.first_position = first_position;
            o.gate_logits = logits.data.as_ptr();
            grad_shape = vec![o.length, o.num_heads];
        }
        let mut raw = ptr::null_mut();
        // SAFETY: slopes and gate_logits hold what the sizes say (checked).
        check(unsafe { ffi::gpe_bias_create_grape_a(&o, &mut raw) })?;
        Ok(Bias { raw, kind: BiasKind::GrapeA, num_heads, grad_shape })
    }

    /// GRAPE-A only: the lifted rows [N, head_dim + 2] of x [N, head_dim] at `positions`
    /// for one head: queries G(i)^-T [q; 1; 0], keys G(j) [k; 0; 1].
    pub fn grape_a_lift(&self, head: i64, key: bool, positions: &[i64], x: &Matrix) -> Result<Matrix> {
        let mut out = Matrix::zeros(x.rows, x.cols + 2);
        let (mut ps, mut xs, mut os) = ([positions.len() as i64], [0i64; 2], [0i64; 2]);
        let tp = i64_tensor(positions, &mut ps);
        let tx = crate::matrix_tensor(x, &mut xs)?;
        let mut to = crate::matrix_tensor_mut(&mut out, &mut os)?;
        let role = if key { ffi::GPE_GRAPE_A_KEY } else { ffi::GPE_GRAPE_A_QUERY };
        // SAFETY: every buffer matches its shape.
        check(unsafe { ffi::gpe_bias_grape_a_lift(self.raw, head, role, &tp, &tx, &mut to) })?;
        Ok(out)
    }

    pub fn kind(&self) -> BiasKind {
        self.kind
    }
    pub fn num_heads(&self) -> usize {
        self.num_heads
    }
    /// Whether only j <= i is meaningful (causal ALiBi, FoX, GRAPE-AP).
    pub fn causal(&self) -> Result<bool> {
        let mut c = 0i32;
        // SAFETY: a live handle; NULL outputs are allowed.
        check(unsafe { ffi::gpe_bias_info(self.raw, ptr::null_mut(), ptr::null_mut(), &mut c) })?;
        Ok(c != 0)
    }

    /// ALiBi's slopes (an error for other kinds).
    pub fn alibi_slopes(&self) -> Result<Vec<f64>> {
        let mut s = vec![0.0; self.num_heads];
        // SAFETY: s holds num_heads values.
        check(unsafe { ffi::gpe_bias_alibi_slopes(self.raw, s.as_mut_ptr(), s.len() as i64) })?;
        Ok(s)
    }

    /// out[r, c] = b_head(q_positions[r], k_positions[c]).
    pub fn fill_tile(&self, head: i64, q_positions: &[i64], k_positions: &[i64]) -> Result<Matrix> {
        let mut out = Matrix::zeros(q_positions.len(), k_positions.len());
        let (mut qs, mut ks, mut os) = ([q_positions.len() as i64], [k_positions.len() as i64], [0i64; 2]);
        let tq = i64_tensor(q_positions, &mut qs);
        let tk = i64_tensor(k_positions, &mut ks);
        let mut to = crate::matrix_tensor_mut(&mut out, &mut os)?;
        // SAFETY: out holds M * N values; positions' shapes are their lengths.
        check(unsafe { ffi::gpe_bias_fill_tile(self.raw, head, &tq, &tk, &mut to) })?;
        Ok(out)
    }

    /// Adds one tile's contribution to the parameter gradients (not cleared): ALiBi
    /// dL/dslopes [num_heads]; T5 dL/dtable [num_buckets, num_heads]; FoX dL/dc
    /// [length, num_heads] (then `fox_logit_gradient`); GRAPE-AP dL/dw into `grad_a` and
    /// dL/du into `grad_b` [length, num_heads, rank].
    pub fn accumulate_gradient(
        &self,
        head: i64,
        q_positions: &[i64],
        k_positions: &[i64],
        grad_tile: &Matrix,
        grad_a: &mut [f64],
        grad_b: Option<&mut [f64]>,
    ) -> Result<()> {
        let want: usize = self.grad_shape.iter().map(|&s| s as usize).product();
        expect_len("grad_a", grad_a.len(), want)?;
        let (mut qs, mut ks, mut gs) = ([q_positions.len() as i64], [k_positions.len() as i64], [0i64; 2]);
        let tq = i64_tensor(q_positions, &mut qs);
        let tk = i64_tensor(k_positions, &mut ks);
        let tg = crate::matrix_tensor(grad_tile, &mut gs)?;
        let mut as_ = self.grad_shape.clone();
        let mut bs = self.grad_shape.clone();
        let mut ta = crate::f64_tensor_mut(grad_a, &mut as_);
        let mut tb = match grad_b {
            Some(b) => {
                expect_len("grad_b", b.len(), want)?;
                Some(crate::f64_tensor_mut(b, &mut bs))
            }
            None => None,
        };
        let tb_ptr = tb.as_mut().map_or(ptr::null_mut(), |t| t as *mut _);
        // SAFETY: every slice holds the values its shape says (checked above).
        check(unsafe { ffi::gpe_bias_accumulate_gradient(self.raw, head, &tq, &tk, &tg, &mut ta, tb_ptr) })
    }

    /// FoX only: dL/dgate_logits [length, num_heads] from the accumulated dL/dc.
    pub fn fox_logit_gradient(&self, grad_prefix: &[f64]) -> Result<Vec<f64>> {
        let want: usize = self.grad_shape.iter().map(|&s| s as usize).product();
        expect_len("grad_prefix", grad_prefix.len(), want)?;
        let mut out = vec![0.0; want];
        let (mut ps, mut os) = (self.grad_shape.clone(), self.grad_shape.clone());
        let tp = crate::f64_tensor(grad_prefix, &mut ps);
        let mut to = crate::f64_tensor_mut(&mut out, &mut os);
        // SAFETY: both hold the gradient's shape (checked).
        check(unsafe { ffi::gpe_bias_fox_logit_gradient(self.raw, &tp, &mut to) })?;
        Ok(out)
    }
}

impl Drop for Bias {
    fn drop(&mut self) {
        // SAFETY: created by gpe_bias_create_*.
        unsafe { ffi::gpe_bias_destroy(self.raw) }
    }
}
