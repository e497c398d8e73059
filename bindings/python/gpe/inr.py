"""Coordinate encodings, their analysis, and closed-form INR solvers (gpe.h, "Coordinate
encodings, analysis and INR solvers").

- shifted_basis(): Zheng et al.'s shifted-basis embedders (Gaussian, triangle, ...).
- stable_rank(): |A|_F^2 / |A|_2^2 of an embedding matrix.
- fit_separable_2d() / predict_separable_2d(): the closed form W = A_y S A_x^T of a
  complex (Kronecker) encoding + one linear layer on a separable grid (Zheng et al.
  eq. 10), A = (Psi^T Psi + lambda I)^-1 Psi^T; rows of S are y.

Matrices are float64 NumPy arrays (any strides).
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any, Literal, Sequence, Tuple

import numpy as np
import numpy.typing as npt

from gpe import _ffi
from gpe._core import check, lib, live_handle

if TYPE_CHECKING:  # gpe.coordinate imports this module (KINDS)
    from gpe.coordinate import CoordinateEncoder

KINDS = {"gaussian": 0, "triangle": 1, "rectangle": 2, "impulse": 3, "sine": 4, "square": 5}
ShiftedKind = Literal["gaussian", "triangle", "rectangle", "impulse", "sine", "square"]


def _f64(a: Any, name: str, ndim: int) -> npt.NDArray[np.float64]:
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != ndim:
        raise ValueError("%s must be %d-dimensional" % (name, ndim))
    return a


def _tensors(inputs, outputs):
    """(DLTensor, keepalive) pairs for the inputs, then the outputs (which must be
    writeable), in argument order."""
    return ([_ffi.as_dltensor(a, output=False) for a in inputs]
            + [_ffi.as_dltensor(a, output=True) for a in outputs])


def shifted_basis(coords: npt.ArrayLike, kind: ShiftedKind, num_shifts: int, width: float,
                  lo: float = 0.0, hi: float = 1.0) -> npt.NDArray[np.float64]:
    """Psi[n, i] = psi(t_i - coords[n]), t_i = lo + i (hi - lo) / num_shifts."""
    if kind not in KINDS:
        raise ValueError("kind must be one of %s" % sorted(KINDS))
    coords = _f64(coords, "coords", 1)
    out = np.empty((coords.shape[0], num_shifts), dtype=np.float64)
    o = _ffi.ShiftedBasisOptions(ctypes.sizeof(_ffi.ShiftedBasisOptions), KINDS[kind],
                                 num_shifts, width, lo, hi)
    tc, kc = _ffi.as_dltensor(coords, output=False)
    to, ko = _ffi.as_dltensor(out, output=True)
    check(lib().gpe_shifted_basis_encode(ctypes.byref(o), ctypes.byref(tc), ctypes.byref(to)))
    return out


def stable_rank(matrix: npt.ArrayLike) -> float:
    """|A|_F^2 / |A|_2^2."""
    matrix = _f64(matrix, "matrix", 2)
    t, keep = _ffi.as_dltensor(matrix, output=False)
    r = ctypes.c_double()
    check(lib().gpe_stable_rank(ctypes.byref(t), ctypes.byref(r)))
    return r.value


def fit_separable_2d(psi_y: npt.ArrayLike, psi_x: npt.ArrayLike, image: npt.ArrayLike,
                     lam: float = 0.0, float32_image_products: bool = False,
                     rcond: float = 0.0) -> npt.NDArray[np.float64]:
    """W [Ky, Kx] minimising |Psi_y W Psi_x^T - image|^2 with ridge lam on each factor.

    rcond > 0 takes each factor's pseudo-inverse from its SVD, dropping singular values
    below rcond * s_max (NumPy's pinv(Psi, rcond) when lam = 0); rcond = 0 refuses
    singular factors with a GpeError."""
    psi_y, psi_x = _f64(psi_y, "psi_y", 2), _f64(psi_x, "psi_x", 2)
    image = _f64(image, "image", 2)
    w = np.empty((psi_y.shape[1], psi_x.shape[1]), dtype=np.float64)
    o = _ffi.SeparableFitOptions(ctypes.sizeof(_ffi.SeparableFitOptions),
                                 1 if float32_image_products else 0, lam, rcond)
    ts = _tensors((psi_y, psi_x, image), (w,))
    check(lib().gpe_inr_fit_separable_2d(ctypes.byref(o), *[ctypes.byref(t) for t, _ in ts]))
    return w


def predict_separable_2d(psi_y: npt.ArrayLike, psi_x: npt.ArrayLike,
                         w: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Psi_y W Psi_x^T."""
    psi_y, psi_x, w = _f64(psi_y, "psi_y", 2), _f64(psi_x, "psi_x", 2), _f64(w, "w", 2)
    out = np.empty((psi_y.shape[0], psi_x.shape[0]), dtype=np.float64)
    ts = _tensors((psi_y, psi_x, w), (out,))
    check(lib().gpe_inr_predict_separable_2d(*[ctypes.byref(t) for t, _ in ts]))
    return out


def fit_separable_3d(psi: Sequence[npt.ArrayLike], volume: npt.ArrayLike, lam: float = 0.0,
                     rcond: float = 0.0) -> npt.NDArray[np.float64]:
    """W [K0, K1, K2] = V x_0 A_0 x_1 A_1 x_2 A_2 for factors psi = (Psi_0, Psi_1, Psi_2)."""
    factors = [_f64(p, "psi_%d" % d, 2) for d, p in enumerate(psi)]
    if len(factors) != 3:
        raise ValueError("psi must hold three factors")
    volume = _f64(volume, "volume", 3)
    w = np.empty(tuple(p.shape[1] for p in factors), dtype=np.float64)
    o = _ffi.SeparableFitOptions(ctypes.sizeof(_ffi.SeparableFitOptions), 0, lam, rcond)
    ts = _tensors((*factors, volume), (w,))
    check(lib().gpe_inr_fit_separable_3d(ctypes.byref(o), *[ctypes.byref(t) for t, _ in ts]))
    return w


def predict_separable_3d(psi: Sequence[npt.ArrayLike],
                         w: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """W x_0 Psi_0 x_1 Psi_1 x_2 Psi_2."""
    factors = [_f64(p, "psi_%d" % d, 2) for d, p in enumerate(psi)]
    w = _f64(w, "w", 3)
    out = np.empty(tuple(p.shape[0] for p in factors), dtype=np.float64)
    ts = _tensors((*factors, w), (out,))
    check(lib().gpe_inr_predict_separable_3d(*[ctypes.byref(t) for t, _ in ts]))
    return out


def _encoders(keep, *encoders):
    """The blended fit's encoders' handles, held for the call (live_handle, `keep` its
    keep-alive list): open gpe coordinate encoders (another handle type, e.g. an
    AlgebraicGrid's, would reach C as one; a closed one as NULL)."""
    for name, e in zip(("encoder_x", "encoder_y"), encoders):
        if getattr(e, "_handle_kind", None) != "coordinate_encoder":
            raise TypeError("%s must be a gpe coordinate encoder; got %s"
                            % (name, type(e).__name__))
    return [live_handle(e, name, keep) for name, e in zip(("encoder_x", "encoder_y"), encoders)]


def fit_blended_2d(encoder_x: CoordinateEncoder, encoder_y: CoordinateEncoder,
                   grid_x: npt.ArrayLike, grid_y: npt.ArrayLike, points: npt.ArrayLike,
                   values: npt.ArrayLike, lam: float = 1e-6, max_iterations: int = 500,
                   tolerance: float = 1e-6) -> Tuple[npt.NDArray[np.float64], int, float]:
    """Zheng et al.'s blended fit of scattered samples (points [P, 2] as (x, y), values
    [P]) through the virtual grid grid_y x grid_x; encoders are 1-D gpe coordinate
    encoders. Returns (W [Ky, Kx], iterations, rms residual at the samples)."""
    keep: list = []
    hx, hy = _encoders(keep, encoder_x, encoder_y)
    grid_x, grid_y = _f64(grid_x, "grid_x", 1), _f64(grid_y, "grid_y", 1)
    points, values = _f64(points, "points", 2), _f64(values, "values", 1)
    ky, kx = encoder_y.dims[1], encoder_x.dims[1]
    w = np.empty((ky, kx), dtype=np.float64)
    o = _ffi.BlendedFitOptions(ctypes.sizeof(_ffi.BlendedFitOptions), max_iterations, lam,
                               tolerance)
    it, rms = ctypes.c_int32(), ctypes.c_double()
    ts = _tensors((grid_x, grid_y, points, values), (w,))
    check(lib().gpe_inr_fit_blended_2d(ctypes.byref(o), hx, hy,
                                       *[ctypes.byref(t) for t, _ in ts], ctypes.byref(it),
                                       ctypes.byref(rms)))
    return w, it.value, rms.value


def predict_blended_2d(encoder_x: CoordinateEncoder, encoder_y: CoordinateEncoder,
                       grid_x: npt.ArrayLike, grid_y: npt.ArrayLike, points: npt.ArrayLike,
                       w: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """f(points) for weights W through the same blending."""
    keep: list = []
    hx, hy = _encoders(keep, encoder_x, encoder_y)
    grid_x, grid_y = _f64(grid_x, "grid_x", 1), _f64(grid_y, "grid_y", 1)
    points, w = _f64(points, "points", 2), _f64(w, "w", 2)
    out = np.empty(points.shape[0], dtype=np.float64)
    ts = _tensors((grid_x, grid_y, points, w), (out,))
    check(lib().gpe_inr_predict_blended_2d(hx, hy,
                                           *[ctypes.byref(t) for t, _ in ts]))
    return out
