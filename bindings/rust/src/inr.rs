//! INR training, data, metrics and image files (the C ABI's 0.5.0 entry points):
//! a small ReLU MLP trained full-batch with Adam (Lim et al., appendix D.2), Adam on the
//! linear layer over a fixed encoding (Zheng et al. sec. 6.2, dense eq. 16 and separable
//! eq. 10), Lim et al.'s analytic images and vector fields (appendix D.1, eqs. 30, 31),
//! the papers' train/validation/test splits, MSE and PSNR, and PNG/JPEG files.
//!
//! Every fit here runs to the end and returns the per-step training loss; the one
//! progress callback exposed is the validated MLP fit's
//! (`mlp_fit_validated_with_progress`), which sees the validation loss as it is measured.
use crate::{check, checked_count, expect_len, f64_tensor, f64_tensor_mut, invalid, matrix_tensor, matrix_tensor_mut, real_tensor, real_tensor_mut, to_i64};
use crate::{ffi, Matrix, Real, Result, Tensor3};
use std::any::Any;
use std::ffi::CString;
use std::os::raw::c_void;

// The C ABI's bound on training steps (gpe/inr_training.h); checked before the loss
// buffer of `steps` entries is allocated (1 << 40 steps allocated 8 TiB and aborted).
const MAX_STEPS: i64 = 1 << 31;
use std::panic::{self, AssertUnwindSafe};
use std::ptr;

fn rows_of(name: &str, len: usize, cols: usize) -> Result<usize> {
    if cols == 0 || len % cols != 0 {
        return Err(invalid(format!("{} has {} values: not a whole number of rows of {}", name, len, cols)));
    }
    Ok(len / cols)
}

/// The MLP's architecture and its Adam schedule (gpe_mlp_options). Defaults are Lim et
/// al.'s: width 128, 3 hidden layers, 500 steps, lr 1e-3, betas (0.9, 0.999), eps 1e-8.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MlpOptions {
    pub hidden_width: i64,
    pub num_hidden_layers: i64,
    pub steps: i64,
    pub learning_rate: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub epsilon: f64,
    /// The seeded initialisation (PyTorch's nn.Linear default, std::mt19937_64).
    pub seed: u64,
}
impl Default for MlpOptions {
    fn default() -> Self {
        let c = ffi::gpe_mlp_options::init();
        MlpOptions {
            hidden_width: c.hidden_width,
            num_hidden_layers: c.num_hidden_layers,
            steps: c.steps,
            learning_rate: c.learning_rate,
            beta1: c.beta1,
            beta2: c.beta2,
            epsilon: c.epsilon,
            seed: c.seed,
        }
    }
}
impl MlpOptions {
    fn ffi(&self) -> ffi::gpe_mlp_options {
        let mut c = ffi::gpe_mlp_options::init();
        c.hidden_width = self.hidden_width;
        c.num_hidden_layers = self.num_hidden_layers;
        c.steps = self.steps;
        c.learning_rate = self.learning_rate;
        c.beta1 = self.beta1;
        c.beta2 = self.beta2;
        c.epsilon = self.epsilon;
        c.seed = self.seed;
        c
    }
}

/// The length of the flat parameter vector (W_0 row-major, b_0, W_1, b_1, ...).
pub fn mlp_num_parameters(options: &MlpOptions, input_dim: usize, output_dim: usize) -> Result<usize> {
    let o = options.ffi();
    let (din, dout) = (to_i64(input_dim, "input_dim")?, to_i64(output_dim, "output_dim")?);
    let mut n = 0i64;
    // SAFETY: plain values and one out pointer.
    check(unsafe { ffi::gpe_inr_mlp_num_parameters(&o, din, dout, &mut n) })?;
    Ok(n as usize)
}

/// The seeded initial parameters (float32 or float64).
pub fn mlp_init<T: Real>(options: &MlpOptions, input_dim: usize, output_dim: usize) -> Result<Vec<T>> {
    let p = mlp_num_parameters(options, input_dim, output_dim)?;
    let (din, dout) = (to_i64(input_dim, "input_dim")?, to_i64(output_dim, "output_dim")?);
    let o = options.ffi();
    let mut out = vec![T::default(); p];
    let mut ps = [p as i64];
    let mut t = real_tensor_mut(&mut out, &mut ps);
    // SAFETY: out holds p values, the count the library computed for these dims.
    check(unsafe { ffi::gpe_inr_mlp_init(&o, din, dout, &mut t) })?;
    Ok(out)
}

/// A finished fit: the trained parameters, the MSE before each step and after the last.
#[derive(Clone, Debug, PartialEq)]
pub struct MlpFit<T> {
    pub parameters: Vec<T>,
    pub train_loss: Vec<f64>,
    pub final_loss: f64,
}

/// Trains the MLP full-batch on features [n, input_dim] and targets [n, output_dim]
/// (row-major), from `initial` or the seeded initialisation.
pub fn mlp_fit<T: Real>(
    options: &MlpOptions,
    features: &[T],
    input_dim: usize,
    targets: &[T],
    output_dim: usize,
    initial: Option<&[T]>,
) -> Result<MlpFit<T>> {
    let (din, dout) = (to_i64(input_dim, "input_dim")?, to_i64(output_dim, "output_dim")?);
    // n, m and p below are at most a slice's length or the library's count: they fit.
    let n = rows_of("features", features.len(), input_dim)?;
    expect_len("targets", targets.len(), checked_count("targets", &[n, output_dim])?)?;
    let p = mlp_num_parameters(options, input_dim, output_dim)?;
    if let Some(init) = initial {
        expect_len("initial parameters", init.len(), p)?;
    }
    if options.steps < 0 || options.steps > MAX_STEPS {
        return Err(invalid(format!("steps is {}; expected 0..=2^31", options.steps)));
    }
    let o = options.ffi();
    let mut parameters = vec![T::default(); p];
    let mut train_loss = vec![0.0; options.steps as usize];
    let (mut fs, mut ts, mut ps, mut ips, mut ls) = ([n as i64, din], [n as i64, dout], [p as i64], [p as i64], [options.steps]);
    let tf = real_tensor(features, &mut fs);
    let tt = real_tensor(targets, &mut ts);
    let ti = initial.map(|init| real_tensor(init, &mut ips));
    let mut tp = real_tensor_mut(&mut parameters, &mut ps);
    let mut tl = f64_tensor_mut(&mut train_loss, &mut ls);
    let mut final_loss = 0.0;
    let ip = ti.as_ref().map_or(ptr::null(), |t| t as *const ffi::DLTensor);
    // SAFETY: every length checked against the shapes given.
    check(unsafe { ffi::gpe_inr_mlp_fit(&o, &tf, &tt, ip, &mut tp, &mut tl, &mut final_loss) })?;
    Ok(MlpFit { parameters, train_loss, final_loss })
}

/// A held-out validation set for `mlp_fit_validated`: features [m, input_dim] and
/// targets [m, output_dim] (row-major, m >= 1, finite), evaluated after every
/// `eval_every` updates and after the last (0: after the last only).
#[derive(Clone, Copy, Debug)]
pub struct MlpValidation<'a, T> {
    pub features: &'a [T],
    pub targets: &'a [T],
    pub eval_every: i64,
}

/// A fit with its validation curve: after `validation_steps[k]` updates the network's
/// MSE on the held-out set was `validation_loss[k]` (accumulated in double).
#[derive(Clone, Debug, PartialEq)]
pub struct MlpValidatedFit<T> {
    pub fit: MlpFit<T>,
    pub validation_steps: Vec<i64>,
    pub validation_loss: Vec<f64>,
}

/// The number of validation evaluations of a fit of `steps` updates evaluated every
/// `eval_every` (see MlpValidation): 1 when steps is 0 (the initial network).
pub fn mlp_num_evaluations(steps: i64, eval_every: i64) -> Result<usize> {
    let mut o = ffi::gpe_mlp_options::init();
    o.steps = steps;
    o.report_every = eval_every;
    let mut k = 0i64;
    // SAFETY: plain values and one out pointer.
    check(unsafe { ffi::gpe_inr_mlp_num_evaluations(&o, &mut k) })?;
    Ok(k as usize)
}

/// `mlp_fit` with a held-out validation set (gpe_inr_mlp_fit_v2). The training is the
/// same, bit for bit; the curve comes back beside it.
pub fn mlp_fit_validated<T: Real>(
    options: &MlpOptions,
    features: &[T],
    input_dim: usize,
    targets: &[T],
    output_dim: usize,
    initial: Option<&[T]>,
    validation: &MlpValidation<T>,
) -> Result<MlpValidatedFit<T>> {
    fit_validated(options, features, input_dim, targets, output_dim, initial, validation, None)
}

/// `mlp_fit_validated` that also calls `progress(step, train_loss, validation_loss)` on
/// this thread at each evaluation, as it is made (gpe_mlp_validation.progress, C ABI
/// 0.7.0): `validation_loss` is the entry `validation_loss[k]` of the result, bit for bit,
/// and `train_loss` the MSE of the forward pass behind update `step`. The training is the
/// same as without it. A panic in `progress` stops the calls; the fit runs to its end
/// and the panic then resumes here.
#[allow(clippy::too_many_arguments)]
pub fn mlp_fit_validated_with_progress<T: Real, F: FnMut(i64, f64, f64)>(
    options: &MlpOptions,
    features: &[T],
    input_dim: usize,
    targets: &[T],
    output_dim: usize,
    initial: Option<&[T]>,
    validation: &MlpValidation<T>,
    mut progress: F,
) -> Result<MlpValidatedFit<T>> {
    fit_validated(options, features, input_dim, targets, output_dim, initial, validation, Some(&mut progress))
}

// The closure behind gpe_mlp_validation.progress_user_data, and the first panic it raised
// (a panic must not unwind through the library's C frames).
struct ValidationProgress<'a> {
    callback: &'a mut dyn FnMut(i64, f64, f64),
    panic: Option<Box<dyn Any + Send + 'static>>,
}

unsafe extern "C" fn validation_progress_trampoline(user_data: *mut c_void, step: i64, train_loss: f64, validation_loss: f64) {
    // SAFETY: user_data is the &mut ValidationProgress that fit_validated passes with this
    // function; the library calls it only during that call, on that thread.
    let state = &mut *(user_data as *mut ValidationProgress<'_>);
    if state.panic.is_some() {
        return;
    }
    let result = panic::catch_unwind(AssertUnwindSafe(|| (state.callback)(step, train_loss, validation_loss)));
    if let Err(p) = result {
        state.panic = Some(p);
    }
}

#[allow(clippy::too_many_arguments)]
fn fit_validated<T: Real>(
    options: &MlpOptions,
    features: &[T],
    input_dim: usize,
    targets: &[T],
    output_dim: usize,
    initial: Option<&[T]>,
    validation: &MlpValidation<T>,
    progress: Option<&mut dyn FnMut(i64, f64, f64)>,
) -> Result<MlpValidatedFit<T>> {
    let (din, dout) = (to_i64(input_dim, "input_dim")?, to_i64(output_dim, "output_dim")?);
    let n = rows_of("features", features.len(), input_dim)?;
    expect_len("targets", targets.len(), checked_count("targets", &[n, output_dim])?)?;
    let m = rows_of("validation features", validation.features.len(), input_dim)?;
    expect_len("validation targets", validation.targets.len(), checked_count("validation targets", &[m, output_dim])?)?;
    let p = mlp_num_parameters(options, input_dim, output_dim)?;
    if let Some(init) = initial {
        expect_len("initial parameters", init.len(), p)?;
    }
    if options.steps < 0 || options.steps > MAX_STEPS {
        return Err(invalid(format!("steps is {}; expected 0..=2^31", options.steps)));
    }
    let k = mlp_num_evaluations(options.steps, validation.eval_every)?;
    let mut o = options.ffi();
    o.report_every = validation.eval_every;
    let mut parameters = vec![T::default(); p];
    let mut train_loss = vec![0.0; options.steps as usize];
    let mut validation_steps = vec![0i64; k];
    let mut validation_loss = vec![0.0; k];
    let (mut fs, mut ts, mut ps, mut ips, mut ls) = ([n as i64, din], [n as i64, dout], [p as i64], [p as i64], [options.steps]);
    let (mut vfs, mut vts, mut vss, mut vls) = ([m as i64, din], [m as i64, dout], [k as i64], [k as i64]);
    let tf = real_tensor(features, &mut fs);
    let tt = real_tensor(targets, &mut ts);
    let ti = initial.map(|init| real_tensor(init, &mut ips));
    let mut tp = real_tensor_mut(&mut parameters, &mut ps);
    let mut tl = f64_tensor_mut(&mut train_loss, &mut ls);
    let tvf = real_tensor(validation.features, &mut vfs);
    let tvt = real_tensor(validation.targets, &mut vts);
    let mut tvs = crate::tensor(validation_steps.as_mut_ptr() as *const std::os::raw::c_void, ffi::KDL_INT, 64, &mut vss);
    let mut tvl = f64_tensor_mut(&mut validation_loss, &mut vls);
    let mut val = ffi::gpe_mlp_validation::init();
    val.features = &tvf;
    val.targets = &tvt;
    val.steps = &mut tvs;
    val.loss = &mut tvl;
    let mut state = progress.map(|callback| ValidationProgress { callback, panic: None });
    if let Some(s) = state.as_mut() {
        val.progress = Some(validation_progress_trampoline);
        val.progress_user_data = s as *mut ValidationProgress<'_> as *mut c_void;
    }
    let mut final_loss = 0.0;
    let ip = ti.as_ref().map_or(ptr::null(), |t| t as *const ffi::DLTensor);
    // SAFETY: every length checked against the shapes given; k is the library's count;
    // `state` outlives the call and is reached only through progress_user_data during it.
    let status = unsafe { ffi::gpe_inr_mlp_fit_v2(&o, &tf, &tt, ip, &mut tp, &mut tl, &mut final_loss, &val) };
    if let Some(payload) = state.and_then(|s| s.panic) {
        panic::resume_unwind(payload);
    }
    check(status)?;
    Ok(MlpValidatedFit { fit: MlpFit { parameters, train_loss, final_loss }, validation_steps, validation_loss })
}

/// The network's output [n, output_dim] on features [n, input_dim].
pub fn mlp_predict<T: Real>(options: &MlpOptions, parameters: &[T], features: &[T], input_dim: usize, output_dim: usize) -> Result<Vec<T>> {
    let (din, dout) = (to_i64(input_dim, "input_dim")?, to_i64(output_dim, "output_dim")?);
    let n = rows_of("features", features.len(), input_dim)?;
    let p = mlp_num_parameters(options, input_dim, output_dim)?;
    expect_len("parameters", parameters.len(), p)?;
    let o = options.ffi();
    let mut out = vec![T::default(); checked_count("output", &[n, output_dim])?];
    let (mut ps, mut fs, mut os) = ([p as i64], [n as i64, din], [n as i64, dout]);
    let tp = real_tensor(parameters, &mut ps);
    let tf = real_tensor(features, &mut fs);
    let mut to = real_tensor_mut(&mut out, &mut os);
    // SAFETY: lengths checked.
    check(unsafe { ffi::gpe_inr_mlp_predict(&o, &tp, &tf, &mut to) })?;
    Ok(out)
}

/// Adam on a linear layer (gpe_linear_adam_options): lr decays exponentially from
/// `learning_rate` to `final_learning_rate` over the steps. Defaults: 2000 steps, 1e-2.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinearAdamOptions {
    pub steps: i64,
    pub learning_rate: f64,
    pub final_learning_rate: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub epsilon: f64,
}
impl Default for LinearAdamOptions {
    fn default() -> Self {
        let c = ffi::gpe_linear_adam_options::init();
        LinearAdamOptions {
            steps: c.steps,
            learning_rate: c.learning_rate,
            final_learning_rate: c.final_learning_rate,
            beta1: c.beta1,
            beta2: c.beta2,
            epsilon: c.epsilon,
        }
    }
}
impl LinearAdamOptions {
    fn ffi(&self) -> ffi::gpe_linear_adam_options {
        let mut c = ffi::gpe_linear_adam_options::init();
        c.steps = self.steps;
        c.learning_rate = self.learning_rate;
        c.final_learning_rate = self.final_learning_rate;
        c.beta1 = self.beta1;
        c.beta2 = self.beta2;
        c.epsilon = self.epsilon;
        c
    }
    fn loss_len(&self) -> Result<usize> {
        if self.steps < 1 || self.steps > MAX_STEPS {
            return Err(invalid(format!("steps is {}; expected 1..=2^31", self.steps)));
        }
        Ok(self.steps as usize) // steps >= 1: fits; `steps as i64` below gives it back
    }
}

/// A linear fit: the weights, the MSE before each step and after the last.
#[derive(Clone, Debug, PartialEq)]
pub struct LinearFit {
    pub w: Matrix,
    pub train_loss: Vec<f64>,
    pub final_loss: f64,
}

/// Dense model Y_hat = Phi W (Zheng et al. eq. 16): features [N, F], targets [N, C].
pub fn fit_dense_adam(options: &LinearAdamOptions, features: &Matrix, targets: &Matrix) -> Result<LinearFit> {
    let steps = options.loss_len()?;
    let o = options.ffi();
    let mut w = Matrix::zeros_for("output", features.cols, targets.cols)?;
    let mut train_loss = vec![0.0; steps];
    let (mut fs, mut ts, mut ws, mut ls) = ([0i64; 2], [0i64; 2], [0i64; 2], [steps as i64]);
    let tf = matrix_tensor(features, &mut fs)?;
    let tt = matrix_tensor(targets, &mut ts)?;
    let mut tw = matrix_tensor_mut(&mut w, &mut ws)?;
    let mut tl = f64_tensor_mut(&mut train_loss, &mut ls);
    let mut final_loss = 0.0;
    // SAFETY: lengths checked; the library checks the shapes agree.
    check(unsafe { ffi::gpe_inr_fit_dense_adam(&o, &tf, &tt, &mut tw, &mut tl, &mut final_loss) })?;
    Ok(LinearFit { w, train_loss, final_loss })
}

/// Separable model S_hat = Psi_y W Psi_x^T (Zheng et al. eq. 10): psi_y [Ny, Ky],
/// psi_x [Nx, Kx], image [Ny, Nx]; W [Ky, Kx].
pub fn fit_separable_adam_2d(options: &LinearAdamOptions, psi_y: &Matrix, psi_x: &Matrix, image: &Matrix) -> Result<LinearFit> {
    let steps = options.loss_len()?;
    let o = options.ffi();
    let mut w = Matrix::zeros_for("output", psi_y.cols, psi_x.cols)?;
    let mut train_loss = vec![0.0; steps];
    let (mut ys, mut xs, mut is, mut ws, mut ls) = ([0i64; 2], [0i64; 2], [0i64; 2], [0i64; 2], [steps as i64]);
    let ty = matrix_tensor(psi_y, &mut ys)?;
    let tx = matrix_tensor(psi_x, &mut xs)?;
    let ti = matrix_tensor(image, &mut is)?;
    let mut tw = matrix_tensor_mut(&mut w, &mut ws)?;
    let mut tl = f64_tensor_mut(&mut train_loss, &mut ls);
    let mut final_loss = 0.0;
    // SAFETY: lengths checked; the library checks the shapes agree.
    check(unsafe { ffi::gpe_inr_fit_separable_adam_2d(&o, &ty, &tx, &ti, &mut tw, &mut tl, &mut final_loss) })?;
    Ok(LinearFit { w, train_loss, final_loss })
}

/// Lim et al.'s analytic tasks (GPE_SYNTHETIC_*).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyntheticTask {
    /// |sin(15 sqrt(r))|
    Radial,
    /// |sin(30 sqrt(0.1 r) + theta)|
    Spiral,
}
impl SyntheticTask {
    fn code(self) -> i32 {
        match self {
            SyntheticTask::Radial => ffi::GPE_SYNTHETIC_RADIAL,
            SyntheticTask::Spiral => ffi::GPE_SYNTHETIC_SPIRAL,
        }
    }
}

/// The task's n x n image over the pixel centres of [-1, 1]^2 (rows = y); `signed`
/// gives the signed sine instead of its magnitude.
pub fn synthetic_image(task: SyntheticTask, signed: bool, n: usize) -> Result<Matrix> {
    checked_count("image", &[n, n])?;
    let mut out = Matrix::zeros_for("output", n, n)?;
    let mut s = [0i64; 2];
    let mut t = matrix_tensor_mut(&mut out, &mut s)?;
    // SAFETY: out is n x n.
    check(unsafe { ffi::gpe_inr_synthetic_image(task.code(), signed as i32, &mut t) })?;
    Ok(out)
}

/// The task's vector field [n, n, 2]: f(r, theta) (cos theta, sin theta).
pub fn synthetic_vector_field(task: SyntheticTask, n: usize) -> Result<Tensor3> {
    checked_count("vector field", &[n, n, 2])?;
    let n64 = to_i64(n, "n")?;
    let mut out = Tensor3::zeros([n, n, 2]);
    let mut s = [n64, n64, 2];
    let mut t = f64_tensor_mut(&mut out.data, &mut s);
    // SAFETY: out holds n * n * 2 values.
    check(unsafe { ffi::gpe_inr_synthetic_vector_field(task.code(), &mut t) })?;
    Ok(out)
}

/// The pixel centres (x_j, y_i) in row-major pixel order: [n * n, 2].
pub fn grid_coordinates(n: usize) -> Result<Matrix> {
    let n64 = to_i64(n, "n")?;
    checked_count("grid coordinates", &[n, n, 2])?;
    let mut out = Matrix::zeros_for("output", n * n, 2)?;
    let mut s = [0i64; 2];
    let mut t = matrix_tensor_mut(&mut out, &mut s)?;
    // SAFETY: out is [n * n, 2].
    check(unsafe { ffi::gpe_inr_grid_coordinates(n64, &mut t) })?;
    Ok(out)
}

/// Pixel indices split three ways, each part ascending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    pub train: Vec<i64>,
    pub validation: Vec<i64>,
    pub test: Vec<i64>,
}
fn split_from(indices: Vec<i64>, counts: [i64; 3]) -> Split {
    let (a, b) = (counts[0] as usize, (counts[0] + counts[1]) as usize);
    Split { train: indices[..a].to_vec(), validation: indices[a..b].to_vec(), test: indices[b..].to_vec() }
}

/// Lim et al. D.2: uniformly random fractions of 0..num_points, deterministic in seed.
pub fn random_split(num_points: usize, train_fraction: f64, validation_fraction: f64, seed: u64) -> Result<Split> {
    let n = to_i64(num_points, "num_points")?;
    let mut indices = vec![0i64; num_points];
    let mut counts = [0i64; 3];
    let mut s = [n];
    let mut t = crate::tensor(indices.as_mut_ptr() as *const std::os::raw::c_void, ffi::KDL_INT, 64, &mut s);
    // SAFETY: indices holds num_points values, counts 3.
    check(unsafe { ffi::gpe_inr_random_split(n, train_fraction, validation_fraction, seed, &mut t, counts.as_mut_ptr()) })?;
    Ok(split_from(indices, counts))
}

/// Zheng et al.: train on the [::2] x [::2] sub-grid, test on the rest (no validation).
pub fn regular_grid_split(rows: usize, cols: usize) -> Result<Split> {
    let (r, c) = (to_i64(rows, "rows")?, to_i64(cols, "cols")?);
    let count = checked_count("grid", &[rows, cols])?;
    let mut indices = vec![0i64; count];
    let mut counts = [0i64; 3];
    let mut s = [count as i64];
    let mut t = crate::tensor(indices.as_mut_ptr() as *const std::os::raw::c_void, ffi::KDL_INT, 64, &mut s);
    // SAFETY: indices holds rows * cols values, counts 3.
    check(unsafe { ffi::gpe_inr_regular_grid_split(r, c, &mut t, counts.as_mut_ptr()) })?;
    Ok(split_from(indices, counts))
}

/// Mean of (a - b)^2 over two equally long float64 slices.
pub fn mse(a: &[f64], b: &[f64]) -> Result<f64> {
    expect_len("b", b.len(), a.len())?;
    let (mut sa, mut sb) = ([a.len() as i64], [b.len() as i64]);
    let (ta, tb) = (f64_tensor(a, &mut sa), f64_tensor(b, &mut sb));
    let mut out = 0.0;
    // SAFETY: both 1-D of the same length.
    check(unsafe { ffi::gpe_inr_mse(&ta, &tb, &mut out) })?;
    Ok(out)
}

/// PSNR = 10 log10(peak^2 / MSE) in dB (+inf when a == b).
pub fn psnr(a: &[f64], b: &[f64], peak: f64) -> Result<f64> {
    expect_len("b", b.len(), a.len())?;
    let (mut sa, mut sb) = ([a.len() as i64], [b.len() as i64]);
    let (ta, tb) = (f64_tensor(a, &mut sa), f64_tensor(b, &mut sb));
    let mut out = 0.0;
    // SAFETY: both 1-D of the same length.
    check(unsafe { ffi::gpe_inr_psnr(&ta, &tb, peak, &mut out) })?;
    Ok(out)
}

fn c_path(path: &str) -> Result<CString> {
    CString::new(path).map_err(|_| invalid(format!("path {:?} contains a NUL byte", path)))
}

/// A decoded PNG or JPEG file (values in [0, 1]).
pub struct Image {
    handle: *mut ffi::gpe_image,
}
// SAFETY: the handle is immutable after gpe_image_read.
unsafe impl Send for Image {}
unsafe impl Sync for Image {}

impl Image {
    /// Reads a PNG or JPEG; `grayscale` gives one channel, otherwise three (RGB).
    pub fn read(path: &str, grayscale: bool) -> Result<Image> {
        let p = c_path(path)?;
        let mut handle = ptr::null_mut();
        // SAFETY: p is a NUL-terminated string; handle an out pointer.
        check(unsafe { ffi::gpe_image_read(p.as_ptr(), grayscale as i32, &mut handle) })?;
        Ok(Image { handle })
    }
    /// (rows, cols, channels).
    pub fn shape(&self) -> (usize, usize, usize) {
        let (mut r, mut c, mut ch) = (0i64, 0i64, 0i64);
        // SAFETY: a live handle; cannot fail for one.
        let st = unsafe { ffi::gpe_image_shape(self.handle, &mut r, &mut c, &mut ch) };
        debug_assert_eq!(st, ffi::GPE_OK);
        (r as usize, c as usize, ch as usize)
    }
    /// The pixels [rows, cols, channels], row-major.
    pub fn pixels<T: Real>(&self) -> Result<Vec<T>> {
        let (r, c, ch) = self.shape();
        let mut out = vec![T::default(); r * c * ch];
        let mut s = [r as i64, c as i64, ch as i64];
        let mut t = real_tensor_mut(&mut out, &mut s);
        // SAFETY: out holds rows * cols * channels values.
        check(unsafe { ffi::gpe_image_pixels(self.handle, &mut t) })?;
        Ok(out)
    }
}
impl Drop for Image {
    fn drop(&mut self) {
        // SAFETY: the handle came from gpe_image_read and is dropped once.
        unsafe { ffi::gpe_image_destroy(self.handle) }
    }
}

fn pixel_tensor<'a>(pixels: &'a [f64], rows: usize, cols: usize, channels: usize, shape: &'a mut [i64; 3]) -> Result<ffi::DLTensor> {
    expect_len("pixels", pixels.len(), checked_count("pixels", &[rows, cols, channels])?)?;
    // checked_count: every extent fits int64_t.
    *shape = [rows as i64, cols as i64, channels as i64];
    Ok(f64_tensor(pixels, shape))
}

/// Writes pixels [rows, cols, channels (1 or 3)] as an 8-bit PNG, mapping [lo, hi] to 0..255.
pub fn write_png(path: &str, pixels: &[f64], rows: usize, cols: usize, channels: usize, lo: f64, hi: f64) -> Result<()> {
    let p = c_path(path)?;
    let mut s = [0i64; 3];
    let t = pixel_tensor(pixels, rows, cols, channels, &mut s)?;
    // SAFETY: a NUL-terminated path; the length checked.
    check(unsafe { ffi::gpe_image_write_png(p.as_ptr(), &t, lo, hi) })
}

/// As `write_png`, as a baseline JPEG of the given quality (1..100; lossy).
pub fn write_jpeg(path: &str, pixels: &[f64], rows: usize, cols: usize, channels: usize, quality: i32, lo: f64, hi: f64) -> Result<()> {
    let p = c_path(path)?;
    let mut s = [0i64; 3];
    let t = pixel_tensor(pixels, rows, cols, channels, &mut s)?;
    // SAFETY: a NUL-terminated path; the length checked.
    check(unsafe { ffi::gpe_image_write_jpeg(p.as_ptr(), &t, quality, lo, hi) })
}
