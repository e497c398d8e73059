"""GroupPE: positional encodings as group representations (Python bindings).

A thin ctypes layer over the stable C ABI (libgpe.so); no compiled extension. Arrays
are NumPy arrays, passed to the library without copies. Errors raise GpeError with
the library's own message.
"""

from gpe._core import GpeError, version, version_string
from gpe.sequence import (AlgebraicSequence, GrapeM, LearnedPositions, shaw_key_scores,
                          shaw_key_scores_backward, sinusoidal)
from gpe.so import SoRepresentation

__all__ = [
    "AlgebraicSequence",
    "GpeError",
    "GrapeM",
    "LearnedPositions",
    "SoRepresentation",
    "shaw_key_scores",
    "shaw_key_scores_backward",
    "sinusoidal",
    "version",
    "version_string",
]
