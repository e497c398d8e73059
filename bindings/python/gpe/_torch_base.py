"""What gpe.torch and gpe.torch_sequence share (internal; needs PyTorch): the table through
which Python objects cross a torch.library schema, and the learnable-bias interface.

A schema takes tensors and scalars only, so an encoding, bias or Rope object travels
through an operator as an int key (_register) and is looked up again in _ENCODINGS.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Optional, Tuple

import torch

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
