// The C ABI's embedder analysis (gpe/analysis.h): stable rank and distance preservation,
// of given matrices or in the papers' closed forms, over encodings/analysis/. Every entry
// point runs under Guard.
#include <cstdint>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "c_api/include/gpe/analysis.h"
#include "c_api/src/common/checks.h"
#include "c_api/src/common/error.h"
#include "c_api/src/common/matrices.h"
#include "c_api/src/common/tensor_view.h"
#include "encodings/analysis/distance_preservation.h"
#include "encodings/analysis/stable_rank.h"

namespace enc = gpe::encodings;
using gpe::c_api::CopyMatrix;
using gpe::c_api::DType;
using gpe::c_api::Guard;
using gpe::c_api::MatrixContents;
using gpe::c_api::OutputMatrix;
using gpe::c_api::ReadFloat64Matrix;
using gpe::c_api::ShapeString;
using gpe::c_api::TensorView;
using gpe::c_api::ViewTensor;
using gpe::c_api::WriteMatrix;

namespace {

using RowMatrixXd = gpe::c_api::RowMatrix<double>;
const DType kF64[] = {DType::kFloat64};

absl::Status CheckEmbedder(int32_t embedder) {
  if (embedder < GPE_EMBEDDER_GAUSSIAN || embedder > GPE_EMBEDDER_RFF) {
    return absl::InvalidArgumentError(
        absl::StrCat("embedder must be one of GPE_EMBEDDER_* (0..3); got ", embedder));
  }
  return absl::OkStatus();
}

}  // namespace

extern "C" {

gpe_status gpe_stable_rank(const DLTensor* matrix, double* out) {
  return Guard([&]() -> absl::Status {
    if (out == nullptr) return absl::InvalidArgumentError("out is NULL");
    absl::StatusOr<RowMatrixXd> m = ReadFloat64Matrix(matrix, "matrix", MatrixContents::kAny);
    if (!m.ok()) return m.status();
    absl::StatusOr<double> r = gpe::encodings::StableRank(*m);
    if (!r.ok()) return r.status();
    *out = *r;
    return absl::OkStatus();
  });
}

gpe_status gpe_embedded_distance_matrix(const DLTensor* features, double sample_spacing,
                                        DLTensor* out) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<TensorView> f = ViewTensor(features, "features", 2, kF64);
    if (!f.ok()) return f.status();
    if (f->shape[0] < 1 || f->shape[1] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("features must be [N, F] with N, F >= 1; got ", ShapeString(*f)));
    }
    if (f->shape[0] > 65536) {
      return absl::OutOfRangeError(absl::StrCat(
          "features has ", f->shape[0], " rows; the N x N output is limited to N <= 65536"));
    }
    absl::StatusOr<TensorView> o =
        OutputMatrix(out, "out", f->shape[0], f->shape[0], &*f, "features");
    if (!o.ok()) return o.status();
    if (absl::Status s = gpe::c_api::CheckBroadcastCopy(*f, "features"); !s.ok()) return s;
    absl::StatusOr<Eigen::MatrixXd> d =
        enc::EmbeddedDistanceMatrix(CopyMatrix<double>(*f), sample_spacing);
    if (!d.ok()) return d.status();
    WriteMatrix(*d, *o);
    return absl::OkStatus();
  });
}

gpe_status gpe_embedder_stable_rank(int32_t embedder, double parameter, int64_t num_points,
                                    double* out) {
  return Guard([&]() -> absl::Status {
    if (out == nullptr) return absl::InvalidArgumentError("out is NULL");
    if (absl::Status s = CheckEmbedder(embedder); !s.ok()) return s;
    absl::StatusOr<double> r = absl::InternalError("unset");
    switch (embedder) {
      case GPE_EMBEDDER_GAUSSIAN: r = enc::GaussianEmbedderStableRank(parameter, num_points); break;
      case GPE_EMBEDDER_RECTANGLE: r = enc::RectangleEmbedderStableRank(parameter, num_points); break;
      case GPE_EMBEDDER_TRIANGLE: r = enc::TriangleEmbedderStableRank(parameter, num_points); break;
      default: r = enc::RffStableRank(parameter, num_points); break;
    }
    if (!r.ok()) return r.status();
    *out = *r;
    return absl::OkStatus();
  });
}

gpe_status gpe_embedder_distance(int32_t embedder, double parameter, double delta, double* out) {
  return Guard([&]() -> absl::Status {
    if (out == nullptr) return absl::InvalidArgumentError("out is NULL");
    if (absl::Status s = CheckEmbedder(embedder); !s.ok()) return s;
    absl::StatusOr<double> r = absl::InternalError("unset");
    switch (embedder) {
      case GPE_EMBEDDER_GAUSSIAN: r = enc::GaussianEmbedderDistance(parameter, delta); break;
      case GPE_EMBEDDER_RECTANGLE: r = enc::RectangleEmbedderDistance(parameter, delta); break;
      case GPE_EMBEDDER_TRIANGLE: r = enc::TriangleEmbedderDistance(parameter, delta); break;
      default: r = enc::RffExpectedDistance(parameter, delta); break;
    }
    if (!r.ok()) return r.status();
    *out = *r;
    return absl::OkStatus();
  });
}

}  // extern "C"
