// The split-bf16 float32 mode (split_bf16.h; CpuAttentionOptions::Float32Arithmetic):
// the split into parts and the concatenated rows, then CpuForward with both products on
// AMX tiles (emulated here where the CPU has none; kernels_amx_test.cc holds the
// emulation to the instruction) against the double reference, on shapes below, at and
// above the tiles' 16-row blocks, 32-element steps and the forward's tiles.
#include "attention/cpu/split_bf16.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "attention/cpu/cpu_attention.h"
#include "attention/cpu/kernels_amx.h"
#include "attention/cpu/kernels_bf16.h"
#include "attention/cpu/test_util.h"
#include "attention/descriptor.h"
#include "attention/reference.h"
#include "attention/test_util.h"
#include "encodings/sequence/bias.h"
#include "encodings/sequence/rope.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"

namespace gpe {
namespace attention {
namespace {

using F32 = CpuAttentionOptions::Float32Arithmetic;
using test::Bshd;
using test::CheckAgainstReference;
using test::Extent;
using test::Fl;
using test::MakeRope;
using test::RandomF;

// Turns the emulated tiles on for a scope, and the workspaces' bf16 buffers start as NaN
// (a pack or row the kernels read before writing shows in the outputs).
class EmulationScope {
 public:
  EmulationScope() {
    cpu::SetAmxEmulationForTest(true);
    cpu::SetBf16BufferPoisonForTest(true);
  }
  ~EmulationScope() {
    cpu::SetAmxEmulationForTest(false);
    cpu::SetBf16BufferPoisonForTest(false);
  }
};

// The split is a sequence of bf16 roundings (encodings/sequence/rope.h's ToBFloat16, the
// reference RoundBf16Row matches) of exact float differences. Each part keeps 8
// significant bits, so the rest after k parts is at most 2^-8k |x| (2^-24 after three,
// 2^-16 after two), plus half of bf16's smallest subnormal step (2^-134) once a rest
// falls below bf16's normal range.
TEST(SplitBf16, PartsAreRoundingsOfTheRestAndRecoverTheFloat) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  std::uniform_int_distribution<int> expo(-149, 127);
  const int n = 4000;
  std::vector<float> x(n);
  for (auto& v : x) {
    v = static_cast<float>(std::ldexp(mant(rng), expo(rng)) * (rng() % 2 ? 1 : -1));
    if (!std::isfinite(v) || std::fabs(v) > cpu::kSplitMax) v = 1.5f;
  }
  x[0] = 0.0f, x[1] = -0.0f, x[2] = cpu::kSplitMax, x[3] = std::numeric_limits<float>::denorm_min();
  std::vector<uint16_t> p0(n), p1(n), p2(n);
  // Every compiled target (AVX3: 32 values per step, a masked tail; the others the
  // reference loop), on lengths with and without a tail.
  for (int64_t target : cpu::CompiledTargetsBf16()) {
    hwy::SetSupportedTargetsForTest(target);
    for (int64_t len : {int64_t{1}, int64_t{31}, int64_t{32}, int64_t{33}, int64_t{n - 7}}) {
      std::vector<uint16_t> q0(len, 1), q1(len, 1), q2(len, 1), r0(len), r1(len), r2(len);
      cpu::SplitBf16Parts(x.data() + 7, len, 3, q0.data(), q1.data(), q2.data());
      const int part[3] = {0, 1, 2};
      uint16_t* const dst[3] = {r0.data(), r1.data(), r2.data()};
      cpu::SplitPartsToBf16Reference(x.data() + 7, len, 3, part, dst);
      ASSERT_EQ(q0, r0) << hwy::TargetName(target) << " " << len;
      ASSERT_EQ(q1, r1) << hwy::TargetName(target) << " " << len;
      ASSERT_EQ(q2, r2) << hwy::TargetName(target) << " " << len;
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  for (int parts : {1, 2, 3}) {
    cpu::SplitBf16Parts(x.data(), n, parts, p0.data(), parts > 1 ? p1.data() : nullptr,
                        parts > 2 ? p2.data() : nullptr);
    for (int i = 0; i < n; ++i) {
      const double xi = x[i];
      float rest = x[i];
      double sum = 0.0;
      const uint16_t* got[3] = {p0.data(), p1.data(), p2.data()};
      for (int p = 0; p < parts; ++p) {
        const uint16_t want = test::Bf(rest);
        ASSERT_EQ(got[p][i], want) << "x " << x[i] << " part " << p;
        sum += Fl(want);
        rest -= Fl(want);  // exact in float
        ASSERT_EQ(static_cast<double>(rest), xi - sum) << "x " << x[i] << " part " << p;
      }
      EXPECT_LE(std::fabs(xi - sum), std::ldexp(std::fabs(xi), -8 * parts) + std::ldexp(1.0, -134))
          << "x " << x[i] << " parts " << parts;
    }
  }
}

TEST(SplitBf16, RowsConcatenateThePartsInTheTermsOrder) {
  std::mt19937_64 rng(2);
  const int64_t rows = 3, n = 37, ldx = 41, width = 64;  // n not a multiple of anything
  std::vector<float> x = RandomF(rows * ldx, &rng);
  for (int terms : {6, 3}) {
    const cpu::SplitTerms t = cpu::SplitTermsOf(terms);
    ASSERT_EQ(t.n, terms);
    ASSERT_EQ(t.parts, terms == 6 ? 3 : 2);
    for (bool left : {true, false}) {
      const int64_t ldo = terms * width + 5;
      std::vector<uint16_t> out(rows * ldo, 0xffff);
      cpu::SplitRowsBf16(x.data(), ldx, rows, n, width, t, left, out.data(), ldo);
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<uint16_t> part[3] = {std::vector<uint16_t>(n), std::vector<uint16_t>(n),
                                         std::vector<uint16_t>(n)};
        cpu::SplitBf16Parts(x.data() + r * ldx, n, 3, part[0].data(), part[1].data(),
                            part[2].data());
        for (int k = 0; k < terms; ++k) {
          const int which = left ? t.left[k] : t.right[k];
          for (int64_t c = 0; c < width; ++c) {
            const uint16_t want = c < n ? part[which][c] : 0;
            ASSERT_EQ(out[r * ldo + k * width + c], want) << terms << " " << left << " " << k;
          }
        }
        for (int64_t c = terms * width; c < ldo; ++c) ASSERT_EQ(out[r * ldo + c], 0xffff);
      }
    }
    // The terms: exactly the (left, right) pairs of parts i, j with i + j <= 2 (six
    // terms) or <= 1 (three; part i is about 2^-8i of the value, so these are the
    // products down to 2^-16 |a b| or 2^-8 |a b|), each once, smallest first.
    std::set<std::pair<int, int>> got, want;
    for (int k = 0; k < terms; ++k) {
      got.insert({t.left[k], t.right[k]});
      if (k > 0) {
        EXPECT_LE(t.left[k] + t.right[k], t.left[k - 1] + t.right[k - 1]);
      }
    }
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; i + j <= (terms == 6 ? 2 : 1); ++j) want.insert({i, j});
    }
    EXPECT_EQ(got, want) << terms;
  }
}

TEST(SplitBf16, SafeOnlyForFiniteValuesThatStayFiniteInBf16) {
  std::vector<float> x = {1.0f, -2.0f, 0.0f, cpu::kSplitMax, -cpu::kSplitMax};
  EXPECT_TRUE(cpu::SplitSafe(x.data(), 1, 0, 5));
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN(), 3.39e38f, -3.4e38f}) {
    std::vector<float> y = x;
    y[2] = bad;
    EXPECT_FALSE(cpu::SplitSafe(y.data(), 1, 0, 5)) << bad;
    // Only the n entries of each row count: the bad value outside them is ignored.
    EXPECT_TRUE(cpu::SplitSafe(y.data(), 2, 3, 2)) << bad;
  }
}

CpuAttentionOptions SplitOptions(F32 how, int64_t block_q = 16, int64_t block_k = 64) {
  CpuAttentionOptions opt;
  opt.float32_arithmetic = how;
  opt.block_q = block_q;
  opt.block_k = block_k;
  opt.num_threads = 2;
  return opt;
}

// Six terms: the float32 criterion (twice the naive float32 error, test_util.h), on d
// 32, 64, 80 (96-wide segments) and 128, lengths below, at and above the 16-row blocks
// and the 64-key tiles, causal and not, GQA; then the default tiles, RoPE, ALiBi, the
// softcap (fused into the float softmax), a sliding window, Shaw labels and sinks. The
// tiles must have run (the count of emulated TDPBF16PS grows).
TEST(SplitBf16Forward, SixTermsMeetTheFloat32Criterion) {
  if (!CpuHasBf16DotProducts()) GTEST_SKIP() << "no AVX512_BF16 (the tiles' remainders run on it)";
  EmulationScope emulate;
  const int64_t dots = cpu::AmxEmulatedDotsForTest();
  const CpuAttentionOptions opt = SplitOptions(F32::kSplitBf16x6);
  int seed = 900;
  for (int64_t d : {32, 64, 80, 128}) {
    for (int64_t l : {1, 15, 16, 17, 64, 65, 130}) {
      for (bool causal : {false, true}) {
        AttentionArgs a = Bshd(2, l, l, 4, 2, d);
        a.causal = causal;
        CheckAgainstReference(a, opt, ++seed,
                              "d " + std::to_string(d) + " l " + std::to_string(l) +
                                  (causal ? " causal" : ""));
      }
    }
  }
  EXPECT_GT(cpu::AmxEmulatedDotsForTest(), dots) << "no tile ran";
  for (int64_t l : {95, 96, 97, 200}) {
    AttentionArgs a = Bshd(1, l, l, 2, 1, 64);
    a.causal = l % 2 == 1;
    CheckAgainstReference(a, SplitOptions(F32::kSplitBf16x6, 0, 0), ++seed,
                          "default tiles l " + std::to_string(l));
  }
  encodings::sequence::Rope rope = MakeRope(64, 64, group::PlanePairing::kHalfSplit);
  RopeRowTransform tr(rope);
  auto alibi = encodings::sequence::AlibiBias::CreateStandard(4, encodings::sequence::AlibiForm::kCausal);
  ASSERT_TRUE(alibi.ok());
  std::mt19937_64 rng(7);
  encodings::sequence::ShawRelative shaw = test::MakeShaw(3, 64, &rng);
  const std::vector<float> sinks = {0.5f, -1.0f, 2.0f, 0.0f};
  for (int variant = 0; variant < 5; ++variant) {
    AttentionArgs a = Bshd(2, 70, 70, 4, 2, 64);
    a.causal = true;
    std::string what;
    if (variant == 0) a.q_transform = a.k_transform = &tr, what = "rope";
    if (variant == 1) a.biases = {&*alibi}, what = "alibi";
    if (variant == 2) a.softcap = 5.0, what = "softcap 5";
    if (variant == 3) a.window_left = 20, what = "window 20";
    if (variant == 4) a.shaw_keys = a.shaw_values = &shaw, a.sinks = sinks, what = "shaw, sinks";
    CheckAgainstReference(a, opt, ++seed, what);
  }
}

// Three terms: the products' error is about 2^-16 of |a b| (split_bf16.h), beyond the
// float32 criterion. The bound here follows from it: each score moves by at most
// delta = c scale sum_c |q_c k_c|, c = 3 2^-16 + 3 d 2^-24 (the dropped terms, and the
// float sums of 3d terms), so the probabilities by a factor within e^(+-2 delta) and o by
// at most (e^(2 delta) - 1) max|v|; P V adds c max|v|. And the error is above the float32
// criterion's (that the three-term products ran, not six).
TEST(SplitBf16Forward, ThreeTermsWithinTheirBound) {
  if (!CpuHasBf16DotProducts()) GTEST_SKIP() << "no AVX512_BF16 (the tiles' remainders run on it)";
  EmulationScope emulate;
  std::mt19937_64 rng(11);
  for (int64_t d : {64, 128}) {
    AttentionArgs a = Bshd(1, 130, 130, 2, 2, d);
    a.causal = d == 64;
    const size_t nq = Extent(a, a.q, true), nk = Extent(a, a.k, false);
    const std::vector<float> q = RandomF(nq, &rng), k = RandomF(nk, &rng), v = RandomF(nk, &rng);
    std::vector<float> o(nq), exact(nq);
    ASSERT_TRUE(CpuForward(a, q.data(), k.data(), v.data(), o.data(), nullptr,
                           SplitOptions(F32::kSplitBf16x3))
                    .ok());
    ASSERT_TRUE(CpuForward(a, q.data(), k.data(), v.data(), exact.data(), nullptr,
                           SplitOptions(F32::kExact))
                    .ok());
    std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end()),
        od(nq);
    ASSERT_TRUE(ReferenceForward<double>(a, qd.data(), kd.data(), vd.data(), od.data()).ok());
    double vmax = 0.0;
    for (float x : v) vmax = std::max(vmax, static_cast<double>(std::fabs(x)));
    const double c = 3.0 * std::ldexp(1.0, -16) + 3.0 * d * std::ldexp(1.0, -24);
    double err3 = 0.0, err_exact = 0.0;
    for (int64_t t = 0; t < 130; ++t) {
      for (int64_t h = 0; h < 2; ++h) {
        double delta = 0.0;
        for (int64_t j = 0; j < 130; ++j) {
          double mag = 0.0;
          for (int64_t e = 0; e < d; ++e) {
            mag += std::fabs(qd[a.QOffset(a.q, t, h) + e] * kd[a.KOffset(a.k, j, h) + e]);
          }
          delta = std::max(delta, c * a.scale() * mag);
        }
        const double bound = (std::expm1(2.0 * delta) + c) * vmax;
        for (int64_t e = 0; e < d; ++e) {
          const int64_t i = a.QOffset(a.o, t, h) + e;
          ASSERT_LE(std::fabs(o[i] - od[i]), bound) << "d " << d << " t " << t << " h " << h;
          err3 = std::max(err3, std::fabs(o[i] - od[i]));
          err_exact = std::max(err_exact, std::fabs(exact[i] - od[i]));
        }
      }
    }
    EXPECT_GT(err3, 2.0 * err_exact + 2e-6) << "d " << d << ": as exact as six terms";
    std::printf("three terms, d %d: max error %.3g, float32 FMAs %.3g (%.1fx)\n",
                static_cast<int>(d), err3, err_exact, err3 / err_exact);
  }
}

// Blocks where a part would not be finite or would lose accuracy (an infinite key, a NaN
// value, a key beyond kSplitMax, values below kSplitMin) and passes of query rows that do
// not split take the float32 path: outputs NaN exactly where kExact's are, and the rest as
// close as two float32 results. One case runs an item in two passes of query rows (one
// kv head, two query heads of 208 rows each on one thread: 416 rows, over the 384 of a
// pass), the first splitting and the second not, so its key blocks are packed both ways.
// And the tiles did run where some blocks split.
TEST(SplitBf16Forward, BlocksThatDoNotSplitTakeTheFloatPath) {
  if (!CpuHasBf16DotProducts()) GTEST_SKIP() << "no AVX512_BF16 (the tiles' remainders run on it)";
  EmulationScope emulate;
  std::mt19937_64 rng(13);
  for (int c = 0; c < 7; ++c) {
    AttentionArgs a = c == 5 ? Bshd(1, 800, 800, 2, 1, 64) : Bshd(1, 200, 200, 2, 2, 64);
    a.causal = c % 2 == 1;
    CpuAttentionOptions opt = SplitOptions(F32::kSplitBf16x6);
    if (c == 5) opt.num_threads = 1;
    const size_t nq = Extent(a, a.q, true), nk = Extent(a, a.k, false);
    std::vector<float> q = RandomF(nq, &rng), k = RandomF(nk, &rng), v = RandomF(nk, &rng);
    const float inf = std::numeric_limits<float>::infinity();
    // Two float32 results of O(1) outputs from scores of O(1) differ by up to 1e-5
    // (relative to the values' scale); with scale 1 (case 4) the scores are sqrt(64) = 8
    // times larger, and so are their rounding errors.
    double tol = 1e-5, scale = 1.0;
    bool nan_expected = true;
    std::string what;
    if (c == 0) k[a.KOffset(a.k, 5, 0) + 3] = inf, what = "inf key";
    if (c == 1) v[a.KOffset(a.v, 140, 1)] = std::numeric_limits<float>::quiet_NaN(), what = "NaN value";
    if (c == 2) {
      // Huge scores, not NaN (that block's own split products would have been NaN).
      k[a.KOffset(a.k, 70, 1) + 9] = 3.39e38f, what = "key beyond kSplitMax";
      nan_expected = false;
    }
    if (c == 3) q[a.QOffset(a.q, 150, 0) + 1] = inf, what = "inf query";
    if (c == 4) {
      // A query row beyond kSplitMax once scaled (by 1 log2 e) whose scores stay finite
      // (about 1.7e38: every key's component 1 is 0.5), so its output is finite: split,
      // its first part would be infinite and the row NaN.
      a.softmax_scale = 1.0;
      q[a.QOffset(a.q, 150, 0) + 1] = 2.355e38f;
      for (int64_t j = 0; j < 200; ++j) k[a.KOffset(a.k, j, 0) + 1] = 0.5f;
      what = "query beyond kSplitMax";
      tol = 8e-5;
      nan_expected = false;
    }
    if (c == 5) q[a.QOffset(a.q, 10, 1) + 2] = inf, what = "second pass of an item";
    if (c == 6) {
      // Values of 1e-36: their second and third parts would be subnormal in bf16, which
      // the tiles read as 0 (2^-9 relative, not float32's accuracy).
      for (float& x : v) x *= 1e-36f;
      scale = 1e-36;
      what = "values below kSplitMin";
      nan_expected = false;
    }
    const int64_t dots = cpu::AmxEmulatedDotsForTest();
    std::vector<float> o(nq), exact(nq);
    ASSERT_TRUE(CpuForward(a, q.data(), k.data(), v.data(), o.data(), nullptr, opt).ok());
    if (c != 6) {  // (case 6: every block's values are tiny, so no block splits)
      EXPECT_GT(cpu::AmxEmulatedDotsForTest(), dots) << what << ": no tile ran";
    }
    opt.float32_arithmetic = F32::kExact;
    ASSERT_TRUE(CpuForward(a, q.data(), k.data(), v.data(), exact.data(), nullptr, opt).ok());
    int nans = 0;
    for (size_t i = 0; i < nq; ++i) {
      ASSERT_EQ(std::isnan(o[i]), std::isnan(exact[i])) << what << " " << i;
      nans += std::isnan(o[i]);
      if (!std::isnan(o[i])) {
        ASSERT_NEAR(o[i], exact[i], tol * std::max(scale, std::fabs(double(exact[i])))) << what << " " << i;
      }
    }
    if (nan_expected) {
      EXPECT_GT(nans, 0) << what << ": the case makes no NaN";
    }
    if (c == 4) {
      for (int64_t e = 0; e < 64; ++e) {
        ASSERT_TRUE(std::isfinite(o[a.QOffset(a.o, 150, 0) + e])) << what;
      }
    }
  }
}

// Without usable tiles (no AMX and the emulation off) the split modes are kExact bit for
// bit: on the dot products alone they would be slower than float32 FMAs.
TEST(SplitBf16Forward, WithoutTilesTheSplitModesAreExact) {
  if (cpu::AmxHardwareUsable()) GTEST_SKIP() << "AMX tiles usable here: the split modes run on them";
  AttentionArgs a = Bshd(1, 100, 100, 2, 1, 64);
  a.causal = true;
  std::mt19937_64 rng(17);
  const size_t nq = Extent(a, a.q, true), nk = Extent(a, a.k, false);
  const std::vector<float> q = RandomF(nq, &rng), k = RandomF(nk, &rng), v = RandomF(nk, &rng);
  std::vector<float> exact(nq);
  ASSERT_TRUE(CpuForward(a, q.data(), k.data(), v.data(), exact.data(), nullptr,
                         SplitOptions(F32::kExact))
                  .ok());
  for (F32 how : {F32::kSplitBf16x6, F32::kSplitBf16x3}) {
    std::vector<float> o(nq);
    ASSERT_TRUE(
        CpuForward(a, q.data(), k.data(), v.data(), o.data(), nullptr, SplitOptions(how)).ok());
    for (size_t i = 0; i < nq; ++i) ASSERT_EQ(o[i], exact[i]) << i;
  }
}

// On an AMX CPU, six terms on the hardware's tiles meet the float32 criterion.
TEST(SplitBf16Forward, OnHardwareTilesSixTermsMeetTheCriterion) {
  if (!cpu::AmxHardwareUsable()) GTEST_SKIP() << "no usable AMX tiles on this CPU";
  for (bool causal : {false, true}) {
    AttentionArgs a = Bshd(2, 130, 130, 4, 2, 128);
    a.causal = causal;
    CheckAgainstReference(a, SplitOptions(F32::kSplitBf16x6), causal ? 19 : 18, "hardware tiles");
    CheckAgainstReference(a, SplitOptions(F32::kSplitBf16x6, 0, 0), causal ? 21 : 20,
                          "hardware tiles, default tiles");
  }
}

// The backward (exact float32) from the split forward's o and lse, and with them
// recomputed: the float32 backward criterion.
TEST(SplitBf16Forward, BackwardFromTheSplitForward) {
  if (!CpuHasBf16DotProducts()) GTEST_SKIP() << "no AVX512_BF16 (the tiles' remainders run on it)";
  EmulationScope emulate;
  for (bool causal : {false, true}) {
    AttentionArgs a = Bshd(2, 70, 70, 4, 2, 64);
    a.causal = causal;
    test::CheckBackward(a, SplitOptions(F32::kSplitBf16x6), causal ? 23 : 21,
                        causal ? "causal" : "non-causal");
  }
}

TEST(SplitBf16Forward, OutOfRangeArithmeticIsRefused) {
  CpuAttentionOptions opt;
  opt.float32_arithmetic = static_cast<F32>(7);
  EXPECT_FALSE(ValidateCpuAttentionOptions(opt).ok());
  opt.float32_arithmetic = F32::kExact;
  opt.bf16_arithmetic = static_cast<CpuAttentionOptions::Bf16Arithmetic>(-1);
  EXPECT_FALSE(ValidateCpuAttentionOptions(opt).ok());
}

}  // namespace
}  // namespace attention
}  // namespace gpe
