"""gpe.Rope.from_hf_config and gpe.torch.RotaryEmbedding against Hugging Face transformers'
own RoPE: its ROPE_INIT_FUNCTIONS (inverse frequencies and attention factor, every
rope_type it defines), its apply_rotary_pos_emb, and LlamaRotaryEmbedding end to end.

transformers (bindings/python/requirements-hf.txt, installed by tools/setup_transformers.sh)
and PyTorch are optional: without them the golden tests skip with a message, and the tests
of the name mapping on plain dict configs still run.
"""

import math
import unittest

import sanitizer_preload
from gpe import _ffi

sanitizer_preload.reexec_if_needed(next((str(p) for p in _ffi._candidates() if p.is_file()), None))

import numpy as np  # noqa: E402

import gpe  # noqa: E402

try:
    import torch  # noqa: E402
    import gpe.torch as gt  # noqa: E402
    _NO_TORCH = None
except ImportError as e:
    torch = None
    _NO_TORCH = "PyTorch is not installed (%s); torch tests skipped" % e
try:
    if torch is None:
        raise ImportError("transformers' RoPE functions need PyTorch")
    import transformers  # noqa: E402
    from transformers import LlamaConfig  # noqa: E402
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
    from transformers.models.llama.modeling_llama import (  # noqa: E402
        LlamaRotaryEmbedding, apply_rotary_pos_emb)
    from transformers.models.phi.modeling_phi import PhiRotaryEmbedding  # noqa: E402
    transformers.logging.set_verbosity_error()  # its advice on the test configs' ratios
    _NO_HF = None
except ImportError as e:
    _NO_HF = ("transformers is not installed (%s; tools/setup_transformers.sh installs it); "
              "Hugging Face golden tests skipped" % e)

needs_torch = unittest.skipIf(_NO_TORCH is not None, _NO_TORCH or "")
needs_hf = unittest.skipIf(_NO_HF is not None, _NO_HF or "")

HEAD_DIM = 32
MAX_POS = 256
L0 = 64

# One config per case: (name, rope_parameters, extra LlamaConfig arguments, seq_len). Every
# type in transformers' ROPE_INIT_FUNCTIONS must have a case (test_every_hf_type_covered).
CASES = [
    ("default", {"rope_type": "default", "rope_theta": 10000.0}, {}, None),
    ("default_partial", {"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.5}, {}, None),
    ("linear", {"rope_type": "linear", "rope_theta": 1000.0, "factor": 4.0}, {}, None),
    ("linear_partial", {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0,
                        "partial_rotary_factor": 0.25}, {}, None),
    ("dynamic_init", {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, {}, None),
    ("dynamic_long", {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, {},
     3 * MAX_POS + 5),
    ("yarn", {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
              "original_max_position_embeddings": L0}, {}, None),
    # factor None (DeepSeek-style configs): max_position_embeddings / L0. transformers'
    # validation wants the key, so hf_config sets it to None after construction.
    ("yarn_no_factor", {"rope_type": "yarn", "rope_theta": 50000.0, "factor": None,
                        "original_max_position_embeddings": L0}, {}, None),
    ("yarn_deepseek_mscale", {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                              "original_max_position_embeddings": L0, "mscale": 1.0,
                              "mscale_all_dim": 0.707, "beta_fast": 32.0, "beta_slow": 1.0},
     {}, None),
    ("yarn_mscale_alone", {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0,
                           "original_max_position_embeddings": L0, "mscale": 1.0}, {}, None),
    ("yarn_attention_factor_untruncated", {"rope_type": "yarn", "rope_theta": 10000.0,
                                           "factor": 16.0, "attention_factor": 1.25,
                                           "original_max_position_embeddings": L0,
                                           "beta_fast": 16.0, "beta_slow": 2.0,
                                           "truncate": False}, {}, None),
    ("longrope_short", {"rope_type": "longrope", "rope_theta": 10000.0,
                        "short_factor": [1.0 + 0.05 * i for i in range(HEAD_DIM // 2)],
                        "long_factor": [1.5 + 0.25 * i for i in range(HEAD_DIM // 2)],
                        "original_max_position_embeddings": L0}, {}, None),
    ("longrope_long", {"rope_type": "longrope", "rope_theta": 10000.0,
                       "short_factor": [1.0 + 0.05 * i for i in range(HEAD_DIM // 2)],
                       "long_factor": [1.5 + 0.25 * i for i in range(HEAD_DIM // 2)],
                       "original_max_position_embeddings": L0}, {}, MAX_POS),
    ("longrope_factor", {"rope_type": "longrope", "rope_theta": 10000.0, "factor": 3.3,
                         "short_factor": [1.0] * (HEAD_DIM // 2),
                         "long_factor": [2.0] * (HEAD_DIM // 2),
                         "original_max_position_embeddings": L0}, {}, None),
    ("llama3", {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": L0}, {}, None),
    ("proportional", {"rope_type": "proportional", "rope_theta": 10000.0, "factor": 2.0}, {},
     None),
]


def hf_config(params, extra=None):
    given = {k: (1.0 if k == "factor" and v is None else v) for k, v in params.items()}
    config = LlamaConfig(hidden_size=4 * HEAD_DIM, num_attention_heads=4, head_dim=HEAD_DIM,
                         max_position_embeddings=MAX_POS, rope_parameters=given,
                         **(extra or {}))
    if "factor" in params and params["factor"] is None:
        config.rope_parameters["factor"] = None
    return config


def hf_frequencies(config, rope_type, seq_len):
    """transformers' inverse frequencies (float32, as it forms them) and attention factor."""
    if rope_type == "default":
        # The default type is each model's own function; Phi's reads partial_rotary_factor
        # (Llama's ignores it).
        return PhiRotaryEmbedding.compute_default_rope_parameters(config)
    return ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len=seq_len)


class MappingTest(unittest.TestCase):
    """The name mapping on dict configs (no transformers needed): the expected gpe.Rope is
    spelled out by hand for each form a config can take."""

    def assert_same_rope(self, a, b):
        self.assertEqual(a.shape, b.shape)
        ta, ma = a.frequencies()
        tb, mb = b.frequencies()
        np.testing.assert_array_equal(ta, tb)  # the same arguments: the same doubles
        self.assertEqual(ma, mb)

    def test_new_and_old_forms_agree(self):
        new = {"head_dim": 64, "max_position_embeddings": 4096,
               "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0,
                                   "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 1024}}
        old = {"hidden_size": 512, "num_attention_heads": 8, "max_position_embeddings": 4096,
               "rope_theta": 500000.0,
               "rope_scaling": {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 1024}}
        want = gpe.Rope(64, base=500000.0, schedule="llama3", factor=8.0, low_freq_factor=1.0,
                        high_freq_factor=4.0, original_max_position=1024)
        self.assert_same_rope(gpe.Rope.from_hf_config(new), want)
        self.assert_same_rope(gpe.Rope.from_hf_config(old), want)

        class Obj:  # any object with the config's attributes
            pass
        obj = Obj()
        obj.__dict__.update(old)
        self.assert_same_rope(gpe.Rope.from_hf_config(obj), want)

    def test_defaults_partial_rotary_and_names(self):
        self.assert_same_rope(gpe.Rope.from_hf_config({"hidden_size": 256,
                                                       "num_attention_heads": 4}),
                              gpe.Rope(64))
        cfg = {"head_dim": 64, "partial_rotary_factor": 0.5, "rope_theta": 1e6,
               "rope_scaling": None}
        self.assert_same_rope(gpe.Rope.from_hf_config(cfg),
                              gpe.Rope(64, rotary_dim=32, base=1e6))
        cfg = {"head_dim": 64, "max_position_embeddings": 2048,
               "rope_parameters": {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}}
        self.assert_same_rope(gpe.Rope.from_hf_config(cfg, current_length=5000),
                              gpe.Rope(64, schedule="dynamic_ntk", factor=2.0,
                                       original_max_position=2048, current_length=5000))
        # YaRN without factor: max_position_embeddings / L0; beta 0 means the default.
        cfg = {"head_dim": 64, "max_position_embeddings": 32768,
               "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "beta_fast": 0,
                                   "original_max_position_embeddings": 4096}}
        self.assert_same_rope(gpe.Rope.from_hf_config(cfg),
                              gpe.Rope(64, schedule="yarn", factor=8.0,
                                       original_max_position=4096, beta_fast=32.0,
                                       beta_slow=1.0))
        rope = gpe.Rope.from_hf_config({"head_dim": 64}, pairing="interleaved")
        x = np.random.default_rng(0).standard_normal((1, 3, 1, 64))
        np.testing.assert_array_equal(
            rope.forward(x), gpe.Rope(64, pairing="interleaved").forward(x))

    def test_layer_types(self):
        cfg = {"head_dim": 64, "layer_types": ["full_attention", "sliding_attention"],
               "rope_parameters": {
                   "full_attention": {"rope_type": "linear", "rope_theta": 1e6, "factor": 8.0},
                   "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}
        self.assert_same_rope(gpe.Rope.from_hf_config(cfg, layer_type="full_attention"),
                              gpe.Rope(64, base=1e6, schedule="linear", factor=8.0))
        self.assert_same_rope(gpe.Rope.from_hf_config(cfg, layer_type="sliding_attention"),
                              gpe.Rope(64))
        with self.assertRaisesRegex(ValueError, "layer_type"):
            gpe.Rope.from_hf_config(cfg)
        with self.assertRaisesRegex(ValueError, "not in"):
            gpe.Rope.from_hf_config(cfg, layer_type="chunked")

    def test_refusals(self):
        with self.assertRaisesRegex(NotImplementedError, "'su'"):
            gpe.Rope.from_hf_config({"head_dim": 64, "rope_scaling": {"type": "su"}})
        with self.assertRaisesRegex(NotImplementedError, "proportional.*0.5"):
            gpe.Rope.from_hf_config({"head_dim": 64, "rope_parameters": {
                "rope_type": "proportional", "rope_theta": 1e4, "partial_rotary_factor": 0.5}})
        with self.assertRaisesRegex(ValueError, "odd"):
            gpe.Rope.from_hf_config({"head_dim": 64, "partial_rotary_factor": 0.3})
        with self.assertRaisesRegex(ValueError, "head_dim"):
            gpe.Rope.from_hf_config({"rope_theta": 1e4})


@needs_hf
class HfGoldenTest(unittest.TestCase):
    def test_every_hf_type_covered(self):
        covered = {params["rope_type"] for _, params, _, _ in CASES}
        missing = set(ROPE_INIT_FUNCTIONS) - covered
        self.assertFalse(missing, "transformers %s has RoPE types without a case here: %s"
                         % (transformers.__version__, sorted(missing)))

    def test_frequencies_and_attention_factor(self):
        # transformers forms its inverse frequencies in float32 (base ** (2i / d), exact
        # exponents for these power-of-two d, then a few float32 operations), so they are
        # within a few float32 ulps (2^-24 ~ 6e-8 relative each) of gpe's doubles: rtol
        # 3e-7 (measured: at most 1.1e-7). The attention factors are double on both sides:
        # rtol 1e-14.
        for name, params, extra, seq_len in CASES:
            with self.subTest(name):
                config = hf_config(params, extra)
                inv, m_hf = hf_frequencies(config, params["rope_type"], seq_len)
                rope = gpe.Rope.from_hf_config(config, current_length=seq_len)
                thetas, m = rope.frequencies()
                np.testing.assert_allclose(thetas, inv.double().numpy(), rtol=3e-7, atol=0)
                self.assertAlmostEqual(m, float(m_hf), delta=1e-14 * float(m_hf))

    def test_apply_rotary_pos_emb_float64(self):
        # transformers' apply_rotary_pos_emb (rotate_half; partial rotary as its
        # partial-rotary models split q) on cos/sin formed in float64 from gpe's
        # frequencies and attention factor, against gpe.Rope.forward in float64: the same
        # map to rounding (angles < 2^9 rad in double), atol 1e-12 on entries of size ~4.
        # The frequencies themselves are compared above.
        rng = np.random.default_rng(1)
        pos = np.array([0, 1, 2, 7, 63, 64, 65, 200, 255, 511])
        for name, params, extra, seq_len in CASES:
            with self.subTest(name):
                config = hf_config(params, extra)
                rope = gpe.Rope.from_hf_config(config, current_length=seq_len)
                _, rotary_dim, _ = rope.shape
                thetas, m = rope.frequencies()
                q = rng.standard_normal((2, len(pos), 3, HEAD_DIM))
                k = rng.standard_normal((2, len(pos), 3, HEAD_DIM))
                freqs = torch.tensor(pos, dtype=torch.float64)[:, None] * torch.tensor(thetas)
                emb = torch.cat([freqs, freqs], dim=-1)[None].expand(2, -1, -1)
                cos, sin = emb.cos() * m, emb.sin() * m
                qt, kt = (torch.tensor(a).transpose(1, 2) for a in (q, k))  # [b, h, s, d]
                q_rot, k_rot = apply_rotary_pos_emb(qt[..., :rotary_dim], kt[..., :rotary_dim],
                                                    cos, sin)
                q_hf = torch.cat([q_rot, qt[..., rotary_dim:]], -1).transpose(1, 2).numpy()
                k_hf = torch.cat([k_rot, kt[..., rotary_dim:]], -1).transpose(1, 2).numpy()
                positions = np.tile(pos, 2)
                np.testing.assert_allclose(rope.forward(q, positions=positions), q_hf,
                                           rtol=0, atol=1e-12)
                np.testing.assert_allclose(rope.forward(k, positions=positions, role="key"),
                                           k_hf, rtol=0, atol=1e-12)

    def test_rotary_embedding_matches_llama_rotary_embedding(self):
        # LlamaRotaryEmbedding + apply_rotary_pos_emb end to end, float32, for llama3 and
        # yarn configs. transformers forms p * inv_freq in float32: the angle (|p theta| <=
        # p_max, theta <= 1) is rounded by up to ulp(p_max) / 2 and carries the float32
        # frequency's error (<= 2 * 2^-24 relative, see above); gpe's angles are exact.
        # Each output is m (x1 cos - x2 sin) or m (x1 sin + x2 cos), so it moves by at most
        # 2 m max|x| times the angle error: atol = 2 m max|x| (ulp(p_max) / 2 + 2^-23 p_max)
        # (measured about 10x below it).
        rng = np.random.default_rng(2)
        for name in ("llama3", "yarn", "yarn_deepseek_mscale"):
            params = dict(next(c for c in CASES if c[0] == name)[1])
            with self.subTest(name):
                config = hf_config(params)
                hf_rope = LlamaRotaryEmbedding(config)
                ours = gt.RotaryEmbedding.from_hf_config(config)
                m = ours.rope.frequencies()[1]
                for seq in (64, 600):
                    q = torch.tensor(rng.standard_normal((2, seq, 4, HEAD_DIM)),
                                     dtype=torch.float32)
                    k = torch.tensor(rng.standard_normal((2, seq, 2, HEAD_DIM)),
                                     dtype=torch.float32)
                    p_max = seq - 1
                    ulp = float(np.spacing(np.float32(p_max)))
                    x_max = float(max(q.abs().max(), k.abs().max()))
                    atol = 2 * m * x_max * (ulp / 2 + 2.0 ** -23 * p_max)
                    ids = torch.arange(seq)[None].expand(2, seq)
                    cos, sin = hf_rope(q, ids)
                    q_hf, k_hf = apply_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2),
                                                      cos, sin)
                    torch.testing.assert_close(ours(q), q_hf.transpose(1, 2), rtol=0,
                                               atol=atol)
                    torch.testing.assert_close(ours(k, role="key"), k_hf.transpose(1, 2),
                                               rtol=0, atol=atol)
                    # torchtune-style input_pos [batch, seq]: the same positions.
                    torch.testing.assert_close(ours(q, input_pos=ids), q_hf.transpose(1, 2),
                                               rtol=0, atol=atol)

    def test_length_tracking_matches_llama_rotary_embedding(self):
        # transformers' RoPE modules change dynamic NTK's base (the longest length seen,
        # reset below max_position_embeddings) and LongRoPE's factors (long beyond L0) with
        # each call's largest position; RotaryEmbedding.from_hf_config follows the same
        # rule. Calls of growing and shrinking length; atol as above.
        rng = np.random.default_rng(3)
        cases = (("dynamic_init", [100, 300, 280, 100, 600]),
                 ("longrope_short", [50, 100, 60, 200]))
        for name, lengths in cases:
            params = dict(next(c for c in CASES if c[0] == name)[1])
            config = hf_config(params)
            hf_rope = LlamaRotaryEmbedding(config)
            ours = gt.RotaryEmbedding.from_hf_config(config)
            m = ours.rope.frequencies()[1]
            for seq in lengths:
                with self.subTest(name, seq=seq):
                    q = torch.tensor(rng.standard_normal((1, seq, 2, HEAD_DIM)),
                                     dtype=torch.float32)
                    ids = torch.arange(seq)[None]
                    cos, sin = hf_rope(q, ids)
                    q_hf, _ = apply_rotary_pos_emb(q.transpose(1, 2), q.transpose(1, 2), cos,
                                                   sin)
                    ulp = float(np.spacing(np.float32(seq - 1)))
                    atol = 2 * m * float(q.abs().max()) * (ulp / 2 + 2.0 ** -23 * (seq - 1))
                    torch.testing.assert_close(ours(q), q_hf.transpose(1, 2), rtol=0,
                                               atol=atol)

    def test_partial_proportional(self):
        # transformers' "proportional" type with partial_rotary_factor 0.5: planes j < 8
        # of the half-split over the whole head rotate with base^(-2j / 32) / factor, the
        # other 8 have frequency 0. gpe.Rope.from_hf_config refuses it (it needs two axes);
        # RotaryEmbedding.from_hf_config holds the second M-RoPE section at position 0.
        # Frequencies as test_frequencies_and_attention_factor (rtol 3e-7); the map
        # against apply_rotary_pos_emb on float64 cos/sin at 1e-12, and against
        # LlamaRotaryEmbedding (which runs this type) with the float32 bound above.
        config = hf_config({"rope_type": "proportional", "rope_theta": 10000.0, "factor": 2.0,
                            "partial_rotary_factor": 0.5})
        inv, m_hf = ROPE_INIT_FUNCTIONS["proportional"](config, "cpu")
        inv = inv.double()
        k = HEAD_DIM // 4
        self.assertTrue(bool((inv[:k] > 0).all()) and bool((inv[k:] == 0).all()))
        with self.assertRaisesRegex(NotImplementedError, "RotaryEmbedding.from_hf_config"):
            gpe.Rope.from_hf_config(config)
        ours = gt.RotaryEmbedding.from_hf_config(config)
        thetas, m = ours.rope.frequencies()
        np.testing.assert_allclose(thetas[:k], inv[:k].numpy(), rtol=3e-7, atol=0)
        self.assertEqual((m, float(m_hf)), (1.0, 1.0))

        rng = np.random.default_rng(4)
        x = torch.tensor(rng.standard_normal((2, 9, 3, HEAD_DIM)))
        pos = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8], [5, 6, 7, 100, 101, 102, 400, 401, 402]])
        freqs = pos.double()[..., None] * torch.cat([torch.tensor(thetas[:k]),
                                                      torch.zeros(HEAD_DIM // 2 - k,
                                                                  dtype=torch.float64)])
        emb = torch.cat([freqs, freqs], dim=-1)
        want, _ = apply_rotary_pos_emb(x.transpose(1, 2), x.transpose(1, 2), emb.cos(),
                                       emb.sin())
        torch.testing.assert_close(ours(x, input_pos=pos), want.transpose(1, 2), rtol=0,
                                   atol=1e-12)
        torch.testing.assert_close(ours(x)[0], ours(x, input_pos=pos[0])[0], rtol=0, atol=0)

        xf = x.float()
        cos, sin = LlamaRotaryEmbedding(config)(xf, pos)
        want, _ = apply_rotary_pos_emb(xf.transpose(1, 2), xf.transpose(1, 2), cos, sin)
        ulp = float(np.spacing(np.float32(401)))
        atol = 2 * float(xf.abs().max()) * (ulp / 2 + 2.0 ** -23 * 402)
        torch.testing.assert_close(ours(xf, input_pos=pos), want.transpose(1, 2), rtol=0,
                                   atol=atol)


if __name__ == "__main__":
    unittest.main()
