// The C ABI's coordinate-encoding, analysis and INR entry points (gpe.h, "Coordinate
// encodings, analysis and INR solvers").
#include <cmath>
#include <cstddef>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "c_api/checks.h"
#include "c_api/error.h"
#include "c_api/include/gpe/gpe.h"
#include "c_api/tensor_view.h"
#include "encodings/analysis/stable_rank.h"
#include "encodings/coordinate/shifted_basis.h"
#include "inr/closed_form.h"

using gpe::c_api::CheckStructSize;
using gpe::c_api::DType;
using gpe::c_api::Guard;
using gpe::c_api::TensorView;
using gpe::c_api::ViewTensor;

namespace {

using RowMatrixXd = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
const DType kF64[] = {DType::kFloat64};

// A validated float64 matrix view copied into a compact row-major Eigen matrix.
absl::StatusOr<RowMatrixXd> ReadMatrix(const DLTensor* t, const char* name) {
  absl::StatusOr<TensorView> v = ViewTensor(t, name, 2, kF64);
  if (!v.ok()) return v.status();
  RowMatrixXd m(v->shape[0], v->shape[1]);
  const double* src = v->typed<const double>();
  // An empty matrix may still have billions of rows (e.g. [2^33, 0]): no row loop then.
  if (m.size() == 0) return m;
  for (int64_t i = 0; i < m.rows(); ++i) {
    for (int64_t j = 0; j < m.cols(); ++j) m(i, j) = src[i * v->strides[0] + j * v->strides[1]];
  }
  return m;
}

// Writes m into a float64 [rows, cols] output view, checking its shape.
absl::Status WriteMatrix(const RowMatrixXd& m, DLTensor* t, const char* name) {
  absl::StatusOr<TensorView> v = ViewTensor(t, name, 2, kF64);
  if (!v.ok()) return v.status();
  if (v->shape[0] != m.rows() || v->shape[1] != m.cols()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " must have shape [", m.rows(), ", ",
                                                   m.cols(), "]; got [", v->shape[0], ", ",
                                                   v->shape[1], "]"));
  }
  if (absl::Status s = gpe::c_api::CheckNoSelfOverlap(*v, name); !s.ok()) return s;
  double* dst = v->typed<double>();
  if (m.size() == 0) return absl::OkStatus();  // see ReadMatrix
  for (int64_t i = 0; i < m.rows(); ++i) {
    for (int64_t j = 0; j < m.cols(); ++j) dst[i * v->strides[0] + j * v->strides[1]] = m(i, j);
  }
  return absl::OkStatus();
}

}  // namespace

extern "C" {

gpe_status gpe_shifted_basis_encode(const gpe_shifted_basis_options* options,
                                    const DLTensor* coords, DLTensor* out) {
  return Guard([&]() -> absl::Status {
    if (options == nullptr) return absl::InvalidArgumentError("options is NULL");
    if (absl::Status s = CheckStructSize(options->struct_size,
                                         offsetof(gpe_shifted_basis_options, hi) + sizeof(double),
                                         sizeof(gpe_shifted_basis_options),
                                         "gpe_shifted_basis_options");
        !s.ok()) {
      return s;
    }
    const gpe_shifted_basis_options& o = *options;
    if (o.kind < GPE_SHIFTED_GAUSSIAN || o.kind > GPE_SHIFTED_SQUARE) {
      return absl::InvalidArgumentError(
          absl::StrCat("kind must be one of GPE_SHIFTED_* (0..5); got ", o.kind));
    }
    if (o.num_shifts < 1 || o.num_shifts > gpe::c_api::kMaxDim) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_shifts must be in 1..", gpe::c_api::kMaxDim, "; got ", o.num_shifts));
    }
    absl::StatusOr<gpe::encodings::ShiftedBasis1D> basis = gpe::encodings::ShiftedBasis1D::Create(
        static_cast<gpe::encodings::ShiftedBasisKind>(o.kind), o.num_shifts, o.width, o.lo, o.hi);
    if (!basis.ok()) return basis.status();
    absl::StatusOr<TensorView> c = ViewTensor(coords, "coords", 1, kF64);
    if (!c.ok()) return c.status();
    std::vector<double> x(static_cast<size_t>(c->shape[0]));
    for (int64_t i = 0; i < c->shape[0]; ++i) x[i] = c->typed<const double>()[i * c->strides[0]];
    for (size_t i = 0; i < x.size(); ++i) {
      if (!std::isfinite(x[i])) {
        return absl::InvalidArgumentError(absl::StrCat("coords[", i, "] is not finite"));
      }
    }
    absl::StatusOr<TensorView> ov = ViewTensor(out, "out", 2, kF64);
    if (!ov.ok()) return ov.status();
    if (gpe::c_api::Overlaps(*c, *ov)) return absl::InvalidArgumentError("out overlaps coords");
    if (x.empty()) {
      if (ov->shape[0] != 0 || ov->shape[1] != o.num_shifts) {
        return absl::InvalidArgumentError("out must have shape [0, num_shifts]");
      }
      return absl::OkStatus();
    }
    absl::StatusOr<RowMatrixXd> e = basis->Encode(x);
    if (!e.ok()) return e.status();
    return WriteMatrix(*e, out, "out");
  });
}

gpe_status gpe_stable_rank(const DLTensor* matrix, double* out) {
  return Guard([&]() -> absl::Status {
    if (out == nullptr) return absl::InvalidArgumentError("out is NULL");
    absl::StatusOr<RowMatrixXd> m = ReadMatrix(matrix, "matrix");
    if (!m.ok()) return m.status();
    absl::StatusOr<double> r = gpe::encodings::StableRank(*m);
    if (!r.ok()) return r.status();
    *out = *r;
    return absl::OkStatus();
  });
}

gpe_status gpe_inr_fit_separable_2d(const gpe_separable_fit_options* options, const DLTensor* psi_y,
                                    const DLTensor* psi_x, const DLTensor* image, DLTensor* w) {
  return Guard([&]() -> absl::Status {
    if (options == nullptr) return absl::InvalidArgumentError("options is NULL");
    if (absl::Status s = CheckStructSize(
            options->struct_size, offsetof(gpe_separable_fit_options, lambda) + sizeof(double),
            sizeof(gpe_separable_fit_options), "gpe_separable_fit_options");
        !s.ok()) {
      return s;
    }
    absl::StatusOr<RowMatrixXd> py = ReadMatrix(psi_y, "psi_y");
    if (!py.ok()) return py.status();
    absl::StatusOr<RowMatrixXd> px = ReadMatrix(psi_x, "psi_x");
    if (!px.ok()) return px.status();
    absl::StatusOr<RowMatrixXd> s = ReadMatrix(image, "image");
    if (!s.ok()) return s.status();
    gpe::inr::SeparableFitOptions fit;
    fit.lambda = options->lambda;
    fit.float32_image_products = options->float32_image_products != 0;
    // rcond was appended after 0.3.0: structs from older headers end before it.
    if (options->struct_size >= offsetof(gpe_separable_fit_options, rcond) + sizeof(double)) {
      fit.rcond = options->rcond;
    }
    absl::StatusOr<std::vector<RowMatrixXd>> weights =
        gpe::inr::FitSeparable2D(*py, *px, std::vector<RowMatrixXd>{*s}, fit);
    if (!weights.ok()) {
      // Singular factors come back as FailedPrecondition: a caller's argument problem.
      return weights.status().code() == absl::StatusCode::kFailedPrecondition
                 ? absl::InvalidArgumentError(weights.status().message())
                 : weights.status();
    }
    return WriteMatrix((*weights)[0], w, "w");
  });
}

gpe_status gpe_inr_predict_separable_2d(const DLTensor* psi_y, const DLTensor* psi_x,
                                        const DLTensor* w, DLTensor* out) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<RowMatrixXd> py = ReadMatrix(psi_y, "psi_y");
    if (!py.ok()) return py.status();
    absl::StatusOr<RowMatrixXd> px = ReadMatrix(psi_x, "psi_x");
    if (!px.ok()) return px.status();
    absl::StatusOr<RowMatrixXd> wm = ReadMatrix(w, "w");
    if (!wm.ok()) return wm.status();
    absl::StatusOr<RowMatrixXd> s = gpe::inr::PredictSeparable2D(*py, *px, *wm);
    if (!s.ok()) return s.status();
    return WriteMatrix(*s, out, "out");
  });
}

}  // extern "C"
