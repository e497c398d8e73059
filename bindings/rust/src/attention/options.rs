//! What an attention call is given: the layout of q, k and v (`AttentionLayout`), the
//! head counts (`AttentionHeads`) and `AttentionOptions`, with the tensor shapes they
//! imply and their C form (gpe_attention_options, built for the length of one call).

use std::ptr;

use super::pairing_code;
use super::{Bias, Rope};
use crate::{checked_count, expect_len, ffi, i64_tensor, invalid, to_i64, AlgebraicSequence, GrapeM, Matrix, Pairing, Result};

/// How q, k and v are laid out (gpe_attention_forward). v, o and d_o end in
/// `AttentionHeads::value_dim()` where this says head_dim.
#[derive(Clone, Copy, Debug)]
pub enum AttentionLayout<'a> {
    /// q [batch, seq_q, heads_q, head_dim]; k, v [batch, seq_k, heads_kv, head_dim].
    Padded { batch: usize, seq_q: usize, seq_k: usize },
    /// q [tokens_q, heads_q, head_dim]; k, v [tokens_k, heads_kv, head_dim]; sequences
    /// delimited by the cumulative lengths ([batch + 1], from 0).
    Packed { cu_seqlens_q: &'a [i64], cu_seqlens_k: &'a [i64] },
    /// A paged KV cache (vLLM's and FlashInfer's block tables; forward only): q
    /// [batch, seq_q, heads_q, head_dim]; k, v [num_pages, page_size, heads_kv, head_dim];
    /// block_table [batch, pages_per_sequence] row-major, sequence b's key t in page
    /// block_table[b * pages_per_sequence + t / page_size] at slot t % page_size. Each
    /// sequence holds pages_per_sequence * page_size keys (kv_lengths: how many it uses).
    Paged { batch: usize, seq_q: usize, num_pages: usize, page_size: usize, block_table: &'a [i64] },
}

/// PyTorch SDPA's attn_mask (since 0.9.0; attention/descriptor.h, "SCORE MASK"): compact
/// row-major over `shape` = [batch or 1, heads_q or 1, seq_q or 1, seq_k or 1] (packed:
/// [sequences or 1, heads_q or 1, max_lq or 1, max_lk or 1], counted within each
/// sequence); a dimension of 1 broadcasts. No gradient; a row with every key masked gives
/// o = 0, lse = -inf.
#[derive(Clone, Copy, Debug)]
pub struct AttnMask<'a> {
    pub values: MaskValues<'a>,
    pub shape: [usize; 4],
}

/// The mask's values: added to the scores (natural-log units, -inf masks the key), or
/// whether each key takes part (0 masks it, as SDPA's False).
#[derive(Clone, Copy, Debug)]
pub enum MaskValues<'a> {
    Additive(&'a [f32]),
    Allowed(&'a [u8]),
}

/// Head counts and sizes: heads_q a multiple of heads_kv (GQA, MQA). q and k rows have
/// head_dim values; v rows, and so o, d_o and dv, have `head_dim_v` (since 0.10.0;
/// None: head_dim), as DeepSeek-V2/V3's MLA with head_dim 192 and head_dim_v 128. The
/// default softmax scale stays 1 / sqrt(head_dim).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionHeads {
    pub heads_q: usize,
    pub heads_kv: usize,
    pub head_dim: usize,
    pub head_dim_v: Option<usize>,
}

impl AttentionHeads {
    /// heads_q and heads_kv heads of head_dim values each, v included.
    pub fn new(heads_q: usize, heads_kv: usize, head_dim: usize) -> AttentionHeads {
        AttentionHeads { heads_q, heads_kv, head_dim, head_dim_v: None }
    }

    /// The same heads with v's rows (and o's) of `head_dim_v` values.
    pub fn with_head_dim_v(self, head_dim_v: usize) -> AttentionHeads {
        AttentionHeads { head_dim_v: Some(head_dim_v), ..self }
    }

    /// The length of v's, o's, d_o's and dv's rows: head_dim_v, else head_dim.
    pub fn value_dim(&self) -> usize {
        self.head_dim_v.unwrap_or(self.head_dim)
    }
}

/// How the CPU kernels multiply bfloat16 inputs (gpe/attention.h, "CPU ARITHMETIC").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Bf16Arithmetic {
    /// The bf16 dot products where a one-time probe finds them faster than float FMAs.
    #[default]
    Auto,
    /// The bf16 dot products (AVX512_BF16) wherever the CPU has them.
    DotProducts,
    /// Widened to float32 (the more exact).
    Widen,
    /// Intel AMX tiles where usable, else the dot products (not yet measured on AMX).
    AmxTiles,
}

/// How the CPU kernels multiply float32 inputs in the forward (gpe/attention.h, "CPU
/// ARITHMETIC").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Float32Arithmetic {
    /// float32 FMAs.
    #[default]
    Exact,
    /// Six bf16 products per float product on AMX tiles (float32's accuracy); Exact
    /// without usable tiles.
    SplitBf16x6,
    /// Three bf16 products (about 2^-16 relative per product); Exact without tiles.
    SplitBf16x3,
}

/// gpe_attention_options: at most one of RoPE (rope_dim > 0), GRAPE-M, an algebraic
/// encoding (sequence, tree or grid), and at most one bias, all applied inside the kernel.
///
/// Structured positions (the encoding's group element is not one integer; q_positions /
/// k_positions, or the default, still order the tokens for causal masks, biases and Shaw
/// labels): per-axis coordinates `q_axes` / `k_axes` ([tokens, axes] row-major) for axial
/// RoPE (`rope_axes` 2 or 3), M-RoPE (`rope_sections`) and algebraic grids
/// (`algebraic_grid`), where axes is the encoding's axis count (a `rope` handle's when it
/// has several, else rope_sections.len(), else rope_axes when > 1, else
/// algebraic_grid.len()); tree addresses `q_tree` /
/// `k_tree` (one list of 0-based child indices per token) for algebraic trees
/// (`algebraic_tree`). Shaw et al.'s relative labels: `shaw_key_table` and / or
/// `shaw_value_table` ([2 shaw_max_distance + 1, head_dim], the value table's rows of
/// `AttentionHeads::value_dim()`; row r for label r - k, shared by every head) add scale <T q_i, aK_r> to s_ij and sum_j p_ij aV_r to o_i, with
/// r = clip(p_j - p_i, -k, k); `attention_backward_with_parameters` returns their
/// gradients.
///
/// Since 0.9.0 (attention/descriptor.h, "WINDOW, SOFTCAP AND SINKS"): `rope`, any
/// `Rope` (every schedule, xPos, partial rotary, axial / M-RoPE with q_axes / k_axes)
/// applied to q in the query role and k in the key role, exactly as `Rope::forward`
/// would (the schedule's attention factor multiplies both), in place of rope_dim (both
/// are refused); `window`, flash-attn's window_size (left, right), -1 unbounded: key j is
/// allowed for query i only if p_i - left <= p_j <= p_i + right, on top of the causal
/// rule; `softcap` c > 0 (0: none), Gemma 2's c tanh(x / c) of the scaled q.k part; `sinks`,
/// gpt-oss's one logit per query head in every row's softmax denominator
/// (`attention_backward_with_parameters` returns their gradient); `attn_mask` (SDPA's,
/// `AttnMask`) and `kv_lengths` ([batch], padded layouts: sequence b uses its first
/// kv_lengths[b] keys, flash-attn's cache_seqlens).
#[derive(Clone, Copy)]
pub struct AttentionOptions<'a> {
    pub causal: bool,
    /// 0: 1 / sqrt(head_dim).
    pub softmax_scale: f64,
    /// 0: the installed pool's threads (gpe_set_thread_pool), else every hardware thread.
    pub num_threads: i32,
    pub rope_dim: i64,
    pub rope_base: f64,
    pub rope_pairing: Pairing,
    pub grape_m: Option<&'a GrapeM>,
    pub algebraic: Option<&'a AlgebraicSequence>,
    pub bias: Option<&'a Bias>,
    /// Explicit positions, [tokens_q] and [tokens_k] (both or neither).
    pub q_positions: Option<&'a [i64]>,
    pub k_positions: Option<&'a [i64]>,
    /// Axial RoPE over 2 or 3 axes with rope_dim (0 or 1: one axis).
    pub rope_axes: i32,
    /// M-RoPE with rope_dim: rotation planes per axis, summing to rope_dim / 2 (e.g.
    /// Qwen2-VL's [16, 24, 24]), default frequencies.
    pub rope_sections: Option<&'a [i64]>,
    /// M-RoPE's interleaved plane layout (Qwen3-VL) instead of contiguous sections.
    pub rope_sections_interleaved: bool,
    /// Per-axis coordinates [tokens_q, axes] and [tokens_k, axes] (both or neither).
    pub q_axes: Option<&'a [i64]>,
    pub k_axes: Option<&'a [i64]>,
    /// Tree addresses, one per token, for `algebraic_tree` (both or neither).
    pub q_tree: Option<&'a [&'a [i64]]>,
    pub k_tree: Option<&'a [&'a [i64]]>,
    /// Kogkalidis et al.'s tree encoding: one skew generator (head_dim x head_dim) per
    /// branch, W_c = exp(S_c), an address acting by the path product.
    pub algebraic_tree: Option<&'a [Matrix]>,
    /// Kogkalidis et al.'s grid encoding: 2 or 3 skew generators of m x m (axes * m =
    /// head_dim), blockdiag of exp(x_a S_a).
    pub algebraic_grid: Option<&'a [Matrix]>,
    /// Shaw et al.'s clipping distance k >= 0 (read with a table).
    pub shaw_max_distance: i64,
    pub shaw_key_table: Option<&'a Matrix>,
    pub shaw_value_table: Option<&'a Matrix>,
    /// Any RoPE inside the kernel (not with rope_dim).
    pub rope: Option<&'a Rope>,
    /// Sliding window (left, right), -1 unbounded on that side.
    pub window: Option<(i64, i64)>,
    /// Logit softcap 0 < c <= 1e30 (a larger cap is no cap: leave it 0); 0: none.
    pub softcap: f64,
    /// One sink logit per query head, [heads_q].
    pub sinks: Option<&'a [f32]>,
    /// SDPA's attn_mask.
    pub attn_mask: Option<AttnMask<'a>>,
    /// Keys used per sequence, [batch] (padded and paged layouts).
    pub kv_lengths: Option<&'a [i64]>,
    /// The CPU kernels' arithmetic for bfloat16 and float32 inputs.
    pub bf16_arithmetic: Bf16Arithmetic,
    pub float32_arithmetic: Float32Arithmetic,
}

impl<'a> Default for AttentionOptions<'a> {
    fn default() -> Self {
        AttentionOptions {
            causal: false,
            softmax_scale: 0.0,
            num_threads: 0,
            rope_dim: 0,
            rope_base: 10000.0,
            rope_pairing: Pairing::HalfSplit,
            grape_m: None,
            algebraic: None,
            bias: None,
            q_positions: None,
            k_positions: None,
            rope_axes: 0,
            rope_sections: None,
            rope_sections_interleaved: false,
            q_axes: None,
            k_axes: None,
            q_tree: None,
            k_tree: None,
            algebraic_tree: None,
            algebraic_grid: None,
            shaw_max_distance: 0,
            shaw_key_table: None,
            shaw_value_table: None,
            rope: None,
            window: None,
            softcap: 0.0,
            sinks: None,
            attn_mask: None,
            kv_lengths: None,
            bf16_arithmetic: Bf16Arithmetic::Auto,
            float32_arithmetic: Float32Arithmetic::Exact,
        }
    }
}

// The tensors' shapes and token counts of a layout: q (and dq), k (and dk), v (and
// dv), o (and d_o), lse.
pub(super) struct Shapes {
    pub(super) q: Vec<i64>,
    pub(super) k: Vec<i64>,
    pub(super) v: Vec<i64>,
    pub(super) o: Vec<i64>,
    pub(super) lse: [i64; 2],
}

pub(super) fn shapes(layout: &AttentionLayout, heads: &AttentionHeads) -> Result<Shapes> {
    let (hq, hk, d) = (to_i64(heads.heads_q, "heads_q")?, to_i64(heads.heads_kv, "heads_kv")?, to_i64(heads.head_dim, "head_dim")?);
    let dv = to_i64(heads.value_dim(), "head_dim_v")?;
    let last = |cu: &[i64], name: &str| -> Result<i64> {
        match cu.last() {
            Some(&t) if t >= 0 => Ok(t),
            _ => Err(invalid(format!("{} must have batch + 1 >= 1 values, the last >= 0", name))),
        }
    };
    // q's and k's shapes; v's and o's are k's and q's with dv last.
    let (q, k, lse) = match *layout {
        AttentionLayout::Padded { batch, seq_q, seq_k } => {
            let (b, sq, sk) = (to_i64(batch, "batch")?, to_i64(seq_q, "seq_q")?, to_i64(seq_k, "seq_k")?);
            let bq = checked_count("batch * seq_q", &[batch, seq_q])? as i64;
            (vec![b, sq, hq, d], vec![b, sk, hk, d], [bq, hq])
        }
        AttentionLayout::Packed { cu_seqlens_q, cu_seqlens_k } => {
            let (tq, tk) = (last(cu_seqlens_q, "cu_seqlens_q")?, last(cu_seqlens_k, "cu_seqlens_k")?);
            (vec![tq, hq, d], vec![tk, hk, d], [tq, hq])
        }
        AttentionLayout::Paged { batch, seq_q, num_pages, page_size, .. } => {
            let (b, sq) = (to_i64(batch, "batch")?, to_i64(seq_q, "seq_q")?);
            let (np, ps) = (to_i64(num_pages, "num_pages")?, to_i64(page_size, "page_size")?);
            let bq = checked_count("batch * seq_q", &[batch, seq_q])? as i64;
            (vec![b, sq, hq, d], vec![np, ps, hk, d], [bq, hq])
        }
    };
    let with_last = |shape: &[i64], last: i64| {
        let mut s = shape.to_vec();
        *s.last_mut().unwrap() = last;
        s
    };
    let s = Shapes { v: with_last(&k, dv), o: with_last(&q, dv), q, k, lse };
    // Every extent is >= 0 here; the element counts must fit too, so that `count` is exact.
    for (name, shape) in [("q", &s.q[..]), ("k", &s.k[..]), ("v", &s.v[..]), ("o", &s.o[..]), ("lse", &s.lse[..])] {
        checked_count(name, &shape.iter().map(|&e| e as usize).collect::<Vec<_>>())?;
    }
    Ok(s)
}

// Exact for the shapes `shapes` returns (their counts checked there) and gradient shapes
// of a Bias (built from checked extents).
pub(super) fn count(shape: &[i64]) -> usize {
    shape.iter().map(|&s| s as usize).product()
}

// Skew generators as one float64 [count, m, m] row-major buffer (all square, one size).
fn skew_stack(name: &str, skews: &[Matrix]) -> Result<(Vec<f64>, [i64; 3])> {
    let m = skews.first().map_or(0, |s| s.rows);
    let mm = crate::checked_count(name, &[m, m])?;
    let mut flat = Vec::with_capacity(crate::checked_count(name, &[skews.len(), mm])?);
    for (i, s) in skews.iter().enumerate() {
        if s.rows != m || s.cols != m || s.data.len() != mm {
            return Err(invalid(format!("{}[{}] is {} x {}; every generator must be {} x {}", name, i, s.rows, s.cols, m, m)));
        }
        flat.extend_from_slice(&s.data);
    }
    Ok((flat, [skews.len() as i64, m as i64, m as i64]))
}

// Tree addresses as CSR: token t's address is children[offsets[t] .. offsets[t + 1]).
fn tree_csr(addresses: &[&[i64]]) -> (Vec<i64>, Vec<i64>) {
    let mut offsets = Vec::with_capacity(addresses.len() + 1);
    let mut children = Vec::new();
    offsets.push(0);
    for a in addresses {
        children.extend_from_slice(a);
        offsets.push(children.len() as i64);
    }
    (offsets, children)
}

// The axis count per-axis coordinates are read with (AttentionOptions' documentation):
// a Rope handle's own where it has several (axial / M-RoPE, attention.h), else the
// legacy options'.
fn position_axes(options: &AttentionOptions) -> usize {
    if let Some(r) = options.rope {
        let (_, _, axes) = r.shape();
        if axes > 1 {
            return axes;
        }
    }
    if let Some(s) = options.rope_sections {
        s.len().max(1)
    } else if options.rope_axes > 1 {
        options.rope_axes as usize
    } else if let Some(g) = options.algebraic_grid {
        g.len().max(1)
    } else {
        1
    }
}

// Calls `f` with the C options (every tensor they point to alive for the call).
pub(super) fn with_options(options: &AttentionOptions, layout: &AttentionLayout, f: impl FnOnce(&ffi::gpe_attention_options) -> Result<()>) -> Result<()> {
    let mut o = ffi::gpe_attention_options::init();
    o.causal = options.causal as i32;
    o.softmax_scale = options.softmax_scale;
    o.num_threads = options.num_threads;
    o.bf16_arithmetic = match options.bf16_arithmetic {
        Bf16Arithmetic::Auto => ffi::GPE_BF16_ARITHMETIC_AUTO,
        Bf16Arithmetic::DotProducts => ffi::GPE_BF16_ARITHMETIC_DOT_PRODUCTS,
        Bf16Arithmetic::Widen => ffi::GPE_BF16_ARITHMETIC_WIDEN,
        Bf16Arithmetic::AmxTiles => ffi::GPE_BF16_ARITHMETIC_AMX_TILES,
    };
    o.float32_arithmetic = match options.float32_arithmetic {
        Float32Arithmetic::Exact => ffi::GPE_FLOAT32_ARITHMETIC_EXACT,
        Float32Arithmetic::SplitBf16x6 => ffi::GPE_FLOAT32_ARITHMETIC_SPLIT_BF16X6,
        Float32Arithmetic::SplitBf16x3 => ffi::GPE_FLOAT32_ARITHMETIC_SPLIT_BF16X3,
    };
    o.rope_dim = options.rope_dim;
    o.rope_base = options.rope_base;
    o.rope_pairing = pairing_code(options.rope_pairing);
    o.grape_m = options.grape_m.map_or(ptr::null(), |g| g.raw as *const _);
    o.algebraic = options.algebraic.map_or(ptr::null(), |a| a.raw as *const _);
    o.bias = options.bias.map_or(ptr::null(), |b| b.raw as *const _);
    let mut qps = [options.q_positions.map_or(0, |p| p.len() as i64)];
    let mut kps = [options.k_positions.map_or(0, |p| p.len() as i64)];
    let qp = options.q_positions.map(|p| i64_tensor(p, &mut qps));
    let kp = options.k_positions.map(|p| i64_tensor(p, &mut kps));
    o.q_positions = qp.as_ref().map_or(ptr::null(), |t| t as *const _);
    o.k_positions = kp.as_ref().map_or(ptr::null(), |t| t as *const _);
    let (mut cqs, mut cks) = ([0i64], [0i64]);
    let (cq, ck) = match *layout {
        AttentionLayout::Packed { cu_seqlens_q, cu_seqlens_k } => {
            cqs[0] = cu_seqlens_q.len() as i64;
            cks[0] = cu_seqlens_k.len() as i64;
            (Some(i64_tensor(cu_seqlens_q, &mut cqs)), Some(i64_tensor(cu_seqlens_k, &mut cks)))
        }
        AttentionLayout::Padded { .. } | AttentionLayout::Paged { .. } => (None, None),
    };
    // A paged cache's block table, [batch, pages_per_sequence].
    let mut bts = [0i64; 2];
    let bt = match *layout {
        AttentionLayout::Paged { batch, block_table, .. } => {
            if (batch == 0 && !block_table.is_empty()) || (batch > 0 && block_table.len() % batch != 0) {
                return Err(invalid(format!("block_table has {} entries, not batch ({}) x pages_per_sequence", block_table.len(), batch)));
            }
            bts = [to_i64(batch, "batch")?, if batch == 0 { 0 } else { (block_table.len() / batch) as i64 }];
            Some(i64_tensor(block_table, &mut bts))
        }
        _ => None,
    };
    o.block_table = bt.as_ref().map_or(ptr::null(), |t| t as *const _);
    o.cu_seqlens_q = cq.as_ref().map_or(ptr::null(), |t| t as *const _);
    o.cu_seqlens_k = ck.as_ref().map_or(ptr::null(), |t| t as *const _);
    // Multi-axis RoPE.
    o.rope_axes = options.rope_axes;
    o.rope_sections_interleaved = options.rope_sections_interleaved as i32;
    let mut secs = [options.rope_sections.map_or(0, |s| s.len() as i64)];
    let sec_t = options.rope_sections.map(|s| i64_tensor(s, &mut secs));
    o.rope_sections = sec_t.as_ref().map_or(ptr::null(), |t| t as *const _);
    // Per-axis coordinates, [tokens, axes].
    let axes = position_axes(options);
    let axes_shape = |name: &str, c: Option<&[i64]>| -> Result<[i64; 2]> {
        let n = c.map_or(0, |c| c.len());
        if n % axes != 0 {
            return Err(invalid(format!("{} has {} values, not a multiple of the encoding's {} axes", name, n, axes)));
        }
        Ok([(n / axes) as i64, axes as i64])
    };
    let (mut qas, mut kas) = (axes_shape("q_axes", options.q_axes)?, axes_shape("k_axes", options.k_axes)?);
    let qa = options.q_axes.map(|c| i64_tensor(c, &mut qas));
    let ka = options.k_axes.map(|c| i64_tensor(c, &mut kas));
    o.q_axes = qa.as_ref().map_or(ptr::null(), |t| t as *const _);
    o.k_axes = ka.as_ref().map_or(ptr::null(), |t| t as *const _);
    // Tree addresses as CSR (the library takes all four tensors or none).
    if options.q_tree.is_some() != options.k_tree.is_some() {
        return Err(invalid("give both q_tree and k_tree, or neither".to_string()));
    }
    let (qo, qc) = tree_csr(options.q_tree.unwrap_or(&[]));
    let (ko, kc) = tree_csr(options.k_tree.unwrap_or(&[]));
    let (mut qos, mut qcs, mut kos, mut kcs) = ([qo.len() as i64], [qc.len() as i64], [ko.len() as i64], [kc.len() as i64]);
    let trees = options.q_tree.map(|_| {
        (i64_tensor(&qo, &mut qos), i64_tensor(&qc, &mut qcs), i64_tensor(&ko, &mut kos), i64_tensor(&kc, &mut kcs))
    });
    if let Some((a, b, c, d)) = trees.as_ref() {
        o.q_tree_offsets = a;
        o.q_tree_children = b;
        o.k_tree_offsets = c;
        o.k_tree_children = d;
    }
    // Algebraic tree / grid generators, [count, m, m].
    let tree_skews = options.algebraic_tree.map(|s| skew_stack("algebraic_tree", s)).transpose()?;
    let grid_skews = options.algebraic_grid.map(|s| skew_stack("algebraic_grid", s)).transpose()?;
    let (mut tss, mut gss) = (tree_skews.as_ref().map_or([0; 3], |t| t.1), grid_skews.as_ref().map_or([0; 3], |g| g.1));
    let tt = tree_skews.as_ref().map(|t| crate::f64_tensor(&t.0, &mut tss));
    let gt = grid_skews.as_ref().map(|g| crate::f64_tensor(&g.0, &mut gss));
    o.algebraic_tree = tt.as_ref().map_or(ptr::null(), |t| t as *const _);
    o.algebraic_grid = gt.as_ref().map_or(ptr::null(), |t| t as *const _);
    // Shaw tables.
    o.shaw_max_distance = options.shaw_max_distance;
    let (mut sks, mut svs) = ([0i64; 2], [0i64; 2]);
    let skt = options.shaw_key_table.map(|m| crate::matrix_tensor(m, &mut sks)).transpose()?;
    let svt = options.shaw_value_table.map(|m| crate::matrix_tensor(m, &mut svs)).transpose()?;
    o.shaw_key_table = skt.as_ref().map_or(ptr::null(), |t| t as *const _);
    o.shaw_value_table = svt.as_ref().map_or(ptr::null(), |t| t as *const _);
    // RoPE handle, window, softcap, sinks.
    o.rope = options.rope.map_or(ptr::null(), |r| r.raw as *const _);
    if let Some((left, right)) = options.window {
        o.window = 1;
        o.window_left = left;
        o.window_right = right;
    }
    o.softcap = options.softcap;
    let mut sink_shape = [options.sinks.map_or(0, |z| z.len() as i64)];
    let sink_t = options.sinks.map(|z| crate::real_tensor(z, &mut sink_shape));
    o.sinks = sink_t.as_ref().map_or(ptr::null(), |t| t as *const _);
    // Score mask and KV lengths.
    let mut mask_shape = [0i64; 4];
    let mask_t = match options.attn_mask {
        Some(m) => {
            let n = checked_count("attn_mask", &m.shape)?;
            for (i, &e) in m.shape.iter().enumerate() {
                mask_shape[i] = to_i64(e, "attn_mask shape")?;
            }
            Some(match m.values {
                MaskValues::Additive(x) => {
                    expect_len("attn_mask", x.len(), n)?;
                    crate::real_tensor(x, &mut mask_shape)
                }
                MaskValues::Allowed(x) => {
                    expect_len("attn_mask", x.len(), n)?;
                    crate::tensor(x.as_ptr() as *const std::os::raw::c_void, ffi::KDL_UINT, 8, &mut mask_shape)
                }
            })
        }
        None => None,
    };
    o.attn_mask = mask_t.as_ref().map_or(ptr::null(), |t| t as *const _);
    let mut len_shape = [options.kv_lengths.map_or(0, |l| l.len() as i64)];
    let len_t = options.kv_lengths.map(|l| i64_tensor(l, &mut len_shape));
    o.kv_lengths = len_t.as_ref().map_or(ptr::null(), |t| t as *const _);
    f(&o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_maps_to_the_header_codes() {
        let layout = AttentionLayout::Padded { batch: 1, seq_q: 1, seq_k: 1 };
        let cases = [
            (Bf16Arithmetic::Auto, Float32Arithmetic::Exact, 0, 0),
            (Bf16Arithmetic::DotProducts, Float32Arithmetic::SplitBf16x6, 1, 1),
            (Bf16Arithmetic::Widen, Float32Arithmetic::SplitBf16x3, 2, 2),
            (Bf16Arithmetic::AmxTiles, Float32Arithmetic::Exact, 3, 0),
        ];
        for (b, f, want_b, want_f) in cases {
            let options = AttentionOptions { bf16_arithmetic: b, float32_arithmetic: f, ..Default::default() };
            with_options(&options, &layout, |o| {
                assert_eq!((o.bf16_arithmetic, o.float32_arithmetic), (want_b, want_f));
                Ok(())
            })
            .unwrap();
        }
    }
}
