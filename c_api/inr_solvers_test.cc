// INR training, data, metrics and image files through gpe.h, compared with the C++ API of
// inr/ (mlp.h, linear_gd.h, data.h, closed_form.h). The C entry points run the same C++
// code on copies of the same inputs (one OpenBLAS thread), so results must agree bit for
// bit; any difference means the boundary reordered, truncated or mis-strided something.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "gpe/gpe.h"
#include "gtest/gtest.h"
#include "inr/closed_form.h"
#include "inr/data.h"
#include "inr/linear_gd.h"
#include "inr/mlp.h"

namespace {

using gpe::inr::RowMatrix;
using gpe::inr::RowMatrixXd;

template <typename T>
DLTensor Tensor(T* data, std::vector<int64_t>* shape) {
  DLTensor t;
  std::memset(&t, 0, sizeof(t));
  t.data = data;
  t.device = {kDLCPU, 0};
  t.ndim = static_cast<int32_t>(shape->size());
  if constexpr (std::is_same_v<T, int64_t>) {
    t.dtype = {kDLInt, 64, 1};
  } else {
    t.dtype = {kDLFloat, static_cast<uint8_t>(8 * sizeof(T)), 1};
  }
  t.shape = shape->data();
  return t;
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

// A small regression problem: N points in [-1, 1]^2, two smooth targets.
template <typename T>
void MakeData(int64_t n, std::vector<T>* x, std::vector<T>* y) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  x->resize(n * 2);
  y->resize(n * 2);
  for (int64_t i = 0; i < n; ++i) {
    const double a = u(rng), b = u(rng);
    (*x)[2 * i] = static_cast<T>(a);
    (*x)[2 * i + 1] = static_cast<T>(b);
    (*y)[2 * i] = static_cast<T>(std::sin(3 * a) * b);
    (*y)[2 * i + 1] = static_cast<T>(a * a - b);
  }
}

// MakeData's n + m points split in row order: the first n train, the last m are held out.
template <typename T>
struct HeldOutSplit {
  std::vector<T> x, y, vx, vy;
  HeldOutSplit(int64_t n, int64_t m) {
    std::vector<T> all_x, all_y;
    MakeData(n + m, &all_x, &all_y);
    x.assign(all_x.begin(), all_x.begin() + 2 * n);
    y.assign(all_y.begin(), all_y.begin() + 2 * n);
    vx.assign(all_x.begin() + 2 * n, all_x.end());
    vy.assign(all_y.begin() + 2 * n, all_y.end());
  }
};

template <typename T>
void MlpMatchesCpp() {
  const int64_t n = 40, steps = 25;
  std::vector<T> x, y;
  MakeData(n, &x, &y);
  gpe_mlp_options o = GPE_MLP_OPTIONS_INIT;
  o.hidden_width = 16;
  o.num_hidden_layers = 2;
  o.steps = steps;
  o.learning_rate = 5e-3;
  o.seed = 11;
  int64_t count = 0;
  ASSERT_EQ(gpe_inr_mlp_num_parameters(&o, 2, 2, &count), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(count, (2 + 1) * 16 + (16 + 1) * 16 + (16 + 1) * 2);
  std::vector<T> params(count), init(count), pred(n * 2);
  std::vector<double> loss(steps);
  std::vector<int64_t> xs = {n, 2}, ps = {count}, ls = {steps};
  DLTensor tx = Tensor(x.data(), &xs), ty = Tensor(y.data(), &xs), tp = Tensor(params.data(), &ps),
           ti = Tensor(init.data(), &ps), tl = Tensor(loss.data(), &ls),
           tpred = Tensor(pred.data(), &xs);
  // Progress: every 10 steps and after the last (10, 20, 25).
  std::vector<int64_t> reported;
  o.report_every = 10;
  o.progress = [](void* user, int64_t step, double) {
    static_cast<std::vector<int64_t>*>(user)->push_back(step);
  };
  o.progress_user_data = &reported;
  double final_loss = 0;
  ASSERT_EQ(gpe_inr_mlp_fit(&o, &tx, &ty, nullptr, &tp, &tl, &final_loss), GPE_OK)
      << gpe_last_error_message();
  EXPECT_EQ(reported, (std::vector<int64_t>{10, 20, 25}));

  // The C++ trainer on the same data.
  gpe::inr::MlpShape shape{2, 16, 2, 2};
  absl::StatusOr<gpe::inr::MlpT<T>> mlp = gpe::inr::MlpT<T>::Create(shape, 11);
  ASSERT_TRUE(mlp.ok());
  ASSERT_EQ(gpe_inr_mlp_init(&o, 2, 2, &ti), GPE_OK) << gpe_last_error_message();
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(init[i], mlp->parameters()[i]) << i;
  const RowMatrix<T> fx = Eigen::Map<const RowMatrix<T>>(x.data(), n, 2);
  const RowMatrix<T> fy = Eigen::Map<const RowMatrix<T>>(y.data(), n, 2);
  gpe::inr::TrainOptionsT<T> train;
  train.steps = steps;
  train.adam.learning_rate = 5e-3;
  absl::StatusOr<gpe::inr::TrainHistory> h = gpe::inr::TrainFullBatch<T>(&*mlp, fx, fy, train);
  ASSERT_TRUE(h.ok()) << h.status();
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(params[i], mlp->parameters()[i]) << i;
  for (int64_t s = 0; s < steps; ++s) ASSERT_EQ(loss[s], h->train_loss[s]) << s;
  EXPECT_EQ(final_loss, h->final_train_loss);
  EXPECT_LT(final_loss, loss[0]);  // it trains

  // Predict through C = Forward in C++.
  ASSERT_EQ(gpe_inr_mlp_predict(&o, &tp, &tx, &tpred), GPE_OK) << gpe_last_error_message();
  absl::StatusOr<RowMatrix<T>> want = gpe::inr::Predict<T>(*mlp, fx);
  ASSERT_TRUE(want.ok());
  for (int64_t i = 0; i < n * 2; ++i) ASSERT_EQ(pred[i], want->data()[i]) << i;

  // Starting from given parameters: continuing 25 more steps from the trained ones (a
  // fresh Adam state) equals the C++ trainer doing the same; in place (parameters ==
  // initial_parameters).
  std::vector<T> cont = params;
  DLTensor tc = Tensor(cont.data(), &ps);
  o.progress = nullptr;
  ASSERT_EQ(gpe_inr_mlp_fit(&o, &tx, &ty, &tc, &tc, nullptr, nullptr), GPE_OK)
      << gpe_last_error_message();
  ASSERT_TRUE(gpe::inr::TrainFullBatch<T>(&*mlp, fx, fy, train).ok());
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(cont[i], mlp->parameters()[i]) << i;
}

TEST(InrMlp, Float32MatchesTheCppTrainerBitForBit) { MlpMatchesCpp<float>(); }
TEST(InrMlp, Float64MatchesTheCppTrainerBitForBit) { MlpMatchesCpp<double>(); }

// The validation MSE of `params` on vx [m, 2] / vy [m, 2], evaluated directly: predict
// through C, then sum the squared differences (formed in T, as MseLoss does) in double.
template <typename T>
double DirectValidationMse(gpe_mlp_options o, std::vector<T>* params, std::vector<T>* vx,
                           const std::vector<T>& vy, int64_t m) {
  std::vector<T> pred(m * 2);
  std::vector<int64_t> ps = {static_cast<int64_t>(params->size())}, vs = {m, 2};
  DLTensor tp = Tensor(params->data(), &ps), tx = Tensor(vx->data(), &vs),
           tpred = Tensor(pred.data(), &vs);
  EXPECT_EQ(gpe_inr_mlp_predict(&o, &tp, &tx, &tpred), GPE_OK) << gpe_last_error_message();
  double sum = 0.0;
  for (int64_t i = 0; i < m * 2; ++i) {
    const double d = static_cast<double>(static_cast<T>(pred[i] - vy[i]));
    sum += d * d;
  }
  return sum / static_cast<double>(m * 2);
}

// gpe_inr_mlp_fit_v2's validation curve equals TrainFullBatch's history (steps and losses)
// bit for bit; the training is unchanged by it; each validation loss is the MSE of the
// network after that many updates on the held-out points.
template <typename T>
void MlpValidationMatchesCpp() {
  const int64_t n = 40, m = 15, steps = 25;
  // Rows 0..n-1 train, rows n..n+m-1 are held out.
  HeldOutSplit<T> split(n, m);
  std::vector<T>& x = split.x, &y = split.y, &vx = split.vx, &vy = split.vy;
  // The validation targets as a column-major view (strides {1, m}): the boundary's copy
  // must follow the strides.
  std::vector<T> vy_cm(m * 2);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < 2; ++j) vy_cm[j * m + i] = vy[i * 2 + j];
  }
  gpe_mlp_options o = GPE_MLP_OPTIONS_INIT;
  o.hidden_width = 16;
  o.num_hidden_layers = 2;
  o.steps = steps;
  o.learning_rate = 5e-3;
  o.seed = 11;
  o.report_every = 10;  // evaluations after 10, 20 and 25 updates
  int64_t count = 0, k = 0;
  ASSERT_EQ(gpe_inr_mlp_num_parameters(&o, 2, 2, &count), GPE_OK) << gpe_last_error_message();
  ASSERT_EQ(gpe_inr_mlp_num_evaluations(&o, &k), GPE_OK) << gpe_last_error_message();
  ASSERT_EQ(k, 3);
  std::vector<T> params(count), plain(count);
  std::vector<double> loss(steps), plain_loss(steps), vloss(k, -1.0);
  std::vector<int64_t> vsteps(k, -1);
  std::vector<int64_t> xs = {n, 2}, vs = {m, 2}, ps = {count}, ls = {steps}, ks = {k};
  std::vector<int64_t> cm_strides = {1, m};
  DLTensor tx = Tensor(x.data(), &xs), ty = Tensor(y.data(), &xs), tp = Tensor(params.data(), &ps),
           tl = Tensor(loss.data(), &ls), tvx = Tensor(vx.data(), &vs),
           tvy = Tensor(vy_cm.data(), &vs), tvs = Tensor(vsteps.data(), &ks),
           tvl = Tensor(vloss.data(), &ks);
  tvy.strides = cm_strides.data();
  gpe_mlp_validation val = GPE_MLP_VALIDATION_INIT;
  val.features = &tvx;
  val.targets = &tvy;
  val.steps = &tvs;
  val.loss = &tvl;
  std::vector<int64_t> reported;
  o.progress = [](void* user, int64_t step, double) {
    static_cast<std::vector<int64_t>*>(user)->push_back(step);
  };
  o.progress_user_data = &reported;
  double final_loss = 0;
  ASSERT_EQ(gpe_inr_mlp_fit_v2(&o, &tx, &ty, nullptr, &tp, &tl, &final_loss, &val), GPE_OK)
      << gpe_last_error_message();
  EXPECT_EQ(reported, (std::vector<int64_t>{10, 20, 25}));  // the same schedule
  EXPECT_EQ(vsteps, (std::vector<int64_t>{10, 20, 25}));

  // The C++ trainer with the same validation set.
  absl::StatusOr<gpe::inr::MlpT<T>> mlp = gpe::inr::MlpT<T>::Create({2, 16, 2, 2}, 11);
  ASSERT_TRUE(mlp.ok());
  const RowMatrix<T> fx = Eigen::Map<const RowMatrix<T>>(x.data(), n, 2);
  const RowMatrix<T> fy = Eigen::Map<const RowMatrix<T>>(y.data(), n, 2);
  const RowMatrix<T> fvx = Eigen::Map<const RowMatrix<T>>(vx.data(), m, 2);
  const RowMatrix<T> fvy = Eigen::Map<const RowMatrix<T>>(vy.data(), m, 2);
  gpe::inr::TrainOptionsT<T> train;
  train.steps = steps;
  train.adam.learning_rate = 5e-3;
  train.validation_features = &fvx;
  train.validation_targets = &fvy;
  train.eval_every = 10;
  absl::StatusOr<gpe::inr::TrainHistory> h = gpe::inr::TrainFullBatch<T>(&*mlp, fx, fy, train);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(vsteps, h->validation_steps);
  ASSERT_EQ(h->validation_loss.size(), 3u);
  for (int64_t i = 0; i < k; ++i) EXPECT_EQ(vloss[i], h->validation_loss[i]) << i;  // bits
  for (int64_t s = 0; s < steps; ++s) ASSERT_EQ(loss[s], h->train_loss[s]) << s;
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(params[i], mlp->parameters()[i]) << i;
  EXPECT_EQ(final_loss, h->final_train_loss);
  EXPECT_LT(vloss[2], vloss[0]);  // the held-out error falls as the network trains

  // The validation set does not change the training: gpe_inr_mlp_fit gives the same bits.
  DLTensor tplain = Tensor(plain.data(), &ps), tplain_loss = Tensor(plain_loss.data(), &ls);
  o.progress = nullptr;
  ASSERT_EQ(gpe_inr_mlp_fit(&o, &tx, &ty, nullptr, &tplain, &tplain_loss, nullptr), GPE_OK);
  EXPECT_EQ(plain, params);
  EXPECT_EQ(plain_loss, loss);

  // Each validation loss is the held-out MSE of the network after vsteps[i] updates:
  // refit for exactly that many steps (the same seed and constant rate: the same network
  // bits) and evaluate it directly on vx, vy. Tolerance 1e-13 relative: the per-entry
  // squared errors are the same doubles, only the summation order differs (30 terms,
  // error <= 30 * 2^-53 relative). The training-set MSE of the same network is far from
  // it: the curve is measured on the held-out rows.
  for (int64_t i = 0; i < k; ++i) {
    gpe_mlp_options oi = o;
    oi.steps = vsteps[i];
    oi.report_every = 0;
    std::vector<T> pi(count);
    std::vector<double> li(1);
    std::vector<int64_t> one = {1};
    DLTensor tpi = Tensor(pi.data(), &ps), tvli = Tensor(li.data(), &one);
    gpe_mlp_validation vi = GPE_MLP_VALIDATION_INIT;
    vi.features = &tvx;
    vi.targets = &tvy;
    vi.loss = &tvli;
    double train_mse = 0;
    ASSERT_EQ(gpe_inr_mlp_fit_v2(&oi, &tx, &ty, nullptr, &tpi, nullptr, &train_mse, &vi), GPE_OK)
        << gpe_last_error_message();
    EXPECT_EQ(li[0], vloss[i]) << i;  // the final evaluation of the shorter run
    const double direct = DirectValidationMse<T>(oi, &pi, &vx, vy, m);
    EXPECT_NEAR(vloss[i], direct, 1e-13 * direct) << i;
    EXPECT_GT(std::abs(train_mse - direct), 1e-6 * direct) << i;
  }

  // No updates: one evaluation, at step 0, of the initial network.
  o.steps = 0;
  ASSERT_EQ(gpe_inr_mlp_num_evaluations(&o, &k), GPE_OK);
  ASSERT_EQ(k, 1);
  std::vector<int64_t> ks1 = {1}, zero = {0};
  tvs = Tensor(vsteps.data(), &ks1);
  tvl = Tensor(vloss.data(), &ks1);
  ASSERT_EQ(gpe_inr_mlp_fit_v2(&o, &tx, &ty, nullptr, &tp, nullptr, nullptr, &val), GPE_OK)
      << gpe_last_error_message();
  EXPECT_EQ(vsteps[0], 0);
  const double initial = DirectValidationMse<T>(o, &params, &vx, vy, m);
  EXPECT_NEAR(vloss[0], initial, 1e-13 * initial);
}

TEST(InrMlp, Float32ValidationCurveMatchesTheCppTrainer) { MlpValidationMatchesCpp<float>(); }
TEST(InrMlp, Float64ValidationCurveMatchesTheCppTrainer) { MlpValidationMatchesCpp<double>(); }

// One call of either progress callback, in the order the fit made them.
struct ProgressEvent {
  bool validation;  // gpe_mlp_validation.progress (else gpe_mlp_options.progress)
  int64_t step;
  double train_loss;
  double validation_loss;  // validation events only
};

void RecordTrainProgress(void* user, int64_t step, double train_loss) {
  static_cast<std::vector<ProgressEvent>*>(user)->push_back({false, step, train_loss, 0.0});
}

void RecordValidationProgress(void* user, int64_t step, double train_loss,
                              double validation_loss) {
  static_cast<std::vector<ProgressEvent>*>(user)->push_back(
      {true, step, train_loss, validation_loss});
}

// A callback that must never run: it counts its calls in *user.
void CountUnexpectedCall(void* user, int64_t, double, double) { ++*static_cast<int*>(user); }

uint64_t Bits(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// gpe_mlp_validation.progress (0.7.0): called once per evaluation, after
// options->progress, with the step and train loss that callback gets and the validation
// loss written to validation->loss, bit for bit; the training does not depend on it;
// a struct from a 0.6.0 header (struct_size ending before it) is accepted and its bytes
// beyond struct_size are never read. All comparisons are exact: the callback is handed
// the very doubles the trainer stores.
template <typename T>
void ValidationProgressReportsEachEvaluation() {
  const int64_t n = 30, m = 12, steps = 23;
  HeldOutSplit<T> split(n, m);
  std::vector<T>& x = split.x, &y = split.y, &vx = split.vx, &vy = split.vy;
  gpe_mlp_options o = GPE_MLP_OPTIONS_INIT;
  o.hidden_width = 8;
  o.num_hidden_layers = 1;
  o.steps = steps;
  o.learning_rate = 1e-2;
  o.seed = 5;
  o.report_every = 5;  // evaluations after 5, 10, 15, 20 and 23 updates
  int64_t count = 0, k = 0;
  ASSERT_EQ(gpe_inr_mlp_num_parameters(&o, 2, 2, &count), GPE_OK) << gpe_last_error_message();
  ASSERT_EQ(gpe_inr_mlp_num_evaluations(&o, &k), GPE_OK) << gpe_last_error_message();
  ASSERT_EQ(k, 5);
  std::vector<int64_t> xs = {n, 2}, vs = {m, 2}, ps = {count}, ls = {steps}, ks = {k};
  DLTensor tx = Tensor(x.data(), &xs), ty = Tensor(y.data(), &xs), tvx = Tensor(vx.data(), &vs),
           tvy = Tensor(vy.data(), &vs);
  // One fit's outputs.
  struct Outputs {
    std::vector<T> params;
    std::vector<double> loss, vloss;
    std::vector<int64_t> vsteps;
    double final_loss = 0.0;
  };
  const auto fit = [&](const gpe_mlp_options& opts, gpe_mlp_validation val, Outputs* out) {
    out->params.assign(count, T(-1));
    out->loss.assign(steps, -1.0);
    out->vloss.assign(k, -1.0);
    out->vsteps.assign(k, -1);
    DLTensor tp = Tensor(out->params.data(), &ps), tl = Tensor(out->loss.data(), &ls),
             tvs = Tensor(out->vsteps.data(), &ks), tvl = Tensor(out->vloss.data(), &ks);
    val.features = &tvx;
    val.targets = &tvy;
    val.steps = &tvs;
    val.loss = &tvl;
    return gpe_inr_mlp_fit_v2(&opts, &tx, &ty, nullptr, &tp, &tl, &out->final_loss, &val);
  };
  const auto same_fit = [](const Outputs& a, const Outputs& b) {
    EXPECT_EQ(a.params, b.params);  // exact: the same training
    EXPECT_EQ(a.loss, b.loss);
    EXPECT_EQ(a.vsteps, b.vsteps);
    EXPECT_EQ(a.vloss, b.vloss);
    EXPECT_EQ(Bits(a.final_loss), Bits(b.final_loss));
  };

  // Both callbacks, logging into one sequence.
  std::vector<ProgressEvent> events;
  gpe_mlp_options both = o;
  both.progress = RecordTrainProgress;
  both.progress_user_data = &events;
  gpe_mlp_validation val = GPE_MLP_VALIDATION_INIT;
  val.progress = RecordValidationProgress;
  val.progress_user_data = &events;
  Outputs with;
  ASSERT_EQ(fit(both, val, &with), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(with.vsteps, (std::vector<int64_t>{5, 10, 15, 20, 23}));
  ASSERT_EQ(events.size(), static_cast<size_t>(2 * k));
  for (int64_t i = 0; i < k; ++i) {
    const ProgressEvent& train = events[2 * i];
    const ProgressEvent& v = events[2 * i + 1];
    EXPECT_FALSE(train.validation) << i;  // options->progress first
    ASSERT_TRUE(v.validation) << i;
    EXPECT_EQ(v.step, with.vsteps[i]) << i;
    EXPECT_EQ(train.step, v.step) << i;
    EXPECT_EQ(Bits(v.train_loss), Bits(train.train_loss)) << i;
    EXPECT_EQ(Bits(v.validation_loss), Bits(with.vloss[i])) << i;
    // The training loss of the forward pass behind update `step` (train_loss[step - 1]).
    EXPECT_EQ(Bits(v.train_loss), Bits(with.loss[v.step - 1])) << i;
  }

  // Only the validation callback: the same K calls and values.
  std::vector<ProgressEvent> alone;
  gpe_mlp_validation val_only = GPE_MLP_VALIDATION_INIT;
  val_only.progress = RecordValidationProgress;
  val_only.progress_user_data = &alone;
  Outputs only;
  ASSERT_EQ(fit(o, val_only, &only), GPE_OK) << gpe_last_error_message();
  same_fit(only, with);
  ASSERT_EQ(alone.size(), static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) {
    EXPECT_TRUE(alone[i].validation);
    EXPECT_EQ(alone[i].step, events[2 * i + 1].step) << i;
    EXPECT_EQ(Bits(alone[i].train_loss), Bits(events[2 * i + 1].train_loss)) << i;
    EXPECT_EQ(Bits(alone[i].validation_loss), Bits(events[2 * i + 1].validation_loss)) << i;
  }

  // Without any callback: the same bits (the callback observes, never steers).
  const gpe_mlp_validation no_progress = GPE_MLP_VALIDATION_INIT;
  Outputs plain;
  ASSERT_EQ(fit(o, no_progress, &plain), GPE_OK) << gpe_last_error_message();
  same_fit(plain, with);

  // A 0.6.0 caller: struct_size ends before progress; whatever lies beyond it (here a
  // callback that counts calls) is not read, with or without a validation set.
  int unexpected = 0;
  gpe_mlp_validation old = GPE_MLP_VALIDATION_INIT;
  old.struct_size = static_cast<uint32_t>(offsetof(gpe_mlp_validation, progress));
  old.progress = CountUnexpectedCall;
  old.progress_user_data = &unexpected;
  Outputs from_old;
  ASSERT_EQ(fit(o, old, &from_old), GPE_OK) << gpe_last_error_message();
  same_fit(from_old, with);
  std::vector<T> p(count);
  DLTensor tp = Tensor(p.data(), &ps);
  gpe_mlp_validation old_empty = old;  // no set: a read progress would be an error
  ASSERT_EQ(gpe_inr_mlp_fit_v2(&o, &tx, &ty, nullptr, &tp, nullptr, nullptr, &old_empty), GPE_OK)
      << gpe_last_error_message();
  EXPECT_EQ(p, with.params);
  EXPECT_EQ(unexpected, 0);

  // No updates: one call, at step 0, with the initial network's losses.
  gpe_mlp_options none = both;
  none.steps = 0;
  events.clear();
  std::vector<double> vl0(1, -1.0);
  std::vector<int64_t> one = {1};
  DLTensor tvl0 = Tensor(vl0.data(), &one);
  gpe_mlp_validation val0 = val;
  val0.features = &tvx;
  val0.targets = &tvy;
  val0.loss = &tvl0;
  double final0 = 0.0;
  ASSERT_EQ(gpe_inr_mlp_fit_v2(&none, &tx, &ty, nullptr, &tp, nullptr, &final0, &val0), GPE_OK)
      << gpe_last_error_message();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_FALSE(events[0].validation);
  ASSERT_TRUE(events[1].validation);
  EXPECT_EQ(events[1].step, 0);
  EXPECT_EQ(Bits(events[1].train_loss), Bits(final0));  // the loss of the initial network
  EXPECT_EQ(Bits(events[1].validation_loss), Bits(vl0[0]));
}

TEST(InrMlp, Float32ValidationProgressReportsEachEvaluation) {
  ValidationProgressReportsEachEvaluation<float>();
}
TEST(InrMlp, Float64ValidationProgressReportsEachEvaluation) {
  ValidationProgressReportsEachEvaluation<double>();
}

// gpe_inr_mlp_num_evaluations equals the number of evaluations TrainFullBatch makes, for
// every (steps, report_every) pair near the boundaries (a multiple or not, every 0 or
// above steps).
TEST(InrMlp, NumEvaluationsMatchesTheTrainersSchedule) {
  const int64_t n = 3;
  std::vector<double> x = {0.1, 0.2, -0.3, 0.4, 0.5, -0.6}, y = {1, 2, 3};
  std::vector<int64_t> xs = {n, 2}, ys = {n, 1};
  DLTensor tx = Tensor(x.data(), &xs), ty = Tensor(y.data(), &ys);
  for (int64_t steps : {0, 1, 5, 6, 7}) {
    for (int64_t every : {0, 1, 3, 6, 10}) {
      gpe_mlp_options o = GPE_MLP_OPTIONS_INIT;
      o.hidden_width = 2;
      o.num_hidden_layers = 0;
      o.steps = steps;
      o.report_every = every;
      int64_t k = 0, count = 0;
      ASSERT_EQ(gpe_inr_mlp_num_evaluations(&o, &k), GPE_OK) << gpe_last_error_message();
      ASSERT_EQ(gpe_inr_mlp_num_parameters(&o, 2, 1, &count), GPE_OK);
      std::vector<double> p(count), vl(k);
      std::vector<int64_t> vs(k), ps = {count}, ks = {k};
      DLTensor tp = Tensor(p.data(), &ps), tvs = Tensor(vs.data(), &ks),
               tvl = Tensor(vl.data(), &ks);
      gpe_mlp_validation val = GPE_MLP_VALIDATION_INIT;
      val.features = &tx;  // the training rows double as a validation set here
      val.targets = &ty;
      val.steps = &tvs;
      val.loss = &tvl;
      ASSERT_EQ(gpe_inr_mlp_fit_v2(&o, &tx, &ty, nullptr, &tp, nullptr, nullptr, &val), GPE_OK)
          << gpe_last_error_message();
      absl::StatusOr<gpe::inr::MlpD> mlp = gpe::inr::MlpD::Create({2, 2, 0, 1}, 0);
      ASSERT_TRUE(mlp.ok());
      const RowMatrixXd fx = Eigen::Map<const RowMatrixXd>(x.data(), n, 2);
      const RowMatrixXd fy = Eigen::Map<const RowMatrixXd>(y.data(), n, 1);
      gpe::inr::TrainOptionsT<double> train;
      train.steps = steps;
      train.eval_every = every;
      train.validation_features = &fx;
      train.validation_targets = &fy;
      absl::StatusOr<gpe::inr::TrainHistory> h =
          gpe::inr::TrainFullBatch<double>(&*mlp, fx, fy, train);
      ASSERT_TRUE(h.ok()) << h.status();
      EXPECT_EQ(vs, h->validation_steps) << steps << " " << every;
      EXPECT_EQ(vl, h->validation_loss) << steps << " " << every;
    }
  }
}

TEST(InrMlp, DivergenceIsReportedAndLeavesOutputsUnwritten) {
  const int64_t n = 20;
  std::vector<double> x, y;
  MakeData(n, &x, &y);
  for (double& v : y) v *= 1e200;  // squared errors overflow: a non-finite loss
  gpe_mlp_options o = GPE_MLP_OPTIONS_INIT;
  o.hidden_width = 4;
  o.num_hidden_layers = 1;
  o.steps = 3;
  int64_t count = 0;
  ASSERT_EQ(gpe_inr_mlp_num_parameters(&o, 2, 2, &count), GPE_OK);
  std::vector<double> params(count, -7.0);
  std::vector<int64_t> xs = {n, 2}, ps = {count};
  DLTensor tx = Tensor(x.data(), &xs), ty = Tensor(y.data(), &xs), tp = Tensor(params.data(), &ps);
  EXPECT_EQ(gpe_inr_mlp_fit(&o, &tx, &ty, nullptr, &tp, nullptr, nullptr),
            GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("diverged"), std::string::npos)
      << gpe_last_error_message();
  EXPECT_EQ(params[0], -7.0);
}

// Adam on the linear layer: the dense and separable fits through C equal FitDenseAdam /
// FitSeparableAdam2D.
TEST(InrLinearAdam, DenseAndSeparableMatchCpp) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal;
  const int64_t n = 30, f = 6, c = 2, ny = 12, nx = 10, ky = 5, kx = 4, steps = 60;
  RowMatrixXd phi(n, f), y(n, c), psi_y(ny, ky), psi_x(nx, kx), s(ny, nx);
  for (RowMatrixXd* m : {&phi, &y, &psi_y, &psi_x, &s}) {
    for (int64_t i = 0; i < m->size(); ++i) m->data()[i] = normal(rng);
  }
  gpe_linear_adam_options o = GPE_LINEAR_ADAM_OPTIONS_INIT;
  o.steps = steps;
  o.learning_rate = 0.05;
  o.final_learning_rate = 0.005;
  gpe::inr::LinearAdamOptions co;
  co.steps = steps;
  co.learning_rate = 0.05;
  co.final_learning_rate = 0.005;

  std::vector<int64_t> phis = {n, f}, ys = {n, c}, ws = {f, c}, ls = {steps};
  RowMatrixXd w(f, c);
  std::vector<double> loss(steps);
  DLTensor tphi = Tensor(phi.data(), &phis), ty = Tensor(y.data(), &ys),
           tw = Tensor(w.data(), &ws), tl = Tensor(loss.data(), &ls);
  double final_loss = 0;
  ASSERT_EQ(gpe_inr_fit_dense_adam(&o, &tphi, &ty, &tw, &tl, &final_loss), GPE_OK)
      << gpe_last_error_message();
  absl::StatusOr<gpe::inr::LinearAdamFit> want = gpe::inr::FitDenseAdam(phi, y, co);
  ASSERT_TRUE(want.ok());
  for (int64_t i = 0; i < w.size(); ++i) ASSERT_EQ(w.data()[i], want->weights.data()[i]) << i;
  for (int64_t i = 0; i < steps; ++i) ASSERT_EQ(loss[i], want->loss[i]) << i;
  EXPECT_EQ(final_loss, want->final_loss);

  std::vector<int64_t> pys = {ny, ky}, pxs = {nx, kx}, ss = {ny, nx}, w2s = {ky, kx};
  RowMatrixXd w2(ky, kx);
  // psi_x passed transposed-in-memory (column-major strides) to exercise strides.
  RowMatrixXd psi_x_t = psi_x.transpose();
  std::vector<int64_t> pxt_strides = {1, nx};
  DLTensor tpy = Tensor(psi_y.data(), &pys), tpx = Tensor(psi_x_t.data(), &pxs),
           ts = Tensor(s.data(), &ss), tw2 = Tensor(w2.data(), &w2s);
  tpx.strides = pxt_strides.data();
  int64_t reports = 0;
  o.report_every = 20;
  o.progress = [](void* user, int64_t, double) { ++*static_cast<int64_t*>(user); };
  o.progress_user_data = &reports;
  ASSERT_EQ(gpe_inr_fit_separable_adam_2d(&o, &tpy, &tpx, &ts, &tw2, &tl, &final_loss), GPE_OK)
      << gpe_last_error_message();
  EXPECT_EQ(reports, 3);  // steps 20, 40, 60
  want = gpe::inr::FitSeparableAdam2D(psi_y, psi_x, s, co);
  ASSERT_TRUE(want.ok());
  for (int64_t i = 0; i < w2.size(); ++i) ASSERT_EQ(w2.data()[i], want->weights.data()[i]) << i;
  for (int64_t i = 0; i < steps; ++i) ASSERT_EQ(loss[i], want->loss[i]) << i;
  EXPECT_EQ(final_loss, want->final_loss);
}

TEST(InrData, SyntheticGridAndSplitsMatchCpp) {
  const int64_t n = 9;
  for (int32_t task : {GPE_SYNTHETIC_RADIAL, GPE_SYNTHETIC_SPIRAL}) {
    const auto t = task == GPE_SYNTHETIC_RADIAL ? gpe::inr::SyntheticTask::kRadial
                                                : gpe::inr::SyntheticTask::kSpiral;
    for (int32_t sv : {0, 1}) {
      std::vector<double> img(n * n);
      std::vector<int64_t> is = {n, n};
      DLTensor ti = Tensor(img.data(), &is);
      ASSERT_EQ(gpe_inr_synthetic_image(task, sv, &ti), GPE_OK) << gpe_last_error_message();
      const gpe::inr::ImageMatrix want = gpe::inr::SyntheticImage(t, n, sv != 0);
      for (int64_t i = 0; i < n * n; ++i) ASSERT_EQ(img[i], want.data()[i]);
    }
    std::vector<double> field(n * n * 2);
    std::vector<int64_t> fs = {n, n, 2};
    DLTensor tf = Tensor(field.data(), &fs);
    ASSERT_EQ(gpe_inr_synthetic_vector_field(task, &tf), GPE_OK) << gpe_last_error_message();
    const std::vector<gpe::inr::ImageMatrix> want = gpe::inr::SyntheticVectorField(t, n);
    for (int64_t i = 0; i < n * n; ++i) {
      ASSERT_EQ(field[2 * i], want[0].data()[i]);
      ASSERT_EQ(field[2 * i + 1], want[1].data()[i]);
    }
  }
  std::vector<double> grid(n * n * 2);
  std::vector<int64_t> gs = {n * n, 2};
  DLTensor tg = Tensor(grid.data(), &gs);
  ASSERT_EQ(gpe_inr_grid_coordinates(n, &tg), GPE_OK) << gpe_last_error_message();
  const RowMatrixXd want_grid = gpe::inr::GridCoordinates(n);
  for (int64_t i = 0; i < n * n * 2; ++i) ASSERT_EQ(grid[i], want_grid.data()[i]);

  const int64_t points = 101;
  std::vector<int64_t> idx(points), is = {points};
  int64_t counts[3] = {-1, -1, -1};
  DLTensor ti = Tensor(idx.data(), &is);
  ASSERT_EQ(gpe_inr_random_split(points, 0.05, 0.4, 5, &ti, counts), GPE_OK)
      << gpe_last_error_message();
  absl::StatusOr<gpe::inr::Split> split = gpe::inr::RandomSplit(points, 0.05, 0.4, 5);
  ASSERT_TRUE(split.ok());
  std::vector<int64_t> want;
  for (const auto* part : {&split->train, &split->validation, &split->test}) {
    want.insert(want.end(), part->begin(), part->end());
  }
  EXPECT_EQ(idx, want);
  EXPECT_EQ(counts[0], 5);   // round(0.05 * 101)
  EXPECT_EQ(counts[1], 40);  // round(0.4 * 101)
  EXPECT_EQ(counts[2], 56);

  std::vector<int64_t> ridx(5 * 4), rs = {5 * 4};
  DLTensor tr = Tensor(ridx.data(), &rs);
  ASSERT_EQ(gpe_inr_regular_grid_split(5, 4, &tr, counts), GPE_OK) << gpe_last_error_message();
  const gpe::inr::Split reg = gpe::inr::RegularGridSplit(5, 4);
  want = reg.train;
  want.insert(want.end(), reg.test.begin(), reg.test.end());
  EXPECT_EQ(ridx, want);
  EXPECT_EQ(counts[0], 6);  // rows 0, 2, 4 x cols 0, 2
  EXPECT_EQ(counts[1], 0);
  EXPECT_EQ(counts[2], 14);
}

TEST(InrMetrics, MseAndPsnrMatchCppOnStridedThreeDimensionalInputs) {
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  // [3, 4, 2] views: a compact, b every other element of a larger buffer.
  std::vector<double> a(24), bbuf(48);
  for (double& v : a) v = u(rng);
  for (double& v : bbuf) v = u(rng);
  std::vector<int64_t> shape = {3, 4, 2}, bstrides = {16, 4, 2};
  DLTensor ta = Tensor(a.data(), &shape), tb = Tensor(bbuf.data(), &shape);
  tb.strides = bstrides.data();
  RowMatrixXd fa(1, 24), fb(1, 24);
  for (int64_t i = 0; i < 24; ++i) {
    fa(0, i) = a[i];
    fb(0, i) = bbuf[2 * i];
  }
  double mse = 0, psnr = 0;
  ASSERT_EQ(gpe_inr_mse(&ta, &tb, &mse), GPE_OK) << gpe_last_error_message();
  ASSERT_EQ(gpe_inr_psnr(&ta, &tb, 2.0, &psnr), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(mse, *gpe::inr::MeanSquaredError(fa, fb));
  EXPECT_EQ(psnr, *gpe::inr::Psnr(fa, fb, 2.0));
  ASSERT_EQ(gpe_inr_psnr(&ta, &ta, 1.0, &psnr), GPE_OK);
  EXPECT_EQ(psnr, std::numeric_limits<double>::infinity());
}

// Written through C, read back through C and through the C++ reader: the same values.
// An 8-bit PNG stores round(255 v): reading gives k / 255 exactly as the C++ reader does.
TEST(InrImage, PngAndJpegRoundTripsMatchCpp) {
  const int64_t h = 5, w = 7;
  std::vector<float> rgb(h * w * 3);
  for (int64_t i = 0; i < h * w * 3; ++i) rgb[i] = static_cast<float>((i * 37 % 256) / 255.0);
  std::vector<int64_t> shape = {h, w, 3};
  DLTensor t = Tensor(rgb.data(), &shape);
  const std::string png = TempPath("c_api_inr_rgb.png");
  ASSERT_EQ(gpe_image_write_png(png.c_str(), &t, 0.0, 1.0), GPE_OK) << gpe_last_error_message();
  for (int32_t gray : {0, 1}) {
    gpe_image* im = nullptr;
    ASSERT_EQ(gpe_image_read(png.c_str(), gray, &im), GPE_OK) << gpe_last_error_message();
    int64_t r = 0, c = 0, ch = 0;
    ASSERT_EQ(gpe_image_shape(im, &r, &c, &ch), GPE_OK);
    EXPECT_EQ(r, h);
    EXPECT_EQ(c, w);
    EXPECT_EQ(ch, gray ? 1 : 3);
    std::vector<double> px(r * c * ch);
    std::vector<int64_t> ps = {r, c, ch};
    DLTensor tp = Tensor(px.data(), &ps);
    ASSERT_EQ(gpe_image_pixels(im, &tp), GPE_OK) << gpe_last_error_message();
    gpe_image_destroy(im);
    absl::StatusOr<gpe::inr::Image> want = gpe::inr::ReadImage(png, gray != 0);
    ASSERT_TRUE(want.ok());
    for (int64_t k = 0; k < ch; ++k) {
      for (int64_t i = 0; i < h; ++i) {
        for (int64_t j = 0; j < w; ++j) {
          ASSERT_EQ(px[(i * w + j) * ch + k], want->channels[k](i, j));
          // The values written were exact multiples of 1/255 (colour file): read back
          // within float32's rounding of them.
          if (!gray) {
            EXPECT_NEAR(px[(i * w + j) * 3 + k], rgb[(i * w + j) * 3 + k], 1e-7);
          }
        }
      }
    }
  }
  // Gray [h, w] input, lo/hi mapping, JPEG: the C++ reader sees what C wrote.
  std::vector<double> gray(h * w);
  for (int64_t i = 0; i < h * w; ++i) gray[i] = -1.0 + 2.0 * i / (h * w - 1);
  std::vector<int64_t> gs = {h, w};
  DLTensor tg = Tensor(gray.data(), &gs);
  const std::string jpg = TempPath("c_api_inr_gray.jpg");
  ASSERT_EQ(gpe_image_write_jpeg(jpg.c_str(), &tg, 100, -1.0, 1.0), GPE_OK)
      << gpe_last_error_message();
  gpe_image* im = nullptr;
  ASSERT_EQ(gpe_image_read(jpg.c_str(), 0, &im), GPE_OK) << gpe_last_error_message();
  int64_t ch = 0;
  ASSERT_EQ(gpe_image_shape(im, nullptr, nullptr, &ch), GPE_OK);
  EXPECT_EQ(ch, 3);  // a gray JPEG read as colour expands to three equal channels
  std::vector<float> px(h * w * 3);
  std::vector<int64_t> ps = {h, w, 3};
  DLTensor tp = Tensor(px.data(), &ps);
  ASSERT_EQ(gpe_image_pixels(im, &tp), GPE_OK) << gpe_last_error_message();
  gpe_image_destroy(im);
  absl::StatusOr<gpe::inr::Image> want = gpe::inr::ReadImage(jpg, false);
  ASSERT_TRUE(want.ok());
  for (int64_t i = 0; i < h * w; ++i) {
    for (int64_t c = 0; c < 3; ++c) {
      ASSERT_EQ(px[3 * i + c], static_cast<float>(want->channels[c].data()[i]));
    }
    // Quality 100 on a smooth ramp: within a few grey levels of (v + 1) / 2.
    EXPECT_NEAR(px[3 * i], (gray[i] + 1.0) / 2.0, 6.0 / 255.0);
  }
  std::remove(png.c_str());
  std::remove(jpg.c_str());
}

}  // namespace
