"""ctypes declarations of gpe.h and the shared-library loader (internal)."""

from __future__ import annotations

import ctypes
import ctypes.util
import operator
import os
import pathlib
import warnings
from typing import Any, Dict, Iterator, List, Tuple

import numpy as np
import numpy.typing as npt

# ---- DLPack 0.6 structs (dlpack/dlpack.h) ------------------------------------------


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


KDL_CPU = 1
KDL_CUDA = 2
_DL_CODES = {"i": 0, "u": 1, "f": 2}


def as_dltensor(array: Any, *, output: bool) -> Tuple[DLTensor, Any]:
    """Describes a NumPy array as a DLTensor without copying.

    `output`: whether the library writes into the array (an out= argument, an in-place
    apply, a gradient accumulator). Every caller says which, so that a read-only output
    (a read-only view, np.frombuffer over bytes, a read-only np.memmap, which the library
    would write through or crash on) is refused here with ValueError before any C call.
    Returns (tensor, keepalive); keep `keepalive` referenced while the C call runs.
    Strides are converted from bytes to elements; arrays whose strides are not whole
    elements are rejected.
    """
    if not isinstance(array, np.ndarray):
        raise TypeError("expected a numpy.ndarray, got %s" % type(array).__name__)
    if output and not array.flags.writeable:
        raise ValueError("output array is read-only (flags.writeable is False): the library "
                         "would write into it; pass a writeable array")
    itemsize = array.dtype.itemsize
    if array.dtype.kind not in _DL_CODES or array.dtype.byteorder not in ("=", "|", "<"):
        raise TypeError("unsupported dtype %s" % array.dtype)
    shape = (ctypes.c_int64 * max(array.ndim, 1))(*array.shape)
    strides_el: List[int] = []
    if array.size == 0:
        # NumPy gives an empty array any strides (all 0 in NumPy 2); the library checks
        # strides before it sees there is nothing to read: C-contiguous ones.
        step = 1
        for n in reversed(array.shape):
            strides_el.insert(0, step)
            step *= max(n, 1)
    else:
        for s in array.strides:
            if s % itemsize:
                raise ValueError("array strides must be multiples of the element size")
            strides_el.append(s // itemsize)
    strides = (ctypes.c_int64 * max(array.ndim, 1))(*strides_el)
    t = DLTensor()
    t.data = array.ctypes.data if array.size else None
    t.device = DLDevice(KDL_CPU, 0)
    t.ndim = array.ndim
    t.dtype = DLDataType(_DL_CODES[array.dtype.kind], itemsize * 8, 1)
    t.shape = shape
    t.strides = strides
    t.byte_offset = 0
    return t, (array, shape, strides)


# ---- Integers: Python ints are unbounded, C's are not ----------------------------------
# ctypes stores an out-of-range int in a c_int64 / c_int32 field or argument modulo 2^n
# without a word (2**64 + 64 becomes 64). checked_int refuses it instead; the option
# Structures below and the library functions (_declare) run every integer through it.

_INT_RANGES: Dict[Any, Tuple[int, int]] = {}
_t: Any
for _t in (ctypes.c_int8, ctypes.c_int16, ctypes.c_int32, ctypes.c_int64, ctypes.c_int):
    _INT_RANGES[_t] = (-(1 << (8 * ctypes.sizeof(_t) - 1)), (1 << (8 * ctypes.sizeof(_t) - 1)) - 1)
for _t in (ctypes.c_uint8, ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint):
    _INT_RANGES[_t] = (0, (1 << (8 * ctypes.sizeof(_t))) - 1)
_C_NAMES: Dict[Any, str] = {}
for _t in _INT_RANGES:
    _C_NAMES.setdefault(_t, ("uint%d_t" if _t._type_.isupper() else "int%d_t")
                        % (8 * ctypes.sizeof(_t)))


def checked_int(value: Any, name: str, ctype: Any = ctypes.c_int64) -> int:
    """value as a Python int that `ctype` holds exactly: TypeError for a non-integer
    (a float, None, a string; bool and NumPy integers are integers), OverflowError
    outside ctype's range (int64 by default)."""
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError("%s must be an integer; got %s" % (name, type(value).__name__)) from None
    lo, hi = _INT_RANGES[ctype]
    if not lo <= v <= hi:
        raise OverflowError("%s = %d is outside the range of %s [%d, %d]"
                            % (name, v, _C_NAMES[ctype], lo, hi))
    return v


_INT64_MAX = (1 << 63) - 1


def int64_array(values: Any, name: str) -> npt.NDArray[np.int64]:
    """An integer array (positions, offsets, indices) as int64, without a copy when it
    already is one (any strides kept).

    Other integer dtypes are converted exactly; uint64 (NumPy's dtype for Python ints
    >= 2^63) only when every value is below 2^63, else OverflowError, since the
    conversion would wrap them to negative numbers. Floats, booleans, None and other
    non-integers raise TypeError (the library takes integer positions only); an empty
    sequence of any dtype gives an empty int64 array."""
    if values is None:
        raise TypeError("%s must be an integer array; got None" % name)
    given = values
    values = np.asarray(values)
    kind = values.dtype.kind
    if kind == "i":
        return values if values.dtype == np.int64 else values.astype(np.int64)
    if kind == "u":
        if values.dtype.itemsize == 8 and values.size and int(values.max()) > _INT64_MAX:
            raise OverflowError("%s holds %d, beyond int64 (positions and indices must be "
                                "below 2^63)" % (name, int(values.max())))
        return values.astype(np.int64)
    if values.size == 0 and kind in "fO":
        return values.astype(np.int64)
    if kind in "fO" and not isinstance(given, np.ndarray):
        # A list NumPy could not store as integers: Python ints beyond 64 bits (object),
        # or negative ints mixed with ints >= 2^63 (float64). Name the culprit.
        for v in np.asarray(given, dtype=object).ravel():
            checked_int(v, "an entry of %s" % name)
    raise TypeError("%s must be integers; got dtype %s" % (name, values.dtype))


def array_arg(value: Any, name: str) -> npt.NDArray[Any]:
    """np.asarray(value) for an array argument named `name`, with TypeError naming it when
    value is None or not numeric (an object or string array), instead of the IndexError
    or AttributeError the shape arithmetic after it would raise."""
    if value is None:
        raise TypeError("%s must be an array; got None" % name)
    arr = np.asarray(value)
    if arr.dtype.kind not in "biufc":
        raise TypeError("%s must be a numeric array; got %s (dtype %s)"
                        % (name, type(value).__name__, arr.dtype))
    return arr


def _check_struct_ints(cls):
    """Gives a Structure a __setattr__ (used by its constructor too) that runs values of
    its integer fields through checked_int, named Structure.field."""
    ranges = {f[0]: f[1] for f in cls._fields_ if f[1] in _INT_RANGES}
    base = ctypes.Structure.__setattr__

    def __setattr__(self, name, value):
        ctype = ranges.get(name)
        if ctype is not None:
            value = checked_int(value, name, ctype)
        base(self, name, value)

    cls.__setattr__ = __setattr__
    return cls


# ---- Option structs ------------------------------------------------------------------


class SoPlanesOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("pairing", ctypes.c_int32),
        ("dim", ctypes.c_int64),
        ("rotary_dim", ctypes.c_int64),
        ("base", ctypes.c_double),
        ("thetas", ctypes.POINTER(ctypes.c_double)),
    ]


class SoRank2Options(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("dim", ctypes.c_int64),
        ("a", ctypes.POINTER(ctypes.c_double)),
        ("b", ctypes.POINTER(ctypes.c_double)),
        ("omega", ctypes.c_double),
    ]


class SinusoidalOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("base", ctypes.c_double)]


class ShiftedBasisOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("kind", ctypes.c_int32),
                ("num_shifts", ctypes.c_int64), ("width", ctypes.c_double),
                ("lo", ctypes.c_double), ("hi", ctypes.c_double)]


class SeparableFitOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("float32_image_products", ctypes.c_int32),
                ("lambda_", ctypes.c_double), ("rcond", ctypes.c_double)]


# ---- Coordinate encoders, graph encodings, embedder analysis -------------------------
class FourierFeaturesOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("kind", ctypes.c_int32),
                ("dim", ctypes.c_int64), ("num_frequencies", ctypes.c_int64),
                ("scale", ctypes.c_double), ("convention", ctypes.c_int32),
                ("seed", ctypes.c_uint64)]


class So2BesselOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("polar", ctypes.c_int32),
                ("num_terms", ctypes.c_int64), ("max_scale", ctypes.c_double),
                ("max_k", ctypes.c_int32), ("order_m", ctypes.c_int32),
                ("seed", ctypes.c_uint64)]


class BlendedFitOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("max_iterations", ctypes.c_int32),
                ("lambda_", ctypes.c_double), ("tolerance", ctypes.c_double)]


# ---- INR training, data, metrics and image files (0.5.0) --------------------------------
# void (*)(void* user_data, int64_t step, double train_loss)
ProgressCallback = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_double)


class MlpOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("hidden_width", ctypes.c_int64),
                ("num_hidden_layers", ctypes.c_int64), ("steps", ctypes.c_int64),
                ("learning_rate", ctypes.c_double), ("beta1", ctypes.c_double),
                ("beta2", ctypes.c_double), ("epsilon", ctypes.c_double),
                ("seed", ctypes.c_uint64), ("report_every", ctypes.c_int64),
                ("progress", ProgressCallback), ("progress_user_data", ctypes.c_void_p)]


# void (*)(void* user_data, int64_t step, double train_loss, double validation_loss) (0.7.0)
ValidationProgressCallback = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64,
                                              ctypes.c_double, ctypes.c_double)


class MlpValidation(ctypes.Structure):
    """gpe_mlp_validation: the held-out set (inputs), the curve (optional outputs) and,
    since 0.7.0, a progress callback that also gets the validation loss."""
    _fields_ = [("struct_size", ctypes.c_uint32), ("features", ctypes.POINTER(DLTensor)),
                ("targets", ctypes.POINTER(DLTensor)), ("steps", ctypes.POINTER(DLTensor)),
                ("loss", ctypes.POINTER(DLTensor)),
                ("progress", ValidationProgressCallback),
                ("progress_user_data", ctypes.c_void_p)]

    def __init__(self):
        super().__init__()
        self.struct_size = ctypes.sizeof(MlpValidation)


class LinearAdamOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("steps", ctypes.c_int64),
                ("learning_rate", ctypes.c_double), ("final_learning_rate", ctypes.c_double),
                ("beta1", ctypes.c_double), ("beta2", ctypes.c_double),
                ("epsilon", ctypes.c_double), ("report_every", ctypes.c_int64),
                ("progress", ProgressCallback), ("progress_user_data", ctypes.c_void_p)]


class LaplacianOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("kind", ctypes.c_int32),
                ("skip_first", ctypes.c_int32)]


class GrapeMOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("dim", ctypes.c_int64),
        ("num_generators", ctypes.c_int64),
        ("a", ctypes.POINTER(ctypes.c_double)),
        ("b", ctypes.POINTER(ctypes.c_double)),
        ("omega", ctypes.POINTER(ctypes.c_double)),
    ]


class AlgebraicSequenceOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("dim", ctypes.c_int64),
        ("skew", ctypes.POINTER(ctypes.c_double)),
    ]


class AttentionParamGrads(ctypes.Structure):
    """gpe_attention_param_grads: optional float64 outputs (DLTensor pointers)."""
    _fields_ = [("struct_size", ctypes.c_uint32)] + [
        (name, ctypes.POINTER(DLTensor)) for name in
        ("d_bias_a", "d_bias_b", "d_grape_a", "d_grape_b", "d_grape_omega", "d_shaw_key_table",
         "d_shaw_value_table", "d_sinks",
         # 0.10.0: the algebraic encodings' skew generators.
         "d_algebraic", "d_algebraic_tree", "d_algebraic_grid")]

    def __init__(self):
        super().__init__()
        self.struct_size = ctypes.sizeof(AttentionParamGrads)


class AttentionOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("causal", ctypes.c_int32),
        ("softmax_scale", ctypes.c_double),
        ("num_threads", ctypes.c_int32),
        ("rope_dim", ctypes.c_int64),
        ("rope_base", ctypes.c_double),
        ("rope_pairing", ctypes.c_int32),
        ("grape_m", ctypes.c_void_p),
        ("algebraic", ctypes.c_void_p),
        ("bias", ctypes.c_void_p),
        ("q_positions", ctypes.POINTER(DLTensor)),
        ("k_positions", ctypes.POINTER(DLTensor)),
        ("cu_seqlens_q", ctypes.POINTER(DLTensor)),
        ("cu_seqlens_k", ctypes.POINTER(DLTensor)),
        # Structured positions and Shaw labels (read when struct_size covers them).
        ("rope_axes", ctypes.c_int32),
        ("rope_sections_interleaved", ctypes.c_int32),
        ("rope_sections", ctypes.POINTER(DLTensor)),
        ("algebraic_tree", ctypes.POINTER(DLTensor)),
        ("algebraic_grid", ctypes.POINTER(DLTensor)),
        ("q_axes", ctypes.POINTER(DLTensor)),
        ("k_axes", ctypes.POINTER(DLTensor)),
        ("q_tree_offsets", ctypes.POINTER(DLTensor)),
        ("q_tree_children", ctypes.POINTER(DLTensor)),
        ("k_tree_offsets", ctypes.POINTER(DLTensor)),
        ("k_tree_children", ctypes.POINTER(DLTensor)),
        ("shaw_max_distance", ctypes.c_int64),
        ("shaw_key_table", ctypes.POINTER(DLTensor)),
        ("shaw_value_table", ctypes.POINTER(DLTensor)),
        # 0.9.0: a gpe_rope handle, the sliding window, the softcap and the sinks (zero /
        # NULL: none of them).
        ("rope", ctypes.c_void_p),
        ("window", ctypes.c_int32),
        ("window_left", ctypes.c_int64),
        ("window_right", ctypes.c_int64),
        ("softcap", ctypes.c_double),
        ("sinks", ctypes.POINTER(DLTensor)),
        # 0.9.0, after sinks: the score mask, KV lengths and a paged cache's block table
        # (NULL: none of them).
        ("attn_mask", ctypes.POINTER(DLTensor)),
        ("kv_lengths", ctypes.POINTER(DLTensor)),
        ("block_table", ctypes.POINTER(DLTensor)),
        ("cuda_stream", ctypes.c_void_p),
        # 0.10.0, after cuda_stream: the CPU kernels' arithmetic (GPE_BF16_ARITHMETIC_*,
        # GPE_FLOAT32_ARITHMETIC_*; 0: AUTO / EXACT).
        ("bf16_arithmetic", ctypes.c_int32),
        ("float32_arithmetic", ctypes.c_int32),
    ]


# ---- RoPE and additive biases (gpe.h 0.3.0) -----------------------------------------


class RopeOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("pairing", ctypes.c_int32),
        ("head_dim", ctypes.c_int64),
        ("rotary_dim", ctypes.c_int64),
        ("base", ctypes.c_double),
        ("schedule", ctypes.c_int32),
        ("num_threads", ctypes.c_int32),
        ("factor", ctypes.c_double),
        ("original_max_position", ctypes.c_int64),
        ("current_length", ctypes.c_int64),
        ("beta_fast", ctypes.c_double),
        ("beta_slow", ctypes.c_double),
        ("yarn_truncate", ctypes.c_int32),
        ("has_mscale", ctypes.c_int32),
        ("mscale", ctypes.c_double),
        ("mscale_all_dim", ctypes.c_double),
        ("has_attention_factor", ctypes.c_int32),
        ("attention_factor", ctypes.c_double),
        ("short_factor", ctypes.POINTER(ctypes.c_double)),
        ("short_factor_len", ctypes.c_int64),
        ("long_factor", ctypes.POINTER(ctypes.c_double)),
        ("long_factor_len", ctypes.c_int64),
        ("max_position", ctypes.c_int64),
        ("low_freq_factor", ctypes.c_double),
        ("high_freq_factor", ctypes.c_double),
        ("xpos", ctypes.c_int32),
        ("xpos_gamma", ctypes.c_double),
        ("xpos_scale_base", ctypes.c_double),
        ("xpos_centre", ctypes.c_int64),
        ("axes", ctypes.c_int32),
        ("num_axes", ctypes.c_int32),
        ("mrope_sections", ctypes.POINTER(ctypes.c_int64)),
        ("num_mrope_sections", ctypes.c_int64),
    ]


class RopeTokens(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("layout", ctypes.c_int32),
        ("role", ctypes.c_int32),
        ("position_ids", ctypes.POINTER(DLTensor)),
        ("offsets", ctypes.POINTER(DLTensor)),
        ("cu_seqlens", ctypes.POINTER(DLTensor)),
        ("cuda_stream", ctypes.c_void_p),
    ]


class AlibiOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("form", ctypes.c_int32),
                ("num_heads", ctypes.c_int64), ("slopes", ctypes.POINTER(ctypes.c_double))]


class T5Options(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("bidirectional", ctypes.c_int32),
                ("num_heads", ctypes.c_int64), ("num_buckets", ctypes.c_int64),
                ("max_distance", ctypes.c_int64), ("table", ctypes.POINTER(ctypes.c_double))]


class FoxOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("length", ctypes.c_int64),
                ("num_heads", ctypes.c_int64), ("first_position", ctypes.c_int64),
                ("gate_logits", ctypes.POINTER(ctypes.c_double))]


class GrapeApOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("length", ctypes.c_int64),
                ("num_heads", ctypes.c_int64), ("rank", ctypes.c_int64),
                ("first_position", ctypes.c_int64), ("w", ctypes.POINTER(ctypes.c_double)),
                ("u", ctypes.POINTER(ctypes.c_double))]


# ---- GRAPE-A as an additive bias (sequence encodings) ---------------------------------


class GrapeAOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("path", ctypes.c_int32),
                ("num_heads", ctypes.c_int64), ("head_dim", ctypes.c_int64),
                ("slopes", ctypes.POINTER(ctypes.c_double)), ("gated", ctypes.c_int32),
                ("length", ctypes.c_int64), ("first_position", ctypes.c_int64),
                ("gate_logits", ctypes.POINTER(ctypes.c_double))]


# ---- Algebraic trees, grids, periodic domains, locality (sequence encodings) ----------


class AlgebraicTreeOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("dim", ctypes.c_int64),
                ("num_branches", ctypes.c_int64), ("skews", ctypes.POINTER(ctypes.c_double))]


class AlgebraicGridOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("num_axes", ctypes.c_int64),
                ("dims", ctypes.POINTER(ctypes.c_int64)),
                ("skews", ctypes.POINTER(ctypes.c_double))]


class AlgebraicPeriodicOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("dim", ctypes.c_int64),
                ("period", ctypes.c_int64), ("multipliers", ctypes.POINTER(ctypes.c_int64))]


class TransformerXLOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("base", ctypes.c_double)]


# ---- The thread pool (gpe/thread_pool.h, 0.8.0) ---------------------------------------
# gpe_pool_task: void (*)(void* task_ctx, int64_t index)
PoolTask = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)
# gpe_thread_pool.parallel_for: void (*)(void* user_data, int64_t n, gpe_pool_task task,
# void* task_ctx)
PoolParallelFor = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, PoolTask,
                                   ctypes.c_void_p)


class ThreadPool(ctypes.Structure):
    """gpe_thread_pool: the application's pool (num_threads in 1 .. 1024)."""
    _fields_ = [("struct_size", ctypes.c_uint32), ("num_threads", ctypes.c_int32),
                ("user_data", ctypes.c_void_p), ("parallel_for", PoolParallelFor)]

    def __init__(self):
        super().__init__()
        self.struct_size = ctypes.sizeof(ThreadPool)
        self.num_threads = 1


# Every Structure above refuses integers its C fields cannot hold (see checked_int).
for _cls in list(globals().values()):
    if isinstance(_cls, type) and issubclass(_cls, ctypes.Structure) and "_fields_" in vars(_cls):
        _check_struct_ints(_cls)


# ---- Library loading -----------------------------------------------------------------

_LIB_NAME = "libgpe.so"
# The ABI's major version (GPE_VERSION_MAJOR): the installed library's soname is
# libgpe.so.<major> (c_api/BUILD, //c_api:libgpe.so.0). loader_test checks it against the
# loaded library's gpe_version().
ABI_MAJOR = 0
SONAME = "%s.%d" % (_LIB_NAME, ABI_MAJOR)


def _package_dir() -> pathlib.Path:
    """The directory of the gpe package (where a wheel puts libgpe.so)."""
    return pathlib.Path(__file__).resolve().parent


def _candidates() -> Iterator[pathlib.Path]:
    """Files that may hold the library, in the order load_library tries them: the package
    directory, $GPE_LIBRARY, then the build tree (Bazel's runfiles under bazel test /
    bazel run, bazel-bin of a source checkout). The system's loader path comes after
    these (load_library, by soname)."""
    here = _package_dir()
    yield here / _LIB_NAME
    env = os.environ.get("GPE_LIBRARY")
    if env:
        yield pathlib.Path(env)
    # Under `bazel test`/`bazel run`: the library is a data dependency in the runfiles.
    for var in ("RUNFILES_DIR", "TEST_SRCDIR"):
        root = os.environ.get(var)
        if root:
            for ws in ("grouppe", "__main__"):
                yield pathlib.Path(root) / ws / "c_api" / _LIB_NAME
    # A source checkout after `./bazelw build //c_api:libgpe.so`.
    for parent in here.parents:
        yield parent / "bazel-bin" / "c_api" / _LIB_NAME


def _open(name: str) -> ctypes.CDLL:
    """dlopen (a path, or a bare name searched on the system's loader path)."""
    return ctypes.CDLL(name)


def _system_names() -> Iterator[str]:
    """Bare names for the system's dynamic loader (LD_LIBRARY_PATH, the ld.so cache, the
    default directories): the soname of this ABI, then whatever ctypes.util.find_library
    reports for "gpe" when that is the same major version (an installed libgpe.so.1 would
    be another ABI)."""
    yield SONAME
    found = ctypes.util.find_library("gpe")
    if found and found != SONAME and found.startswith(SONAME):
        yield found


def load_library() -> ctypes.CDLL:
    """Loads libgpe.so: the package directory, then $GPE_LIBRARY, then the build tree,
    then the system by soname (libgpe.so.<major>). OSError lists every place tried."""
    tried = []
    env = os.environ.get("GPE_LIBRARY")
    if env and not pathlib.Path(env).is_file():
        warnings.warn("GPE_LIBRARY=%s is not a file; looking elsewhere for %s"
                      % (env, _LIB_NAME), RuntimeWarning, stacklevel=2)
    for path in _candidates():
        if path.is_file():
            return _declare(_open(str(path)))
        tried.append("%s (%s)" % (path, "GPE_LIBRARY: no such file"
                                  if env and str(path) == env else "no such file"))
    for name in _system_names():
        try:
            lib = _open(name)
        except OSError as e:
            tried.append("%s on the system's loader path (%s)" % (name, e))
            continue
        return _declare(lib)
    raise OSError("cannot find %s. Put it in the gpe package directory (as a wheel does), "
                  "set GPE_LIBRARY to the file, build it in this checkout (./bazelw build "
                  "//c_api:libgpe.so), or install it where the dynamic loader finds %s "
                  "(./bazelw run //c_api:install -- PREFIX, then ldconfig or "
                  "LD_LIBRARY_PATH). Tried, in order:\n  %s"
                  % (_LIB_NAME, SONAME, "\n  ".join(tried)))


def _declare(lib):
    st = ctypes.c_int32
    p = ctypes.c_void_p
    t = ctypes.POINTER(DLTensor)
    i64p = ctypes.POINTER(ctypes.c_int64)
    sigs = {
        "gpe_version": (ctypes.c_int, []),
        "gpe_version_string": (ctypes.c_char_p, []),
        "gpe_last_error_message": (ctypes.c_char_p, []),
        "gpe_status_name": (ctypes.c_char_p, [st]),
        "gpe_so_rep_create_planes": (st, [ctypes.POINTER(SoPlanesOptions), ctypes.POINTER(p)]),
        "gpe_so_rep_create_rank2": (st, [ctypes.POINTER(SoRank2Options), ctypes.POINTER(p)]),
        "gpe_so_rep_destroy": (None, [p]),
        "gpe_so_rep_dim": (st, [p, ctypes.POINTER(ctypes.c_int64)]),
        "gpe_so_rep_apply": (st, [p, ctypes.POINTER(DLTensor), ctypes.POINTER(DLTensor),
                                  ctypes.POINTER(DLTensor)]),
        "gpe_so_rep_matrix": (st, [p, ctypes.c_int64, ctypes.POINTER(DLTensor)]),
        # Sequence encodings.
        "gpe_sinusoidal_encode": (st, [ctypes.POINTER(SinusoidalOptions), t, t]),
        "gpe_learned_positions_create": (st, [t, ctypes.POINTER(p)]),
        "gpe_learned_positions_destroy": (None, [p]),
        "gpe_learned_positions_shape": (st, [p, i64p, i64p]),
        "gpe_learned_positions_lookup": (st, [p, t, t]),
        "gpe_learned_positions_backward": (st, [p, t, t, t]),
        "gpe_grape_m_create": (st, [ctypes.POINTER(GrapeMOptions), ctypes.POINTER(p)]),
        "gpe_grape_m_destroy": (None, [p]),
        "gpe_grape_m_shape": (st, [p, i64p, i64p]),
        "gpe_grape_m_apply": (st, [p, t, t, t]),
        "gpe_grape_m_matrix": (st, [p, ctypes.c_int64, t]),
        "gpe_grape_m_backward": (st, [p, t, t, t, t, t, t, t]),
        "gpe_algebraic_sequence_create": (st, [ctypes.POINTER(AlgebraicSequenceOptions),
                                               ctypes.POINTER(p)]),
        "gpe_algebraic_sequence_destroy": (None, [p]),
        "gpe_algebraic_sequence_dim": (st, [p, i64p]),
        "gpe_algebraic_sequence_apply": (st, [p, t, t, t]),
        "gpe_algebraic_sequence_matrix": (st, [p, ctypes.c_int64, t]),
        "gpe_algebraic_sequence_backward": (st, [p, t, t, t, t, t]),
        "gpe_shaw_key_scores": (st, [t, t, t, t, t]),
        "gpe_shaw_key_scores_backward": (st, [t, t, t, t, t, t, t]),
        # Coordinate encodings, analysis, INR.
        "gpe_shifted_basis_encode": (st, [ctypes.POINTER(ShiftedBasisOptions), t, t]),
        "gpe_stable_rank": (st, [t, ctypes.POINTER(ctypes.c_double)]),
        "gpe_inr_fit_separable_2d": (st, [ctypes.POINTER(SeparableFitOptions), t, t, t, t]),
        "gpe_inr_predict_separable_2d": (st, [t, t, t, t]),
        # Coordinate encoders, graph encodings, embedder analysis, conditioning.
        "gpe_coordinate_encoder_destroy": (None, [p]),
        "gpe_coordinate_encoder_dims": (st, [p, i64p, i64p]),
        "gpe_coordinate_encode": (st, [p, t, t]),
        "gpe_coordinate_backward": (st, [p, t, t, t]),
        "gpe_fourier_features_create": (st, [ctypes.POINTER(FourierFeaturesOptions),
                                             ctypes.POINTER(p)]),
        "gpe_fourier_features_create_from_frequencies": (st, [t, ctypes.c_int32,
                                                              ctypes.POINTER(p)]),
        "gpe_fourier_features_angular_frequencies": (st, [p, t]),
        "gpe_so2_bessel_create_sampled": (st, [ctypes.POINTER(So2BesselOptions),
                                               ctypes.POINTER(p)]),
        "gpe_so2_bessel_create": (st, [t, t, t, ctypes.c_int32, ctypes.POINTER(p)]),
        "gpe_so2_bessel_terms": (st, [p, t, t, t]),
        "gpe_bessel_j": (st, [ctypes.c_int32, t, t]),
        "gpe_shifted_encoder_create": (st, [ctypes.c_int32, ctypes.POINTER(ShiftedBasisOptions),
                                            ctypes.c_int64, ctypes.POINTER(p)]),
        "gpe_spherical_harmonics_create": (st, [ctypes.c_int32, ctypes.POINTER(p)]),
        "gpe_laplacian_eigenvectors": (st, [ctypes.POINTER(LaplacianOptions), ctypes.c_int64,
                                            t, t, t, t]),
        "gpe_embedded_distance_matrix": (st, [t, ctypes.c_double, t]),
        "gpe_embedder_stable_rank": (st, [ctypes.c_int32, ctypes.c_double, ctypes.c_int64,
                                          ctypes.POINTER(ctypes.c_double)]),
        "gpe_embedder_distance": (st, [ctypes.c_int32, ctypes.c_double, ctypes.c_double,
                                       ctypes.POINTER(ctypes.c_double)]),
        "gpe_inr_condition_number": (st, [t, ctypes.POINTER(ctypes.c_double)]),
        "gpe_inr_fit_separable_3d": (st, [ctypes.POINTER(SeparableFitOptions), t, t, t, t, t]),
        "gpe_inr_predict_separable_3d": (st, [t, t, t, t, t]),
        "gpe_inr_fit_blended_2d": (st, [ctypes.POINTER(BlendedFitOptions), p, p, t, t, t, t, t,
                                        ctypes.POINTER(ctypes.c_int32),
                                        ctypes.POINTER(ctypes.c_double)]),
        "gpe_inr_predict_blended_2d": (st, [p, p, t, t, t, t, t]),
        # INR training, data, metrics and image files (0.5.0).
        "gpe_inr_mlp_num_parameters": (st, [ctypes.POINTER(MlpOptions), ctypes.c_int64,
                                            ctypes.c_int64, i64p]),
        "gpe_inr_mlp_init": (st, [ctypes.POINTER(MlpOptions), ctypes.c_int64, ctypes.c_int64,
                                  t]),
        "gpe_inr_mlp_fit": (st, [ctypes.POINTER(MlpOptions), t, t, t, t, t,
                                 ctypes.POINTER(ctypes.c_double)]),
        "gpe_inr_mlp_predict": (st, [ctypes.POINTER(MlpOptions), t, t, t]),
        "gpe_inr_mlp_num_evaluations": (st, [ctypes.POINTER(MlpOptions), i64p]),
        "gpe_inr_mlp_fit_v2": (st, [ctypes.POINTER(MlpOptions), t, t, t, t, t,
                                    ctypes.POINTER(ctypes.c_double),
                                    ctypes.POINTER(MlpValidation)]),
        "gpe_inr_fit_dense_adam": (st, [ctypes.POINTER(LinearAdamOptions), t, t, t, t,
                                        ctypes.POINTER(ctypes.c_double)]),
        "gpe_inr_fit_separable_adam_2d": (st, [ctypes.POINTER(LinearAdamOptions), t, t, t, t,
                                               t, ctypes.POINTER(ctypes.c_double)]),
        "gpe_inr_synthetic_image": (st, [ctypes.c_int32, ctypes.c_int32, t]),
        "gpe_inr_synthetic_vector_field": (st, [ctypes.c_int32, t]),
        "gpe_inr_grid_coordinates": (st, [ctypes.c_int64, t]),
        "gpe_inr_random_split": (st, [ctypes.c_int64, ctypes.c_double, ctypes.c_double,
                                      ctypes.c_uint64, t, i64p]),
        "gpe_inr_regular_grid_split": (st, [ctypes.c_int64, ctypes.c_int64, t, i64p]),
        "gpe_inr_mse": (st, [t, t, ctypes.POINTER(ctypes.c_double)]),
        "gpe_inr_psnr": (st, [t, t, ctypes.c_double, ctypes.POINTER(ctypes.c_double)]),
        "gpe_image_read": (st, [ctypes.c_char_p, ctypes.c_int32, ctypes.POINTER(p)]),
        "gpe_image_destroy": (None, [p]),
        "gpe_image_shape": (st, [p, i64p, i64p, i64p]),
        "gpe_image_pixels": (st, [p, t]),
        "gpe_image_write_png": (st, [ctypes.c_char_p, t, ctypes.c_double, ctypes.c_double]),
        "gpe_image_write_jpeg": (st, [ctypes.c_char_p, t, ctypes.c_int32, ctypes.c_double,
                                      ctypes.c_double]),
        # Attention.
        "gpe_attention_forward": (st, [ctypes.POINTER(AttentionOptions), t, t, t, t, t]),
        "gpe_attention_backward": (st, [ctypes.POINTER(AttentionOptions), t, t, t, t, t, t, t,
                                        t, t]),
        "gpe_attention_backward_v2": (st, [ctypes.POINTER(AttentionOptions), t, t, t, t, t, t,
                                           t, t, t, t, t]),
        "gpe_attention_backward_with_parameters": (st, [ctypes.POINTER(AttentionOptions), t, t, t,
                                                        t, t, t, t, t, t,
                                                        ctypes.POINTER(AttentionParamGrads)]),
        # RoPE and additive biases (0.3.0).
        "gpe_rope_create": (st, [ctypes.POINTER(RopeOptions), ctypes.POINTER(p)]),
        "gpe_rope_options_use_schedule": (st, [ctypes.c_int32, ctypes.POINTER(RopeOptions)]),
        "gpe_rope_destroy": (None, [p]),
        "gpe_rope_shape": (st, [p, i64p, i64p, i64p]),
        "gpe_rope_frequencies": (st, [p, ctypes.POINTER(ctypes.c_double), ctypes.c_int64,
                                      ctypes.POINTER(ctypes.c_double)]),
        "gpe_rope_forward": (st, [p, ctypes.POINTER(RopeTokens), t, t]),
        "gpe_rope_backward": (st, [p, ctypes.POINTER(RopeTokens), t, t]),
        "gpe_rope_table_create": (st, [p, ctypes.POINTER(RopeTokens), t, ctypes.POINTER(p)]),
        "gpe_rope_table_destroy": (None, [p]),
        "gpe_rope_table_forward": (st, [p, t, t]),
        "gpe_rope_table_backward": (st, [p, t, t]),
        "gpe_bias_create_alibi": (st, [ctypes.POINTER(AlibiOptions), ctypes.POINTER(p)]),
        "gpe_bias_create_t5": (st, [ctypes.POINTER(T5Options), ctypes.POINTER(p)]),
        "gpe_bias_create_fox": (st, [ctypes.POINTER(FoxOptions), ctypes.POINTER(p)]),
        "gpe_bias_create_grape_ap": (st, [ctypes.POINTER(GrapeApOptions), ctypes.POINTER(p)]),
        "gpe_bias_destroy": (None, [p]),
        "gpe_bias_info": (st, [p, ctypes.POINTER(ctypes.c_int32), i64p,
                               ctypes.POINTER(ctypes.c_int32)]),
        "gpe_bias_alibi_slopes": (st, [p, ctypes.POINTER(ctypes.c_double), ctypes.c_int64]),
        "gpe_bias_fill_tile": (st, [p, ctypes.c_int64, t, t, t]),
        "gpe_bias_accumulate_gradient": (st, [p, ctypes.c_int64, t, t, t, t, t]),
        "gpe_bias_fox_logit_gradient": (st, [p, t, t]),
        # GRAPE-A as an additive bias (sequence encodings).
        "gpe_bias_create_grape_a": (st, [ctypes.POINTER(GrapeAOptions), ctypes.POINTER(p)]),
        "gpe_bias_grape_a_lift": (st, [p, ctypes.c_int64, ctypes.c_int32, t, t, t]),
        # Algebraic trees, grids, periodic domains, locality (sequence encodings).
        "gpe_algebraic_tree_create": (st, [ctypes.POINTER(AlgebraicTreeOptions),
                                           ctypes.POINTER(p)]),
        "gpe_algebraic_tree_destroy": (None, [p]),
        "gpe_algebraic_tree_shape": (st, [p, i64p, i64p]),
        "gpe_algebraic_tree_apply": (st, [p, t, t, t]),
        "gpe_algebraic_tree_matrix": (st, [p, i64p, ctypes.c_int64, t]),
        "gpe_algebraic_tree_backward": (st, [p, t, t, t, t, t]),
        "gpe_algebraic_tree_node_matrices": (st, [p, ctypes.c_int64, t]),
        "gpe_algebraic_grid_create": (st, [ctypes.POINTER(AlgebraicGridOptions),
                                           ctypes.POINTER(p)]),
        "gpe_algebraic_grid_destroy": (None, [p]),
        "gpe_algebraic_grid_shape": (st, [p, i64p, i64p]),
        "gpe_algebraic_grid_apply": (st, [p, t, t, t]),
        "gpe_algebraic_grid_backward": (st, [p, t, t, t, t, t]),
        "gpe_algebraic_periodic_apply": (st, [ctypes.POINTER(AlgebraicPeriodicOptions), t, t,
                                              t]),
        "gpe_locality_scale": (st, [ctypes.c_double, t, t, t]),
        # Shaw value terms and Transformer-XL (sequence encodings).
        "gpe_shaw_value_output": (st, [t, t, t, t, t]),
        "gpe_shaw_value_output_backward": (st, [t, t, t, t, t, t, t]),
        "gpe_transformer_xl_score_terms": (st, [ctypes.POINTER(TransformerXLOptions), t, t, t, t,
                                                t, t, t, t]),
        "gpe_transformer_xl_score_terms_backward": (st, [ctypes.POINTER(TransformerXLOptions),
                                                         t, t, t, t, t, t, t, t, t, t, t, t,
                                                         t]),
        # The thread pool (0.8.0).
        "gpe_set_thread_pool": (st, [ctypes.POINTER(ThreadPool)]),
        "gpe_thread_pool_num_threads": (st, [ctypes.POINTER(ctypes.c_int32)]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
        ints = [(i, a) for i, a in enumerate(args) if a in _INT_RANGES]
        if ints:
            setattr(lib, name, _checked_call(fn, name, ints))
    return lib


def _checked_call(fn, name, ints):
    """fn with its integer arguments (positions `ints`, with their ctypes) run through
    checked_int first: ctypes itself would pass 2**64 + 1 as 1."""

    def call(*args):
        for i, ctype in ints:
            if not isinstance(args[i], ctypes._SimpleCData):
                checked_int(args[i], "%s argument %d" % (name, i + 1), ctype)
        return fn(*args)

    call.__name__ = name
    return call
