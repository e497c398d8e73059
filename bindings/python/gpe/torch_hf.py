"""GroupPE's fused attention as a Hugging Face transformers attention implementation.

    import gpe.torch as gt
    gt.register_hf_attention()                     # registers "gpe" (once per process)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="gpe")

transformers (5.x) looks an attention implementation up by name in its
AttentionInterface and the matching mask builder in its AttentionMaskInterface.
register_hf_attention() puts gpe.torch.attention under `name` in the first and
transformers' own SDPA mask builder (a boolean [batch, 1, q, k] mask, or None for a
plain causal mask) in the second, so a model runs exactly as with
attn_implementation="sdpa" with GroupPE's kernels doing the attention (CPU tensors;
forward and backward through autograd).

What the function receives and does (the contract of transformers' attention
functions): query, key, value [batch, heads, seq, head_dim] (a view with the heads axis
second; passed to the kernel as [batch, seq, heads, head_dim] views, no copy); the
module's num_key_value_groups (GQA: the kernel reads the shared kv heads directly);
attention_mask (boolean or additive [batch or 1, 1, q, k], SDPA's attn_mask) or None
with is_causal; scaling; position_bias (T5-style models: added to the mask, as
transformers' SDPA path does); and the keyword extras softcap (Gemma 2) and s_aux (per
head sink logits, gpt-oss). Dropout is refused while training (the kernel has none);
transformers passes 0.0 in eval. Returns (output [batch, seq, heads, head_dim], None): no
attention weights are formed.
"""
from typing import Any, Optional, Tuple

import torch

from gpe import torch as _gt


def _attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
               value: torch.Tensor, attention_mask: Optional[torch.Tensor],
               dropout: float = 0.0, scaling: Optional[float] = None,
               is_causal: Optional[bool] = None, position_bias: Optional[torch.Tensor] = None,
               **kwargs: Any) -> Tuple[torch.Tensor, None]:
    if dropout and module.training:
        raise ValueError("gpe attention has no dropout: set the model's attention dropout to 0 "
                         "(it is applied only while training)")
    if kwargs.get("output_attentions", False):
        raise ValueError("gpe attention forms no attention weights (output_attentions=True)")
    q_len, kv_len = query.shape[2], key.shape[2]
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    # As transformers' SDPA path: a mask given carries the causal rule (and any window or
    # padding); without one, causal applies from the second query on.
    causal = bool(causal) and attention_mask is None and q_len > 1
    if causal and kv_len > q_len:
        # A prefill into an empty static cache: the keys past the queries are masked for
        # every query (top-left causal alignment, as SDPA's is_causal); drop them.
        key, value = key[:, :, :q_len], value[:, :, :q_len]
        if position_bias is not None:
            position_bias = position_bias[..., :q_len]
    mask = attention_mask
    if position_bias is not None:  # an additive bias joins the mask
        if mask is None:
            mask = position_bias
            if causal:
                allowed = torch.ones(q_len, key.shape[2], dtype=torch.bool,
                                     device=query.device).tril()
                mask = position_bias.masked_fill(~allowed, float("-inf"))
                causal = False
        elif mask.dtype == torch.bool:
            mask = position_bias.masked_fill(~mask, float("-inf"))
        else:
            mask = position_bias + mask
    sinks = kwargs.get("s_aux")
    out = _gt.attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                        attn_mask=mask, is_causal=causal, scale=scaling, enable_gqa=True,
                        softcap=kwargs.get("softcap"), sinks=sinks)
    return out, None


def register_hf_attention(name: str = "gpe") -> str:
    """Registers GroupPE's attention with transformers under `name` (and SDPA's mask
    builder under the same name); returns the name, for
    from_pretrained / from_config(..., attn_implementation=name). ImportError without
    transformers."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(name, _attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(name, sdpa_mask)
    return name
