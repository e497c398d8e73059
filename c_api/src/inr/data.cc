// The C ABI's INR data entry points (gpe/inr_data.h): Lim et al.'s analytic data, pixel
// grids, the papers' splits and MSE / PSNR over inr/data.h. Every entry point runs under
// Guard.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <Eigen/Dense>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "c_api/include/gpe/inr_data.h"
#include "c_api/src/common/checks.h"
#include "c_api/src/common/error.h"
#include "c_api/src/common/matrices.h"
#include "c_api/src/common/tensor_view.h"
#include "inr/closed_form.h"
#include "inr/data.h"
#include "inr/mlp.h"

using gpe::c_api::CheckOutputShape;
using gpe::c_api::DType;
using gpe::c_api::Guard;
using gpe::c_api::TensorView;
using gpe::c_api::ViewTensor;
using gpe::c_api::WriteMatrix;

namespace {

using RowMatrixXd = gpe::inr::RowMatrixXd;

const DType kF64[] = {DType::kFloat64};
const DType kI64[] = {DType::kInt64};

// ---- Data ----

absl::StatusOr<gpe::inr::SyntheticTask> ReadTask(int32_t task) {
  if (task == GPE_SYNTHETIC_RADIAL) return gpe::inr::SyntheticTask::kRadial;
  if (task == GPE_SYNTHETIC_SPIRAL) return gpe::inr::SyntheticTask::kSpiral;
  return absl::InvalidArgumentError(absl::StrCat(
      "task must be GPE_SYNTHETIC_RADIAL (0) or GPE_SYNTHETIC_SPIRAL (1); got ", task));
}

// Grids above 2^15 a side (2^30 pixels) are refused before anything is allocated.
constexpr int64_t kMaxGridSide = int64_t{1} << 15;

absl::Status CheckGridSide(int64_t n, const char* name) {
  if (n < 1) return absl::InvalidArgumentError(absl::StrCat(name, " must be >= 1; got ", n));
  if (n > kMaxGridSide) {
    return absl::OutOfRangeError(
        absl::StrCat(name, " is ", n, "; at most ", kMaxGridSide, " is supported"));
  }
  return absl::OkStatus();
}

// Writes a split's concatenated indices and its three sizes.
absl::Status WriteSplit(const gpe::inr::Split& split, int64_t num_points, DLTensor* indices,
                        int64_t* counts) {
  absl::StatusOr<TensorView> v = ViewTensor(indices, "indices", 1, kI64);
  if (!v.ok()) return v.status();
  if (v->shape[0] != num_points) {
    return absl::InvalidArgumentError(absl::StrCat("indices must have shape [", num_points,
                                                   "] (every point once); got [", v->shape[0],
                                                   "]"));
  }
  if (absl::Status s = gpe::c_api::CheckNoSelfOverlap(*v, "indices"); !s.ok()) return s;
  int64_t k = 0;
  for (const std::vector<int64_t>* part : {&split.train, &split.validation, &split.test}) {
    for (int64_t i : *part) v->typed<int64_t>()[(k++) * v->strides[0]] = i;
  }
  counts[0] = static_cast<int64_t>(split.train.size());
  counts[1] = static_cast<int64_t>(split.validation.size());
  counts[2] = static_cast<int64_t>(split.test.size());
  return absl::OkStatus();
}

// Two float64 tensors of one shape (1 to 3 dimensions, >= 1 entry, finite), flattened.
absl::Status ReadPair(const DLTensor* a, const DLTensor* b, RowMatrixXd* fa, RowMatrixXd* fb) {
  if (a == nullptr) return absl::InvalidArgumentError("a is NULL");
  if (b == nullptr) return absl::InvalidArgumentError("b is NULL");
  if (a->ndim < 1 || a->ndim > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("a must have 1 to 3 dimensions; got ", a->ndim));
  }
  absl::StatusOr<TensorView> va = ViewTensor(a, "a", a->ndim, kF64);
  if (!va.ok()) return va.status();
  absl::StatusOr<TensorView> vb = ViewTensor(b, "b", a->ndim, kF64);
  if (!vb.ok()) return vb.status();
  if (va->shape != vb->shape) {
    return absl::InvalidArgumentError("a and b must have the same shape");
  }
  const int64_t n = va->numel();
  if (n < 1) return absl::InvalidArgumentError("a and b are empty");
  if (n > (int64_t{1} << 34)) return absl::OutOfRangeError("a has more than 2^34 entries");
  // Broadcast views (stride 0) describe their entries in a few bytes: copied only up to
  // kMaxBroadcastCopy entries, as every other reader (2^27 of them cost 2 GiB here).
  if (absl::Status s = gpe::c_api::CheckBroadcastCopy(*va, "a"); !s.ok()) return s;
  if (absl::Status s = gpe::c_api::CheckBroadcastCopy(*vb, "b"); !s.ok()) return s;
  fa->resize(1, n);
  fb->resize(1, n);
  // Row-major walk of up to 3 dimensions (missing leading ones have size 1).
  std::vector<int64_t> shape(3, 1), sa(3, 0), sb(3, 0);
  const int d0 = 3 - a->ndim;
  for (int d = 0; d < a->ndim; ++d) {
    shape[d0 + d] = va->shape[d];
    sa[d0 + d] = va->strides[d];
    sb[d0 + d] = vb->strides[d];
  }
  int64_t k = 0;
  for (int64_t i = 0; i < shape[0]; ++i) {
    for (int64_t j = 0; j < shape[1]; ++j) {
      for (int64_t l = 0; l < shape[2]; ++l, ++k) {
        (*fa)(0, k) = va->typed<const double>()[i * sa[0] + j * sa[1] + l * sa[2]];
        (*fb)(0, k) = vb->typed<const double>()[i * sb[0] + j * sb[1] + l * sb[2]];
      }
    }
  }
  if (!fa->allFinite()) return absl::InvalidArgumentError("a has a non-finite entry");
  if (!fb->allFinite()) return absl::InvalidArgumentError("b has a non-finite entry");
  return absl::OkStatus();
}

}  // namespace

extern "C" {

// ---- Data ----

gpe_status gpe_inr_synthetic_image(int32_t task, int32_t signed_values, DLTensor* out) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<gpe::inr::SyntheticTask> t = ReadTask(task);
    if (!t.ok()) return t.status();
    absl::StatusOr<TensorView> v = ViewTensor(out, "out", 2, kF64);
    if (!v.ok()) return v.status();
    if (v->shape[0] != v->shape[1]) {
      return absl::InvalidArgumentError(absl::StrCat("out must be square [n, n]; got [",
                                                     v->shape[0], ", ", v->shape[1], "]"));
    }
    if (absl::Status s = CheckGridSide(v->shape[0], "n"); !s.ok()) return s;
    // A self-overlapping out (stride 0) is refused before the image is computed.
    if (absl::Status s = gpe::c_api::CheckNoSelfOverlap(*v, "out"); !s.ok()) return s;
    return WriteMatrix<double>(gpe::inr::SyntheticImage(*t, v->shape[0], signed_values != 0), out,
                               "out");
  });
}

gpe_status gpe_inr_synthetic_vector_field(int32_t task, DLTensor* out) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<gpe::inr::SyntheticTask> t = ReadTask(task);
    if (!t.ok()) return t.status();
    absl::StatusOr<TensorView> v = ViewTensor(out, "out", 3, kF64);
    if (!v.ok()) return v.status();
    const int64_t n = v->shape[0];
    if (v->shape[1] != n || v->shape[2] != 2) {
      return absl::InvalidArgumentError(absl::StrCat("out must have shape [n, n, 2]; got [",
                                                     v->shape[0], ", ", v->shape[1], ", ",
                                                     v->shape[2], "]"));
    }
    if (absl::Status s = CheckGridSide(n, "n"); !s.ok()) return s;
    if (absl::Status s = gpe::c_api::CheckNoSelfOverlap(*v, "out"); !s.ok()) return s;
    const std::vector<gpe::inr::ImageMatrix> field = gpe::inr::SyntheticVectorField(*t, n);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t c = 0; c < 2; ++c) {
          v->typed<double>()[i * v->strides[0] + j * v->strides[1] + c * v->strides[2]] =
              field[c](i, j);
        }
      }
    }
    return absl::OkStatus();
  });
}

gpe_status gpe_inr_grid_coordinates(int64_t n, DLTensor* out) {
  return Guard([&]() -> absl::Status {
    if (absl::Status s = CheckGridSide(n, "n"); !s.ok()) return s;
    if (absl::Status s = CheckOutputShape(out, "out", n * n, 2); !s.ok()) return s;
    return WriteMatrix<double>(gpe::inr::GridCoordinates(n), out, "out");
  });
}

gpe_status gpe_inr_random_split(int64_t num_points, double train_fraction,
                                double validation_fraction, uint64_t seed, DLTensor* indices,
                                int64_t* counts) {
  return Guard([&]() -> absl::Status {
    if (counts == nullptr) return absl::InvalidArgumentError("counts is NULL");
    if (num_points < 0 || num_points > (int64_t{1} << 34)) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_points must be in 0..2^34; got ", num_points));
    }
    if (!std::isfinite(train_fraction) || !std::isfinite(validation_fraction)) {
      return absl::InvalidArgumentError("fractions must be finite");
    }
    // Check the output before shuffling num_points indices.
    absl::StatusOr<TensorView> v = ViewTensor(indices, "indices", 1, kI64);
    if (!v.ok()) return v.status();
    if (v->shape[0] != num_points) {
      return absl::InvalidArgumentError(absl::StrCat("indices must have shape [", num_points,
                                                     "] (every point once); got [",
                                                     v->shape[0], "]"));
    }
    if (absl::Status s = gpe::c_api::CheckNoSelfOverlap(*v, "indices"); !s.ok()) return s;
    absl::StatusOr<gpe::inr::Split> split =
        gpe::inr::RandomSplit(num_points, train_fraction, validation_fraction, seed);
    if (!split.ok()) return split.status();
    return WriteSplit(*split, num_points, indices, counts);
  });
}

gpe_status gpe_inr_regular_grid_split(int64_t rows, int64_t cols, DLTensor* indices,
                                      int64_t* counts) {
  return Guard([&]() -> absl::Status {
    if (counts == nullptr) return absl::InvalidArgumentError("counts is NULL");
    if (absl::Status s = CheckGridSide(rows, "rows"); !s.ok()) return s;
    if (absl::Status s = CheckGridSide(cols, "cols"); !s.ok()) return s;
    absl::StatusOr<TensorView> v = ViewTensor(indices, "indices", 1, kI64);
    if (!v.ok()) return v.status();
    if (v->shape[0] != rows * cols) {
      return absl::InvalidArgumentError(absl::StrCat("indices must have shape [", rows * cols,
                                                     "] (rows * cols); got [", v->shape[0], "]"));
    }
    return WriteSplit(gpe::inr::RegularGridSplit(rows, cols), rows * cols, indices, counts);
  });
}

gpe_status gpe_inr_mse(const DLTensor* a, const DLTensor* b, double* out) {
  return Guard([&]() -> absl::Status {
    if (out == nullptr) return absl::InvalidArgumentError("out is NULL");
    RowMatrixXd fa, fb;
    if (absl::Status s = ReadPair(a, b, &fa, &fb); !s.ok()) return s;
    absl::StatusOr<double> mse = gpe::inr::MeanSquaredError(fa, fb);
    if (!mse.ok()) return mse.status();
    *out = *mse;
    return absl::OkStatus();
  });
}

gpe_status gpe_inr_psnr(const DLTensor* a, const DLTensor* b, double peak, double* out) {
  return Guard([&]() -> absl::Status {
    if (out == nullptr) return absl::InvalidArgumentError("out is NULL");
    if (!std::isfinite(peak) || peak <= 0.0) {
      return absl::InvalidArgumentError(absl::StrCat("peak must be finite and > 0; got ", peak));
    }
    RowMatrixXd fa, fb;
    if (absl::Status s = ReadPair(a, b, &fa, &fb); !s.ok()) return s;
    absl::StatusOr<double> psnr = gpe::inr::Psnr(fa, fb, peak);
    if (!psnr.ok()) return psnr.status();
    *out = *psnr;
    return absl::OkStatus();
  });
}

}  // extern "C"
