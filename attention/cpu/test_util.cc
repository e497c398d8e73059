#include "attention/cpu/test_util.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "attention/reference.h"
#include "attention/test_util.h"
#include "encodings/sequence/algebraic.h"
#include "encodings/sequence/bias.h"
#include "gtest/gtest.h"

namespace gpe {
namespace attention {
namespace test {
namespace {

// The score mask's entry for (sequence b, head h, token i, key token j) (descriptor.h,
// SCORE MASK): whether the boolean mask allows the pair, and the additive term.
bool MaskAllows(const AttentionArgs& a, int64_t b, int64_t h, int64_t i, int64_t j) {
  return a.mask.allowed == nullptr ||
         a.mask.allowed[a.mask.Offset(b, h, i - a.q_begin(b), j - a.k_begin(b))] != 0;
}
float MaskTerm(const AttentionArgs& a, int64_t b, int64_t h, int64_t i, int64_t j) {
  return a.mask.additive == nullptr
             ? 0.0f
             : a.mask.additive[a.mask.Offset(b, h, i - a.q_begin(b), j - a.k_begin(b))];
}

// Gemma 2's softcap of the q.k part (descriptor.h), in float; identity without one.
float Softcap(const AttentionArgs& a, float x) {
  if (!a.softcap.has_value()) return x;
  const float c = static_cast<float>(*a.softcap);
  return c * std::tanh(x / c);
}

using encodings::sequence::AlibiBias;
using encodings::sequence::AlibiForm;
using encodings::sequence::DefaultRopeFrequencies;
using encodings::sequence::Rope;
using encodings::sequence::RopeOptions;

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

// Elements per row of the tensor with strides s: value_dim() for a.v and a.o (and the
// gradients laid out like them), head_dim for a.q and a.k (descriptor.h, VALUE HEAD SIZE).
int64_t RowWidth(const AttentionArgs& a, const Strides& s) {
  return &s == &a.v || &s == &a.o ? a.value_dim() : a.head_dim;
}

// Max |x - y| over the rows of the output tensor (padding ignored).
double MaxOutErr(const AttentionArgs& a, const std::vector<float>& x, const std::vector<double>& y) {
  double err = 0.0;
  for (int64_t t = 0; t < a.num_q_tokens(); ++t) {
    for (int64_t h = 0; h < a.num_q_heads; ++h) {
      const int64_t off = a.QOffset(a.o, t, h);
      for (int64_t e = 0; e < a.value_dim(); ++e) {
        err = std::max(err, std::fabs(double(x[off + e]) - y[off + e]));
      }
    }
  }
  return err;
}

// Naive float32 backward for the accuracy criterion: per (query row, head) the
// probabilities in float from a float forward, then dv += p do, dp = do.v,
// ds = p (dp - sum p dp), dq += ds scale k', dk += ds scale q', transposes of the
// transforms applied to dq and dk at the end (float, through the same RowTransforms).
// gak / gav (Shaw table gradients, [labels * head_dim] and [labels * value_dim()]) are
// accumulated when non-null.
void NaiveFloatBackward(const AttentionArgs& a, const std::vector<float>& q,
                        const std::vector<float>& k, const std::vector<float>& v,
                        const std::vector<float>& dout, std::vector<float>* dq,
                        std::vector<float>* dk, std::vector<float>* dv,
                        std::vector<float>* gak = nullptr, std::vector<float>* gav = nullptr) {
  const int64_t hq = a.num_q_heads, hkv = a.num_kv_heads, d = a.head_dim, dw = a.value_dim();
  const std::vector<int64_t> pq = EffectiveQPositions(a), pk = EffectiveKPositions(a);
  std::unique_ptr<PreparedRowTransform> tq, tk;
  ASSERT_TRUE(PrepareRowTransforms(a, pq, pk, &tq, &tk).ok());
  const float scale = static_cast<float>(a.scale());
  const KeyMask mask = KeyMask::Of(a);
  const int64_t nq = a.num_q_tokens(), nk = a.num_k_tokens();
  std::vector<float> qt(nq * hq * d), kt(nk * hkv * d), gq(nq * hq * d, 0.0f), gk(nk * hkv * d, 0.0f),
      gv(nk * hkv * dw, 0.0f);
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
        std::vector<float> brow(lk, 0.0f), p(lk, 0.0f), loc(lk, 1.0f), capd(lk, 1.0f);
        if (bias != nullptr && lk > 0) {
          ASSERT_TRUE(bias->FillTile(h, absl::MakeConstSpan(&pq[i], 1),
                                     absl::MakeConstSpan(pk.data() + kb, lk), brow.data(), lk)
                          .ok());
        }
        float m = -std::numeric_limits<float>::infinity();
        auto allowed = [&](int64_t j) {
          return mask.Allowed(pq[i], pk[kb + j]) && MaskAllows(a, b, h, i, kb + j);
        };
        for (int64_t j = 0; j < lk; ++j) {
          if (!allowed(j)) continue;
          if (a.locality.has_value()) {
            loc[j] = static_cast<float>(std::pow(*a.locality, std::fabs(double(pq[i] - pk[kb + j]))));
          }
          float dot = 0.0f;
          const int64_t lab = ShawLabel(a.shaw_keys, pq[i], pk[kb + j]);
          for (int64_t e = 0; e < d; ++e) {
            dot += qi[e] * (kt[((kb + j) * hkv + g) * d + e] + (lab >= 0 ? KeyLabel(a, lab, e) : 0.0f));
          }
          const float x = loc[j] * scale * dot;
          p[j] = Softcap(a, x) + brow[j] + MaskTerm(a, b, h, i, kb + j);
          if (a.softcap.has_value()) {
            const float t = std::tanh(x / static_cast<float>(*a.softcap));
            capd[j] = 1.0f - t * t;
          }
          m = std::max(m, p[j]);
        }
        if (m == -std::numeric_limits<float>::infinity()) continue;
        const float sink = a.sinks.empty() ? -std::numeric_limits<float>::infinity() : a.sinks[h];
        m = std::max(m, sink);
        float z = std::exp(sink - m);
        for (int64_t j = 0; j < lk; ++j) {
          if (!allowed(j)) {
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
          for (int64_t e = 0; e < dw; ++e) {
            dp[j] += doi[e] * (vj[e] + (lab >= 0 ? ValueLabel(a, lab, e) : 0.0f));
          }
          dsum += p[j] * dp[j];
        }
        for (int64_t j = 0; j < lk; ++j) {
          if (p[j] == 0.0f) continue;
          const float ds = p[j] * (dp[j] - dsum) * capd[j] * loc[j] * scale;
          float* gkj = gk.data() + ((kb + j) * hkv + g) * d;
          float* gvj = gv.data() + ((kb + j) * hkv + g) * dw;
          const float* kj = kt.data() + ((kb + j) * hkv + g) * d;
          const int64_t lk_ = ShawLabel(a.shaw_keys, pq[i], pk[kb + j]);
          const int64_t lv_ = ShawLabel(a.shaw_values, pq[i], pk[kb + j]);
          for (int64_t e = 0; e < d; ++e) {
            gq[(i * hq + h) * d + e] += ds * (kj[e] + (lk_ >= 0 ? KeyLabel(a, lk_, e) : 0.0f));
            gkj[e] += ds * qi[e];
            if (gak != nullptr && lk_ >= 0) (*gak)[lk_ * d + e] += ds * qi[e];
          }
          for (int64_t e = 0; e < dw; ++e) {
            gvj[e] += p[j] * doi[e];
            if (gav != nullptr && lv_ >= 0) (*gav)[lv_ * dw + e] += p[j] * doi[e];
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
    for (int64_t h = 0; h < hkv; ++h) {
      for (int64_t e = 0; e < d; ++e) (*dk)[a.KOffset(a.k, t, h) + e] = gk[(t * hkv + h) * d + e];
      for (int64_t e = 0; e < dw; ++e) (*dv)[a.KOffset(a.v, t, h) + e] = gv[(t * hkv + h) * dw + e];
    }
}

// Max |x - y| over the rows of a tensor laid out like s (one of a.q, a.k, a.v); infinity
// where x - y is NaN.
double MaxErr(const AttentionArgs& a, const Strides& s, const std::vector<float>& x,
              const std::vector<double>& y) {
  const bool q_side = &s == &a.q;
  const int64_t tokens = q_side ? a.num_q_tokens() : a.num_k_tokens();
  const int64_t heads = q_side ? a.num_q_heads : a.num_kv_heads;
  double err = 0.0;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t off = q_side ? a.QOffset(s, t, h) : a.KOffset(s, t, h);
      for (int64_t e = 0; e < RowWidth(a, s); ++e) {
        const double diff = std::fabs(double(x[off + e]) - y[off + e]);
        // A NaN where the reference is finite is the largest error (std::max drops it).
        if (std::isnan(diff)) return std::numeric_limits<double>::infinity();
        err = std::max(err, diff);
      }
    }
  }
  return err;
}

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

}  // namespace

std::vector<float> RandomF(size_t n, std::mt19937_64* rng, double scale) {
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

size_t Extent(const AttentionArgs& a, const Strides& s, bool q_side) {
  const int64_t tokens = q_side ? a.num_q_tokens() : a.num_k_tokens();
  const int64_t heads = q_side ? a.num_q_heads : a.num_kv_heads;
  if (tokens == 0) return 1;
  const int64_t last = q_side ? a.QOffset(s, tokens - 1, heads - 1) : a.KOffset(s, tokens - 1, heads - 1);
  return static_cast<size_t>(last + RowWidth(a, s));
}

uint16_t Bf(float f) { return encodings::sequence::ToBFloat16(f).bits; }
float Fl(uint16_t b) { return encodings::sequence::ToFloat(encodings::sequence::BFloat16{b}); }

void NaiveFloat(const AttentionArgs& a, const std::vector<float>& q, const std::vector<float>& k,
                const std::vector<float>& v, std::vector<float>* o) {
  const int64_t hq = a.num_q_heads, hkv = a.num_kv_heads, d = a.head_dim, dw = a.value_dim();
  const std::vector<int64_t> pq = EffectiveQPositions(a), pk = EffectiveKPositions(a);
  const float scale = static_cast<float>(a.scale());
  const KeyMask mask = KeyMask::Of(a);
  std::unique_ptr<PreparedRowTransform> tq, tk;
  ASSERT_TRUE(PrepareRowTransforms(a, pq, pk, &tq, &tk).ok());
  for (int64_t b = 0; b < a.num_sequences(); ++b) {
    const int64_t kb = a.k_begin(b), lk = a.k_end(b) - kb;
    const auto* bias =
        a.biases.empty() ? nullptr : (a.biases.size() == 1 ? a.biases[0] : a.biases[b]);
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t g = h / (hq / hkv);
      std::vector<float> kr(lk * d), vr(lk * dw);
      for (int64_t j = 0; j < lk; ++j) {
        for (int64_t e = 0; e < d; ++e) kr[j * d + e] = k[a.KOffset(a.k, kb + j, g) + e];
        for (int64_t e = 0; e < dw; ++e) vr[j * dw + e] = v[a.KOffset(a.v, kb + j, g) + e];
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
        auto allowed = [&](int64_t j) {
          return mask.Allowed(pq[i], pk[kb + j]) && MaskAllows(a, b, h, i, kb + j);
        };
        for (int64_t j = 0; j < lk; ++j) {
          if (!allowed(j)) continue;
          float dot = 0.0f;
          const int64_t lab = ShawLabel(a.shaw_keys, pq[i], pk[kb + j]);
          for (int64_t e = 0; e < d; ++e) {
            dot += qi[e] * (kr[j * d + e] + (lab >= 0 ? KeyLabel(a, lab, e) : 0.0f));
          }
          float loc = 1.0f;
          if (a.locality.has_value()) {
            loc = static_cast<float>(std::pow(*a.locality, std::fabs(double(pq[i] - pk[kb + j]))));
          }
          s[j] = Softcap(a, loc * scale * dot) + bias_row[j] + MaskTerm(a, b, h, i, kb + j);
          m = std::max(m, s[j]);
        }
        float* out = o->data() + a.QOffset(a.o, i, h);
        std::fill(out, out + dw, 0.0f);
        if (m == -std::numeric_limits<float>::infinity()) continue;
        const float sink = a.sinks.empty() ? -std::numeric_limits<float>::infinity() : a.sinks[h];
        m = std::max(m, sink);
        float z = std::exp(sink - m);
        for (int64_t j = 0; j < lk; ++j) {
          if (!allowed(j)) continue;
          s[j] = std::exp(s[j] - m);
          z += s[j];
        }
        for (int64_t j = 0; j < lk; ++j) {
          if (!allowed(j)) continue;
          const int64_t lab = ShawLabel(a.shaw_values, pq[i], pk[kb + j]);
          for (int64_t e = 0; e < dw; ++e) {
            out[e] += s[j] / z * (vr[j * dw + e] + (lab >= 0 ? ValueLabel(a, lab, e) : 0.0f));
          }
        }
      }
    }
  }
}

void CheckAgainstReference(const AttentionArgs& a, const CpuAttentionOptions& opt,
                           uint64_t seed, const std::string& what) {
  SCOPED_TRACE(what);
  std::mt19937_64 rng(seed);
  const size_t nq = Extent(a, a.q, true), nk = Extent(a, a.k, false);
  const size_t no = Extent(a, a.o, true), nv = Extent(a, a.v, false);
  std::vector<float> q = RandomF(nq, &rng), k = RandomF(nk, &rng), v = RandomF(nv, &rng);
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
      for (int64_t e = 0; e < a.value_dim(); ++e) inside[a.QOffset(a.o, t, h) + e] = 1;
    }
  }
  for (size_t i = 0; i < no; ++i) {
    if (!inside[i]) {
      ASSERT_EQ(o[i], kCanary) << "padding " << i << " written";
    }
  }
}

void CheckBackward(const AttentionArgs& a, const CpuAttentionOptions& opt, uint64_t seed,
                   const std::string& what) {
  SCOPED_TRACE(what);
  std::mt19937_64 rng(seed);
  const size_t nq = Extent(a, a.q, true), nk = Extent(a, a.k, false);
  const size_t nv = Extent(a, a.v, false), no = Extent(a, a.o, true);  // d_o laid out like o
  std::vector<float> q = RandomF(nq, &rng), k = RandomF(nk, &rng), v = RandomF(nv, &rng),
                     dout = RandomF(no, &rng);
  std::vector<float> o(no), lse(a.num_q_tokens() * a.num_q_heads);
  ASSERT_TRUE(CpuForward(a, q.data(), k.data(), v.data(), o.data(), lse.data(), opt).ok());
  // Gradients are overwritten: a canary where the backward might not write (rows of no
  // sequence, rows without an allowed key) would show in the comparison.
  std::vector<float> dq(nq, 1e6f), dk(nk, 1e6f), dv(nv, 1e6f);
  // Shaw table gradients (when the args carry tables): kernel, reference, naive float.
  const size_t ntk = a.shaw_keys ? a.shaw_keys->num_labels() * a.head_dim : 0;
  const size_t ntv = a.shaw_values ? a.shaw_values->num_labels() * a.value_dim() : 0;
  std::vector<double> cak(ntk, -1.0), cav(ntv, -1.0), rak(ntk), rav(ntv);
  CpuBackwardExtras cex;
  ReferenceBackwardExtras rex;
  if (ntk > 0) cex.shaw_key_table_grad = cak.data(), rex.shaw_key_table_grad = rak.data();
  if (ntv > 0) cex.shaw_value_table_grad = cav.data(), rex.shaw_value_table_grad = rav.data();
  // Sink gradients (when the args carry sinks): kernel and reference.
  std::vector<double> cz(a.sinks.size(), -1.0), rz(a.sinks.size());
  if (!a.sinks.empty()) cex.sink_grad = cz.data(), rex.sink_grad = rz.data();
  absl::Status st = CpuBackward(a, q.data(), k.data(), v.data(), o.data(), lse.data(), dout.data(),
                                dq.data(), dk.data(), dv.data(), nullptr, opt, cex);
  ASSERT_TRUE(st.ok()) << st;
  std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end()),
      dod(dout.begin(), dout.end()), gq(nq), gk(nk), gv(nv);
  ASSERT_TRUE(ReferenceBackward<double>(a, qd.data(), kd.data(), vd.data(), dod.data(), gq.data(),
                                        gk.data(), gv.data(), nullptr, rex)
                  .ok());
  std::vector<float> nq_(nq, 0.0f), nk_(nk, 0.0f), nv_(nv, 0.0f), nak(ntk, 0.0f), nav(ntv, 0.0f);
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
  const double eq = MaxErr(a, a.q, dq, gq), eqn = MaxErr(a, a.q, nq_, gq);
  const double ek = MaxErr(a, a.k, dk, gk), ekn = MaxErr(a, a.k, nk_, gk);
  const double ev = MaxErr(a, a.v, dv, gv), evn = MaxErr(a, a.v, nv_, gv);
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
  // dL/dz_h sums exp(z_h - lse_i) <do_i, o_i> over the head's rows in double from the
  // float o and lse: per row, float rounding of lse (~1e-6 |lse|) and o (~1e-6) gives
  // ~1e-5 relative on terms of |<do, o>| <~ 10, so 1e-4 per row of the head bounds it.
  const double rows_per_head = static_cast<double>(a.num_q_tokens());
  for (size_t h = 0; h < rz.size(); ++h) {
    EXPECT_NEAR(cz[h], rz[h], 1e-4 * rows_per_head) << "dz head " << h;
  }
  // Recomputing o and lse inside gives the same gradients up to the forward's rounding
  // (it runs the same kernels on the same inputs: bit-identical o and lse).
  std::vector<float> dq2(nq, 0.0f), dk2(nk, 0.0f), dv2(nv, 0.0f);
  ASSERT_TRUE(CpuBackward(a, q.data(), k.data(), v.data(), nullptr, nullptr, dout.data(),
                          dq2.data(), dk2.data(), dv2.data(), nullptr, opt)
                  .ok());
  EXPECT_EQ(MaxErr(a, a.q, dq2, std::vector<double>(dq.begin(), dq.end())), 0.0);
  EXPECT_EQ(MaxErr(a, a.k, dk2, std::vector<double>(dk.begin(), dk.end())), 0.0);
  EXPECT_EQ(MaxErr(a, a.v, dv2, std::vector<double>(dv.begin(), dv.end())), 0.0);
}

void CheckBackwardBf16(const AttentionArgs& a, const CpuAttentionOptions& opt, uint64_t seed,
                       const std::string& what) {
  using encodings::sequence::BFloat16;
  SCOPED_TRACE(what);
  if (opt.bf16_arithmetic == CpuAttentionOptions::Bf16Arithmetic::kDotProducts &&
      !CpuHasBf16DotProducts()) {
    GTEST_SKIP() << "this CPU has no AVX512_BF16: the bf16 dot-product path cannot run";
  }
  std::mt19937_64 rng(seed);
  const size_t nq = Extent(a, a.q, true), nk = Extent(a, a.k, false);
  const size_t nv = Extent(a, a.v, false), no = Extent(a, a.o, true);
  auto draw = [&](size_t n, std::vector<BFloat16>* x, std::vector<double>* xd) {
    const std::vector<float> f = RandomF(n, &rng);
    x->resize(n);
    xd->resize(n);
    for (size_t i = 0; i < n; ++i) (*xd)[i] = Fl((*x)[i].bits = Bf(f[i]));
  };
  std::vector<BFloat16> q, k, v, dout;
  std::vector<double> qd, kd, vd, dod;
  draw(nq, &q, &qd);
  draw(nk, &k, &kd);
  draw(nv, &v, &vd);
  draw(no, &dout, &dod);
  std::vector<BFloat16> o(no);
  std::vector<float> lse(a.num_q_tokens() * a.num_q_heads);
  ASSERT_TRUE(CpuForward(a, q.data(), k.data(), v.data(), o.data(), lse.data(), opt).ok());
  const BFloat16 canary{Bf(1e6f)};  // where the backward might not write
  std::vector<BFloat16> dq(nq, canary), dk(nk, canary), dv(nv, canary);
  absl::Status st = CpuBackward(a, q.data(), k.data(), v.data(), o.data(), lse.data(),
                                dout.data(), dq.data(), dk.data(), dv.data(), nullptr, opt);
  ASSERT_TRUE(st.ok()) << st;
  std::vector<double> gq(nq), gk(nk), gv(nv);
  ASSERT_TRUE(ReferenceBackward<double>(a, qd.data(), kd.data(), vd.data(), dod.data(),
                                        gq.data(), gk.data(), gv.data())
                  .ok());
  auto widen = [](const std::vector<BFloat16>& x) {
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = Fl(x[i].bits);
    return y;
  };
  auto scale_of = [](const std::vector<double>& g) {
    double m = 1.0;
    for (double x : g) m = std::max(m, std::fabs(x));
    return m;
  };
  const double eq = MaxErr(a, a.q, widen(dq), gq), ek = MaxErr(a, a.k, widen(dk), gk);
  const double ev = MaxErr(a, a.v, widen(dv), gv);
  EXPECT_LE(eq, 2e-2 * scale_of(gq)) << "dq";
  EXPECT_LE(ek, 2e-2 * scale_of(gk)) << "dk";
  EXPECT_LE(ev, 2e-2 * scale_of(gv)) << "dv";
}

CpuAttentionOptions CaseListOptions() {
  CpuAttentionOptions opt;
  opt.block_q = 16;
  opt.block_k = 64;
  opt.num_threads = 3;
  return opt;
}

void ForEachStructuredCase(const CaseCheck& check) {
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

encodings::sequence::ShawRelative MakeShaw(int64_t kmax, int64_t d, std::mt19937_64* rng) {
  const int64_t n = 2 * kmax + 1;
  std::vector<double> tk = RandomUniform(n * d, rng), tv = RandomUniform(n * d, rng);
  auto s = encodings::sequence::ShawRelative::Create(
      kmax, Eigen::Map<encodings::sequence::RowMatrixXd>(tk.data(), n, d),
      Eigen::Map<encodings::sequence::RowMatrixXd>(tv.data(), n, d));
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

void ForEachShawCase(const CaseCheck& check) {
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

}  // namespace test
}  // namespace attention
}  // namespace gpe
