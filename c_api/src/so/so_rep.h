// The implementations behind the gpe_so_rep handle: adapters from validated DLPack
// views to group/'s SO(n) representations.
#ifndef GPE_C_API_SRC_SO_SO_REP_H_
#define GPE_C_API_SRC_SO_SO_REP_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "c_api/src/common/tensor_view.h"

namespace gpe::c_api {

class SoRep {
 public:
  virtual ~SoRep() = default;
  virtual int64_t dim() const = 0;
  // positions: int64 [N]; x, out: float32/float64 [N, dim], same dtype, out == x or
  // disjoint (checked by the caller).
  virtual absl::Status Apply(const TensorView& positions, const TensorView& x,
                             const TensorView& out) const = 0;
  // out: float64 [dim, dim].
  virtual absl::Status Matrix(int64_t position, const TensorView& out) const = 0;
};

// Arguments are validated by the caller (sizes, finiteness); group/ re-checks.
absl::StatusOr<std::unique_ptr<SoRep>> MakePlanesRep(int64_t dim, int64_t rotary_dim,
                                                     std::vector<double> thetas,
                                                     bool half_split);
absl::StatusOr<std::unique_ptr<SoRep>> MakeRank2Rep(std::vector<double> a, std::vector<double> b,
                                                    double omega);

}  // namespace gpe::c_api

#endif  // GPE_C_API_SRC_SO_SO_REP_H_
