#include "inr/mlp.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "inr/closed_form_kernels.h"
#include "parallel/thread_pool.h"

namespace gpe {
namespace inr {
namespace {

// Row-major C (m x n) = alpha op(A) op(B) + beta C through OpenBLAS; ld* in elements.
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb),
              beta, c, static_cast<int>(ldc));
}
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0, a, static_cast<int>(lda), b, static_cast<int>(ldb),
              beta, c, static_cast<int>(ldc));
}

// Row chunks of the element-wise passes over an n-row activation: about 4096 rows each,
// at most 16 (a count that depends on n only, so sums over chunks are reproducible).
int RowChunks(int64_t n) { return static_cast<int>(std::clamp<int64_t>(n / 4096, 1, 16)); }

// gemm takes int sizes; batches and widths are capped well below 2^31.
constexpr int64_t kMaxDim = int64_t{1} << 24;
constexpr int64_t kMaxHiddenLayers = 1024;
constexpr int64_t kMaxParameters = (int64_t{1} << 31) - 1;

// Vectorised, row by row (closed_form_kernels.h): Eigen's isFinite().all() walked this
// row-major Ref column by column, a cache miss per element, 17% of a training step.
template <typename Scalar>
absl::Status CheckFinite(const Eigen::Ref<const RowMatrix<Scalar>>& m, const char* what) {
  if (!internal::AllFinite(m.data(), m.rows(), m.cols(), m.outerStride())) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has a non-finite entry"));
  }
  return absl::OkStatus();
}
template <typename Scalar>
absl::Status CheckFinite(const Vector<Scalar>& v, const char* what) {
  if (!internal::AllFinite(v.data(), 1, v.size(), v.size())) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has a non-finite entry"));
  }
  return absl::OkStatus();
}

template <typename Scalar>
absl::Status CheckBatch(const Eigen::Ref<const RowMatrix<Scalar>>& m, int64_t cols,
                        const char* what) {
  if (m.rows() < 1 || m.rows() > kMaxDim) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must have 1..", kMaxDim, " rows, got ", m.rows()));
  }
  if (m.cols() != cols) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must have ", cols, " columns, got ", m.cols()));
  }
  return CheckFinite(m, what);
}

}  // namespace

template <typename Scalar>
absl::StatusOr<MlpT<Scalar>> MlpT<Scalar>::Create(const MlpShape& shape, uint64_t seed) {
  for (const auto& [value, name] : {std::pair<int64_t, const char*>{shape.input_dim, "input_dim"},
                                    {shape.hidden_width, "hidden_width"},
                                    {shape.output_dim, "output_dim"}}) {
    if (value < 1 || value > kMaxDim) {
      return absl::InvalidArgumentError(
          absl::StrCat("Mlp: ", name, " must be in [1, ", kMaxDim, "], got ", value));
    }
  }
  if (shape.num_hidden_layers < 0 || shape.num_hidden_layers > kMaxHiddenLayers) {
    return absl::InvalidArgumentError(absl::StrCat("Mlp: num_hidden_layers must be in [0, ",
                                                   kMaxHiddenLayers, "], got ",
                                                   shape.num_hidden_layers));
  }
  const int64_t layers = shape.num_hidden_layers + 1;
  std::vector<int64_t> offsets(layers);
  int64_t count = 0;  // each layer < 2^49 elements, at most 1025 layers: no overflow
  for (int64_t l = 0; l < layers; ++l) {
    const int64_t in = l == 0 ? shape.input_dim : shape.hidden_width;
    const int64_t out = l == layers - 1 ? shape.output_dim : shape.hidden_width;
    offsets[l] = count;
    count += (in + 1) * out;
    if (count > kMaxParameters) {
      return absl::InvalidArgumentError("Mlp: more than 2^31 - 1 parameters");
    }
  }
  MlpT mlp(shape, std::move(offsets), count);
  // PyTorch nn.Linear default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases.
  std::mt19937_64 rng(seed);
  for (int64_t l = 0; l < layers; ++l) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(mlp.fan_in(l)));
    const int64_t begin = mlp.weight_offset(l);
    const int64_t end = mlp.bias_offset(l) + mlp.fan_out(l);
    for (int64_t i = begin; i < end; ++i) {
      const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1)
      mlp.parameters_[i] = static_cast<Scalar>(bound * (2.0 * u - 1.0));
    }
  }
  return mlp;
}

template <typename Scalar>
int64_t MlpT<Scalar>::fan_in(int64_t layer) const {
  return layer == 0 ? shape_.input_dim : shape_.hidden_width;
}
template <typename Scalar>
int64_t MlpT<Scalar>::fan_out(int64_t layer) const {
  return layer == num_layers() - 1 ? shape_.output_dim : shape_.hidden_width;
}
template <typename Scalar>
typename MlpT<Scalar>::WeightMap MlpT<Scalar>::weight(int64_t layer) {
  return WeightMap(parameters_.data() + weight_offset(layer), fan_in(layer), fan_out(layer));
}
template <typename Scalar>
typename MlpT<Scalar>::ConstWeightMap MlpT<Scalar>::weight(int64_t layer) const {
  return ConstWeightMap(parameters_.data() + weight_offset(layer), fan_in(layer),
                        fan_out(layer));
}
template <typename Scalar>
typename MlpT<Scalar>::WeightMap MlpT<Scalar>::bias(int64_t layer) {
  return WeightMap(parameters_.data() + bias_offset(layer), 1, fan_out(layer));
}
template <typename Scalar>
typename MlpT<Scalar>::ConstWeightMap MlpT<Scalar>::bias(int64_t layer) const {
  return ConstWeightMap(parameters_.data() + bias_offset(layer), 1, fan_out(layer));
}

template <typename Scalar>
absl::StatusOr<typename MlpT<Scalar>::Matrix> MlpT<Scalar>::Forward(
    const MatrixRef& x, MlpCache<Scalar>* cache) const {
  if (absl::Status s = CheckBatch<Scalar>(x, shape_.input_dim, "Mlp::Forward: x"); !s.ok()) {
    return s;
  }
  MlpCache<Scalar> local;
  MlpCache<Scalar>& c = cache != nullptr ? *cache : local;
  c.inputs.resize(num_layers());
  c.inputs[0] = x;  // same-sized buffers are reused across calls (no reallocation)
  c.batch = nullptr;
  c.batch_rows = c.batch_cols = c.batch_stride = 0;
  Matrix z = ForwardLayers(x.data(), x.rows(), x.outerStride(), &c);
  if (cache == nullptr) local.inputs.clear();
  return z;
}

template <typename Scalar>
absl::StatusOr<typename MlpT<Scalar>::Matrix> MlpT<Scalar>::ForwardBorrowing(
    const MatrixRef& x, MlpCache<Scalar>* cache) const {
  if (cache == nullptr) {
    return absl::InvalidArgumentError("Mlp::ForwardBorrowing: cache is null");
  }
  if (absl::Status s = CheckBatch<Scalar>(x, shape_.input_dim, "Mlp::ForwardBorrowing: x");
      !s.ok()) {
    return s;
  }
  cache->inputs.resize(num_layers());
  cache->inputs[0].resize(0, 0);
  cache->batch = x.data();
  cache->batch_rows = x.rows();
  cache->batch_cols = x.cols();
  cache->batch_stride = x.outerStride();
  return ForwardLayers(x.data(), x.rows(), x.outerStride(), cache);
}

template <typename Scalar>
typename MlpT<Scalar>::Matrix MlpT<Scalar>::ForwardLayers(const Scalar* x, int64_t n,
                                                          int64_t ldx,
                                                          MlpCache<Scalar>* c) const {
  Matrix z;
  for (int64_t l = 0; l < num_layers(); ++l) {
    const bool hidden = l + 1 < num_layers();
    Matrix& out = hidden ? c->inputs[l + 1] : z;
    out.resize(n, fan_out(l));
    const Scalar* in = l == 0 ? x : c->inputs[l].data();
    Gemm(false, false, n, fan_out(l), fan_in(l), in, l == 0 ? ldx : fan_in(l),
         parameters_.data() + weight_offset(l), fan_out(l), Scalar(0), out.data(), fan_out(l));
    // Z = H W + 1 b, then ReLU on hidden layers: one pass, on every thread.
    const auto b = bias(l).row(0);
    parallel::ParallelForChunks(RowChunks(n), n, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        out.row(r) += b;
        if (hidden) out.row(r) = out.row(r).cwiseMax(Scalar(0));
      }
    });
  }
  return z;
}

template <typename Scalar>
absl::Status MlpT<Scalar>::Backward(const MlpCache<Scalar>& cache, const MatrixRef& grad_output,
                                    Vector<Scalar>* grad_parameters, Matrix* grad_input) const {
  if (grad_parameters == nullptr) {
    return absl::InvalidArgumentError("Mlp::Backward: grad_parameters is null");
  }
  const bool borrowed = cache.batch != nullptr;
  if (static_cast<int64_t>(cache.inputs.size()) != num_layers() ||
      (borrowed ? cache.batch_cols : cache.inputs[0].cols()) != shape_.input_dim) {
    return absl::InvalidArgumentError("Mlp::Backward: cache is not from this network's Forward");
  }
  const int64_t n = borrowed ? cache.batch_rows : cache.inputs[0].rows();
  if (grad_output.rows() != n) {
    return absl::InvalidArgumentError(absl::StrCat("Mlp::Backward: grad_output has ",
                                                   grad_output.rows(), " rows, the cached batch ",
                                                   n));
  }
  if (absl::Status s = CheckBatch<Scalar>(grad_output, shape_.output_dim,
                                          "Mlp::Backward: grad_output");
      !s.ok()) {
    return s;
  }
  grad_parameters->resize(num_parameters());
  // dL/dZ_l, walking down; its column sums (db_l) are taken in the pass that applies
  // the ReLU mask below, one read of G instead of two.
  Matrix* g = &cache.grad[0];
  Matrix* g_prev = &cache.grad[1];
  *g = grad_output;
  Scalar* db = grad_parameters->data() + bias_offset(num_layers() - 1);
  std::fill(db, db + shape_.output_dim, Scalar(0));
  for (int64_t r = 0; r < n; ++r) {
    Eigen::Map<Matrix>(db, 1, shape_.output_dim) += g->row(r);
  }
  for (int64_t l = num_layers() - 1; l >= 0; --l) {
    const Scalar* h = l == 0 ? (borrowed ? cache.batch : cache.inputs[0].data())
                             : cache.inputs[l].data();
    const int64_t ldh = l == 0 && borrowed ? cache.batch_stride : fan_in(l);
    // dW_l = H_l^T G (db_l is already in place).
    Gemm(true, false, fan_in(l), fan_out(l), n, h, ldh, g->data(), fan_out(l), Scalar(0),
         grad_parameters->data() + weight_offset(l), fan_out(l));
    if (l == 0 && grad_input == nullptr) break;
    // dL/dH_l = G W_l^T; through ReLU (derivative 0 at 0, as PyTorch) for l >= 1.
    g_prev->resize(n, fan_in(l));
    Gemm(false, true, n, fan_in(l), fan_out(l), g->data(), fan_out(l),
         parameters_.data() + weight_offset(l), fan_out(l), Scalar(0), g_prev->data(),
         fan_in(l));
    if (l == 0) {
      *grad_input = *g_prev;
      break;
    }
    // Mask and db_{l-1} = 1^T G_{l-1} in one row-by-row pass, on every thread; partial
    // sums per chunk (a fixed count, so the result does not depend on the thread count),
    // added in chunk order.
    const Eigen::Map<const Matrix> hm(h, n, fan_in(l));
    const int chunks = RowChunks(n);
    Matrix partial = Matrix::Zero(chunks, fan_in(l));
    parallel::Run(chunks, [&](int k) {
      const int64_t r0 = n * k / chunks, r1 = n * (k + 1) / chunks;
      auto acc = partial.row(k);
      for (int64_t r = r0; r < r1; ++r) {
        g_prev->row(r).array() *= (hm.row(r).array() > Scalar(0)).template cast<Scalar>();
        acc += g_prev->row(r);
      }
    });
    Eigen::Map<Matrix> db_prev(grad_parameters->data() + bias_offset(l - 1), 1, fan_in(l));
    db_prev = partial.row(0);
    for (int k = 1; k < chunks; ++k) db_prev += partial.row(k);
    std::swap(g, g_prev);
  }
  return absl::OkStatus();
}

template <typename Scalar>
absl::StatusOr<double> MseLoss(const RowMatrix<Scalar>& prediction, const RowMatrix<Scalar>& target,
                               RowMatrix<Scalar>* grad) {
  if (prediction.size() == 0 || prediction.rows() != target.rows() ||
      prediction.cols() != target.cols()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MseLoss: prediction ", prediction.rows(), " x ", prediction.cols(), " and target ",
        target.rows(), " x ", target.cols(), " must be equal and non-empty"));
  }
  const double count = static_cast<double>(prediction.size());
  const double loss = (prediction - target).template cast<double>().squaredNorm() / count;
  if (grad != nullptr) {
    *grad = (prediction - target) * static_cast<Scalar>(2.0 / count);
  }
  return loss;
}

template <typename Scalar>
absl::StatusOr<AdamT<Scalar>> AdamT<Scalar>::Create(int64_t num_parameters,
                                                    const AdamOptions& options) {
  if (num_parameters < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Adam: num_parameters must be >= 1, got ", num_parameters));
  }
  if (!std::isfinite(options.learning_rate) || options.learning_rate <= 0.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Adam: learning_rate must be finite and > 0, got ", options.learning_rate));
  }
  if (!(options.beta1 >= 0.0 && options.beta1 < 1.0) ||
      !(options.beta2 >= 0.0 && options.beta2 < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("Adam: betas must be in [0, 1), got ",
                                                   options.beta1, ", ", options.beta2));
  }
  // > 0: with 0, a parameter whose gradient is exactly 0 (a feature column of zeros, a
  // dead ReLU unit) gets 0 / 0 = NaN, reported later as divergence.
  if (!std::isfinite(options.epsilon) || !(options.epsilon > 0.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Adam: epsilon must be finite and > 0 (0 makes a parameter whose "
                     "gradient is 0 NaN: 0 / 0), got ", options.epsilon));
  }
  return AdamT(num_parameters, options);
}

template <typename Scalar>
absl::Status AdamT<Scalar>::Step(const Vector<Scalar>& gradient, Vector<Scalar>* parameters) {
  if (parameters == nullptr || parameters->size() != m_.size() ||
      gradient.size() != m_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Adam::Step: gradient and parameters must both have ", m_.size(), " entries"));
  }
  if (absl::Status s = CheckFinite(gradient, "Adam::Step: gradient"); !s.ok()) return s;
  ++step_;
  // 1 - beta in double, then rounded: in float, a beta within 3e-8 of 1 rounds to 1.0f and
  // 1 - (float)beta would be 0 (the moments would never move), as PyTorch computes it.
  const Scalar b1 = static_cast<Scalar>(options_.beta1);
  const Scalar b2 = static_cast<Scalar>(options_.beta2);
  const Scalar c1 = static_cast<Scalar>(1.0 - options_.beta1);
  const Scalar c2 = static_cast<Scalar>(1.0 - options_.beta2);
  m_ = b1 * m_ + c1 * gradient;
  v_ = b2 * v_ + c2 * gradient.cwiseAbs2();
  const double t = static_cast<double>(step_);
  const Scalar step_size =
      static_cast<Scalar>(options_.learning_rate / (1.0 - std::pow(options_.beta1, t)));
  const Scalar inv_bc2 = static_cast<Scalar>(1.0 / (1.0 - std::pow(options_.beta2, t)));
  const Scalar eps = static_cast<Scalar>(options_.epsilon);
  parameters->array() -= step_size * m_.array() / ((v_.array() * inv_bc2).sqrt() + eps);
  return absl::OkStatus();
}

template <typename Scalar>
absl::StatusOr<RowMatrix<Scalar>> Predict(const MlpT<Scalar>& mlp,
                                          const typename MlpT<Scalar>::MatrixRef& features) {
  return mlp.Forward(features);
}

template <typename Scalar>
absl::StatusOr<TrainHistory> TrainFullBatch(MlpT<Scalar>* mlp,
                                            const typename MlpT<Scalar>::MatrixRef& features,
                                            const typename MlpT<Scalar>::MatrixRef& targets,
                                            const TrainOptionsT<Scalar>& options) {
  using Matrix = RowMatrix<Scalar>;
  if (mlp == nullptr) return absl::InvalidArgumentError("TrainFullBatch: mlp is null");
  const MlpShape& shape = mlp->shape();
  if (absl::Status s = CheckBatch<Scalar>(features, shape.input_dim, "TrainFullBatch: features");
      !s.ok()) {
    return s;
  }
  if (targets.rows() != features.rows()) {
    return absl::InvalidArgumentError(absl::StrCat("TrainFullBatch: ", targets.rows(),
                                                   " target rows for ", features.rows(),
                                                   " feature rows"));
  }
  if (absl::Status s = CheckBatch<Scalar>(targets, shape.output_dim, "TrainFullBatch: targets");
      !s.ok()) {
    return s;
  }
  if (options.steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("TrainFullBatch: steps must be >= 0, got ", options.steps));
  }
  if (options.eval_every < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("TrainFullBatch: eval_every must be >= 0, got ", options.eval_every));
  }
  const bool has_validation = options.validation_features != nullptr;
  if (has_validation != (options.validation_targets != nullptr)) {
    return absl::InvalidArgumentError(
        "TrainFullBatch: give both validation features and targets, or neither");
  }
  if (has_validation) {
    const Matrix& vx = *options.validation_features;
    const Matrix& vy = *options.validation_targets;
    if (absl::Status s = CheckBatch<Scalar>(vx, shape.input_dim, "TrainFullBatch: validation "
                                                                 "features");
        !s.ok()) {
      return s;
    }
    if (vy.rows() != vx.rows()) {
      return absl::InvalidArgumentError("TrainFullBatch: validation rows differ");
    }
    if (absl::Status s = CheckBatch<Scalar>(vy, shape.output_dim, "TrainFullBatch: validation "
                                                                  "targets");
        !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<AdamT<Scalar>> adam = AdamT<Scalar>::Create(mlp->num_parameters(), options.adam);
  if (!adam.ok()) return adam.status();

  const Matrix y = targets;
  TrainHistory history;
  history.train_loss.reserve(options.steps);
  MlpCache<Scalar> cache;
  Matrix grad_output;
  Vector<Scalar> grad_parameters;
  auto evaluate = [&](int64_t step, double train_loss) -> absl::Status {
    TrainProgress progress{step, train_loss, std::nullopt};
    if (has_validation) {
      absl::StatusOr<Matrix> pred = mlp->Forward(*options.validation_features);
      if (!pred.ok()) return pred.status();
      absl::StatusOr<double> loss = MseLoss<Scalar>(*pred, *options.validation_targets);
      if (!loss.ok()) return loss.status();
      history.validation_steps.push_back(step);
      history.validation_loss.push_back(*loss);
      progress.validation_loss = *loss;
    }
    if (options.progress) options.progress(progress);
    return absl::OkStatus();
  };
  for (int64_t step = 1; step <= options.steps; ++step) {
    absl::StatusOr<Matrix> pred = mlp->ForwardBorrowing(features, &cache);
    if (!pred.ok()) return pred.status();
    absl::StatusOr<double> loss = MseLoss<Scalar>(*pred, y, &grad_output);
    if (!loss.ok()) return loss.status();
    if (!std::isfinite(*loss) || !grad_output.allFinite()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "TrainFullBatch: training diverged (non-finite loss) at step ", step,
          "; lower the learning rate"));
    }
    history.train_loss.push_back(*loss);
    if (absl::Status s = mlp->Backward(cache, grad_output, &grad_parameters); !s.ok()) return s;
    if (absl::Status s = adam->Step(grad_parameters, &mlp->mutable_parameters()); !s.ok()) {
      return s;
    }
    if ((options.eval_every > 0 && step % options.eval_every == 0) || step == options.steps) {
      if (absl::Status s = evaluate(step, *loss); !s.ok()) return s;
    }
  }
  absl::StatusOr<Matrix> pred = mlp->Forward(features);
  if (!pred.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("TrainFullBatch: training diverged: ", pred.status().message()));
  }
  absl::StatusOr<double> final_loss = MseLoss<Scalar>(*pred, y);
  if (!final_loss.ok()) return final_loss.status();
  if (!std::isfinite(*final_loss)) {  // the last update diverged (checked before it: above)
    return absl::FailedPreconditionError(absl::StrCat(
        "TrainFullBatch: training diverged (non-finite loss) after the last step, ",
        options.steps, "; lower the learning rate"));
  }
  history.final_train_loss = *final_loss;
  if (options.steps == 0) {
    if (absl::Status s = evaluate(0, *final_loss); !s.ok()) return s;
  }
  return history;
}

RowMatrixXd GridCoordinates(int64_t n) {
  const std::vector<double> axis = GridAxis(n);
  const int64_t count = static_cast<int64_t>(axis.size());
  RowMatrixXd points(count * count, 2);
  for (int64_t i = 0; i < count; ++i) {
    for (int64_t j = 0; j < count; ++j) {
      points(i * count + j, 0) = axis[j];
      points(i * count + j, 1) = axis[i];
    }
  }
  return points;
}

absl::StatusOr<RowMatrixXd> ChannelsToValues(const std::vector<ImageMatrix>& channels) {
  if (channels.empty() || channels[0].size() == 0) {
    return absl::InvalidArgumentError("ChannelsToValues: no channels or empty images");
  }
  const int64_t rows = channels[0].rows();
  const int64_t cols = channels[0].cols();
  RowMatrixXd values(rows * cols, static_cast<int64_t>(channels.size()));
  for (size_t c = 0; c < channels.size(); ++c) {
    if (channels[c].rows() != rows || channels[c].cols() != cols) {
      return absl::InvalidArgumentError("ChannelsToValues: channels differ in size");
    }
    // ImageMatrix is row-major, so its storage is already row-major pixel order.
    values.col(static_cast<int64_t>(c)) =
        Eigen::Map<const Eigen::VectorXd>(channels[c].data(), rows * cols);
  }
  return values;
}

namespace {

absl::StatusOr<RowMatrix<float>> GatherRows(const RowMatrixXd& m, const std::vector<int64_t>& idx,
                                            const char* what) {
  RowMatrix<float> out(static_cast<int64_t>(idx.size()), m.cols());
  for (size_t r = 0; r < idx.size(); ++r) {
    if (idx[r] < 0 || idx[r] >= m.rows()) {
      return absl::InvalidArgumentError(absl::StrCat("RunInrExperiment: ", what, " index ",
                                                     idx[r], " outside [0, ", m.rows(), ")"));
    }
    out.row(static_cast<int64_t>(r)) = m.row(idx[r]).cast<float>();
  }
  return out;
}

}  // namespace

absl::StatusOr<InrExperimentResult> RunInrExperiment(const encodings::CoordinateEncoder* encoder,
                                                     const encodings::PointsRef& coordinates,
                                                     const encodings::PointsRef& values,
                                                     const Split& split,
                                                     const InrExperimentOptions& options) {
  if (absl::Status s = encodings::ValidateFiniteMatrix(
          coordinates, encoder != nullptr ? encoder->input_dim() : -1, "coordinates");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = encodings::ValidateFiniteMatrix(values, -1, "values"); !s.ok()) return s;
  if (values.rows() != coordinates.rows()) {
    return absl::InvalidArgumentError(absl::StrCat("RunInrExperiment: ", values.rows(),
                                                   " value rows for ", coordinates.rows(),
                                                   " coordinates"));
  }
  if (split.train.empty()) {
    return absl::InvalidArgumentError("RunInrExperiment: the training set is empty");
  }
  RowMatrixXd features;
  if (encoder != nullptr) {
    absl::StatusOr<RowMatrixXd> encoded = encoder->Encode(coordinates);
    if (!encoded.ok()) return encoded.status();
    features = *std::move(encoded);
  } else {
    features = coordinates;
  }
  const RowMatrixXd targets = values;
  struct Part {
    RowMatrix<float> x, y;
  };
  std::vector<Part> parts;
  for (const auto* idx : {&split.train, &split.validation, &split.test}) {
    absl::StatusOr<RowMatrix<float>> x = GatherRows(features, *idx, "split");
    if (!x.ok()) return x.status();
    absl::StatusOr<RowMatrix<float>> y = GatherRows(targets, *idx, "split");
    if (!y.ok()) return y.status();
    parts.push_back({*std::move(x), *std::move(y)});
  }
  MlpShape shape;
  shape.input_dim = features.cols();
  shape.hidden_width = options.hidden_width;
  shape.num_hidden_layers = options.num_hidden_layers;
  shape.output_dim = values.cols();
  absl::StatusOr<Mlp> mlp = Mlp::Create(shape, options.seed);
  if (!mlp.ok()) return mlp.status();

  TrainOptions train;
  train.steps = options.steps;
  train.adam.learning_rate = options.learning_rate;
  train.eval_every = options.eval_every;
  train.progress = options.progress;
  if (!split.validation.empty()) {
    train.validation_features = &parts[1].x;
    train.validation_targets = &parts[1].y;
  }
  absl::StatusOr<TrainHistory> history =
      TrainFullBatch<float>(&*mlp, parts[0].x, parts[0].y, train);
  if (!history.ok()) return history.status();

  InrExperimentResult result;
  result.train_mse = history->final_train_loss;
  result.history = *std::move(history);
  auto mse_on = [&](const Part& part) -> absl::StatusOr<double> {
    absl::StatusOr<RowMatrix<float>> pred = Predict<float>(*mlp, part.x);
    if (!pred.ok()) return pred.status();
    return MseLoss<float>(*pred, part.y);
  };
  if (!split.validation.empty()) {
    absl::StatusOr<double> mse = mse_on(parts[1]);
    if (!mse.ok()) return mse.status();
    result.validation_mse = *mse;
  }
  if (!split.test.empty()) {
    absl::StatusOr<double> mse = mse_on(parts[2]);
    if (!mse.ok()) return mse.status();
    result.test_mse = *mse;
  }
  if (options.predict_all) {
    absl::StatusOr<RowMatrix<float>> pred = Predict<float>(*mlp, features.cast<float>());
    if (!pred.ok()) return pred.status();
    result.prediction = pred->cast<double>();
  }
  return result;
}

#define GPE_INSTANTIATE_MLP(Scalar)                                                           \
  template class MlpT<Scalar>;                                                                \
  template class AdamT<Scalar>;                                                               \
  template absl::StatusOr<double> MseLoss<Scalar>(const RowMatrix<Scalar>&,                   \
                                                  const RowMatrix<Scalar>&, RowMatrix<Scalar>*); \
  template absl::StatusOr<RowMatrix<Scalar>> Predict<Scalar>(                                 \
      const MlpT<Scalar>&, const typename MlpT<Scalar>::MatrixRef&);                          \
  template absl::StatusOr<TrainHistory> TrainFullBatch<Scalar>(                               \
      MlpT<Scalar>*, const typename MlpT<Scalar>::MatrixRef&,                                 \
      const typename MlpT<Scalar>::MatrixRef&, const TrainOptionsT<Scalar>&);
GPE_INSTANTIATE_MLP(float)
GPE_INSTANTIATE_MLP(double)
#undef GPE_INSTANTIATE_MLP

}  // namespace inr
}  // namespace gpe
