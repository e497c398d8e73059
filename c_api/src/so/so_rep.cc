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

// Applies `rep` (CommutingPlanes or Rank2Rotation) to a validated [N, dim] view pair:
// rows in place where the views allow (RowsOf), else through compact buffers.
template <class T, class Rep>
absl::Status ApplyTyped(const Rep& rep, absl::Span<const int64_t> positions, const TensorView& x,
                        const TensorView& out) {
  if (x.shape[0] == 0) return absl::OkStatus();
  std::vector<T> xs, os;
  int64_t ldx = 0, ldo = 0;
  const T* in = RowsOf<T>(x, /*gather=*/true, &xs, &ldx);
  T* dst = RowsOf<T>(out, /*gather=*/false, &os, &ldo);
  if (absl::Status s = rep.template Apply<T>(positions, in, ldx, dst, ldo); !s.ok()) return s;
  ScatterRows(dst, out);
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
