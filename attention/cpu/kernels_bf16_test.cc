// The bf16 kernels (kernels_bf16.h) on every Highway target this CPU runs, each forced in
// turn with hwy::SetSupportedTargetsForTest: the dispatch itself (the forced target runs,
// for these kernels and kernels.h's alike), the packs and row conversions bit for bit
// against the element loops and rope.h's scalar conversions, and, where the forced target
// has them (AVX3 on a CPU with AVX512_BF16), the dot-product tiles against double loops
// and the fused softmax against SoftmaxTile then RoundRowsBf16.
#include "attention/cpu/kernels_bf16.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention/cpu/kernels.h"
#include "encodings/sequence/rope.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"

namespace gpe {
namespace attention {
namespace {

std::vector<float> RandomF(size_t n, std::mt19937_64* rng) {
  std::normal_distribution<double> u(0.0, 1.0);
  std::vector<float> x(n);
  for (float& v : x) v = static_cast<float>(u(*rng));
  return x;
}

// bf16 bit patterns of floats (round to nearest even) and back.
uint16_t Bf(float f) { return encodings::sequence::ToBFloat16(f).bits; }
float Fl(uint16_t b) { return encodings::sequence::ToFloat(encodings::sequence::BFloat16{b}); }

// Sets the forced target for the scope and restores the CPU's own (0) at its end, also
// when an ASSERT returns early.
class ForceTarget {
 public:
  explicit ForceTarget(int64_t target) { hwy::SetSupportedTargetsForTest(target); }
  ~ForceTarget() { hwy::SetSupportedTargetsForTest(0); }
  ForceTarget(const ForceTarget&) = delete;
  ForceTarget& operator=(const ForceTarget&) = delete;
};

bool CpuHasAvx512Bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16") != 0;
}

TEST(KernelsBf16Dispatch, AForcedTargetRunsForEveryKernelAndDecidesTheDotProducts) {
  // One mechanism: the bf16 kernels are compiled for the float kernels' targets, and
  // forcing one selects it in both. HasBf16DotProduct() follows the forced target: only
  // AVX3 (or better) on a CPU with AVX512_BF16 has the dot products.
  const std::vector<int64_t> targets = cpu::CompiledTargetsBf16();
  ASSERT_FALSE(targets.empty());
  EXPECT_EQ(targets, cpu::CompiledTargets());
  std::string ran;
  for (int64_t target : targets) {
    ForceTarget force(target);
    const std::string name = hwy::TargetName(target);
    ran += name + " ";
    EXPECT_EQ(name, cpu::KernelTargetNameBf16());
    EXPECT_EQ(name, cpu::KernelTargetName());
    const bool dot = target <= HWY_AVX3 && CpuHasAvx512Bf16();
    EXPECT_EQ(dot, cpu::HasBf16DotProduct()) << name;
    if (!dot) {
      EXPECT_EQ(0.0, cpu::Bf16DotProductSpeedup()) << name;
      EXPECT_FALSE(cpu::Bf16DotProductsFaster()) << name;
    }
  }
  // Unforced: the best target, as the first of the list.
  EXPECT_EQ(std::string(hwy::TargetName(targets.front())), cpu::KernelTargetNameBf16());
  RecordProperty("targets", ran);
  std::printf("bf16 kernel targets run here: %s(AVX512_BF16: %s)\n", ran.c_str(),
              CpuHasAvx512Bf16() ? "yes" : "no");
}

// The dot-product kernels exist only where HasBf16DotProduct(); elsewhere a call stops
// the process with a message rather than running an illegal instruction.
TEST(KernelsBf16DeathTest, DotProductKernelsAbortOnTargetsWithoutThem) {
  for (int64_t target : cpu::CompiledTargetsBf16()) {
    ForceTarget force(target);
    if (cpu::HasBf16DotProduct()) continue;
    std::vector<uint16_t> q(64, 0), panels(64 * 64, 0);
    std::vector<float> s(64, 0.0f);
    EXPECT_DEATH(cpu::ScoreTileBf16(q.data(), 2, 1, 2, panels.data(), 1, s.data(), 64),
                 "ScoreTileBf16 needs AVX512_BF16")
        << hwy::TargetName(target);
  }
}

// The packs move bits only, so on every target they must equal the element loops exactly,
// on every shape: keys below, at and above a panel (kPanel = 64) and an odd count, d odd,
// even, below / at / above and not a multiple of the 32-component vector block, rows
// packed (ld = d) or strided (ld > d), value rows padded to dp >= d. Any bit pattern
// (NaNs included) must pass through unchanged; outputs start from a sentinel so an
// unwritten or overwritten element shows, and a guard past the end must stay intact.
TEST(KernelsBf16, PacksMatchTheReferenceLoopsBitForBitOnEveryTarget) {
  constexpr int64_t kGuard = 64;
  constexpr uint16_t kSentinel = 0xA5A5;
  for (int64_t target : cpu::CompiledTargetsBf16()) {
    ForceTarget force(target);
    std::mt19937_64 rng(22);
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
          ASSERT_EQ(got, want) << hwy::TargetName(target) << " keys nk " << nk << " d " << d
                               << " ld " << ld;
          for (int64_t dp : {(d + 15) / 16 * 16, (d + 15) / 16 * 16 + 16}) {
            const size_t nval = static_cast<size_t>((nk + 1) / 2 * 2 * dp);
            std::vector<uint16_t> vwant(nval + kGuard, kSentinel), vgot(nval + kGuard, kSentinel);
            cpu::PackValuePairsBf16Reference(src.data(), nk, ld, d, dp, vwant.data());
            cpu::PackValuePairsBf16(src.data(), nk, ld, d, dp, vgot.data());
            ASSERT_EQ(vgot, vwant) << hwy::TargetName(target) << " values nk " << nk << " d "
                                   << d << " ld " << ld << " dp " << dp;
          }
        }
      }
    }
  }
}

// The row conversions against rope.h's scalar ToBFloat16 / ToFloat on every target, bit
// for bit (exact: the same integer rounding, no tolerance): every bf16 pattern widened;
// random float bit patterns (all exponents: NaNs, infinities, subnormals) and hand-picked
// ties, signed zeros, the overflow to infinity and NaN payloads rounded; lengths around
// the 16-lane vector and an unaligned start.
TEST(KernelsBf16, RowConversionsMatchToBFloat16BitForBitOnEveryTarget) {
  std::vector<uint16_t> all(65536 + 1);
  for (size_t i = 0; i < 65536; ++i) all[i + 1] = static_cast<uint16_t>(i);
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

  for (int64_t target : cpu::CompiledTargetsBf16()) {
    ForceTarget force(target);
    std::vector<float> wide(all.size());
    cpu::WidenBf16Row(all.data() + 1, wide.data() + 1, 65536);
    for (size_t i = 1; i < all.size(); ++i) {
      uint32_t got, want;
      const float f = Fl(all[i]);
      std::memcpy(&got, &wide[i], sizeof(got));
      std::memcpy(&want, &f, sizeof(want));
      ASSERT_EQ(got, want) << hwy::TargetName(target) << " " << i - 1;
    }
    for (int64_t n : std::vector<int64_t>{0, 1, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65,
                                          static_cast<int64_t>(bits.size())}) {
      std::vector<uint16_t> got(bits.size() + 2, 0xA5A5);
      cpu::RoundBf16Row(src.data() + 1, got.data() + 1, n);
      EXPECT_EQ(got[0], 0xA5A5) << hwy::TargetName(target);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(got[i + 1], Bf(src[i + 1]))
            << hwy::TargetName(target) << " " << std::hex << bits[i] << " n " << std::dec << n;
      }
      EXPECT_EQ(got[n + 1], 0xA5A5) << hwy::TargetName(target) << " " << n;  // nothing past the row
    }
  }
}

// The dot-product tiles against double loops on the targets that have them: bf16 x bf16
// products are exact in float, so only the float summation differs from the double sum
// (tolerance 4e-6 per term). Row counts below, at and above the 6-row register tile, key
// counts around a panel, odd d, and value widths of one to several 4-vector tiles.
TEST(KernelsBf16, DotProductTilesMatchLoopsWhereTheTargetHasThem) {
  int ran = 0;
  for (int64_t target : cpu::CompiledTargetsBf16()) {
    ForceTarget force(target);
    if (!cpu::HasBf16DotProduct()) continue;
    ++ran;
    std::mt19937_64 rng(21);
    for (int64_t d : {1, 7, 32, 128}) {
      for (int64_t mq : {1, 5, 6, 7, 13}) {
        for (int64_t nk : {1, 63, 64, 65, 130}) {
          const int64_t panels = (nk + cpu::kPanel - 1) / cpu::kPanel, deven = d + d % 2;
          const int64_t lds = panels * cpu::kPanel;
          std::vector<float> qf = RandomF(mq * deven, &rng), kf = RandomF(nk * d, &rng);
          std::vector<uint16_t> q(mq * deven), k(nk * d);
          for (size_t i = 0; i < q.size(); ++i) {
            q[i] = static_cast<int64_t>(i % deven) < d ? Bf(qf[i]) : 0;
          }
          for (size_t i = 0; i < k.size(); ++i) k[i] = Bf(kf[i]);
          std::vector<uint16_t> packed(panels * cpu::kPanel * deven);
          cpu::PackKeyPanelsBf16(k.data(), nk, d, d, packed.data());
          std::vector<float> s(mq * lds);
          cpu::ScoreTileBf16(q.data(), deven, mq, d, packed.data(), panels, s.data(), lds);
          for (int64_t r = 0; r < mq; ++r) {
            for (int64_t j = 0; j < lds; ++j) {
              double want = 0;
              for (int64_t c = 0; c < d && j < nk; ++c) {
                want += double(Fl(q[r * deven + c])) * Fl(k[j * d + c]);
              }
              ASSERT_NEAR(s[r * lds + j], want, 1e-6 * d * 4 + 1e-6)
                  << hwy::TargetName(target) << " " << d << " " << mq << " " << nk;
            }
          }
          // Started from a fused bias: log2 e times a tile of stride lds + 3, and a Toeplitz
          // tile read from its diagonals (stride -1, row r from offset mq - 1 - r); the
          // sums as above plus the rounded product (its own rounding: 2^-24 of it).
          const float log2e = 1.4426950408889634f;
          std::vector<float> tile = RandomF(mq * (lds + 3), &rng), diag = RandomF(mq - 1 + lds, &rng);
          for (int toeplitz : {0, 1}) {
            const float* init = toeplitz ? diag.data() + (mq - 1) : tile.data();
            const int64_t ldi = toeplitz ? -1 : lds + 3;
            std::vector<float> sb(mq * lds);
            cpu::ScoreTileBf16(q.data(), deven, mq, d, packed.data(), panels, sb.data(), lds, init,
                               ldi, log2e);
            for (int64_t r = 0; r < mq; ++r) {
              for (int64_t j = 0; j < lds; ++j) {
                const double b = double(log2e * init[r * ldi + j]);
                double want = b;
                for (int64_t cc = 0; cc < d && j < nk; ++cc) {
                  want += double(Fl(q[r * deven + cc])) * Fl(k[j * d + cc]);
                }
                ASSERT_NEAR(sb[r * lds + j], want, 1e-6 * d * 4 + 1e-6 + 1e-7 * std::fabs(b))
                    << hwy::TargetName(target) << " toeplitz " << toeplitz << " " << d << " "
                    << mq << " " << nk << " row " << r << " column " << j;
              }
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
            cpu::AccumulateTileBf16(p16.data(), lds, mq, nk, pairs.data(), dp, alpha.data(),
                                    o2.data(), dp);
            for (int64_t r = 0; r < mq; ++r) {
              for (int64_t c = 0; c < dp; ++c) {
                double want = double(alpha[r]) * o[r * dp + c];
                for (int64_t j = 0; j < nk; ++j) {
                  want += double(Fl(p16[r * lds + j])) * Fl(v16[j * dp + c]);
                }
                ASSERT_NEAR(o2[r * dp + c], want, 1e-6 * (nk + 1) * 4)
                    << hwy::TargetName(target) << " " << dp << " " << mq << " " << nk;
              }
            }
          }
        }
      }
    }
  }
  if (ran == 0) GTEST_SKIP() << "no target here has AVX512_BF16 dot products";
}

// The decode kernels on the dot products against double loops where the target has them:
// bf16 x bf16 products exact in float, float sums (4e-6 per term, as above). Rows below,
// at and above the 4-row block (1..5), key counts around the 4-key block (1, 4, 5, 9),
// head_dim below, at and above the 32-component load (16, 20, 40, 128; value widths with
// a 16-column half chunk), one and three kv heads, token-major and head-major caches
// (row strides past the rows: nothing there may be read into a sum).
TEST(KernelsBf16, DecodeKernelsMatchLoopsWhereTheTargetHasThem) {
  int ran = 0;
  for (int64_t target : cpu::CompiledTargetsBf16()) {
    ForceTarget force(target);
    if (!cpu::HasBf16DotProduct()) continue;
    ++ran;
    std::mt19937_64 rng(29);
    for (int64_t d : {16, 20, 40, 128}) {
      const int64_t dp = (d + 15) / 16 * 16;
      for (int64_t rows : {1, 4, 5}) {
        for (int64_t heads : {1, 3}) {
          for (int64_t nk : {1, 4, 5, 9}) {
            for (bool head_major : {false, true}) {
              const int64_t ldh = head_major ? nk * (d + 8) + 8 : d + 8;
              const int64_t ldk = head_major ? d + 8 : heads * ldh + 8, lds = nk + 3;
              const int64_t ldq = d + 6, ldo = dp + 16;
              const size_t n = static_cast<size_t>(head_major ? heads * ldh : nk * ldk);
              std::vector<uint16_t> k(n), v(n), q(static_cast<size_t>(heads * rows * ldq));
              for (uint16_t& x : k) x = Bf(RandomF(1, &rng)[0]);
              for (uint16_t& x : v) x = Bf(RandomF(1, &rng)[0]);
              for (uint16_t& x : q) x = Bf(RandomF(1, &rng)[0]);
              std::vector<float> s(static_cast<size_t>(heads * rows * lds), -7.0f);
              cpu::ScoreDecodeBf16(q.data(), ldq, rows, heads, d, k.data(), ldk, ldh, nk,
                                   s.data(), lds);
              std::vector<uint16_t> p(s.size(), 0);
              for (int64_t g = 0; g < heads; ++g) {
                for (int64_t r = 0; r < rows; ++r) {
                  const int64_t row = g * rows + r;
                  for (int64_t j = 0; j < lds; ++j) {
                    if (j >= nk) {  // nothing written past nk
                      ASSERT_EQ(s[row * lds + j], -7.0f) << hwy::TargetName(target);
                      continue;
                    }
                    double want = 0.0;
                    for (int64_t c = 0; c < d; ++c) {
                      want += double(Fl(q[row * ldq + c])) * Fl(k[j * ldk + g * ldh + c]);
                    }
                    ASSERT_NEAR(s[row * lds + j], want, 4e-6 * d + 1e-6)
                        << hwy::TargetName(target) << " d " << d << " rows " << rows
                        << " heads " << heads << " nk " << nk << " head_major " << head_major;
                    p[row * lds + j] = Bf(std::fabs(RandomF(1, &rng)[0]) / 3);
                  }
                }
              }
              std::vector<float> alpha = RandomF(static_cast<size_t>(heads * rows), &rng);
              alpha[0] = 1.0f;  // the row left alone by lazy rescaling
              std::vector<float> o = RandomF(static_cast<size_t>(heads * rows * ldo), &rng), o2 = o;
              cpu::AccumulateDecodeBf16(p.data(), lds, rows, heads, nk, v.data(), ldk, ldh, d,
                                        dp, alpha.data(), o2.data(), ldo);
              for (int64_t row = 0; row < heads * rows; ++row) {
                const int64_t g = row / rows;
                for (int64_t c = 0; c < ldo; ++c) {
                  if (c >= dp) {  // columns past dp untouched
                    ASSERT_EQ(o2[row * ldo + c], o[row * ldo + c]) << hwy::TargetName(target);
                    continue;
                  }
                  double want = double(alpha[row]) * o[row * ldo + c];
                  for (int64_t j = 0; j < nk && c < d; ++j) {
                    want += double(Fl(p[row * lds + j])) * Fl(v[j * ldk + g * ldh + c]);
                  }
                  ASSERT_NEAR(o2[row * ldo + c], want, 4e-6 * (nk + 1) + 1e-6)
                      << hwy::TargetName(target) << " P V d " << d << " rows " << rows
                      << " heads " << heads << " nk " << nk << " head_major " << head_major;
                }
              }
            }
          }
        }
      }
    }
  }
  if (ran == 0) GTEST_SKIP() << "no target here has AVX512_BF16 dot products";
}

// The fused softmax + rounding against the two kernels it replaces (kernels.h's
// SoftmaxTile, then RoundRowsBf16) on the same tiles and the same forced target: the same
// operations in the same order, so m, l, alpha, the bf16 probabilities and (keep_float)
// the float ones must agree bit for bit (no tolerance). Tiles below / at / above 64
// columns; rows with no allowed score yet (m = -inf), masked scores (-inf), rows that
// must rescale (scores far above m) and rows that keep their reference (alpha = 1).
TEST(KernelsBf16, FusedSoftmaxRoundingMatchesSoftmaxThenRoundingWhereTheTargetHasIt) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  auto bits = [](const std::vector<float>& x) {
    std::vector<uint32_t> b(x.size());
    std::memcpy(b.data(), x.data(), x.size() * sizeof(float));
    return b;
  };
  int ran = 0;
  for (int64_t target : cpu::CompiledTargetsBf16()) {
    ForceTarget force(target);
    if (!cpu::HasBf16DotProduct()) continue;
    ++ran;
    const std::string name = hwy::TargetName(target);
    std::mt19937_64 rng(24);
    std::uniform_real_distribution<float> u(-20.0f, 20.0f);
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
          EXPECT_EQ(bits(m2), bits(m)) << name << " " << n << " " << mq;
          EXPECT_EQ(bits(l2), bits(l)) << name << " " << n << " " << mq;
          EXPECT_EQ(bits(alpha2), bits(alpha)) << name << " " << n << " " << mq;
          EXPECT_EQ(p16_2, p16) << name << " " << n << " " << mq;
          if (keep_float) {
            EXPECT_EQ(bits(s2), bits(s)) << name << " " << n << " " << mq;
          }
        }
      }
    }
  }
  if (ran == 0) GTEST_SKIP() << "no target here has AVX512_BF16 dot products";
}

}  // namespace
}  // namespace attention
}  // namespace gpe
