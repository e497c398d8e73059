// Helpers shared by the attention tests (reference_test, cpu_attention_test): arguments
// for dense and packed layouts, seeded random inputs, and the multi-axis RoPE both build.
#ifndef ATTENTION_TEST_UTIL_H_
#define ATTENTION_TEST_UTIL_H_

#include <cstdint>
#include <random>
#include <vector>

#include <Eigen/Dense>
#include "attention/descriptor.h"
#include "encodings/sequence/rope.h"

namespace gpe {
namespace attention {
namespace test {

// n draws of U(lo, hi) from rng.
std::vector<double> RandomUniform(size_t n, std::mt19937_64* rng, double lo = -1.0,
                                  double hi = 1.0);

// scale (M - M^T) with M's entries U(-1, 1), column-major: a random d x d skew matrix.
Eigen::MatrixXd RandomSkew(int64_t d, double scale, std::mt19937_64* rng);

// Dense bshd args: batch sequences of lq queries and lk keys, hq query and hkv key/value
// heads of d.
AttentionArgs Bshd(int64_t batch, int64_t lq, int64_t lk, int64_t hq, int64_t hkv, int64_t d);

// Packed thd args over the cumulative sequence lengths cu_q and cu_k (which must outlive
// the args).
AttentionArgs Thd(const std::vector<int64_t>& cu_q, const std::vector<int64_t>& cu_k, int64_t hq,
                  int64_t hkv, int64_t d);

// a with value rows of dv components (descriptor.h, VALUE HEAD SIZE): head_dim_v set and
// v and o dense in a's layout.
AttentionArgs WithValueDim(AttentionArgs a, int64_t dv);

// Multi-axis RoPE with plane_axes over the full head (interleaved pairs); a failed
// creation fails the test.
encodings::sequence::Rope MakeAxesRope(int64_t d, int num_axes, std::vector<int> plane_axes,
                                       encodings::sequence::RopeFrequencies f);

}  // namespace test
}  // namespace attention
}  // namespace gpe

#endif  // ATTENTION_TEST_UTIL_H_
