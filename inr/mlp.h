// A small fully connected ReLU network, the Adam optimiser and a full-batch trainer for
// the "encoding + deep network" baselines of coordinate networks (Lim et al., appendix
// D.2: 3 hidden layers of width 128, ReLU, Adam, 500 full-batch steps, MSE loss).
//
// Conventions:
// - Batches are row-major N x D matrices, one row per point (as encodings/coordinate/).
// - Layer l maps H_l (N x fan_in) to Z_l = H_l W_l + 1 b_l (W_l: fan_in x fan_out,
//   b_l: 1 x fan_out); hidden layers apply ReLU, the output layer is linear.
// - Parameters live in ONE flat vector, layer by layer: W_0 (row-major), b_0, W_1, b_1,
//   ... Gradients use the same layout, so the optimiser works on flat vectors.
// - Initialisation: PyTorch's nn.Linear default, W and b ~ U(-1/sqrt(fan_in),
//   1/sqrt(fan_in)) (Kaiming-uniform with a = sqrt(5)), drawn from a seeded 64-bit
//   Mersenne Twister through a library-independent [0, 1) map, so a seed gives the same
//   network on every platform.
// - Scalar type: the templates take float or double. Training uses float32 (Mlp): the
//   products dominate and run at twice the float64 throughput; the double instantiation
//   (MlpD) exists so gradients can be checked against finite differences in float64.
//   Products go through OpenBLAS's gemm (~90% of the time), which picks its kernel for
//   the CPU at load time; where it misdetects the CPU (it takes the development VM for a
//   Prescott) set OPENBLAS_CORETYPE, a 2-3x speed-up (numbers in mlp_benchmark.cc); where
//   the environment sets an AVX2 family on an AVX-512 CPU, unset it (Zen 5: Haswell's
//   kernels ~200 GFLOP/s, Cooperlake's ~360, 2 threads).
//   A Lim-sized run (3277 points, 32 -> 3 x 128 -> 1, 500 steps) is ~350 GFLOP.
// - Loss: MSE = mean over all N x out entries of (prediction - target)^2 (PyTorch's
//   nn.MSELoss default; for a 2-channel vector field this is half the squared-norm
//   form of Lim et al.'s L(theta)).
// - Bad input (shape mismatch, zero sizes, non-finite values or rates) returns a
//   non-OK status, never a crash.
#ifndef INR_MLP_H_
#define INR_MLP_H_

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "encodings/coordinate/encoder.h"
#include "inr/data.h"

namespace gpe {
namespace inr {

using RowMatrixXd = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename Scalar>
using RowMatrix = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename Scalar>
using Vector = Eigen::Matrix<Scalar, Eigen::Dynamic, 1>;

struct MlpShape {
  int64_t input_dim = 2;
  int64_t hidden_width = 128;
  int64_t num_hidden_layers = 3;  // 0: a single linear layer input -> output
  int64_t output_dim = 1;
};

// Activations kept by a forward pass for the backward pass: inputs[l] is H_l, the input
// of layer l (inputs[0] is the batch, inputs[l] = ReLU(Z_{l-1}) for l >= 1). After
// ForwardBorrowing, inputs[0] is empty and `batch` views the caller's batch instead.
// Buffers keep their memory between calls, so a training loop that passes the same cache
// to every step allocates nothing after the first (a 64 MiB activation mapped afresh each
// step costs 16k page faults).
template <typename Scalar>
struct MlpCache {
  std::vector<RowMatrix<Scalar>> inputs;
  // Set by ForwardBorrowing (null after Forward): the caller's batch, batch_rows x
  // batch_cols, rows batch_stride elements apart.
  const Scalar* batch = nullptr;
  int64_t batch_rows = 0, batch_cols = 0, batch_stride = 0;
  // The backward pass's dL/dZ, walking down (two buffers, swapped layer by layer).
  mutable RowMatrix<Scalar> grad[2];
};

template <typename Scalar>
class MlpT {
 public:
  using Matrix = RowMatrix<Scalar>;
  using MatrixRef = Eigen::Ref<const Matrix>;
  using WeightMap = Eigen::Map<Matrix>;
  using ConstWeightMap = Eigen::Map<const Matrix>;

  // All sizes >= 1 (num_hidden_layers >= 0) and the parameter count below 2^31.
  static absl::StatusOr<MlpT> Create(const MlpShape& shape, uint64_t seed);

  const MlpShape& shape() const { return shape_; }
  int64_t num_layers() const { return shape_.num_hidden_layers + 1; }
  int64_t fan_in(int64_t layer) const;
  int64_t fan_out(int64_t layer) const;
  int64_t num_parameters() const { return parameters_.size(); }

  // Flat parameters (layout in the file comment). Writable, e.g. for an optimiser.
  const Vector<Scalar>& parameters() const { return parameters_; }
  Vector<Scalar>& mutable_parameters() { return parameters_; }
  // Views of layer `layer`'s weight (fan_in x fan_out) and bias (1 x fan_out).
  WeightMap weight(int64_t layer);
  ConstWeightMap weight(int64_t layer) const;
  WeightMap bias(int64_t layer);
  ConstWeightMap bias(int64_t layer) const;
  // Offsets (in elements) of a layer's weight and bias in the flat vector.
  int64_t weight_offset(int64_t layer) const { return offsets_[layer]; }
  int64_t bias_offset(int64_t layer) const {
    return offsets_[layer] + fan_in(layer) * fan_out(layer);
  }

  // x: N x input_dim, N >= 1, finite. Returns N x output_dim. `cache` (optional) receives
  // the activations the backward pass needs.
  absl::StatusOr<Matrix> Forward(const MatrixRef& x, MlpCache<Scalar>* cache = nullptr) const;
  // As Forward with a cache, but the cache views x instead of copying it (TrainFullBatch:
  // the features stay put for the whole run, and copying them cost a pass over the
  // largest matrix each step). x must stay alive and unchanged until the Backward that
  // reads this cache.
  absl::StatusOr<Matrix> ForwardBorrowing(const MatrixRef& x, MlpCache<Scalar>* cache) const;

  // Reverse pass for dL/dY = grad_output (N x output_dim, the N of the cached forward).
  // Writes dL/dparameters (flat layout) into *grad_parameters (resized) and, if
  // grad_input is not null, dL/dX (N x input_dim) into *grad_input.
  absl::Status Backward(const MlpCache<Scalar>& cache, const MatrixRef& grad_output,
                        Vector<Scalar>* grad_parameters, Matrix* grad_input = nullptr) const;

 private:
  // The layers on a checked batch x (n rows, ldx apart); activations into c->inputs[1..].
  Matrix ForwardLayers(const Scalar* x, int64_t n, int64_t ldx, MlpCache<Scalar>* c) const;
  MlpT(const MlpShape& shape, std::vector<int64_t> offsets, int64_t count)
      : shape_(shape), offsets_(std::move(offsets)), parameters_(count) {}
  MlpShape shape_;
  std::vector<int64_t> offsets_;  // per layer, start of W_l in parameters_
  Vector<Scalar> parameters_;
};

using Mlp = MlpT<float>;
using MlpD = MlpT<double>;

// Mean over all entries of (prediction - target)^2, accumulated in double. When `grad`
// is not null it receives dMSE/dprediction = 2 (prediction - target) / (N out).
// Shapes must match and be non-empty.
template <typename Scalar>
absl::StatusOr<double> MseLoss(const RowMatrix<Scalar>& prediction,
                               const RowMatrix<Scalar>& target, RowMatrix<Scalar>* grad = nullptr);

struct AdamOptions {
  double learning_rate = 1e-3;  // finite, > 0
  double beta1 = 0.9;           // in [0, 1)
  double beta2 = 0.999;         // in [0, 1)
  double epsilon = 1e-8;        // finite, > 0
};

// Adam (Kingma & Ba 2015, Algorithm 1): with t the step count after increment,
//   m <- b1 m + (1 - b1) g,  v <- b2 v + (1 - b2) g^2,
//   p <- p - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
// (eps outside the square root, as PyTorch's torch.optim.Adam.)
template <typename Scalar>
class AdamT {
 public:
  static absl::StatusOr<AdamT> Create(int64_t num_parameters, const AdamOptions& options);
  // One update of `parameters` in place. Sizes must equal num_parameters; the gradient
  // must be finite.
  absl::Status Step(const Vector<Scalar>& gradient, Vector<Scalar>* parameters);
  int64_t step_count() const { return step_; }
  // For learning-rate schedules: later steps use `learning_rate` (finite, > 0; others
  // are ignored and leave the rate unchanged).
  void set_learning_rate(double learning_rate) {
    if (std::isfinite(learning_rate) && learning_rate > 0) options_.learning_rate = learning_rate;
  }
  double learning_rate() const { return options_.learning_rate; }
  const Vector<Scalar>& first_moment() const { return m_; }
  const Vector<Scalar>& second_moment() const { return v_; }

 private:
  AdamT(int64_t n, const AdamOptions& options)
      : options_(options), m_(Vector<Scalar>::Zero(n)), v_(Vector<Scalar>::Zero(n)) {}
  AdamOptions options_;
  int64_t step_ = 0;
  Vector<Scalar> m_, v_;
};

using Adam = AdamT<float>;

// What the progress callback sees: after `step` updates (step = 1..steps), the training
// loss of the forward pass that produced the last update's gradient, and the validation
// loss of the network after the update when a validation set was given.
struct TrainProgress {
  int64_t step = 0;
  double train_loss = 0.0;
  std::optional<double> validation_loss;
};

template <typename Scalar>
struct TrainOptionsT {
  int64_t steps = 500;  // >= 0
  AdamOptions adam;
  // Optional validation set (both or neither); evaluated every `eval_every` steps and
  // after the last step.
  const RowMatrix<Scalar>* validation_features = nullptr;
  const RowMatrix<Scalar>* validation_targets = nullptr;
  int64_t eval_every = 0;  // 0: evaluate (and report) only after the last step
  std::function<void(const TrainProgress&)> progress;  // called at each evaluation
};

struct TrainHistory {
  // train_loss[s] = MSE on the training set before update s + 1 (length = steps).
  std::vector<double> train_loss;
  // Evaluation points: validation_loss[k] after validation_steps[k] updates.
  std::vector<int64_t> validation_steps;
  std::vector<double> validation_loss;
  double final_train_loss = 0.0;  // MSE on the training set after the last update
};

// Full-batch training with Adam on the MSE: every step uses all training rows.
// features: N x input_dim, targets: N x output_dim, finite. A non-finite training loss
// (divergence at too large a learning rate) stops training with FailedPrecondition.
template <typename Scalar>
absl::StatusOr<TrainHistory> TrainFullBatch(MlpT<Scalar>* mlp,
                                            const typename MlpT<Scalar>::MatrixRef& features,
                                            const typename MlpT<Scalar>::MatrixRef& targets,
                                            const TrainOptionsT<Scalar>& options);

using TrainOptions = TrainOptionsT<float>;

// The network's output on `features` (the forward pass without a cache).
template <typename Scalar>
absl::StatusOr<RowMatrix<Scalar>> Predict(const MlpT<Scalar>& mlp,
                                          const typename MlpT<Scalar>::MatrixRef& features);

// ---- Encoding + MLP experiments (Lim et al., appendix D.2) ----

// The n^2 x 2 pixel-centre coordinates (x, y) of data.h's n x n grid, row i * n + j
// holding (x_j, y_i): the row-major pixel order of RandomSplit's indices.
RowMatrixXd GridCoordinates(int64_t n);
// Channels (equal-sized images) as an N x C value matrix in row-major pixel order.
absl::StatusOr<RowMatrixXd> ChannelsToValues(const std::vector<ImageMatrix>& channels);

struct InrExperimentOptions {
  int64_t hidden_width = 128;
  int64_t num_hidden_layers = 3;
  int64_t steps = 500;
  double learning_rate = 1e-3;
  uint64_t seed = 0;        // network initialisation
  int64_t eval_every = 0;   // validation curve in the history (0: final only)
  std::function<void(const TrainProgress&)> progress;
  bool predict_all = false;  // also return the network's output on every coordinate
};

struct InrExperimentResult {
  double train_mse = 0.0;
  std::optional<double> validation_mse;  // empty when the split has no validation set
  std::optional<double> test_mse;        // empty when the split has no test set
  TrainHistory history;
  std::optional<RowMatrixXd> prediction;  // N x C on all coordinates, when predict_all
};

// Encodes `coordinates` (N x D) with `encoder` (nullptr: identity, the "no positional
// encoding" baseline), trains an MLP (input = encoder output dim, output = values.cols())
// on split.train with full-batch Adam, and reports the MSE (float32 network, errors
// accumulated in double) on each part of the split. values: N x C, finite. Split
// indices must be in [0, N); train must be non-empty.
absl::StatusOr<InrExperimentResult> RunInrExperiment(const encodings::CoordinateEncoder* encoder,
                                                     const encodings::PointsRef& coordinates,
                                                     const encodings::PointsRef& values,
                                                     const Split& split,
                                                     const InrExperimentOptions& options);

}  // namespace inr
}  // namespace gpe

#endif  // INR_MLP_H_
