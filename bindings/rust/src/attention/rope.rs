//! RoPE (gpe.h's "RoPE" section): `Rope` with its frequency schedules (`Schedule`,
//! `Schedule::published`), multi-axis positions (`Axes`) and xPos, the token layouts of
//! q and k tensors (`Tokens`), and `RopeTable`, the cos/sin rows built once and reused.

use std::os::raw::c_void;
use std::ptr;

use super::pairing_code;
use crate::{check, checked_count, expect_len, ffi, i64_tensor, invalid, real_tensor, tensor, Pairing, Real, Result};

// A caller's tensor shape: its element count and its extents as int64_t. Each extent and
// the count must fit int64_t (issue 24: `s as i64` wrapped, and the product overflowed),
// and the number of extents DLTensor.ndim (an i32).
fn shape_i64(name: &str, shape: &[usize]) -> Result<(usize, Vec<i64>)> {
    if shape.len() > i32::MAX as usize {
        return Err(invalid(format!("{} has {} axes; DLTensor.ndim holds at most {}", name, shape.len(), i32::MAX)));
    }
    let n = checked_count(name, shape)?;
    Ok((n, shape.iter().map(|&s| s as i64).collect()))
}

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
    /// attention temperature (overridden by `attention_factor` when given). `truncate`:
    /// the ramp's ends floored / ceiled (the published default; gpt-oss publishes false);
    /// `mscale`: DeepSeek's (mscale, mscale_all_dim), attention factor
    /// (0.1 mscale ln s + 1) / (0.1 mscale_all_dim ln s + 1).
    Yarn {
        factor: f64,
        original_max_position: i64,
        beta_fast: f64,
        beta_slow: f64,
        attention_factor: Option<f64>,
        truncate: bool,
        mscale: Option<(f64, f64)>,
    },
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
                truncate: o.yarn_truncate != 0,
                mscale: if o.has_mscale != 0 { Some((o.mscale, o.mscale_all_dim)) } else { None },
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
    pub(crate) raw: *mut ffi::gpe_rope,
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
            Schedule::Yarn { factor, original_max_position, beta_fast, beta_slow, attention_factor, truncate, mscale } => {
                o.schedule = ffi::GPE_ROPE_YARN;
                o.factor = *factor;
                o.original_max_position = *original_max_position;
                o.beta_fast = *beta_fast;
                o.beta_slow = *beta_slow;
                o.yarn_truncate = *truncate as i32;
                if let Some((m, all)) = mscale {
                    o.has_mscale = 1;
                    o.mscale = *m;
                    o.mscale_all_dim = *all;
                }
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
        let (n, mut ls) = shape_i64("shape", shape)?;
        expect_len("like", like.len(), n)?;
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
        let (n, mut xs) = shape_i64("shape", shape)?;
        expect_len("x", x_len, n)?;
        expect_len("out", out_len, x_len)?;
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
        let (n, mut xs) = shape_i64("shape", shape)?;
        expect_len("x", x_len, n)?;
        expect_len("out", out_len, x_len)?;
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
