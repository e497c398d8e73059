// The SIMD tile kernels (kernels.h) against plain loops, on shapes below, at and above
// every register tile, on every compiled instruction set where the test says so.
#include "attention/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention/cpu/test_util.h"
#include "gtest/gtest.h"
#include "hwy/aligned_allocator.h"
#include "hwy/targets.h"

namespace gpe {
namespace attention {
namespace {

using test::RandomF;

TEST(Kernels, Exp2IsAccurateAndUnderflowsToZero) {
  std::vector<float> x;
  for (float t = -130.0f; t <= 0.0f; t += 0.0137f) x.push_back(t);
  x.push_back(-std::numeric_limits<float>::infinity());
  x.push_back(0.0f);
  std::vector<float> y = x;
  cpu::Exp2InPlace(y.data(), static_cast<int64_t>(y.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp2(static_cast<double>(x[i]));
    if (x[i] < -126.0f) {
      EXPECT_EQ(y[i], 0.0f) << x[i];
    } else {
      // Polynomial error 1.9e-9 plus ~8 float roundings (Estrin's scheme, 2^n): 4 ulps.
      EXPECT_NEAR(y[i], want, 4.8e-7 * want) << x[i];
    }
  }
}

// NaN lanes give NaN on every compiled target (a NaN score must reach its row's sum and
// output, as PyTorch's softmax gives NaN), the other lanes their usual values, and -inf
// still 0. NaN must not reach the conversion to int32, which is C++ on EMU128 and
// undefined for NaN there (the lanes are clamped first); the sanitizer run runs this
// under UBSan. 37 lanes: below, at and above the 4-, 8- and 16-lane vectors. Before the
// NaN rule every target gave 0 for the NaN lanes.
TEST(Kernels, Exp2OfNaNLanesIsNaNOnEveryTarget) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float neg_inf = -std::numeric_limits<float>::infinity();
  std::vector<float> x(37);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = i % 3 == 0 ? nan : (i % 5 == 0 ? neg_inf : -0.25f * static_cast<float>(i));
  }
  for (int64_t target : cpu::CompiledTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::vector<float> y = x;
    cpu::Exp2InPlace(y.data(), static_cast<int64_t>(y.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(x[i])) {
        EXPECT_TRUE(std::isnan(y[i])) << hwy::TargetName(target) << " lane " << i << ": " << y[i];
      } else if (x[i] == neg_inf) {
        EXPECT_EQ(y[i], 0.0f) << hwy::TargetName(target) << " lane " << i;
      } else {
        // As Exp2IsAccurateAndUnderflowsToZero: 4 ulps.
        const double want = std::exp2(static_cast<double>(x[i]));
        EXPECT_NEAR(y[i], want, 4.8e-7 * want) << hwy::TargetName(target) << " lane " << i;
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(Kernels, ScoreTileMatchesLoopsOnEveryRemainder) {
  std::mt19937_64 rng(3);
  for (int64_t d : {1, 7, 32, 129}) {
    for (int64_t mq : {1, 5, 6, 7, 11, 12, 13, 25}) {
      for (int64_t nk : {1, 31, 32, 33, 70}) {
        const int64_t panels = (nk + cpu::kPanel - 1) / cpu::kPanel, lds = panels * cpu::kPanel + 3;
        std::vector<float> q = RandomF(mq * d, &rng), keys = RandomF(nk * (d + 2), &rng);
        auto packed = hwy::AllocateAligned<float>(panels * cpu::kPanel * d);
        cpu::PackKeyPanels(keys.data(), nk, d + 2, d, packed.get());
        std::vector<float> s(mq * lds, -7.0f);
        cpu::ScoreTile(q.data(), d, mq, d, packed.get(), panels, s.data(), lds);
        for (int64_t r = 0; r < mq; ++r) {
          for (int64_t j = 0; j < panels * cpu::kPanel; ++j) {
            double want = 0.0;
            if (j < nk) {
              for (int64_t c = 0; c < d; ++c) want += double(q[r * d + c]) * keys[j * (d + 2) + c];
            }
            // Float sums of d products of N(0,1) values: error <~ d * eps * sum |terms|.
            ASSERT_NEAR(s[r * lds + j], want, 1e-6 * d * 4 + 1e-6)
                << "d " << d << " mq " << mq << " nk " << nk << " r " << r << " j " << j;
          }
          ASSERT_EQ(s[r * lds + panels * cpu::kPanel], -7.0f);  // nothing past the panels
        }
      }
    }
  }
}

TEST(Kernels, ScoreTileAheadGivesScoreTilesBitsOnEveryTargetAndRemainder) {
  // The prefetching variant changes no arithmetic: bit-equal to ScoreTile (itself checked
  // against loops above) on every compiled instruction set, for row counts below, at and
  // above the register tile, one and several panels, and prefetch regions with fewer
  // lines than the kernel has steps, as many, and more (the rest issued at the end).
  std::mt19937_64 rng(33);
  for (int64_t target : cpu::CompiledTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (int64_t d : {1, 7, 32, 129}) {
      for (int64_t mq : {1, 5, 6, 7, 12, 13}) {
        for (int64_t nk : {1, 64, 70}) {
          for (int64_t ahead_rows : {0, 1, 40, 2000}) {
            const int64_t panels = (nk + cpu::kPanel - 1) / cpu::kPanel;
            const int64_t lds = panels * cpu::kPanel + 3;
            std::vector<float> q = RandomF(mq * d, &rng), keys = RandomF(nk * d, &rng);
            auto packed = hwy::AllocateAligned<float>(panels * cpu::kPanel * d);
            cpu::PackKeyPanels(keys.data(), nk, d, d, packed.get());
            std::vector<float> region = RandomF(std::max<int64_t>(ahead_rows, 1) * (d + 5), &rng);
            cpu::PrefetchRows ahead;
            ahead.num = ahead_rows > 0 ? 2 : 0;
            ahead.base[0] = ahead.base[1] = region.data();
            ahead.rows = ahead_rows;
            ahead.ld = d + 5;
            ahead.row_floats = d;
            std::vector<float> want(mq * lds, -7.0f), got(mq * lds, -7.0f);
            cpu::ScoreTile(q.data(), d, mq, d, packed.get(), panels, want.data(), lds);
            cpu::ScoreTileAhead(q.data(), d, mq, d, packed.get(), panels, got.data(), lds, ahead);
            ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
                << hwy::TargetName(target) << " d " << d << " mq " << mq << " nk " << nk
                << " ahead " << ahead_rows;
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(Kernels, SoftmaxGradTileMatchesLoopsOnEveryTarget) {
  // dS = P (dP - D), one subtraction and one multiplication per element: the kernel rounds
  // as the loop does, so the results are bit-equal (tolerance 0), on widths of one vector
  // (AVX2's 8, AVX-512's 16), several, and row strides wider than the width.
  std::mt19937_64 rng(34);
  for (int64_t target : cpu::CompiledTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (int64_t mq : {1, 5, 6, 7, 13}) {
      for (int64_t n : {16, 64, 128}) {
        const int64_t ldp = n + 16, ldd = n + 32;
        std::vector<float> p = RandomF(mq * ldp, &rng), dp = RandomF(mq * ldd, &rng);
        std::vector<float> dsum = RandomF(mq, &rng), want = dp;
        for (int64_t r = 0; r < mq; ++r) {
          for (int64_t j = 0; j < n; ++j) {
            want[r * ldd + j] = p[r * ldp + j] * (dp[r * ldd + j] - dsum[r]);
          }
        }
        cpu::SoftmaxGradTile(p.data(), ldp, dp.data(), ldd, mq, n, dsum.data());
        // Columns past n (the stride's padding) keep their values.
        ASSERT_EQ(0, std::memcmp(want.data(), dp.data(), want.size() * sizeof(float)))
            << hwy::TargetName(target) << " mq " << mq << " n " << n;
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(Kernels, SoftcapTileMatchesTanhOnEveryTargetAndRemainder) {
  // c tanh(x / c) and 1 - tanh^2 against std::tanh in double: Highway's tanh is within
  // 4 ulp, the products add an ulp or two, so 1e-6 relative to c (plus 2e-7 absolute on
  // the derivative, in [0, 1]) holds with room, while a wrong formula (no cap, tanh of x
  // instead of x / c, a missed tail) is off by O(0.1). Scores up to +-40: both the linear
  // region and saturation, vectors all within |x| <= c/3 (the polynomial alone: cap 150,
  // and 5000, past 2^12, with the coefficients unscaled), all beyond it (0.5) and mixed
  // (5, 30, 100); NaN stays NaN, +-inf become +-c; columns past n untouched.
  std::mt19937_64 rng(35);
  std::uniform_real_distribution<float> u(-40.0f, 40.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int64_t target : cpu::CompiledTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (int64_t n : {1, 7, 16, 17, 40}) {
      for (float cap : {0.5f, 5.0f, 30.0f, 100.0f, 150.0f, 5000.0f}) {
        const int64_t mq = 3, lds = n + 5, ldd = n + 3;
        std::vector<float> s(mq * lds), d(mq * ldd, -7.0f);
        for (float& x : s) x = u(rng);
        s[0] = nan;
        if (n > 2) s[1] = inf, s[2] = -inf;
        const std::vector<float> in = s;
        cpu::SoftcapTile(s.data(), lds, mq, n, cap, d.data(), ldd);
        for (int64_t r = 0; r < mq; ++r) {
          for (int64_t j = 0; j < lds; ++j) {
            const float x = in[r * lds + j], got = s[r * lds + j];
            const std::string at = std::string(hwy::TargetName(target)) + " n " + std::to_string(n) +
                                   " cap " + std::to_string(cap) + " at " + std::to_string(r * lds + j);
            if (j >= n) {  // past n: untouched
              ASSERT_EQ(std::memcmp(&got, &x, sizeof(float)), 0) << at;
              continue;
            }
            if (std::isnan(x)) {
              EXPECT_TRUE(std::isnan(got) && std::isnan(d[r * ldd + j])) << at;
              continue;
            }
            if (std::isinf(x)) {  // the derivative exactly 0, as the header says
              EXPECT_EQ(d[r * ldd + j], 0.0f) << at;
            }
            const double t = std::tanh(double(x) / cap);
            EXPECT_NEAR(got, cap * t, 1e-6 * cap) << at;
            EXPECT_NEAR(d[r * ldd + j], 1.0 - t * t, 2e-6) << at;
          }
          for (int64_t j = n; j < ldd; ++j) ASSERT_EQ(d[r * ldd + j], -7.0f);
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// The polynomial range |x| <= c/3 to float's accuracy: within 2 ulp of c tanh(x / c)
// (the coefficients' error is 1.0 ulp with the kernel's roundings; a wrong coefficient
// costs several: the 1e-6 c above would not see it), on every target and several caps,
// those that fold the coefficients (5, 30, 150) and one that does not (5000).
TEST(Kernels, SoftcapPolynomialIsWithinTwoUlp) {
  for (int64_t target : cpu::CompiledTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (float cap : {5.0f, 30.0f, 150.0f, 5000.0f}) {
      const int64_t n = 4096;
      std::vector<float> s(n);
      for (int64_t j = 0; j < n; ++j) s[j] = cap / 3.0f * (2.0f * j / (n - 1) - 1.0f);
      const std::vector<float> in = s;
      cpu::SoftcapTile(s.data(), n, 1, n, cap, nullptr, 0);
      for (int64_t j = 0; j < n; ++j) {
        const double want = cap * std::tanh(double(in[j]) / cap);
        const float w = static_cast<float>(want);
        const double ulp = std::nextafter(std::fabs(w), INFINITY) - std::fabs(w);
        ASSERT_LE(std::fabs(s[j] - want), 2 * ulp)
            << hwy::TargetName(target) << " cap " << cap << " x " << in[j];
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(Kernels, AccumulateTileMatchesLoopsOnEveryRemainder) {
  std::mt19937_64 rng(4);
  for (int64_t dp : {16, 32, 48, 64, 80, 128, 144}) {
    for (int64_t mq : {1, 2, 3, 4, 5, 6, 7, 13}) {
      for (int64_t nk : {1, 17, 64}) {
        const int64_t ldp = nk + 5, ldv = dp + 16, ldo = dp + 32;
        std::vector<float> p = RandomF(mq * ldp, &rng), v = RandomF(nk * ldv, &rng);
        std::vector<float> o = RandomF(mq * ldo, &rng), alpha = RandomF(mq, &rng);
        std::vector<float> o2 = o;
        cpu::AccumulateTile(p.data(), ldp, mq, nk, v.data(), ldv, dp, alpha.data(), o2.data(), ldo);
        for (int64_t r = 0; r < mq; ++r) {
          for (int64_t c = 0; c < ldo; ++c) {
            double want = o[r * ldo + c];
            if (c < dp) {
              want *= alpha[r];
              for (int64_t j = 0; j < nk; ++j) want += double(p[r * ldp + j]) * v[j * ldv + c];
            }
            ASSERT_NEAR(o2[r * ldo + c], want, 1e-6 * (nk + 1) * 4)
                << "dp " << dp << " mq " << mq << " nk " << nk << " r " << r << " c " << c;
          }
        }
        // Transposed probabilities: pt[j * ldpt + r] holds p[r][j].
        const int64_t ldpt = mq + 3;
        std::vector<float> pt(nk * ldpt, 9.0f), o3 = o;
        for (int64_t r = 0; r < mq; ++r) {
          for (int64_t j = 0; j < nk; ++j) pt[j * ldpt + r] = p[r * ldp + j];
        }
        cpu::AccumulateTileT(pt.data(), ldpt, mq, nk, v.data(), ldv, dp, alpha.data(), o3.data(), ldo);
        for (size_t i = 0; i < o3.size(); ++i) {
          // Same products summed in the same order: identical results.
          ASSERT_EQ(o3[i], o2[i]) << "transposed dp " << dp << " mq " << mq << " nk " << nk;
        }
      }
    }
  }
}

TEST(Kernels, AccumulateTileAddGivesTheBitsOfAlphaOneOnEveryTargetAndRemainder) {
  // o += P V and o += P^T V without the scaling: alpha = 1 multiplies exactly, so the
  // results must equal AccumulateTile(T)'s with alpha = 1 bit for bit (tolerance 0; those
  // are checked against loops above), for row counts below, at and above the register
  // tiles (AVX-512 6 rows, AVX2 3), column counts of one, three, four and more vectors, and
  // reduction lengths 1 to past a tile.
  std::mt19937_64 rng(35);
  for (int64_t target : cpu::CompiledTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (int64_t mq : {1, 2, 3, 5, 6, 7, 13}) {
      for (int64_t dp : {16, 48, 64, 128}) {
        for (int64_t nk : {1, 7, 96}) {
          for (bool trans : {false, true}) {
            const int64_t ldp = trans ? mq + 3 : nk + 3, ldv = dp + 16, ldo = dp + 32;
            std::vector<float> p = RandomF((trans ? nk : mq) * ldp, &rng);
            std::vector<float> v = RandomF(nk * ldv, &rng), o = RandomF(mq * ldo, &rng);
            std::vector<float> ones(mq, 1.0f), want = o;
            if (trans) {
              cpu::AccumulateTileT(p.data(), ldp, mq, nk, v.data(), ldv, dp, ones.data(),
                                   want.data(), ldo);
              cpu::AccumulateTileTAdd(p.data(), ldp, mq, nk, v.data(), ldv, dp, o.data(), ldo);
            } else {
              cpu::AccumulateTile(p.data(), ldp, mq, nk, v.data(), ldv, dp, ones.data(),
                                  want.data(), ldo);
              cpu::AccumulateTileAdd(p.data(), ldp, mq, nk, v.data(), ldv, dp, o.data(), ldo);
            }
            ASSERT_EQ(0, std::memcmp(want.data(), o.data(), o.size() * sizeof(float)))
                << hwy::TargetName(target) << " mq " << mq << " dp " << dp << " nk " << nk
                << " trans " << trans;
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(Kernels, BiasTilesAddAsTheirLoopsOnEveryTarget) {
  // AddScaledTile against its loop, with a row stride past n and a Toeplitz tile read
  // from its diagonals (ldt = -1); AddSeparableTile against AddScaledTile of the formed
  // tile u[r] + w[j] (the same operations in the same order, fused alike: bit for bit).
  // Every compiled target, widths below, at and above the vectors.
  std::mt19937_64 rng(44);
  for (int64_t target : cpu::CompiledTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (int64_t n : {1, 5, 16, 17, 33, 64, 100}) {
      const int64_t nr = 5, lds = n + 3, ldt = n + 7;
      const float c = 1.4426950f;
      const std::vector<float> s0 = RandomF(nr * lds, &rng, 5.0), t = RandomF(nr * ldt, &rng, 9.0),
                               diag = RandomF(nr + n - 1, &rng, 9.0), u = RandomF(nr, &rng, 20.0),
                               w = RandomF(n, &rng, 30.0);
      const std::string at = std::string(hwy::TargetName(target)) + " n " + std::to_string(n);
      auto loop = [&](const float* src, int64_t ld) {
        std::vector<float> out = s0;
        for (int64_t r = 0; r < nr; ++r) {
          for (int64_t j = 0; j < n; ++j) {
            const float prod = c * src[r * ld + j];
            out[r * lds + j] = out[r * lds + j] + prod;
          }
        }
        return out;
      };
      std::vector<float> got = s0;
      cpu::AddScaledTile(got.data(), lds, t.data(), ldt, nr, n, c);
      // The compiler may fuse c t + s into one FMA where the target has one: the product's
      // rounding (half an ulp of |c t| <= 9 c: 6e-7) can move the sum by an ulp of itself:
      // 2 ulp of the sum plus 2e-6 allowed, while a wrong row, stride or tail is off by
      // O(1). Padding past n must stay as it was.
      auto near = [&](const std::vector<float>& x, const std::vector<float>& y, const char* what) {
        for (size_t i = 0; i < x.size(); ++i) {
          if (static_cast<int64_t>(i % lds) >= n) {
            ASSERT_EQ(x[i], s0[i]) << at << what << " padding " << i;
          }
          ASSERT_NEAR(x[i], y[i], 2.4e-7 * std::abs(y[i]) + 2e-6) << at << what << " at " << i;
        }
      };
      near(got, loop(t.data(), ldt), "");
      got = s0;
      cpu::AddScaledTile(got.data(), lds, diag.data() + nr - 1, -1, nr, n, c);
      near(got, loop(diag.data() + nr - 1, -1), " (Toeplitz)");
      std::vector<float> formed(nr * n);
      for (int64_t r = 0; r < nr; ++r) {
        for (int64_t j = 0; j < n; ++j) formed[r * n + j] = u[r] + w[j];
      }
      std::vector<float> want = s0;
      cpu::AddScaledTile(want.data(), lds, formed.data(), n, nr, n, c);
      got = s0;
      cpu::AddSeparableTile(got.data(), lds, u.data(), w.data(), nr, n, c);
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float))) << at;
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(Kernels, SoftmaxTileWithCapIsSoftcapTileThenSoftmaxTileOnEveryTarget) {
  // The cap applied in the maxima pass is the same vector arithmetic as SoftcapTile's, so
  // the fused step equals the two passes bit for bit (tolerance 0), -inf kept masked.
  std::mt19937_64 rng(36);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t target : cpu::CompiledTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    const int64_t mq = 5, n = 64, lds = 80;
    std::vector<float> s = RandomF(mq * lds, &rng, 20.0);
    for (int64_t j = 0; j < n; ++j) s[3 * lds + j] = -inf;  // a masked row
    s[1 * lds + 5] = -inf;
    std::vector<float> two = s;
    std::vector<float> m1(mq, -inf), l1(mq * cpu::kSumLanes, 0.0f), a1(mq);
    std::vector<float> m2 = m1, l2 = l1, a2 = a1;
    const float cap = 7.0f;
    cpu::SoftmaxTile(s.data(), lds, mq, n, m1.data(), l1.data(), a1.data(), cap);
    // Two passes: the cap on allowed scores only (as the fused pass, -inf stays -inf).
    std::vector<float> masked(two.size());
    for (size_t i = 0; i < two.size(); ++i) masked[i] = two[i] == -inf ? 1.0f : 0.0f;
    cpu::SoftcapTile(two.data(), lds, mq, n, cap, nullptr, 0);
    for (size_t i = 0; i < two.size(); ++i) {
      if (masked[i] != 0.0f) two[i] = -inf;
    }
    cpu::SoftmaxTile(two.data(), lds, mq, n, m2.data(), l2.data(), a2.data());
    for (int64_t r = 0; r < mq; ++r) {
      ASSERT_EQ(0, std::memcmp(s.data() + r * lds, two.data() + r * lds, n * sizeof(float)))
          << hwy::TargetName(target) << " row " << r;
    }
    EXPECT_EQ(m1, m2);
    EXPECT_EQ(l1, l2);
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(Kernels, SoftmaxTileIsOneOnlineStep) {
  std::mt19937_64 rng(5);
  const int64_t mq = 6, n = 64, lds = 70;
  std::vector<float> s = RandomF(mq * lds, &rng, 3.0);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) s[4 * lds + j] = -inf;  // row 4 fully masked
  s[1 * lds + 7] = -inf;
  // Reference maxima: none yet (rows 0, 3, 4), far below the scores (row 1: rescale),
  // above them (row 2: no rescale), within the slack below the tile's max (row 5).
  std::vector<float> m = {-inf, -20.0f, 100.0f, -inf, -inf, 0.0f};
  float row5_max = -inf;
  for (int64_t j = 0; j < n; ++j) row5_max = std::max(row5_max, s[5 * lds + j]);
  m[5] = row5_max - 0.5f * cpu::kRescaleSlack;
  std::vector<float> l(mq * cpu::kSumLanes);
  for (int64_t r = 0; r < mq; ++r) {
    for (int64_t i = 0; i < cpu::kSumLanes; ++i) l[r * cpu::kSumLanes + i] = std::isinf(m[r]) ? 0.0f : 0.25f;
  }
  std::vector<float> alpha(mq), s2 = s, m2 = m, l2 = l;
  cpu::SoftmaxTile(s2.data(), lds, mq, n, m2.data(), l2.data(), alpha.data());
  for (int64_t r = 0; r < mq; ++r) {
    SCOPED_TRACE(r);
    double mx = -inf;
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, double(s[r * lds + j]));
    double l_old = 0.0, l_new = 0.0;
    for (int64_t i = 0; i < cpu::kSumLanes; ++i) {
      l_old += l[r * cpu::kSumLanes + i];
      l_new += l2[r * cpu::kSumLanes + i];
    }
    if (std::isinf(mx) && std::isinf(m[r])) {  // nothing allowed at all
      EXPECT_EQ(alpha[r], 1.0f);
      EXPECT_EQ(l_new, 0.0);
      for (int64_t j = 0; j < n; ++j) EXPECT_EQ(s2[r * lds + j], 0.0f);
      continue;
    }
    const bool rescale = mx > double(m[r]) + cpu::kRescaleSlack;
    EXPECT_EQ(rescale, r == 0 || r == 1 || r == 3) << "rows chosen to rescale or not";
    const float ref = rescale ? float(mx) : m[r];
    EXPECT_EQ(m2[r], ref);
    const double a = rescale ? std::exp2(double(m[r] - float(mx))) : 1.0;  // float difference, as p
    EXPECT_NEAR(alpha[r], a, 2e-7 * a);
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      // The kernel forms s - m in float (scores are float; its rounding is theirs); exp2
      // of that float difference is what it must get, to 4 ulps.
      const double p = std::exp2(double(s[r * lds + j] - ref));
      sum += p;
      EXPECT_NEAR(s2[r * lds + j], p, 5e-7 * p) << j;
      EXPECT_LE(s2[r * lds + j], std::exp2(cpu::kRescaleSlack));
    }
    // 64 float additions in 16 lanes plus the old sum: 1e-6 relative is ample.
    EXPECT_NEAR(l_new, a * l_old + sum, 1e-6 * (a * l_old + sum));
    for (int64_t j = n; j < lds; ++j) EXPECT_EQ(s2[r * lds + j], s[r * lds + j]);
  }
}

// RowsAllFinite and its 16-bit forms against a plain check: one non-finite element
// placed at every index of rows of length 1 .. 40 (below, at and above the 4-, 8-, 16-
// and 32-lane vectors), two rows with a stride, on every compiled target; and rows with
// the largest finite values (0x7f7f bf16, 0x7bff half), which must pass.
TEST(Kernels, RowsAllFiniteFindsEveryNonFiniteElement) {
  const float bad_f[] = {std::numeric_limits<float>::quiet_NaN(),
                         std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity()};
  const uint16_t bad_bf[] = {0x7fc0, 0x7f80, 0xff80, 0x7f81};
  const uint16_t bad_h[] = {0x7e00, 0x7c00, 0xfc00, 0x7c01};
  for (int64_t target : cpu::CompiledTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    const std::string t = hwy::TargetName(target);
    for (int64_t d = 1; d <= 40; ++d) {
      const int64_t ld = d + 3;
      std::vector<float> x(static_cast<size_t>(2 * ld), 3.0e38f);
      std::vector<uint16_t> bf(static_cast<size_t>(2 * ld), 0xff7f), h(static_cast<size_t>(2 * ld), 0xfbff);
      EXPECT_TRUE(cpu::RowsAllFinite(x.data(), 2, ld, d)) << t << " d " << d;
      EXPECT_TRUE(cpu::RowsAllFiniteBf16(bf.data(), 2, ld, d)) << t << " d " << d;
      EXPECT_TRUE(cpu::RowsAllFiniteF16(h.data(), 2, ld, d)) << t << " d " << d;
      // Past each row's d elements (the stride's gap) nothing is read as part of a row.
      x[static_cast<size_t>(d)] = bad_f[0];
      bf[static_cast<size_t>(d)] = bad_bf[0];
      h[static_cast<size_t>(d)] = bad_h[0];
      EXPECT_TRUE(cpu::RowsAllFinite(x.data(), 2, ld, d)) << t << " d " << d << " gap";
      EXPECT_TRUE(cpu::RowsAllFiniteBf16(bf.data(), 2, ld, d)) << t << " d " << d << " gap";
      EXPECT_TRUE(cpu::RowsAllFiniteF16(h.data(), 2, ld, d)) << t << " d " << d << " gap";
      for (int64_t r = 0; r < 2; ++r) {
        for (int64_t c = 0; c < d; ++c) {
          const size_t i = static_cast<size_t>(r * ld + c);
          for (float b : bad_f) {
            std::vector<float> y = x;
            y[i] = b;
            EXPECT_FALSE(cpu::RowsAllFinite(y.data(), 2, ld, d)) << t << " d " << d << " at " << i;
          }
          for (size_t k = 0; k < 4; ++k) {
            std::vector<uint16_t> y = bf, z = h;
            y[i] = bad_bf[k];
            z[i] = bad_h[k];
            EXPECT_FALSE(cpu::RowsAllFiniteBf16(y.data(), 2, ld, d)) << t << " d " << d << " at " << i;
            EXPECT_FALSE(cpu::RowsAllFiniteF16(z.data(), 2, ld, d)) << t << " d " << d << " at " << i;
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Half to float against a plain decoding of the IEEE binary16 format (exact: every half
// is a float), on every 16-bit pattern (normals, subnormals, zeros, infinities, NaNs),
// in lengths that leave every remainder, on every compiled target.
TEST(Kernels, WidenF16RowIsExactOnEveryPattern) {
  auto plain = [](uint16_t hbits) {
    const int sign = hbits >> 15, exponent = (hbits >> 10) & 0x1f, mantissa = hbits & 0x3ff;
    double v;
    if (exponent == 0) {
      v = std::ldexp(mantissa, -24);
    } else if (exponent == 31) {
      v = mantissa == 0 ? std::numeric_limits<double>::infinity()
                        : std::numeric_limits<double>::quiet_NaN();
    } else {
      v = std::ldexp(1024 + mantissa, exponent - 25);
    }
    return static_cast<float>(sign ? -v : v);
  };
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  for (int64_t target : cpu::CompiledTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{17}, int64_t{65536}}) {
      for (int64_t start = 0; start + n <= 65536; start += (n == 65536 ? 1 : 4099)) {
        std::vector<float> out(static_cast<size_t>(n) + 1, -7.0f);
        cpu::WidenF16Row(all.data() + start, out.data(), n);
        EXPECT_EQ(out[static_cast<size_t>(n)], -7.0f) << "wrote past n";
        int bad = 0;
        for (int64_t i = 0; i < n && bad < 3; ++i) {
          const float want = plain(all[static_cast<size_t>(start + i)]);
          const float got = out[static_cast<size_t>(i)];
          if (std::isnan(want) ? !std::isnan(got) : std::memcmp(&want, &got, sizeof(float)) != 0) {
            ++bad;
            ADD_FAILURE() << hwy::TargetName(target) << " pattern " << std::hex
                          << all[static_cast<size_t>(start + i)] << ": " << got << " want " << want;
          }
        }
        if (n == 65536) break;
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
}  // namespace attention
}  // namespace gpe
