// The C ABI's least-squares fits of implicit neural representations (gpe/inr.h): the
// separable 2-D and 3-D closed forms and the blended fit of scattered samples over
// inr/closed_form.h and inr/blended.h, and the condition number of a factor. Every entry
// point runs under Guard.
#include <array>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "c_api/include/gpe/inr.h"
#include "c_api/src/common/checks.h"
#include "c_api/src/common/error.h"
#include "c_api/src/common/matrices.h"
#include "c_api/src/common/tensor_view.h"
#include "c_api/src/coordinate/encoder_handle.h"
#include "encodings/coordinate/encoder.h"
#include "inr/blended.h"
#include "inr/closed_form.h"

using gpe::c_api::CheckStructSize;
using gpe::c_api::CopyMatrix;
using gpe::c_api::DType;
using gpe::c_api::Guard;
using gpe::c_api::MatrixContents;
using gpe::c_api::ReadFloat64Matrix;
using gpe::c_api::ShapeString;
using gpe::c_api::TensorView;
using gpe::c_api::ViewTensor;
using gpe::c_api::WriteMatrix;

namespace {

using RowMatrixXd = gpe::c_api::RowMatrix<double>;
const DType kF64[] = {DType::kFloat64};

// The three factor matrices psi_0, psi_1, psi_2 of a 3-D separable call (float64, any
// contents).
absl::StatusOr<std::array<RowMatrixXd, 3>> ReadPsi3(const DLTensor* psi_0, const DLTensor* psi_1,
                                                    const DLTensor* psi_2) {
  std::array<RowMatrixXd, 3> psi;
  const DLTensor* in[3] = {psi_0, psi_1, psi_2};
  const char* names[3] = {"psi_0", "psi_1", "psi_2"};
  for (int d = 0; d < 3; ++d) {
    absl::StatusOr<RowMatrixXd> m = ReadFloat64Matrix(in[d], names[d], MatrixContents::kAny);
    if (!m.ok()) return m.status();
    psi[d] = *std::move(m);
  }
  return psi;
}

// The separable-fit options a caller's struct carries (rcond only from headers that
// have it).
absl::StatusOr<gpe::inr::SeparableFitOptions> ReadFitOptions(
    const gpe_separable_fit_options* options) {
  if (options == nullptr) return absl::InvalidArgumentError("options is NULL");
  if (absl::Status s = CheckStructSize(
          options->struct_size, offsetof(gpe_separable_fit_options, lambda) + sizeof(double),
          sizeof(gpe_separable_fit_options), "gpe_separable_fit_options");
      !s.ok()) {
    return s;
  }
  gpe::inr::SeparableFitOptions fit;
  fit.lambda = options->lambda;
  fit.float32_image_products = options->float32_image_products != 0;
  // rcond was appended after 0.3.0: structs from older headers end before it.
  if (options->struct_size >= offsetof(gpe_separable_fit_options, rcond) + sizeof(double)) {
    fit.rcond = options->rcond;
  }
  return fit;
}

// Singular factors come back as FailedPrecondition: a caller's argument problem. (Only
// that code: argument_error.h's AsArgumentError also maps the image writers' codes.)
absl::Status SingularAsArgumentError(const absl::Status& s) {
  return s.code() == absl::StatusCode::kFailedPrecondition
             ? absl::InvalidArgumentError(s.message())
             : s;
}

// A float64 [n0, n1, n2] tensor copied into a compact Tensor3.
absl::StatusOr<gpe::inr::Tensor3> ReadTensor3(const DLTensor* t, const char* name) {
  absl::StatusOr<TensorView> v = ViewTensor(t, name, 3, kF64);
  if (!v.ok()) return v.status();
  gpe::inr::Tensor3 out;
  out.dims = {v->shape[0], v->shape[1], v->shape[2]};
  if (v->numel() > (int64_t{1} << 31)) {
    return absl::OutOfRangeError(absl::StrCat(name, " has more than 2^31 elements"));
  }
  if (absl::Status s = gpe::c_api::CheckBroadcastCopy(*v, name); !s.ok()) return s;
  out.data.resize(static_cast<size_t>(v->numel()));
  // No element to copy: do not walk the (up to 2^40 x 2^40) index space of the other
  // sizes; the solvers refuse the empty tensor.
  if (v->numel() == 0) return out;
  const double* src = v->typed<const double>();
  size_t k = 0;
  for (int64_t i = 0; i < v->shape[0]; ++i) {
    for (int64_t j = 0; j < v->shape[1]; ++j) {
      for (int64_t l = 0; l < v->shape[2]; ++l) {
        out.data[k++] = src[i * v->strides[0] + j * v->strides[1] + l * v->strides[2]];
      }
    }
  }
  return out;
}

absl::Status WriteTensor3(const gpe::inr::Tensor3& t, DLTensor* dst, const char* name) {
  absl::StatusOr<TensorView> v = ViewTensor(dst, name, 3, kF64);
  if (!v.ok()) return v.status();
  if (v->shape[0] != t.dims[0] || v->shape[1] != t.dims[1] || v->shape[2] != t.dims[2]) {
    return absl::InvalidArgumentError(absl::StrCat(name, " must have shape [", t.dims[0], ", ",
                                                   t.dims[1], ", ", t.dims[2], "]; got [",
                                                   v->shape[0], ", ", v->shape[1], ", ",
                                                   v->shape[2], "]"));
  }
  if (absl::Status s = gpe::c_api::CheckNoSelfOverlap(*v, name); !s.ok()) return s;
  double* out = v->typed<double>();
  size_t k = 0;
  for (int64_t i = 0; i < t.dims[0]; ++i) {
    for (int64_t j = 0; j < t.dims[1]; ++j) {
      for (int64_t l = 0; l < t.dims[2]; ++l) {
        out[i * v->strides[0] + j * v->strides[1] + l * v->strides[2]] = t.data[k++];
      }
    }
  }
  return absl::OkStatus();
}

// A float64 [N] tensor copied out.
absl::StatusOr<std::vector<double>> ReadVector(const DLTensor* t, const char* name) {
  absl::StatusOr<TensorView> v = ViewTensor(t, name, 1, kF64);
  if (!v.ok()) return v.status();
  // A broadcast view (stride 0) may not stand for a long vector that nothing else bounds.
  if (absl::Status s = gpe::c_api::CheckMaterialised(*v, name); !s.ok()) return s;
  std::vector<double> out(static_cast<size_t>(v->shape[0]));
  for (int64_t i = 0; i < v->shape[0]; ++i) out[i] = v->typed<const double>()[i * v->strides[0]];
  return out;
}

// A 1-D coordinate encoder handle as the blended solver's AxisEncoder.
absl::StatusOr<gpe::inr::AxisEncoder> AxisEncoderOf(const gpe_coordinate_encoder* e,
                                                    const char* name) {
  if (e == nullptr) return absl::InvalidArgumentError(absl::StrCat(name, " is NULL"));
  if (e->impl->input_dim() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " must encode 1-D coordinates (input width 1); it takes ", e->impl->input_dim()));
  }
  const gpe::encodings::CoordinateEncoder* impl = e->impl.get();
  return gpe::inr::AxisEncoder(
      [impl](absl::Span<const double> x) -> absl::StatusOr<gpe::inr::RowMatrixXd> {
        const gpe::encodings::RowMatrixXd points =
            Eigen::Map<const Eigen::VectorXd>(x.data(), static_cast<Eigen::Index>(x.size()));
        return impl->Encode(points);
      });
}

// The shared inputs of the blended fit and prediction.
struct BlendedInputs {
  gpe::inr::AxisEncoder ex, ey;
  std::vector<double> gx, gy, px, py;
};

absl::StatusOr<BlendedInputs> ReadBlendedInputs(const gpe_coordinate_encoder* encoder_x,
                                                const gpe_coordinate_encoder* encoder_y,
                                                const DLTensor* grid_x, const DLTensor* grid_y,
                                                const DLTensor* points) {
  BlendedInputs in;
  absl::StatusOr<gpe::inr::AxisEncoder> ex = AxisEncoderOf(encoder_x, "encoder_x");
  if (!ex.ok()) return ex.status();
  absl::StatusOr<gpe::inr::AxisEncoder> ey = AxisEncoderOf(encoder_y, "encoder_y");
  if (!ey.ok()) return ey.status();
  in.ex = *std::move(ex);
  in.ey = *std::move(ey);
  absl::StatusOr<std::vector<double>> gx = ReadVector(grid_x, "grid_x");
  if (!gx.ok()) return gx.status();
  absl::StatusOr<std::vector<double>> gy = ReadVector(grid_y, "grid_y");
  if (!gy.ok()) return gy.status();
  in.gx = *std::move(gx);
  in.gy = *std::move(gy);
  absl::StatusOr<RowMatrixXd> p = ReadFloat64Matrix(points, "points", MatrixContents::kAny);
  if (!p.ok()) return p.status();
  if (p->cols() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("points must have shape [P, 2] as (x, y); got [", p->rows(), ", ", p->cols(),
                     "]"));
  }
  if (p->rows() < 1) return absl::InvalidArgumentError("points is empty (P = 0)");
  in.px.resize(static_cast<size_t>(p->rows()));
  in.py.resize(static_cast<size_t>(p->rows()));
  for (int64_t i = 0; i < p->rows(); ++i) {
    in.px[i] = (*p)(i, 0);
    in.py[i] = (*p)(i, 1);
    if (!std::isfinite(in.px[i]) || !std::isfinite(in.py[i])) {
      return absl::InvalidArgumentError(absl::StrCat("points[", i, "] = (", in.px[i], ", ",
                                                     in.py[i], ") is not finite"));
    }
  }
  return in;
}

}  // namespace

extern "C" {

gpe_status gpe_inr_fit_separable_3d(const gpe_separable_fit_options* options, const DLTensor* psi_0,
                                    const DLTensor* psi_1, const DLTensor* psi_2,
                                    const DLTensor* volume, DLTensor* w) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<gpe::inr::SeparableFitOptions> fit = ReadFitOptions(options);
    if (!fit.ok()) return fit.status();
    absl::StatusOr<std::array<RowMatrixXd, 3>> psi = ReadPsi3(psi_0, psi_1, psi_2);
    if (!psi.ok()) return psi.status();
    absl::StatusOr<gpe::inr::Tensor3> v = ReadTensor3(volume, "volume");
    if (!v.ok()) return v.status();
    absl::StatusOr<gpe::inr::Tensor3> weights =
        gpe::inr::FitSeparable3D(*psi, *v, fit->lambda, fit->rcond);
    if (!weights.ok()) return SingularAsArgumentError(weights.status());
    return WriteTensor3(*weights, w, "w");
  });
}

gpe_status gpe_inr_predict_separable_3d(const DLTensor* psi_0, const DLTensor* psi_1,
                                        const DLTensor* psi_2, const DLTensor* w, DLTensor* out) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<std::array<RowMatrixXd, 3>> psi = ReadPsi3(psi_0, psi_1, psi_2);
    if (!psi.ok()) return psi.status();
    absl::StatusOr<gpe::inr::Tensor3> wt = ReadTensor3(w, "w");
    if (!wt.ok()) return wt.status();
    absl::StatusOr<gpe::inr::Tensor3> v = gpe::inr::PredictSeparable3D(*psi, *wt);
    if (!v.ok()) return v.status();
    return WriteTensor3(*v, out, "out");
  });
}

gpe_status gpe_inr_fit_blended_2d(const gpe_blended_fit_options* options,
                                  const gpe_coordinate_encoder* encoder_x,
                                  const gpe_coordinate_encoder* encoder_y, const DLTensor* grid_x,
                                  const DLTensor* grid_y, const DLTensor* points,
                                  const DLTensor* values, DLTensor* w, int32_t* iterations,
                                  double* rms_residual) {
  return Guard([&]() -> absl::Status {
    if (options == nullptr) return absl::InvalidArgumentError("options is NULL");
    if (absl::Status s = CheckStructSize(
            options->struct_size, offsetof(gpe_blended_fit_options, tolerance) + sizeof(double),
            sizeof(gpe_blended_fit_options), "gpe_blended_fit_options");
        !s.ok()) {
      return s;
    }
    if (options->max_iterations < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_iterations must be >= 1; got ", options->max_iterations));
    }
    absl::StatusOr<BlendedInputs> in =
        ReadBlendedInputs(encoder_x, encoder_y, grid_x, grid_y, points);
    if (!in.ok()) return in.status();
    absl::StatusOr<std::vector<double>> vals = ReadVector(values, "values");
    if (!vals.ok()) return vals.status();
    if (vals->size() != in->px.size()) {
      return absl::InvalidArgumentError(absl::StrCat("values must have shape [", in->px.size(),
                                                     "] (one per point); got [", vals->size(),
                                                     "]"));
    }
    gpe::inr::BlendedFitOptions o;
    o.lambda = options->lambda;
    o.max_iterations = options->max_iterations;
    o.tolerance = options->tolerance;
    absl::StatusOr<gpe::inr::BlendedFit> fit = gpe::inr::FitBlended2D(
        in->ex, in->ey, in->gx, in->gy, in->px, in->py, *vals, o);
    if (!fit.ok()) return SingularAsArgumentError(fit.status());
    if (absl::Status s = WriteMatrix(fit->weights, w, "w"); !s.ok()) return s;
    if (iterations != nullptr) *iterations = fit->iterations;
    if (rms_residual != nullptr) *rms_residual = fit->rms_residual;
    return absl::OkStatus();
  });
}

gpe_status gpe_inr_predict_blended_2d(const gpe_coordinate_encoder* encoder_x,
                                      const gpe_coordinate_encoder* encoder_y,
                                      const DLTensor* grid_x, const DLTensor* grid_y,
                                      const DLTensor* points, const DLTensor* w, DLTensor* out) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<BlendedInputs> in =
        ReadBlendedInputs(encoder_x, encoder_y, grid_x, grid_y, points);
    if (!in.ok()) return in.status();
    absl::StatusOr<RowMatrixXd> wm = ReadFloat64Matrix(w, "w", MatrixContents::kAny);
    if (!wm.ok()) return wm.status();
    absl::StatusOr<TensorView> ov = ViewTensor(out, "out", 1, kF64);
    if (!ov.ok()) return ov.status();
    if (ov->shape[0] != static_cast<int64_t>(in->px.size())) {
      return absl::InvalidArgumentError(absl::StrCat("out must have shape [", in->px.size(),
                                                     "] (one per point); got [", ov->shape[0],
                                                     "]"));
    }
    if (absl::Status s = gpe::c_api::CheckNoSelfOverlap(*ov, "out"); !s.ok()) return s;
    absl::StatusOr<std::vector<double>> f =
        gpe::inr::PredictBlended2D(in->ex, in->ey, in->gx, in->gy, in->px, in->py, *wm);
    if (!f.ok()) return f.status();
    for (size_t i = 0; i < f->size(); ++i) ov->typed<double>()[i * ov->strides[0]] = (*f)[i];
    return absl::OkStatus();
  });
}

gpe_status gpe_inr_fit_separable_2d(const gpe_separable_fit_options* options, const DLTensor* psi_y,
                                    const DLTensor* psi_x, const DLTensor* image, DLTensor* w) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<gpe::inr::SeparableFitOptions> fit = ReadFitOptions(options);
    if (!fit.ok()) return fit.status();
    absl::StatusOr<RowMatrixXd> py = ReadFloat64Matrix(psi_y, "psi_y", MatrixContents::kAny);
    if (!py.ok()) return py.status();
    absl::StatusOr<RowMatrixXd> px = ReadFloat64Matrix(psi_x, "psi_x", MatrixContents::kAny);
    if (!px.ok()) return px.status();
    absl::StatusOr<RowMatrixXd> s = ReadFloat64Matrix(image, "image", MatrixContents::kAny);
    if (!s.ok()) return s.status();
    absl::StatusOr<std::vector<RowMatrixXd>> weights =
        gpe::inr::FitSeparable2D(*py, *px, std::vector<RowMatrixXd>{*s}, *fit);
    if (!weights.ok()) return SingularAsArgumentError(weights.status());
    return WriteMatrix((*weights)[0], w, "w");
  });
}

gpe_status gpe_inr_predict_separable_2d(const DLTensor* psi_y, const DLTensor* psi_x,
                                        const DLTensor* w, DLTensor* out) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<RowMatrixXd> py = ReadFloat64Matrix(psi_y, "psi_y", MatrixContents::kAny);
    if (!py.ok()) return py.status();
    absl::StatusOr<RowMatrixXd> px = ReadFloat64Matrix(psi_x, "psi_x", MatrixContents::kAny);
    if (!px.ok()) return px.status();
    absl::StatusOr<RowMatrixXd> wm = ReadFloat64Matrix(w, "w", MatrixContents::kAny);
    if (!wm.ok()) return wm.status();
    absl::StatusOr<RowMatrixXd> s = gpe::inr::PredictSeparable2D(*py, *px, *wm);
    if (!s.ok()) return s.status();
    return WriteMatrix(*s, out, "out");
  });
}

gpe_status gpe_inr_condition_number(const DLTensor* psi, double* out) {
  return Guard([&]() -> absl::Status {
    if (out == nullptr) return absl::InvalidArgumentError("out is NULL");
    absl::StatusOr<TensorView> v = ViewTensor(psi, "psi", 2, kF64);
    if (!v.ok()) return v.status();
    if (v->shape[0] < 1 || v->shape[1] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("psi must be [N, K] with N, K >= 1; got ", ShapeString(*v)));
    }
    if (std::min(v->shape[0], v->shape[1]) > 8192) {
      return absl::OutOfRangeError(absl::StrCat("psi is too large for a dense SVD: ",
                                                ShapeString(*v), " (min side <= 8192)"));
    }
    if (absl::Status s = gpe::c_api::CheckBroadcastCopy(*v, "psi"); !s.ok()) return s;
    absl::StatusOr<double> c = gpe::inr::ConditionNumber(CopyMatrix<double>(*v));
    if (!c.ok()) return c.status();
    *out = *c;
    return absl::OkStatus();
  });
}

}  // extern "C"
