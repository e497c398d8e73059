#include "c_api/src/so/so_rep.h"

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include <Eigen/Dense>
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "c_api/src/common/checks.h"
#include "group/so_planes.h"
#include "group/so_rank2.h"

namespace gpe::c_api {
namespace {

// Rows of a [N, dim] view are usable directly (the batch contract of group/batch.h)
// when their elements are contiguous and rows lie at least dim apart, in order; other
// views (reversed rows, a broadcast row: strides < dim) go through a compact buffer.
bool RowsContiguous(const TensorView& v) {
  const bool columns = v.shape[1] <= 1 || v.strides[1] == 1;
  return columns && (v.shape[0] <= 1 || v.strides[0] >= v.shape[1]);
}

// Applies `rep` (CommutingPlanes or Rank2Rotation) to a validated [N, dim] view pair.
// Column-strided views go through a compact row-major buffer.
template <class T, class Rep>
absl::Status ApplyTyped(const Rep& rep, absl::Span<const int64_t> positions, const TensorView& x,
                        const TensorView& out) {
  const int64_t n = x.shape[0];
  const int64_t dim = x.shape[1];
  if (n == 0) return absl::OkStatus();
  const T* in = x.typed<const T>();
  T* dst = out.typed<T>();
  if (RowsContiguous(x) && RowsContiguous(out)) {
    // One row: its stride is never stepped, and may be anything (numpy's reversed
    // one-row view has -dim); the batch contract wants >= dim.
    const int64_t ldx = n == 1 ? dim : x.strides[0], ldo = n == 1 ? dim : out.strides[0];
    return rep.template Apply<T>(positions, in, ldx, dst, ldo);
  }
  std::vector<T> buffer(static_cast<size_t>(n * dim));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < dim; ++j) buffer[i * dim + j] = in[i * x.strides[0] + j * x.strides[1]];
  }
  absl::Status s = rep.template Apply<T>(positions, buffer.data(), dim, buffer.data(), dim);
  if (!s.ok()) return s;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < dim; ++j) dst[i * out.strides[0] + j * out.strides[1]] = buffer[i * dim + j];
  }
  return absl::OkStatus();
}

template <class Rep>
class SoRepImpl final : public SoRep {
 public:
  explicit SoRepImpl(Rep rep) : rep_(std::move(rep)) {}

  int64_t dim() const override { return rep_.dim(); }

  absl::Status Apply(const TensorView& positions, const TensorView& x,
                     const TensorView& out) const override {
    std::vector<int64_t> storage;
    absl::Span<const int64_t> p = ContiguousPositions(positions, &storage);
    switch (x.dtype) {
      case DType::kFloat32: return ApplyTyped<float>(rep_, p, x, out);
      case DType::kFloat64: return ApplyTyped<double>(rep_, p, x, out);
      default:
        return absl::UnimplementedError(
            absl::StrCat("gpe_so_rep_apply supports float32 and float64; got ", DTypeName(x.dtype)));
    }
  }

  absl::Status Matrix(int64_t position, const TensorView& out) const override {
    const Eigen::MatrixXd m = rep_.Matrix(position);
    double* dst = out.typed<double>();
    for (int64_t i = 0; i < m.rows(); ++i) {
      for (int64_t j = 0; j < m.cols(); ++j) dst[i * out.strides[0] + j * out.strides[1]] = m(i, j);
    }
    return absl::OkStatus();
  }

 private:
  Rep rep_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SoRep>> MakePlanesRep(int64_t dim, int64_t rotary_dim,
                                                     std::vector<double> thetas,
                                                     bool half_split) {
  absl::StatusOr<group::CommutingPlanes> rep = group::CommutingPlanes::Create(
      dim, rotary_dim, std::move(thetas),
      half_split ? group::PlanePairing::kHalfSplit : group::PlanePairing::kInterleaved);
  if (!rep.ok()) return rep.status();
  return std::unique_ptr<SoRep>(new SoRepImpl<group::CommutingPlanes>(std::move(*rep)));
}

absl::StatusOr<std::unique_ptr<SoRep>> MakeRank2Rep(std::vector<double> a, std::vector<double> b,
                                                    double omega) {
  absl::StatusOr<group::Rank2Rotation> rep =
      group::Rank2Rotation::Create(std::move(a), std::move(b), omega);
  if (!rep.ok()) return rep.status();
  return std::unique_ptr<SoRep>(new SoRepImpl<group::Rank2Rotation>(std::move(*rep)));
}

}  // namespace gpe::c_api
