"""What gpe.context_parallel's methods share about one call (internal): its options
(_Config: encodings, bias, RoPE, window, sinks, packed sequences, one block's operator
arguments, the skip of blocks with no allowed pair) and the
learnable modules' tensors, taken out (_learnable_tensors) and rebuilt over the collected
copies through which their gradients are summed over ranks (_rebuilt).
"""

import torch


class _Config:
    def __init__(self, g, causal, scale, rope_dim, rope_base, rope_pairing, alibi, bias,
                 encoding, threads, rope=None, window=None, sinks=None, cu_seqlens=None,
                 softcap=None, arithmetic=(("auto", "exact"), (0, 0))):
        import gpe.torch as gt
        self.g = g
        self.causal = bool(causal)
        self.scale = 0.0 if scale is None else float(scale)
        self.rope_dim = int(rope_dim)
        self.rope_base = float(rope_base)
        self.rope_pairing = rope_pairing
        self.alibi = alibi or ""
        self.bias = bias
        self.encoding = encoding
        self.threads = int(threads)
        self.gt = gt
        self.rope = rope                  # a single-axis gpe.Rope or None
        self.window = window              # (left, right), -1 unbounded, or None
        self.softcap = softcap            # Gemma 2's logit cap c > 0, or None
        # The CPU arithmetic: gpe.torch.attention's names (bf16_arithmetic,
        # float32_arithmetic) and gpe/attention.h's codes of them.
        (self.bf16_arithmetic, self.float32_arithmetic), self.arithmetic = arithmetic
        # Sink logits as the kernels read them (float32 values), float64; the tensor the
        # caller gave (it may require grad) is passed to the methods separately.
        self.sinks = None if sinks is None else sinks.detach().to(torch.float32).to(
            torch.float64)
        # Packed sequences: global boundaries (int64 [S + 1]) and the longest length.
        self.cu_seqlens = cu_seqlens
        self.max_len = 0 if cu_seqlens is None else int((cu_seqlens[1:] - cu_seqlens[:-1])
                                                        .max().clamp(min=1))
        # Learnable tensors (bias_a, grape_a, grape_b, grape_omega), detached: the values
        # the library's handles are rebuilt from at every block.
        self.params = (None,) * 4

    def param_args(self, bias_a=None):
        """forward_impl / backward_impl's trailing tensors (structured_key, bias_a, bias_b,
        grape_a, grape_b, grape_omega)."""
        pa, ga, gb, gw = self.params
        return (0, pa if bias_a is None else bias_a, None, ga, gb, gw)

    def op_args(self, q_pos, k_pos, batch, bias=None):
        """The trailing arguments of gpe::attention_forward / _backward for one block. Packed
        sequences: positions within each sequence and the block's own cu_seqlens (the
        block's tokens grouped by sequence, as the callers keep them), for the packed
        layout [tokens, heads, head_dim] (rows())."""
        gt = self.gt
        bias = self.bias if bias is None else bias
        if self.cu_seqlens is None:
            layout = (q_pos.repeat(batch), k_pos.repeat(batch), None, None)
        else:
            (qs, ql), (ks, kl) = self.seq_local(q_pos), self.seq_local(k_pos)
            layout = (ql, kl, self.block_cu(qs), self.block_cu(ks))
        return layout + (self.causal, self.scale, self.rope_dim, self.rope_base,
                         self.rope_pairing, self.alibi if bias is None else "",
                         gt._register(self.encoding), gt._register(bias), self.threads)

    def extras(self):
        """Keyword arguments of forward_impl / backward_impl after the parameters: the RoPE
        handle, the window, the softcap and the CPU arithmetic's codes (the sinks are added
        once per row by the ring itself)."""
        left, right = self.window or (-1, -1)
        return dict(rope_key=self.gt._register(self.rope), window_left=left,
                    window_right=right, softcap=self.softcap or 0.0,
                    bf16_arithmetic=self.arithmetic[0], float32_arithmetic=self.arithmetic[1])

    def arithmetic_names(self):
        """gpe.torch.attention's keywords for the CPU arithmetic (all_gather, ulysses)."""
        return dict(bf16_arithmetic=self.bf16_arithmetic,
                    float32_arithmetic=self.float32_arithmetic)

    def rows(self, x):
        """x [1, tokens, ...] as the packed layout's [tokens, ...] (packed calls only)."""
        return x if self.cu_seqlens is None else x[0]

    def seq_local(self, positions):
        """(sequence id, position within the sequence) of packed token indices."""
        cu = self.cu_seqlens
        seq = torch.searchsorted(cu[1:], positions, right=True)
        return seq, positions - cu[seq]

    def block_cu(self, seq):
        """cu_seqlens of tokens already grouped by sequence, over every sequence (empty
        ones included, so a block's queries and keys pair sequence by sequence)."""
        counts = torch.bincount(seq, minlength=self.cu_seqlens.numel() - 1)
        return torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])

    def masked(self, q_pos, k_pos):
        """True when no (query, key) pair of the block is allowed (or the block is empty):
        exact for the causal rule, the window and packed sequences. Query i admits keys
        with lo_i <= p_j <= hi_i in its own sequence (hi_i = p_i under causal, p_i + right
        with a window; lo_i = p_i - left); one binary search per query over the block's
        keys (sorted by (sequence, position)) tells whether any lies in that range."""
        if q_pos.numel() == 0 or k_pos.numel() == 0:
            return True
        left, right = self.window or (-1, -1)
        if not self.causal and (left, right) == (-1, -1) and self.cu_seqlens is None:
            return False
        cap = 1 << 62  # positions are taken to lie within +-2^62 (no int64 overflow)
        if self.cu_seqlens is None:
            qs, ql, ks, kl = 0, q_pos, 0, k_pos
        else:
            (qs, ql), (ks, kl) = self.seq_local(q_pos), self.seq_local(k_pos)
        kmin, kmax = int(kl.min()), int(kl.max())
        lo = ql - min(left, cap) if left >= 0 else torch.full_like(ql, kmin)
        hi = ql + min(right, cap) if right >= 0 else torch.full_like(ql, kmax)
        if self.causal:
            hi = torch.minimum(hi, ql)
        if self.cu_seqlens is not None:  # (sequence, position) as one sortable integer
            m = self.max_len
            lo, hi = qs * m + lo.clamp(0, m - 1), qs * m + hi.clamp(0, m - 1)
            kl = ks * m + kl
        keys = torch.sort(kl).values
        # Keys in [lo, hi] (none when lo > hi: the difference is then <= 0).
        found = (torch.searchsorted(keys, hi, right=True)
                 - torch.searchsorted(keys, lo, right=False)) > 0
        return not bool(found.any())


def _learnable_tensors(cfg):
    """(bias tensor or None, GRAPE-M (a, b, omega) or Nones) of cfg's learnable modules."""
    gt = cfg.gt
    bias_a = cfg.bias.tensors()[0] if isinstance(cfg.bias, gt._LearnableBias) else None
    grape = (cfg.encoding.tensors() if isinstance(cfg.encoding, gt.GrapeMEncoding)
             else (None, None, None))
    return (bias_a,) + tuple(grape)


def _rebuilt(cfg, bias_a, grape, head_slice=None):
    """cfg's learnable bias and encoding over the given tensors (the outputs of _Collect:
    gradients flow back through its all_reduce); per-head tensors cut to head_slice."""
    gt = cfg.gt
    bias, enc = cfg.bias, cfg.encoding
    if isinstance(bias, gt._LearnableBias):
        hs = slice(None) if head_slice is None else head_slice
        if isinstance(bias, gt.AlibiBias):
            bias = gt.AlibiBias(bias_a[hs], symmetric=bias.symmetric)
        elif isinstance(bias, gt.T5Bias):
            bias = gt.T5Bias(bias_a[:, hs], max_distance=bias.max_distance,
                             bidirectional=bias.bidirectional)
        else:  # GrapeABias with slopes (the gated form is refused by attention())
            bias = gt.GrapeABias(slopes=bias_a[hs], path=bias.path)
    if isinstance(enc, gt.GrapeMEncoding):
        enc = gt.GrapeMEncoding(*grape)
    return bias, enc
