// A program in another Bazel workspace that builds against GroupPE (@grouppe) through
// its C ABI: RoPE on a few vectors, checked against the rotation written out here, and
// the stable rank of the rotated batch (rotations preserve the Frobenius norm of each
// row, not the spectrum, so only the range [1, dim] is checked).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "gpe/gpe.h"

namespace {

DLTensor Tensor(void* data, DLDataTypeCode code, std::vector<int64_t>* shape) {
  DLTensor t;
  std::memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = static_cast<int32_t>(shape->size());
  t.dtype.code = static_cast<uint8_t>(code);
  t.dtype.bits = 64;
  t.dtype.lanes = 1;
  t.shape = shape->data();
  return t;
}

int Fail(const char* what) {
  std::fprintf(stderr, "%s: %s\n", what, gpe_last_error_message());
  return 1;
}

}  // namespace

int main() {
  std::printf("GroupPE %s from an external workspace\n", gpe_version_string());
  const int64_t n = 3, dim = 4;
  gpe_so_planes_options o = GPE_SO_PLANES_OPTIONS_INIT;
  o.dim = dim;
  gpe_so_rep* rep = nullptr;
  if (gpe_so_rep_create_planes(&o, &rep) != GPE_OK) return Fail("create");
  std::vector<int64_t> pos = {1, 10, 100}, ps = {n}, xs = {n, dim};
  std::vector<double> x = {1, 0, 0, 1, 0.5, -0.5, 2, 1, 3, 1, -1, 0}, y(x.size());
  DLTensor tp = Tensor(pos.data(), kDLInt, &ps), tx = Tensor(x.data(), kDLFloat, &xs),
           ty = Tensor(y.data(), kDLFloat, &xs);
  if (gpe_so_rep_apply(rep, &tp, &tx, &ty) != GPE_OK) return Fail("apply");
  gpe_so_rep_destroy(rep);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < dim / 2; ++i) {
      // Interleaved pairs, theta_i = 10000^(-2i / dim).
      const double a = pos[r] * std::pow(10000.0, -2.0 * i / dim);
      const double x1 = x[r * dim + 2 * i], x2 = x[r * dim + 2 * i + 1];
      // Angles below 100 rad: the reference's angle is within ~1e-14; 1e-12 covers it.
      if (std::fabs(y[r * dim + 2 * i] - (x1 * std::cos(a) - x2 * std::sin(a))) > 1e-12 ||
          std::fabs(y[r * dim + 2 * i + 1] - (x1 * std::sin(a) + x2 * std::cos(a))) > 1e-12) {
        std::fprintf(stderr, "row %lld plane %lld disagrees with the rotation\n",
                     static_cast<long long>(r), static_cast<long long>(i));
        return 1;
      }
    }
  }
  double rank = 0.0;
  if (gpe_stable_rank(&ty, &rank) != GPE_OK) return Fail("stable_rank");
  if (!(rank >= 1.0 && rank <= static_cast<double>(n))) {
    std::fprintf(stderr, "stable rank %g outside [1, %lld]\n", rank, static_cast<long long>(n));
    return 1;
  }
  std::printf("RoPE matches the rotation; stable rank of the batch %.4f\n", rank);
  return 0;
}
