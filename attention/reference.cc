#include "attention/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "encodings/sequence/algebraic.h"
#include "encodings/sequence/relative.h"

namespace gpe {
namespace attention {
namespace {

// |a - b| exactly in uint64 (no int64 overflow).
uint64_t Distance(int64_t a, int64_t b) {
  return a >= b ? static_cast<uint64_t>(a) - static_cast<uint64_t>(b)
                : static_cast<uint64_t>(b) - static_cast<uint64_t>(a);
}

// Whether key token t belongs to its sequence (bshd rows past kv_lengths do not).
bool UsedKey(const AttentionArgs& a, int64_t t) {
  if (a.layout != Layout::kBSHD || a.kv_lengths.empty()) return true;
  return t < a.k_end(t / a.seq_len_k);
}

// Packed double copies [tokens, heads, width] of the inputs (width head_dim for q and k,
// value_dim() for v), q and k transformed.
struct Prepared {
  std::vector<double> q, k, v;
  std::vector<int64_t> pq, pk;
};

template <class T>
absl::Status Gather(const AttentionArgs& a, const T* src, const Strides& s, bool q_side,
                    int64_t heads, int64_t d, std::vector<double>* dst) {
  const int64_t n = q_side ? a.num_q_tokens() : a.num_k_tokens();
  dst->assign(static_cast<size_t>(n * heads * d), 0.0);
  if (n * heads == 0) return absl::OkStatus();
  if (src == nullptr) return absl::InvalidArgumentError("attention: null input tensor");
  for (int64_t t = 0; t < n; ++t) {
    if (!q_side && !UsedKey(a, t)) continue;  // past kv_lengths: never read (maybe no page)
    for (int64_t h = 0; h < heads; ++h) {
      const T* row = src + (q_side ? a.QOffset(s, t, h) : a.KOffset(s, t, h));
      double* out = dst->data() + (t * heads + h) * d;
      for (int64_t e = 0; e < d; ++e) out[e] = static_cast<double>(row[e]);
    }
  }
  return absl::OkStatus();
}

template <class T>
void Scatter(const AttentionArgs& a, const std::vector<double>& src, const Strides& s, bool q_side,
             int64_t heads, int64_t d, T* dst) {
  if (dst == nullptr) return;
  const int64_t n = q_side ? a.num_q_tokens() : a.num_k_tokens();
  for (int64_t t = 0; t < n; ++t) {
    const bool used = q_side || UsedKey(a, t);
    for (int64_t h = 0; h < heads && (used || !a.pages.enabled()); ++h) {
      T* row = dst + (q_side ? a.QOffset(s, t, h) : a.KOffset(s, t, h));
      const double* in = src.data() + (t * heads + h) * d;
      for (int64_t e = 0; e < d; ++e) row[e] = static_cast<T>(in[e]);
    }
  }
}

// Applies (or back-propagates through) a prepared transform to every token and head of a
// packed [tokens, heads, head_dim] buffer (double overloads: exact arithmetic).
absl::Status Transform(const PreparedRowTransform* tr, int64_t tokens, int64_t heads, int64_t d,
                       bool backward, std::vector<double>* buf) {
  if (tr == nullptr || tokens == 0) return absl::OkStatus();
  for (int64_t h = 0; h < heads; ++h) {
    double* rows = buf->data() + h * d;
    absl::Status s = backward ? tr->Backward(0, tokens, rows, heads * d)
                              : tr->Forward(0, tokens, rows, heads * d);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// Forward (and, when d_o is set, backward) in double over the packed buffers.
template <class T>
absl::Status Run(const AttentionArgs& a, const T* q, const T* k, const T* v, T* o, T* lse,
                 const T* d_o, T* dq, T* dk, T* dv_out, const BiasGradientSink* sink,
                 const ReferenceBackwardExtras& extras = {}) {
  if (absl::Status s = ValidateAttention(a); !s.ok()) return s;
  if (a.empty()) return absl::OkStatus();  // nothing to write (AttentionArgs::empty)
  const bool backward = d_o != nullptr;
  // d: q and k rows; dv: v and o rows (descriptor.h, VALUE HEAD SIZE).
  const int64_t hq = a.num_q_heads, hkv = a.num_kv_heads, d = a.head_dim, dv = a.value_dim();
  const int64_t group = hq / hkv;
  const double scale = a.scale();
  Prepared p;
  p.pq = EffectiveQPositions(a);
  p.pk = EffectiveKPositions(a);
  if (absl::Status s = Gather(a, q, a.q, true, hq, d, &p.q); !s.ok()) return s;
  if (absl::Status s = Gather(a, k, a.k, false, hkv, d, &p.k); !s.ok()) return s;
  if (absl::Status s = Gather(a, v, a.v, false, hkv, dv, &p.v); !s.ok()) return s;
  std::unique_ptr<PreparedRowTransform> tq, tk;
  if (absl::Status s = PrepareRowTransforms(a, p.pq, p.pk, &tq, &tk); !s.ok()) return s;
  const int64_t nq = a.num_q_tokens(), nk = a.num_k_tokens();
  if (absl::Status s = Transform(tq.get(), nq, hq, d, false, &p.q); !s.ok()) return s;
  if (absl::Status s = Transform(tk.get(), nk, hkv, d, false, &p.k); !s.ok()) return s;
  // Shaw labels (Shaw et al. eq. 3-4): tables [2k + 1, d], label r(i, j) =
  // LabelIndex(pos_q(i), pos_k(j)); qlab_r = <q'_i, aK_r>, dolab_r = <do_i, aV_r>.
  const encodings::sequence::ShawRelative* shaw_k = a.shaw_keys;
  const encodings::sequence::ShawRelative* shaw_v = a.shaw_values;
  const int64_t nlk = shaw_k ? shaw_k->num_labels() : 0, nlv = shaw_v ? shaw_v->num_labels() : 0;
  std::vector<double> qlab(static_cast<size_t>(nlk)), dolab(static_cast<size_t>(nlv));
  std::vector<int64_t> lab_k, lab_v;
  std::vector<double> g_ak, g_av;
  if (backward) {
    if (extras.shaw_key_table_grad != nullptr) g_ak.assign(static_cast<size_t>(nlk * d), 0.0);
    if (extras.shaw_value_table_grad != nullptr) g_av.assign(static_cast<size_t>(nlv * dv), 0.0);
  }
  std::vector<double> go, gq, gk, gv;
  if (backward) {
    if (absl::Status s = Gather(a, d_o, a.o, true, hq, dv, &go); !s.ok()) return s;
    gq.assign(p.q.size(), 0.0);
    gk.assign(p.k.size(), 0.0);
    gv.assign(p.v.size(), 0.0);
  } else if (o == nullptr && a.num_q_tokens() > 0) {
    return absl::InvalidArgumentError("attention: null output tensor o");
  }
  std::vector<double> out(static_cast<size_t>(a.num_q_tokens() * hq * dv), 0.0);
  const double kNegInf = -std::numeric_limits<double>::infinity();
  std::vector<double> bias, loc, score, prob, grad, capd;
  std::vector<char> allowed, ok;
  const KeyMask mask = KeyMask::Of(a);
  std::vector<double> g_sink;
  if (backward && extras.sink_grad != nullptr) g_sink.assign(static_cast<size_t>(hq), 0.0);
  for (int64_t b = 0; b < a.num_sequences(); ++b) {
    const int64_t qb = a.q_begin(b), qe = a.q_end(b), kb = a.k_begin(b), ke = a.k_end(b);
    const int64_t lk = ke - kb;
    const encodings::sequence::AdditiveBias* bias_obj =
        a.biases.empty() ? nullptr : (a.biases.size() == 1 ? a.biases[0] : a.biases[b]);
    absl::Span<const int64_t> kpos(p.pk.data() + kb, static_cast<size_t>(lk));
    bias.assign(static_cast<size_t>(lk), 0.0);
    loc.assign(static_cast<size_t>(lk), 1.0);
    score.assign(static_cast<size_t>(lk), 0.0);
    prob.assign(static_cast<size_t>(lk), 0.0);
    grad.assign(static_cast<size_t>(lk), 0.0);
    capd.assign(static_cast<size_t>(lk), 1.0);
    allowed.assign(static_cast<size_t>(lk), 1);
    ok.assign(static_cast<size_t>(lk), 1);
    lab_k.assign(static_cast<size_t>(lk), 0);
    lab_v.assign(static_cast<size_t>(lk), 0);
    for (int64_t i = qb; i < qe; ++i) {
      const int64_t pi = p.pq[i];
      absl::Span<const int64_t> qpos(&p.pq[i], 1);
      for (int64_t j = 0; j < lk; ++j) {
        allowed[j] = mask.Allowed(pi, p.pk[kb + j]);
        if (shaw_k) lab_k[j] = encodings::sequence::ShawRelative::LabelIndex(
                        pi, p.pk[kb + j], shaw_k->max_distance());
        if (shaw_v) lab_v[j] = encodings::sequence::ShawRelative::LabelIndex(
                        pi, p.pk[kb + j], shaw_v->max_distance());
        if (a.locality.has_value()) {
          absl::StatusOr<double> f =
              encodings::sequence::LocalityFactor(Distance(pi, p.pk[kb + j]), *a.locality);
          if (!f.ok()) return f.status();
          loc[j] = *f;
        }
      }
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t g = h / group;
        if (bias_obj != nullptr && lk > 0) {
          if (absl::Status s = bias_obj->FillTile(h, qpos, kpos, bias.data(), lk); !s.ok()) {
            return s;
          }
        }
        const double* qi = p.q.data() + (i * hq + h) * d;
        for (int64_t r = 0; r < nlk; ++r) {
          double dot = 0.0;
          for (int64_t e = 0; e < d; ++e) dot += qi[e] * shaw_k->key_table()(r, e);
          qlab[r] = dot;
        }
        // The keys this head's row may see: the causal rule and window, then a boolean
        // mask (descriptor.h, SCORE MASK).
        for (int64_t j = 0; j < lk; ++j) {
          ok[j] = allowed[j] && (a.mask.allowed == nullptr ||
                                 a.mask.allowed[a.mask.Offset(b, h, i - qb, j)] != 0);
        }
        double m = kNegInf;
        for (int64_t j = 0; j < lk; ++j) {
          if (!ok[j]) continue;
          const double* kj = p.k.data() + ((kb + j) * hkv + g) * d;
          double dot = shaw_k ? qlab[lab_k[j]] : 0.0;
          for (int64_t e = 0; e < d; ++e) dot += qi[e] * kj[e];
          double x = loc[j] * scale * dot;
          if (a.softcap.has_value()) {  // Gemma 2's cap of the q.k part (descriptor.h)
            const double t = std::tanh(x / *a.softcap);
            x = *a.softcap * t;
            capd[j] = 1.0 - t * t;
          }
          score[j] = x + bias[j];
          if (a.mask.additive != nullptr) {  // SDPA's additive attn_mask (descriptor.h)
            score[j] += a.mask.additive[a.mask.Offset(b, h, i - qb, j)];
          }
          // A NaN score makes the row NaN (std::max would drop it); +inf gives NaN below.
          m = std::isnan(score[j]) || std::isnan(m) ? std::numeric_limits<double>::quiet_NaN()
                                                     : std::max(m, score[j]);
        }
        double* oi = out.data() + (i * hq + h) * dv;
        // The head's sink logit joins the denominator (descriptor.h, SINKS); NaN or +inf
        // makes the row NaN.
        const double z = a.sinks.empty() ? kNegInf : static_cast<double>(a.sinks[h]);
        const bool nan_sink = std::isnan(z) || z == std::numeric_limits<double>::infinity();
        if (nan_sink) m = std::numeric_limits<double>::quiet_NaN();
        if (m == kNegInf) {  // no allowed key (or every score -inf): o = 0, no gradient
          if (lse != nullptr) lse[i * hq + h] = static_cast<T>(z);
          if (backward && sink != nullptr && *sink && lk > 0) {
            std::fill(grad.begin(), grad.end(), 0.0);
            if (absl::Status s = (*sink)(b, h, qpos, kpos, grad.data(), lk); !s.ok()) return s;
          }
          continue;
        }
        if (!std::isnan(m)) m = std::max(m, z);
        double sum = z == kNegInf ? 0.0 : std::exp(z - m);
        const double sink_mass = sum;
        // A key whose score is -inf (an infinite q or k) has probability exactly 0, as a
        // masked key, also in a NaN row: it contributes nothing, in the forward and the
        // backward alike (descriptor.h, NON-FINITE VALUES), as the kernels do.
        for (int64_t j = 0; j < lk; ++j) {
          prob[j] = ok[j] && score[j] != kNegInf ? std::exp(score[j] - m) : 0.0;
          sum += prob[j];
        }
        for (int64_t j = 0; j < lk; ++j) {
          if (prob[j] == 0.0) continue;  // stays 0 in a NaN row (0 / NaN is NaN)
          prob[j] /= sum;
          if (prob[j] == 0.0) continue;
          const double* vj = p.v.data() + ((kb + j) * hkv + g) * dv;
          for (int64_t e = 0; e < dv; ++e) oi[e] += prob[j] * vj[e];
          if (shaw_v) {
            for (int64_t e = 0; e < dv; ++e) oi[e] += prob[j] * shaw_v->value_table()(lab_v[j], e);
          }
        }
        if (nan_sink) std::fill(oi, oi + dv, std::numeric_limits<double>::quiet_NaN());
        if (lse != nullptr) lse[i * hq + h] = static_cast<T>(m + std::log(sum));
        if (!backward) continue;
        // dL/ds_j = p_j (dL/dp_j - sum_l p_l dL/dp_l), dL/dp_j = <do_i, v_j>.
        const double* doi = go.data() + (i * hq + h) * dv;
        double dsum = 0.0;
        for (int64_t e = 0; e < dv; ++e) dsum += doi[e] * oi[e];
        // dL/dz_h = -p_sink dsum: the sink's value is zero (descriptor.h, SINKS).
        if (!g_sink.empty()) g_sink[h] -= sink_mass / sum * dsum;
        double* gqi = gq.data() + (i * hq + h) * d;
        for (int64_t r = 0; r < nlv; ++r) {
          double dot = 0.0;
          for (int64_t e = 0; e < dv; ++e) dot += doi[e] * shaw_v->value_table()(r, e);
          dolab[r] = dot;
        }
        for (int64_t j = 0; j < lk; ++j) {
          grad[j] = 0.0;
          if (!ok[j] || prob[j] == 0.0) continue;  // contributes nothing (as the forward)
          const int64_t row = ((kb + j) * hkv + g) * d, vrow = ((kb + j) * hkv + g) * dv;
          const double* vj = p.v.data() + vrow;
          // dL/dp_j = <do_i, v_j + aV_r>.
          double dp = shaw_v ? dolab[lab_v[j]] : 0.0;
          for (int64_t e = 0; e < dv; ++e) dp += doi[e] * vj[e];
          const double ds = prob[j] * (dp - dsum);
          grad[j] = ds;
          const double gdot = ds * capd[j] * loc[j] * scale;
          const double* kj = p.k.data() + row;
          double* gkj = gk.data() + row;
          double* gvj = gv.data() + vrow;
          for (int64_t e = 0; e < d; ++e) {
            gqi[e] += gdot * kj[e];
            gkj[e] += gdot * qi[e];
          }
          for (int64_t e = 0; e < dv; ++e) gvj[e] += prob[j] * doi[e];
          if (shaw_k) {  // s_ij gains a scale <q'_i, aK_r>
            const int64_t r = lab_k[j];
            for (int64_t e = 0; e < d; ++e) gqi[e] += gdot * shaw_k->key_table()(r, e);
            if (!g_ak.empty()) {
              for (int64_t e = 0; e < d; ++e) g_ak[r * d + e] += gdot * qi[e];
            }
          }
          if (!g_av.empty()) {  // o_i gains p_ij aV_r
            const int64_t r = lab_v[j];
            for (int64_t e = 0; e < dv; ++e) g_av[r * dv + e] += prob[j] * doi[e];
          }
        }
        if (sink != nullptr && *sink && lk > 0) {
          if (absl::Status s = (*sink)(b, h, qpos, kpos, grad.data(), lk); !s.ok()) return s;
        }
      }
    }
  }
  if (!backward) {
    Scatter(a, out, a.o, true, hq, dv, o);
    return absl::OkStatus();
  }
  if (absl::Status s = Transform(tq.get(), nq, hq, d, true, &gq); !s.ok()) return s;
  if (absl::Status s = Transform(tk.get(), nk, hkv, d, true, &gk); !s.ok()) return s;
  if (!g_ak.empty()) std::copy(g_ak.begin(), g_ak.end(), extras.shaw_key_table_grad);
  if (!g_av.empty()) std::copy(g_av.begin(), g_av.end(), extras.shaw_value_table_grad);
  if (!g_sink.empty()) std::copy(g_sink.begin(), g_sink.end(), extras.sink_grad);
  Scatter(a, gq, a.q, true, hq, d, dq);
  Scatter(a, gk, a.k, false, hkv, d, dk);
  Scatter(a, gv, a.v, false, hkv, dv, dv_out);
  return absl::OkStatus();
}

}  // namespace

template <class T>
absl::Status ReferenceForward(const AttentionArgs& args, const T* q, const T* k, const T* v, T* o,
                              T* lse) {
  return Run<T>(args, q, k, v, o, lse, nullptr, nullptr, nullptr, nullptr, nullptr);
}

template <class T>
absl::Status ReferenceBackward(const AttentionArgs& args, const T* q, const T* k, const T* v,
                               const T* d_o, T* dq, T* dk, T* dv,
                               const BiasGradientSink& bias_sink,
                               const ReferenceBackwardExtras& extras) {
  if (d_o == nullptr && args.num_q_tokens() > 0) {
    return absl::InvalidArgumentError("attention: null gradient tensor d_o");
  }
  if (args.pages.enabled()) {
    return absl::InvalidArgumentError(
        "attention: a paged KV cache is for the forward (inference) only");
  }
  // Table gradients start at zero (also when no row has an allowed key).
  if (absl::Status s = ZeroShawTableGradients(args, extras.shaw_key_table_grad,
                                              extras.shaw_value_table_grad);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ZeroSinkGradient(args, extras.sink_grad); !s.ok()) return s;
  if (d_o == nullptr) {  // nothing flows back; gradients are zero
    static const T kZero = T(0);
    d_o = &kZero;
  }
  return Run<T>(args, q, k, v, nullptr, nullptr, d_o, dq, dk, dv, &bias_sink, extras);
}

template <class T>
absl::Status ReferenceBackward(const AttentionArgs& args, const T* q, const T* k, const T* v,
                               const T* d_o, T* dq, T* dk, T* dv,
                               const BiasGradientSink& bias_sink) {
  return ReferenceBackward<T>(args, q, k, v, d_o, dq, dk, dv, bias_sink, {});
}

template absl::Status ReferenceForward<float>(const AttentionArgs&, const float*, const float*,
                                              const float*, float*, float*);
template absl::Status ReferenceForward<double>(const AttentionArgs&, const double*, const double*,
                                               const double*, double*, double*);
template absl::Status ReferenceBackward<float>(const AttentionArgs&, const float*, const float*,
                                               const float*, const float*, float*, float*, float*,
                                               const BiasGradientSink&);
template absl::Status ReferenceBackward<double>(const AttentionArgs&, const double*, const double*,
                                                const double*, const double*, double*, double*,
                                                double*, const BiasGradientSink&);
template absl::Status ReferenceBackward<float>(const AttentionArgs&, const float*, const float*,
                                               const float*, const float*, float*, float*, float*,
                                               const BiasGradientSink&,
                                               const ReferenceBackwardExtras&);
template absl::Status ReferenceBackward<double>(const AttentionArgs&, const double*, const double*,
                                                const double*, const double*, double*, double*,
                                                double*, const BiasGradientSink&,
                                                const ReferenceBackwardExtras&);

}  // namespace attention
}  // namespace gpe
