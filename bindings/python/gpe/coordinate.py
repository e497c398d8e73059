"""Coordinate encoders, graph encodings and embedder analysis (gpe.h, "Coordinate
encoders, graph encodings and embedder analysis").

Encoders (one handle type; encode(points) -> features, backward(points, grad_features)
-> grad_points, float64 NumPy arrays of any strides):
- FourierFeatures: Gaussian RFF (Tancik et al.), linearly / log-linearly spaced
  (Zheng et al. eqs. 50-51), NeRF octaves, Lim et al.'s T x T; or given frequencies.
- So2Bessel: Lim et al.'s J_m(c r) e^{i k theta} as real features.
- ShiftedEncoder: Zheng et al.'s simple (concatenated) or complex (Kronecker) shifted bases.
- SphericalHarmonics: real, orthonormal Y_lm up to a degree.
Functions: bessel_j, laplacian_eigenvectors, embedded_distance_matrix,
embedder_stable_rank, embedder_distance, condition_number.
"""

from __future__ import annotations

import ctypes
from typing import Any, Literal, Mapping, Optional, Sequence, Tuple, Type, TypeVar

import numpy as np
import numpy.typing as npt

from gpe import _ffi
from gpe._core import check, close_handle, hold, lib, rebuild_recipe
from gpe.inr import KINDS as SHIFTED_KINDS

FOURIER_KINDS = {"gaussian": 0, "linear": 1, "log_linear": 2, "nerf": 3, "txt": 4}
CONVENTIONS = {"two_pi": 0, "angular": 1}
EMBEDDERS = {"gaussian": 0, "rectangle": 1, "triangle": 2, "rff": 3}
LAPLACIANS = {"combinatorial": 0, "symmetric": 1}

FourierKind = Literal["gaussian", "linear", "log_linear", "nerf", "txt"]
Convention = Literal["two_pi", "angular"]
Embedder = Literal["gaussian", "rectangle", "triangle", "rff"]
_E = TypeVar("_E", bound="CoordinateEncoder")
_F = TypeVar("_F", bound="FourierFeatures")


class _Call:
    """Describes NumPy arrays as DLTensors for one call, keeping them alive."""

    def __init__(self):
        self._keep = []

    def __call__(self, array, output=False):
        if array is None:
            return None
        t, keep = _ffi.as_dltensor(array, output=output)
        self._keep.append((t, keep))
        return ctypes.byref(t)

    def out(self, array):
        """An array the library writes into (refused when read-only)."""
        return self(array, output=True)


def _f64(a: Any, name: str, ndim: int) -> npt.NDArray[np.float64]:
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != ndim:
        raise ValueError("%s must be %d-dimensional" % (name, ndim))
    return a


class CoordinateEncoder:
    """A gpe_coordinate_encoder handle: points [N, D] -> features [N, F].

    The encoders are immutable, so copy.copy, copy.deepcopy and pickle rebuild an equal
    encoder (its own handle) from the arguments it was built from: a sampled encoder is
    re-sampled with its seed, which reproduces it exactly (std::mt19937_64)."""

    # What gpe.inr's blended fit checks its encoders by (gpe.inr cannot import this
    # module: this module imports it).
    _handle_kind = "coordinate_encoder"

    # (callable, args) rebuilding this encoder; set by each constructor.
    _recipe: Optional[Tuple[Any, Tuple[Any, ...]]] = None

    def __init__(self, handle: Optional[int]) -> None:
        self._handle = ctypes.c_void_p(handle)

    def close(self) -> None:
        """Frees the library handle (idempotent, also from several threads at once; also
        done when garbage-collected). Calls on this object running on other threads keep
        it until the last of them returns; later calls raise ValueError."""
        close_handle(self, lambda h: lib().gpe_coordinate_encoder_destroy(h))

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def __reduce__(self) -> Any:
        return rebuild_recipe(self, self._recipe)

    def __enter__(self: _E) -> _E:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def dims(self) -> Tuple[int, int]:
        """(D, F): input and output widths."""
        d, f = ctypes.c_int64(), ctypes.c_int64()
        with hold(self) as h:
            check(lib().gpe_coordinate_encoder_dims(h, ctypes.byref(d), ctypes.byref(f)))
        return d.value, f.value

    def encode(self, points: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """features [N, F] of points [N, D] (float64)."""
        points = _f64(points, "points", 2)
        out = np.empty((points.shape[0], self.dims[1]), dtype=np.float64)
        t = _Call()
        with hold(self) as h:
            check(lib().gpe_coordinate_encode(h, t(points), t.out(out)))
        return out

    __call__ = encode

    def backward(self, points: npt.ArrayLike,
                 grad_features: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """dL/dpoints from dL/dfeatures (the vector-Jacobian product)."""
        points = _f64(points, "points", 2)
        grad_features = _f64(grad_features, "grad_features", 2)
        out = np.empty(points.shape, dtype=np.float64)
        t = _Call()
        with hold(self) as h:
            check(lib().gpe_coordinate_backward(h, t(points), t(grad_features), t.out(out)))
        return out


class FourierFeatures(CoordinateEncoder):
    """x -> [cos(w_f . x)]_f ++ [sin(w_f . x)]_f.

    kind: "gaussian" (b ~ N(0, scale^2), `convention` "two_pi" or "angular"), "linear"
    (sigma = scale), "log_linear" (sigma = scale), "nerf", or "txt" (dim 2, no 2 pi).
    num_frequencies is the total for gaussian/txt and per axis for the others."""

    def __init__(self, kind: FourierKind, dim: int, num_frequencies: int, scale: float = 1.0,
                 convention: Convention = "two_pi", seed: int = 0) -> None:
        if kind not in FOURIER_KINDS:
            raise ValueError("kind must be one of %s" % sorted(FOURIER_KINDS))
        if convention not in CONVENTIONS:
            raise ValueError("convention must be one of %s" % sorted(CONVENTIONS))
        o = _ffi.FourierFeaturesOptions(ctypes.sizeof(_ffi.FourierFeaturesOptions),
                                        FOURIER_KINDS[kind], dim, num_frequencies, scale,
                                        CONVENTIONS[convention], seed)
        out = ctypes.c_void_p()
        check(lib().gpe_fourier_features_create(ctypes.byref(o), ctypes.byref(out)))
        super().__init__(out.value)
        self._recipe = (type(self), (kind, dim, num_frequencies, scale, convention, seed))

    @classmethod
    def from_frequencies(cls: Type[_F], frequencies: npt.ArrayLike,
                         convention: Convention = "two_pi") -> _F:
        """Rows of `frequencies` [F, D] are the b_f; angle 2 pi b . x or b . x."""
        if convention not in CONVENTIONS:
            raise ValueError("convention must be one of %s" % sorted(CONVENTIONS))
        frequencies = _f64(frequencies, "frequencies", 2)
        out = ctypes.c_void_p()
        t = _Call()
        check(lib().gpe_fourier_features_create_from_frequencies(
            t(frequencies), CONVENTIONS[convention], ctypes.byref(out)))
        self = cls.__new__(cls)
        CoordinateEncoder.__init__(self, out.value)
        self._recipe = (cls.from_frequencies, (frequencies.copy(), convention))
        return self

    @property
    def angular_frequencies(self) -> npt.NDArray[np.float64]:
        """w [F, D] with angle = w . x."""
        d, f = self.dims
        out = np.empty((f // 2, d), dtype=np.float64)
        t = _Call()
        with hold(self) as h:
            check(lib().gpe_fourier_features_angular_frequencies(h, t.out(out)))
        return out


class So2Bessel(CoordinateEncoder):
    """(r, theta) -> J_m(c r) cos(k theta) per term, then J_m(c r) sin(k theta).

    Either sampled as Lim et al. do (num_terms, max_scale C, max_k K, order_m, seed), or
    from explicit `terms` = (orders, scales, weights). polar=True takes (r, theta) points,
    otherwise Cartesian (x, y)."""

    def __init__(self, num_terms: int = 16, max_scale: float = 1.0, max_k: int = 2,
                 order_m: int = 0, seed: int = 0, polar: bool = False,
                 terms: Optional[Tuple[npt.ArrayLike, npt.ArrayLike, npt.ArrayLike]] = None
                 ) -> None:
        out = ctypes.c_void_p()
        if terms is not None:
            orders, scales, weights = terms
            orders = np.array(_ffi.int64_array(orders, "orders"), order="C")
            scales = np.array(scales, dtype=np.float64, order="C")
            weights = np.array(_ffi.int64_array(weights, "weights"), order="C")
            t = _Call()
            check(lib().gpe_so2_bessel_create(t(orders), t(scales), t(weights),
                                              1 if polar else 0, ctypes.byref(out)))
            terms = (orders, scales, weights)  # private copies, for the recipe
        else:
            o = _ffi.So2BesselOptions(ctypes.sizeof(_ffi.So2BesselOptions), 1 if polar else 0,
                                      num_terms, max_scale, max_k, order_m, seed)
            check(lib().gpe_so2_bessel_create_sampled(ctypes.byref(o), ctypes.byref(out)))
        super().__init__(out.value)
        self._recipe = (type(self), (num_terms, max_scale, max_k, order_m, seed, polar, terms))

    @property
    def terms(self) -> Tuple[npt.NDArray[np.int64], npt.NDArray[np.float64],
                             npt.NDArray[np.int64]]:
        """(orders int64 [T], scales float64 [T], weights int64 [T])."""
        n = self.dims[1] // 2
        m, c, k = (np.empty(n, np.int64), np.empty(n, np.float64), np.empty(n, np.int64))
        t = _Call()
        with hold(self) as h:
            check(lib().gpe_so2_bessel_terms(h, t.out(m), t.out(c), t.out(k)))
        return m, c, k


class ShiftedEncoder(CoordinateEncoder):
    """Zheng et al.'s shifted bases per axis; axes: list of dicts with keys kind,
    num_shifts, width, lo (0), hi (1). form "simple" concatenates (eq. 16), "complex"
    takes the Kronecker product with axis 0 fastest (eq. 17)."""

    def __init__(self, axes: Sequence[Mapping[str, Any]],
                 form: Literal["simple", "complex"] = "complex") -> None:
        if form not in ("simple", "complex"):
            raise ValueError("form must be 'simple' or 'complex'")
        arr = (_ffi.ShiftedBasisOptions * max(len(axes), 1))()
        for i, a in enumerate(axes):
            if a["kind"] not in SHIFTED_KINDS:
                raise ValueError("kind must be one of %s" % sorted(SHIFTED_KINDS))
            arr[i] = _ffi.ShiftedBasisOptions(ctypes.sizeof(_ffi.ShiftedBasisOptions),
                                              SHIFTED_KINDS[a["kind"]], a["num_shifts"],
                                              a.get("width", 1.0), a.get("lo", 0.0),
                                              a.get("hi", 1.0))
        out = ctypes.c_void_p()
        check(lib().gpe_shifted_encoder_create(0 if form == "simple" else 1, arr, len(axes),
                                               ctypes.byref(out)))
        super().__init__(out.value)
        self._recipe = (type(self), ([dict(a) for a in axes], form))


class SphericalHarmonics(CoordinateEncoder):
    """Real orthonormal Y_lm, l <= max_degree, index l^2 + l + m, no Condon-Shortley
    phase; points are non-zero 3-vectors (only the direction matters)."""

    def __init__(self, max_degree: int) -> None:
        out = ctypes.c_void_p()
        check(lib().gpe_spherical_harmonics_create(max_degree, ctypes.byref(out)))
        super().__init__(out.value)
        self._recipe = (type(self), (max_degree,))


def bessel_j(order: int, x: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """J_order(x) for x >= 0 (order 0..20)."""
    x = _f64(x, "x", 1)
    out = np.empty_like(x)
    t = _Call()
    check(lib().gpe_bessel_j(order, t(x), t.out(out)))
    return out


def laplacian_eigenvectors(num_nodes: int, edges: npt.ArrayLike, k: int,
                           weights: Optional[npt.ArrayLike] = None,
                           kind: Literal["combinatorial", "symmetric"] = "combinatorial",
                           skip_first: bool = False
                           ) -> Tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The k smallest eigenpairs of the graph Laplacian: (eigenvalues [k], vectors
    [num_nodes, k]); each vector's largest-magnitude entry is positive.

    kind "combinatorial": L = D - A; "symmetric": L = I - D^-1/2 A D^-1/2, where an
    isolated node (no edges, degree 0) gets a zero row and column, not the 1 of I on
    the diagonal (as networkx's normalized_laplacian_matrix does): each isolated node
    adds an eigenvalue 0 whose eigenvector is that node's indicator (up to the basis
    choice within eigenvalue 0). Edges: int [E, 2] node ids, no self-loops; weights
    (float64 [E], > 0) default to 1, duplicate edges add."""
    if kind not in LAPLACIANS:
        raise ValueError("kind must be one of %s" % sorted(LAPLACIANS))
    edges = np.ascontiguousarray(_ffi.int64_array(edges, "edges"))
    if edges.size == 0:
        edges = edges.reshape(0, 2)
    elif edges.ndim != 2 or edges.shape[1] != 2:
        # A [2, E] edge_index (PyTorch Geometric's layout) or a flat list reshaped would
        # pair the wrong nodes.
        raise ValueError("edges must be [E, 2] (one row per edge); got shape %s (transpose "
                         "a [2, E] edge_index)" % (edges.shape,))
    if weights is not None:
        weights = _f64(weights, "weights", 1)
    vals = np.empty(k, dtype=np.float64)
    vecs = np.empty((num_nodes, k), dtype=np.float64)
    o = _ffi.LaplacianOptions(ctypes.sizeof(_ffi.LaplacianOptions), LAPLACIANS[kind],
                              1 if skip_first else 0)
    t = _Call()
    check(lib().gpe_laplacian_eigenvectors(ctypes.byref(o), num_nodes, t(edges), t(weights),
                                           t.out(vals), t.out(vecs)))
    return vals, vecs


def embedded_distance_matrix(features: npt.ArrayLike,
                             sample_spacing: float = 1.0) -> npt.NDArray[np.float64]:
    """D[i, j] = s * features[i] . features[j] (Zheng et al. eq. 6)."""
    features = _f64(features, "features", 2)
    out = np.empty((features.shape[0], features.shape[0]), dtype=np.float64)
    t = _Call()
    check(lib().gpe_embedded_distance_matrix(t(features), sample_spacing, t.out(out)))
    return out


def embedder_stable_rank(embedder: Embedder, parameter: float, num_points: int) -> float:
    """The closed-form stable rank of a densely sampled embedder (Zheng et al. App. A)."""
    if embedder not in EMBEDDERS:
        raise ValueError("embedder must be one of %s" % sorted(EMBEDDERS))
    r = ctypes.c_double()
    check(lib().gpe_embedder_stable_rank(EMBEDDERS[embedder], parameter, num_points,
                                         ctypes.byref(r)))
    return r.value


def embedder_distance(embedder: Embedder, parameter: float, delta: float) -> float:
    """The closed-form distance preservation D(delta) of an embedder."""
    if embedder not in EMBEDDERS:
        raise ValueError("embedder must be one of %s" % sorted(EMBEDDERS))
    r = ctypes.c_double()
    check(lib().gpe_embedder_distance(EMBEDDERS[embedder], parameter, delta, ctypes.byref(r)))
    return r.value


def condition_number(psi: npt.ArrayLike) -> float:
    """s_max / s_min of an encoding factor (inf when rank deficient)."""
    psi = _f64(psi, "psi", 2)
    r = ctypes.c_double()
    t = _Call()
    check(lib().gpe_inr_condition_number(t(psi), ctypes.byref(r)))
    return r.value
