"""What gpe.torch, gpe.torch_sequence and gpe.torch_rotary share (internal; needs PyTorch):
the table through which Python objects cross a torch.library schema, the learnable-bias
interface, tensors described to the library as DLTensors, and RoPE on CUDA tensors.

A schema takes tensors and scalars only, so an encoding, bias or Rope object travels
through an operator as an int key (_register) and is looked up again in _ENCODINGS.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import TYPE_CHECKING, Any, List, Optional, Tuple

import torch

from gpe import _ffi
from gpe._core import check, lib, live_handle

if TYPE_CHECKING:
    from gpe.bias import AdditiveBias

# Encoding and bias objects cannot cross a torch.library schema; they travel as a key
# into this table (id of the object, alive while the caller holds it).
_ENCODINGS: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


@torch.compiler.assume_constant_result
def _register(obj: Any) -> int:
    """The key under which the operators find obj (0 for None). Under torch.compile it runs
    once while tracing and the key becomes a constant of the graph."""
    if obj is None:
        return 0
    _ENCODINGS[id(obj)] = obj
    return id(obj)


class _LearnableBias(torch.nn.Module):
    """An additive bias whose parameters are torch tensors (tensors() gives them as (a, b):
    the ABI's d_bias_a / d_bias_b slots); build(a, b) makes the library's handle from the
    values the operator was given."""

    def tensors(self) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        raise NotImplementedError

    def build(self, a: torch.Tensor, b: Optional[torch.Tensor], heads: Optional[int],
              head_dim: int) -> AdditiveBias:
        raise NotImplementedError


# DLPack type codes (dlpack.h): float 2, bfloat 4. float16: a KV cache's k and v (forward).
_DTYPES = {torch.float32: (2, 32), torch.float64: (2, 64), torch.bfloat16: (4, 16),
           torch.float16: (2, 16), torch.int64: (0, 64), torch.uint8: (1, 8)}


def _int64s(x, name):
    """x (positions, offsets, cu_seqlens: anything torch.as_tensor takes) as an int64
    tensor; floats, complex numbers and bools are refused (TypeError), not truncated."""
    if x is None:
        return None
    t = torch.as_tensor(x)
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise TypeError("%s must be integers; got %s" % (name, t.dtype))
    return t.to(torch.int64)


def _dltensor(t, name, keep, cuda=False):
    """A DLTensor over t's storage (strides in elements, as DLPack and torch count them).
    cuda: a tensor on a CUDA device is described there (attention's tensors and index
    arrays; the library runs them through its CUDA plugin); else CPU tensors only."""
    if t is None:
        return None
    on_cuda = cuda and t.device.type == "cuda"
    if t.device.type != "cpu" and not on_cuda:
        raise ValueError("%s must be a CPU tensor, got device %s" % (name, t.device))
    if t.dtype not in _DTYPES:
        raise TypeError("%s: unsupported dtype %s" % (name, t.dtype))
    code, bits = _DTYPES[t.dtype]
    shape = (ctypes.c_int64 * max(t.dim(), 1))(*t.shape)
    strides = (ctypes.c_int64 * max(t.dim(), 1))(*t.stride())
    d = _ffi.DLTensor()
    d.data = t.data_ptr() if t.numel() else None
    d.device = (_ffi.DLDevice(_ffi.KDL_CUDA, t.device.index or 0) if on_cuda
                else _ffi.DLDevice(_ffi.KDL_CPU, 0))
    d.ndim = t.dim()
    d.dtype = _ffi.DLDataType(code, bits, 1)
    d.shape = shape
    d.strides = strides
    d.byte_offset = 0
    keep.append((t, shape, strides, d))
    return ctypes.pointer(d)


def _rope_cuda(backward, rope, x, positions, offsets, cu_seqlens, layout, role):
    """gpe_rope_forward / _backward on a CUDA tensor through the library's CUDA plugin, on
    PyTorch's current stream, into a new contiguous tensor (the GPU kernel writes out with
    x's strides: x is made contiguous first where it is not)."""
    from gpe.rope import _LAYOUTS, _ROLES, _choice
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError("rope on a CUDA device: float32, bfloat16 or float16; got %s" % x.dtype)
    x = x.detach().contiguous()
    out = torch.empty_like(x)
    keep: List[Any] = []
    tok = _ffi.RopeTokens()
    tok.struct_size = ctypes.sizeof(tok)
    tok.layout = _choice(_LAYOUTS, layout, "layout")
    tok.role = _choice(_ROLES, role, "role")
    for field, value in (("position_ids", positions), ("offsets", offsets),
                         ("cu_seqlens", cu_seqlens)):
        if value is not None:
            setattr(tok, field, _dltensor(value.contiguous(), field, keep, cuda=True))
    tok.cuda_stream = torch.cuda.current_stream(x.device).cuda_stream
    fn = lib().gpe_rope_backward if backward else lib().gpe_rope_forward
    check(fn(live_handle(rope, "rope", keep), ctypes.byref(tok), _dltensor(x, "x", keep, cuda=True),
             _dltensor(out, "out", keep, cuda=True)))
    return out
