"""What gpe.context_parallel's methods share about one call (internal): its options
(_Config: encodings, bias, RoPE, one block's operator arguments, the causal skip) and the
learnable modules' tensors, taken out (_learnable_tensors) and rebuilt over the collected
copies through which their gradients are summed over ranks (_rebuilt).
"""


class _Config:
    def __init__(self, g, causal, scale, rope_dim, rope_base, rope_pairing, alibi, bias,
                 encoding, threads):
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
        # Learnable tensors (bias_a, grape_a, grape_b, grape_omega), detached: the values
        # the library's handles are rebuilt from at every block.
        self.params = (None,) * 4

    def param_args(self, bias_a=None):
        """forward_impl / backward_impl's trailing tensors (structured_key, bias_a, bias_b,
        grape_a, grape_b, grape_omega)."""
        pa, ga, gb, gw = self.params
        return (0, pa if bias_a is None else bias_a, None, ga, gb, gw)

    def op_args(self, q_pos, k_pos, batch, bias=None):
        """The trailing arguments of gpe::attention_forward / _backward for one block."""
        gt = self.gt
        bias = self.bias if bias is None else bias
        return (q_pos.repeat(batch), k_pos.repeat(batch), None, None, self.causal, self.scale,
                self.rope_dim, self.rope_base, self.rope_pairing,
                self.alibi if bias is None else "", gt._register(self.encoding),
                gt._register(bias), self.threads)

    def masked(self, q_pos, k_pos):
        """True when no (query, key) pair of the block is allowed (or the block is empty)."""
        if q_pos.numel() == 0 or k_pos.numel() == 0:
            return True
        return self.causal and int(k_pos.min()) > int(q_pos.max())


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
