// The bfloat16 kernels (kernels_bf16.h) against loops and against the float kernels they
// mirror, bit for bit where they move or round bits; skipped on CPUs without
// AVX512_BF16.
#include "attention/cpu/kernels_bf16.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "attention/cpu/kernels.h"
#include "attention/cpu/test_util.h"
#include "encodings/sequence/rope.h"
#include "gtest/gtest.h"

namespace gpe {
namespace attention {
namespace {

using test::Bf;
using test::Fl;
using test::RandomF;

TEST(KernelsBf16, DotProductTilesMatchLoops) {
  if (!cpu::HasBf16DotProduct()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::mt19937_64 rng(21);
  for (int64_t d : {1, 7, 32, 128}) {
    for (int64_t mq : {1, 5, 6, 7, 13}) {
      for (int64_t nk : {1, 63, 64, 65, 130}) {
        const int64_t panels = (nk + cpu::kPanel - 1) / cpu::kPanel, deven = d + d % 2;
        const int64_t lds = panels * cpu::kPanel;
        std::vector<float> qf = RandomF(mq * deven, &rng), kf = RandomF(nk * d, &rng);
        std::vector<uint16_t> q(mq * deven), k(nk * d);
        for (size_t i = 0; i < q.size(); ++i) q[i] = (i % deven) < size_t(d) ? Bf(qf[i]) : 0;
        for (size_t i = 0; i < k.size(); ++i) k[i] = Bf(kf[i]);
        std::vector<uint16_t> packed(panels * cpu::kPanel * deven);
        cpu::PackKeyPanelsBf16(k.data(), nk, d, d, packed.data());
        std::vector<float> s(mq * lds);
        cpu::ScoreTileBf16(q.data(), deven, mq, d, packed.data(), panels, s.data(), lds);
        for (int64_t r = 0; r < mq; ++r) {
          for (int64_t j = 0; j < lds; ++j) {
            double want = 0;
            for (int64_t c = 0; c < d && j < nk; ++c) want += double(Fl(q[r * deven + c])) * Fl(k[j * d + c]);
            // bf16 x bf16 products are exact in float; only float summation differs.
            ASSERT_NEAR(s[r * lds + j], want, 1e-6 * d * 4 + 1e-6) << d << " " << mq << " " << nk;
          }
        }
        // P V: probabilities in [0, 1] as bf16 rows, values as pairs.
        for (int64_t dp : {16, 48, 128}) {
          std::vector<float> pf(mq * lds), vf = RandomF(nk * dp, &rng);
          for (float& x : pf) x = std::fabs(x) / 3;
          std::vector<uint16_t> p16(mq * lds), v16(nk * dp), pairs(((nk + 1) / 2) * 2 * dp);
          cpu::RoundRowsBf16(pf.data(), lds, mq, lds, p16.data(), lds);
          for (size_t i = 0; i < p16.size(); ++i) ASSERT_EQ(p16[i], Bf(pf[i]));
          for (size_t i = 0; i < v16.size(); ++i) v16[i] = Bf(vf[i]);
          cpu::PackValuePairsBf16(v16.data(), nk, dp, dp, dp, pairs.data());
          std::vector<float> o = RandomF(mq * dp, &rng), alpha = RandomF(mq, &rng), o2 = o;
          cpu::AccumulateTileBf16(p16.data(), lds, mq, nk, pairs.data(), dp, alpha.data(), o2.data(), dp);
          for (int64_t r = 0; r < mq; ++r) {
            for (int64_t c = 0; c < dp; ++c) {
              double want = double(alpha[r]) * o[r * dp + c];
              for (int64_t j = 0; j < nk; ++j) want += double(Fl(p16[r * lds + j])) * Fl(v16[j * dp + c]);
              ASSERT_NEAR(o2[r * dp + c], want, 1e-6 * (nk + 1) * 4) << dp << " " << mq << " " << nk;
            }
          }
        }
      }
    }
  }
}

// The vector packs move bits only, so they must equal the element loops exactly, on
// every shape: keys below, at and above a panel (kPanel = 64) and an odd count, d odd,
// even, below / at / above and not a multiple of the 32-component vector block, rows
// packed (ld = d) or strided (ld > d), value rows padded to dp >= d. Any bit pattern
// (NaNs included) must pass through unchanged; outputs start from a sentinel so an
// unwritten or overwritten element shows, and a guard past the end must stay intact.
TEST(KernelsBf16, VectorPacksMatchTheReferenceLoopsBitForBit) {
  if (!cpu::HasBf16DotProduct()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::mt19937_64 rng(22);
  constexpr int64_t kGuard = 64;
  constexpr uint16_t kSentinel = 0xA5A5;
  for (int64_t nk : {1, 2, 3, 15, 16, 17, 63, 64, 65, 128, 131}) {
    for (int64_t d : {1, 2, 3, 17, 31, 32, 33, 64, 65, 100, 128}) {
      for (int64_t extra : {0, 7}) {
        const int64_t ld = d + extra;
        std::vector<uint16_t> src(nk * ld);
        for (uint16_t& x : src) x = static_cast<uint16_t>(rng());
        const int64_t panels = (nk + cpu::kPanel - 1) / cpu::kPanel, pairs = (d + 1) / 2;
        const size_t nkey = static_cast<size_t>(panels * pairs * 2 * cpu::kPanel);
        std::vector<uint16_t> want(nkey + kGuard, kSentinel), got(nkey + kGuard, kSentinel);
        cpu::PackKeyPanelsBf16Reference(src.data(), nk, ld, d, want.data());
        cpu::PackKeyPanelsBf16(src.data(), nk, ld, d, got.data());
        ASSERT_EQ(got, want) << "keys nk " << nk << " d " << d << " ld " << ld;
        for (int64_t dp : {(d + 15) / 16 * 16, (d + 15) / 16 * 16 + 16}) {
          const size_t nval = static_cast<size_t>((nk + 1) / 2 * 2 * dp);
          std::vector<uint16_t> vwant(nval + kGuard, kSentinel), vgot(nval + kGuard, kSentinel);
          cpu::PackValuePairsBf16Reference(src.data(), nk, ld, d, dp, vwant.data());
          cpu::PackValuePairsBf16(src.data(), nk, ld, d, dp, vgot.data());
          ASSERT_EQ(vgot, vwant) << "values nk " << nk << " d " << d << " ld " << ld
                                 << " dp " << dp;
        }
      }
    }
  }
}

// The vector row conversions against rope.h's scalar ToBFloat16 / ToFloat, bit for bit
// (exact: the same integer rounding, no tolerance): every bf16 pattern widened; random
// float bit patterns (all exponents: NaNs, infinities, subnormals) and hand-picked ties,
// signed zeros, the overflow to infinity and NaN payloads rounded; lengths around the
// 16-lane vector and an unaligned start.
TEST(KernelsBf16, RowConversionsMatchToBFloat16BitForBit) {
  if (!cpu::HasBf16DotProduct()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::vector<uint16_t> all(65536 + 1);
  for (size_t i = 0; i < 65536; ++i) all[i + 1] = static_cast<uint16_t>(i);
  std::vector<float> wide(all.size());
  cpu::WidenBf16Row(all.data() + 1, wide.data() + 1, 65536);
  for (size_t i = 1; i < all.size(); ++i) {
    uint32_t got, want;
    const float f = encodings::sequence::ToFloat(encodings::sequence::BFloat16{all[i]});
    std::memcpy(&got, &wide[i], sizeof(got));
    std::memcpy(&want, &f, sizeof(want));
    ASSERT_EQ(got, want) << i - 1;
  }
  std::vector<uint32_t> bits = {
      0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u,  // zeros, infinities
      0x7FC00000u, 0xFFC00001u, 0x7F800001u, 0x7FBFFFFFu,  // quiet / signalling NaNs
      0xFF80FFFFu, 0x7FFFFFFFu, 0xFFFFFFFFu,
      0x3F808000u, 0x3F818000u, 0xBF808000u, 0xBF818000u,  // ties to even (down, up)
      0x3F807FFFu, 0x3F808001u,                            // just below / above a tie
      0x00008000u, 0x00018000u, 0x0000FFFFu, 0x00000001u,  // subnormals (ties and not)
      0x807FFFFFu, 0x007F8000u, 0x007FFFFFu,               // to the smallest normal
      0x7F7FFFFFu, 0x7F7F8000u, 0x7F7F7FFFu, 0xFF7FFFFFu,  // overflow to infinity or not
  };
  std::mt19937_64 rng(23);
  for (int i = 0; i < 4000; ++i) bits.push_back(static_cast<uint32_t>(rng()));
  std::vector<float> src(bits.size() + 1);
  for (size_t i = 0; i < bits.size(); ++i) std::memcpy(&src[i + 1], &bits[i], sizeof(float));
  for (int64_t n : std::vector<int64_t>{0, 1, 15, 16, 17, 33, static_cast<int64_t>(bits.size())}) {
    std::vector<uint16_t> got(bits.size() + 2, 0xA5A5);
    cpu::RoundBf16Row(src.data() + 1, got.data() + 1, n);
    EXPECT_EQ(got[0], 0xA5A5);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[i + 1], encodings::sequence::ToBFloat16(src[i + 1]).bits)
          << std::hex << bits[i] << " n " << std::dec << n;
    }
    EXPECT_EQ(got[n + 1], 0xA5A5) << n;  // nothing written past the row
  }
}

// The fused softmax + rounding against the two kernels it replaces (kernels.h's
// SoftmaxTile, then RoundRowsBf16) on the same tiles: the same operations in the same
// order, so m, l, alpha, the bf16 probabilities and (keep_float) the float ones must
// agree bit for bit (no tolerance). Tiles below / at / above 64 columns; rows with no
// allowed score yet (m = -inf), masked scores (-inf), rows that must rescale (scores
// far above m) and rows that keep their reference (alpha = 1).
TEST(KernelsBf16, FusedSoftmaxRoundingMatchesSoftmaxThenRoundingBitForBit) {
  if (!cpu::HasBf16DotProduct()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::mt19937_64 rng(24);
  std::uniform_real_distribution<float> u(-20.0f, 20.0f);
  const float kNegInf = -std::numeric_limits<float>::infinity();
  auto bits = [](const std::vector<float>& x) {
    std::vector<uint32_t> b(x.size());
    std::memcpy(b.data(), x.data(), x.size() * sizeof(float));
    return b;
  };
  for (int64_t n : {16, 48, 64, 128}) {
    for (int64_t mq : {1, 7}) {
      for (bool keep_float : {false, true}) {
        const int64_t lds = n + 16;
        std::vector<float> s(mq * lds), m(mq), l(mq * cpu::kSumLanes), alpha(mq, -1.0f);
        for (float& x : s) x = rng() % 5 == 0 ? kNegInf : u(rng);
        for (int64_t r = 0; r < mq; ++r) {
          // Row kinds by r % 4: first tile (m = -inf), no rescale (m above every score),
          // rescale (m far below), a row masked entirely with m = -inf.
          m[r] = r % 4 == 0 || r % 4 == 3 ? kNegInf : (r % 4 == 1 ? 25.0f : -40.0f);
          if (r % 4 == 3) std::fill(s.begin() + r * lds, s.begin() + r * lds + n, kNegInf);
          for (int64_t i = 0; i < cpu::kSumLanes; ++i) {
            l[r * cpu::kSumLanes + i] = m[r] == kNegInf ? 0.0f : std::fabs(u(rng));
          }
        }
        std::vector<float> s2 = s, m2 = m, l2 = l, alpha2 = alpha;
        std::vector<uint16_t> p16(mq * lds, 0xA5A5), p16_2(mq * lds, 0xA5A5);
        cpu::SoftmaxTile(s.data(), lds, mq, n, m.data(), l.data(), alpha.data());
        cpu::RoundRowsBf16(s.data(), lds, mq, n, p16.data(), lds);
        cpu::SoftmaxRoundTileBf16(s2.data(), lds, mq, n, m2.data(), l2.data(), alpha2.data(),
                                  p16_2.data(), lds, keep_float);
        EXPECT_EQ(bits(m2), bits(m)) << n << " " << mq;
        EXPECT_EQ(bits(l2), bits(l)) << n << " " << mq;
        EXPECT_EQ(bits(alpha2), bits(alpha)) << n << " " << mq;
        EXPECT_EQ(p16_2, p16) << n << " " << mq;
        if (keep_float) {
          EXPECT_EQ(bits(s2), bits(s)) << n << " " << mq;
        }
      }
    }
  }
}

}  // namespace
}  // namespace attention
}  // namespace gpe
