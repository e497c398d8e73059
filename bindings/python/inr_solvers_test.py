"""Tests of gpe.inr_solvers against NumPy implementations of the same formulas (run by
`bazel test`): Adam (Kingma & Ba, Algorithm 1) on linear least squares and on a ReLU MLP,
Lim et al.'s analytic data (appendix D.1), the splits, MSE / PSNR, and image files."""

import os
import tempfile
import unittest

import sanitizer_preload
from gpe import _ffi

sanitizer_preload.reexec_if_needed(next((str(p) for p in _ffi._candidates() if p.is_file()), None))

import numpy as np  # noqa: E402

import gpe  # noqa: E402


def adam_reference(grad_fn, p0, steps, lr_schedule, b1=0.9, b2=0.999, eps=1e-8):
    """Adam from p0 in float64; grad_fn(p) -> (loss, grad). Returns (p, losses)."""
    p = p0.astype(np.float64).copy()
    m, v = np.zeros_like(p), np.zeros_like(p)
    losses = []
    for t in range(1, steps + 1):
        loss, g = grad_fn(p)
        losses.append(loss)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr_schedule(t) * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    return p, np.array(losses)


def exp_decay(lr, final, steps):
    """linear_gd.h: lr_t = lr (final / lr)^((t - 1) / (steps - 1))."""
    return lambda t: lr * (final / lr) ** ((t - 1) / (steps - 1)) if steps > 1 else lr


def mlp_layers(params, dims):
    """Views (W_l [fan_in, fan_out], b_l) of the flat layout W_0, b_0, W_1, b_1, ..."""
    out, off = [], 0
    for fan_in, fan_out in zip(dims[:-1], dims[1:]):
        w = params[off:off + fan_in * fan_out].reshape(fan_in, fan_out)
        off += fan_in * fan_out
        out.append((w, params[off:off + fan_out]))
        off += fan_out
    assert off == params.size
    return out


def mlp_loss_and_grad(params, dims, x, y):
    """MSE of the ReLU MLP and its gradient in the flat layout (backprop written out)."""
    layers = mlp_layers(params, dims)
    hs = [x]
    for l, (w, b) in enumerate(layers):
        z = hs[-1] @ w + b
        hs.append(np.maximum(z, 0) if l + 1 < len(layers) else z)
    r = hs[-1] - y
    loss = np.mean(r ** 2)
    g = 2 * r / r.size
    grads = []
    for l in range(len(layers) - 1, -1, -1):
        w, _ = layers[l]
        grads.append((hs[l].T @ g, g.sum(axis=0)))
        g = (g @ w.T) * (hs[l] > 0)  # ReLU' (0 at 0); unused below the first layer
    flat = np.concatenate([np.concatenate([gw.ravel(), gb]) for gw, gb in reversed(grads)])
    return loss, flat


class MlpTest(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng(0)
        self.x = rng.uniform(-1, 1, (50, 3))
        self.y = np.stack([np.sin(3 * self.x[:, 0]) * self.x[:, 1], self.x[:, 2] ** 2], axis=1)
        self.dims = [3, 12, 12, 2]

    def test_initialisation_is_pytorch_default_layout(self):
        p = gpe.mlp_init(3, 2, hidden_width=12, num_hidden_layers=2, seed=4, dtype=np.float64)
        self.assertEqual(p.size, gpe.mlp_num_parameters(3, 2, 12, 2))
        self.assertEqual(p.size, 4 * 12 + 13 * 12 + 13 * 2)
        for (w, b), fan_in in zip(mlp_layers(p, self.dims), self.dims[:-1]):
            bound = 1 / np.sqrt(fan_in)
            self.assertLessEqual(np.abs(w).max(), bound)
            self.assertLessEqual(np.abs(b).max(), bound)
            self.assertGreater(np.abs(w).max(), 0.5 * bound)  # spread over the interval
        # Seeded: the same seed, the same network; float32 is the rounded float64 draw.
        np.testing.assert_array_equal(p, gpe.mlp_init(3, 2, 12, 2, seed=4, dtype=np.float64))
        np.testing.assert_array_equal(gpe.mlp_init(3, 2, 12, 2, seed=4), p.astype(np.float32))
        self.assertFalse(np.array_equal(p, gpe.mlp_init(3, 2, 12, 2, seed=5, dtype=np.float64)))

    def test_float64_fit_follows_numpy_adam(self):
        steps, lr = 30, 1e-2
        p0 = gpe.mlp_init(3, 2, 12, 2, seed=1, dtype=np.float64)
        reports = []
        fit = gpe.mlp_fit(self.x, self.y, 12, 2, steps=steps, learning_rate=lr,
                          initial_parameters=p0, progress=lambda s, l: reports.append((s, l)),
                          report_every=10)
        want_p, want_loss = adam_reference(
            lambda p: mlp_loss_and_grad(p, self.dims, self.x, self.y), p0, steps, lambda t: lr)
        # Both sides are float64 with different summation orders (OpenBLAS dgemm vs NumPy):
        # ~1e-16 relative per product. Adam divides by sqrt(v), which keeps relative errors
        # of the order they enter, and 30 steps of a 200-parameter network compound them
        # to well below 1e-11 here; a wrong transposition, bias or ReLU derivative moves
        # the losses at the 1e-3 level from the first step on.
        np.testing.assert_allclose(fit.train_loss, want_loss, rtol=1e-11, atol=0)
        np.testing.assert_allclose(fit.weights, want_p, rtol=0, atol=1e-11)
        want_final, _ = mlp_loss_and_grad(want_p, self.dims, self.x, self.y)
        self.assertAlmostEqual(fit.final_loss, want_final, delta=1e-11 * want_final)
        self.assertEqual([s for s, _ in reports], [10, 20, 30])
        self.assertEqual(reports[-1][1], fit.train_loss[-1])
        # Predictions: the forward pass written out.
        h = self.x
        layers = mlp_layers(fit.weights, self.dims)
        for l, (w, b) in enumerate(layers):
            h = h @ w + b
            if l + 1 < len(layers):
                h = np.maximum(h, 0)
        np.testing.assert_allclose(gpe.mlp_predict(fit.weights, self.x, 2, 12, 2), h,
                                   rtol=0, atol=1e-13)

    def test_float32_fit_tracks_the_float64_reference(self):
        steps, lr = 10, 1e-2
        p0 = gpe.mlp_init(3, 2, 12, 2, seed=2)
        fit = gpe.mlp_fit(self.x.astype(np.float32), self.y.astype(np.float32), 12, 2,
                          steps=steps, learning_rate=lr, initial_parameters=p0)
        self.assertEqual(fit.weights.dtype, np.float32)
        _, want_loss = adam_reference(
            lambda p: mlp_loss_and_grad(p, self.dims, self.x.astype(np.float32),
                                        self.y.astype(np.float32)),
            p0.astype(np.float64), steps, lambda t: lr)
        # float32 products (eps 6e-8) over sums of ~50 terms: ~1e-6 relative in each
        # gradient; Adam's steps are normalised, so the trajectory stays within ~1e-5
        # relative over 10 steps. 1e-4 leaves margin and still catches any formula error.
        np.testing.assert_allclose(fit.train_loss, want_loss, rtol=1e-4)

    def test_mlp_class_views_and_continued_training(self):
        net = gpe.Mlp(3, 2, hidden_width=12, num_hidden_layers=2, seed=3, dtype=np.float64)
        w1 = net.weight(1)
        self.assertEqual(w1.shape, (12, 12))
        self.assertEqual(net.bias(2).shape, (2,))
        np.testing.assert_array_equal(net.weight(0), mlp_layers(net.parameters, self.dims)[0][0])
        loss, final = net.fit(self.x, self.y, steps=200, learning_rate=1e-2)
        self.assertLess(final, 0.2 * loss[0])  # it learns the smooth targets
        # Continuing is a fresh Adam from the trained parameters.
        p = net.parameters.copy()
        loss2, _ = net.fit(self.x, self.y, steps=5, learning_rate=1e-3)
        self.assertAlmostEqual(loss2[0], final, delta=1e-12 * final)
        _, want = adam_reference(lambda q: mlp_loss_and_grad(q, self.dims, self.x, self.y), p, 5,
                                 lambda t: 1e-3)
        np.testing.assert_allclose(loss2, want, rtol=1e-11)  # as test_float64_fit_...
        np.testing.assert_allclose(net.predict(self.x).shape, (50, 2))

    def test_validation_curve_is_the_held_out_mse(self):
        rng = np.random.default_rng(5)
        vx = rng.uniform(-1, 1, (20, 3))  # held out: not among the training rows
        vy = np.stack([np.sin(3 * vx[:, 0]) * vx[:, 1], vx[:, 2] ** 2], axis=1)
        kw = dict(steps=25, learning_rate=1e-2, seed=6, report_every=10)
        self.assertEqual(gpe.mlp_num_evaluations(25, 10), 3)
        self.assertEqual(gpe.mlp_num_evaluations(20, 10), 2)
        self.assertEqual(gpe.mlp_num_evaluations(0, 10), 1)
        fit = gpe.mlp_fit(self.x, self.y, 12, 2, validation=(vx, vy), **kw)
        self.assertIsInstance(fit, gpe.ValidatedFit)
        np.testing.assert_array_equal(fit.validation_steps, [10, 20, 25])
        # The validation set leaves the training's bits alone.
        plain = gpe.mlp_fit(self.x, self.y, 12, 2, **kw)
        np.testing.assert_array_equal(fit.weights, plain.weights)
        np.testing.assert_array_equal(fit.train_loss, plain.train_loss)

        def held_out_mse(p):
            h = vx
            layers = mlp_layers(p, self.dims)
            for l, (w, b) in enumerate(layers):
                h = h @ w + b
                if l + 1 < len(layers):
                    h = np.maximum(h, 0)
            return np.mean((h - vy) ** 2)

        # Each entry is the NumPy forward pass's MSE on the held-out rows of the network
        # after that many updates (a refit of exactly that many steps: the same bits, as
        # the last evaluation of the shorter run shows). float64 both sides with different
        # summation orders (OpenBLAS vs NumPy), ~1e-16 relative per product through three
        # layers: 1e-12 relative is ample, while the training-set MSE is far away.
        for k, step in enumerate(fit.validation_steps):
            short = gpe.mlp_fit(self.x, self.y, 12, 2, validation=(vx, vy),
                                **dict(kw, steps=int(step), report_every=0))
            self.assertEqual(short.validation_loss[-1], fit.validation_loss[k])
            want = held_out_mse(short.weights)
            self.assertAlmostEqual(fit.validation_loss[k], want, delta=1e-12 * want)
            self.assertGreater(abs(short.final_loss - want), 1e-6 * want)
        self.assertLess(fit.validation_loss[-1], fit.validation_loss[0])
        # The Mlp class: four results with a validation set; float32 also works.
        net = gpe.Mlp(3, 2, 12, 2, seed=6, dtype=np.float32)
        loss, final, vs, vl = net.fit(self.x, self.y, steps=5, validation=(vx, vy),
                                      report_every=2)
        np.testing.assert_array_equal(vs, [2, 4, 5])
        self.assertEqual(vl.dtype, np.float64)
        self.assertTrue(np.all(np.isfinite(vl)))

    def test_validation_progress_reports_each_evaluation(self):
        rng = np.random.default_rng(8)
        vx = rng.uniform(-1, 1, (15, 3))
        vy = np.stack([np.cos(2 * vx[:, 0]), vx[:, 1] * vx[:, 2]], axis=1)
        kw = dict(steps=23, learning_rate=1e-2, seed=2, report_every=5, validation=(vx, vy))
        events = []
        fit = gpe.mlp_fit(self.x, self.y, 8, 1,
                          progress=lambda s, l: events.append(("train", s, l)),
                          validation_progress=lambda s, l, v: events.append(("val", s, l, v)),
                          **kw)
        # K = 5 evaluations (after 5, 10, 15, 20, 23 updates), each reported by both
        # callbacks, progress first, with the same step and train loss; the validation
        # loss is the curve's entry exactly (the same double the library stores).
        k = gpe.mlp_num_evaluations(23, 5)
        self.assertEqual(k, 5)
        self.assertEqual(len(events), 2 * k)
        for i in range(k):
            train, val = events[2 * i], events[2 * i + 1]
            self.assertEqual(train[0], "train")
            self.assertEqual(val[0], "val")
            self.assertEqual(val[1], fit.validation_steps[i])
            self.assertEqual(val[1:3], train[1:3])
            self.assertEqual(val[3], fit.validation_loss[i])
            self.assertEqual(val[2], fit.train_loss[val[1] - 1])
        # The callback leaves the training's bits alone.
        plain = gpe.mlp_fit(self.x, self.y, 8, 1, **kw)
        np.testing.assert_array_equal(fit.weights, plain.weights)
        np.testing.assert_array_equal(fit.train_loss, plain.train_loss)
        np.testing.assert_array_equal(fit.validation_loss, plain.validation_loss)
        # Through the Mlp class too.
        net = gpe.Mlp(3, 2, 8, 1, seed=2, dtype=np.float64)
        seen = []
        _, _, vs, vl = net.fit(self.x, self.y, steps=23, learning_rate=1e-2, report_every=5,
                               validation=(vx, vy),
                               validation_progress=lambda s, l, v: seen.append((s, v)))
        self.assertEqual(seen, list(zip(vs.tolist(), vl.tolist())))

    def test_callback_exceptions_are_raised_after_the_fit(self):
        vx, vy = self.x[:10], self.y[:10]
        calls = []

        def fail(step, train_loss, validation_loss):
            calls.append(step)
            raise RuntimeError("stop at %d" % step)

        # The first exception is raised once the fit returns; no callback runs after it.
        with self.assertRaisesRegex(RuntimeError, "stop at 2"):
            gpe.mlp_fit(self.x, self.y, 4, 1, steps=6, report_every=2, validation=(vx, vy),
                        validation_progress=fail)
        self.assertEqual(calls, [2])
        with self.assertRaisesRegex(ZeroDivisionError, "division"):
            gpe.mlp_fit(self.x, self.y, 4, 1, steps=4, report_every=2,
                        progress=lambda s, l: 1 / 0)
        with self.assertRaisesRegex(KeyError, "dense"):
            gpe.fit_dense_adam(self.x, self.y, steps=3, report_every=1,
                               progress=lambda s, l: {}["dense"])
        # A validation progress needs a validation set.
        with self.assertRaisesRegex(ValueError, "validation_progress needs validation"):
            gpe.mlp_fit(self.x, self.y, 4, 1, steps=2, validation_progress=fail)

    def test_validation_bad_input_raises(self):
        vx, vy = self.x[:10], self.y[:10]
        with self.assertRaisesRegex(gpe.GpeError, "columns"):
            gpe.mlp_fit(self.x, self.y, 4, 1, steps=2, validation=(vx[:, :2], vy))
        with self.assertRaisesRegex(gpe.GpeError, "rows"):
            gpe.mlp_fit(self.x, self.y, 4, 1, steps=2, validation=(vx, vy[:-1]))
        with self.assertRaisesRegex(gpe.GpeError, "non-finite"):
            bad = vy.copy()
            bad[3, 1] = np.inf
            gpe.mlp_fit(self.x, self.y, 4, 1, steps=2, validation=(vx, bad))
        with self.assertRaisesRegex(gpe.GpeError, "empty"):
            gpe.mlp_fit(self.x, self.y, 4, 1, steps=2, validation=(vx[:0], vy[:0]))
        with self.assertRaises(ValueError):
            gpe.mlp_fit(self.x, self.y, 4, 1, steps=2, validation=(vx,))
        with self.assertRaisesRegex(gpe.GpeError, "report_every"):
            gpe.mlp_num_evaluations(3, -1)

    def test_bad_input_raises(self):
        with self.assertRaisesRegex(gpe.GpeError, "non-finite"):
            x = self.x.copy()
            x[0, 0] = np.nan
            gpe.mlp_fit(x, self.y, 4, 1, steps=2)
        with self.assertRaisesRegex(gpe.GpeError, "rows"):
            gpe.mlp_fit(self.x, self.y[:-1], 4, 1, steps=2)
        with self.assertRaisesRegex(gpe.GpeError, "diverged"):
            gpe.mlp_fit(self.x, self.y * 1e200, 4, 1, steps=2)
        with self.assertRaises(TypeError):
            gpe.mlp_init(3, 2, dtype=np.int64)


class LinearAdamTest(unittest.TestCase):
    def test_dense_follows_numpy_adam_and_reaches_least_squares(self):
        rng = np.random.default_rng(1)
        phi = rng.standard_normal((40, 6))
        y = rng.standard_normal((40, 2))
        steps, lr, final = 400, 0.05, 1e-4

        def loss_grad(w_flat):
            w = w_flat.reshape(6, 2)
            r = phi @ w - y
            return np.mean(r ** 2), (2 / r.size * phi.T @ r).ravel()

        fit = gpe.fit_dense_adam(phi, y, steps=steps, learning_rate=lr, final_learning_rate=final)
        want_w, want_loss = adam_reference(loss_grad, np.zeros(12), steps,
                                           exp_decay(lr, final, steps))
        # float64 on both sides with different summation orders; the problem is
        # well conditioned (cond(Phi) ~ 2), so the trajectories agree to ~1e-14: 1e-11.
        np.testing.assert_allclose(fit.train_loss, want_loss, rtol=1e-11)
        np.testing.assert_allclose(fit.weights, want_w.reshape(6, 2), rtol=0, atol=1e-11)
        # And the decayed schedule has settled on the least-squares solution: Adam's last
        # steps are ~final = 1e-4 in size, so 1e-3 bounds the distance.
        lstsq = np.linalg.lstsq(phi, y, rcond=None)[0]
        np.testing.assert_allclose(fit.weights, lstsq, rtol=0, atol=1e-3)
        # A 1-D target gives a 1-D weight vector.
        w1 = gpe.fit_dense_adam(phi, y[:, 0], steps=10).weights
        self.assertEqual(w1.shape, (6,))

    def test_separable_follows_numpy_adam(self):
        rng = np.random.default_rng(2)
        py, px = rng.standard_normal((12, 4)), rng.standard_normal((9, 3))
        s = rng.standard_normal((12, 9))
        steps, lr = 100, 0.02
        calls = []

        def loss_grad(w_flat):
            w = w_flat.reshape(4, 3)
            r = py @ w @ px.T - s  # Zheng et al. eq. 10
            return np.mean(r ** 2), (2 / r.size * py.T @ r @ px).ravel()

        fit = gpe.fit_separable_adam_2d(py, px.T.copy().T, s, steps=steps, learning_rate=lr,
                                        progress=lambda st, l: calls.append(st), report_every=25)
        want_w, want_loss = adam_reference(loss_grad, np.zeros(12), steps, lambda t: lr)
        np.testing.assert_allclose(fit.train_loss, want_loss, rtol=1e-11)  # as above
        np.testing.assert_allclose(fit.weights, want_w.reshape(4, 3), rtol=0, atol=1e-11)
        self.assertEqual(calls, [25, 50, 75, 100])

    def test_bad_input_raises(self):
        with self.assertRaisesRegex(gpe.GpeError, "finite"):
            gpe.fit_dense_adam(np.full((3, 2), np.inf), np.ones((3, 1)), steps=2)
        with self.assertRaisesRegex(gpe.GpeError, "shape"):
            gpe.fit_separable_adam_2d(np.ones((4, 2)), np.ones((3, 2)), np.ones((3, 4)), steps=2)
        with self.assertRaisesRegex(gpe.GpeError, "steps"):
            gpe.fit_dense_adam(np.ones((3, 2)), np.ones((3, 1)), steps=0)


class DataTest(unittest.TestCase):
    def test_synthetic_data_match_the_appendix_formulas(self):
        n = 16
        axis = -1 + (2 * np.arange(n) + 1) / n
        x, y = np.meshgrid(axis, axis)  # rows = y
        r, theta = np.hypot(x, y), np.arctan2(y, x)
        radial = np.sin(15 * np.sqrt(r))
        spiral = np.sin(30 * np.sqrt(0.1 * r) + theta)
        # The same double expressions, possibly a different libm rounding: a few ulps.
        tol = dict(rtol=0, atol=1e-14)
        np.testing.assert_allclose(gpe.synthetic_image("radial", n), np.abs(radial), **tol)
        np.testing.assert_allclose(gpe.synthetic_image("spiral", n, signed=True), spiral, **tol)
        field = gpe.synthetic_vector_field("spiral", n)
        np.testing.assert_allclose(field[..., 0], spiral * np.cos(theta), **tol)
        np.testing.assert_allclose(field[..., 1], spiral * np.sin(theta), **tol)
        grid = gpe.grid_coordinates(n)
        np.testing.assert_array_equal(grid[:, 0], x.ravel())
        np.testing.assert_array_equal(grid[:, 1], y.ravel())
        with self.assertRaises(ValueError):
            gpe.synthetic_image("circle", 4)

    def test_splits(self):
        train, val, test = gpe.random_split(1000, 0.05, 0.4, seed=3)
        self.assertEqual((train.size, val.size, test.size), (50, 400, 550))
        allidx = np.concatenate([train, val, test])
        np.testing.assert_array_equal(np.sort(allidx), np.arange(1000))  # a partition
        for part in (train, val, test):
            self.assertTrue(np.all(np.diff(part) > 0))
        again = gpe.random_split(1000, 0.05, 0.4, seed=3)
        np.testing.assert_array_equal(again[0], train)
        self.assertFalse(np.array_equal(gpe.random_split(1000, 0.05, 0.4, seed=4)[0], train))
        tr, te = gpe.regular_grid_split(5, 6)
        idx = np.arange(30).reshape(5, 6)
        np.testing.assert_array_equal(tr, idx[::2, ::2].ravel())
        np.testing.assert_array_equal(te, np.setdiff1d(idx, idx[::2, ::2]))
        with self.assertRaisesRegex(gpe.GpeError, "fractions"):
            gpe.random_split(10, 0.7, 0.4)

    def test_mse_and_psnr(self):
        rng = np.random.default_rng(4)
        a, b = rng.uniform(size=(6, 5, 3)), rng.uniform(size=(6, 5, 3))
        mse = np.mean((a - b) ** 2)
        self.assertAlmostEqual(gpe.mse(a, b), mse, delta=1e-15)  # one sum of 90 squares
        self.assertAlmostEqual(gpe.psnr(a, b, 2.0), 10 * np.log10(4 / mse), delta=1e-12)
        self.assertEqual(gpe.psnr(a, a), np.inf)
        self.assertAlmostEqual(gpe.mse(a[:, ::2, 0], b[:, ::2, 0]),
                               np.mean((a[:, ::2, 0] - b[:, ::2, 0]) ** 2), delta=1e-15)
        with self.assertRaisesRegex(gpe.GpeError, "shape"):
            gpe.mse(a, b[:, :, :2])
        with self.assertRaisesRegex(gpe.GpeError, "finite"):
            gpe.psnr(a, np.full_like(a, np.nan))


class ImageTest(unittest.TestCase):
    def test_png_round_trip_is_exact_at_8_bits(self):
        rng = np.random.default_rng(5)
        levels = rng.integers(0, 256, size=(7, 9, 3))
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "rgb.png")
            gpe.image_write_png(path, levels / 255.0)
            back = gpe.image_read(path)
            self.assertEqual(back.shape, (7, 9, 3))
            np.testing.assert_array_equal(np.rint(back * 255), levels)  # exact k / 255
            gray = gpe.image_read(path, grayscale=True, dtype=np.float32)
            self.assertEqual((gray.shape, gray.dtype), ((7, 9), np.float32))
            # Luma is a weighted mean of the channels (libpng weighs in linear light), so
            # it lies between the darkest and brightest channel, within a level.
            self.assertTrue(np.all(gray * 255 >= levels.min(axis=2) - 1))
            self.assertTrue(np.all(gray * 255 <= levels.max(axis=2) + 1))
            # Equal channels keep their value (to libpng's 8-bit rounding).
            gpe.image_write_png(path, np.repeat(levels[..., :1], 3, axis=2) / 255.0)
            np.testing.assert_allclose(gpe.image_read(path, grayscale=True) * 255,
                                       levels[..., 0], rtol=0, atol=1.0)
            # lo / hi mapping and a 2-D input; values outside clamp.
            ramp = np.linspace(-2.0, 2.0, 12).reshape(3, 4)
            gpe.image_write_png(path, ramp, lo=-1.0, hi=1.0)
            back = gpe.image_read(path, grayscale=True)
            np.testing.assert_array_equal(np.rint(back * 255),
                                          np.rint(255 * np.clip((ramp + 1) / 2, 0, 1)))
            jpg = os.path.join(d, "gray.jpg")
            gpe.image_write_jpeg(jpg, np.full((8, 8), 0.5), quality=90)
            # A flat block survives JPEG within one level of round(127.5) (either way).
            back = gpe.image_read(jpg)
            self.assertEqual(back.shape, (8, 8, 3))  # gray files expand to RGB
            np.testing.assert_allclose(back * 255, 128, atol=1.0)

    def test_bad_files_and_paths_raise(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaisesRegex(gpe.GpeError, "cannot open"):
                gpe.image_read(os.path.join(d, "missing.png"))
            bad = os.path.join(d, "bad.png")
            with open(bad, "wb") as f:
                f.write(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)
            with self.assertRaisesRegex(gpe.GpeError, "PNG"):
                gpe.image_read(bad)
            with self.assertRaisesRegex(gpe.GpeError, "finite"):
                gpe.image_write_png(os.path.join(d, "nan.png"), np.full((2, 2), np.nan))
        with self.assertRaisesRegex(gpe.GpeError, "cannot"):
            gpe.image_write_png("/nonexistent-directory/out.png", np.zeros((2, 2)))


if __name__ == "__main__":
    unittest.main()
