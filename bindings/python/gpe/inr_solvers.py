"""INR training, data, metrics and image files (gpe.h, "INR training, data and metrics",
since 0.5.0).

- Mlp: a small fully connected ReLU network trained full-batch with Adam on the MSE
  (Lim et al., appendix D.2), with mlp_num_parameters / mlp_init / mlp_fit / mlp_predict
  as plain functions over its flat parameter vector.
- fit_dense_adam() / fit_separable_adam_2d(): Adam on the single linear layer over a fixed
  encoding (Zheng et al. sec. 6.2), the iterative counterparts of fit_separable_2d().
- synthetic_image() / synthetic_vector_field() / grid_coordinates(): Lim et al.'s analytic
  Radial and Spiral data (appendix D.1) on the n x n pixel-centre grid over [-1, 1]^2.
- random_split() / regular_grid_split(): the papers' train / validation / test splits.
- mse() / psnr(): the metrics.
- image_read() / image_write_png() / image_write_jpeg(): PNG and JPEG files.

Progress callbacks (progress=, validation_progress=) run on the calling thread during the
fit; an exception raised in one is raised when the fit returns (the fit is not cut short).

Adam throughout (Kingma & Ba 2015, Algorithm 1, as torch.optim.Adam):
m <- b1 m + (1 - b1) g, v <- b2 v + (1 - b2) g^2,
p <- p - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, Callable, Literal, NamedTuple, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

from gpe import _ffi
from gpe._core import check, lib

TASKS = {"radial": 0, "spiral": 1}
Task = Literal["radial", "spiral"]
# progress(step, train_loss) and validation_progress(step, train_loss, validation_loss).
Progress = Callable[[int, float], object]
ValidationProgress = Callable[[int, float, float], object]


class Fit(NamedTuple):
    """The result of an iterative fit: the weights (or flat MLP parameters), the training
    MSE before each update, and the MSE after the last."""
    weights: npt.NDArray[Any]
    train_loss: npt.NDArray[np.float64]
    final_loss: float


class ValidatedFit(NamedTuple):
    """mlp_fit with a validation set: Fit's fields, then the validation curve: the update
    count of each evaluation (int64 [K]) and the held-out MSE after it (float64 [K])."""
    weights: npt.NDArray[Any]
    train_loss: npt.NDArray[np.float64]
    final_loss: float
    validation_steps: npt.NDArray[np.int64]
    validation_loss: npt.NDArray[np.float64]


class _CallbackErrors:
    """The first exception raised by a Python callback during one C call.

    A callback runs inside the C call, which an exception cannot cross (ctypes would print
    it and carry on). The wrappers made here store the first exception, skip the callbacks
    after it, and reraise() raises it once the C call has returned."""

    def __init__(self):
        self.error = None

    def wrap(self, callback, *convert):
        def call(_user, *args):
            if self.error is not None:
                return
            try:
                callback(*[c(a) for c, a in zip(convert, args)])
            except BaseException as e:  # re-raised by reraise() after the C call
                self.error = e
        return call

    def reraise(self):
        if self.error is not None:
            error, self.error = self.error, None
            raise error


def _progress(callback, errors):
    """A C progress callback calling callback(step, train_loss), or a null one."""
    if callback is None:
        return _ffi.ProgressCallback()
    return _ffi.ProgressCallback(errors.wrap(callback, int, float))


def _validation_progress(callback, errors):
    """A C validation progress callback calling callback(step, train_loss, validation_loss),
    or a null one."""
    if callback is None:
        return _ffi.ValidationProgressCallback()
    return _ffi.ValidationProgressCallback(errors.wrap(callback, int, float, float))


def _call(errors, status):
    """check(status) of a call that ran Python callbacks: a callback's exception first,
    chained to the status (check() also consumes a thread pool's deferred error, which
    would otherwise surface in the thread's next call)."""
    try:
        check(status)
    finally:
        errors.reraise()


def _tensors(inputs, outputs):
    """(DLTensor, keepalive) pairs for the inputs, then the outputs (which must be
    writeable), in argument order."""
    return ([_ffi.as_dltensor(a, output=False) for a in inputs]
            + [_ffi.as_dltensor(a, output=True) for a in outputs])


def _float_dtype(dtype):
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise TypeError("dtype must be float32 or float64, got %s" % dtype)
    return dtype


def _mlp_options(hidden_width, num_hidden_layers, steps=0, learning_rate=1e-3,
                 betas=(0.9, 0.999), eps=1e-8, seed=0, report_every=0, progress=None,
                 errors=None):
    cb = _progress(progress, errors)
    o = _ffi.MlpOptions(ctypes.sizeof(_ffi.MlpOptions), hidden_width, num_hidden_layers, steps,
                        learning_rate, betas[0], betas[1], eps, seed, report_every, cb, None)
    return o, cb  # keep cb referenced while the call runs


def mlp_num_parameters(input_dim: int, output_dim: int, hidden_width: int = 128,
                       num_hidden_layers: int = 3) -> int:
    """The number of entries of the flat parameter vector (W_0, b_0, W_1, b_1, ...)."""
    o, _ = _mlp_options(hidden_width, num_hidden_layers)
    n = ctypes.c_int64()
    check(lib().gpe_inr_mlp_num_parameters(ctypes.byref(o), input_dim, output_dim,
                                           ctypes.byref(n)))
    return n.value


def mlp_init(input_dim: int, output_dim: int, hidden_width: int = 128,
             num_hidden_layers: int = 3, seed: int = 0,
             dtype: npt.DTypeLike = np.float32) -> npt.NDArray[np.floating[Any]]:
    """PyTorch's nn.Linear default initialisation, W, b ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
    from a seeded std::mt19937_64: the flat parameters (float32 or float64)."""
    dtype = _float_dtype(dtype)
    o, _ = _mlp_options(hidden_width, num_hidden_layers, seed=seed)
    out = np.empty(mlp_num_parameters(input_dim, output_dim, hidden_width, num_hidden_layers),
                   dtype=dtype)
    t, keep = _ffi.as_dltensor(out, output=True)
    check(lib().gpe_inr_mlp_init(ctypes.byref(o), input_dim, output_dim, ctypes.byref(t)))
    return out


def mlp_num_evaluations(steps: int, report_every: int = 0) -> int:
    """K, the number of validation evaluations (and progress calls) of a fit: after every
    report_every updates and after the last (report_every 0: the last only); 1 when
    steps is 0 (the initial network)."""
    o, _ = _mlp_options(1, 0, steps, report_every=report_every)
    n = ctypes.c_int64()
    check(lib().gpe_inr_mlp_num_evaluations(ctypes.byref(o), ctypes.byref(n)))
    return n.value


def mlp_fit(features: npt.ArrayLike, targets: npt.ArrayLike, hidden_width: int = 128,
            num_hidden_layers: int = 3, steps: int = 500, learning_rate: float = 1e-3,
            betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, seed: int = 0,
            initial_parameters: Optional[npt.ArrayLike] = None,
            progress: Optional[Progress] = None, report_every: int = 0,
            validation: Optional[Tuple[npt.ArrayLike, npt.ArrayLike]] = None,
            validation_progress: Optional[ValidationProgress] = None
            ) -> Union[Fit, ValidatedFit]:
    """Full-batch Adam on the MSE of a ReLU MLP features [N, D] -> targets [N, C].

    features and targets share a dtype: float32 trains the float32 network (the fast
    path), float64 the same network in float64. initial_parameters (flat, that dtype)
    default to mlp_init(..., seed). progress(step, train_loss) is called every
    report_every steps (0: after the last only). Returns Fit(parameters, train_loss
    [steps], final_loss). Raises GpeError on bad input or divergence.

    validation=(features [M, D], targets [M, C]): a held-out set, evaluated on the
    progress schedule (mlp_num_evaluations(steps, report_every) times); the training is
    unchanged by it. Returns ValidatedFit(..., validation_steps, validation_loss).
    validation_progress(step, train_loss, validation_loss) (needs validation=) is called
    at each evaluation, after progress, with validation_loss[k] as it is measured.

    The callbacks run on this thread during the fit. An exception raised in one stops
    the callbacks (the fit itself runs to its end) and is raised when the fit returns."""
    features = np.asarray(features)
    dtype = _float_dtype(features.dtype)
    targets = np.asarray(targets, dtype=dtype)
    if features.ndim != 2 or targets.ndim != 2:
        raise ValueError("features and targets must be 2-dimensional [N, D], [N, C]")
    if validation_progress is not None and validation is None:
        raise ValueError("validation_progress needs validation=(features, targets): it reports "
                         "the loss on that set")
    errors = _CallbackErrors()
    val = None
    vcb = None
    if validation is not None:
        if len(validation) != 2:
            raise ValueError("validation must be a (features, targets) pair")
        vx = np.asarray(validation[0], dtype=dtype)
        vy = np.asarray(validation[1], dtype=dtype)
        if vx.ndim != 2 or vy.ndim != 2:
            raise ValueError("validation features and targets must be 2-dimensional [M, D], "
                             "[M, C]")
        k = mlp_num_evaluations(steps, report_every)
        vsteps = np.empty(k, dtype=np.int64)
        vloss = np.empty(k, dtype=np.float64)
        views = _tensors((vx, vy), (vsteps, vloss))
        val = _ffi.MlpValidation()
        val.features, val.targets, val.steps, val.loss = [ctypes.pointer(t) for t, _ in views]
        vcb = _validation_progress(validation_progress, errors)  # referenced until the call ends
        val.progress = vcb
    o, cb = _mlp_options(hidden_width, num_hidden_layers, steps, learning_rate, betas, eps,
                         seed, report_every, progress, errors)
    count = mlp_num_parameters(features.shape[1], targets.shape[1], hidden_width,
                               num_hidden_layers)
    params = np.empty(count, dtype=dtype)
    loss = np.empty(steps, dtype=np.float64)
    final = ctypes.c_double()
    (tf, kf), (tt, kt), (tp, kp), (tl, kl) = _tensors((features, targets), (params, loss))
    init = None
    if initial_parameters is not None:
        ip = np.asarray(initial_parameters, dtype=dtype)
        ti, ki = _ffi.as_dltensor(ip, output=False)
        init = ctypes.byref(ti)
    _call(errors, lib().gpe_inr_mlp_fit_v2(ctypes.byref(o), ctypes.byref(tf), ctypes.byref(tt),
                                           init, ctypes.byref(tp), ctypes.byref(tl),
                                           ctypes.byref(final),
                                           None if val is None else ctypes.byref(val)))
    if val is None:
        return Fit(params, loss, final.value)
    return ValidatedFit(params, loss, final.value, vsteps, vloss)


def mlp_predict(parameters: npt.ArrayLike, features: npt.ArrayLike, output_dim: int,
                hidden_width: int = 128, num_hidden_layers: int = 3
                ) -> npt.NDArray[np.floating[Any]]:
    """The network's output [N, output_dim] on features [N, D] (parameters' dtype)."""
    parameters = np.asarray(parameters)
    dtype = _float_dtype(parameters.dtype)
    features = np.asarray(features, dtype=dtype)
    if features.ndim != 2:
        raise ValueError("features must be 2-dimensional [N, D]")
    o, _ = _mlp_options(hidden_width, num_hidden_layers)
    out = np.empty((features.shape[0], output_dim), dtype=dtype)
    ts = _tensors((parameters, features), (out,))
    check(lib().gpe_inr_mlp_predict(ctypes.byref(o), *[ctypes.byref(t) for t, _ in ts]))
    return out


class Mlp:
    """A ReLU MLP input_dim -> hidden_width (num_hidden_layers times) -> output_dim.

    Layer l maps H to H W_l + b_l (W_l [fan_in, fan_out]); hidden layers apply ReLU. The
    parameters are one flat vector `parameters` (W_0 row-major, b_0, W_1, b_1, ...);
    weight(l) and bias(l) are views of it."""

    def __init__(self, input_dim: int, output_dim: int, hidden_width: int = 128,
                 num_hidden_layers: int = 3, seed: int = 0,
                 dtype: npt.DTypeLike = np.float32) -> None:
        self.input_dim: int = input_dim
        self.output_dim: int = output_dim
        self.hidden_width: int = hidden_width
        self.num_hidden_layers: int = num_hidden_layers
        self.parameters: npt.NDArray[Any] = mlp_init(input_dim, output_dim, hidden_width,
                                                     num_hidden_layers, seed, dtype)

    def _layer(self, l):
        layers = self.num_hidden_layers + 1
        if not 0 <= l < layers:
            raise IndexError("layer %d outside 0..%d" % (l, layers - 1))
        off = 0
        for k in range(l + 1):
            fan_in = self.input_dim if k == 0 else self.hidden_width
            fan_out = self.output_dim if k == layers - 1 else self.hidden_width
            if k < l:
                off += (fan_in + 1) * fan_out
        return off, fan_in, fan_out

    def weight(self, l: int) -> npt.NDArray[Any]:
        """W_l [fan_in, fan_out], a view of `parameters`."""
        off, fan_in, fan_out = self._layer(l)
        return self.parameters[off:off + fan_in * fan_out].reshape(fan_in, fan_out)

    def bias(self, l: int) -> npt.NDArray[Any]:
        """b_l [fan_out], a view of `parameters`."""
        off, fan_in, fan_out = self._layer(l)
        return self.parameters[off + fan_in * fan_out:off + (fan_in + 1) * fan_out]

    def fit(self, features: npt.ArrayLike, targets: npt.ArrayLike, steps: int = 500,
            learning_rate: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999),
            eps: float = 1e-8, progress: Optional[Progress] = None, report_every: int = 0,
            validation: Optional[Tuple[npt.ArrayLike, npt.ArrayLike]] = None,
            validation_progress: Optional[ValidationProgress] = None
            ) -> Union[Tuple[npt.NDArray[np.float64], float],
                       Tuple[npt.NDArray[np.float64], float, npt.NDArray[np.int64],
                             npt.NDArray[np.float64]]]:
        """Trains from the current parameters (a fresh Adam state); returns
        (train_loss [steps], final_loss) and updates `parameters`. With
        validation=(features, targets) (see mlp_fit, also for validation_progress) it
        returns (train_loss, final_loss, validation_steps, validation_loss)."""
        r = mlp_fit(np.asarray(features, dtype=self.parameters.dtype), targets,
                    self.hidden_width, self.num_hidden_layers, steps, learning_rate, betas, eps,
                    initial_parameters=self.parameters, progress=progress,
                    report_every=report_every, validation=validation,
                    validation_progress=validation_progress)
        self.parameters = r.weights
        if validation is None:
            return r.train_loss, r.final_loss
        assert isinstance(r, ValidatedFit)  # what mlp_fit returns given validation
        return r.train_loss, r.final_loss, r.validation_steps, r.validation_loss

    def predict(self, features: npt.ArrayLike) -> npt.NDArray[Any]:
        return mlp_predict(self.parameters, features, self.output_dim, self.hidden_width,
                           self.num_hidden_layers)


def _linear_options(steps, learning_rate, final_learning_rate, betas, eps, report_every,
                    progress, errors):
    cb = _progress(progress, errors)
    o = _ffi.LinearAdamOptions(ctypes.sizeof(_ffi.LinearAdamOptions), steps, learning_rate,
                               learning_rate if final_learning_rate is None
                               else final_learning_rate, betas[0], betas[1], eps,
                               report_every, cb, None)
    return o, cb


def _f64_2d(a: Any, name: str) -> npt.NDArray[np.float64]:
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 2:
        raise ValueError("%s must be 2-dimensional" % name)
    return a


def fit_dense_adam(features: npt.ArrayLike, targets: npt.ArrayLike, steps: int = 2000,
                   learning_rate: float = 1e-2, final_learning_rate: Optional[float] = None,
                   betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                   progress: Optional[Progress] = None, report_every: int = 0) -> Fit:
    """Adam from W = 0 on MSE(Phi W, Y): features Phi [N, F], targets Y [N, C] (or [N]),
    float64. The learning rate decays exponentially from learning_rate (step 1) to
    final_learning_rate (the last step; None: constant). Returns Fit(W [F, C],
    train_loss [steps], final_loss)."""
    features = _f64_2d(features, "features")
    targets = np.asarray(targets, dtype=np.float64)
    squeeze = targets.ndim == 1
    targets = _f64_2d(targets[:, None] if squeeze else targets, "targets")
    errors = _CallbackErrors()
    o, cb = _linear_options(steps, learning_rate, final_learning_rate, betas, eps, report_every,
                            progress, errors)
    w = np.empty((features.shape[1], targets.shape[1]), dtype=np.float64)
    loss = np.empty(steps, dtype=np.float64)
    final = ctypes.c_double()
    ts = _tensors((features, targets), (w, loss))
    _call(errors, lib().gpe_inr_fit_dense_adam(ctypes.byref(o),
                                               *[ctypes.byref(t) for t, _ in ts],
                                               ctypes.byref(final)))
    return Fit(w[:, 0] if squeeze else w, loss, final.value)


def fit_separable_adam_2d(psi_y: npt.ArrayLike, psi_x: npt.ArrayLike, image: npt.ArrayLike,
                          steps: int = 2000, learning_rate: float = 1e-2,
                          final_learning_rate: Optional[float] = None,
                          betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                          progress: Optional[Progress] = None, report_every: int = 0) -> Fit:
    """Adam from W = 0 on MSE(Psi_y W Psi_x^T, S) (Zheng et al. eq. 10, no Kronecker
    product): psi_y [Ny, Ky], psi_x [Nx, Kx], image S [Ny, Nx]. Returns Fit(W [Ky, Kx],
    train_loss [steps], final_loss)."""
    psi_y, psi_x = _f64_2d(psi_y, "psi_y"), _f64_2d(psi_x, "psi_x")
    image = _f64_2d(image, "image")
    errors = _CallbackErrors()
    o, cb = _linear_options(steps, learning_rate, final_learning_rate, betas, eps, report_every,
                            progress, errors)
    w = np.empty((psi_y.shape[1], psi_x.shape[1]), dtype=np.float64)
    loss = np.empty(steps, dtype=np.float64)
    final = ctypes.c_double()
    ts = _tensors((psi_y, psi_x, image), (w, loss))
    _call(errors, lib().gpe_inr_fit_separable_adam_2d(ctypes.byref(o),
                                                      *[ctypes.byref(t) for t, _ in ts],
                                                      ctypes.byref(final)))
    return Fit(w, loss, final.value)


def _task(task):
    if task not in TASKS:
        raise ValueError("task must be one of %s" % sorted(TASKS))
    return TASKS[task]


def synthetic_image(task: Task, n: int, signed: bool = False) -> npt.NDArray[np.float64]:
    """Lim et al. D.1 on the n x n grid (rows = y): "radial" |sin(15 sqrt(r))|, "spiral"
    |sin(30 sqrt(0.1 r) + theta)|; signed=True drops the absolute value. [n, n] float64."""
    out = np.empty((n, n), dtype=np.float64)
    t, keep = _ffi.as_dltensor(out, output=True)
    check(lib().gpe_inr_synthetic_image(_task(task), 1 if signed else 0, ctypes.byref(t)))
    return out


def synthetic_vector_field(task: Task, n: int) -> npt.NDArray[np.float64]:
    """Lim et al. eqs. 30, 31: f(r, theta) (cos theta, sin theta) with f the signed sine of
    synthetic_image. [n, n, 2] float64 (v_x, v_y)."""
    out = np.empty((n, n, 2), dtype=np.float64)
    t, keep = _ffi.as_dltensor(out, output=True)
    check(lib().gpe_inr_synthetic_vector_field(_task(task), ctypes.byref(t)))
    return out


def grid_coordinates(n: int) -> npt.NDArray[np.float64]:
    """[n * n, 2]: row i * n + j holds (x_j, y_i), x_j = -1 + (2 j + 1) / n."""
    out = np.empty((n * n, 2), dtype=np.float64)
    t, keep = _ffi.as_dltensor(out, output=True)
    check(lib().gpe_inr_grid_coordinates(n, ctypes.byref(t)))
    return out


def _split(call: Callable[[Any, Any], int], num_points: int
           ) -> Tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    idx = np.empty(num_points, dtype=np.int64)
    counts = (ctypes.c_int64 * 3)()
    t, keep = _ffi.as_dltensor(idx, output=True)
    check(call(ctypes.byref(t), counts))
    a, b = counts[0], counts[0] + counts[1]
    return idx[:a], idx[a:b], idx[b:]


def random_split(num_points: int, train_fraction: float = 0.05,
                 validation_fraction: float = 0.4, seed: int = 0
                 ) -> Tuple[npt.NDArray[np.int64], npt.NDArray[np.int64],
                            npt.NDArray[np.int64]]:
    """Lim et al. D.2: (train, validation, test) index arrays, each ascending, sizes
    round(fraction * num_points) with halves away from zero (Python's round() takes them
    to even), validation clipped to what train leaves (3 points at 0.5 / 0.5: 2, 1, 0),
    the rest test; deterministic in seed."""
    return _split(lambda t, c: lib().gpe_inr_random_split(num_points, train_fraction,
                                                          validation_fraction, seed, t, c),
                  num_points)


def regular_grid_split(rows: int, cols: int
                       ) -> Tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Zheng et al.: (train, test) row-major indices: train on the [::2] x [::2] sub-grid."""
    train, _, test = _split(lambda t, c: lib().gpe_inr_regular_grid_split(rows, cols, t, c),
                            rows * cols)
    return train, test


def _pair(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return _ffi.as_dltensor(a, output=False), _ffi.as_dltensor(b, output=False)


def mse(a: npt.ArrayLike, b: npt.ArrayLike) -> float:
    """Mean over all entries of (a - b)^2 (1 to 3 dimensions, finite)."""
    (ta, ka), (tb, kb) = _pair(a, b)
    r = ctypes.c_double()
    check(lib().gpe_inr_mse(ctypes.byref(ta), ctypes.byref(tb), ctypes.byref(r)))
    return r.value


def psnr(a: npt.ArrayLike, b: npt.ArrayLike, peak: float = 1.0) -> float:
    """10 log10(peak^2 / mse(a, b)) in dB (inf when a == b)."""
    (ta, ka), (tb, kb) = _pair(a, b)
    r = ctypes.c_double()
    check(lib().gpe_inr_psnr(ctypes.byref(ta), ctypes.byref(tb), peak, ctypes.byref(r)))
    return r.value


def image_read(path: Union[str, bytes, os.PathLike[str], os.PathLike[bytes]],
               grayscale: bool = False,
               dtype: npt.DTypeLike = np.float64) -> npt.NDArray[np.floating[Any]]:
    """A PNG or JPEG file (told apart by its signature) as values in [0, 1]: [rows, cols]
    when grayscale (colour to BT.601 luma: PNG on the encoded values, JPEG libjpeg's Y),
    else [rows, cols, 3] (gray files expand to three equal channels)."""
    dtype = _float_dtype(dtype)
    h = ctypes.c_void_p()
    check(lib().gpe_image_read(_path(path), 1 if grayscale else 0, ctypes.byref(h)))
    try:
        rows, cols, ch = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64()
        check(lib().gpe_image_shape(h, ctypes.byref(rows), ctypes.byref(cols), ctypes.byref(ch)))
        out = np.empty((rows.value, cols.value, ch.value), dtype=dtype)
        t, keep = _ffi.as_dltensor(out, output=True)
        check(lib().gpe_image_pixels(h, ctypes.byref(t)))
    finally:
        lib().gpe_image_destroy(h)
    return out[:, :, 0] if grayscale else out


def _path(path):
    """path as bytes for the C library, refused with an embedded NUL (C would read the
    name up to it, as another file), as Python's open() does."""
    p = os.fsencode(path)
    if b"\0" in p:
        raise ValueError("embedded null byte in path %r" % (path,))
    return p


def _pixels(pixels):
    pixels = np.asarray(pixels)
    if pixels.dtype not in (np.float32, np.float64):
        pixels = pixels.astype(np.float64)
    return pixels


def image_write_png(path: Union[str, bytes, os.PathLike[str], os.PathLike[bytes]],
                    pixels: npt.ArrayLike, lo: float = 0.0, hi: float = 1.0) -> None:
    """Writes [rows, cols] or [rows, cols, 1 | 3] values (finite) as an 8-bit PNG, clamping
    to [lo, hi] and mapping it to 0..255."""
    t, keep = _ffi.as_dltensor(_pixels(pixels), output=False)
    check(lib().gpe_image_write_png(_path(path), ctypes.byref(t), lo, hi))


def image_write_jpeg(path: Union[str, bytes, os.PathLike[str], os.PathLike[bytes]],
                     pixels: npt.ArrayLike, quality: int = 95, lo: float = 0.0,
                     hi: float = 1.0) -> None:
    """As image_write_png, as a baseline JPEG of the given quality (1..100; lossy)."""
    t, keep = _ffi.as_dltensor(_pixels(pixels), output=False)
    check(lib().gpe_image_write_jpeg(_path(path), ctypes.byref(t), quality, lo, hi))
