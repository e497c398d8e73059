// The CUDA kernels' angle reduction (reduced_angle.cuh), compiled here as host code (the
// same double arithmetic: IEEE fma and rint), against the CPU's exact reduction
// (group::ReducedAngle) rounded to float, for positions across the whole int64 range:
// below 2^31, around 2^53 (where a position converted to double first would round) and up
// to 2^63 - 1, negative ones, and RoPE's frequencies from 1 down to 1e-4 and up to pi.
// Tolerance: one float rounding of an angle in [-pi, pi] (2^-22 at most) plus the
// reductions' ~1e-12; angles within that of +-pi may land on the other end (compared
// mod 2 pi). Runs on every machine, GPU or not.
#include "encodings/sequence/cuda/reduced_angle.cuh"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "group/angle.h"
#include "gtest/gtest.h"

namespace gpe {
namespace encodings {
namespace sequence {
namespace cuda {
namespace {

double AngleDistance(double a, double b) {
  const double d = std::remainder(a - b, 2.0 * M_PI);
  return std::fabs(d);
}

TEST(ReducedAngleDevice, MatchesTheCpuReductionOverTheWholeInt64Range) {
  std::mt19937_64 rng(3);
  std::vector<double> thetas = {1.0, 0.5, 1e-4, 3.141592653589793, 0.0, 2.718281828459045};
  for (int i = 0; i < 16; ++i) thetas.push_back(std::pow(10000.0, -i / 16.0));
  std::vector<int64_t> positions = {0, 1, -1, (int64_t{1} << 31) - 1, int64_t{1} << 32,
                                    (int64_t{1} << 53) + 1, (int64_t{1} << 53) - 1,
                                    (int64_t{1} << 62) + 1000,
                                    std::numeric_limits<int64_t>::max(),
                                    std::numeric_limits<int64_t>::min() + 1,
                                    std::numeric_limits<int64_t>::min()};
  for (int bits : {31, 40, 53, 54, 62, 63}) {
    std::uniform_int_distribution<int64_t> u(-(int64_t{1} << (bits - 1)),
                                             (int64_t{1} << (bits - 1)) - 1 + (int64_t{1} << (bits - 1)));
    for (int i = 0; i < 200; ++i) positions.push_back(u(rng));
  }
  for (double theta : thetas) {
    for (int64_t p : positions) {
      const double want = group::ReducedAngle(p, theta);
      const float got = ReducedAngle(p, theta);
      ASSERT_TRUE(std::isfinite(got)) << p << " " << theta;
      ASSERT_LE(std::fabs(got), 3.1415930f) << p << " " << theta;
      ASSERT_LE(AngleDistance(got, want), 2.5e-7) << "p " << p << " theta " << theta
                                                  << " got " << got << " want " << want;
    }
  }
}

// The old helper converted p to double first: at p = 2^53 + 1 with theta 1 it rotated by
// the angle of 2^53, exactly 1 rad off. The split position keeps the 1.
TEST(ReducedAngleDevice, KeepsTheLowBitsOfPositionsPast2To53) {
  const int64_t p = (int64_t{1} << 53) + 1;
  const double diff = static_cast<double>(ReducedAngle(p, 1.0)) -
                      static_cast<double>(ReducedAngle(p - 1, 1.0));
  EXPECT_NEAR(std::remainder(diff, 2.0 * M_PI), 1.0, 1e-6);
}

}  // namespace
}  // namespace cuda
}  // namespace sequence
}  // namespace encodings
}  // namespace gpe
