#include "inr/mlp.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "encodings/coordinate/fourier_features.h"
#include "gtest/gtest.h"
#include "inr/data.h"

namespace gpe {
namespace inr {
namespace {

using MatD = RowMatrix<double>;
using MatF = RowMatrix<float>;

MatD RandomMatrix(int64_t rows, int64_t cols, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  MatD m(rows, cols);
  for (int64_t i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

// Independent reference forward: plain loops over the published layer formula
// h_{l+1}[j] = relu(sum_i h_l[i] W_l[i][j] + b_l[j]), reading the flat parameter layout.
MatD ReferenceForward(const MlpD& mlp, const MatD& x) {
  const std::vector<double> p(mlp.parameters().data(),
                              mlp.parameters().data() + mlp.num_parameters());
  MatD h = x;
  int64_t offset = 0;
  for (int64_t l = 0; l < mlp.num_layers(); ++l) {
    const int64_t in = mlp.fan_in(l), out = mlp.fan_out(l);
    MatD z(h.rows(), out);
    for (int64_t n = 0; n < h.rows(); ++n) {
      for (int64_t j = 0; j < out; ++j) {
        double s = p[offset + in * out + j];
        for (int64_t i = 0; i < in; ++i) s += h(n, i) * p[offset + i * out + j];
        z(n, j) = (l + 1 < mlp.num_layers()) ? std::max(s, 0.0) : s;
      }
    }
    offset += (in + 1) * out;
    h = z;
  }
  return h;
}

TEST(Mlp, CreateShapesAndPyTorchInitBounds) {
  const MlpShape shape{5, 7, 2, 3};
  absl::StatusOr<MlpD> mlp = MlpD::Create(shape, 11);
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  EXPECT_EQ(mlp->num_layers(), 3);
  EXPECT_EQ(mlp->num_parameters(), (5 + 1) * 7 + (7 + 1) * 7 + (7 + 1) * 3);
  for (int64_t l = 0; l < mlp->num_layers(); ++l) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(mlp->fan_in(l)));
    EXPECT_LE(mlp->weight(l).cwiseAbs().maxCoeff(), bound);
    EXPECT_LE(mlp->bias(l).cwiseAbs().maxCoeff(), bound);
    // Uniform on [-bound, bound]: with >= 21 draws, the largest |w| falls below bound / 4
    // with probability (1/4)^21 < 1e-12, so this detects a wrong (too small) scale.
    EXPECT_GT(mlp->weight(l).cwiseAbs().maxCoeff(), bound / 4);
  }
  // Same seed, same network; another seed, another network.
  absl::StatusOr<MlpD> again = MlpD::Create(shape, 11);
  absl::StatusOr<MlpD> other = MlpD::Create(shape, 12);
  ASSERT_TRUE(again.ok() && other.ok());
  EXPECT_EQ(mlp->parameters(), again->parameters());
  EXPECT_NE(mlp->parameters(), other->parameters());
}

TEST(Mlp, ForwardMatchesReferenceLoops) {
  absl::StatusOr<MlpD> mlp = MlpD::Create({4, 9, 3, 2}, 3);
  ASSERT_TRUE(mlp.ok());
  const MatD x = RandomMatrix(13, 4, 5);
  absl::StatusOr<MatD> y = mlp->Forward(x);
  ASSERT_TRUE(y.ok()) << y.status();
  // Double sums of <= 10 terms of size O(1): rounding ~1e-15; 1e-12 leaves room.
  EXPECT_LT((*y - ReferenceForward(*mlp, x)).cwiseAbs().maxCoeff(), 1e-12);

  // The float network with the same (rounded) parameters agrees to float precision:
  // relative rounding ~6e-8 per operation over ~40 operations, outputs O(1): 1e-5.
  absl::StatusOr<Mlp> mlp_f = Mlp::Create({4, 9, 3, 2}, 3);
  ASSERT_TRUE(mlp_f.ok());
  MlpD rounded = *mlp;
  rounded.mutable_parameters() = mlp_f->parameters().cast<double>();
  absl::StatusOr<MatF> y_f = mlp_f->Forward(x.cast<float>());
  ASSERT_TRUE(y_f.ok());
  EXPECT_LT((y_f->cast<double>() - ReferenceForward(rounded, x.cast<float>().cast<double>()))
                .cwiseAbs()
                .maxCoeff(),
            1e-5);
}

// L = sum(R .* MLP(x)) for a fixed random R, so dL/dY = R.
double ProbeLoss(const MlpD& mlp, const MatD& x, const MatD& r) {
  return mlp.Forward(x)->cwiseProduct(r).sum();
}

TEST(Mlp, BackwardMatchesCentralFiniteDifferencesInDouble) {
  for (const MlpShape shape : {MlpShape{3, 6, 2, 2}, MlpShape{2, 5, 0, 3}, MlpShape{4, 8, 3, 1}}) {
    absl::StatusOr<MlpD> mlp = MlpD::Create(shape, 7);
    ASSERT_TRUE(mlp.ok());
    const MatD x = RandomMatrix(6, shape.input_dim, 8);
    const MatD r = RandomMatrix(6, shape.output_dim, 9);
    MlpCache<double> cache;
    ASSERT_TRUE(mlp->Forward(x, &cache).ok());
    // Central differences with step h are exact up to O(h^2) only where no ReLU input
    // crosses 0 within the step; every hidden pre-activation is at least 1e-4 from 0
    // here (checked, so this test cannot pass by luck), far more than the h = 1e-6 step
    // can move it (|dZ| <= h * sum|W|*... < 1e-4).
    for (int64_t l = 1; l < mlp->num_layers(); ++l) {
      // inputs[l] = relu(Z_{l-1}); zeros there hide Z <= 0, so check Z itself.
      MatD z = cache.inputs[l - 1] * mlp->weight(l - 1);
      z.rowwise() += mlp->bias(l - 1).row(0);
      ASSERT_GT(z.cwiseAbs().minCoeff(), 1e-4) << "a pre-activation sits on the ReLU kink";
    }
    Vector<double> grad_params;
    MatD grad_x;
    ASSERT_TRUE(mlp->Backward(cache, r, &grad_params, &grad_x).ok());
    ASSERT_EQ(grad_params.size(), mlp->num_parameters());

    // Truncation O(h^2 |L'''|) ~ 1e-12 plus cancellation eps |L| / h ~ 1e-16 * 10 / 1e-6
    // = 1e-9: 1e-7 absolute on O(1) gradients is safe, and a wrong term is O(0.1).
    const double h = 1e-6;
    for (int64_t i = 0; i < mlp->num_parameters(); ++i) {
      MlpD plus = *mlp, minus = *mlp;
      plus.mutable_parameters()[i] += h;
      minus.mutable_parameters()[i] -= h;
      const double fd = (ProbeLoss(plus, x, r) - ProbeLoss(minus, x, r)) / (2 * h);
      EXPECT_NEAR(grad_params[i], fd, 1e-7) << "parameter " << i;
    }
    for (int64_t i = 0; i < x.size(); ++i) {
      MatD xp = x, xm = x;
      xp.data()[i] += h;
      xm.data()[i] -= h;
      const double fd = (ProbeLoss(*mlp, xp, r) - ProbeLoss(*mlp, xm, r)) / (2 * h);
      EXPECT_NEAR(grad_x.data()[i], fd, 1e-7) << "input " << i;
    }
  }
}

// The backward pass by the textbook formulas on whole matrices (Eigen, one thread):
// dW_l = H_l^T G_l, db_l = 1^T G_l, G_{l-1} = (G_l W_l^T) .* [H_l > 0].
Vector<double> ReferenceGradient(const MlpD& mlp, const MatD& x, const MatD& r) {
  std::vector<MatD> h{x};
  for (int64_t l = 0; l + 1 < mlp.num_layers(); ++l) {
    MatD z = h.back() * mlp.weight(l);
    z.rowwise() += mlp.bias(l).row(0);
    h.push_back(z.cwiseMax(0.0));
  }
  Vector<double> grad(mlp.num_parameters());
  MatD g = r;
  for (int64_t l = mlp.num_layers() - 1; l >= 0; --l) {
    Eigen::Map<MatD>(grad.data() + mlp.weight_offset(l), mlp.fan_in(l), mlp.fan_out(l)) =
        h[l].transpose() * g;
    Eigen::Map<MatD>(grad.data() + mlp.bias_offset(l), 1, mlp.fan_out(l)) = g.colwise().sum();
    if (l > 0) {
      g = ((g * mlp.weight(l).transpose()).array() * (h[l].array() > 0.0).cast<double>())
              .matrix();
    }
  }
  return grad;
}

// Batches of several row chunks (the element-wise passes run ~4096-row chunks on every
// thread, bias gradients summed per chunk): Forward + Backward and ForwardBorrowing +
// Backward equal the whole-matrix formulas, and one cache reused across batches of
// different sizes (its buffers kept) gives the same as a fresh one. Double sums of up to
// 12k O(1) terms: rounding ~1e-12 relative; 1e-10 of the largest gradient leaves room.
TEST(Mlp, BackwardOnManyRowChunksMatchesWholeMatrixFormulas) {
  absl::StatusOr<MlpD> mlp = MlpD::Create({5, 12, 2, 3}, 31);
  ASSERT_TRUE(mlp.ok());
  MlpCache<double> reused;
  for (int64_t n : {3 * 4096 + 37, 1, 4095, 2 * 4096}) {
    const MatD x = RandomMatrix(n, 5, 32 + n);
    const MatD r = RandomMatrix(n, 3, 33 + n);
    const Vector<double> want = ReferenceGradient(*mlp, x, r);
    const double tol = 1e-10 * std::max(1.0, want.cwiseAbs().maxCoeff());
    MlpCache<double> copied;
    Vector<double> g_copied, g_borrowed;
    ASSERT_TRUE(mlp->Forward(x, &copied).ok());
    ASSERT_TRUE(mlp->Backward(copied, r, &g_copied).ok());
    EXPECT_LT((g_copied - want).cwiseAbs().maxCoeff(), tol) << n;
    ASSERT_TRUE(mlp->ForwardBorrowing(x, &reused).ok());
    EXPECT_TRUE(reused.inputs[0].size() == 0 && reused.batch == x.data());
    ASSERT_TRUE(mlp->Backward(reused, r, &g_borrowed).ok());
    EXPECT_EQ(g_borrowed, g_copied) << n;  // same operations in the same order
  }
  EXPECT_FALSE(mlp->ForwardBorrowing(RandomMatrix(3, 5, 1), nullptr).ok());
}

TEST(Mlp, FloatBackwardAgreesWithDoubleBackward) {
  // The training path is float; the FD check above is double. Same parameters (the
  // float network's, widened) and inputs: gradients agree to float rounding. Sums of
  // ~20-60 O(1) terms at relative 6e-8 each: 1e-4 relative to the largest gradient.
  const MlpShape shape{3, 16, 3, 2};
  absl::StatusOr<Mlp> mlp_f = Mlp::Create(shape, 21);
  absl::StatusOr<MlpD> mlp_d = MlpD::Create(shape, 21);
  ASSERT_TRUE(mlp_f.ok() && mlp_d.ok());
  mlp_d->mutable_parameters() = mlp_f->parameters().cast<double>();
  const MatF x = RandomMatrix(20, 3, 22).cast<float>();
  const MatF r = RandomMatrix(20, 2, 23).cast<float>();
  MlpCache<float> cache_f;
  MlpCache<double> cache_d;
  ASSERT_TRUE(mlp_f->Forward(x, &cache_f).ok());
  ASSERT_TRUE(mlp_d->Forward(x.cast<double>(), &cache_d).ok());
  Vector<float> gp_f;
  Vector<double> gp_d;
  MatF gx_f;
  MatD gx_d;
  ASSERT_TRUE(mlp_f->Backward(cache_f, r, &gp_f, &gx_f).ok());
  ASSERT_TRUE(mlp_d->Backward(cache_d, r.cast<double>(), &gp_d, &gx_d).ok());
  const double scale = gp_d.cwiseAbs().maxCoeff();
  ASSERT_GT(scale, 0.1);  // a dead network would make the comparison vacuous
  EXPECT_LT((gp_f.cast<double>() - gp_d).cwiseAbs().maxCoeff(), 1e-4 * scale);
  EXPECT_LT((gx_f.cast<double>() - gx_d).cwiseAbs().maxCoeff(),
            1e-4 * std::max(1.0, gx_d.cwiseAbs().maxCoeff()));
}

TEST(Mlp, MseLossValueAndGradient) {
  MatD pred(2, 2), target(2, 2);
  pred << 1, 2, 3, 4;
  target << 0, 2, 5, 4;
  MatD grad;
  absl::StatusOr<double> loss = MseLoss<double>(pred, target, &grad);
  ASSERT_TRUE(loss.ok());
  EXPECT_DOUBLE_EQ(*loss, (1.0 + 0.0 + 4.0 + 0.0) / 4.0);
  MatD expected(2, 2);
  expected << 2.0 * 1 / 4, 0, 2.0 * -2 / 4, 0;
  EXPECT_EQ(grad, expected);
  EXPECT_FALSE(MseLoss<double>(pred, MatD(2, 3)).ok());
  EXPECT_FALSE(MseLoss<double>(MatD(0, 2), MatD(0, 2)).ok());
}

TEST(Adam, TwoStepsMatchHandComputedUpdate) {
  AdamOptions options;
  options.learning_rate = 0.1;
  absl::StatusOr<AdamT<double>> adam = AdamT<double>::Create(2, options);
  ASSERT_TRUE(adam.ok());
  Vector<double> p(2), g1(2), g2(2);
  p << 1.0, -2.0;
  g1 << 0.5, -1.0;
  g2 << 0.1, 3.0;
  // Step 1: m = 0.1 g1, v = 0.001 g1^2; bias-corrected m/(1-0.9) = g1, v/(1-0.999) = g1^2,
  // so p -= 0.1 g1 / (|g1| + 1e-8): 1 - 0.1 * 0.5 / (0.5 + 1e-8) = 0.900000002 (to 1e-17).
  ASSERT_TRUE(adam->Step(g1, &p).ok());
  EXPECT_NEAR(p[0], 0.900000002, 1e-15);
  EXPECT_NEAR(p[1], -1.900000001, 1e-15);
  EXPECT_NEAR(adam->first_moment()[0], 0.05, 1e-16);
  EXPECT_NEAR(adam->second_moment()[1], 0.001, 1e-18);
  // Step 2: m = 0.9 * 0.05 + 0.1 * 0.1 = 0.055, v = 0.999 * 0.00025 + 0.001 * 0.01
  // = 0.00025975; m_hat = 0.055 / 0.19, v_hat = 0.00025975 / 0.001999;
  // p0 = 0.900000002 - 0.1 * m_hat / (sqrt(v_hat) + 1e-8) = 0.8196959063846518.
  // p1: m = -0.09 + 0.3 = 0.21, v = 0.000999 + 0.009 = 0.009999 -> -1.9494189841087441.
  ASSERT_TRUE(adam->Step(g2, &p).ok());
  EXPECT_EQ(adam->step_count(), 2);
  // Double arithmetic over ~10 operations on O(1) numbers: 1e-13 is ample.
  EXPECT_NEAR(p[0], 0.8196959063846518, 1e-13);
  EXPECT_NEAR(p[1], -1.9494189841087441, 1e-13);
}

// Betas within float's last unit below 1 (0.99999999 rounds to 1.0f): the float Adam
// still moves its moments by 1 - beta computed in double, and matches the double Adam to
// float precision (1e-5 relative over three steps). With 1 - (float)beta = 0 the first
// moment would stay 0 (no update) or the second (a step of lr g / eps).
TEST(Adam, BetasNextToOneMoveTheMomentsInFloat) {
  for (int which : {1, 2}) {
    AdamOptions options;
    options.learning_rate = 1e-2;
    if (which == 1) options.beta1 = 0.99999999;
    if (which == 2) options.beta2 = 0.99999999;
    absl::StatusOr<AdamT<float>> f = AdamT<float>::Create(2, options);
    absl::StatusOr<AdamT<double>> d = AdamT<double>::Create(2, options);
    ASSERT_TRUE(f.ok() && d.ok());
    Vector<float> pf(2), gf(2);
    Vector<double> pd(2), gd(2);
    pf << 1.0f, -2.0f;
    pd << 1.0, -2.0;
    for (int step = 0; step < 3; ++step) {
      gf << 0.5f, -0.25f;
      gd << 0.5, -0.25;
      ASSERT_TRUE(f->Step(gf, &pf).ok());
      ASSERT_TRUE(d->Step(gd, &pd).ok());
    }
    for (int i = 0; i < 2; ++i) {
      EXPECT_NE(pd[i], i == 0 ? 1.0 : -2.0) << "beta" << which;  // the parameters moved
      EXPECT_NEAR(pf[i], pd[i], 1e-5 * std::fabs(pd[i])) << "beta" << which << " " << i;
    }
  }
}

TEST(Adam, RejectsBadInput) {
  AdamOptions options;
  options.learning_rate = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(AdamT<double>::Create(3, options).ok());
  options.learning_rate = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(AdamT<double>::Create(3, options).ok());
  options.learning_rate = 0.0;
  EXPECT_FALSE(AdamT<double>::Create(3, options).ok());
  options.learning_rate = 1e-3;
  options.beta1 = 1.0;
  EXPECT_FALSE(AdamT<double>::Create(3, options).ok());
  options.beta1 = 0.9;
  EXPECT_FALSE(AdamT<double>::Create(0, options).ok());
  absl::StatusOr<AdamT<double>> adam = AdamT<double>::Create(3, options);
  ASSERT_TRUE(adam.ok());
  Vector<double> p = Vector<double>::Zero(3);
  EXPECT_FALSE(adam->Step(Vector<double>::Zero(2), &p).ok());
  Vector<double> bad = Vector<double>::Zero(3);
  bad[1] = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(adam->Step(bad, &p).ok());
  EXPECT_EQ(adam->step_count(), 0);
}

TEST(TrainFullBatch, FitsASmoothFunctionAndReportsProgress) {
  // f(x) = sin(3 x) on 64 points of [-1, 1]; a 1 -> 32 -> 32 -> 1 ReLU network.
  const int64_t n = 64;
  MatF x(n, 1), y(n, 1);
  for (int64_t i = 0; i < n; ++i) {
    x(i, 0) = static_cast<float>(-1.0 + 2.0 * i / (n - 1));
    y(i, 0) = std::sin(3.0f * x(i, 0));
  }
  absl::StatusOr<Mlp> mlp = Mlp::Create({1, 32, 2, 1}, 1);
  ASSERT_TRUE(mlp.ok());
  TrainOptions options;
  options.steps = 500;
  options.adam.learning_rate = 1e-2;
  options.validation_features = &x;
  options.validation_targets = &y;
  options.eval_every = 100;
  std::vector<int64_t> reported;
  options.progress = [&](const TrainProgress& p) {
    reported.push_back(p.step);
    EXPECT_TRUE(p.validation_loss.has_value());
  };
  absl::StatusOr<TrainHistory> history = TrainFullBatch<float>(&*mlp, x, y, options);
  ASSERT_TRUE(history.ok()) << history.status();
  ASSERT_EQ(history->train_loss.size(), 500u);
  EXPECT_EQ(reported, (std::vector<int64_t>{100, 200, 300, 400, 500}));
  EXPECT_EQ(history->validation_steps, reported);
  // Measured for this seed: initial MSE 0.69, final 1.3e-4 (a ~5000x drop). Requiring a
  // 100x drop leaves a 50x margin for BLAS rounding differences; a network that does not
  // learn (or moves against the gradient) stays near or above the initial 0.69.
  std::printf("sin fit: initial %g final %g\n", history->train_loss.front(),
              history->final_train_loss);
  EXPECT_LT(history->final_train_loss, history->train_loss.front() / 100.0)
      << "initial " << history->train_loss.front() << " final " << history->final_train_loss;
  // Validation set = training set here, so its last loss is the final training loss.
  EXPECT_NEAR(history->validation_loss.back(), history->final_train_loss, 1e-7);
}

TEST(TrainFullBatch, RejectsBadInput) {
  absl::StatusOr<Mlp> mlp = Mlp::Create({2, 4, 1, 1}, 0);
  ASSERT_TRUE(mlp.ok());
  const MatF x = MatF::Ones(5, 2), y = MatF::Ones(5, 1);
  TrainOptions options;
  options.steps = 3;
  EXPECT_FALSE(TrainFullBatch<float>(nullptr, x, y, options).ok());
  EXPECT_FALSE(TrainFullBatch<float>(&*mlp, MatF::Ones(5, 3), y, options).ok());  // width
  EXPECT_FALSE(TrainFullBatch<float>(&*mlp, x, MatF::Ones(4, 1), options).ok());  // rows
  EXPECT_FALSE(TrainFullBatch<float>(&*mlp, x, MatF::Ones(5, 2), options).ok());  // outputs
  MatF nan_x = x;
  nan_x(2, 1) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(TrainFullBatch<float>(&*mlp, nan_x, y, options).ok());
  TrainOptions bad = options;
  bad.adam.learning_rate = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(TrainFullBatch<float>(&*mlp, x, y, bad).ok());
  bad = options;
  bad.steps = -1;
  EXPECT_FALSE(TrainFullBatch<float>(&*mlp, x, y, bad).ok());
  bad = options;
  bad.validation_features = &x;  // targets missing
  EXPECT_FALSE(TrainFullBatch<float>(&*mlp, x, y, bad).ok());
  // Divergence: a huge learning rate on large targets overflows float within a few steps.
  bad = options;
  bad.steps = 200;
  bad.adam.learning_rate = 1e30;
  const MatF big_y = MatF::Constant(5, 1, 1e30f);
  absl::StatusOr<TrainHistory> diverged = TrainFullBatch<float>(&*mlp, x, big_y, bad);
  EXPECT_EQ(diverged.status().code(), absl::StatusCode::kFailedPrecondition);
  // Divergence in the last update, after a finite loss before it: one step of 1e300
  // takes float parameters to inf, so the final loss is not finite. An error too, not a
  // history whose final loss is inf or NaN (a fresh model: the one above diverged).
  for (int64_t hidden : {0, 1}) {
    absl::StatusOr<Mlp> fresh =
        hidden == 0 ? Mlp::Create({2, 1}, 1) : Mlp::Create({2, 4, 1, 1}, 1);
    ASSERT_TRUE(fresh.ok());
    bad = options;
    bad.steps = 1;
    bad.adam.learning_rate = 1e300;
    absl::StatusOr<TrainHistory> last = TrainFullBatch<float>(&*fresh, x, y, bad);
    EXPECT_EQ(last.status().code(), absl::StatusCode::kFailedPrecondition) << hidden;
    EXPECT_NE(std::string(last.status().message()).find("after the last step"), std::string::npos)
        << last.status();
  }
}

TEST(Mlp, RejectsBadShapesAndInputs) {
  EXPECT_FALSE(Mlp::Create({2, 0, 3, 1}, 0).ok());   // zero width
  EXPECT_FALSE(Mlp::Create({0, 8, 3, 1}, 0).ok());   // zero input
  EXPECT_FALSE(Mlp::Create({2, 8, 3, 0}, 0).ok());   // zero output
  EXPECT_FALSE(Mlp::Create({2, 8, -1, 1}, 0).ok());  // negative depth
  EXPECT_FALSE(Mlp::Create({2, 1 << 20, 3, 1}, 0).ok());  // > 2^31 parameters
  absl::StatusOr<Mlp> mlp = Mlp::Create({2, 8, 3, 1}, 0);
  ASSERT_TRUE(mlp.ok());
  EXPECT_FALSE(mlp->Forward(MatF::Ones(4, 3)).ok());
  EXPECT_FALSE(mlp->Forward(MatF(0, 2)).ok());
  MlpCache<float> cache;
  ASSERT_TRUE(mlp->Forward(MatF::Ones(4, 2), &cache).ok());
  Vector<float> grad;
  EXPECT_FALSE(mlp->Backward(cache, MatF::Ones(3, 1), &grad).ok());  // rows
  EXPECT_FALSE(mlp->Backward(cache, MatF::Ones(4, 2), &grad).ok());  // columns
  EXPECT_FALSE(mlp->Backward(cache, MatF::Ones(4, 1), nullptr).ok());
  EXPECT_FALSE(mlp->Backward(MlpCache<float>{}, MatF::Ones(4, 1), &grad).ok());
  EXPECT_TRUE(mlp->Backward(cache, MatF::Ones(4, 1), &grad).ok());
}

TEST(GridCoordinates, MatchesDataGridOrder) {
  const RowMatrixXd points = GridCoordinates(4);
  const std::vector<double> axis = GridAxis(4);
  ASSERT_EQ(points.rows(), 16);
  // Pixel (row i = y, column j = x) is row i * n + j of the value matrix.
  EXPECT_EQ(points(1 * 4 + 3, 0), axis[3]);
  EXPECT_EQ(points(1 * 4 + 3, 1), axis[1]);
  const ImageMatrix image = SyntheticImage(SyntheticTask::kRadial, 4);
  absl::StatusOr<RowMatrixXd> values = ChannelsToValues({image});
  ASSERT_TRUE(values.ok());
  EXPECT_EQ((*values)(1 * 4 + 3, 0), image(1, 3));
  EXPECT_FALSE(ChannelsToValues({image, ImageMatrix::Zero(3, 4)}).ok());
  EXPECT_FALSE(ChannelsToValues({}).ok());
}

double MeanPredictorMse(const RowMatrixXd& values, const std::vector<int64_t>& train,
                        const std::vector<int64_t>& test) {
  double mean = 0.0;
  for (int64_t i : train) mean += values(i, 0);
  mean /= static_cast<double>(train.size());
  double mse = 0.0;
  for (int64_t i : test) mse += (values(i, 0) - mean) * (values(i, 0) - mean);
  return mse / static_cast<double>(test.size());
}

TEST(RunInrExperiment, RadialImageBeatsMeanPredictor) {
  const int64_t n = 32;
  const RowMatrixXd coords = GridCoordinates(n);
  absl::StatusOr<RowMatrixXd> values =
      ChannelsToValues({SyntheticImage(SyntheticTask::kRadial, n)});
  ASSERT_TRUE(values.ok());
  absl::StatusOr<Split> split = RandomSplit(n * n, 0.3, 0.2, 4);
  ASSERT_TRUE(split.ok());
  absl::StatusOr<encodings::FourierFeatures> txt = encodings::FourierFeatures::TxT(16, 3.0, 5);
  ASSERT_TRUE(txt.ok());
  InrExperimentOptions options;  // smaller than Lim's 3 x 128 to keep the test fast
  options.hidden_width = 32;
  options.num_hidden_layers = 2;
  options.steps = 300;
  options.learning_rate = 1e-2;
  options.seed = 2;
  const double baseline = MeanPredictorMse(*values, split->train, split->test);
  for (const encodings::CoordinateEncoder* encoder :
       {static_cast<const encodings::CoordinateEncoder*>(&*txt),
        static_cast<const encodings::CoordinateEncoder*>(nullptr)}) {
    absl::StatusOr<InrExperimentResult> result =
        RunInrExperiment(encoder, coords, *values, *split, options);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_TRUE(result->validation_mse.has_value() && result->test_mse.has_value());
    EXPECT_TRUE(std::isfinite(result->train_mse));
    EXPECT_TRUE(std::isfinite(*result->validation_mse));
    EXPECT_TRUE(std::isfinite(*result->test_mse));
    EXPECT_LT(result->train_mse, result->history.train_loss.front());
    if (encoder == nullptr) {
      // Without an encoding a small ReLU net cannot resolve the rings (Lim et al.'s
      // "no PE" baseline is the worst row of their Table 2): only finiteness is checked.
      continue;
    }
    // The mean predictor's MSE is the image variance (~0.09 for |sin(15 sqrt r)|); a
    // network that learns nothing sits at or above it (the identity run above: 1.02x).
    // With the T x T encoding the network trained on 30% of the pixels lands at 0.34x
    // for this seed, and 0.38x-0.54x for init seeds 3-5 (measured), so 0.65x is safe
    // for this fixed seed even if BLAS rounding changes the trajectory.
    EXPECT_LT(*result->test_mse, 0.65 * baseline)
        << "test " << *result->test_mse << " baseline " << baseline;
    std::printf("T x T test MSE %g, mean-predictor MSE %g\n", *result->test_mse, baseline);
  }
}

TEST(RunInrExperiment, PredictAllMatchesTheReportedTestError) {
  // The full-grid prediction, restricted to the test pixels, must reproduce the reported
  // test MSE: the same float32 network on the same rows. The reported MSE forms residuals
  // in float32 against float32 targets (relative rounding ~6e-8 per entry, |v| / |r| ~ 2
  // here) and the batched gemm may round differently: ~1e-7 relative (measured 2e-9);
  // 1e-5 has margin, while a mis-ordered row or channel changes the MSE by O(1).
  const int64_t n = 12;
  absl::StatusOr<RowMatrixXd> values =
      ChannelsToValues(SyntheticVectorField(SyntheticTask::kRadial, n));
  ASSERT_TRUE(values.ok());
  absl::StatusOr<Split> split = RandomSplit(n * n, 0.3, 0.2, 9);
  ASSERT_TRUE(split.ok());
  InrExperimentOptions options;
  options.hidden_width = 8;
  options.num_hidden_layers = 1;
  options.steps = 20;
  options.predict_all = true;
  absl::StatusOr<InrExperimentResult> result =
      RunInrExperiment(nullptr, GridCoordinates(n), *values, *split, options);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(result->prediction.has_value() && result->test_mse.has_value());
  ASSERT_EQ(result->prediction->rows(), n * n);
  ASSERT_EQ(result->prediction->cols(), 2);
  double se = 0;
  for (int64_t p : split->test) {
    se += (result->prediction->row(p) - values->row(p)).squaredNorm();
  }
  const double mse = se / static_cast<double>(2 * split->test.size());
  EXPECT_NEAR(mse, *result->test_mse, 1e-5 * *result->test_mse);
  options.predict_all = false;
  result = RunInrExperiment(nullptr, GridCoordinates(n), *values, *split, options);
  ASSERT_TRUE(result.ok());
  EXPECT_FALSE(result->prediction.has_value());
}

TEST(RunInrExperiment, VectorFieldHasTwoOutputsAndOptionalParts) {
  const int64_t n = 16;
  absl::StatusOr<RowMatrixXd> values =
      ChannelsToValues(SyntheticVectorField(SyntheticTask::kSpiral, n));
  ASSERT_TRUE(values.ok());
  ASSERT_EQ(values->cols(), 2);
  // No validation set (Zheng et al.'s grid split): validation_mse stays empty.
  const Split split = RegularGridSplit(n, n);
  ASSERT_TRUE(split.validation.empty());
  InrExperimentOptions options;
  options.hidden_width = 16;
  options.num_hidden_layers = 2;
  options.steps = 50;
  options.eval_every = 10;
  int64_t calls = 0;
  options.progress = [&](const TrainProgress& p) {
    ++calls;
    EXPECT_FALSE(p.validation_loss.has_value());
  };
  absl::StatusOr<InrExperimentResult> result =
      RunInrExperiment(nullptr, GridCoordinates(n), *values, split, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(calls, 5);
  EXPECT_FALSE(result->validation_mse.has_value());
  ASSERT_TRUE(result->test_mse.has_value());
  EXPECT_TRUE(std::isfinite(*result->test_mse));
  EXPECT_EQ(result->history.train_loss.size(), 50u);
  // The reported train MSE is the network's error on the training rows after training:
  // recompute it from an independent pass over the same split with the same seed.
  absl::StatusOr<Mlp> mlp = Mlp::Create({2, 16, 2, 2}, options.seed);
  ASSERT_TRUE(mlp.ok());
  MatF x(split.train.size(), 2), y(split.train.size(), 2);
  const RowMatrixXd coords = GridCoordinates(n);
  for (size_t r = 0; r < split.train.size(); ++r) {
    x.row(r) = coords.row(split.train[r]).cast<float>();
    y.row(r) = values->row(split.train[r]).cast<float>();
  }
  TrainOptions train;
  train.steps = 50;
  train.adam.learning_rate = options.learning_rate;
  absl::StatusOr<TrainHistory> history = TrainFullBatch<float>(&*mlp, x, y, train);
  ASSERT_TRUE(history.ok());
  // Same inputs, same seed, same operations: identical up to float rounding order (none
  // differs here), so equality to 1e-9 relative is expected.
  EXPECT_NEAR(history->final_train_loss, result->train_mse, 1e-9 * result->train_mse);
}

TEST(RunInrExperiment, RejectsBadInput) {
  const RowMatrixXd coords = GridCoordinates(4);
  const RowMatrixXd values = RowMatrixXd::Ones(16, 1);
  Split split;
  split.train = {0, 1, 2};
  split.test = {3, 4};
  InrExperimentOptions options;
  options.steps = 2;
  options.hidden_width = 4;
  EXPECT_TRUE(RunInrExperiment(nullptr, coords, values, split, options).ok());
  EXPECT_FALSE(RunInrExperiment(nullptr, coords, RowMatrixXd::Ones(15, 1), split, options).ok());
  Split bad_split = split;
  bad_split.test.push_back(16);
  EXPECT_FALSE(RunInrExperiment(nullptr, coords, values, bad_split, options).ok());
  bad_split = split;
  bad_split.train.clear();
  EXPECT_FALSE(RunInrExperiment(nullptr, coords, values, bad_split, options).ok());
  InrExperimentOptions bad = options;
  bad.hidden_width = 0;
  EXPECT_FALSE(RunInrExperiment(nullptr, coords, values, split, bad).ok());
  bad = options;
  bad.learning_rate = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(RunInrExperiment(nullptr, coords, values, split, bad).ok());
  absl::StatusOr<encodings::FourierFeatures> txt = encodings::FourierFeatures::TxT(4, 1.0, 0);
  ASSERT_TRUE(txt.ok());
  // T x T expects 2-D points.
  EXPECT_FALSE(
      RunInrExperiment(&*txt, RowMatrixXd::Ones(16, 3), values, split, options).ok());
  RowMatrixXd nan_values = values;
  nan_values(5, 0) = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(RunInrExperiment(nullptr, coords, nan_values, split, options).ok());
}

}  // namespace
}  // namespace inr
}  // namespace gpe
