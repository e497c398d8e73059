//! GroupPE from Rust: safe bindings to libgpe's stable C ABI (c_api/include/gpe/gpe.h).
//!
//! Every fallible call returns `Result<_, Error>`; the error carries the library's status
//! and its message (`gpe_last_error_message`, read on the failing thread). Lengths of
//! Rust slices are checked against the shapes before anything reaches C, so no safe call
//! can make the library read or write outside a slice. Matrices are row-major; batches
//! are `[n, dim]` row-major slices with one int64 position per row. Handles are
//! immutable after creation (gpe.h's thread-safety paragraph) and so `Send + Sync`.
//!
//! Linking: build.rs links `-lgpe`, searching `GPE_LIB_DIR` when set.

pub mod attention;
pub mod coordinate;
pub mod ffi;
pub mod inr;
pub mod sequence;
pub mod thread_pool;

// Listed as re-exports of gpe::attention, where they are documented (rustdoc would
// otherwise copy their pages here: their modules under attention/ are private).
#[doc(no_inline)]
pub use attention::{
    attention_backward, attention_backward_v2, attention_backward_with_parameters, attention_forward, attention_forward_kv16, AttentionGrads, ParameterGrads,
    ShawTableGrads, AttentionHeads, KvCache, AttentionLayout, AttentionOptions, AttnMask, Bf16Arithmetic, Float32Arithmetic, MaskValues, Axes, Bias, BiasKind, Rope,
    RopeLayout, RopeOptions, RopeTable, Schedule, ScheduleKind, Tokens, Xpos,
};

pub use coordinate::{
    bessel_j, condition_number, embedded_distance_matrix, embedder_distance, embedder_stable_rank, fit_blended_2d, fit_separable_2d_with,
    fit_separable_3d, laplacian_eigenvectors, predict_blended_2d, predict_separable_3d, BesselTerm, BlendedFit, BlendedFitOptions,
    CoordinateEncoder, Embedder, FourierKind, FourierOptions, FrequencyConvention, LaplacianKind, SeparableFitOptions, ShiftedForm,
    So2BesselOptions, Tensor3,
};
pub use inr::{
    fit_dense_adam, fit_separable_adam_2d, grid_coordinates, mlp_fit, mlp_fit_validated, mlp_fit_validated_with_progress, mlp_init, mlp_num_evaluations, mlp_num_parameters,
    mlp_predict, mse, psnr, random_split, regular_grid_split, synthetic_image, synthetic_vector_field, write_jpeg, write_png, Image,
    LinearAdamOptions, LinearFit, MlpFit, MlpOptions, MlpValidatedFit, MlpValidation, Split, SyntheticTask,
};
pub use sequence::{
    algebraic_periodic_apply, locality_scale, shaw_value_output, shaw_value_output_backward, transformer_xl_score_terms,
    transformer_xl_score_terms_backward, AlgebraicGrid, AlgebraicTree, TransformerXl, TransformerXlGrads,
};
pub use thread_pool::{set_thread_pool, thread_pool_num_threads, ThreadPool};

use std::ffi::CStr;
use std::fmt;
use std::os::raw::c_void;
use std::ptr;

/// The library's status codes (numeric values fixed by gpe.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    InvalidArgument,
    OutOfRange,
    Unsupported,
    OutOfMemory,
    Internal,
    VersionMismatch,
    Unknown(i32),
}

impl Status {
    fn from_code(code: i32) -> Status {
        match code {
            ffi::GPE_ERROR_INVALID_ARGUMENT => Status::InvalidArgument,
            ffi::GPE_ERROR_OUT_OF_RANGE => Status::OutOfRange,
            ffi::GPE_ERROR_UNSUPPORTED => Status::Unsupported,
            ffi::GPE_ERROR_OUT_OF_MEMORY => Status::OutOfMemory,
            ffi::GPE_ERROR_INTERNAL => Status::Internal,
            ffi::GPE_ERROR_VERSION_MISMATCH => Status::VersionMismatch,
            other => Status::Unknown(other),
        }
    }
}

/// A failed call: the status, its gpe.h name (e.g. "GPE_ERROR_INVALID_ARGUMENT") and
/// the library's message (or this crate's, for a slice whose length mismatches).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub status: Status,
    pub code: i32,
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", status_name(self.code), self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

fn check(code: ffi::gpe_status) -> Result<()> {
    if code == ffi::GPE_OK {
        return Ok(());
    }
    // SAFETY: never NULL; valid until the next failing call on this thread.
    let message = unsafe { CStr::from_ptr(ffi::gpe_last_error_message()) }.to_string_lossy().into_owned();
    Err(Error { status: Status::from_code(code), code, message })
}

fn invalid(message: String) -> Error {
    Error { status: Status::InvalidArgument, code: ffi::GPE_ERROR_INVALID_ARGUMENT, message }
}

// A caller's count or size as the C ABI's int64_t (issue 24): above i64::MAX it is an
// InvalidArgument error naming the argument, never a wrap to a negative value. Lengths of
// existing slices need no check: a slice holds at most isize::MAX bytes, so its len() fits.
fn to_i64(value: usize, name: &str) -> Result<i64> {
    i64::try_from(value).map_err(|_| invalid(format!("{} is {}; the C ABI's int64_t holds at most {}", name, value, i64::MAX)))
}

// The element count of a shape given by the caller, each extent within int64_t and the
// product within i64::MAX / 8, the C ABI's bound on a tensor's elements (and what a Vec
// of 8-byte elements can hold): an InvalidArgument error instead of a wrapped product or
// a "capacity overflow" panic when the output is allocated.
fn checked_count(name: &str, dims: &[usize]) -> Result<usize> {
    const MAX: usize = (i64::MAX / 8) as usize;
    let mut n: usize = 1;
    for &d in dims {
        to_i64(d, name)?;
        n = n
            .checked_mul(d)
            .filter(|&n| n <= MAX)
            .ok_or_else(|| invalid(format!("{} has shape {:?}: its element count exceeds the C ABI's bound for int64_t-indexed tensors of 8-byte elements ({} at most)", name, dims, MAX)))?;
    }
    Ok(n)
}

fn expect_len(name: &str, got: usize, want: usize) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(invalid(format!("{} has {} values; expected {}", name, got, want)))
    }
}

/// gpe_status_name: "GPE_OK", "GPE_ERROR_INVALID_ARGUMENT", ...
pub fn status_name(code: i32) -> String {
    // SAFETY: static storage, never NULL.
    unsafe { CStr::from_ptr(ffi::gpe_status_name(code)) }.to_string_lossy().into_owned()
}

/// (MAJOR * 10000 + MINOR * 100 + PATCH, "MAJOR.MINOR.PATCH") of the loaded library.
pub fn version() -> (i32, String) {
    // SAFETY: no arguments; the string has static storage.
    unsafe { (ffi::gpe_version(), CStr::from_ptr(ffi::gpe_version_string()).to_string_lossy().into_owned()) }
}

/// A dense row-major float64 matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct Matrix {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<f64>,
}

impl Matrix {
    pub fn new(rows: usize, cols: usize, data: Vec<f64>) -> Result<Matrix> {
        expect_len("matrix data", data.len(), checked_count("matrix", &[rows, cols])?)?;
        Ok(Matrix { rows, cols, data })
    }
    /// Panics when rows * cols overflows usize (as `vec!` does past its capacity).
    pub fn zeros(rows: usize, cols: usize) -> Matrix {
        let n = rows.checked_mul(cols).expect("Matrix::zeros: rows * cols overflows usize");
        Matrix { rows, cols, data: vec![0.0; n] }
    }
    // An output of a size the caller's arguments decide: refused (InvalidArgument, as
    // checked_count) where rows * cols passes the C ABI's bound, instead of a panic or an
    // allocation failure before the library could check the call.
    pub(crate) fn zeros_for(name: &str, rows: usize, cols: usize) -> Result<Matrix> {
        let n = checked_count(name, &[rows, cols])?;
        Ok(Matrix { rows, cols, data: vec![0.0; n] })
    }
    pub fn at(&self, r: usize, c: usize) -> f64 {
        self.data[r * self.cols + c]
    }
}

/// Element types of batches: float32 and float64 (all arithmetic is in double).
pub trait Real: Copy + Default + private::Sealed {
    const BITS: u8;
}
impl Real for f32 {
    const BITS: u8 = 32;
}
impl Real for f64 {
    const BITS: u8 = 64;
}
mod private {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

// A compact row-major DLTensor over `data`; `shape` must outlive the call. Shapes are
// this crate's arrays of at most 4 extents or Rope's caller-given shape, whose length
// attention/rope.rs's `shape_i64` checks, so `shape.len() as i32` cannot wrap.
fn tensor(data: *const c_void, code: u8, bits: u8, shape: &mut [i64]) -> ffi::DLTensor {
    ffi::DLTensor {
        data: data as *mut c_void,
        device: ffi::DLDevice { device_type: ffi::KDL_CPU, device_id: 0 },
        ndim: shape.len() as i32,
        dtype: ffi::DLDataType { code, bits, lanes: 1 },
        shape: shape.as_mut_ptr(),
        strides: ptr::null_mut(),
        byte_offset: 0,
    }
}
fn f64_tensor(data: &[f64], shape: &mut [i64]) -> ffi::DLTensor {
    tensor(data.as_ptr() as *const c_void, ffi::KDL_FLOAT, 64, shape)
}
fn real_tensor<T: Real>(data: &[T], shape: &mut [i64]) -> ffi::DLTensor {
    tensor(data.as_ptr() as *const c_void, ffi::KDL_FLOAT, T::BITS, shape)
}
fn real_tensor_mut<T: Real>(data: &mut [T], shape: &mut [i64]) -> ffi::DLTensor {
    tensor(data.as_mut_ptr() as *const c_void, ffi::KDL_FLOAT, T::BITS, shape)
}
fn f64_tensor_mut(data: &mut [f64], shape: &mut [i64]) -> ffi::DLTensor {
    tensor(data.as_mut_ptr() as *const c_void, ffi::KDL_FLOAT, 64, shape)
}
fn matrix_tensor_mut(m: &mut Matrix, shape: &mut [i64; 2]) -> Result<ffi::DLTensor> {
    expect_len("matrix data", m.data.len(), checked_count("matrix", &[m.rows, m.cols])?)?;
    *shape = [m.rows as i64, m.cols as i64]; // checked_count: both fit int64_t
    Ok(f64_tensor_mut(&mut m.data, shape))
}
fn i64_tensor(data: &[i64], shape: &mut [i64]) -> ffi::DLTensor {
    tensor(data.as_ptr() as *const c_void, ffi::KDL_INT, 64, shape)
}
fn matrix_tensor(m: &Matrix, shape: &mut [i64; 2]) -> Result<ffi::DLTensor> {
    expect_len("matrix data", m.data.len(), checked_count("matrix", &[m.rows, m.cols])?)?;
    *shape = [m.rows as i64, m.cols as i64]; // checked_count: both fit int64_t
    Ok(f64_tensor(&m.data, shape))
}

// ---- SO(n) representations ----------------------------------------------------------

/// Pairing of features into rotation planes (GPE_PAIRING_*).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pairing {
    /// (2i, 2i + 1): RoFormer, GPT-J.
    Interleaved,
    /// (i, i + rotary_dim / 2): GPT-NeoX, Llama.
    HalfSplit,
}

/// Options of `SoRep::planes` (RoPE): see gpe_so_planes_options.
#[derive(Clone, Debug)]
pub struct PlanesOptions {
    pub dim: i64,
    /// 0 means dim.
    pub rotary_dim: i64,
    pub pairing: Pairing,
    /// theta_i = base^(-2i / rotary_dim) unless `thetas` is given.
    pub base: f64,
    pub thetas: Option<Vec<f64>>,
}

impl PlanesOptions {
    pub fn new(dim: i64) -> PlanesOptions {
        PlanesOptions { dim, rotary_dim: 0, pairing: Pairing::Interleaved, base: 10000.0, thetas: None }
    }
}

/// rho(p) = exp(p S) for a skew-symmetric S: RoPE planes or one rank-2 generator.
pub struct SoRep {
    raw: *mut ffi::gpe_so_rep,
    dim: usize,
}
// SAFETY: handles are immutable after creation (gpe.h, thread safety).
unsafe impl Send for SoRep {}
unsafe impl Sync for SoRep {}

impl SoRep {
    pub fn planes(options: &PlanesOptions) -> Result<SoRep> {
        let mut o = ffi::gpe_so_planes_options::init();
        o.dim = options.dim;
        o.rotary_dim = options.rotary_dim;
        o.pairing = match options.pairing {
            Pairing::Interleaved => ffi::GPE_PAIRING_INTERLEAVED,
            Pairing::HalfSplit => ffi::GPE_PAIRING_HALF_SPLIT,
        };
        o.base = options.base;
        if let Some(t) = &options.thetas {
            let rotary = if options.rotary_dim == 0 { options.dim } else { options.rotary_dim };
            if rotary >= 0 {
                expect_len("thetas", t.len(), (rotary / 2) as usize)?;
            }
            o.thetas = t.as_ptr();
        }
        let mut raw = ptr::null_mut();
        // SAFETY: o and thetas (checked length) outlive the call; raw is a valid out pointer.
        check(unsafe { ffi::gpe_so_rep_create_planes(&o, &mut raw) })?;
        SoRep::wrap(raw)
    }

    /// S = omega (a b^T - b a^T).
    pub fn rank2(a: &[f64], b: &[f64], omega: f64) -> Result<SoRep> {
        expect_len("b", b.len(), a.len())?;
        let mut o = ffi::gpe_so_rank2_options::init();
        o.dim = a.len() as i64;
        o.a = a.as_ptr();
        o.b = b.as_ptr();
        o.omega = omega;
        let mut raw = ptr::null_mut();
        // SAFETY: a and b hold dim values each.
        check(unsafe { ffi::gpe_so_rep_create_rank2(&o, &mut raw) })?;
        SoRep::wrap(raw)
    }

    fn wrap(raw: *mut ffi::gpe_so_rep) -> Result<SoRep> {
        let mut dim = 0i64;
        let mut rep = SoRep { raw, dim: 0 };
        // SAFETY: raw is a live handle (destroyed by `rep` on error).
        check(unsafe { ffi::gpe_so_rep_dim(raw, &mut dim) })?;
        rep.dim = dim as usize;
        Ok(rep)
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// out[n, :] = rho(positions[n]) x[n, :]; x is [positions.len(), dim] row-major.
    pub fn apply<T: Real>(&self, positions: &[i64], x: &[T]) -> Result<Vec<T>> {
        let mut out = vec![T::default(); x.len()];
        self.apply_into(positions, x, &mut out)?;
        Ok(out)
    }

    pub fn apply_into<T: Real>(&self, positions: &[i64], x: &[T], out: &mut [T]) -> Result<()> {
        expect_len("x", x.len(), positions.len() * self.dim)?;
        expect_len("out", out.len(), x.len())?;
        let (mut ps, mut xs, mut os) = ([positions.len() as i64], [positions.len() as i64, self.dim as i64], [0i64; 2]);
        os.copy_from_slice(&xs);
        let tp = i64_tensor(positions, &mut ps);
        let tx = real_tensor(x, &mut xs);
        let mut to = real_tensor_mut(out, &mut os);
        // SAFETY: lengths checked against the shapes above.
        check(unsafe { ffi::gpe_so_rep_apply(self.raw, &tp, &tx, &mut to) })
    }

    /// The dense matrix rho(position), dim x dim.
    pub fn matrix(&self, position: i64) -> Result<Matrix> {
        let mut m = Matrix::zeros(self.dim, self.dim);
        let mut s = [0i64; 2];
        let mut t = matrix_tensor_mut(&mut m, &mut s)?;
        // SAFETY: m holds dim * dim values.
        check(unsafe { ffi::gpe_so_rep_matrix(self.raw, position, &mut t) })?;
        Ok(m)
    }
}

impl Drop for SoRep {
    fn drop(&mut self) {
        // SAFETY: created by gpe_so_rep_create_*; destroy(NULL) is harmless.
        unsafe { ffi::gpe_so_rep_destroy(self.raw) }
    }
}

// ---- Sequence encodings -------------------------------------------------------------

/// Sinusoidal absolute encoding (Vaswani et al., sec. 3.5): [positions.len(), dim].
pub fn sinusoidal_encode<T: Real>(base: f64, positions: &[i64], dim: usize) -> Result<Vec<T>> {
    let mut o = ffi::gpe_sinusoidal_options::init();
    o.base = base;
    let d = to_i64(dim, "dim")?;
    let mut out = vec![T::default(); checked_count("output", &[positions.len(), dim])?];
    let (mut ps, mut os) = ([positions.len() as i64], [positions.len() as i64, d]);
    let tp = i64_tensor(positions, &mut ps);
    let mut to = real_tensor_mut(&mut out, &mut os);
    // SAFETY: out holds n * dim values.
    check(unsafe { ffi::gpe_sinusoidal_encode(&o, &tp, &mut to) })?;
    Ok(out)
}

/// A learned absolute position table (Gehring et al.), copied at creation.
pub struct LearnedPositions {
    raw: *mut ffi::gpe_learned_positions,
    rows: usize,
    dim: usize,
}
// SAFETY: immutable after creation.
unsafe impl Send for LearnedPositions {}
unsafe impl Sync for LearnedPositions {}

impl LearnedPositions {
    pub fn new(table: &Matrix) -> Result<LearnedPositions> {
        let mut s = [0i64; 2];
        let t = matrix_tensor(table, &mut s)?;
        let mut raw = ptr::null_mut();
        // SAFETY: the table's length is checked.
        check(unsafe { ffi::gpe_learned_positions_create(&t, &mut raw) })?;
        let mut h = LearnedPositions { raw, rows: 0, dim: 0 };
        let (mut r, mut d) = (0i64, 0i64);
        // SAFETY: a live handle.
        check(unsafe { ffi::gpe_learned_positions_shape(raw, &mut r, &mut d) })?;
        h.rows = r as usize;
        h.dim = d as usize;
        Ok(h)
    }
    /// (max_positions, dim).
    pub fn shape(&self) -> (usize, usize) {
        (self.rows, self.dim)
    }
    /// Rows of the table at `positions` (0 <= p < max_positions, else an error).
    pub fn lookup(&self, positions: &[i64]) -> Result<Vec<f64>> {
        let mut out = vec![0.0; positions.len() * self.dim];
        let (mut ps, mut os) = ([positions.len() as i64], [positions.len() as i64, self.dim as i64]);
        let tp = i64_tensor(positions, &mut ps);
        let mut to = f64_tensor_mut(&mut out, &mut os);
        // SAFETY: out holds n * dim values.
        check(unsafe { ffi::gpe_learned_positions_lookup(self.raw, &tp, &mut to) })?;
        Ok(out)
    }
    /// grad_table[positions[n], :] += grad_out[n, :] (accumulates into grad_table).
    pub fn backward(&self, positions: &[i64], grad_out: &[f64], grad_table: &mut Matrix) -> Result<()> {
        expect_len("grad_out", grad_out.len(), positions.len() * self.dim)?;
        let (mut ps, mut gs, mut ts) = ([positions.len() as i64], [positions.len() as i64, self.dim as i64], [0i64; 2]);
        let tp = i64_tensor(positions, &mut ps);
        let tg = f64_tensor(grad_out, &mut gs);
        let mut tt = matrix_tensor_mut(grad_table, &mut ts)?;
        // SAFETY: lengths checked; grad_table is exclusively borrowed.
        check(unsafe { ffi::gpe_learned_positions_backward(self.raw, &tp, &tg, &mut tt) })
    }
}

impl Drop for LearnedPositions {
    fn drop(&mut self) {
        // SAFETY: created by gpe_learned_positions_create.
        unsafe { ffi::gpe_learned_positions_destroy(self.raw) }
    }
}

/// Gradients of a GRAPE-M batch, summed over the batch.
#[derive(Clone, Debug)]
pub struct GrapeMGrads {
    pub x: Vec<f64>,
    /// [m, dim].
    pub a: Matrix,
    /// [m, dim].
    pub b: Matrix,
    /// [m].
    pub omega: Vec<f64>,
}

/// GRAPE-M: G(p) = prod_k exp(p omega_k (a_k b_k^T - b_k a_k^T)) (Zhang et al., GRAPE, "Multiplicative GRAPE").
pub struct GrapeM {
    raw: *mut ffi::gpe_grape_m,
    dim: usize,
    m: usize,
}
// SAFETY: immutable after creation.
unsafe impl Send for GrapeM {}
unsafe impl Sync for GrapeM {}

impl GrapeM {
    /// a, b: [m, dim]; omega: m values.
    pub fn new(a: &Matrix, b: &Matrix, omega: &[f64]) -> Result<GrapeM> {
        let n = checked_count("a", &[a.rows, a.cols])?;
        expect_len("a", a.data.len(), n)?;
        expect_len("b", b.data.len(), n)?;
        expect_len("omega", omega.len(), a.rows)?;
        if b.rows != a.rows || b.cols != a.cols {
            return Err(invalid(format!("b is {} x {}; a is {} x {}", b.rows, b.cols, a.rows, a.cols)));
        }
        let mut o = ffi::gpe_grape_m_options::init();
        o.dim = to_i64(a.cols, "a's columns")?;
        o.num_generators = to_i64(a.rows, "a's rows")?;
        o.a = a.data.as_ptr();
        o.b = b.data.as_ptr();
        o.omega = omega.as_ptr();
        let mut raw = ptr::null_mut();
        // SAFETY: lengths checked above.
        check(unsafe { ffi::gpe_grape_m_create(&o, &mut raw) })?;
        Ok(GrapeM { raw, dim: a.cols, m: a.rows })
    }
    /// (dim, num_generators).
    pub fn shape(&self) -> Result<(usize, usize)> {
        let (mut d, mut m) = (0i64, 0i64);
        // SAFETY: a live handle.
        check(unsafe { ffi::gpe_grape_m_shape(self.raw, &mut d, &mut m) })?;
        Ok((d as usize, m as usize))
    }
    pub fn apply<T: Real>(&self, positions: &[i64], x: &[T]) -> Result<Vec<T>> {
        expect_len("x", x.len(), positions.len() * self.dim)?;
        let mut out = vec![T::default(); x.len()];
        let (mut ps, mut xs, mut os) = ([positions.len() as i64], [positions.len() as i64, self.dim as i64], [positions.len() as i64, self.dim as i64]);
        let tp = i64_tensor(positions, &mut ps);
        let tx = real_tensor(x, &mut xs);
        let mut to = real_tensor_mut(&mut out, &mut os);
        // SAFETY: lengths checked.
        check(unsafe { ffi::gpe_grape_m_apply(self.raw, &tp, &tx, &mut to) })?;
        Ok(out)
    }
    pub fn matrix(&self, position: i64) -> Result<Matrix> {
        let mut m = Matrix::zeros(self.dim, self.dim);
        let mut s = [0i64; 2];
        let mut t = matrix_tensor_mut(&mut m, &mut s)?;
        // SAFETY: m holds dim * dim values.
        check(unsafe { ffi::gpe_grape_m_matrix(self.raw, position, &mut t) })?;
        Ok(m)
    }
    /// Backward of `apply` (float64) given grad_out = dL/dout.
    pub fn backward(&self, positions: &[i64], x: &[f64], grad_out: &[f64]) -> Result<GrapeMGrads> {
        expect_len("x", x.len(), positions.len() * self.dim)?;
        expect_len("grad_out", grad_out.len(), x.len())?;
        let mut g = GrapeMGrads {
            x: vec![0.0; x.len()],
            a: Matrix::zeros(self.m, self.dim),
            b: Matrix::zeros(self.m, self.dim),
            omega: vec![0.0; self.m],
        };
        let n = positions.len() as i64;
        let (mut ps, mut xs, mut gs, mut gxs) = ([n], [n, self.dim as i64], [n, self.dim as i64], [n, self.dim as i64]);
        let (mut as_, mut bs, mut os) = ([0i64; 2], [0i64; 2], [self.m as i64]);
        let tp = i64_tensor(positions, &mut ps);
        let tx = f64_tensor(x, &mut xs);
        let tg = f64_tensor(grad_out, &mut gs);
        let mut tgx = f64_tensor_mut(&mut g.x, &mut gxs);
        let mut ta = matrix_tensor_mut(&mut g.a, &mut as_)?;
        let mut tb = matrix_tensor_mut(&mut g.b, &mut bs)?;
        let mut to = f64_tensor_mut(&mut g.omega, &mut os);
        // SAFETY: every buffer's length matches its shape; outputs are fresh and disjoint.
        check(unsafe { ffi::gpe_grape_m_backward(self.raw, &tp, &tx, &tg, &mut tgx, &mut ta, &mut tb, &mut to) })?;
        Ok(g)
    }
}

impl Drop for GrapeM {
    fn drop(&mut self) {
        // SAFETY: created by gpe_grape_m_create.
        unsafe { ffi::gpe_grape_m_destroy(self.raw) }
    }
}

/// Algebraic sequence encoding (Kogkalidis et al., sec. 3.1): W^p = exp(p S).
pub struct AlgebraicSequence {
    raw: *mut ffi::gpe_algebraic_sequence,
    dim: usize,
}
// SAFETY: immutable after creation.
unsafe impl Send for AlgebraicSequence {}
unsafe impl Sync for AlgebraicSequence {}

impl AlgebraicSequence {
    /// skew: a square skew-symmetric matrix S.
    pub fn new(skew: &Matrix) -> Result<AlgebraicSequence> {
        if skew.rows != skew.cols {
            return Err(invalid(format!("skew is {} x {}; it must be square", skew.rows, skew.cols)));
        }
        expect_len("skew", skew.data.len(), checked_count("skew", &[skew.rows, skew.cols])?)?;
        let mut o = ffi::gpe_algebraic_sequence_options::init();
        o.dim = to_i64(skew.rows, "skew's rows")?;
        o.skew = skew.data.as_ptr();
        let mut raw = ptr::null_mut();
        // SAFETY: dim * dim values.
        check(unsafe { ffi::gpe_algebraic_sequence_create(&o, &mut raw) })?;
        let mut h = AlgebraicSequence { raw, dim: 0 };
        let mut d = 0i64;
        // SAFETY: a live handle.
        check(unsafe { ffi::gpe_algebraic_sequence_dim(raw, &mut d) })?;
        h.dim = d as usize;
        Ok(h)
    }
    pub fn dim(&self) -> usize {
        self.dim
    }
    pub fn apply<T: Real>(&self, positions: &[i64], x: &[T]) -> Result<Vec<T>> {
        expect_len("x", x.len(), positions.len() * self.dim)?;
        let mut out = vec![T::default(); x.len()];
        let n = positions.len() as i64;
        let (mut ps, mut xs, mut os) = ([n], [n, self.dim as i64], [n, self.dim as i64]);
        let tp = i64_tensor(positions, &mut ps);
        let tx = real_tensor(x, &mut xs);
        let mut to = real_tensor_mut(&mut out, &mut os);
        // SAFETY: lengths checked.
        check(unsafe { ffi::gpe_algebraic_sequence_apply(self.raw, &tp, &tx, &mut to) })?;
        Ok(out)
    }
    pub fn matrix(&self, position: i64) -> Result<Matrix> {
        let mut m = Matrix::zeros(self.dim, self.dim);
        let mut s = [0i64; 2];
        let mut t = matrix_tensor_mut(&mut m, &mut s)?;
        // SAFETY: dim * dim values.
        check(unsafe { ffi::gpe_algebraic_sequence_matrix(self.raw, position, &mut t) })?;
        Ok(m)
    }
    /// (dL/dx, dL/dS entrywise) given grad_out (float64).
    pub fn backward(&self, positions: &[i64], x: &[f64], grad_out: &[f64]) -> Result<(Vec<f64>, Matrix)> {
        expect_len("x", x.len(), positions.len() * self.dim)?;
        expect_len("grad_out", grad_out.len(), x.len())?;
        let mut gx = vec![0.0; x.len()];
        let mut gs = Matrix::zeros(self.dim, self.dim);
        let n = positions.len() as i64;
        let (mut ps, mut xs, mut g1, mut g2, mut ss) = ([n], [n, self.dim as i64], [n, self.dim as i64], [n, self.dim as i64], [0i64; 2]);
        let tp = i64_tensor(positions, &mut ps);
        let tx = f64_tensor(x, &mut xs);
        let tg = f64_tensor(grad_out, &mut g1);
        let mut tgx = f64_tensor_mut(&mut gx, &mut g2);
        let mut tgs = matrix_tensor_mut(&mut gs, &mut ss)?;
        // SAFETY: lengths checked; outputs fresh.
        check(unsafe { ffi::gpe_algebraic_sequence_backward(self.raw, &tp, &tx, &tg, &mut tgx, &mut tgs) })?;
        Ok((gx, gs))
    }
}

impl Drop for AlgebraicSequence {
    fn drop(&mut self) {
        // SAFETY: created by gpe_algebraic_sequence_create.
        unsafe { ffi::gpe_algebraic_sequence_destroy(self.raw) }
    }
}

/// Shaw et al. relative key scores: scores[a, b] = q[a] . table[clip(kp[b] - qp[a], -k, k) + k].
/// q: [qp.len(), d]; label_table: [2k + 1, d]. Returns [qp.len(), kp.len()].
pub fn shaw_key_scores(q: &Matrix, label_table: &Matrix, query_positions: &[i64], key_positions: &[i64]) -> Result<Matrix> {
    let mut scores = Matrix::zeros_for("output", query_positions.len(), key_positions.len())?;
    let (mut qs, mut ls, mut qps, mut kps, mut ss) = ([0i64; 2], [0i64; 2], [query_positions.len() as i64], [key_positions.len() as i64], [0i64; 2]);
    let tq = matrix_tensor(q, &mut qs)?;
    let tl = matrix_tensor(label_table, &mut ls)?;
    let tqp = i64_tensor(query_positions, &mut qps);
    let tkp = i64_tensor(key_positions, &mut kps);
    let mut ts = matrix_tensor_mut(&mut scores, &mut ss)?;
    // SAFETY: lengths checked by matrix_tensor; the library checks shapes against each other.
    check(unsafe { ffi::gpe_shaw_key_scores(&tq, &tl, &tqp, &tkp, &mut ts) })?;
    Ok(scores)
}

/// (dL/dq, dL/dlabel_table) given dL/dscores.
pub fn shaw_key_scores_backward(
    q: &Matrix,
    label_table: &Matrix,
    query_positions: &[i64],
    key_positions: &[i64],
    grad_scores: &Matrix,
) -> Result<(Matrix, Matrix)> {
    let mut gq = Matrix::zeros_for("output", q.rows, q.cols)?;
    let mut gl = Matrix::zeros_for("output", label_table.rows, label_table.cols)?;
    let (mut qs, mut ls, mut qps, mut kps, mut gss, mut gqs, mut gls) =
        ([0i64; 2], [0i64; 2], [query_positions.len() as i64], [key_positions.len() as i64], [0i64; 2], [0i64; 2], [0i64; 2]);
    let tq = matrix_tensor(q, &mut qs)?;
    let tl = matrix_tensor(label_table, &mut ls)?;
    let tqp = i64_tensor(query_positions, &mut qps);
    let tkp = i64_tensor(key_positions, &mut kps);
    let tgs = matrix_tensor(grad_scores, &mut gss)?;
    let mut tgq = matrix_tensor_mut(&mut gq, &mut gqs)?;
    let mut tgl = matrix_tensor_mut(&mut gl, &mut gls)?;
    // SAFETY: lengths checked; outputs fresh.
    check(unsafe { ffi::gpe_shaw_key_scores_backward(&tq, &tl, &tqp, &tkp, &tgs, &mut tgq, &mut tgl) })?;
    Ok((gq, gl))
}

// ---- Coordinate encodings, analysis and INR solvers ---------------------------------

/// The basis psi of Zheng et al.'s shifted-basis embedders (GPE_SHIFTED_*).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShiftedKind {
    Gaussian,
    Triangle,
    Rectangle,
    Impulse,
    Sine,
    Square,
}

#[derive(Clone, Copy, Debug)]
pub struct ShiftedBasisOptions {
    pub kind: ShiftedKind,
    pub num_shifts: i64,
    pub width: f64,
    pub lo: f64,
    pub hi: f64,
}

/// out[n, i] = psi(t_i - coords[n]), t_i = lo + i (hi - lo) / K: [coords.len(), K].
pub fn shifted_basis_encode(options: &ShiftedBasisOptions, coords: &[f64]) -> Result<Matrix> {
    let mut o = ffi::gpe_shifted_basis_options::init();
    o.kind = match options.kind {
        ShiftedKind::Gaussian => ffi::GPE_SHIFTED_GAUSSIAN,
        ShiftedKind::Triangle => ffi::GPE_SHIFTED_TRIANGLE,
        ShiftedKind::Rectangle => ffi::GPE_SHIFTED_RECTANGLE,
        ShiftedKind::Impulse => ffi::GPE_SHIFTED_IMPULSE,
        ShiftedKind::Sine => ffi::GPE_SHIFTED_SINE,
        ShiftedKind::Square => ffi::GPE_SHIFTED_SQUARE,
    };
    o.num_shifts = options.num_shifts;
    o.width = options.width;
    o.lo = options.lo;
    o.hi = options.hi;
    if options.num_shifts < 1 {
        return Err(invalid(format!("num_shifts must be >= 1; got {}", options.num_shifts)));
    }
    let mut out = Matrix::zeros_for("output", coords.len(), options.num_shifts as usize)?;
    let (mut cs, mut os) = ([coords.len() as i64], [0i64; 2]);
    let tc = f64_tensor(coords, &mut cs);
    let mut to = matrix_tensor_mut(&mut out, &mut os)?;
    // SAFETY: lengths match the shapes.
    check(unsafe { ffi::gpe_shifted_basis_encode(&o, &tc, &mut to) })?;
    Ok(out)
}

/// Stable rank |A|_F^2 / |A|_2^2.
pub fn stable_rank(matrix: &Matrix) -> Result<f64> {
    let mut s = [0i64; 2];
    let t = matrix_tensor(matrix, &mut s)?;
    let mut out = 0.0;
    // SAFETY: length checked.
    check(unsafe { ffi::gpe_stable_rank(&t, &mut out) })?;
    Ok(out)
}

/// Closed-form separable fit (Zheng et al. eq. 10): W [Ky, Kx] from psi_y [Ny, Ky],
/// psi_x [Nx, Kx] and image [Ny, Nx], with ridge `lambda`.
pub fn fit_separable_2d(lambda: f64, float32_image_products: bool, psi_y: &Matrix, psi_x: &Matrix, image: &Matrix) -> Result<Matrix> {
    let mut o = ffi::gpe_separable_fit_options::init();
    o.lambda = lambda;
    o.float32_image_products = float32_image_products as i32;
    let mut w = Matrix::zeros_for("output", psi_y.cols, psi_x.cols)?;
    let (mut ys, mut xs, mut is, mut ws) = ([0i64; 2], [0i64; 2], [0i64; 2], [0i64; 2]);
    let ty = matrix_tensor(psi_y, &mut ys)?;
    let tx = matrix_tensor(psi_x, &mut xs)?;
    let ti = matrix_tensor(image, &mut is)?;
    let mut tw = matrix_tensor_mut(&mut w, &mut ws)?;
    // SAFETY: lengths checked; the library checks the shapes agree.
    check(unsafe { ffi::gpe_inr_fit_separable_2d(&o, &ty, &tx, &ti, &mut tw) })?;
    Ok(w)
}

/// psi_y W psi_x^T: [Ny, Nx].
pub fn predict_separable_2d(psi_y: &Matrix, psi_x: &Matrix, w: &Matrix) -> Result<Matrix> {
    let mut out = Matrix::zeros_for("output", psi_y.rows, psi_x.rows)?;
    let (mut ys, mut xs, mut ws, mut os) = ([0i64; 2], [0i64; 2], [0i64; 2], [0i64; 2]);
    let ty = matrix_tensor(psi_y, &mut ys)?;
    let tx = matrix_tensor(psi_x, &mut xs)?;
    let tw = matrix_tensor(w, &mut ws)?;
    let mut to = matrix_tensor_mut(&mut out, &mut os)?;
    // SAFETY: lengths checked.
    check(unsafe { ffi::gpe_inr_predict_separable_2d(&ty, &tx, &tw, &mut to) })?;
    Ok(out)
}
