"""gpe.torch.register_hf_attention: a tiny randomly initialised Llama-style model
(transformers' LlamaForCausalLM: GQA 4/2 heads, 2 layers, no weights downloaded) run with
attn_implementation="gpe" against the same weights with "sdpa": logits, the loss's
gradients in every parameter, with left padding (a boolean mask) and without (the causal
rule), and greedy generation with the KV cache (one query against the cache per step).

transformers and PyTorch are optional: without them the tests skip with a message.
"""
import unittest

import sanitizer_preload
from gpe import _ffi

sanitizer_preload.reexec_if_needed(next((str(p) for p in _ffi._candidates() if p.is_file()), None))

try:
    import torch  # noqa: E402
    import gpe.torch as gt  # noqa: E402
    import transformers  # noqa: E402
    from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
    transformers.logging.set_verbosity_error()
    _SKIP = None
except ImportError as e:
    _SKIP = ("PyTorch or transformers is not installed (%s; tools/setup_transformers.sh "
             "installs transformers); skipped" % e)


@unittest.skipIf(_SKIP is not None, _SKIP or "")
class HfAttentionTest(unittest.TestCase):
    # float32 on O(1) logits after 2 layers: both implementations sum the same products
    # in different orders (~1e-6 relative per attention); 1e-4 absolute on logits and
    # 1e-3 of each gradient's scale leave room while a wrong mask, scale or GQA grouping
    # moves them by >= 1e-2.
    LOGIT_TOL, GRAD_TOL = 1e-4, 1e-3

    def models(self):
        torch.manual_seed(0)
        # One config object per model: a model keeps (and sets) its config's attention
        # implementation, so a shared one would run both models on the last one set.
        def config():
            return LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=128,
                               num_hidden_layers=2, num_attention_heads=4,
                               num_key_value_heads=2, max_position_embeddings=128,
                               rope_theta=10000.0)
        name = gt.register_hf_attention()
        ref = LlamaForCausalLM._from_config(config(), attn_implementation="sdpa").eval()
        ours = LlamaForCausalLM._from_config(config(), attn_implementation=name).eval()
        ours.load_state_dict(ref.state_dict())
        for layer_ref, layer_ours in zip(ref.model.layers, ours.model.layers):
            self.assertEqual(layer_ref.self_attn.config._attn_implementation, "sdpa")
            self.assertEqual(layer_ours.self_attn.config._attn_implementation, name)
        return ref, ours

    def check(self, ref, ours, ids, mask):
        out_ref = ref(input_ids=ids, attention_mask=mask, labels=ids)
        out_ours = ours(input_ids=ids, attention_mask=mask, labels=ids)
        keep = mask.bool() if mask is not None else torch.ones_like(ids, dtype=torch.bool)
        diff = (out_ref.logits - out_ours.logits)[keep].abs().max().item()
        self.assertLess(diff, self.LOGIT_TOL)
        out_ref.loss.backward()
        out_ours.loss.backward()
        for (name, a), (_, b) in zip(ref.named_parameters(), ours.named_parameters()):
            scale = max(a.grad.abs().max().item(), 1e-6)
            self.assertLess((a.grad - b.grad).abs().max().item(), self.GRAD_TOL * scale, name)

    def test_causal_without_mask(self):
        ref, ours = self.models()
        ids = torch.randint(0, 97, (2, 12))
        self.check(ref, ours, ids, None)

    def test_left_padding_mask(self):
        ref, ours = self.models()
        ids = torch.randint(0, 97, (2, 12))
        mask = torch.ones(2, 12, dtype=torch.long)
        mask[1, :4] = 0  # the second sequence is left-padded by 4 tokens
        self.check(ref, ours, ids, mask)

    def test_greedy_generation_with_cache(self):
        ref, ours = self.models()
        ids = torch.randint(0, 97, (1, 7))
        with torch.no_grad():
            a = ref.generate(ids, max_new_tokens=6, do_sample=False)
            b = ours.generate(ids, max_new_tokens=6, do_sample=False)
        self.assertTrue(torch.equal(a, b), (a, b))

    def test_dropout_while_training_is_refused(self):
        ref, ours = self.models()
        ours.config.attention_dropout = 0.1
        for layer in ours.model.layers:
            layer.self_attn.attention_dropout = 0.1
        ours.train()
        with self.assertRaisesRegex(ValueError, "no dropout"):
            ours(input_ids=torch.randint(0, 97, (1, 5)))


if __name__ == "__main__":
    unittest.main()
