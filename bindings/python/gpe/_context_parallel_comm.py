"""The collectives gpe.context_parallel's methods share (internal): the process group, the
all_gather of per-rank sizes and of tensors whose length differs by rank, its transpose
(a reduce-scatter), and _Collect, the autograd node that runs one call's gathers and
parameter all_reduces in the same order on every rank.
"""

import torch
import torch.distributed as dist


class _Group:
    def __init__(self, group):
        self.group = group
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.ranks = (dist.get_process_group_ranks(group) if group is not None
                      else list(range(self.size)))

    def global_rank(self, r):
        return self.ranks[r % self.size]


def _all_gather_sizes(g, n):
    t = torch.tensor([n], dtype=torch.int64)
    out = [torch.zeros(1, dtype=torch.int64) for _ in range(g.size)]
    dist.all_gather(out, t, group=g.group)
    return [int(x) for x in out]


def _all_gather_var(g, x, sizes, dim=0):
    """all_gather of tensors whose size along `dim` differs per rank (padded to the max)."""
    m = max(sizes)
    if m == 0:
        return x.new_empty(x.shape[:dim] + (0,) + x.shape[dim + 1:])
    pad_shape = list(x.shape)
    pad_shape[dim] = m - x.shape[dim]
    padded = torch.cat([x, x.new_zeros(pad_shape)], dim).contiguous()
    out = [torch.empty_like(padded) for _ in range(g.size)]
    dist.all_gather(out, padded, group=g.group)
    return torch.cat([o.narrow(dim, 0, n) for o, n in zip(out, sizes)], dim)


def _reduce_scatter_seq(g, grad, sizes, dim):
    """Transpose of _all_gather_var: the gradient summed over ranks, this rank's slice."""
    m = max(sizes)
    if m == 0:
        return grad
    padded = []
    for p in grad.split(sizes, dim=dim):
        shape = list(p.shape)
        shape[dim] = m - p.shape[dim]
        padded.append(torch.cat([p, p.new_zeros(shape)], dim))
    stacked = torch.cat(padded, 0).contiguous()  # rank r's slice: rows r*n0 .. (r+1)*n0
    out = torch.empty_like(padded[0])
    dist.reduce_scatter_tensor(out, stacked, group=g.group)
    return out.narrow(dim, 0, sizes[g.rank])


class _Collect(torch.autograd.Function):
    """The collectives of one call in one autograd node, so every rank runs them in the
    same order in backward: tensors[:len(dims)] are all-gathered along their dims
    ([..., s_r, ...] -> [..., sum_r s_r, ...] in rank order; backward: a reduce-scatter
    gives each rank its slice of the gradient summed over ranks), the rest (learnable
    parameters, replicated) pass unchanged and their gradients are summed over ranks by
    an all_reduce (each rank's share comes from its own queries and the global lse)."""

    @staticmethod
    def forward(ctx, g, sizes, dims, *tensors):
        ctx.g, ctx.sizes, ctx.dims = g, sizes, dims
        gathered = [_all_gather_var(g, x, sizes, dim=d) for x, d in zip(tensors, dims)]
        return tuple(gathered) + tuple(t.clone() for t in tensors[len(dims):])

    @staticmethod
    def backward(ctx, *grads):
        g, sizes, dims = ctx.g, ctx.sizes, ctx.dims
        out = [_reduce_scatter_seq(g, gr.contiguous(), sizes, d)
               for gr, d in zip(grads, dims)]
        for gr in grads[len(dims):]:
            total = gr.to(torch.float64).contiguous()
            dist.all_reduce(total, group=g.group)
            out.append(total.to(gr.dtype))
        return (None, None, None) + tuple(out)
