//! Since 0.3.0: RoPE with its frequency schedules, the additive attention biases (ALiBi,
//! T5, FoX, GRAPE-AP) and attention with the encoding applied inside the kernel
//! (gpe.h's "RoPE", "Additive attention biases" and "Attention" sections).
//!
//! Tensors are row-major slices with their shape given beside them; the crate checks
//! every slice's length against its shape before calling C, and the library checks the
//! rest (head counts, rotary_dim, positions) and reports a bad value as an `Error`.

use std::os::raw::c_void;
use std::ptr;

use crate::{check, expect_len, ffi, i64_tensor, invalid, real_tensor, real_tensor_mut, tensor, AlgebraicSequence, GrapeM, Matrix, Pairing, Real, Result};

fn pairing_code(p: Pairing) -> i32 {
    match p {
        Pairing::Interleaved => ffi::GPE_PAIRING_INTERLEAVED,
        Pairing::HalfSplit => ffi::GPE_PAIRING_HALF_SPLIT,
    }
}

fn product(shape: &[usize]) -> usize {
    shape.iter().product()
}

// ---- RoPE ---------------------------------------------------------------------------

/// RoPE's frequency schedule (GPE_ROPE_*), with each schedule's parameters.
#[derive(Clone, Debug, PartialEq)]
pub enum Schedule {
    /// theta_i = base^(-2i / rotary_dim) (Su et al., eq. 15).
    Default,
    /// Position interpolation: theta_i / factor.
    Linear { factor: f64 },
    /// Dynamic NTK: the base grows once current_length exceeds original_max_position.
    DynamicNtk { factor: f64, original_max_position: i64, current_length: i64 },
    /// YaRN (Peng et al.): NTK-by-parts ramp between beta_slow and beta_fast, and the
    /// attention temperature (overridden by `attention_factor` when given).
    Yarn { factor: f64, original_max_position: i64, beta_fast: f64, beta_slow: f64, attention_factor: Option<f64> },
    /// LongRoPE (Ding et al.): per-plane factors, the long list once current_length
    /// exceeds original_max_position.
    LongRope {
        short_factor: Vec<f64>,
        long_factor: Vec<f64>,
        original_max_position: i64,
        max_position: i64,
        current_length: i64,
        attention_factor: Option<f64>,
    },
    /// Llama 3's wavelength-banded rule.
    Llama3 { factor: f64, low_freq_factor: f64, high_freq_factor: f64, original_max_position: i64 },
}

/// The schedules without their parameters, for `Schedule::published`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScheduleKind {
    Default,
    Linear,
    DynamicNtk,
    Yarn,
    LongRope,
    Llama3,
}

impl Schedule {
    /// The schedule with the parameters its models publish (gpe_rope_options_use_schedule):
    /// Llama 3.1's factor 8, low/high 1 and 4, original context 8192; YaRN's beta 32 / 1
    /// with factor 1 and context 4096 (set the model's); LongRope's contexts 4096 and
    /// 131072 with empty factor lists (the model's own).
    pub fn published(kind: ScheduleKind) -> Result<Schedule> {
        let code = match kind {
            ScheduleKind::Default => ffi::GPE_ROPE_DEFAULT,
            ScheduleKind::Linear => ffi::GPE_ROPE_LINEAR,
            ScheduleKind::DynamicNtk => ffi::GPE_ROPE_DYNAMIC_NTK,
            ScheduleKind::Yarn => ffi::GPE_ROPE_YARN,
            ScheduleKind::LongRope => ffi::GPE_ROPE_LONGROPE,
            ScheduleKind::Llama3 => ffi::GPE_ROPE_LLAMA3,
        };
        let mut o = ffi::gpe_rope_options::init();
        // SAFETY: a complete options struct with struct_size set.
        check(unsafe { ffi::gpe_rope_options_use_schedule(code, &mut o) })?;
        let attention_factor = if o.has_attention_factor != 0 { Some(o.attention_factor) } else { None };
        Ok(match kind {
            ScheduleKind::Default => Schedule::Default,
            ScheduleKind::Linear => Schedule::Linear { factor: o.factor },
            ScheduleKind::DynamicNtk => Schedule::DynamicNtk {
                factor: o.factor,
                original_max_position: o.original_max_position,
                current_length: o.current_length,
            },
            ScheduleKind::Yarn => Schedule::Yarn {
                factor: o.factor,
                original_max_position: o.original_max_position,
                beta_fast: o.beta_fast,
                beta_slow: o.beta_slow,
                attention_factor,
            },
            ScheduleKind::LongRope => Schedule::LongRope {
                short_factor: Vec::new(),
                long_factor: Vec::new(),
                original_max_position: o.original_max_position,
                max_position: o.max_position,
                current_length: o.current_length,
                attention_factor,
            },
            ScheduleKind::Llama3 => Schedule::Llama3 {
                factor: o.factor,
                low_freq_factor: o.low_freq_factor,
                high_freq_factor: o.high_freq_factor,
                original_max_position: o.original_max_position,
            },
        })
    }
}

/// Which positions drive which planes (GPE_ROPE_AXES_*).
#[derive(Clone, Debug, PartialEq)]
pub enum Axes {
    Single,
    /// num_axes contiguous blocks of planes with default frequencies each (axial 2D/3D).
    Axial(i32),
    /// Qwen2-VL's M-RoPE: contiguous plane counts per axis (e.g. [16, 24, 24]).
    MRope(Vec<i64>),
    /// Qwen3-VL's interleaved M-RoPE.
    MRopeInterleaved(Vec<i64>),
}

/// xPos scaling (Sun et al., eq. 9-10).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Xpos {
    pub gamma: f64,
    pub scale_base: f64,
    pub centre: i64,
}

/// Options of `Rope::new` (gpe_rope_options).
#[derive(Clone, Debug)]
pub struct RopeOptions {
    pub head_dim: i64,
    /// 0 means head_dim (partial rotary when smaller).
    pub rotary_dim: i64,
    pub base: f64,
    pub pairing: Pairing,
    pub schedule: Schedule,
    pub axes: Axes,
    pub xpos: Option<Xpos>,
    pub num_threads: i32,
}

impl RopeOptions {
    /// Default schedule, half-split pairing, base 10000, one thread.
    pub fn new(head_dim: i64) -> RopeOptions {
        RopeOptions {
            head_dim,
            rotary_dim: 0,
            base: 10000.0,
            pairing: Pairing::HalfSplit,
            schedule: Schedule::Default,
            axes: Axes::Single,
            xpos: None,
            num_threads: 1,
        }
    }
}

/// Tensor layouts of gpe_rope_tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeLayout {
    /// [batch, seq, heads, head_dim]
    Bshd,
    /// [seq, batch, heads, head_dim]
    Sbhd,
    /// [tokens, heads, head_dim], sequences delimited by cu_seqlens.
    Thd,
}

/// Where the tokens of a q or k tensor sit (gpe_rope_tokens): at most one of
/// `position_ids` ([tokens], or [num_axes, tokens] for multi-axis RoPE) and `offsets`
/// ([batch]); `cu_seqlens` ([batch + 1]) for `Thd` only; `key` matters only for xPos.
#[derive(Clone, Copy, Debug)]
pub struct Tokens<'a> {
    pub layout: RopeLayout,
    pub key: bool,
    pub position_ids: Option<&'a [i64]>,
    pub offsets: Option<&'a [i64]>,
    pub cu_seqlens: Option<&'a [i64]>,
}

impl<'a> Tokens<'a> {
    /// bshd tokens at positions 0..seq of every sequence.
    pub fn bshd() -> Tokens<'a> {
        Tokens { layout: RopeLayout::Bshd, key: false, position_ids: None, offsets: None, cu_seqlens: None }
    }
}

/// A RoPE encoding: rotates plane i of every head by p * theta_i (gpe.h's convention).
pub struct Rope {
    raw: *mut ffi::gpe_rope,
    head_dim: usize,
    rotary_dim: usize,
    num_axes: usize,
}
// SAFETY: handles are immutable after creation (gpe.h, thread safety).
unsafe impl Send for Rope {}
unsafe impl Sync for Rope {}

impl Rope {
    pub fn new(options: &RopeOptions) -> Result<Rope> {
        let mut o = ffi::gpe_rope_options::init();
        o.head_dim = options.head_dim;
        o.rotary_dim = options.rotary_dim;
        o.base = options.base;
        o.pairing = pairing_code(options.pairing);
        o.num_threads = options.num_threads;
        match &options.schedule {
            Schedule::Default => o.schedule = ffi::GPE_ROPE_DEFAULT,
            Schedule::Linear { factor } => {
                o.schedule = ffi::GPE_ROPE_LINEAR;
                o.factor = *factor;
            }
            Schedule::DynamicNtk { factor, original_max_position, current_length } => {
                o.schedule = ffi::GPE_ROPE_DYNAMIC_NTK;
                o.factor = *factor;
                o.original_max_position = *original_max_position;
                o.current_length = *current_length;
            }
            Schedule::Yarn { factor, original_max_position, beta_fast, beta_slow, attention_factor } => {
                o.schedule = ffi::GPE_ROPE_YARN;
                o.factor = *factor;
                o.original_max_position = *original_max_position;
                o.beta_fast = *beta_fast;
                o.beta_slow = *beta_slow;
                if let Some(a) = attention_factor {
                    o.has_attention_factor = 1;
                    o.attention_factor = *a;
                }
            }
            Schedule::LongRope { short_factor, long_factor, original_max_position, max_position, current_length, attention_factor } => {
                o.schedule = ffi::GPE_ROPE_LONGROPE;
                // The library reads short_factor_len / long_factor_len values: the slices'.
                o.short_factor = short_factor.as_ptr();
                o.short_factor_len = short_factor.len() as i64;
                o.long_factor = long_factor.as_ptr();
                o.long_factor_len = long_factor.len() as i64;
                o.original_max_position = *original_max_position;
                o.max_position = *max_position;
                o.current_length = *current_length;
                if let Some(a) = attention_factor {
                    o.has_attention_factor = 1;
                    o.attention_factor = *a;
                }
            }
            Schedule::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position } => {
                o.schedule = ffi::GPE_ROPE_LLAMA3;
                o.factor = *factor;
                o.low_freq_factor = *low_freq_factor;
                o.high_freq_factor = *high_freq_factor;
                o.original_max_position = *original_max_position;
            }
        }
        match &options.axes {
            Axes::Single => o.axes = ffi::GPE_ROPE_AXES_SINGLE,
            Axes::Axial(n) => {
                o.axes = ffi::GPE_ROPE_AXES_AXIAL;
                o.num_axes = *n;
            }
            Axes::MRope(sections) | Axes::MRopeInterleaved(sections) => {
                o.axes = if matches!(options.axes, Axes::MRope(_)) {
                    ffi::GPE_ROPE_AXES_MROPE
                } else {
                    ffi::GPE_ROPE_AXES_MROPE_INTERLEAVED
                };
                o.mrope_sections = sections.as_ptr();
                o.num_mrope_sections = sections.len() as i64;
            }
        }
        if let Some(x) = options.xpos {
            o.xpos = 1;
            o.xpos_gamma = x.gamma;
            o.xpos_scale_base = x.scale_base;
            o.xpos_centre = x.centre;
        }
        let mut raw = ptr::null_mut();
        // SAFETY: o and the lists it points to outlive the call (the library copies them).
        check(unsafe { ffi::gpe_rope_create(&o, &mut raw) })?;
        let mut rope = Rope { raw, head_dim: 0, rotary_dim: 0, num_axes: 0 };
        let (mut h, mut r, mut a) = (0i64, 0i64, 0i64);
        // SAFETY: a live handle (destroyed by `rope` on error).
        check(unsafe { ffi::gpe_rope_shape(raw, &mut h, &mut r, &mut a) })?;
        rope.head_dim = h as usize;
        rope.rotary_dim = r as usize;
        rope.num_axes = a as usize;
        Ok(rope)
    }

    /// (head_dim, rotary_dim, num_axes).
    pub fn shape(&self) -> (usize, usize, usize) {
        (self.head_dim, self.rotary_dim, self.num_axes)
    }

    /// The schedule's frequencies theta_i (radians per position, rotary_dim / 2 of them)
    /// and its attention factor.
    pub fn frequencies(&self) -> Result<(Vec<f64>, f64)> {
        let mut thetas = vec![0.0; self.rotary_dim / 2];
        let mut factor = 0.0;
        // SAFETY: thetas holds num_thetas values.
        check(unsafe { ffi::gpe_rope_frequencies(self.raw, thetas.as_mut_ptr(), thetas.len() as i64, &mut factor) })?;
        Ok((thetas, factor))
    }

    /// out = m R(p theta) x for a tensor of `shape` (see `RopeLayout`).
    pub fn forward<T: Real>(&self, tokens: &Tokens, x: &[T], shape: &[usize]) -> Result<Vec<T>> {
        let mut out = vec![T::default(); x.len()];
        self.run(tokens, x.as_ptr() as *const c_void, out.as_mut_ptr() as *mut c_void, x.len(), out.len(), T::BITS, shape, false)?;
        Ok(out)
    }

    /// The backward pass dx = m R(-p theta) dy (the transpose of `forward`).
    pub fn backward<T: Real>(&self, tokens: &Tokens, dy: &[T], shape: &[usize]) -> Result<Vec<T>> {
        let mut dx = vec![T::default(); dy.len()];
        self.run(tokens, dy.as_ptr() as *const c_void, dx.as_mut_ptr() as *mut c_void, dy.len(), dx.len(), T::BITS, shape, true)?;
        Ok(dx)
    }

    /// `forward` in place.
    pub fn forward_in_place<T: Real>(&self, tokens: &Tokens, x: &mut [T], shape: &[usize]) -> Result<()> {
        let p = x.as_mut_ptr() as *mut c_void;
        self.run(tokens, p, p, x.len(), x.len(), T::BITS, shape, false)
    }

    /// `backward` in place.
    pub fn backward_in_place<T: Real>(&self, tokens: &Tokens, dy: &mut [T], shape: &[usize]) -> Result<()> {
        let p = dy.as_mut_ptr() as *mut c_void;
        self.run(tokens, p, p, dy.len(), dy.len(), T::BITS, shape, true)
    }

    /// A cos/sin table for the tokens of a tensor shaped like `like` (`shape`; its values
    /// are not read), built once and reused for q, k and every layer with the same tokens
    /// (gpe_rope_table_create). The table copies what it needs: `self` and the token
    /// slices may go afterwards. A float64 table serves f64 tensors; a float32 one f32.
    pub fn table<T: Real>(&self, tokens: &Tokens, like: &[T], shape: &[usize]) -> Result<RopeTable> {
        expect_len("like", like.len(), product(shape))?;
        let mut ls: Vec<i64> = shape.iter().map(|&s| s as i64).collect();
        let tl = real_tensor(like, &mut ls);
        let mut raw = ptr::null_mut();
        self.with_tokens(tokens, |t| {
            // SAFETY: like holds product(shape) values (checked); t's tensors are alive.
            check(unsafe { ffi::gpe_rope_table_create(self.raw, t, &tl, &mut raw) })
        })?;
        Ok(RopeTable { raw, bits: T::BITS })
    }

    // Calls `f` with the C token description (its position tensors alive for the call).
    fn with_tokens(&self, tokens: &Tokens, f: impl FnOnce(&ffi::gpe_rope_tokens) -> Result<()>) -> Result<()> {
        let mut t = ffi::gpe_rope_tokens::init();
        t.layout = match tokens.layout {
            RopeLayout::Bshd => ffi::GPE_ROPE_LAYOUT_BSHD,
            RopeLayout::Sbhd => ffi::GPE_ROPE_LAYOUT_SBHD,
            RopeLayout::Thd => ffi::GPE_ROPE_LAYOUT_THD,
        };
        t.role = if tokens.key { ffi::GPE_ROPE_KEY } else { ffi::GPE_ROPE_QUERY };
        // Position ids are [num_axes, tokens] for multi-axis RoPE, else [tokens].
        let mut ids_shape: Vec<i64> = match tokens.position_ids {
            Some(ids) if self.num_axes > 1 => {
                if ids.len() % self.num_axes != 0 {
                    return Err(invalid(format!(
                        "position_ids has {} values, not a multiple of num_axes {}",
                        ids.len(),
                        self.num_axes
                    )));
                }
                vec![self.num_axes as i64, (ids.len() / self.num_axes) as i64]
            }
            Some(ids) => vec![ids.len() as i64],
            None => vec![0],
        };
        let mut off_shape = [tokens.offsets.map_or(0, |o| o.len() as i64)];
        let mut cu_shape = [tokens.cu_seqlens.map_or(0, |c| c.len() as i64)];
        let ids_t = tokens.position_ids.map(|ids| i64_tensor(ids, &mut ids_shape));
        let off_t = tokens.offsets.map(|o| i64_tensor(o, &mut off_shape));
        let cu_t = tokens.cu_seqlens.map(|c| i64_tensor(c, &mut cu_shape));
        t.position_ids = ids_t.as_ref().map_or(ptr::null(), |t| t as *const _);
        t.offsets = off_t.as_ref().map_or(ptr::null(), |t| t as *const _);
        t.cu_seqlens = cu_t.as_ref().map_or(ptr::null(), |t| t as *const _);
        f(&t)
    }

    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        tokens: &Tokens,
        x: *const c_void,
        out: *mut c_void,
        x_len: usize,
        out_len: usize,
        bits: u8,
        shape: &[usize],
        backward: bool,
    ) -> Result<()> {
        expect_len("x", x_len, product(shape))?;
        expect_len("out", out_len, x_len)?;
        let mut xs: Vec<i64> = shape.iter().map(|&s| s as i64).collect();
        let mut os = xs.clone();
        let tx = tensor(x, ffi::KDL_FLOAT, bits, &mut xs);
        let mut to = tensor(out as *const c_void, ffi::KDL_FLOAT, bits, &mut os);
        self.with_tokens(tokens, |t| {
            // SAFETY: x and out hold product(shape) values (checked); out is x or disjoint
            // from it (a fresh vector); the position slices' shapes are their lengths.
            check(unsafe {
                if backward {
                    ffi::gpe_rope_backward(self.raw, t, &tx, &mut to)
                } else {
                    ffi::gpe_rope_forward(self.raw, t, &tx, &mut to)
                }
            })
        })
    }
}

/// RoPE's cos/sin rows for one token numbering (`Rope::table`, gpe_rope_table): forming
/// the angles costs far more than applying them, so build one per forward pass and apply
/// it to q, k and every layer. Tensors have the table's layout and token count and any
/// number of heads (`shape` as `Rope::forward`).
pub struct RopeTable {
    raw: *mut ffi::gpe_rope_table,
    bits: u8,
}
// SAFETY: tables are immutable after creation (gpe.h, thread safety).
unsafe impl Send for RopeTable {}
unsafe impl Sync for RopeTable {}

impl RopeTable {
    /// Whether the table was built from f64 (it serves f64) or f32 (it serves f32).
    pub fn is_float64(&self) -> bool {
        self.bits == 64
    }

    /// `Rope::forward` with the table's tokens.
    pub fn forward<T: Real>(&self, x: &[T], shape: &[usize]) -> Result<Vec<T>> {
        let mut out = vec![T::default(); x.len()];
        self.run(x.as_ptr() as *const c_void, out.as_mut_ptr() as *mut c_void, x.len(), out.len(), T::BITS, shape, false)?;
        Ok(out)
    }

    /// `Rope::backward` with the table's tokens.
    pub fn backward<T: Real>(&self, dy: &[T], shape: &[usize]) -> Result<Vec<T>> {
        let mut dx = vec![T::default(); dy.len()];
        self.run(dy.as_ptr() as *const c_void, dx.as_mut_ptr() as *mut c_void, dy.len(), dx.len(), T::BITS, shape, true)?;
        Ok(dx)
    }

    /// `forward` in place.
    pub fn forward_in_place<T: Real>(&self, x: &mut [T], shape: &[usize]) -> Result<()> {
        let p = x.as_mut_ptr() as *mut c_void;
        self.run(p, p, x.len(), x.len(), T::BITS, shape, false)
    }

    /// `backward` in place.
    pub fn backward_in_place<T: Real>(&self, dy: &mut [T], shape: &[usize]) -> Result<()> {
        let p = dy.as_mut_ptr() as *mut c_void;
        self.run(p, p, dy.len(), dy.len(), T::BITS, shape, true)
    }

    #[allow(clippy::too_many_arguments)]
    fn run(&self, x: *const c_void, out: *mut c_void, x_len: usize, out_len: usize, bits: u8, shape: &[usize], backward: bool) -> Result<()> {
        expect_len("x", x_len, product(shape))?;
        expect_len("out", out_len, x_len)?;
        let mut xs: Vec<i64> = shape.iter().map(|&s| s as i64).collect();
        let mut os = xs.clone();
        let tx = tensor(x, ffi::KDL_FLOAT, bits, &mut xs);
        let mut to = tensor(out as *const c_void, ffi::KDL_FLOAT, bits, &mut os);
        // SAFETY: x and out hold product(shape) values (checked); out is x or a fresh vector.
        check(unsafe {
            if backward {
                ffi::gpe_rope_table_backward(self.raw, &tx, &mut to)
            } else {
                ffi::gpe_rope_table_forward(self.raw, &tx, &mut to)
            }
        })
    }
}

impl Drop for RopeTable {
    fn drop(&mut self) {
        // SAFETY: created by gpe_rope_table_create.
        unsafe { ffi::gpe_rope_table_destroy(self.raw) }
    }
}

impl Drop for Rope {
    fn drop(&mut self) {
        // SAFETY: created by gpe_rope_create.
        unsafe { ffi::gpe_rope_destroy(self.raw) }
    }
}

// ---- Additive biases ----------------------------------------------------------------

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
    raw: *mut ffi::gpe_bias,
    kind: BiasKind,
    num_heads: usize,
    // The shapes of gpe_bias_accumulate_gradient's grad_a (and grad_b for GRAPE-AP).
    grad_shape: Vec<i64>,
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
        o.num_heads = num_heads as i64;
        if let Some(s) = slopes {
            expect_len("slopes", s.len(), num_heads)?;
            o.slopes = s.as_ptr();
        }
        let mut raw = ptr::null_mut();
        // SAFETY: slopes holds num_heads values (checked).
        check(unsafe { ffi::gpe_bias_create_alibi(&o, &mut raw) })?;
        Ok(Bias { raw, kind: BiasKind::Alibi, num_heads, grad_shape: vec![num_heads as i64] })
    }

    /// T5's bucketed relative bias: table [num_buckets, num_heads].
    pub fn t5(bidirectional: bool, num_buckets: usize, max_distance: i64, table: &Matrix) -> Result<Bias> {
        expect_len("table data", table.data.len(), table.rows * table.cols)?;
        if table.rows != num_buckets {
            return Err(invalid(format!("table has {} rows; expected num_buckets = {}", table.rows, num_buckets)));
        }
        let mut o = ffi::gpe_t5_options::init();
        o.bidirectional = bidirectional as i32;
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
        expect_len("gate_logits data", gate_logits.data.len(), gate_logits.rows * gate_logits.cols)?;
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
        if num_heads == 0 || rank == 0 || w.len() % (num_heads * rank) != 0 {
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
        o.length = length as i64;
        o.num_heads = num_heads as i64;
        o.rank = rank as i64;
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
            grad_shape: vec![length as i64, num_heads as i64, rank as i64],
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
        o.num_heads = num_heads as i64;
        o.head_dim = head_dim as i64;
        if let Some(s) = slopes {
            expect_len("slopes", s.len(), num_heads)?;
            o.slopes = s.as_ptr();
        }
        let mut grad_shape = vec![num_heads as i64];
        if let Some((first_position, logits)) = gates {
            expect_len("gate_logits data", logits.data.len(), logits.rows * logits.cols)?;
            if logits.cols != num_heads {
                return Err(invalid(format!("gate_logits has {} columns; expected num_heads = {}", logits.cols, num_heads)));
            }
            o.gated = 1;
            o.length = logits.rows as i64;
            o.first_position = first_position;
            o.gate_logits = logits.data.as_ptr();
            grad_shape = vec![logits.rows as i64, num_heads as i64];
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

// ---- Attention ----------------------------------------------------------------------

/// How q, k and v are laid out (gpe_attention_forward).
#[derive(Clone, Copy, Debug)]
pub enum AttentionLayout<'a> {
    /// q [batch, seq_q, heads_q, head_dim]; k, v [batch, seq_k, heads_kv, head_dim].
    Padded { batch: usize, seq_q: usize, seq_k: usize },
    /// q [tokens_q, heads_q, head_dim]; k, v [tokens_k, heads_kv, head_dim]; sequences
    /// delimited by the cumulative lengths ([batch + 1], from 0).
    Packed { cu_seqlens_q: &'a [i64], cu_seqlens_k: &'a [i64] },
}

/// Head counts and size: heads_q a multiple of heads_kv (GQA, MQA).
#[derive(Clone, Copy, Debug)]
pub struct AttentionHeads {
    pub heads_q: usize,
    pub heads_kv: usize,
    pub head_dim: usize,
}

/// gpe_attention_options: at most one of RoPE (rope_dim > 0), GRAPE-M, an algebraic
/// encoding (sequence, tree or grid), and at most one bias, all applied inside the kernel.
///
/// Structured positions (the encoding's group element is not one integer; q_positions /
/// k_positions, or the default, still order the tokens for causal masks, biases and Shaw
/// labels): per-axis coordinates `q_axes` / `k_axes` ([tokens, axes] row-major) for axial
/// RoPE (`rope_axes` 2 or 3), M-RoPE (`rope_sections`) and algebraic grids
/// (`algebraic_grid`), where axes is the encoding's axis count (rope_sections.len(),
/// else rope_axes when > 1, else algebraic_grid.len()); tree addresses `q_tree` /
/// `k_tree` (one list of 0-based child indices per token) for algebraic trees
/// (`algebraic_tree`). Shaw et al.'s relative labels: `shaw_key_table` and / or
/// `shaw_value_table` ([2 shaw_max_distance + 1, head_dim], row r for label r - k,
/// shared by every head) add scale <T q_i, aK_r> to s_ij and sum_j p_ij aV_r to o_i, with
/// r = clip(p_j - p_i, -k, k); `attention_backward_with_parameters` returns their
/// gradients.
#[derive(Clone, Copy)]
pub struct AttentionOptions<'a> {
    pub causal: bool,
    /// 0: 1 / sqrt(head_dim).
    pub softmax_scale: f64,
    /// 0: every hardware thread.
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
        }
    }
}

/// Gradients of `attention_backward`, shaped like q, k and v.
pub struct AttentionGrads<T> {
    pub dq: Vec<T>,
    pub dk: Vec<T>,
    pub dv: Vec<T>,
}

// The tensors' shapes and token counts of a layout.
struct Shapes {
    q: Vec<i64>,
    kv: Vec<i64>,
    lse: [i64; 2],
}

fn shapes(layout: &AttentionLayout, heads: &AttentionHeads) -> Result<Shapes> {
    let (hq, hk, d) = (heads.heads_q as i64, heads.heads_kv as i64, heads.head_dim as i64);
    let last = |cu: &[i64], name: &str| -> Result<i64> {
        match cu.last() {
            Some(&t) if t >= 0 => Ok(t),
            _ => Err(invalid(format!("{} must have batch + 1 >= 1 values, the last >= 0", name))),
        }
    };
    Ok(match *layout {
        AttentionLayout::Padded { batch, seq_q, seq_k } => Shapes {
            q: vec![batch as i64, seq_q as i64, hq, d],
            kv: vec![batch as i64, seq_k as i64, hk, d],
            lse: [(batch * seq_q) as i64, hq],
        },
        AttentionLayout::Packed { cu_seqlens_q, cu_seqlens_k } => {
            let (tq, tk) = (last(cu_seqlens_q, "cu_seqlens_q")?, last(cu_seqlens_k, "cu_seqlens_k")?);
            Shapes { q: vec![tq, hq, d], kv: vec![tk, hk, d], lse: [tq, hq] }
        }
    })
}

fn count(shape: &[i64]) -> usize {
    shape.iter().map(|&s| s as usize).product()
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
    expect_len("k", k.len(), count(&s.kv))?;
    expect_len("v", v.len(), count(&s.kv))?;
    expect_len("d_o", d_o.len(), q.len())?;
    if let Some((o, lse)) = forward {
        expect_len("o", o.len(), q.len())?;
        expect_len("lse", lse.len(), count(&s.lse))?;
    }
    let g = AttentionGrads { dq: vec![T::default(); q.len()], dk: vec![T::default(); k.len()], dv: vec![T::default(); v.len()] };
    Ok((s, g))
}

// Skew generators as one float64 [count, m, m] row-major buffer (all square, one size).
fn skew_stack(name: &str, skews: &[Matrix]) -> Result<(Vec<f64>, [i64; 3])> {
    let m = skews.first().map_or(0, |s| s.rows);
    let mut flat = Vec::with_capacity(skews.len() * m * m);
    for (i, s) in skews.iter().enumerate() {
        if s.rows != m || s.cols != m || s.data.len() != m * m {
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

// The axis count per-axis coordinates are read with (AttentionOptions' documentation).
fn position_axes(options: &AttentionOptions) -> usize {
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
fn with_options(options: &AttentionOptions, layout: &AttentionLayout, f: impl FnOnce(&ffi::gpe_attention_options) -> Result<()>) -> Result<()> {
    let mut o = ffi::gpe_attention_options::init();
    o.causal = options.causal as i32;
    o.softmax_scale = options.softmax_scale;
    o.num_threads = options.num_threads;
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
        AttentionLayout::Padded { .. } => (None, None),
    };
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
    f(&o)
}

/// o = softmax(scale <T(p_i) q_i, T(p_j) k_j> + b(p_i, p_j)) v, and the per-row
/// log-sum-exp lse [tokens_q, heads_q] (-inf for rows with no allowed key). float32
/// runs the optimised kernels; float64 the exact reference.
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
    expect_len("k", k.len(), count(&s.kv))?;
    expect_len("v", v.len(), count(&s.kv))?;
    let mut o = vec![T::default(); q.len()];
    let mut lse = vec![T::default(); count(&s.lse)];
    let (mut ks, mut vs, mut os) = (s.kv.clone(), s.kv.clone(), s.q.clone());
    let tq = real_tensor(q, &mut s.q);
    let tk = real_tensor(k, &mut ks);
    let tv = real_tensor(v, &mut vs);
    let mut to = real_tensor_mut(&mut o, &mut os);
    let mut tl = real_tensor_mut(&mut lse, &mut s.lse);
    // SAFETY: every slice holds its shape's values (checked); outputs are fresh vectors.
    with_options(options, layout, |c| check(unsafe { ffi::gpe_attention_forward(c, &tq, &tk, &tv, &mut to, &mut tl) }))?;
    Ok((o, lse))
}

/// dq, dk, dv from d_o (shaped like q), with respect to q, k and v before the encoding.
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
    let (mut ks, mut vs, mut os, mut dos) = (s.kv.clone(), s.kv.clone(), s.q.clone(), s.q.clone());
    let (mut dqs, mut dks, mut dvs) = (s.q.clone(), s.kv.clone(), s.kv.clone());
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

/// The Shaw tables' gradients from `attention_backward_v2`, [2 shaw_max_distance + 1,
/// head_dim] each, for the tables the options carry (None for a table not given).
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
        key_table: options.shaw_key_table.map(|t| Matrix::zeros(t.rows, t.cols)),
        value_table: options.shaw_value_table.map(|t| Matrix::zeros(t.rows, t.cols)),
    };
    let (mut ks, mut vs, mut os, mut dos) = (s.kv.clone(), s.kv.clone(), s.q.clone(), s.q.clone());
    let (mut dqs, mut dks, mut dvs) = (s.q.clone(), s.kv.clone(), s.kv.clone());
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
/// and the Shaw tables ([2 shaw_max_distance + 1, head_dim]).
#[derive(Clone, Debug, Default)]
pub struct ParameterGrads {
    pub bias_a: Option<Vec<f64>>,
    pub bias_b: Option<Vec<f64>>,
    pub grape_a: Option<Matrix>,
    pub grape_b: Option<Matrix>,
    pub grape_omega: Option<Vec<f64>>,
    /// Shaw tables' gradients, [2 shaw_max_distance + 1, head_dim], for the tables given.
    pub shaw_key_table: Option<Matrix>,
    pub shaw_value_table: Option<Matrix>,
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
    p.shaw_key_table = options.shaw_key_table.map(|t| Matrix::zeros(t.rows, t.cols));
    p.shaw_value_table = options.shaw_value_table.map(|t| Matrix::zeros(t.rows, t.cols));
    let (mut ks, mut vs, mut os, mut dos) = (s.kv.clone(), s.kv.clone(), s.q.clone(), s.q.clone());
    let (mut dqs, mut dks, mut dvs) = (s.q.clone(), s.kv.clone(), s.kv.clone());
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
    let mut grads = ffi::gpe_attention_param_grads::init();
    grads.d_bias_a = tba.as_mut().map_or(ptr::null_mut(), |t| t as *mut _);
    grads.d_bias_b = tbb.as_mut().map_or(ptr::null_mut(), |t| t as *mut _);
    grads.d_grape_a = tga.as_mut().map_or(ptr::null_mut(), |t| t as *mut _);
    grads.d_grape_b = tgb.as_mut().map_or(ptr::null_mut(), |t| t as *mut _);
    grads.d_grape_omega = tgo.as_mut().map_or(ptr::null_mut(), |t| t as *mut _);
    grads.d_shaw_key_table = tsk.as_mut().map_or(ptr::null_mut(), |t| t as *mut _);
    grads.d_shaw_value_table = tsv.as_mut().map_or(ptr::null_mut(), |t| t as *mut _);
    let to_ptr = to.as_ref().map_or(ptr::null(), |t| t as *const _);
    let tl_ptr = tl.as_ref().map_or(ptr::null(), |t| t as *const _);
    // SAFETY: every slice holds its shape's values (checked); gradients are fresh buffers.
    with_options(options, layout, |c| {
        check(unsafe {
            ffi::gpe_attention_backward_with_parameters(c, &tq, &tk, &tv, to_ptr, tl_ptr, &tdo, &mut tdq, &mut tdk, &mut tdv, &grads)
        })
    })?;
    Ok((g, p))
}
