"""Hugging Face transformers RoPE configurations as gpe.Rope arguments (internal; used by
gpe.Rope.from_hf_config). Pure Python: transformers is never imported.

A model config (a transformers PretrainedConfig, any object with its attributes, or the
dict of a config.json) carries RoPE in one of two forms:

- transformers 5: `rope_parameters` = {"rope_type": ..., "rope_theta": ..., the type's
  parameters}, possibly nested by layer type ({"full_attention": {...}, ...});
- older configs: `rope_theta` and `partial_rotary_factor` on the config and
  `rope_scaling` = {"type" or "rope_type": ..., parameters} or None (the default type).

The names differ from gpe.Rope's as follows (transformers' modeling_rope_utils documents
each type's keys):

    head_dim or hidden_size // num_attention_heads  -> head_dim
    int(head_dim * partial_rotary_factor)           -> rotary_dim
    rope_theta                                       -> base
    rope_type "dynamic"                              -> schedule "dynamic_ntk", L0 =
                                                        max_position_embeddings
    original_max_position_embeddings (llama3, yarn,  -> original_max_position
      longrope; default max_position_embeddings)
    max_position_embeddings (longrope)               -> max_position
    factor, beta_fast, beta_slow, truncate, mscale, mscale_all_dim, attention_factor,
    short_factor, long_factor, low_freq_factor, high_freq_factor  -> the same names

and transformers' rules for what a type leaves out are applied here: YaRN's factor
defaults to max_position_embeddings / L0, beta_fast / beta_slow to 32 / 1 when missing
or zero, mscale / mscale_all_dim count only when both are set and nonzero; LongRoPE's
attention factor follows an explicit factor when one is given (Ding et al.'s
sqrt(1 + ln s / ln L0), s the factor).
"""

import math
from typing import Any, Dict, Mapping, Optional

_MISSING = object()

# transformers' rope_type -> gpe.Rope's schedule.
_SCHEDULES = {"default": "default", "linear": "linear", "dynamic": "dynamic_ntk",
              "yarn": "yarn", "longrope": "longrope", "llama3": "llama3",
              "proportional": "linear"}


def _get(config: Any, name: str, default: Any = None) -> Any:
    """config.name or config[name] (dict configs), default when absent or None."""
    if isinstance(config, Mapping):
        value = config.get(name, _MISSING)
    else:
        try:
            value = getattr(config, name)
        except AttributeError:
            value = _MISSING
    return default if value is _MISSING or value is None else value


def _rope_parameters(config: Any, layer_type: Optional[str]) -> Dict[str, Any]:
    """The flat dict of one layer type's RoPE parameters (a copy), rope_theta and
    partial_rotary_factor filled in from the config where the dict lacks them."""
    params = _get(config, "rope_parameters")
    if params is None:
        params = _get(config, "rope_scaling")
    params = dict(params) if params else {}
    nested = {k: v for k, v in params.items() if isinstance(v, Mapping)}
    if nested and not {"rope_type", "type"} & params.keys():
        if layer_type is None:
            raise ValueError("this config has RoPE parameters per layer type (%s); pass "
                             "layer_type= to choose one" % ", ".join(sorted(nested)))
        if layer_type not in params:
            raise ValueError("layer_type %r is not in the config's rope_parameters (%s)"
                             % (layer_type, ", ".join(sorted(nested))))
        if params[layer_type] is None:
            raise ValueError("layer_type %r has no RoPE (its rope_parameters entry is None)"
                             % layer_type)
        params = dict(params[layer_type])
    elif layer_type is not None and params:
        raise ValueError("layer_type=%r given, but the config's RoPE parameters are not "
                         "nested by layer type" % layer_type)
    params.setdefault("rope_theta", _get(config, "rope_theta", 10000.0))
    if params.get("partial_rotary_factor") is None:
        params["partial_rotary_factor"] = _get(config, "partial_rotary_factor", 1.0)
    return params


def _head_dim(config: Any) -> int:
    head_dim = _get(config, "head_dim")
    if head_dim is None:
        hidden, heads = _get(config, "hidden_size"), _get(config, "num_attention_heads")
        if hidden is None or heads is None:
            raise ValueError("the config gives neither head_dim nor hidden_size and "
                             "num_attention_heads")
        head_dim = int(hidden) // int(heads)
    return int(head_dim)


def rope_arguments(config: Any, layer_type: Optional[str] = None,
                   current_length: Optional[int] = None, pairing: str = "half_split",
                   still_planes: bool = False) -> Dict[str, Any]:
    """gpe.Rope keyword arguments equivalent to the config's RoPE (see the module
    docstring). current_length is transformers' seq_len (dynamic NTK rescales the base
    beyond max_position_embeddings, LongRoPE takes long_factor beyond L0); None is the
    model at initialisation (transformers' seq_len=None). still_planes: partial
    "proportional" RoPE as two M-RoPE sections whose second axis the caller holds at
    position 0 (the arguments then include mrope_sections); else NotImplementedError."""
    params = _rope_parameters(config, layer_type)
    rope_type = params.get("rope_type", params.get("type", "default")) or "default"
    if rope_type not in _SCHEDULES:
        raise NotImplementedError(
            "rope_type %r is not supported by gpe.Rope.from_hf_config (supported: %s)"
            % (rope_type, ", ".join(sorted(_SCHEDULES))))
    head_dim = _head_dim(config)
    prf = float(params["partial_rotary_factor"])
    base = float(params["rope_theta"])
    max_pos = _get(config, "max_position_embeddings")
    args: Dict[str, Any] = {"head_dim": head_dim, "base": base, "pairing": pairing,
                            "schedule": _SCHEDULES[rope_type]}
    if rope_type == "proportional":
        # transformers' "proportional" type: the first int(prf * head_dim / 2) planes of a
        # half-split over the WHOLE head (pairs (j, j + head_dim / 2)) rotate with
        # base^(-2j / head_dim) / factor, the others have frequency 0 (identity). When
        # every plane rotates it is the linear schedule. Otherwise a single-axis gpe.Rope
        # cannot hold frequency-0 planes inside the half-split; M-RoPE sections can: the
        # rotated planes on axis 0 (the positions), the others on axis 1, whose positions
        # the caller sets to 0 (still_planes=True asks for that form).
        args["factor"] = float(params.get("factor") or 1.0)
        planes = int(prf * head_dim // 2)
        if planes != head_dim // 2:
            if not still_planes:
                raise NotImplementedError(
                    "rope_type 'proportional' with partial_rotary_factor %g (%d of %d "
                    "planes rotated, pairs (j, j + head_dim / 2)) is not a single-axis "
                    "gpe.Rope: its other planes have frequency 0 inside the half-split "
                    "pairing. gpe.torch.RotaryEmbedding.from_hf_config supports it (M-RoPE "
                    "sections [%d, %d] with the second axis at position 0)"
                    % (prf, planes, head_dim // 2, planes, head_dim // 2 - planes))
            args["mrope_sections"] = [planes, head_dim // 2 - planes]
        return args
    rotary_dim = int(head_dim * prf)
    if rotary_dim % 2:
        raise ValueError("int(head_dim * partial_rotary_factor) = %d is odd; gpe.Rope rotates "
                         "pairs (an even rotary dimension)" % rotary_dim)
    if rotary_dim != head_dim:
        args["rotary_dim"] = rotary_dim
    # transformers moves original_max_position_embeddings into the RoPE parameters, a
    # config-level value first (Phi-3 keeps it there), else max_position_embeddings.
    l0 = _get(config, "original_max_position_embeddings",
              params.get("original_max_position_embeddings", max_pos))
    if rope_type == "linear":
        args["factor"] = float(params["factor"])
    elif rope_type == "dynamic":
        if max_pos is None:
            raise ValueError("rope_type 'dynamic' needs max_position_embeddings")
        args.update(factor=float(params["factor"]), original_max_position=int(max_pos),
                    current_length=int(current_length or 0))
    elif rope_type == "yarn":
        if l0 is None:
            raise ValueError("rope_type 'yarn' needs original_max_position_embeddings or "
                             "max_position_embeddings")
        factor = params.get("factor")
        if factor is None:
            factor = max_pos / l0
        args.update(factor=float(factor), original_max_position=int(l0),
                    beta_fast=float(params.get("beta_fast") or 32.0),
                    beta_slow=float(params.get("beta_slow") or 1.0),
                    truncate=bool(params.get("truncate", True)))
        if params.get("attention_factor") is not None:
            args["attention_factor"] = float(params["attention_factor"])
        elif params.get("mscale") and params.get("mscale_all_dim"):
            args.update(mscale=float(params["mscale"]),
                        mscale_all_dim=float(params["mscale_all_dim"]))
    elif rope_type == "longrope":
        if l0 is None or max_pos is None:
            raise ValueError("rope_type 'longrope' needs max_position_embeddings")
        args.update(short_factor=[float(v) for v in params["short_factor"]],
                    long_factor=[float(v) for v in params["long_factor"]],
                    original_max_position=int(l0), max_position=int(max_pos),
                    current_length=int(current_length or 0))
        factor = params.get("factor")
        if params.get("attention_factor") is not None:
            args["attention_factor"] = float(params["attention_factor"])
        elif factor is not None:
            # An explicit factor replaces max_position / L0 in the attention factor.
            s = float(factor)
            args["attention_factor"] = (math.sqrt(1.0 + math.log(s) / math.log(l0))
                                        if s > 1.0 else 1.0)
    elif rope_type == "llama3":
        if l0 is None:
            raise ValueError("rope_type 'llama3' needs original_max_position_embeddings")
        args.update(factor=float(params["factor"]),
                    low_freq_factor=float(params["low_freq_factor"]),
                    high_freq_factor=float(params["high_freq_factor"]),
                    original_max_position=int(l0))
    return args
