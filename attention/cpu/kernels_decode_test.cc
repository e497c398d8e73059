// The decoding kernels (kernels_decode.h) against plain loops on every compiled
// instruction set: rows per head, keys and head_dim below, at and above the register
// blocks, token-major and head-major caches, with and without requests ahead.
#include "attention/cpu/kernels_decode.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "attention/cpu/kernels.h"
#include "attention/cpu/test_util.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"

namespace gpe {
namespace attention {
namespace {

using test::RandomF;

TEST(Kernels, AccumulateDecodeMatchesLoopsOnEveryTargetAndRemainder) {
  // Token-order decoding P V: every compiled instruction set (four tokens per step, four
  // rows per register block), rows per head below/at/above 4, tokens below/at/above 4
  // and not multiples of it, dp of one and several vectors (multiples of kVecPad), padded
  // strides; alpha 1 (untouched rows), in (0, 1) and 0.
  std::mt19937_64 rng(37);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  int runs = 0;
  for (int64_t target : cpu::CompiledTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (int64_t dp : {int64_t{16}, int64_t{48}, int64_t{128}}) {
      for (int64_t rows : {1, 3, 4, 5, 8}) {
        for (int64_t heads : {1, 3}) {
          for (int64_t nk : {1, 3, 4, 5, 9, 16}) {
           for (bool head_major : {false, true}) {
            // Token-major (kv heads of a token adjacent) or head-major (each head's rows
            // adjacent, heads further apart: the kernel walks heads outermost).
            const int64_t ldh = head_major ? nk * (dp + 16) + 8 : dp + 16;
            const int64_t ldv = head_major ? dp + 16 : heads * ldh + 8, lds = nk + 6, ldo = dp + 3;
            std::vector<float> p(heads * rows * lds);
            for (float& x : p) x = unit(rng);
            std::vector<float> v = RandomF(head_major ? heads * ldh : nk * ldv, &rng);
            std::vector<float> o = RandomF(heads * rows * ldo, &rng);
            std::vector<float> alpha(heads * rows);
            for (size_t i = 0; i < alpha.size(); ++i) {
              alpha[i] = i % 3 == 0 ? 1.0f : (i % 3 == 1 ? unit(rng) : 0.0f);
            }
            const std::vector<float> o0 = o;
            // Odd cases also prefetch (an unaligned range of v, not a whole number of
            // lines): requests only, the results must not change.
            // Head-major odd cases request one run per head.
            cpu::PrefetchAhead ahead;
            if (nk % 2 == 1) {
              ahead = head_major ? cpu::PrefetchAhead{v.data() + 3, (nk * ldv - 3) * 4 - 5,
                                                      heads, ldh * 4}
                                 : cpu::PrefetchAhead{v.data() + 3,
                                                      static_cast<int64_t>(v.size() - 3) * 4 - 5};
            }
            cpu::AccumulateDecode(p.data(), lds, rows, heads, nk, v.data(), ldv, ldh, dp,
                                  alpha.data(), o.data(), ldo, ahead);
            for (int64_t g = 0; g < heads; ++g) {
              for (int64_t r = 0; r < rows; ++r) {
                const int64_t row = g * rows + r;
                for (int64_t c = 0; c < ldo; ++c) {
                  if (c >= dp) {
                    ASSERT_EQ(o[row * ldo + c], o0[row * ldo + c]) << "column past dp written";
                    continue;
                  }
                  double want = double(alpha[row]) * o0[row * ldo + c];
                  double mass = std::abs(want);
                  for (int64_t j = 0; j < nk; ++j) {
                    const double t = double(p[row * lds + j]) * v[j * ldv + g * ldh + c];
                    want += t;
                    mass += std::abs(t);
                  }
                  // Float sums of nk + 1 terms in any order: error <= (nk + 1) eps mass.
                  ASSERT_NEAR(o[row * ldo + c], want, 1.2e-7 * (nk + 2) * mass + 1e-30)
                      << hwy::TargetName(target) << " dp " << dp << " rows " << rows
                      << " heads " << heads << " nk " << nk << " head_major " << head_major
                      << " g " << g << " r " << r << " c " << c;
                }
              }
            }
            ++runs;
           }
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_GT(runs, 0);
}

TEST(Kernels, ScoreDecodeMatchesLoopsOnEveryTargetAndRemainder) {
  // Token-order decoding scores: every compiled instruction set (the AVX-512 path scores
  // four rows against four keys at once), rows per head below/at/above 4, keys below/at/
  // above 4 and not multiples of it, head_dim below/at/above the vector width and not a
  // multiple of it; padded strides between heads and tokens.
  std::mt19937_64 rng(31);
  int runs = 0;
  for (int64_t target : cpu::CompiledTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (int64_t d : {1, 7, 16, 40, 129}) {
      for (int64_t rows : {1, 3, 4, 5, 8}) {
        for (int64_t heads : {1, 3}) {
          for (int64_t nk : {1, 3, 4, 5, 9, 16}) {
           for (bool head_major : {false, true}) {  // as in the test above
            const int64_t ldh = head_major ? nk * (d + 2) + 5 : d + 2;
            const int64_t ldk = head_major ? d + 2 : heads * ldh + 5, ldq = d + 1, lds = nk + 6;
            std::vector<float> q = RandomF(heads * rows * ldq, &rng);
            std::vector<float> keys = RandomF(head_major ? heads * ldh : nk * ldk, &rng);
            std::vector<float> s(heads * rows * lds, -7.0f);
            cpu::PrefetchAhead ahead;  // odd cases also prefetch (see above)
            if (nk % 2 == 1) {
              ahead = head_major ? cpu::PrefetchAhead{keys.data() + 1, (nk * ldk - 1) * 4 - 3,
                                                      heads, ldh * 4}
                                 : cpu::PrefetchAhead{keys.data() + 1,
                                                      static_cast<int64_t>(keys.size() - 1) * 4 - 3};
            }
            cpu::ScoreDecode(q.data(), ldq, rows, heads, d, keys.data(), ldk, ldh, nk, s.data(),
                             lds, ahead);
            for (int64_t g = 0; g < heads; ++g) {
              for (int64_t r = 0; r < rows; ++r) {
                const int64_t row = g * rows + r;
                for (int64_t j = 0; j < lds; ++j) {
                  if (j >= nk) {
                    ASSERT_EQ(s[row * lds + j], -7.0f) << "column " << j << " past nk written";
                    continue;
                  }
                  double want = 0.0;
                  for (int64_t c = 0; c < d; ++c) {
                    want += double(q[row * ldq + c]) * keys[j * ldk + g * ldh + c];
                  }
                  // Float sums of d products of N(0,1) values, in any order: error <~
                  // d * eps * sum |terms| (sum |terms| <~ d), as for ScoreTile.
                  ASSERT_NEAR(s[row * lds + j], want, 1e-6 * d * 4 + 1e-6)
                      << hwy::TargetName(target) << " d " << d << " rows " << rows << " heads "
                      << heads << " nk " << nk << " head_major " << head_major << " g " << g
                      << " r " << r << " j " << j;
                }
              }
            }
           }
          }
        }
      }
    }
    ++runs;
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_GE(runs, 2);
}

// The 16-bit cache kernels against the float32 ones on the same values widened: the
// same operations in the same order on the same floats (the widening is exact), so the
// outputs are bit for bit equal, on every target, for bfloat16 and float16 bit patterns
// (random 16-bit patterns with the non-finite ones replaced), shapes below, at and above
// the 4 x 4 register blocks, head_dim 16 to 128 with and without a tail, both cache orders.
TEST(Kernels, SixteenBitCacheKernelsEqualFloatKernelsOnWidenedValues) {
  std::mt19937_64 rng(41);
  std::uniform_int_distribution<int> bits(0, 0xffff);
  auto widen = [](uint16_t b, bool half) {
    float f;
    if (!half) {
      const uint32_t u = static_cast<uint32_t>(b) << 16;
      std::memcpy(&f, &u, 4);
    } else {
      cpu::WidenF16Row(&b, &f, 1);
    }
    return f;
  };
  for (int64_t target : cpu::CompiledTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (bool half : {false, true}) {
      // Magnitudes kept moderate (exponent field limited) so sums stay finite.
      auto draw = [&]() {
        uint16_t b = static_cast<uint16_t>(bits(rng));
        return half ? static_cast<uint16_t>((b & 0x83ff) | (((b >> 10) % 8 + 11) << 10))
                    : static_cast<uint16_t>((b & 0x807f) | (((b >> 7) % 8 + 123) << 7));
      };
      for (int64_t d : {int64_t{16}, int64_t{20}, int64_t{128}}) {
        for (int64_t rows : {1, 4, 5}) {
          for (int64_t heads : {1, 3}) {
            for (int64_t nk : {1, 4, 5, 9}) {
              for (bool head_major : {false, true}) {
                const int64_t ldh = head_major ? nk * (d + 8) + 8 : d + 8;
                const int64_t ldk = head_major ? d + 8 : heads * ldh + 8, lds = nk + 3;
                const size_t n = static_cast<size_t>(head_major ? heads * ldh : nk * ldk);
                std::vector<uint16_t> k16(n), v16(n);
                std::vector<float> kf(n), vf(n);
                for (size_t i = 0; i < n; ++i) {
                  k16[i] = draw();
                  v16[i] = draw();
                  kf[i] = widen(k16[i], half);
                  vf[i] = widen(v16[i], half);
                }
                std::vector<float> q = RandomF(static_cast<size_t>(heads * rows * d), &rng);
                std::vector<float> s32(static_cast<size_t>(heads * rows * lds), 0.0f), s16 = s32;
                cpu::ScoreDecode(q.data(), d, rows, heads, d, kf.data(), ldk, ldh, nk, s32.data(), lds);
                cpu::ScoreDecode16(q.data(), d, rows, heads, d, k16.data(), ldk, ldh, nk, s16.data(),
                                   lds, half);
                ASSERT_EQ(s32, s16) << hwy::TargetName(target) << " scores half " << half << " d " << d
                                    << " rows " << rows << " heads " << heads << " nk " << nk;
                if (d % 16 != 0) continue;  // P V takes dp, a multiple of the vector width
                std::vector<float> p = RandomF(static_cast<size_t>(heads * rows * lds), &rng);
                std::vector<float> alpha(static_cast<size_t>(heads * rows), 0.5f);
                std::vector<float> o32 = RandomF(static_cast<size_t>(heads * rows * d), &rng), o16 = o32;
                cpu::AccumulateDecode(p.data(), lds, rows, heads, nk, vf.data(), ldk, ldh, d,
                                      alpha.data(), o32.data(), d);
                cpu::AccumulateDecode16(p.data(), lds, rows, heads, nk, v16.data(), ldk, ldh, d,
                                        alpha.data(), o16.data(), d, half);
                ASSERT_EQ(o32, o16) << hwy::TargetName(target) << " P V half " << half << " d " << d
                                    << " rows " << rows << " heads " << heads << " nk " << nk;
              }
            }
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
}  // namespace attention
}  // namespace gpe
