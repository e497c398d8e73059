//! Coordinate encoders, graph encodings, embedder analysis and the INR solvers added in
//! the 0.4.0 ABI (gpe.h, "Coordinate encoders, graph encodings and embedder analysis").
//!
//! Points are row-major `Matrix` values `[N, D]`, features `[N, F]` with `(D, F)` from
//! `CoordinateEncoder::dims`. `backward` is the vector-Jacobian product with respect to
//! the points.
use crate::{check, checked_count, expect_len, f64_tensor, f64_tensor_mut, ffi, i64_tensor, invalid, matrix_tensor, matrix_tensor_mut, to_i64, Matrix, Result, ShiftedBasisOptions, ShiftedKind};
use std::os::raw::c_void;
use std::ptr;

fn shifted_options(o: &ShiftedBasisOptions) -> ffi::gpe_shifted_basis_options {
    let mut c = ffi::gpe_shifted_basis_options::init();
    c.kind = match o.kind {
        ShiftedKind::Gaussian => ffi::GPE_SHIFTED_GAUSSIAN,
        ShiftedKind::Triangle => ffi::GPE_SHIFTED_TRIANGLE,
        ShiftedKind::Rectangle => ffi::GPE_SHIFTED_RECTANGLE,
        ShiftedKind::Impulse => ffi::GPE_SHIFTED_IMPULSE,
        ShiftedKind::Sine => ffi::GPE_SHIFTED_SINE,
        ShiftedKind::Square => ffi::GPE_SHIFTED_SQUARE,
    };
    c.num_shifts = o.num_shifts;
    c.width = o.width;
    c.lo = o.lo;
    c.hi = o.hi;
    c
}

/// How frequencies turn into angles (GPE_FREQUENCY_*).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrequencyConvention {
    /// angle = 2 pi b . x
    TwoPi,
    /// angle = b . x
    Angular,
}
impl FrequencyConvention {
    fn code(self) -> i32 {
        match self {
            FrequencyConvention::TwoPi => ffi::GPE_FREQUENCY_TWO_PI,
            FrequencyConvention::Angular => ffi::GPE_FREQUENCY_ANGULAR,
        }
    }
}

/// Frequency families of `CoordinateEncoder::fourier` (GPE_FOURIER_*).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FourierKind {
    /// Tancik et al.: b ~ N(0, scale^2), seeded.
    Gaussian,
    /// Zheng et al. eq. 50, per axis.
    Linear,
    /// Zheng et al. eq. 51, per axis.
    LogLinear,
    /// Mildenhall et al.: angles 2^k pi x per axis.
    Nerf,
    /// Lim et al.'s T x T (dim 2).
    Txt,
}

/// Options of `CoordinateEncoder::fourier`: see gpe_fourier_features_options.
#[derive(Clone, Copy, Debug)]
pub struct FourierOptions {
    pub kind: FourierKind,
    pub dim: i64,
    pub num_frequencies: i64,
    pub scale: f64,
    pub convention: FrequencyConvention,
    pub seed: u64,
}
impl FourierOptions {
    /// GPE_FOURIER_FEATURES_OPTIONS_INIT's values.
    pub fn new(kind: FourierKind, dim: i64, num_frequencies: i64) -> FourierOptions {
        FourierOptions { kind, dim, num_frequencies, scale: 1.0, convention: FrequencyConvention::TwoPi, seed: 0 }
    }
}

/// Lim et al.'s sampled SO(2) terms: see gpe_so2_bessel_options.
#[derive(Clone, Copy, Debug)]
pub struct So2BesselOptions {
    pub polar: bool,
    pub num_terms: i64,
    pub max_scale: f64,
    pub max_k: i32,
    pub order_m: i32,
    pub seed: u64,
}

/// One SO(2) term: J_order(scale r) cos(weight theta) (and sin).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BesselTerm {
    pub order: i64,
    pub scale: f64,
    pub weight: i64,
}

/// SIMPLE concatenates per-axis encodings; COMPLEX is their Kronecker product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShiftedForm {
    Simple,
    Complex,
}

/// One of encodings/coordinate/'s point encoders behind gpe_coordinate_encoder.
pub struct CoordinateEncoder {
    ptr: *mut ffi::gpe_coordinate_encoder,
    input_dim: usize,
    output_dim: usize,
}
// SAFETY: immutable after creation; gpe.h documents concurrent use of one handle.
unsafe impl Send for CoordinateEncoder {}
unsafe impl Sync for CoordinateEncoder {}

impl CoordinateEncoder {
    fn wrap(code: ffi::gpe_status, ptr: *mut ffi::gpe_coordinate_encoder) -> Result<CoordinateEncoder> {
        check(code)?;
        let mut e = CoordinateEncoder { ptr, input_dim: 0, output_dim: 0 };
        let (mut d, mut f) = (0i64, 0i64);
        // SAFETY: a live handle and two out-pointers.
        check(unsafe { ffi::gpe_coordinate_encoder_dims(e.ptr, &mut d, &mut f) })?;
        e.input_dim = d as usize;
        e.output_dim = f as usize;
        Ok(e)
    }

    /// Fourier features [cos(w_f . x)]_f ++ [sin(w_f . x)]_f.
    pub fn fourier(options: &FourierOptions) -> Result<CoordinateEncoder> {
        let mut o = ffi::gpe_fourier_features_options::init();
        o.kind = match options.kind {
            FourierKind::Gaussian => ffi::GPE_FOURIER_GAUSSIAN,
            FourierKind::Linear => ffi::GPE_FOURIER_LINEAR,
            FourierKind::LogLinear => ffi::GPE_FOURIER_LOG_LINEAR,
            FourierKind::Nerf => ffi::GPE_FOURIER_NERF,
            FourierKind::Txt => ffi::GPE_FOURIER_TXT,
        };
        o.dim = options.dim;
        o.num_frequencies = options.num_frequencies;
        o.scale = options.scale;
        o.convention = options.convention.code();
        o.seed = options.seed;
        let mut p = ptr::null_mut();
        // SAFETY: a complete options struct and an out-pointer.
        let code = unsafe { ffi::gpe_fourier_features_create(&o, &mut p) };
        Self::wrap(code, p)
    }

    /// Fourier features of given frequency rows b [F, D].
    pub fn fourier_from_frequencies(frequencies: &Matrix, convention: FrequencyConvention) -> Result<CoordinateEncoder> {
        let mut s = [0i64; 2];
        let t = matrix_tensor(frequencies, &mut s)?;
        let mut p = ptr::null_mut();
        // SAFETY: length checked against the shape.
        let code = unsafe { ffi::gpe_fourier_features_create_from_frequencies(&t, convention.code(), &mut p) };
        Self::wrap(code, p)
    }

    /// Lim et al.'s SO(2) encoding with sampled terms (appendix D.2).
    pub fn so2_bessel_sampled(options: &So2BesselOptions) -> Result<CoordinateEncoder> {
        let mut o = ffi::gpe_so2_bessel_options::init();
        o.polar = options.polar as i32;
        o.num_terms = options.num_terms;
        o.max_scale = options.max_scale;
        o.max_k = options.max_k;
        o.order_m = options.order_m;
        o.seed = options.seed;
        let mut p = ptr::null_mut();
        // SAFETY: a complete options struct and an out-pointer.
        let code = unsafe { ffi::gpe_so2_bessel_create_sampled(&o, &mut p) };
        Self::wrap(code, p)
    }

    /// Lim et al.'s SO(2) encoding with given terms; points (x, y), or (r, theta) when polar.
    pub fn so2_bessel(terms: &[BesselTerm], polar: bool) -> Result<CoordinateEncoder> {
        let orders: Vec<i64> = terms.iter().map(|t| t.order).collect();
        let scales: Vec<f64> = terms.iter().map(|t| t.scale).collect();
        let weights: Vec<i64> = terms.iter().map(|t| t.weight).collect();
        let (mut a, mut b, mut c) = ([terms.len() as i64], [terms.len() as i64], [terms.len() as i64]);
        let (to, ts, tw) = (i64_tensor(&orders, &mut a), f64_tensor(&scales, &mut b), i64_tensor(&weights, &mut c));
        let mut p = ptr::null_mut();
        // SAFETY: three vectors of the stated length.
        let code = unsafe { ffi::gpe_so2_bessel_create(&to, &ts, &tw, polar as i32, &mut p) };
        Self::wrap(code, p)
    }

    /// Zheng et al.'s shifted bases over `axes.len()` axes (eq. 16 or eq. 17).
    pub fn shifted(form: ShiftedForm, axes: &[ShiftedBasisOptions]) -> Result<CoordinateEncoder> {
        let o: Vec<ffi::gpe_shifted_basis_options> = axes.iter().map(shifted_options).collect();
        let f = match form {
            ShiftedForm::Simple => ffi::GPE_SHIFTED_SIMPLE,
            ShiftedForm::Complex => ffi::GPE_SHIFTED_COMPLEX,
        };
        let mut p = ptr::null_mut();
        let axes_ptr = if o.is_empty() { ptr::null() } else { o.as_ptr() };
        // SAFETY: `o` holds num_axes structs.
        let code = unsafe { ffi::gpe_shifted_encoder_create(f, axes_ptr, o.len() as i64, &mut p) };
        Self::wrap(code, p)
    }

    /// Real spherical harmonics Y_lm, l <= max_degree, index l^2 + l + m; points [N, 3].
    pub fn spherical_harmonics(max_degree: i32) -> Result<CoordinateEncoder> {
        let mut p = ptr::null_mut();
        // SAFETY: an out-pointer.
        let code = unsafe { ffi::gpe_spherical_harmonics_create(max_degree, &mut p) };
        Self::wrap(code, p)
    }

    /// (input width D, feature width F).
    pub fn dims(&self) -> (usize, usize) {
        (self.input_dim, self.output_dim)
    }

    /// Features [N, F] of points [N, D].
    pub fn encode(&self, points: &Matrix) -> Result<Matrix> {
        let (mut ps, mut os) = ([0i64; 2], [0i64; 2]);
        let tp = matrix_tensor(points, &mut ps)?;
        checked_count("features", &[points.rows, self.output_dim])?;
        let mut out = Matrix::zeros_for("output", points.rows, self.output_dim)?;
        let mut to = matrix_tensor_mut(&mut out, &mut os)?;
        // SAFETY: lengths match the shapes; the library checks widths.
        check(unsafe { ffi::gpe_coordinate_encode(self.ptr, &tp, &mut to) })?;
        Ok(out)
    }

    /// grad_points [N, D] = sum_f grad_features[n, f] d features[n, f] / d points[n, d].
    pub fn backward(&self, points: &Matrix, grad_features: &Matrix) -> Result<Matrix> {
        let mut out = Matrix::zeros_for("output", points.rows, points.cols)?;
        let (mut ps, mut gs, mut os) = ([0i64; 2], [0i64; 2], [0i64; 2]);
        let tp = matrix_tensor(points, &mut ps)?;
        let tg = matrix_tensor(grad_features, &mut gs)?;
        let mut to = matrix_tensor_mut(&mut out, &mut os)?;
        // SAFETY: lengths match the shapes.
        check(unsafe { ffi::gpe_coordinate_backward(self.ptr, &tp, &tg, &mut to) })?;
        Ok(out)
    }

    /// The angular frequencies w [F / 2, D] (angle = w . x) of a Fourier handle.
    pub fn angular_frequencies(&self) -> Result<Matrix> {
        let mut out = Matrix::zeros(self.output_dim / 2, self.input_dim);
        let mut s = [0i64; 2];
        let mut t = matrix_tensor_mut(&mut out, &mut s)?;
        // SAFETY: a buffer of the stated shape.
        check(unsafe { ffi::gpe_fourier_features_angular_frequencies(self.ptr, &mut t) })?;
        Ok(out)
    }

    /// The terms of an SO(2) handle.
    pub fn so2_terms(&self) -> Result<Vec<BesselTerm>> {
        let t = self.output_dim / 2;
        let (mut orders, mut scales, mut weights) = (vec![0i64; t], vec![0f64; t], vec![0i64; t]);
        let (mut a, mut b, mut c) = ([t as i64], [t as i64], [t as i64]);
        let mut to = crate::tensor(orders.as_mut_ptr() as *const c_void, ffi::KDL_INT, 64, &mut a);
        let mut ts = f64_tensor_mut(&mut scales, &mut b);
        let mut tw = crate::tensor(weights.as_mut_ptr() as *const c_void, ffi::KDL_INT, 64, &mut c);
        // SAFETY: three buffers of T entries.
        check(unsafe { ffi::gpe_so2_bessel_terms(self.ptr, &mut to, &mut ts, &mut tw) })?;
        Ok((0..t).map(|i| BesselTerm { order: orders[i], scale: scales[i], weight: weights[i] }).collect())
    }
}

impl Drop for CoordinateEncoder {
    fn drop(&mut self) {
        // SAFETY: created by the library, destroyed once.
        unsafe { ffi::gpe_coordinate_encoder_destroy(self.ptr) }
    }
}

/// J_order(x) elementwise, the Bessel function of the first kind (order 0..20, x >= 0).
pub fn bessel_j(order: i32, x: &[f64]) -> Result<Vec<f64>> {
    let mut out = vec![0.0; x.len()];
    let (mut xs, mut os) = ([x.len() as i64], [x.len() as i64]);
    let tx = f64_tensor(x, &mut xs);
    let mut to = f64_tensor_mut(&mut out, &mut os);
    // SAFETY: two vectors of x.len().
    check(unsafe { ffi::gpe_bessel_j(order, &tx, &mut to) })?;
    Ok(out)
}

/// Which Laplacian (GPE_LAPLACIAN_*).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaplacianKind {
    /// D - A
    Combinatorial,
    /// I - D^-1/2 A D^-1/2
    Symmetric,
}

/// The k smallest eigenpairs of an undirected graph's Laplacian: (eigenvalues [k],
/// eigenvectors [num_nodes, k]). `weights`: one per edge, or None for 1.
pub fn laplacian_eigenvectors(
    kind: LaplacianKind,
    skip_first: bool,
    num_nodes: usize,
    edges: &[(i64, i64)],
    weights: Option<&[f64]>,
    k: usize,
) -> Result<(Vec<f64>, Matrix)> {
    let mut o = ffi::gpe_laplacian_options::init();
    o.kind = match kind {
        LaplacianKind::Combinatorial => ffi::GPE_LAPLACIAN_COMBINATORIAL,
        LaplacianKind::Symmetric => ffi::GPE_LAPLACIAN_SYMMETRIC,
    };
    o.skip_first = skip_first as i32;
    // Before anything is allocated: above i64::MAX these wrapped to negative counts.
    let n = to_i64(num_nodes, "num_nodes")?;
    let k64 = to_i64(k, "k")?;
    checked_count("eigenvectors", &[num_nodes, k])?;
    let flat: Vec<i64> = edges.iter().flat_map(|&(a, b)| [a, b]).collect();
    let mut es = [edges.len() as i64, 2];
    let te = i64_tensor(&flat, &mut es);
    let mut ws = [0i64; 1];
    let tw = match weights {
        Some(w) => {
            expect_len("weights", w.len(), edges.len())?;
            ws[0] = w.len() as i64;
            Some(f64_tensor(w, &mut ws))
        }
        None => None,
    };
    let mut values = vec![0.0; k];
    let mut vectors = Matrix::zeros_for("output", num_nodes, k)?;
    let (mut vs, mut ms) = ([k64], [0i64; 2]);
    let mut tv = f64_tensor_mut(&mut values, &mut vs);
    let mut tm = matrix_tensor_mut(&mut vectors, &mut ms)?;
    let tw_ptr = tw.as_ref().map_or(ptr::null(), |t| t as *const ffi::DLTensor);
    // SAFETY: every buffer matches its shape; weights NULL or one per edge.
    check(unsafe { ffi::gpe_laplacian_eigenvectors(&o, n, &te, tw_ptr, &mut tv, &mut tm) })?;
    Ok((values, vectors))
}

/// Zheng et al. eq. 6: out[i, j] = sample_spacing * features[i] . features[j], [N, N].
pub fn embedded_distance_matrix(features: &Matrix, sample_spacing: f64) -> Result<Matrix> {
    let mut out = Matrix::zeros_for("output", features.rows, features.rows)?;
    let (mut fs, mut os) = ([0i64; 2], [0i64; 2]);
    let tf = matrix_tensor(features, &mut fs)?;
    let mut to = matrix_tensor_mut(&mut out, &mut os)?;
    // SAFETY: lengths checked.
    check(unsafe { ffi::gpe_embedded_distance_matrix(&tf, sample_spacing, &mut to) })?;
    Ok(out)
}

/// The embedders with closed forms in encodings/analysis/ (GPE_EMBEDDER_*).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Embedder {
    /// parameter: std sigma
    Gaussian,
    /// parameter: width
    Rectangle,
    /// parameter: support width
    Triangle,
    /// parameter: frequency std sigma (2 pi convention)
    Rff,
}
impl Embedder {
    fn code(self) -> i32 {
        match self {
            Embedder::Gaussian => ffi::GPE_EMBEDDER_GAUSSIAN,
            Embedder::Rectangle => ffi::GPE_EMBEDDER_RECTANGLE,
            Embedder::Triangle => ffi::GPE_EMBEDDER_TRIANGLE,
            Embedder::Rff => ffi::GPE_EMBEDDER_RFF,
        }
    }
}

/// Closed-form stable rank of the embedder sampled on [0, 1] at num_points points.
pub fn embedder_stable_rank(embedder: Embedder, parameter: f64, num_points: i64) -> Result<f64> {
    let mut out = 0.0;
    // SAFETY: scalars and an out-pointer.
    check(unsafe { ffi::gpe_embedder_stable_rank(embedder.code(), parameter, num_points, &mut out) })?;
    Ok(out)
}

/// Closed-form distance preservation D(delta), delta = x1 - x2.
pub fn embedder_distance(embedder: Embedder, parameter: f64, delta: f64) -> Result<f64> {
    let mut out = 0.0;
    // SAFETY: scalars and an out-pointer.
    check(unsafe { ffi::gpe_embedder_distance(embedder.code(), parameter, delta, &mut out) })?;
    Ok(out)
}

/// cond(Psi) = s_max / s_min (+inf when rank deficient).
pub fn condition_number(psi: &Matrix) -> Result<f64> {
    let mut s = [0i64; 2];
    let t = matrix_tensor(psi, &mut s)?;
    let mut out = 0.0;
    // SAFETY: length checked.
    check(unsafe { ffi::gpe_inr_condition_number(&t, &mut out) })?;
    Ok(out)
}

/// Options of the closed-form fits: see gpe_separable_fit_options.
#[derive(Clone, Copy, Debug, Default)]
pub struct SeparableFitOptions {
    pub lambda: f64,
    /// 0: Cholesky (refuses singular factors); in (0, 1): truncated-SVD pseudo-inverse.
    pub rcond: f64,
    pub float32_image_products: bool,
}
impl SeparableFitOptions {
    fn ffi(&self) -> ffi::gpe_separable_fit_options {
        let mut o = ffi::gpe_separable_fit_options::init();
        o.lambda = self.lambda;
        o.rcond = self.rcond;
        o.float32_image_products = self.float32_image_products as i32;
        o
    }
}

/// `fit_separable_2d` with every option (rcond included).
pub fn fit_separable_2d_with(options: &SeparableFitOptions, psi_y: &Matrix, psi_x: &Matrix, image: &Matrix) -> Result<Matrix> {
    let o = options.ffi();
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

/// A dense row-major float64 3-tensor (axis 2 fastest).
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor3 {
    pub dims: [usize; 3],
    pub data: Vec<f64>,
}
impl Tensor3 {
    pub fn new(dims: [usize; 3], data: Vec<f64>) -> Result<Tensor3> {
        expect_len("tensor data", data.len(), checked_count("tensor", &dims)?)?;
        Ok(Tensor3 { dims, data })
    }
    /// Panics when the element count overflows usize (as `vec!` does past its capacity).
    pub fn zeros(dims: [usize; 3]) -> Tensor3 {
        let n = dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).expect("Tensor3::zeros: the element count overflows usize");
        Tensor3 { dims, data: vec![0.0; n] }
    }
    pub fn at(&self, i: usize, j: usize, l: usize) -> f64 {
        self.data[(i * self.dims[1] + j) * self.dims[2] + l]
    }
}

fn tensor3_shape(t: &Tensor3) -> Result<[i64; 3]> {
    expect_len("tensor data", t.data.len(), checked_count("tensor", &t.dims)?)?;
    // checked_count: every extent fits int64_t.
    Ok([t.dims[0] as i64, t.dims[1] as i64, t.dims[2] as i64])
}

/// Volumes on a separable grid (Zheng et al. sec. 5): W [K_0, K_1, K_2] from psi_d
/// [n_d, K_d] and volume [n_0, n_1, n_2].
pub fn fit_separable_3d(options: &SeparableFitOptions, psi: [&Matrix; 3], volume: &Tensor3) -> Result<Tensor3> {
    let o = options.ffi();
    let mut ss = [[0i64; 2]; 3];
    let [s0, s1, s2] = &mut ss;
    let (t0, t1, t2) = (matrix_tensor(psi[0], s0)?, matrix_tensor(psi[1], s1)?, matrix_tensor(psi[2], s2)?);
    checked_count("w", &[psi[0].cols, psi[1].cols, psi[2].cols])?;
    let mut w = Tensor3::zeros([psi[0].cols, psi[1].cols, psi[2].cols]);
    let mut vs = tensor3_shape(volume)?;
    let tv = f64_tensor(&volume.data, &mut vs);
    let mut wsh = tensor3_shape(&w)?;
    let mut tw = f64_tensor_mut(&mut w.data, &mut wsh);
    // SAFETY: lengths checked against the shapes.
    check(unsafe { ffi::gpe_inr_fit_separable_3d(&o, &t0, &t1, &t2, &tv, &mut tw) })?;
    Ok(w)
}

/// W x_0 psi_0 x_1 psi_1 x_2 psi_2: [n_0, n_1, n_2].
pub fn predict_separable_3d(psi: [&Matrix; 3], w: &Tensor3) -> Result<Tensor3> {
    let mut ss = [[0i64; 2]; 3];
    let [s0, s1, s2] = &mut ss;
    let (t0, t1, t2) = (matrix_tensor(psi[0], s0)?, matrix_tensor(psi[1], s1)?, matrix_tensor(psi[2], s2)?);
    checked_count("output", &[psi[0].rows, psi[1].rows, psi[2].rows])?;
    let mut out = Tensor3::zeros([psi[0].rows, psi[1].rows, psi[2].rows]);
    let mut wsh = tensor3_shape(w)?;
    let tw = f64_tensor(&w.data, &mut wsh);
    let mut osh = tensor3_shape(&out)?;
    let mut to = f64_tensor_mut(&mut out.data, &mut osh);
    // SAFETY: lengths checked against the shapes.
    check(unsafe { ffi::gpe_inr_predict_separable_3d(&t0, &t1, &t2, &tw, &mut to) })?;
    Ok(out)
}

/// Options of `fit_blended_2d`: see gpe_blended_fit_options.
#[derive(Clone, Copy, Debug)]
pub struct BlendedFitOptions {
    pub max_iterations: i32,
    pub lambda: f64,
    pub tolerance: f64,
}
impl Default for BlendedFitOptions {
    fn default() -> Self {
        BlendedFitOptions { max_iterations: 500, lambda: 1e-6, tolerance: 1e-6 }
    }
}

/// The blended fit's weights [K_y, K_x], iterations run and RMS residual at the samples.
#[derive(Clone, Debug)]
pub struct BlendedFit {
    pub weights: Matrix,
    pub iterations: i32,
    pub rms_residual: f64,
}

fn encoder_width(e: &CoordinateEncoder, name: &str) -> Result<usize> {
    if e.input_dim != 1 {
        return Err(invalid(format!("{} must encode 1-D coordinates; it takes {}", name, e.input_dim)));
    }
    Ok(e.output_dim)
}

/// Non-separable samples (Zheng et al. sec. 5, appendix B.2): points [P, 2] as (x, y)
/// inside the grid's box, values [P]; 1-D encoders for x and y.
pub fn fit_blended_2d(
    options: &BlendedFitOptions,
    encoder_x: &CoordinateEncoder,
    encoder_y: &CoordinateEncoder,
    grid_x: &[f64],
    grid_y: &[f64],
    points: &Matrix,
    values: &[f64],
) -> Result<BlendedFit> {
    let (kx, ky) = (encoder_width(encoder_x, "encoder_x")?, encoder_width(encoder_y, "encoder_y")?);
    let mut o = ffi::gpe_blended_fit_options::init();
    o.max_iterations = options.max_iterations;
    o.lambda = options.lambda;
    o.tolerance = options.tolerance;
    let mut w = Matrix::zeros_for("output", ky, kx)?;
    let (mut gxs, mut gys, mut ps, mut vs, mut ws) = ([grid_x.len() as i64], [grid_y.len() as i64], [0i64; 2], [values.len() as i64], [0i64; 2]);
    let (tgx, tgy) = (f64_tensor(grid_x, &mut gxs), f64_tensor(grid_y, &mut gys));
    let tp = matrix_tensor(points, &mut ps)?;
    let tv = f64_tensor(values, &mut vs);
    let mut tw = matrix_tensor_mut(&mut w, &mut ws)?;
    let (mut iterations, mut rms) = (0i32, 0f64);
    // SAFETY: every buffer matches its shape; both handles are live.
    check(unsafe {
        ffi::gpe_inr_fit_blended_2d(&o, encoder_x.ptr, encoder_y.ptr, &tgx, &tgy, &tp, &tv, &mut tw, &mut iterations, &mut rms)
    })?;
    Ok(BlendedFit { weights: w, iterations, rms_residual: rms })
}

/// The blended model's values at points [P, 2] for weights w [K_y, K_x].
pub fn predict_blended_2d(
    encoder_x: &CoordinateEncoder,
    encoder_y: &CoordinateEncoder,
    grid_x: &[f64],
    grid_y: &[f64],
    points: &Matrix,
    w: &Matrix,
) -> Result<Vec<f64>> {
    let (mut gxs, mut gys, mut ps, mut ws, mut os) = ([grid_x.len() as i64], [grid_y.len() as i64], [0i64; 2], [0i64; 2], [0i64; 1]);
    let (tgx, tgy) = (f64_tensor(grid_x, &mut gxs), f64_tensor(grid_y, &mut gys));
    // Checks points (its rows within int64_t) before allocating one value per row.
    let tp = matrix_tensor(points, &mut ps)?;
    os[0] = ps[0];
    let mut out = vec![0.0; points.rows];
    let tw = matrix_tensor(w, &mut ws)?;
    let mut to = f64_tensor_mut(&mut out, &mut os);
    // SAFETY: every buffer matches its shape; both handles are live.
    check(unsafe { ffi::gpe_inr_predict_blended_2d(encoder_x.ptr, encoder_y.ptr, &tgx, &tgy, &tp, &tw, &mut to) })?;
    Ok(out)
}
