"""Sharding one sequence over the ranks (gpe.context_parallel re-exports these): the global
positions each rank holds, load-balanced for causal attention or contiguous, and shard /
unshard of a tensor. No process group is needed.
"""

from __future__ import annotations

from typing import List, Literal, Optional, Sequence

import torch


LAYOUTS = ("load_balanced", "contiguous")
Layout = Literal["load_balanced", "contiguous"]


def chunk_bounds(seq_len: int, num_chunks: int) -> List[int]:
    """[0, floor(L / n), floor(2L / n), ..., L]: n chunks whose sizes differ by at most 1."""
    if seq_len < 0 or num_chunks < 1:
        raise ValueError("need seq_len >= 0 and num_chunks >= 1, got %d and %d"
                         % (seq_len, num_chunks))
    return [(c * seq_len) // num_chunks for c in range(num_chunks + 1)]


def shard_positions(seq_len: int, world_size: int, rank: int,
                    layout: Layout = "load_balanced") -> torch.Tensor:
    """Global positions (int64, ascending) of the tokens `rank` holds.

    "load_balanced": chunks rank and 2 world_size - 1 - rank of 2 world_size (causal work
    balanced); "contiguous": chunk rank of world_size."""
    if not 0 <= rank < world_size:
        raise ValueError("rank %d outside [0, %d)" % (rank, world_size))
    if layout == "load_balanced":
        b = chunk_bounds(seq_len, 2 * world_size)
        lo, hi = rank, 2 * world_size - 1 - rank
        return torch.cat([torch.arange(b[lo], b[lo + 1]), torch.arange(b[hi], b[hi + 1])])
    if layout == "contiguous":
        b = chunk_bounds(seq_len, world_size)
        return torch.arange(b[rank], b[rank + 1])
    raise ValueError("layout must be one of %s, got %r" % (LAYOUTS, layout))


def shard(x: torch.Tensor, world_size: int, rank: int, dim: int = 1,
          layout: Layout = "load_balanced") -> torch.Tensor:
    """The tokens of x (sequence along `dim`) that `rank` holds (differentiable)."""
    return x.index_select(dim, shard_positions(x.shape[dim], world_size, rank, layout))


def unshard(shards: Sequence[torch.Tensor], seq_len: Optional[int] = None, dim: int = 1,
            layout: Layout = "load_balanced") -> torch.Tensor:
    """Inverse of shard: every rank's shard, in rank order, back into one sequence."""
    world = len(shards)
    if seq_len is None:
        seq_len = sum(s.shape[dim] for s in shards)
    pos = torch.cat([shard_positions(seq_len, world, r, layout) for r in range(world)])
    if pos.numel() != seq_len:
        raise ValueError("the shards hold %d tokens, not seq_len = %d" % (pos.numel(), seq_len))
    return torch.cat(list(shards), dim).index_select(dim, torch.argsort(pos))
