// CpuForward against the double reference (reference.h), with the flash-attention
// accuracy criterion: the kernel's float32 error is at most twice that of a naive float32
// implementation (written below: float dot products, float softmax, float sums), both
// measured against ReferenceForward<double> on the same float inputs. Plus the SIMD tile
// kernels against plain loops on shapes below, at and above every register tile, every
// compiled instruction set, and bad inputs.
#include "attention/cpu/cpu_attention.h"

#include <Eigen/Dense>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "attention/cpu/kernels.h"
#include "attention/cpu/kernels_bf16.h"
#include "attention/cpu/kernels_decode.h"
#include "attention/descriptor.h"
#include "attention/reference.h"
#include "attention/test_util.h"
#include "encodings/sequence/algebraic.h"
#include "encodings/sequence/bias.h"
#include "encodings/sequence/grape_m.h"
#include "encodings/sequence/relative.h"
#include "encodings/sequence/rope.h"
#include "gtest/gtest.h"
#include "hwy/aligned_allocator.h"
#include "hwy/targets.h"

namespace gpe {
namespace attention {
namespace {

using encodings::sequence::AlgebraicSequence;
using encodings::sequence::AlibiBias;
using encodings::sequence::AlibiForm;
using encodings::sequence::DefaultRopeFrequencies;
using encodings::sequence::FoxBias;
using encodings::sequence::GrapeMProduct;
using encodings::sequence::Rank2Generator;
using encodings::sequence::Rope;
using encodings::sequence::RopeOptions;
using encodings::sequence::T5BucketConfig;
using encodings::sequence::T5RelativeBias;
using test::Bshd;
using test::MakeAxesRope;
using test::RandomSkew;
using test::RandomUniform;
using test::Thd;

std::vector<float> RandomF(size_t n, std::mt19937_64* rng, double scale = 1.0) {
  std::normal_distribution<double> u(0.0, scale);
  std::vector<float> x(n);
  for (float& e : x) e = static_cast<float>(u(*rng));
  return x;
}

Rope MakeRope(int64_t d, int64_t r, group::PlanePairing pairing) {
  RopeOptions opt;
  opt.head_dim = d;
  opt.rotary_dim = r;
  opt.pairing = pairing;
  auto rope = Rope::Create(opt, *DefaultRopeFrequencies(r, 10000.0));
  EXPECT_TRUE(rope.ok()) << rope.status();
  return *rope;
}

// Extent (elements) of a tensor with strides s over the args' tokens and heads.
size_t Extent(const AttentionArgs& a, const Strides& s, bool q_side) {
  const int64_t tokens = q_side ? a.num_q_tokens() : a.num_k_tokens();
  const int64_t heads = q_side ? a.num_q_heads : a.num_kv_heads;
  if (tokens == 0) return 1;
  const int64_t last = q_side ? a.QOffset(s, tokens - 1, heads - 1) : a.KOffset(s, tokens - 1, heads - 1);
  return static_cast<size_t>(last + a.head_dim);
}

// Shaw label of (query position i, key position j) for a table, or -1 without one.
int64_t ShawLabel(const encodings::sequence::ShawRelative* t, int64_t i, int64_t j) {
  return t == nullptr ? -1 : encodings::sequence::ShawRelative::LabelIndex(i, j, t->max_distance());
}
float KeyLabel(const AttentionArgs& a, int64_t r, int64_t e) {
  return static_cast<float>(a.shaw_keys->key_table()(r, e));
}
float ValueLabel(const AttentionArgs& a, int64_t r, int64_t e) {
  return static_cast<float>(a.shaw_values->value_table()(r, e));
}

// The naive float32 implementation the accuracy criterion compares with: rows
// transformed in float by the same RowTransform (bound to the same int64 or structured
// positions), float dot products summed in order (Shaw key labels: q . (k + aK)), float
// max / exp / sum, float output accumulation (Shaw value labels: p (v + aV)).
void NaiveFloat(const AttentionArgs& a, const std::vector<float>& q, const std::vector<float>& k,
                const std::vector<float>& v, std::vector<float>* o) {
  const int64_t hq = a.num_q_heads, hkv = a.num_kv_heads, d = a.head_dim;
  const std::vector<int64_t> pq = EffectiveQPositions(a), pk = EffectiveKPositions(a);
  const float scale = static_cast<float>(a.scale());
  std::unique_ptr<PreparedRowTransform> tq, tk;
  ASSERT_TRUE(PrepareRowTransforms(a, pq, pk, &tq, &tk).ok());
  for (int64_t b = 0; b < a.num_sequences(); ++b) {
    const int64_t kb = a.k_begin(b), lk = a.k_end(b) - kb;
    const auto* bias =
        a.biases.empty() ? nullptr : (a.biases.size() == 1 ? a.biases[0] : a.biases[b]);
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t g = h / (hq / hkv);
      std::vector<float> kr(lk * d), vr(lk * d);
      for (int64_t j = 0; j < lk; ++j) {
        for (int64_t e = 0; e < d; ++e) {
          kr[j * d + e] = k[a.KOffset(a.k, kb + j, g) + e];
          vr[j * d + e] = v[a.KOffset(a.v, kb + j, g) + e];
        }
      }
      if (tk != nullptr && lk > 0) {
        ASSERT_TRUE(tk->Forward(kb, lk, kr.data(), d).ok());
      }
      for (int64_t i = a.q_begin(b); i < a.q_end(b); ++i) {
        std::vector<float> qi(d);
        for (int64_t e = 0; e < d; ++e) qi[e] = q[a.QOffset(a.q, i, h) + e];
        if (tq != nullptr) {
          ASSERT_TRUE(tq->Forward(i, 1, qi.data(), d).ok());
        }
        std::vector<float> bias_row(lk, 0.0f), s(lk);
        if (bias != nullptr && lk > 0) {
          ASSERT_TRUE(bias->FillTile(h, absl::MakeConstSpan(&pq[i], 1),
                                     absl::MakeConstSpan(pk.data() + kb, lk), bias_row.data(), lk)
                          .ok());
        }
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < lk; ++j) {
          if (a.causal && pk[kb + j] > pq[i]) continue;
          float dot = 0.0f;
          const int64_t lab = ShawLabel(a.shaw_keys, pq[i], pk[kb + j]);
          for (int64_t e = 0; e < d; ++e) {
            dot += qi[e] * (kr[j * d + e] + (lab >= 0 ? KeyLabel(a, lab, e) : 0.0f));
          }
          float loc = 1.0f;
          if (a.locality.has_value()) {
            loc = static_cast<float>(std::pow(*a.locality, std::fabs(double(pq[i] - pk[kb + j]))));
          }
          s[j] = loc * scale * dot + bias_row[j];
          m = std::max(m, s[j]);
        }
        float* out = o->data() + a.QOffset(a.o, i, h);
        std::fill(out, out + d, 0.0f);
        if (m == -std::numeric_limits<float>::infinity()) continue;
        float z = 0.0f;
        for (int64_t j = 0; j < lk; ++j) {
          if (a.causal && pk[kb + j] > pq[i]) continue;
          s[j] = std::exp(s[j] - m);
          z += s[j];
        }
        for (int64_t j = 0; j < lk; ++j) {
          if (a.causal && pk[kb + j] > pq[i]) continue;
          const int64_t lab = ShawLabel(a.shaw_values, pq[i], pk[kb + j]);
          for (int64_t e = 0; e < d; ++e) {
            out[e] += s[j] / z * (vr[j * d + e] + (lab >= 0 ? ValueLabel(a, lab, e) : 0.0f));
          }
        }
      }
    }
  }
}

// Max |x - y| over the rows of the output tensor (padding ignored).
double MaxOutErr(const AttentionArgs& a, const std::vector<float>& x, const std::vector<double>& y) {
  double err = 0.0;
  for (int64_t t = 0; t < a.num_q_tokens(); ++t) {
    for (int64_t h = 0; h < a.num_q_heads; ++h) {
      const int64_t off = a.QOffset(a.o, t, h);
      for (int64_t e = 0; e < a.head_dim; ++e) {
        err = std::max(err, std::fabs(double(x[off + e]) - y[off + e]));
      }
    }
  }
  return err;
}

// Runs CpuForward, the naive float version and the double reference on random inputs
// and checks the accuracy criterion, lse, and that padding is never written.
void CheckAgainstReference(const AttentionArgs& a, const CpuAttentionOptions& opt,
                           uint64_t seed, const std::string& what) {
  SCOPED_TRACE(what);
  std::mt19937_64 rng(seed);
  const size_t nq = Extent(a, a.q, true), nk = Extent(a, a.k, false);
  const size_t no = Extent(a, a.o, true);
  std::vector<float> q = RandomF(nq, &rng), k = RandomF(nk, &rng), v = RandomF(nk, &rng);
  const float kCanary = 12345.0f;
  std::vector<float> o(no, kCanary), lse(a.num_q_tokens() * a.num_q_heads, kCanary);
  absl::Status st = CpuForward(a, q.data(), k.data(), v.data(), o.data(), lse.data(), opt);
  ASSERT_TRUE(st.ok()) << st;
  std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end());
  std::vector<double> od(no, 0.0), lsed(lse.size());
  ASSERT_TRUE(
      ReferenceForward<double>(a, qd.data(), kd.data(), vd.data(), od.data(), lsed.data()).ok());
  std::vector<float> naive(no, 0.0f);
  NaiveFloat(a, q, k, v, &naive);
  const double err = MaxOutErr(a, o, od), err_naive = MaxOutErr(a, naive, od);
  // Twice the naive float32 error (Dao et al.'s criterion), plus 2e-6: outputs are
  // convex combinations of N(0,1) values (|o| < ~5), where a few float ulps (1.2e-7 each
  // at 1) stay below 2e-6; the floor only matters when the naive error is itself tiny.
  EXPECT_LE(err, 2.0 * err_naive + 2e-6) << "cpu " << err << " naive " << err_naive;
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(lsed[i])) {
      EXPECT_TRUE(std::isinf(lse[i]) && lse[i] < 0) << "lse " << i;
    } else {
      // lse = m + ln l with |lse| of order |scores| (< ~10 here): float rounding of the
      // scores (~1e-6 relative) bounds the difference well below 1e-4.
      EXPECT_NEAR(lse[i], lsed[i], 1e-4 * std::max(1.0, std::fabs(lsed[i]))) << "lse " << i;
    }
  }
  // Every element of o outside the rows (padding between rows) keeps the canary.
  std::vector<char> inside(no, 0);
  for (int64_t t = 0; t < a.num_q_tokens(); ++t) {
    for (int64_t h = 0; h < a.num_q_heads; ++h) {
      for (int64_t e = 0; e < a.head_dim; ++e) inside[a.QOffset(a.o, t, h) + e] = 1;
    }
  }
  for (size_t i = 0; i < no; ++i) {
    if (!inside[i]) {
      ASSERT_EQ(o[i], kCanary) << "padding " << i << " written";
    }
  }
}

// ------------------------------------------------------------------------------------
// Tile kernels against plain loops.

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
      // Polynomial truncation < 6e-9 plus ~8 float roundings in Horner's scheme: 4 ulps.
      EXPECT_NEAR(y[i], want, 4.8e-7 * want) << x[i];
    }
  }
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

// ------------------------------------------------------------------------------------
// The whole forward.

TEST(CpuForward, ShapesBelowAtAndAboveTiles) {
  // Small tiles (16 x 32) so that short sequences cross several of them; head_dim 32 to
  // 256 including ones that are not multiples of the vector width.
  CpuAttentionOptions small;
  small.block_q = 16;
  small.block_k = 32;
  small.num_threads = 3;
  int seed = 0;
  for (int64_t d : {32, 80, 128, 256}) {
    for (int64_t l : {1, 15, 16, 17, 33, 64, 71}) {
      for (bool causal : {false, true}) {
        AttentionArgs a = Bshd(2, l, l, 2, 2, d);
        a.causal = causal;
        CheckAgainstReference(a, small, ++seed,
                              "d " + std::to_string(d) + " l " + std::to_string(l) +
                                  (causal ? " causal" : ""));
      }
    }
  }
  // The default tiles (96 x 128) with lengths around them.
  for (int64_t l : {95, 96, 97, 129, 200}) {
    AttentionArgs a = Bshd(1, l, l, 2, 1, 64);
    a.causal = (l % 2) == 1;
    CheckAgainstReference(a, {}, ++seed, "default tiles l " + std::to_string(l));
  }
}

TEST(CpuForward, GqaMqaKvCacheAndStrides) {
  CpuAttentionOptions opt;
  opt.block_q = 8;
  opt.block_k = 32;
  for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{4, 4}, {4, 2}, {8, 2}, {6, 1}}) {
    AttentionArgs a = Bshd(2, 21, 21, hq, hkv, 40);
    a.causal = true;
    CheckAgainstReference(a, opt, 10 + hq * 10 + hkv, "gqa " + std::to_string(hq) + "/" + std::to_string(hkv));
  }
  // KV cache: 3 queries at the end of 50 keys (default positions), and one decode token.
  for (int64_t lq : {1, 3}) {
    AttentionArgs a = Bshd(2, lq, 50, 4, 2, 64);
    a.causal = true;
    CheckAgainstReference(a, opt, 40 + lq, "kv cache lq " + std::to_string(lq));
  }
  // Decoding (few query rows per key block: scores from key rows in place) with RoPE,
  // ALiBi and a head_dim that is not a multiple of the vector width.
  {
    Rope rope = MakeRope(40, 40, group::PlanePairing::kHalfSplit);
    RopeRowTransform tr(rope);
    auto alibi = AlibiBias::CreateStandard(8, AlibiForm::kCausal);
    ASSERT_TRUE(alibi.ok());
    for (int64_t lq : {1, 2}) {
      AttentionArgs dec = Bshd(2, lq, 300, 8, 2, 40);
      dec.causal = true;
      dec.q_transform = dec.k_transform = &tr;
      dec.biases = {&*alibi};
      CheckAgainstReference(dec, opt, 45 + lq, "decode lq " + std::to_string(lq));
    }
  }
  // Long KV caches split across threads (split-KV decoding), with RoPE and ALiBi, and a
  // packed batch with an empty cache, a 1-token cache and a long one.
  {
    Rope rope = MakeRope(40, 40, group::PlanePairing::kHalfSplit);
    RopeRowTransform tr(rope);
    auto alibi = AlibiBias::CreateStandard(8, AlibiForm::kCausal);
    ASSERT_TRUE(alibi.ok());
    CpuAttentionOptions three;
    three.num_threads = 3;
    for (int64_t lq : {1, 2}) {
      AttentionArgs dec = Bshd(1, lq, 1500, 8, 2, 40);
      dec.causal = true;
      dec.q_transform = dec.k_transform = &tr;
      dec.biases = {&*alibi};
      CheckAgainstReference(dec, three, 47 + lq, "split-kv decode lq " + std::to_string(lq));
    }
    const std::vector<int64_t> cu_q = {0, 1, 2, 3}, cu_k = {0, 0, 1, 1300};
    AttentionArgs var = Thd(cu_q, cu_k, 4, 4, 32);
    var.causal = true;
    CheckAgainstReference(var, three, 49, "split-kv varlen decode");
  }
  // Long KV caches read in token order (keys as stored, values in place: no key
  // transform, head_dim a multiple of 16): GQA groups of 4 (four rows at a time on
  // AVX-512) and 3, one and two query tokens, ALiBi and the causal mask, on every
  // compiled instruction set.
  {
    auto alibi = AlibiBias::CreateStandard(8, AlibiForm::kCausal);
    ASSERT_TRUE(alibi.ok());
    CpuAttentionOptions two;
    two.num_threads = 2;
    int64_t seed = 300;
    for (int64_t target : cpu::CompiledTargets()) {
      hwy::SetSupportedTargetsForTest(target);
      for (auto [hq, hkv, d] : {std::tuple<int64_t, int64_t, int64_t>{8, 2, 48}, {6, 2, 16},
                                {8, 2, 128}}) {
        for (int64_t lq : {1, 2}) {
          for (bool bhsd : {false, true}) {
            AttentionArgs dec = Bshd(1, lq, 1100, hq, hkv, d);
            // bhsd: each kv head's cache contiguous (heads walked outermost, the next
            // block of every head requested ahead).
            if (bhsd) dec.k = dec.v = Strides{hkv * 1100 * d, d, 1100 * d};
            dec.causal = true;
            if (hq == 8) dec.biases = {&*alibi};
            CheckAgainstReference(dec, two, ++seed,
                                  std::string("token-order decode ") + hwy::TargetName(target) +
                                      " hq " + std::to_string(hq) + " d " + std::to_string(d) +
                                      " lq " + std::to_string(lq) + (bhsd ? " bhsd" : ""));
          }
        }
      }
    }
    hwy::SetSupportedTargetsForTest(0);
  }
  // Padded, non-contiguous strides on every tensor.
  AttentionArgs a = Bshd(2, 19, 23, 4, 2, 24);
  a.q = a.o = Strides{19 * (4 * (24 + 3) + 5) + 11, 4 * (24 + 3) + 5, 24 + 3};
  a.k = a.v = Strides{23 * (2 * (24 + 1) + 7) + 2, 2 * (24 + 1) + 7, 24 + 1};
  a.softmax_scale = 0.3;
  CheckAgainstReference(a, opt, 50, "strided");
}

TEST(CpuForward, VarlenWithEmptyAndSingleTokenSequences) {
  CpuAttentionOptions opt;
  opt.block_q = 8;
  opt.block_k = 32;
  opt.num_threads = 2;
  const std::vector<int64_t> cu_q = {0, 0, 1, 20, 20, 57};
  const std::vector<int64_t> cu_k = {0, 3, 4, 40, 40, 77};
  for (bool causal : {false, true}) {
    AttentionArgs a = Thd(cu_q, cu_k, 4, 2, 48);
    a.causal = causal;
    CheckAgainstReference(a, opt, causal ? 61 : 60, causal ? "varlen causal" : "varlen");
  }
}

TEST(CpuForward, HugeBatchOfEmptySequencesReturnsAtOnce) {
  // bshd, batch 2^39, no query and no key token: the plan's loops over the sequences
  // would walk 2^39 entries (minutes); every entry point returns at once, with null
  // tensors (nothing to read or write). A wall-clock bound of seconds, not a timing:
  // the walk takes minutes, the early return microseconds.
  AttentionArgs a;
  a.batch = int64_t{1} << 39;
  a.seq_len_q = a.seq_len_k = 0;
  a.num_q_heads = a.num_kv_heads = 2;
  a.head_dim = 8;
  a.q = a.o = a.k = a.v = ContiguousStrides(Layout::kBSHD, 0, 2, 8);
  a.q.batch = a.o.batch = a.k.batch = a.v.batch = 16;  // distinct (empty) sequences
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(CpuForward(a, static_cast<const float*>(nullptr), nullptr, nullptr, nullptr).ok());
  EXPECT_TRUE(CpuBackward(a, static_cast<const float*>(nullptr), nullptr, nullptr, nullptr,
                          nullptr, nullptr, nullptr, nullptr, nullptr)
                  .ok());
  absl::StatusOr<int64_t> ws = CpuForwardWorkspaceBytes(a, {});
  ASSERT_TRUE(ws.ok()) << ws.status();
  EXPECT_EQ(*ws, 0);
  // The o / lse pairing is still checked.
  float lse = 0.0f;
  EXPECT_FALSE(CpuBackward(a, static_cast<const float*>(nullptr), nullptr, nullptr, nullptr,
                           &lse, nullptr, nullptr, nullptr, nullptr)
                   .ok());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
}

TEST(CpuForward, ExplicitPositionsMaskRowsWithNoKey) {
  // Shuffled positions: causal masks by position, not index; query 0 sees no key.
  AttentionArgs a = Bshd(1, 9, 40, 2, 2, 32);
  a.causal = true;
  std::vector<int64_t> pk(40), pq = {-5, 100, 3, 17, 39, 0, 20, 21, 8};
  for (int64_t j = 0; j < 40; ++j) pk[j] = (j * 17) % 40;
  a.q_positions = pq;
  a.k_positions = pk;
  CpuAttentionOptions opt;
  opt.block_q = 4;
  opt.block_k = 32;
  CheckAgainstReference(a, opt, 70, "explicit positions");
}

TEST(CpuForward, RowTransformsInsideTheKernel) {
  CpuAttentionOptions opt;
  opt.block_q = 16;
  opt.block_k = 32;
  int seed = 80;
  for (auto pairing : {group::PlanePairing::kHalfSplit, group::PlanePairing::kInterleaved}) {
    for (int64_t rot : {64, 32}) {  // full and partial rotary
      Rope rope = MakeRope(64, rot, pairing);
      RopeRowTransform tr(rope);
      AttentionArgs a = Bshd(1, 50, 50, 4, 2, 64);
      a.causal = true;
      a.q_transform = a.k_transform = &tr;
      // Positions near 2^31 (angles reduced exactly in the prepared table).
      std::vector<int64_t> pos(50);
      for (int64_t t = 0; t < 50; ++t) pos[t] = (int64_t{1} << 31) - 60 + t;
      a.q_positions = a.k_positions = pos;
      CheckAgainstReference(a, opt, ++seed, "rope rot " + std::to_string(rot));
    }
  }
  {
    // GRAPE-M commuting planes (learned frequencies on arbitrary disjoint planes) through
    // its prepared table, which must equal the plain Apply bit for bit.
    std::vector<encodings::sequence::CoordinatePlane> planes = {{0, 5, 0.3}, {2, 7, -1.1},
                                                                {9, 1, 0.02}, {12, 15, 2.5}};
    auto cp = encodings::sequence::GrapeMCommutingPlanes::Create(16, planes);
    ASSERT_TRUE(cp.ok()) << cp.status();
    GrapeMRowTransform<encodings::sequence::GrapeMCommutingPlanes> ct(*cp);
    std::vector<int64_t> pos = {0, 5, -3, int64_t{1} << 31, 77};
    std::mt19937_64 r2(3);
    std::vector<float> x = RandomF(pos.size() * 16, &r2), y = x, z = x;
    ASSERT_TRUE(ct.Forward(pos, y.data(), 16).ok());
    auto prepared = ct.Prepare(pos);
    ASSERT_TRUE(prepared.ok());
    ASSERT_TRUE((*prepared)->Forward(0, 5, z.data(), 16).ok());
    EXPECT_EQ(y, z);
    ASSERT_TRUE((*prepared)->Backward(0, 5, z.data(), 16).ok());
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(z[i], x[i], 1e-6);  // G^T G = I
    AttentionArgs ca = Bshd(1, 40, 40, 2, 2, 16);
    ca.causal = true;
    ca.q_transform = ca.k_transform = &ct;
    CheckAgainstReference(ca, opt, 89, "grape-m commuting planes");
  }
  std::mt19937_64 rng(9);
  const int64_t d = 16;
  auto prod =
      GrapeMProduct::Create({Rank2Generator{RandomUniform(d, &rng), RandomUniform(d, &rng), 0.3},
                             Rank2Generator{RandomUniform(d, &rng), RandomUniform(d, &rng), -0.7}});
  ASSERT_TRUE(prod.ok()) << prod.status();
  GrapeMRowTransform<GrapeMProduct> gm(*prod);
  AttentionArgs a = Bshd(2, 30, 30, 2, 2, d);
  a.causal = true;
  a.q_transform = a.k_transform = &gm;
  CheckAgainstReference(a, opt, 90, "grape-m product");
  Eigen::MatrixXd skew = Eigen::MatrixXd::Random(d, d);
  skew = 0.1 * (skew - skew.transpose()).eval();
  auto alg = AlgebraicSequence::Create(skew);
  ASSERT_TRUE(alg.ok()) << alg.status();
  AlgebraicRowTransform at(*alg);
  a.q_transform = a.k_transform = &at;
  a.causal = false;
  CheckAgainstReference(a, opt, 91, "algebraic");
}

TEST(CpuForward, BiasesAndLocalityOnTheFly) {
  CpuAttentionOptions opt;
  opt.block_q = 16;
  opt.block_k = 32;
  const int64_t hq = 4, d = 32;
  auto alibi = AlibiBias::CreateStandard(hq, AlibiForm::kCausal);
  ASSERT_TRUE(alibi.ok());
  AttentionArgs a = Bshd(2, 45, 45, hq, 2, d);
  a.causal = true;
  a.biases = {&*alibi};
  CheckAgainstReference(a, opt, 100, "alibi");
  auto sym = AlibiBias::CreateStandard(hq, AlibiForm::kSymmetric);
  ASSERT_TRUE(sym.ok());
  a.causal = false;
  a.biases = {&*sym};
  CheckAgainstReference(a, opt, 101, "alibi symmetric");
  std::mt19937_64 rng(11);
  T5BucketConfig cfg;
  cfg.num_buckets = 8;
  cfg.max_distance = 20;
  auto t5 = T5RelativeBias::Create(RandomUniform(8 * hq, &rng), hq, cfg);
  ASSERT_TRUE(t5.ok()) << t5.status();
  a.biases = {&*t5};
  a.locality = 0.97;
  CheckAgainstReference(a, opt, 102, "t5 + locality");
  a.locality.reset();
  // FoX: one bias per sequence (content-dependent log forget gates).
  std::vector<double> logits = RandomUniform(45 * hq, &rng);
  for (double& x : logits) x = 3.0 * x + 1.0;
  auto f0 = FoxBias::Create(absl::MakeConstSpan(logits), 45, hq);
  auto f1 = FoxBias::Create(absl::MakeConstSpan(logits), 45, hq);
  ASSERT_TRUE(f0.ok() && f1.ok());
  a.causal = true;
  a.biases = {&*f0, &*f1};
  CheckAgainstReference(a, opt, 103, "fox");
}

TEST(CpuForward, EveryCompiledInstructionSetAgrees) {
  // One binary, several code paths: run each target this CPU supports (AVX-512, AVX2,
  // the portable baseline) through the same checks.
  AttentionArgs a = Bshd(1, 37, 37, 2, 1, 72);
  a.causal = true;
  CpuAttentionOptions opt;
  opt.block_q = 16;
  opt.block_k = 32;
  int runs = 0;
  for (int64_t target : cpu::CompiledTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    EXPECT_EQ(CpuAttentionIsa(), hwy::TargetName(target));
    CheckAgainstReference(a, opt, 120 + runs, std::string("target ") + hwy::TargetName(target));
    ++runs;
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_GE(runs, 2) << "expected the AVX2 path and the baseline at least";
}

// ------------------------------------------------------------------------------------
// Backward.

// Naive float32 backward for the accuracy criterion: per (query row, head) the
// probabilities in float from a float forward, then dv += p do, dp = do.v,
// ds = p (dp - sum p dp), dq += ds scale k', dk += ds scale q', transposes of the
// transforms applied to dq and dk at the end (float, through the same RowTransforms).
// gak / gav (Shaw table gradients, [labels * d]) are accumulated when non-null.
void NaiveFloatBackward(const AttentionArgs& a, const std::vector<float>& q,
                        const std::vector<float>& k, const std::vector<float>& v,
                        const std::vector<float>& dout, std::vector<float>* dq,
                        std::vector<float>* dk, std::vector<float>* dv,
                        std::vector<float>* gak = nullptr, std::vector<float>* gav = nullptr) {
  const int64_t hq = a.num_q_heads, hkv = a.num_kv_heads, d = a.head_dim;
  const std::vector<int64_t> pq = EffectiveQPositions(a), pk = EffectiveKPositions(a);
  std::unique_ptr<PreparedRowTransform> tq, tk;
  ASSERT_TRUE(PrepareRowTransforms(a, pq, pk, &tq, &tk).ok());
  const float scale = static_cast<float>(a.scale());
  const int64_t nq = a.num_q_tokens(), nk = a.num_k_tokens();
  std::vector<float> qt(nq * hq * d), kt(nk * hkv * d), gq(nq * hq * d, 0.0f), gk(nk * hkv * d, 0.0f),
      gv(nk * hkv * d, 0.0f);
  for (int64_t t = 0; t < nq; ++t)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t e = 0; e < d; ++e) qt[(t * hq + h) * d + e] = q[a.QOffset(a.q, t, h) + e];
  for (int64_t t = 0; t < nk; ++t)
    for (int64_t h = 0; h < hkv; ++h)
      for (int64_t e = 0; e < d; ++e) kt[(t * hkv + h) * d + e] = k[a.KOffset(a.k, t, h) + e];
  for (int64_t h = 0; h < hq && tq != nullptr && nq > 0; ++h) {
    ASSERT_TRUE(tq->Forward(0, nq, qt.data() + h * d, hq * d).ok());
  }
  for (int64_t h = 0; h < hkv && tk != nullptr && nk > 0; ++h) {
    ASSERT_TRUE(tk->Forward(0, nk, kt.data() + h * d, hkv * d).ok());
  }
  for (int64_t b = 0; b < a.num_sequences(); ++b) {
    const int64_t kb = a.k_begin(b), lk = a.k_end(b) - kb;
    const auto* bias =
        a.biases.empty() ? nullptr : (a.biases.size() == 1 ? a.biases[0] : a.biases[b]);
    for (int64_t i = a.q_begin(b); i < a.q_end(b); ++i) {
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t g = h / (hq / hkv);
        const float* qi = qt.data() + (i * hq + h) * d;
        std::vector<float> brow(lk, 0.0f), p(lk, 0.0f), loc(lk, 1.0f);
        if (bias != nullptr && lk > 0) {
          ASSERT_TRUE(bias->FillTile(h, absl::MakeConstSpan(&pq[i], 1),
                                     absl::MakeConstSpan(pk.data() + kb, lk), brow.data(), lk)
                          .ok());
        }
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < lk; ++j) {
          if (a.causal && pk[kb + j] > pq[i]) continue;
          if (a.locality.has_value()) {
            loc[j] = static_cast<float>(std::pow(*a.locality, std::fabs(double(pq[i] - pk[kb + j]))));
          }
          float dot = 0.0f;
          const int64_t lab = ShawLabel(a.shaw_keys, pq[i], pk[kb + j]);
          for (int64_t e = 0; e < d; ++e) {
            dot += qi[e] * (kt[((kb + j) * hkv + g) * d + e] + (lab >= 0 ? KeyLabel(a, lab, e) : 0.0f));
          }
          p[j] = loc[j] * scale * dot + brow[j];
          m = std::max(m, p[j]);
        }
        if (m == -std::numeric_limits<float>::infinity()) continue;
        float z = 0.0f;
        for (int64_t j = 0; j < lk; ++j) {
          if (a.causal && pk[kb + j] > pq[i]) {
            p[j] = 0.0f;
            continue;
          }
          p[j] = std::exp(p[j] - m);
          z += p[j];
        }
        const float* doi = dout.data() + a.QOffset(a.o, i, h);
        std::vector<float> dp(lk, 0.0f);
        float dsum = 0.0f;
        for (int64_t j = 0; j < lk; ++j) {
          p[j] /= z;
          const float* vj = v.data() + a.KOffset(a.v, kb + j, g);
          const int64_t lab = ShawLabel(a.shaw_values, pq[i], pk[kb + j]);
          for (int64_t e = 0; e < d; ++e) {
            dp[j] += doi[e] * (vj[e] + (lab >= 0 ? ValueLabel(a, lab, e) : 0.0f));
          }
          dsum += p[j] * dp[j];
        }
        for (int64_t j = 0; j < lk; ++j) {
          if (p[j] == 0.0f) continue;
          const float ds = p[j] * (dp[j] - dsum) * loc[j] * scale;
          float* gkj = gk.data() + ((kb + j) * hkv + g) * d;
          float* gvj = gv.data() + ((kb + j) * hkv + g) * d;
          const float* kj = kt.data() + ((kb + j) * hkv + g) * d;
          const int64_t lk_ = ShawLabel(a.shaw_keys, pq[i], pk[kb + j]);
          const int64_t lv_ = ShawLabel(a.shaw_values, pq[i], pk[kb + j]);
          for (int64_t e = 0; e < d; ++e) {
            gq[(i * hq + h) * d + e] += ds * (kj[e] + (lk_ >= 0 ? KeyLabel(a, lk_, e) : 0.0f));
            gkj[e] += ds * qi[e];
            gvj[e] += p[j] * doi[e];
            if (gak != nullptr && lk_ >= 0) (*gak)[lk_ * d + e] += ds * qi[e];
            if (gav != nullptr && lv_ >= 0) (*gav)[lv_ * d + e] += p[j] * doi[e];
          }
        }
      }
    }
  }
  for (int64_t h = 0; h < hq && tq != nullptr && nq > 0; ++h) {
    ASSERT_TRUE(tq->Backward(0, nq, gq.data() + h * d, hq * d).ok());
  }
  for (int64_t h = 0; h < hkv && tk != nullptr && nk > 0; ++h) {
    ASSERT_TRUE(tk->Backward(0, nk, gk.data() + h * d, hkv * d).ok());
  }
  for (int64_t t = 0; t < nq; ++t)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t e = 0; e < d; ++e) (*dq)[a.QOffset(a.q, t, h) + e] = gq[(t * hq + h) * d + e];
  for (int64_t t = 0; t < nk; ++t)
    for (int64_t h = 0; h < hkv; ++h)
      for (int64_t e = 0; e < d; ++e) {
        (*dk)[a.KOffset(a.k, t, h) + e] = gk[(t * hkv + h) * d + e];
        (*dv)[a.KOffset(a.v, t, h) + e] = gv[(t * hkv + h) * d + e];
      }
}

// Max |x - y| over the rows of a q-side or k-side tensor.
double MaxErr(const AttentionArgs& a, bool q_side, const std::vector<float>& x,
              const std::vector<double>& y) {
  const int64_t tokens = q_side ? a.num_q_tokens() : a.num_k_tokens();
  const int64_t heads = q_side ? a.num_q_heads : a.num_kv_heads;
  double err = 0.0;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t off = q_side ? a.QOffset(a.q, t, h) : a.KOffset(a.k, t, h);
      for (int64_t e = 0; e < a.head_dim; ++e) err = std::max(err, std::fabs(double(x[off + e]) - y[off + e]));
    }
  }
  return err;
}

// CpuBackward (given o and lse, and recomputing them) against the double reference with
// the 2x-naive-float32 criterion, for dq, dk and dv.
void CheckBackward(const AttentionArgs& a, const CpuAttentionOptions& opt, uint64_t seed,
                   const std::string& what) {
  SCOPED_TRACE(what);
  // d_o uses the strides of o; the test allocates it like q, so they must agree.
  ASSERT_TRUE(a.q.batch == a.o.batch && a.q.token == a.o.token && a.q.head == a.o.head);
  std::mt19937_64 rng(seed);
  const size_t nq = Extent(a, a.q, true), nk = Extent(a, a.k, false);
  std::vector<float> q = RandomF(nq, &rng), k = RandomF(nk, &rng), v = RandomF(nk, &rng),
                     dout = RandomF(nq, &rng);
  std::vector<float> o(nq), lse(a.num_q_tokens() * a.num_q_heads);
  ASSERT_TRUE(CpuForward(a, q.data(), k.data(), v.data(), o.data(), lse.data(), opt).ok());
  std::vector<float> dq(nq, 0.0f), dk(nk, 0.0f), dv(nk, 0.0f);
  // Shaw table gradients (when the args carry tables): kernel, reference, naive float.
  const int64_t d = a.head_dim;
  const size_t ntk = a.shaw_keys ? a.shaw_keys->num_labels() * d : 0;
  const size_t ntv = a.shaw_values ? a.shaw_values->num_labels() * d : 0;
  std::vector<double> cak(ntk, -1.0), cav(ntv, -1.0), rak(ntk), rav(ntv);
  CpuBackwardExtras cex;
  ReferenceBackwardExtras rex;
  if (ntk > 0) cex.shaw_key_table_grad = cak.data(), rex.shaw_key_table_grad = rak.data();
  if (ntv > 0) cex.shaw_value_table_grad = cav.data(), rex.shaw_value_table_grad = rav.data();
  absl::Status st = CpuBackward(a, q.data(), k.data(), v.data(), o.data(), lse.data(), dout.data(),
                                dq.data(), dk.data(), dv.data(), nullptr, opt, cex);
  ASSERT_TRUE(st.ok()) << st;
  std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end()),
      dod(dout.begin(), dout.end()), gq(nq), gk(nk), gv(nk);
  ASSERT_TRUE(ReferenceBackward<double>(a, qd.data(), kd.data(), vd.data(), dod.data(), gq.data(),
                                        gk.data(), gv.data(), nullptr, rex)
                  .ok());
  std::vector<float> nq_(nq, 0.0f), nk_(nk, 0.0f), nv_(nk, 0.0f), nak(ntk, 0.0f), nav(ntv, 0.0f);
  NaiveFloatBackward(a, q, k, v, dout, &nq_, &nk_, &nv_, &nak, &nav);
  // Twice the naive float32 error, plus a floor of 4e-6 times the gradient's scale: the
  // gradients are sums over up to ~100 keys of O(1) terms, where a few float ulps of the
  // largest (~1e-7 relative each) stay below it; the floor matters only when the naive
  // error is itself tiny.
  auto scale_of = [](const std::vector<double>& g) {
    double m = 1.0;
    for (double x : g) m = std::max(m, std::fabs(x));
    return m;
  };
  const double eq = MaxErr(a, true, dq, gq), eqn = MaxErr(a, true, nq_, gq);
  const double ek = MaxErr(a, false, dk, gk), ekn = MaxErr(a, false, nk_, gk);
  const double ev = MaxErr(a, false, dv, gv), evn = MaxErr(a, false, nv_, gv);
  EXPECT_LE(eq, 2 * eqn + 4e-6 * scale_of(gq)) << "dq: cpu " << eq << " naive " << eqn;
  EXPECT_LE(ek, 2 * ekn + 4e-6 * scale_of(gk)) << "dk: cpu " << ek << " naive " << ekn;
  EXPECT_LE(ev, 2 * evn + 4e-6 * scale_of(gv)) << "dv: cpu " << ev << " naive " << evn;
  // Table gradients sum over every (row, head) pair: the same criterion and floor.
  auto max_diff = [](const auto& x, const std::vector<double>& y) {
    double m = 0.0;
    for (size_t i = 0; i < y.size(); ++i) m = std::max(m, std::fabs(double(x[i]) - y[i]));
    return m;
  };
  if (ntk > 0) {
    const double e = max_diff(cak, rak), en = max_diff(nak, rak);
    EXPECT_LE(e, 2 * en + 4e-6 * scale_of(rak)) << "daK: cpu " << e << " naive " << en;
  }
  if (ntv > 0) {
    const double e = max_diff(cav, rav), en = max_diff(nav, rav);
    EXPECT_LE(e, 2 * en + 4e-6 * scale_of(rav)) << "daV: cpu " << e << " naive " << en;
  }
  // Recomputing o and lse inside gives the same gradients up to the forward's rounding
  // (it runs the same kernels on the same inputs: bit-identical o and lse).
  std::vector<float> dq2(nq, 0.0f), dk2(nk, 0.0f), dv2(nk, 0.0f);
  ASSERT_TRUE(CpuBackward(a, q.data(), k.data(), v.data(), nullptr, nullptr, dout.data(),
                          dq2.data(), dk2.data(), dv2.data(), nullptr, opt)
                  .ok());
  EXPECT_EQ(MaxErr(a, true, dq2, std::vector<double>(dq.begin(), dq.end())), 0.0);
  EXPECT_EQ(MaxErr(a, false, dk2, std::vector<double>(dk.begin(), dk.end())), 0.0);
  EXPECT_EQ(MaxErr(a, false, dv2, std::vector<double>(dv.begin(), dv.end())), 0.0);
}

TEST(CpuBackward, ShapesBelowAtAndAboveTiles) {
  CpuAttentionOptions small;
  small.block_q = 16;
  small.block_k = 64;
  small.num_threads = 3;
  int seed = 200;
  for (int64_t d : {32, 80, 128}) {
    for (int64_t l : {1, 17, 64, 65, 130}) {
      for (bool causal : {false, true}) {
        AttentionArgs a = Bshd(1, l, l, 2, 1, d);
        a.causal = causal;
        CheckBackward(a, small, ++seed,
                      "d " + std::to_string(d) + " l " + std::to_string(l) + (causal ? " causal" : ""));
      }
    }
  }
  AttentionArgs a = Bshd(1, 150, 150, 2, 2, 64);
  a.causal = true;
  CheckBackward(a, {}, ++seed, "default tiles");
}

TEST(CpuBackward, GqaVarlenKvCacheAndPositions) {
  CpuAttentionOptions opt;
  opt.block_q = 8;
  opt.block_k = 64;
  opt.num_threads = 2;
  AttentionArgs a = Bshd(2, 21, 40, 6, 2, 40);
  a.causal = true;
  CheckBackward(a, opt, 300, "gqa 6/2 kv cache");
  const std::vector<int64_t> cu_q = {0, 0, 1, 20, 20, 57};
  const std::vector<int64_t> cu_k = {0, 3, 4, 40, 40, 77};
  AttentionArgs t = Thd(cu_q, cu_k, 4, 2, 48);
  t.causal = true;
  CheckBackward(t, opt, 301, "varlen");
  AttentionArgs e = Bshd(1, 9, 40, 2, 2, 32);
  e.causal = true;
  std::vector<int64_t> pk(40), pq = {-5, 100, 3, 17, 39, 0, 20, 21, 8};
  for (int64_t j = 0; j < 40; ++j) pk[j] = (j * 17) % 40;
  e.q_positions = pq;
  e.k_positions = pk;
  CheckBackward(e, opt, 302, "explicit positions");
}

TEST(CpuBackward, TransformsBiasesAndLocality) {
  CpuAttentionOptions opt;
  opt.block_q = 16;
  opt.block_k = 64;
  Rope rope = MakeRope(64, 48, group::PlanePairing::kInterleaved);
  RopeRowTransform tr(rope);
  AttentionArgs a = Bshd(1, 70, 70, 4, 2, 64);
  a.causal = true;
  a.q_transform = a.k_transform = &tr;
  CheckBackward(a, opt, 400, "rope partial");
  a.q_transform = a.k_transform = nullptr;
  auto alibi = AlibiBias::CreateStandard(4, AlibiForm::kCausal);
  ASSERT_TRUE(alibi.ok());
  a.biases = {&*alibi};
  a.locality = 0.98;
  CheckBackward(a, opt, 401, "alibi + locality");
}

// ---- Structured positions (multi-axis RoPE, algebraic trees and grids) -------------

// Owns per-token structured positions for q and k: axes form (axes >= 1, coordinates
// in [-30, 30]) or tree addresses (axes == 0: depth 0..4, children < branching).
struct Structured {
  std::vector<int64_t> cq, ck, oq, ok, chq, chk;
  void Make(int64_t nq, int64_t nk, int64_t axes, int64_t branching, std::mt19937_64* rng) {
    auto coords = [&](int64_t n, std::vector<int64_t>* c) {
      std::uniform_int_distribution<int64_t> u(-30, 30);
      c->resize(n * axes);
      for (int64_t& x : *c) x = u(*rng);
    };
    auto tree = [&](int64_t n, std::vector<int64_t>* off, std::vector<int64_t>* ch) {
      std::uniform_int_distribution<int64_t> depth(0, 4), child(0, branching - 1);
      off->assign(1, 0);
      ch->clear();
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t s = depth(*rng); s > 0; --s) ch->push_back(child(*rng));
        off->push_back(static_cast<int64_t>(ch->size()));
      }
    };
    if (axes > 0) {
      coords(nq, &cq);
      coords(nk, &ck);
    } else {
      tree(nq, &oq, &chq);
      tree(nk, &ok, &chk);
    }
  }
  void Bind(int64_t axes, AttentionArgs* a) const {
    if (axes > 0) {
      a->q_structured.num_axes = a->k_structured.num_axes = axes;
      a->q_structured.coords = cq;
      a->k_structured.coords = ck;
    } else {
      a->q_structured.tree_offsets = oq;
      a->q_structured.tree_children = chq;
      a->k_structured.tree_offsets = ok;
      a->k_structured.tree_children = chk;
    }
  }
};

struct StructuredCase {
  std::string name;
  const RowTransform* tr;
  int64_t axes;  // 0: tree addresses
  int64_t branching;
  int64_t d;
};

// The tiles the case lists below are shaped around (block_q 16, block_k 64), on 3 threads.
CpuAttentionOptions CaseListOptions() {
  CpuAttentionOptions opt;
  opt.block_q = 16;
  opt.block_k = 64;
  opt.num_threads = 3;
  return opt;
}

// Runs check(args, name) for every structured transform on shapes below, at and above
// the tiles (block_q 16, block_k 64), causal and not, GQA 2/1, plus a KV-cache shape
// (queries shorter than keys, MQA, two sequences) and a packed varlen batch.
template <class Check>
void ForEachStructuredCase(const Check& check) {
  std::mt19937_64 rng(77);
  Rope axial2 = MakeAxesRope(32, 2, *encodings::sequence::AxialPlaneAxes(16, 2),
                             *encodings::sequence::AxialRopeFrequencies(32, 2, 100.0));
  Rope axial3 = MakeAxesRope(48, 3, *encodings::sequence::AxialPlaneAxes(24, 3),
                             *encodings::sequence::AxialRopeFrequencies(48, 3, 100.0));
  // Qwen2-VL's sections [16, 24, 24] over head_dim 128.
  Rope mrope = MakeAxesRope(128, 3, *encodings::sequence::MRopePlaneAxes({16, 24, 24}),
                            *DefaultRopeFrequencies(128, 10000.0));
  RopeRowTransform t_axial2(axial2), t_axial3(axial3), t_mrope(mrope);
  auto tree = encodings::sequence::AlgebraicTree::Create(
      {RandomSkew(16, 0.3, &rng), RandomSkew(16, 0.3, &rng), RandomSkew(16, 0.3, &rng)});
  ASSERT_TRUE(tree.ok()) << tree.status();
  AlgebraicTreeRowTransform t_tree(*tree);
  auto g2 = encodings::sequence::MakeAlgebraicGrid2D(RandomSkew(8, 0.3, &rng),
                                                     RandomSkew(8, 0.3, &rng));
  ASSERT_TRUE(g2.ok()) << g2.status();
  AlgebraicGridRowTransform<encodings::sequence::AlgebraicGrid2D> t_g2(*g2);
  auto g3 = encodings::sequence::MakeAlgebraicGrid3D(
      RandomSkew(8, 0.3, &rng), RandomSkew(8, 0.3, &rng), RandomSkew(8, 0.3, &rng));
  ASSERT_TRUE(g3.ok()) << g3.status();
  AlgebraicGridRowTransform<encodings::sequence::AlgebraicGrid3D> t_g3(*g3);
  const StructuredCase cases[] = {{"axial 2D rope", &t_axial2, 2, 0, 32},
                                  {"axial 3D rope", &t_axial3, 3, 0, 48},
                                  {"m-rope [16,24,24]", &t_mrope, 3, 0, 128},
                                  {"algebraic tree", &t_tree, 0, 3, 16},
                                  {"algebraic grid 2D", &t_g2, 2, 0, 16},
                                  {"algebraic grid 3D", &t_g3, 3, 0, 24}};
  // (length, causal): below both tiles, at block_k (a multiple of block_q), above both.
  const std::pair<int64_t, bool> shapes[] = {{5, false}, {64, true}, {65, false}, {65, true}};
  for (const StructuredCase& c : cases) {
    for (const auto& [l, causal] : shapes) {
      AttentionArgs a = Bshd(1, l, l, 2, 1, c.d);
      a.causal = causal;
      a.q_transform = a.k_transform = c.tr;
      Structured sp;
      sp.Make(l, l, c.axes, c.branching, &rng);
      sp.Bind(c.axes, &a);
      check(a, c.name + " l " + std::to_string(l) + (causal ? " causal" : ""));
    }
    AttentionArgs kv = Bshd(2, 9, 70, 4, 1, c.d);  // MQA, KV cache
    kv.causal = true;
    kv.q_transform = kv.k_transform = c.tr;
    Structured sp;
    sp.Make(18, 140, c.axes, c.branching, &rng);
    sp.Bind(c.axes, &kv);
    check(kv, c.name + " kv cache");
    const std::vector<int64_t> cu_q = {0, 0, 1, 20, 57}, cu_k = {0, 3, 4, 40, 77};
    AttentionArgs t = Thd(cu_q, cu_k, 4, 2, c.d);
    t.causal = true;
    t.q_transform = t.k_transform = c.tr;
    Structured st;
    st.Make(57, 77, c.axes, c.branching, &rng);
    st.Bind(c.axes, &t);
    check(t, c.name + " varlen");
  }
}

TEST(CpuForward, StructuredTransformsInsideTheKernel) {
  const CpuAttentionOptions opt = CaseListOptions();
  uint64_t seed = 500;
  ForEachStructuredCase([&](const AttentionArgs& a, const std::string& what) {
    CheckAgainstReference(a, opt, ++seed, what);
  });
}

TEST(CpuBackward, StructuredTransformsInsideTheKernel) {
  const CpuAttentionOptions opt = CaseListOptions();
  uint64_t seed = 600;
  ForEachStructuredCase([&](const AttentionArgs& a, const std::string& what) {
    CheckBackward(a, opt, ++seed, what);
  });
}

// ---- Shaw et al. relative labels on keys and values ---------------------------------

encodings::sequence::ShawRelative MakeShaw(int64_t kmax, int64_t d, std::mt19937_64* rng) {
  const int64_t n = 2 * kmax + 1;
  std::vector<double> tk = RandomUniform(n * d, rng), tv = RandomUniform(n * d, rng);
  auto s = encodings::sequence::ShawRelative::Create(
      kmax, Eigen::Map<encodings::sequence::RowMatrixXd>(tk.data(), n, d),
      Eigen::Map<encodings::sequence::RowMatrixXd>(tv.data(), n, d));
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

// Shaw key and/or value labels (k = 0: one label for every pair; k = 3; k = 200, wider
// than every sequence) on shapes below, at and above the tiles (block_q 16, block_k 64),
// causal and not, GQA,
// then with RoPE, ALiBi and locality at once, explicit unsorted positions, varlen and a
// decoding shape (one query against 1100 keys: the path that splits keys otherwise).
template <class Check>
void ForEachShawCase(const Check& check) {
  std::mt19937_64 rng(88);
  const int64_t d = 32;
  encodings::sequence::ShawRelative s0 = MakeShaw(0, d, &rng), s3 = MakeShaw(3, d, &rng),
                                    s200 = MakeShaw(200, d, &rng);
  // (length, causal): one row, above block_q, at block_k, above both tiles.
  const std::pair<int64_t, bool> shapes[] = {{1, true}, {17, false}, {64, true}, {65, false}};
  for (const auto* shaw : {&s0, &s3, &s200}) {
    for (int sides = 1; sides <= 3; ++sides) {  // keys, values, both
      for (const auto& [l, causal] : shapes) {
        if (sides != 3 && l != 65) continue;  // one side alone: one shape
        AttentionArgs a = Bshd(1, l, l, 2, 1, d);
        a.causal = causal;
        if (sides & 1) a.shaw_keys = shaw;
        if (sides & 2) a.shaw_values = shaw;
        check(a, "k " + std::to_string(shaw->max_distance()) + " sides " +
                     std::to_string(sides) + " l " + std::to_string(l) +
                     (causal ? " causal" : ""));
      }
    }
  }
  Rope rope = MakeRope(d, 24, group::PlanePairing::kHalfSplit);
  RopeRowTransform tr(rope);
  auto alibi = AlibiBias::CreateStandard(4, AlibiForm::kCausal);
  ASSERT_TRUE(alibi.ok());
  AttentionArgs a = Bshd(2, 33, 70, 4, 2, d);
  a.causal = true;
  a.q_transform = a.k_transform = &tr;
  a.biases = {&*alibi};
  a.locality = 0.97;
  a.shaw_keys = a.shaw_values = &s3;
  check(a, "rope + alibi + locality + shaw");
  AttentionArgs e = Bshd(1, 9, 40, 2, 2, d);
  e.causal = true;
  std::vector<int64_t> pk(40), pq = {-5, 100, 3, 17, 39, 0, 20, 21, 8};
  for (int64_t j = 0; j < 40; ++j) pk[j] = (j * 17) % 40;
  e.q_positions = pq;
  e.k_positions = pk;
  e.shaw_keys = e.shaw_values = &s3;
  check(e, "explicit unsorted positions");
  const std::vector<int64_t> cu_q = {0, 0, 1, 20, 57}, cu_k = {0, 3, 4, 40, 77};
  AttentionArgs t = Thd(cu_q, cu_k, 4, 2, d);  // GQA 4/2
  t.causal = true;
  t.shaw_keys = t.shaw_values = &s3;
  check(t, "varlen");
  AttentionArgs dec = Bshd(1, 1, 1100, 4, 2, d);
  dec.causal = true;
  dec.shaw_keys = dec.shaw_values = &s3;
  check(dec, "decode");
}

TEST(CpuForward, ShawLabelsInsideTheKernel) {
  const CpuAttentionOptions opt = CaseListOptions();
  uint64_t seed = 700;
  ForEachShawCase([&](const AttentionArgs& a, const std::string& what) {
    CheckAgainstReference(a, opt, ++seed, what);
  });
}

TEST(CpuBackward, ShawLabelsAndTableGradients) {
  const CpuAttentionOptions opt = CaseListOptions();
  uint64_t seed = 800;
  ForEachShawCase([&](const AttentionArgs& a, const std::string& what) {
    CheckBackward(a, opt, ++seed, what);
  });
}

TEST(CpuBackward, ShawTableGradientNeedsItsTable) {
  std::mt19937_64 rng(1);
  AttentionArgs a = Bshd(1, 4, 4, 1, 1, 8);
  std::vector<float> x = RandomF(32, &rng), g(32);
  std::vector<double> t(8);
  CpuBackwardExtras ex;
  ex.shaw_value_table_grad = t.data();
  absl::Status st = CpuBackward(a, x.data(), x.data(), x.data(), nullptr, nullptr, x.data(),
                                g.data(), g.data(), g.data(), nullptr, {}, ex);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("Shaw"), std::string::npos) << st;
}

TEST(CpuBackward, BiasGradientSinkMatchesReference) {
  // T5 table gradient through the sink equals the reference's.
  std::mt19937_64 rng(12);
  const int64_t hq = 2;
  T5BucketConfig cfg;
  cfg.num_buckets = 8;
  cfg.max_distance = 20;
  auto t5 = T5RelativeBias::Create(RandomUniform(8 * hq, &rng), hq, cfg);
  ASSERT_TRUE(t5.ok());
  AttentionArgs a = Bshd(2, 33, 33, hq, 1, 16);
  a.causal = true;
  a.biases = {&*t5};
  const size_t n = Extent(a, a.q, true), nk = Extent(a, a.k, false);
  std::vector<float> q = RandomF(n, &rng), k = RandomF(nk, &rng), v = RandomF(nk, &rng),
                     dout = RandomF(n, &rng);
  std::vector<double> g_cpu(8 * hq, 0.0), g_ref(8 * hq, 0.0);
  BiasGradientSink cpu_sink = [&](int64_t, int64_t head, absl::Span<const int64_t> qp,
                                  absl::Span<const int64_t> kp, const double* g, int64_t ld) {
    return t5->AccumulateTableGradient(head, qp, kp, g, ld, absl::MakeSpan(g_cpu));
  };
  BiasGradientSink ref_sink = [&](int64_t, int64_t head, absl::Span<const int64_t> qp,
                                  absl::Span<const int64_t> kp, const double* g, int64_t ld) {
    return t5->AccumulateTableGradient(head, qp, kp, g, ld, absl::MakeSpan(g_ref));
  };
  CpuAttentionOptions opt;
  opt.block_q = 8;
  opt.block_k = 64;
  ASSERT_TRUE(CpuBackward(a, q.data(), k.data(), v.data(), nullptr, nullptr, dout.data(), nullptr,
                          nullptr, nullptr, cpu_sink, opt)
                  .ok());
  std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end()),
      dod(dout.begin(), dout.end());
  ASSERT_TRUE(ReferenceBackward<double>(a, qd.data(), kd.data(), vd.data(), dod.data(), nullptr,
                                        nullptr, nullptr, ref_sink)
                  .ok());
  for (size_t i = 0; i < g_ref.size(); ++i) {
    // Sums of ~500 float products of O(1) values: 1e-4 absolute is ~100 float ulps.
    EXPECT_NEAR(g_cpu[i], g_ref[i], 1e-4) << i;
  }
  double total = 0;
  for (double x : g_ref) total += std::fabs(x);
  EXPECT_GT(total, 1e-3);  // the gradient is not trivially zero
}

TEST(CpuBackward, GrapeMGeneratorGradientsThroughTheKernel) {
  // dL/d(a, b, omega) of learned GRAPE-M generators: dq', dk' from the kernel, then
  // GrapeMProduct::Backward on each side, against central differences of the double
  // reference's loss L = sum(w * o).
  std::mt19937_64 rng(77);
  const int64_t d = 8, l = 20, hq = 2;
  std::vector<Rank2Generator> gens = {
      Rank2Generator{RandomUniform(d, &rng), RandomUniform(d, &rng), 0.4},
      Rank2Generator{RandomUniform(d, &rng), RandomUniform(d, &rng), -0.9}};
  AttentionArgs a = Bshd(1, l, l, hq, hq, d);
  a.causal = true;
  const size_t n = Extent(a, a.q, true);
  std::vector<float> q = RandomF(n, &rng), k = RandomF(n, &rng), v = RandomF(n, &rng),
                     w = RandomF(n, &rng);
  auto prod = GrapeMProduct::Create(gens);
  ASSERT_TRUE(prod.ok());
  GrapeMRowTransform<GrapeMProduct> tr(*prod);
  a.q_transform = a.k_transform = &tr;
  std::vector<float> dq_rot(n), dk_rot(n);
  CpuBackwardExtras extras;
  extras.dq_rotated = dq_rot.data();
  extras.dk_rotated = dk_rot.data();
  ASSERT_TRUE(CpuBackward(a, q.data(), k.data(), v.data(), nullptr, nullptr, w.data(), nullptr,
                          nullptr, nullptr, nullptr, {}, extras)
                  .ok());
  std::vector<int64_t> pos(l);
  for (int64_t t = 0; t < l; ++t) pos[t] = t;
  // Rows of one head at a time (token-major with hq heads: stride hq * d).
  GrapeMProduct::Gradients total;
  for (int64_t h = 0; h < hq; ++h) {
    for (const auto* side : {&q, &k}) {
      const std::vector<float>& grad = side == &q ? dq_rot : dk_rot;
      GrapeMProduct::Gradients g;
      ASSERT_TRUE(prod->Backward(pos, side->data() + h * d, hq * d, grad.data() + h * d, hq * d,
                                 static_cast<float*>(nullptr), 0, &g)
                      .ok());
      if (total.generators.empty()) {
        total = g;
      } else {
        for (size_t i = 0; i < g.generators.size(); ++i) {
          for (int64_t e = 0; e < d; ++e) {
            total.generators[i].a[e] += g.generators[i].a[e];
            total.generators[i].b[e] += g.generators[i].b[e];
          }
          total.generators[i].omega += g.generators[i].omega;
        }
      }
    }
  }
  std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end());
  auto loss = [&](const std::vector<Rank2Generator>& gs) {
    auto p = GrapeMProduct::Create(gs);
    EXPECT_TRUE(p.ok());
    GrapeMRowTransform<GrapeMProduct> t(*p);
    AttentionArgs b = a;
    b.q_transform = b.k_transform = &t;
    std::vector<double> o(n);
    EXPECT_TRUE(ReferenceForward<double>(b, qd.data(), kd.data(), vd.data(), o.data()).ok());
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += w[i] * o[i];
    return s;
  };
  // Central differences in double, step 1e-5: truncation and rounding ~1e-9; the kernel's
  // float32 gradients carry ~1e-6 relative error on sums of O(10) terms: 2e-4 absolute.
  const double hstep = 1e-5;
  for (size_t i = 0; i < gens.size(); ++i) {
    for (int64_t e = 0; e < d; e += 3) {
      auto plus = gens, minus = gens;
      plus[i].a[e] += hstep;
      minus[i].a[e] -= hstep;
      EXPECT_NEAR(total.generators[i].a[e], (loss(plus) - loss(minus)) / (2 * hstep), 2e-4)
          << "a " << i << " " << e;
      plus = gens;
      minus = gens;
      plus[i].b[e] += hstep;
      minus[i].b[e] -= hstep;
      EXPECT_NEAR(total.generators[i].b[e], (loss(plus) - loss(minus)) / (2 * hstep), 2e-4)
          << "b " << i << " " << e;
    }
    auto plus = gens, minus = gens;
    plus[i].omega += hstep;
    minus[i].omega -= hstep;
    EXPECT_NEAR(total.generators[i].omega, (loss(plus) - loss(minus)) / (2 * hstep), 2e-4)
        << "omega " << i;
  }
}

TEST(CpuAttentionBf16, ForwardAndBackwardRoundOnceFromFloatArithmetic) {
  // bfloat16 in and out, float inside: equal to the float kernel run on the widened
  // inputs, rounded once to bfloat16 (the same arithmetic, so to the bf16 rounding: half
  // an ulp of bf16, 2^-9 relative, plus float noise far below it).
  using encodings::sequence::BFloat16;
  using encodings::sequence::ToBFloat16;
  using encodings::sequence::ToFloat;
  Rope rope = MakeRope(64, 64, group::PlanePairing::kHalfSplit);
  RopeRowTransform tr(rope);
  AttentionArgs a = Bshd(1, 45, 45, 4, 2, 64);
  a.causal = true;
  a.q_transform = a.k_transform = &tr;
  std::mt19937_64 rng(500);
  const size_t n = Extent(a, a.q, true), nk = Extent(a, a.k, false);
  std::vector<BFloat16> q(n), k(nk), v(nk), g(n);
  for (auto* t : {&q, &g}) {
    std::vector<float> f = RandomF(n, &rng);
    for (size_t i = 0; i < n; ++i) (*t)[i] = ToBFloat16(f[i]);
  }
  for (auto* t : {&k, &v}) {
    std::vector<float> f = RandomF(nk, &rng);
    for (size_t i = 0; i < nk; ++i) (*t)[i] = ToBFloat16(f[i]);
  }
  auto widen = [](const std::vector<BFloat16>& x) {
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = ToFloat(x[i]);
    return y;
  };
  const std::vector<float> qf = widen(q), kf = widen(k), vf = widen(v), gf = widen(g);
  CpuAttentionOptions opt;
  opt.block_q = 16;
  opt.block_k = 64;
  opt.bf16_arithmetic = CpuAttentionOptions::Bf16Arithmetic::kWiden;  // the widening path: float arithmetic throughout
  std::vector<BFloat16> o(n);
  std::vector<float> lse(45 * 4), of(n), lsef(45 * 4);
  ASSERT_TRUE(CpuForward(a, q.data(), k.data(), v.data(), o.data(), lse.data(), opt).ok());
  ASSERT_TRUE(CpuForward(a, qf.data(), kf.data(), vf.data(), of.data(), lsef.data(), opt).ok());
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(o[i].bits, ToBFloat16(of[i]).bits) << i;  // same float result, one rounding
  }
  for (size_t i = 0; i < lse.size(); ++i) EXPECT_EQ(lse[i], lsef[i]);
  std::vector<BFloat16> dq(n), dk(nk), dv(nk);
  std::vector<float> dqf(n), dkf(nk), dvf(nk);
  ASSERT_TRUE(CpuBackward(a, q.data(), k.data(), v.data(), o.data(), lse.data(), g.data(),
                          dq.data(), dk.data(), dv.data(), nullptr, opt)
                  .ok());
  // The float run gets the same o (the widened bf16 o) so both backward passes see equal
  // inputs and must agree to one bf16 rounding.
  const std::vector<float> ow = widen(o);
  ASSERT_TRUE(CpuBackward(a, qf.data(), kf.data(), vf.data(), ow.data(), lsef.data(), gf.data(),
                          dqf.data(), dkf.data(), dvf.data(), nullptr, opt)
                  .ok());
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(dq[i].bits, ToBFloat16(dqf[i]).bits) << i;
  for (size_t i = 0; i < nk; ++i) {
    EXPECT_EQ(dk[i].bits, ToBFloat16(dkf[i]).bits) << i;
    EXPECT_EQ(dv[i].bits, ToBFloat16(dvf[i]).bits) << i;
  }
}

// bf16 bit patterns of floats (round to nearest even) and back.
uint16_t Bf(float f) { return encodings::sequence::ToBFloat16(f).bits; }
float Fl(uint16_t b) { return encodings::sequence::ToFloat(encodings::sequence::BFloat16{b}); }

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

TEST(CpuAttentionBf16, DotProductPathAgreesWithTheReference) {
  // With AVX512_BF16 the bf16 forward rounds q (after RoPE and scaling) and the
  // probabilities to bf16 for the dot products. Against the double reference on the same
  // bf16 inputs the error is a few bf16 roundings (2^-9 relative) of O(1) values: within
  // 2e-2 absolute, while the float-widened path stays within its own rounding of o.
  using encodings::sequence::BFloat16;
  Rope rope = MakeRope(64, 64, group::PlanePairing::kHalfSplit);
  RopeRowTransform tr(rope);
  for (bool causal : {false, true}) {
    AttentionArgs a = Bshd(1, 150, 150, 4, 2, 64);
    a.causal = causal;
    a.q_transform = a.k_transform = &tr;
    std::mt19937_64 rng(600 + causal);
    const size_t n = Extent(a, a.q, true), nk = Extent(a, a.k, false);
    std::vector<BFloat16> q(n), k(nk), v(nk), o(n);
    std::vector<double> qd(n), kd(nk), vd(nk), od(n);
    std::vector<float> f = RandomF(n, &rng);
    for (size_t i = 0; i < n; ++i) q[i] = BFloat16{Bf(f[i])}, qd[i] = Fl(q[i].bits);
    f = RandomF(nk, &rng);
    for (size_t i = 0; i < nk; ++i) k[i] = BFloat16{Bf(f[i])}, kd[i] = Fl(k[i].bits);
    f = RandomF(nk, &rng);
    for (size_t i = 0; i < nk; ++i) v[i] = BFloat16{Bf(f[i])}, vd[i] = Fl(v[i].bits);
    CpuAttentionOptions opt;
    opt.block_q = 16;
    opt.block_k = 64;
    opt.bf16_arithmetic = CpuAttentionOptions::Bf16Arithmetic::kDotProducts;
    ASSERT_TRUE(CpuForward(a, q.data(), k.data(), v.data(), o.data(), nullptr, opt).ok());
    ASSERT_TRUE(ReferenceForward<double>(a, qd.data(), kd.data(), vd.data(), od.data()).ok());
    double err = 0;
    for (size_t i = 0; i < n; ++i) err = std::max(err, std::fabs(Fl(o[i].bits) - od[i]));
    EXPECT_LT(err, 2e-2) << (causal ? "causal" : "");
    EXPECT_GT(err, 0.0);  // (bf16 outputs cannot equal a double reference everywhere)
  }
}

TEST(CpuAttentionBf16, AutoPicksOneOfTheTwoPathsByTheProbe) {
  // kAuto gives bit for bit the output of the path the probe chose: the dot products
  // where CpuBf16AutoUsesDotProducts(), else the widening path. The probe's ratio is 0
  // without the instruction, else positive and finite (a throughput ratio of about 1 or 2
  // on known CPUs; anything in (0.25, 8) is a sane timing).
  using encodings::sequence::BFloat16;
  const double speedup = cpu::Bf16DotProductSpeedup();
  if (!CpuHasBf16DotProducts()) {
    EXPECT_EQ(speedup, 0.0);
    EXPECT_FALSE(CpuBf16AutoUsesDotProducts());
  } else {
    EXPECT_GT(speedup, 0.25);
    EXPECT_LT(speedup, 8.0);
  }
  AttentionArgs a = Bshd(1, 70, 70, 2, 2, 32);
  std::mt19937_64 rng(77);
  const size_t n = Extent(a, a.q, true), nk = Extent(a, a.k, false);
  std::vector<BFloat16> q(n), k(nk), v(nk);
  for (auto* t : {&q, &k, &v}) {
    const std::vector<float> f = RandomF(t->size(), &rng);
    for (size_t i = 0; i < t->size(); ++i) (*t)[i] = BFloat16{Bf(f[i])};
  }
  auto run = [&](CpuAttentionOptions::Bf16Arithmetic how) {
    CpuAttentionOptions opt;
    opt.bf16_arithmetic = how;
    std::vector<BFloat16> o(n);
    EXPECT_TRUE(CpuForward(a, q.data(), k.data(), v.data(), o.data(), nullptr, opt).ok());
    std::vector<uint16_t> bits(n);
    for (size_t i = 0; i < n; ++i) bits[i] = o[i].bits;
    return bits;
  };
  using A = CpuAttentionOptions::Bf16Arithmetic;
  const std::vector<uint16_t> automatic = run(A::kAuto);
  EXPECT_EQ(automatic, run(CpuBf16AutoUsesDotProducts() ? A::kDotProducts : A::kWiden));
}

// A zero bias whose every tile first runs a whole attention call of its own: a call made
// from inside another call's worker (the shared worker pool must not deadlock).
class NestedCallBias final : public encodings::sequence::AdditiveBias {
 public:
  int64_t num_heads() const override { return 4; }
  bool needs_token_data() const override { return false; }
  bool relative() const override { return false; }
  bool causal() const override { return false; }
  mutable std::atomic<int> inner_calls{0};

 protected:
  absl::Status DoFillTile(int64_t, absl::Span<const int64_t> q, absl::Span<const int64_t> k,
                          float* out, int64_t ld) const override {
    if (absl::Status st = Inner(); !st.ok()) return st;
    for (size_t r = 0; r < q.size(); ++r) std::fill(out + r * ld, out + r * ld + k.size(), 0.0f);
    return absl::OkStatus();
  }
  absl::Status DoFillTile(int64_t, absl::Span<const int64_t> q, absl::Span<const int64_t> k,
                          double* out, int64_t ld) const override {
    for (size_t r = 0; r < q.size(); ++r) std::fill(out + r * ld, out + r * ld + k.size(), 0.0);
    return absl::OkStatus();
  }

 private:
  absl::Status Inner() const {
    ++inner_calls;
    AttentionArgs a = Bshd(1, 9, 9, 2, 2, 16);
    std::vector<float> x(9 * 2 * 16, 0.25f), o(x.size());
    CpuAttentionOptions opt;
    opt.num_threads = 2;
    opt.block_q = 4;
    return CpuForward(a, x.data(), x.data(), x.data(), o.data(), nullptr, opt);
  }
};

TEST(CpuForward, ConcurrentAndNestedCallsGiveTheBitsOfOneCall) {
  AttentionArgs a = Bshd(1, 70, 70, 4, 2, 32);
  a.causal = true;
  std::mt19937_64 rng(77);
  const std::vector<float> q = RandomF(Extent(a, a.q, true), &rng);
  const std::vector<float> k = RandomF(Extent(a, a.k, false), &rng);
  const std::vector<float> v = RandomF(Extent(a, a.k, false), &rng);
  CpuAttentionOptions three;
  three.num_threads = 3;
  three.block_q = 8;
  std::vector<float> ref(q.size());
  ASSERT_TRUE(CpuForward(a, q.data(), k.data(), v.data(), ref.data(), nullptr, three).ok());
  // Several callers at once, each splitting its call over 3 threads and sharing the
  // worker threads: the work split depends on the thread count only, never on timing or
  // on which thread takes an item, so every call gives the bits of the call alone.
  constexpr int kCallers = 4;
  std::vector<std::vector<float>> got(kCallers, std::vector<float>(q.size()));
  std::vector<int> failures(kCallers, 0);
  std::vector<std::thread> callers;
  for (int t = 0; t < kCallers; ++t) {
    callers.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        if (!CpuForward(a, q.data(), k.data(), v.data(), got[t].data(), nullptr, three).ok()) {
          ++failures[t];
        }
        if (std::memcmp(got[t].data(), ref.data(), ref.size() * sizeof(float)) != 0) ++failures[t];
      }
    });
  }
  for (std::thread& th : callers) th.join();
  for (int t = 0; t < kCallers; ++t) EXPECT_EQ(failures[t], 0) << "caller " << t;
  // Calls made from inside a call's workers finish, and a zero bias changes no bit.
  NestedCallBias nested;
  AttentionArgs b = a;
  b.biases = {&nested};
  std::vector<float> o(q.size());
  absl::Status st = CpuForward(b, q.data(), k.data(), v.data(), o.data(), nullptr, three);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_GT(nested.inner_calls.load(), 1);
  EXPECT_EQ(std::memcmp(o.data(), ref.data(), ref.size() * sizeof(float)), 0);
}

TEST(CpuForward, RejectsBadInput) {
  AttentionArgs a = Bshd(1, 4, 4, 2, 2, 8);
  std::vector<float> x(64, 0.5f), o(64);
  EXPECT_TRUE(CpuForward(a, x.data(), x.data(), x.data(), o.data()).ok());
  EXPECT_FALSE(CpuForward(a, nullptr, x.data(), x.data(), o.data()).ok());
  EXPECT_FALSE(CpuForward(a, x.data(), x.data(), nullptr, o.data()).ok());
  EXPECT_FALSE(CpuForward(a, x.data(), x.data(), x.data(), nullptr).ok());
  CpuAttentionOptions bad;
  bad.block_q = -1;
  EXPECT_FALSE(CpuForward(a, x.data(), x.data(), x.data(), o.data(), nullptr, bad).ok());
  bad = {};
  bad.num_threads = -3;
  EXPECT_FALSE(CpuForward(a, x.data(), x.data(), x.data(), o.data(), nullptr, bad).ok());
  AttentionArgs n = a;
  n.softmax_scale = std::nan("");
  EXPECT_FALSE(CpuForward(n, x.data(), x.data(), x.data(), o.data()).ok());
  AttentionArgs h = a;
  h.num_q_heads = 3;  // not a multiple of num_kv_heads
  EXPECT_FALSE(CpuForward(h, x.data(), x.data(), x.data(), o.data()).ok());
  // A transform error surfaces as the call's status.
  Rope rope = MakeRope(16, 16, group::PlanePairing::kHalfSplit);  // head_dim 16 != 8
  RopeRowTransform tr(rope);
  AttentionArgs t = a;
  t.q_transform = &tr;
  EXPECT_FALSE(CpuForward(t, x.data(), x.data(), x.data(), o.data()).ok());
  std::vector<float> g(64);
  EXPECT_FALSE(CpuBackward(a, x.data(), x.data(), x.data(), o.data(), nullptr, x.data(), g.data(),
                           g.data(), g.data())
                   .ok());  // o without lse
  EXPECT_FALSE(CpuBackward(a, x.data(), x.data(), x.data(), nullptr, nullptr, nullptr, g.data(),
                           g.data(), g.data())
                   .ok());  // no d_o
  auto bytes = CpuForwardWorkspaceBytes(a);
  ASSERT_TRUE(bytes.ok());
  EXPECT_GT(*bytes, 0);
}

}  // namespace
}  // namespace attention
}  // namespace gpe
