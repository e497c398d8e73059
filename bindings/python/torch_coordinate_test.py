"""gpe.torch.coordinate_encode and gpe.torch.CoordinateEncoding: the features equal the
encoder's own (gpe.CoordinateEncoder.encode, float64) exactly, float32 is that rounded
once, the gradient with respect to the points passes torch.autograd.gradcheck for every
encoder kind, bad input is refused by name, and a torch MLP on top of a Fourier-feature
layer fits Lim et al.'s Radial image far better than the same MLP on raw coordinates.
Skips with a message without PyTorch.
"""
import unittest

import sanitizer_preload
from gpe import _ffi

sanitizer_preload.reexec_if_needed(next((str(p) for p in _ffi._candidates() if p.is_file()), None))

import numpy as np  # noqa: E402

import gpe  # noqa: E402

try:
    import torch  # noqa: E402
    import gpe.torch as gt  # noqa: E402
    _SKIP = None
except ImportError as e:
    _SKIP = "PyTorch is not installed (%s); skipped" % e


def encoders():
    """One encoder of each kind, with its input width."""
    return [
        ("gaussian Fourier", gpe.FourierFeatures("gaussian", dim=2, num_frequencies=8, scale=3.0)),
        ("SO(2) Bessel", gpe.So2Bessel(num_terms=6, max_scale=2.0)),
        ("spherical harmonics", gpe.SphericalHarmonics(3)),
    ]


@unittest.skipIf(_SKIP is not None, _SKIP or "")
class TorchCoordinateTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)

    def test_features_equal_the_encoders_own(self):
        for name, enc in encoders():
            d, f = enc.dims
            with self.subTest(encoder=name):
                pts = torch.rand(3, 5, d, dtype=torch.float64) * 1.6 - 0.8
                got = gt.coordinate_encode(enc, pts)
                self.assertEqual(tuple(got.shape), (3, 5, f))
                want = enc.encode(pts.reshape(-1, d).numpy()).reshape(3, 5, f)
                np.testing.assert_array_equal(got.numpy(), want)  # the same call: exact
                # float32: widened exactly, the float64 features rounded once.
                got32 = gt.coordinate_encode(enc, pts.float())
                self.assertEqual(got32.dtype, torch.float32)
                self.assertTrue(torch.equal(got32, gt.coordinate_encode(enc, pts.float().double()).float()))

    def test_module_deepcopies_and_pickles(self):
        # An EMA of a model is copy.deepcopy(model): a module holding an encoder copies
        # (the encoder rebuilt with its own handle) and the copy encodes alike.
        import copy
        import io
        for name, enc in encoders():
            with self.subTest(encoder=name):
                module = gt.CoordinateEncoding(enc)
                pts = torch.rand(4, enc.dims[0], dtype=torch.float64) * 1.6 - 0.8
                want = module(pts)
                buf = io.BytesIO()
                torch.save(module, buf)
                buf.seek(0)
                for c in (copy.deepcopy(module), torch.load(buf, weights_only=False)):
                    self.assertIsNot(c.encoder, module.encoder)
                    self.assertTrue(torch.equal(c(pts), want))

    def test_gradients_pass_gradcheck(self):
        # The library's VJP against central differences in float64 (gradcheck's defaults:
        # eps 1e-6, atol 1e-5, rtol 1e-3; the features are smooth and O(1)).
        for name, enc in encoders():
            d, _ = enc.dims
            with self.subTest(encoder=name):
                pts = (torch.rand(4, d, dtype=torch.float64) * 1.2 - 0.6).requires_grad_()
                self.assertTrue(torch.autograd.gradcheck(
                    lambda p: gt.coordinate_encode(enc, p), (pts,)))

    @unittest.skipUnless(torch.cuda.is_available(), "no CUDA device: the device round trip "
                         "needs one (it ran as CPU-only code before)")
    def test_features_and_gradients_come_back_on_the_points_device(self):
        # A CUDA tensor's features came back on the CPU and its gradient too, which
        # autograd refuses; both now return to the points' device, equal to the CPU's.
        enc = gpe.FourierFeatures("gaussian", dim=2, num_frequencies=8, scale=3.0, seed=1)
        p = torch.rand(5, 2, dtype=torch.float64)
        want = gt.coordinate_encode(enc, p)
        pc = p.cuda().requires_grad_(True)
        got = gt.coordinate_encode(enc, pc)
        self.assertEqual(got.device, pc.device)
        self.assertTrue(torch.equal(got.cpu(), want))
        got.sum().backward()
        self.assertEqual(pc.grad.device, pc.device)

    def test_bad_input_is_refused(self):
        enc = gpe.FourierFeatures("gaussian", dim=2, num_frequencies=4)
        with self.assertRaisesRegex(ValueError, r"\[\.\.\., 2\]"):
            gt.coordinate_encode(enc, torch.zeros(5, 3))
        with self.assertRaisesRegex(TypeError, "float32 or float64"):
            gt.coordinate_encode(enc, torch.zeros(5, 2, dtype=torch.int64))
        with self.assertRaisesRegex(TypeError, "CoordinateEncoder"):
            gt.CoordinateEncoding("fourier")

    def test_mlp_on_fourier_features_fits_an_image(self):
        # Lim et al.'s Radial image, 32 x 32, every pixel for training: a 2-layer ReLU MLP
        # (64 wide, Adam 1e-2, 300 full-batch steps) on Gaussian Fourier features (Tancik
        # et al., 64 frequencies, scale 6) against the same MLP on (x, y). The features let
        # it follow the rings: measured 141 dB (the 1024 training pixels reproduced to
        # float32 rounding) against 10.5 dB on (x, y); the test asks for 5 dB more and
        # 18 dB at least, far from either run's variation.
        n = 32
        img = torch.tensor(gpe.synthetic_image("radial", n), dtype=torch.float32).reshape(-1, 1)
        xy = torch.tensor(gpe.grid_coordinates(n), dtype=torch.float32)
        enc = gt.CoordinateEncoding(gpe.FourierFeatures("gaussian", dim=2, num_frequencies=64,
                                                        scale=6.0, seed=1))
        self.assertEqual((enc.in_features, enc.out_features), enc.encoder.dims)

        def fit(first):
            torch.manual_seed(0)
            width = enc.out_features if first is not None else 2
            mlp = torch.nn.Sequential(torch.nn.Linear(width, 64), torch.nn.ReLU(),
                                      torch.nn.Linear(64, 1))
            opt = torch.optim.Adam(mlp.parameters(), lr=1e-2)
            feats = first(xy) if first is not None else xy
            for _ in range(300):
                opt.zero_grad()
                loss = torch.mean((mlp(feats) - img) ** 2)
                loss.backward()
                opt.step()
            mse = torch.mean((mlp(feats) - img) ** 2).item()
            return 10 * np.log10(1.0 / mse)

        with_features, raw = fit(enc), fit(None)
        self.assertGreater(with_features, raw + 5.0, (with_features, raw))
        self.assertGreater(with_features, 18.0)

    def test_learned_coordinates_train_through_the_encoder(self):
        # Points produced by a layer get gradients through the encoding: one Adam step
        # moves the layer's weights (a zero gradient would leave them).
        enc = gt.CoordinateEncoding(gpe.FourierFeatures("gaussian", dim=2, num_frequencies=8))
        lin = torch.nn.Linear(3, 2)
        before = lin.weight.detach().clone()
        opt = torch.optim.SGD(lin.parameters(), lr=0.1)
        enc(lin(torch.randn(10, 3))).pow(2).sum().backward()
        self.assertGreater(lin.weight.grad.abs().max().item(), 0.0)
        opt.step()
        self.assertFalse(torch.equal(before, lin.weight.detach()))


if __name__ == "__main__":
    unittest.main()
