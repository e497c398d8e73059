// The C ABI's INR training entry points (gpe/inr_training.h): the MLP trainer and Adam on
// the linear layer over inr/ (mlp.h, linear_gd.h). Every entry point runs under Guard.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Dense>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "c_api/include/gpe/inr_training.h"
#include "c_api/src/common/checks.h"
#include "c_api/src/common/error.h"
#include "c_api/src/common/matrices.h"
#include "c_api/src/common/tensor_view.h"
#include "c_api/src/inr/argument_error.h"
#include "inr/closed_form.h"
#include "inr/linear_gd.h"
#include "inr/mlp.h"

using gpe::c_api::AsArgumentError;
using gpe::c_api::CheckOutputShape;
using gpe::c_api::CheckStructSize;
using gpe::c_api::CopyMatrix;
using gpe::c_api::DType;
using gpe::c_api::Guard;
using gpe::c_api::MatrixContents;
using gpe::c_api::ReadFloat64Matrix;
using gpe::c_api::TensorView;
using gpe::c_api::ViewTensor;
using gpe::c_api::WriteMatrix;

namespace {

using RowMatrixXd = gpe::inr::RowMatrixXd;
template <typename Scalar>
using RowMatrix = gpe::inr::RowMatrix<Scalar>;
template <typename Scalar>
using Vector = gpe::inr::Vector<Scalar>;

const DType kF64[] = {DType::kFloat64};
const DType kI64[] = {DType::kInt64};
const DType kF32F64[] = {DType::kFloat32, DType::kFloat64};

// An optional float64 [n] output for a loss history: checked before the fit runs.
absl::StatusOr<std::unique_ptr<TensorView>> LossHistoryView(DLTensor* t, int64_t n) {
  if (t == nullptr) return std::unique_ptr<TensorView>();
  absl::StatusOr<TensorView> v = ViewTensor(t, "train_loss", 1, kF64);
  if (!v.ok()) return v.status();
  if (v->shape[0] != n) {
    return absl::InvalidArgumentError(absl::StrCat("train_loss must have shape [", n,
                                                   "] (one entry per step); got [", v->shape[0],
                                                   "]"));
  }
  if (absl::Status s = gpe::c_api::CheckNoSelfOverlap(*v, "train_loss"); !s.ok()) return s;
  return std::make_unique<TensorView>(*std::move(v));
}

// The linear fits' loss history, checked against the weights it is written after: both
// are outputs, and a history sharing w's memory would overwrite W (the inputs are read
// into copies first, so they may overlap either).
absl::StatusOr<std::unique_ptr<TensorView>> LinearHistoryView(DLTensor* train_loss, int64_t n,
                                                              DLTensor* w) {
  absl::StatusOr<std::unique_ptr<TensorView>> hv = LossHistoryView(train_loss, n);
  if (!hv.ok() || *hv == nullptr) return hv;
  absl::StatusOr<TensorView> wv = ViewTensor(w, "w", 2, kF64);  // shape checked before
  if (!wv.ok()) return wv.status();
  if (gpe::c_api::Overlaps(**hv, *wv)) {
    return absl::InvalidArgumentError("train_loss overlaps w: the two outputs need their own memory");
  }
  return hv;
}

void WriteHistory(const std::vector<double>& loss, const TensorView* v) {
  if (v == nullptr) return;
  for (size_t i = 0; i < loss.size(); ++i) v->typed<double>()[i * v->strides[0]] = loss[i];
}

// ---- MLP ----

constexpr int64_t kMaxMlpWidth = int64_t{1} << 24;
constexpr int64_t kMaxMlpHiddenLayers = 1024;
constexpr int64_t kMaxMlpParameters = (int64_t{1} << 31) - 1;

// The shape's parameter count without allocating a network (each layer below 2^49, at
// most 1025 layers: no overflow within the limits above).
int64_t ParameterCount(const gpe::inr::MlpShape& s) {
  int64_t count = 0;
  const int64_t layers = s.num_hidden_layers + 1;
  for (int64_t l = 0; l < layers; ++l) {
    const int64_t in = l == 0 ? s.input_dim : s.hidden_width;
    const int64_t out = l == layers - 1 ? s.output_dim : s.hidden_width;
    count += (in + 1) * out;
  }
  return count;
}

// A gpe_mlp_options pointer: not null, and a struct_size this library reads.
absl::Status CheckMlpOptions(const gpe_mlp_options* options) {
  if (options == nullptr) return absl::InvalidArgumentError("options is NULL");
  return CheckStructSize(options->struct_size,
                         offsetof(gpe_mlp_options, progress_user_data) + sizeof(void*),
                         sizeof(gpe_mlp_options), "gpe_mlp_options");
}

absl::StatusOr<gpe::inr::MlpShape> ReadMlpShape(const gpe_mlp_options* options, int64_t input_dim,
                                                int64_t output_dim) {
  if (absl::Status s = CheckMlpOptions(options); !s.ok()) return s;
  gpe::inr::MlpShape shape;
  shape.input_dim = input_dim;
  shape.output_dim = output_dim;
  shape.hidden_width = options->hidden_width;
  shape.num_hidden_layers = options->num_hidden_layers;
  // The limits of MlpT::Create (mlp.cc), checked here without allocating a network.
  for (const auto& [value, name] :
       {std::pair<int64_t, const char*>{input_dim, "input_dim"},
        {options->hidden_width, "hidden_width"},
        {output_dim, "output_dim"}}) {
    if (value < 1 || value > kMaxMlpWidth) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " must be in 1..", kMaxMlpWidth, "; got ", value));
    }
  }
  if (shape.num_hidden_layers < 0 || shape.num_hidden_layers > kMaxMlpHiddenLayers) {
    return absl::InvalidArgumentError(absl::StrCat("num_hidden_layers must be in 0..",
                                                   kMaxMlpHiddenLayers, "; got ",
                                                   shape.num_hidden_layers));
  }
  if (ParameterCount(shape) > kMaxMlpParameters) {
    return absl::InvalidArgumentError(absl::StrCat("the network has ", ParameterCount(shape),
                                                   " parameters; at most 2^31 - 1 are supported"));
  }
  return shape;
}

// A [P] parameter view of dtype `dtype` (checked against the network's count).
absl::StatusOr<TensorView> ParameterView(const DLTensor* t, const char* name, DType dtype,
                                         int64_t count) {
  const DType allowed[] = {dtype};
  absl::StatusOr<TensorView> v = ViewTensor(t, name, 1, allowed);
  if (!v.ok()) return v.status();
  if (v->shape[0] != count) {
    return absl::InvalidArgumentError(absl::StrCat(name, " must have shape [", count,
                                                   "] (the network's parameter count); got [",
                                                   v->shape[0], "]"));
  }
  return v;
}

template <typename Scalar>
Vector<Scalar> CopyVector(const TensorView& v) {
  Vector<Scalar> out(v.shape[0]);
  for (int64_t i = 0; i < v.shape[0]; ++i) out[i] = v.typed<const Scalar>()[i * v.strides[0]];
  return out;
}

template <typename Scalar>
void WriteVector(const Vector<Scalar>& x, const TensorView& v) {
  for (int64_t i = 0; i < x.size(); ++i) v.typed<Scalar>()[i * v.strides[0]] = x[i];
}

template <typename Scalar>
absl::Status MlpInit(const gpe::inr::MlpShape& shape, uint64_t seed, const TensorView& out) {
  absl::StatusOr<gpe::inr::MlpT<Scalar>> mlp = gpe::inr::MlpT<Scalar>::Create(shape, seed);
  if (!mlp.ok()) return mlp.status();
  WriteVector<Scalar>(mlp->parameters(), out);
  return absl::OkStatus();
}

// The number of evaluations TrainFullBatch (inr/mlp.cc) makes: after every `every`
// updates and after the last; once (at step 0) when there are no updates.
int64_t NumEvaluations(int64_t steps, int64_t every) {
  if (steps == 0 || every == 0) return 1;
  return steps / every + (steps % every != 0 ? 1 : 0);
}

// gpe_mlp_options.steps and .report_every, as gpe_inr_mlp_fit accepts them.
absl::Status CheckSchedule(const gpe_mlp_options& o) {
  if (o.steps < 0 || o.steps > (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat("steps must be in 0..2^31; got ", o.steps));
  }
  if (o.report_every < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("report_every must be >= 0; got ", o.report_every));
  }
  return absl::OkStatus();
}

// The checked views of a gpe_mlp_validation (all null without a validation set), and its
// validation progress callback (null when not given or not in the caller's struct).
struct ValidationViews {
  std::unique_ptr<TensorView> features, targets, steps, loss;
  gpe_validation_progress_callback progress = nullptr;
  void* progress_user_data = nullptr;
};

// gpe_mlp_validation's size in 0.6.0, before progress and progress_user_data.
constexpr size_t kMlpValidationV060Size = offsetof(gpe_mlp_validation, progress);
static_assert(kMlpValidationV060Size == offsetof(gpe_mlp_validation, loss) + sizeof(DLTensor*),
              "0.6.0's gpe_mlp_validation ended with loss");

// Reads `validation` (may be null) for a fit of `shape` in dtype `dt` with `evaluations`
// evaluations. `others` are the fit's other tensors, which the outputs must not overlap.
absl::StatusOr<ValidationViews> ReadValidation(const gpe_mlp_validation* validation, DType dt,
                                               const gpe::inr::MlpShape& shape,
                                               int64_t evaluations,
                                               std::initializer_list<const TensorView*> others) {
  ValidationViews out;
  if (validation == nullptr) return out;
  if (absl::Status s = CheckStructSize(validation->struct_size, kMlpValidationV060Size,
                                       sizeof(gpe_mlp_validation), "gpe_mlp_validation");
      !s.ok()) {
    return s;
  }
  const gpe_mlp_validation& v = *validation;
  // progress and progress_user_data were appended in 0.7.0: read them (as a pair) only
  // from a struct that has both; an older caller's struct ends before them.
  if (v.struct_size >= offsetof(gpe_mlp_validation, progress_user_data) + sizeof(void*)) {
    out.progress = v.progress;
    out.progress_user_data = v.progress_user_data;
  }
  if ((v.features == nullptr) != (v.targets == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "validation->features and validation->targets: give both or neither; got only ",
        v.features != nullptr ? "features" : "targets"));
  }
  if (v.features == nullptr) {
    if (v.steps != nullptr || v.loss != nullptr) {
      return absl::InvalidArgumentError(
          "validation->steps and validation->loss need a validation set (validation->features "
          "and validation->targets)");
    }
    if (out.progress != nullptr) {
      return absl::InvalidArgumentError(
          "validation->progress needs a validation set (validation->features and "
          "validation->targets): without one there is no validation loss to report");
    }
    return out;
  }
  const DType same[] = {dt};
  absl::StatusOr<TensorView> fv = ViewTensor(v.features, "validation->features", 2, same);
  if (!fv.ok()) return fv.status();
  absl::StatusOr<TensorView> tv = ViewTensor(v.targets, "validation->targets", 2, same);
  if (!tv.ok()) return tv.status();
  if (absl::Status s = gpe::c_api::CheckBroadcastCopy(*fv, "validation->features"); !s.ok()) {
    return s;
  }
  if (absl::Status s = gpe::c_api::CheckBroadcastCopy(*tv, "validation->targets"); !s.ok()) {
    return s;
  }
  if (fv->shape[0] < 1) {
    return absl::InvalidArgumentError("validation->features is empty (M = 0)");
  }
  if (tv->shape[0] != fv->shape[0]) {
    return absl::InvalidArgumentError(absl::StrCat("validation->targets has ", tv->shape[0],
                                                   " rows; validation->features has ",
                                                   fv->shape[0]));
  }
  if (fv->shape[1] != shape.input_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "validation->features has ", fv->shape[1], " columns; features has ", shape.input_dim));
  }
  if (tv->shape[1] != shape.output_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "validation->targets has ", tv->shape[1], " columns; targets has ", shape.output_dim));
  }
  out.features = std::make_unique<TensorView>(*std::move(fv));
  out.targets = std::make_unique<TensorView>(*std::move(tv));
  using OutputView = absl::StatusOr<std::unique_ptr<TensorView>>;
  const auto output = [&](DLTensor* t, const char* name,
                          absl::Span<const DType> dtype) -> OutputView {
    if (t == nullptr) return std::unique_ptr<TensorView>();
    absl::StatusOr<TensorView> view = ViewTensor(t, name, 1, dtype);
    if (!view.ok()) return view.status();
    if (view->shape[0] != evaluations) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, " must have shape [", evaluations,
          "] (one entry per evaluation: gpe_inr_mlp_num_evaluations); got [", view->shape[0],
          "]"));
    }
    if (absl::Status s = gpe::c_api::CheckNoSelfOverlap(*view, name); !s.ok()) return s;
    return std::make_unique<TensorView>(*std::move(view));
  };
  OutputView sv = output(v.steps, "validation->steps", kI64);
  if (!sv.ok()) return sv.status();
  out.steps = *std::move(sv);
  OutputView lv = output(v.loss, "validation->loss", kF64);
  if (!lv.ok()) return lv.status();
  out.loss = *std::move(lv);
  for (const auto& [o, name] : {std::pair<const TensorView*, const char*>{out.steps.get(),
                                                                          "validation->steps"},
                                {out.loss.get(), "validation->loss"}}) {
    if (o == nullptr) continue;
    std::vector<const TensorView*> rest(others);
    rest.push_back(out.features.get());
    rest.push_back(out.targets.get());
    if (o == out.steps.get()) rest.push_back(out.loss.get());
    for (const TensorView* r : rest) {
      if (r != nullptr && gpe::c_api::Overlaps(*o, *r)) {
        return absl::InvalidArgumentError(absl::StrCat(name, " overlaps another argument"));
      }
    }
  }
  return out;
}

template <typename Scalar>
absl::Status MlpFit(const gpe_mlp_options& o, const gpe::inr::MlpShape& shape,
                    const TensorView& features, const TensorView& targets,
                    const TensorView* initial, const TensorView& parameters,
                    const TensorView* history, double* final_loss,
                    const ValidationViews& validation) {
  const RowMatrix<Scalar> x = CopyMatrix<Scalar>(features);
  const RowMatrix<Scalar> y = CopyMatrix<Scalar>(targets);
  const bool has_validation = validation.features != nullptr;
  RowMatrix<Scalar> vx, vy;
  if (has_validation) {
    vx = CopyMatrix<Scalar>(*validation.features);
    vy = CopyMatrix<Scalar>(*validation.targets);
  }
  absl::StatusOr<gpe::inr::MlpT<Scalar>> mlp = gpe::inr::MlpT<Scalar>::Create(shape, o.seed);
  if (!mlp.ok()) return mlp.status();
  if (initial != nullptr) {
    Vector<Scalar> p = CopyVector<Scalar>(*initial);
    if (!p.allFinite()) {
      return absl::InvalidArgumentError("initial_parameters has a non-finite entry");
    }
    mlp->mutable_parameters() = std::move(p);
  }
  gpe::inr::TrainOptionsT<Scalar> train;
  train.steps = o.steps;
  train.adam.learning_rate = o.learning_rate;
  train.adam.beta1 = o.beta1;
  train.adam.beta2 = o.beta2;
  train.adam.epsilon = o.epsilon;
  if (has_validation) {
    train.validation_features = &vx;
    train.validation_targets = &vy;
    train.eval_every = o.report_every;
  }
  // Both callbacks see each evaluation, options->progress first (gpe.h); the validation
  // one gets the loss the trainer just appended to its history, so it equals
  // validation->loss[k] bit for bit.
  const gpe_progress_callback fn = o.progress;
  void* const user = o.progress_user_data;
  const gpe_validation_progress_callback vfn = validation.progress;
  void* const vuser = validation.progress_user_data;
  if (fn != nullptr || vfn != nullptr) {
    train.eval_every = o.report_every;
    train.progress = [fn, user, vfn, vuser](const gpe::inr::TrainProgress& p) {
      if (fn != nullptr) fn(user, p.step, p.train_loss);
      // ReadValidation admits vfn only with a validation set, so the loss is present.
      if (vfn != nullptr && p.validation_loss.has_value()) {
        vfn(vuser, p.step, p.train_loss, *p.validation_loss);
      }
    };
  }
  absl::StatusOr<gpe::inr::TrainHistory> h =
      gpe::inr::TrainFullBatch<Scalar>(&*mlp, x, y, train);
  if (!h.ok()) return AsArgumentError(h.status());
  if (has_validation && static_cast<int64_t>(h->validation_loss.size()) !=
                            NumEvaluations(o.steps, o.report_every)) {
    return absl::InternalError(absl::StrCat("the trainer made ", h->validation_loss.size(),
                                            " validation evaluations; expected ",
                                            NumEvaluations(o.steps, o.report_every)));
  }
  WriteVector<Scalar>(mlp->parameters(), parameters);
  WriteHistory(h->train_loss, history);
  if (final_loss != nullptr) *final_loss = h->final_train_loss;
  if (const TensorView* v = validation.steps.get(); v != nullptr) {
    for (size_t i = 0; i < h->validation_steps.size(); ++i) {
      v->typed<int64_t>()[i * v->strides[0]] = h->validation_steps[i];
    }
  }
  WriteHistory(h->validation_loss, validation.loss.get());
  return absl::OkStatus();
}

template <typename Scalar>
absl::Status MlpPredict(const gpe::inr::MlpShape& shape, const TensorView& parameters,
                        const TensorView& features, DLTensor* out) {
  absl::StatusOr<gpe::inr::MlpT<Scalar>> mlp = gpe::inr::MlpT<Scalar>::Create(shape, 0);
  if (!mlp.ok()) return mlp.status();
  Vector<Scalar> p = CopyVector<Scalar>(parameters);
  if (!p.allFinite()) return absl::InvalidArgumentError("parameters has a non-finite entry");
  mlp->mutable_parameters() = std::move(p);
  // The batch's size before its copy (Predict checks it too, after): a broadcast
  // features tensor of 2^27 rows cost 1 GiB before "x must have 1..2^24 rows".
  constexpr int64_t kMaxRows = int64_t{1} << 24;
  if (features.shape[0] < 1 || features.shape[0] > kMaxRows) {
    return absl::InvalidArgumentError(absl::StrCat("features must have 1..", kMaxRows,
                                                   " rows, got ", features.shape[0]));
  }
  if (absl::Status s = gpe::c_api::CheckBroadcastCopy(features, "features"); !s.ok()) return s;
  const RowMatrix<Scalar> x = CopyMatrix<Scalar>(features);
  absl::StatusOr<RowMatrix<Scalar>> y = gpe::inr::Predict<Scalar>(*mlp, x);
  if (!y.ok()) return y.status();
  return WriteMatrix<Scalar>(*y, out, "out", {&parameters, &features});
}

// ---- Linear Adam ----

absl::StatusOr<gpe::inr::LinearAdamOptions> ReadLinearAdamOptions(
    const gpe_linear_adam_options* options) {
  if (options == nullptr) return absl::InvalidArgumentError("options is NULL");
  if (absl::Status s = CheckStructSize(
          options->struct_size,
          offsetof(gpe_linear_adam_options, progress_user_data) + sizeof(void*),
          sizeof(gpe_linear_adam_options), "gpe_linear_adam_options");
      !s.ok()) {
    return s;
  }
  const gpe_linear_adam_options& o = *options;
  if (o.steps < 1 || o.steps > (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat("steps must be in 1..2^31; got ", o.steps));
  }
  gpe::inr::LinearAdamOptions a;
  a.steps = o.steps;
  a.learning_rate = o.learning_rate;
  a.final_learning_rate = o.final_learning_rate;
  a.beta1 = o.beta1;
  a.beta2 = o.beta2;
  a.epsilon = o.epsilon;
  a.report_every = o.report_every;
  if (o.progress != nullptr) {
    const gpe_progress_callback fn = o.progress;
    void* user = o.progress_user_data;
    a.progress = [fn, user](int64_t step, double loss) { fn(user, step, loss); };
  }
  return a;
}

// Writes a linear fit's outputs (history checked beforehand).
absl::Status WriteLinearFit(const gpe::inr::LinearAdamFit& fit, DLTensor* w,
                            const TensorView* history, double* final_loss) {
  if (absl::Status s = WriteMatrix<double>(fit.weights, w, "w"); !s.ok()) return s;
  WriteHistory(fit.loss, history);
  if (final_loss != nullptr) *final_loss = fit.final_loss;
  return absl::OkStatus();
}

}  // namespace

extern "C" {

// ---- MLP ----

gpe_status gpe_inr_mlp_num_parameters(const gpe_mlp_options* options, int64_t input_dim,
                                      int64_t output_dim, int64_t* out) {
  return Guard([&]() -> absl::Status {
    if (out == nullptr) return absl::InvalidArgumentError("out is NULL");
    absl::StatusOr<gpe::inr::MlpShape> shape = ReadMlpShape(options, input_dim, output_dim);
    if (!shape.ok()) return shape.status();
    *out = ParameterCount(*shape);
    return absl::OkStatus();
  });
}

gpe_status gpe_inr_mlp_init(const gpe_mlp_options* options, int64_t input_dim,
                            int64_t output_dim, DLTensor* parameters) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<gpe::inr::MlpShape> shape = ReadMlpShape(options, input_dim, output_dim);
    if (!shape.ok()) return shape.status();
    absl::StatusOr<TensorView> probe = ViewTensor(parameters, "parameters", 1, kF32F64);
    if (!probe.ok()) return probe.status();
    absl::StatusOr<TensorView> v =
        ParameterView(parameters, "parameters", probe->dtype, ParameterCount(*shape));
    if (!v.ok()) return v.status();
    if (absl::Status s = gpe::c_api::CheckNoSelfOverlap(*v, "parameters"); !s.ok()) return s;
    return v->dtype == DType::kFloat32 ? MlpInit<float>(*shape, options->seed, *v)
                                       : MlpInit<double>(*shape, options->seed, *v);
  });
}

gpe_status gpe_inr_mlp_num_evaluations(const gpe_mlp_options* options, int64_t* out) {
  return Guard([&]() -> absl::Status {
    if (out == nullptr) return absl::InvalidArgumentError("out is NULL");
    if (absl::Status s = CheckMlpOptions(options); !s.ok()) return s;
    if (absl::Status s = CheckSchedule(*options); !s.ok()) return s;
    *out = NumEvaluations(options->steps, options->report_every);
    return absl::OkStatus();
  });
}

gpe_status gpe_inr_mlp_fit(const gpe_mlp_options* options, const DLTensor* features,
                           const DLTensor* targets, const DLTensor* initial_parameters,
                           DLTensor* parameters, DLTensor* train_loss, double* final_loss) {
  return gpe_inr_mlp_fit_v2(options, features, targets, initial_parameters, parameters,
                            train_loss, final_loss, nullptr);
}

gpe_status gpe_inr_mlp_fit_v2(const gpe_mlp_options* options, const DLTensor* features,
                              const DLTensor* targets, const DLTensor* initial_parameters,
                              DLTensor* parameters, DLTensor* train_loss, double* final_loss,
                              const gpe_mlp_validation* validation) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<TensorView> fv = ViewTensor(features, "features", 2, kF32F64);
    if (!fv.ok()) return fv.status();
    const DType dt = fv->dtype;
    const DType same[] = {dt};
    absl::StatusOr<TensorView> tv = ViewTensor(targets, "targets", 2, same);
    if (!tv.ok()) return tv.status();
    if (absl::Status s = gpe::c_api::CheckBroadcastCopy(*fv, "features"); !s.ok()) return s;
    if (absl::Status s = gpe::c_api::CheckBroadcastCopy(*tv, "targets"); !s.ok()) return s;
    if (fv->shape[0] < 1) return absl::InvalidArgumentError("features is empty (N = 0)");
    if (tv->shape[0] != fv->shape[0]) {
      return absl::InvalidArgumentError(absl::StrCat("targets has ", tv->shape[0],
                                                     " rows; features has ", fv->shape[0]));
    }
    absl::StatusOr<gpe::inr::MlpShape> shape =
        ReadMlpShape(options, fv->shape[1], tv->shape[1]);
    if (!shape.ok()) return shape.status();
    const int64_t count = ParameterCount(*shape);
    std::unique_ptr<TensorView> init;
    if (initial_parameters != nullptr) {
      absl::StatusOr<TensorView> iv =
          ParameterView(initial_parameters, "initial_parameters", dt, count);
      if (!iv.ok()) return iv.status();
      init = std::make_unique<TensorView>(*std::move(iv));
    }
    absl::StatusOr<TensorView> pv = ParameterView(parameters, "parameters", dt, count);
    if (!pv.ok()) return pv.status();
    if (absl::Status s = gpe::c_api::CheckNoSelfOverlap(*pv, "parameters"); !s.ok()) return s;
    if (absl::Status s = gpe::c_api::CheckDisjoint(
            {{&*pv, "parameters"}, {&*fv, "features"}, {&*tv, "targets"}});
        !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckSchedule(*options); !s.ok()) return s;
    absl::StatusOr<std::unique_ptr<TensorView>> hv = LossHistoryView(train_loss, options->steps);
    if (!hv.ok()) return hv.status();
    if (*hv != nullptr && (gpe::c_api::Overlaps(**hv, *pv) || gpe::c_api::Overlaps(**hv, *fv) ||
                           gpe::c_api::Overlaps(**hv, *tv))) {
      return absl::InvalidArgumentError("train_loss overlaps another argument");
    }
    absl::StatusOr<ValidationViews> vv = ReadValidation(
        validation, dt, *shape, NumEvaluations(options->steps, options->report_every),
        {&*pv, &*fv, &*tv, init.get(), hv->get()});
    if (!vv.ok()) return vv.status();
    return dt == DType::kFloat32
               ? MlpFit<float>(*options, *shape, *fv, *tv, init.get(), *pv, hv->get(), final_loss,
                               *vv)
               : MlpFit<double>(*options, *shape, *fv, *tv, init.get(), *pv, hv->get(),
                                final_loss, *vv);
  });
}

gpe_status gpe_inr_mlp_predict(const gpe_mlp_options* options, const DLTensor* parameters,
                               const DLTensor* features, DLTensor* out) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<TensorView> fv = ViewTensor(features, "features", 2, kF32F64);
    if (!fv.ok()) return fv.status();
    const DType same[] = {fv->dtype};
    absl::StatusOr<TensorView> ov = ViewTensor(out, "out", 2, same);
    if (!ov.ok()) return ov.status();
    if (fv->shape[0] < 1) return absl::InvalidArgumentError("features is empty (N = 0)");
    absl::StatusOr<gpe::inr::MlpShape> shape = ReadMlpShape(options, fv->shape[1], ov->shape[1]);
    if (!shape.ok()) return shape.status();
    absl::StatusOr<TensorView> pv =
        ParameterView(parameters, "parameters", fv->dtype, ParameterCount(*shape));
    if (!pv.ok()) return pv.status();
    return fv->dtype == DType::kFloat32 ? MlpPredict<float>(*shape, *pv, *fv, out)
                                        : MlpPredict<double>(*shape, *pv, *fv, out);
  });
}

// ---- Linear Adam ----

gpe_status gpe_inr_fit_dense_adam(const gpe_linear_adam_options* options, const DLTensor* features,
                                  const DLTensor* targets, DLTensor* w, DLTensor* train_loss,
                                  double* final_loss) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<gpe::inr::LinearAdamOptions> o = ReadLinearAdamOptions(options);
    if (!o.ok()) return o.status();
    absl::StatusOr<RowMatrixXd> phi =
        ReadFloat64Matrix(features, "features", MatrixContents::kFiniteNonEmpty);
    if (!phi.ok()) return phi.status();
    absl::StatusOr<RowMatrixXd> y =
        ReadFloat64Matrix(targets, "targets", MatrixContents::kFiniteNonEmpty);
    if (!y.ok()) return y.status();
    if (y->rows() != phi->rows()) {
      return absl::InvalidArgumentError(absl::StrCat("targets has ", y->rows(),
                                                     " rows; features has ", phi->rows()));
    }
    if (absl::Status s = CheckOutputShape(w, "w", phi->cols(), y->cols()); !s.ok()) return s;
    absl::StatusOr<std::unique_ptr<TensorView>> hv = LinearHistoryView(train_loss, o->steps, w);
    if (!hv.ok()) return hv.status();
    absl::StatusOr<gpe::inr::LinearAdamFit> fit = gpe::inr::FitDenseAdam(*phi, *y, *o);
    if (!fit.ok()) return AsArgumentError(fit.status());
    return WriteLinearFit(*fit, w, hv->get(), final_loss);
  });
}

gpe_status gpe_inr_fit_separable_adam_2d(const gpe_linear_adam_options* options,
                                         const DLTensor* psi_y, const DLTensor* psi_x,
                                         const DLTensor* image, DLTensor* w, DLTensor* train_loss,
                                         double* final_loss) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<gpe::inr::LinearAdamOptions> o = ReadLinearAdamOptions(options);
    if (!o.ok()) return o.status();
    absl::StatusOr<RowMatrixXd> py =
        ReadFloat64Matrix(psi_y, "psi_y", MatrixContents::kFiniteNonEmpty);
    if (!py.ok()) return py.status();
    absl::StatusOr<RowMatrixXd> px =
        ReadFloat64Matrix(psi_x, "psi_x", MatrixContents::kFiniteNonEmpty);
    if (!px.ok()) return px.status();
    absl::StatusOr<RowMatrixXd> s =
        ReadFloat64Matrix(image, "image", MatrixContents::kFiniteNonEmpty);
    if (!s.ok()) return s.status();
    if (s->rows() != py->rows() || s->cols() != px->rows()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "image must have shape [", py->rows(), ", ", px->rows(), "] (psi_y's rows, psi_x's rows); got [",
          s->rows(), ", ", s->cols(), "]"));
    }
    if (absl::Status st = CheckOutputShape(w, "w", py->cols(), px->cols()); !st.ok()) return st;
    absl::StatusOr<std::unique_ptr<TensorView>> hv = LinearHistoryView(train_loss, o->steps, w);
    if (!hv.ok()) return hv.status();
    absl::StatusOr<gpe::inr::LinearAdamFit> fit =
        gpe::inr::FitSeparableAdam2D(*py, *px, *s, *o);
    if (!fit.ok()) return AsArgumentError(fit.status());
    return WriteLinearFit(*fit, w, hv->get(), final_loss);
  });
}

}  // extern "C"
