// Highway per-target implementations of kernels.h. This file is compiled once per
// instruction set (foreach_target.h re-includes it with HWY_TARGET set); HWY_EXPORT and
// HWY_DYNAMIC_DISPATCH pick the best compiled one for the running CPU.
//
// Register tiles (the two products of flash attention, Dao et al. 2022, Alg. 1):
//  - scores S = Q K^T: MR query rows x NV vectors of keys; per component c, NV loads of
//    the transposed key panel and MR broadcasts of q, MR * NV FMAs.
//  - output O += P V: MR rows x NV vectors of value columns; per key j, NV loads of the
//    value row and MR broadcasts of p.
// With 32 vector registers (AVX-512) the tiles hold 24 accumulators (12 x 2 and 6 x 4);
// with 16 (AVX2, SSE) 12 (6 x 2 and 3 x 4).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "attention/cpu/kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/cache_control.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "attention/cpu/kernels.h"
#include "encodings/sequence/rope.h"

HWY_BEFORE_NAMESPACE();
namespace gpe {
namespace attention {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

#if HWY_TARGET <= HWY_AVX3
constexpr int kScoreRows = 6;
constexpr int kScoreVecs = 4;
constexpr int kAccRows = 6;
#else
constexpr int kScoreRows = 6;
constexpr int kScoreVecs = 2;
constexpr int kAccRows = 3;
#endif
constexpr int kAccVecs = 4;

// 2^f for |f| <= 1/2: kExp2Poly by Estrin's scheme (kernels.h): ((c0 + c1 f) +
// f^2 (c2 + c3 f)) + f^4 ((c4 + c5 f) + c6 f^2), three FMAs deep where Horner's scheme is
// six: the softcapped softmax, two exponentials in a row per score, is bound by their
// latency (the reorder window fills), not by their count.
HWY_INLINE VF Exp2Reduced(DF df, VF f) {
  const VF f2 = hn::Mul(f, f);
  const VF p01 = hn::MulAdd(hn::Set(df, kExp2Poly[5]), f, hn::Set(df, kExp2Poly[6]));
  const VF p23 = hn::MulAdd(hn::Set(df, kExp2Poly[3]), f, hn::Set(df, kExp2Poly[4]));
  const VF p45 = hn::MulAdd(hn::Set(df, kExp2Poly[1]), f, hn::Set(df, kExp2Poly[2]));
  const VF f4 = hn::Mul(f2, f2);
  const VF p456 = hn::MulAdd(hn::Set(df, kExp2Poly[0]), f2, p45);
  return hn::MulAdd(p456, f4, hn::MulAdd(p23, f2, p01));
}

// p 2^n for integral n in [-126, 127] (the targets without vscalefps): 2^n assembled in
// the exponent field.
HWY_INLINE VF TimesPow2(DF df, VF p, VF n) {
  const hn::RebindToSigned<DF> di;
  return hn::Mul(p, hn::BitCast(df, hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n),
                                                              hn::Set(di, 127)))));
}

// 2^x for x <= 0 (and -inf): x = n + f, n = round(x), |f| <= 1/2, 2^f by Exp2Reduced,
// times 2^n (AVX-512: vscalefps; otherwise assembled in the exponent field). x < -126
// gives exactly 0 (2^-126 is float's smallest normal; such probabilities are < 1e-38 of
// the row maximum, which is 1), so masked scores (-inf) get probability 0. NaN gives NaN
// (a NaN score must reach the row's sum and output: docs/ARCHITECTURE.md, "Non-finite
// values in attention").
HWY_INLINE VF Exp2(DF df, VF x) {
  const VF lo = hn::Set(df, -126.0f);
#if HWY_TARGET <= HWY_AVX3
  // Not-less-than, unordered: true for NaN. vmaxps returns its second operand when either
  // is NaN, so max(lo, x) keeps a NaN x (and clamps -inf, whose lanes keep drops).
  const __mmask16 keep = _mm512_cmp_ps_mask(x.raw, lo.raw, _CMP_NLT_UQ);
  x = VF{_mm512_max_ps(lo.raw, x.raw)};
#elif HWY_TARGET == HWY_AVX2
  // As AVX-512, with the mask as a vector: no instruction more than keeping NaN as 0 took.
  // A NaN lane reaches the int32 conversion, vcvttps2dq, defined for NaN in hardware (the
  // integer indefinite); p is NaN there, so the lane stays NaN.
  const auto keep = hn::MaskFromVec(VF{_mm256_cmp_ps(x.raw, lo.raw, _CMP_NLT_UQ)});
  x = VF{_mm256_max_ps(lo.raw, x.raw)};
#else
  const auto nan = hn::IsNaN(x);
  const auto keep = hn::Ge(x, lo);
  const VF x_in = x;
  x = hn::Max(x, lo);  // never NaN here (the int32 conversion below must not see one)
  x = hn::IfThenElse(nan, lo, x);
#endif
  const VF n = hn::Round(x);
  const VF p = Exp2Reduced(df, hn::Sub(x, n));
#if HWY_TARGET <= HWY_AVX3
  return VF{_mm512_maskz_scalef_ps(keep, p.raw, n.raw)};
#elif HWY_TARGET == HWY_AVX2
  return hn::IfThenElseZero(keep, TimesPow2(df, p, n));
#else
  return hn::IfThenElse(nan, x_in, hn::IfThenElseZero(keep, TimesPow2(df, p, n)));
#endif
}

void Exp2InPlaceImpl(float* x, int64_t n) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(Exp2(df, hn::LoadU(df, x + i)), df, x + i);
  if (i < n) {
    HWY_ALIGN float buf[hn::MaxLanes(DF())] = {};
    std::memcpy(buf, x + i, static_cast<size_t>(n - i) * sizeof(float));
    hn::Store(Exp2(df, hn::Load(df, buf)), df, buf);
    std::memcpy(x + i, buf, static_cast<size_t>(n - i) * sizeof(float));
  }
}

void PackKeyPanelsImpl(const float* keys, int64_t nk, int64_t ld, int64_t d, float* panels) {
  const int64_t num_panels = (nk + kPanel - 1) / kPanel;
  for (int64_t p = 0; p < num_panels; ++p) {
    float* out = panels + p * d * kPanel;
    const int64_t j0 = p * kPanel;
    const int64_t nj = nk - j0 < kPanel ? nk - j0 : kPanel;
    if (nj < kPanel) std::memset(out, 0, static_cast<size_t>(d * kPanel) * sizeof(float));
    // Each key row read sequentially (rows of a KV layout are often a page or more
    // apart: one row at a time keeps the TLB and prefetchers on one page); the stores
    // scatter within the panel (kPanel x d floats, 32 KiB at d = 128), which stays in L1.
    for (int64_t j = 0; j < nj; ++j) {
      const float* row = keys + (j0 + j) * ld;
      // Rows a page or more apart defeat the hardware prefetchers: request the row
      // kPrefetchRows ahead (each row's loads otherwise wait on memory).
      if (ld > 2 * d && j0 + j + kPrefetchRows < nk) {
        const float* ahead = row + kPrefetchRows * ld;
        for (int64_t c = 0; c < d; c += 16) hwy::Prefetch(ahead + c);
      }
      float* o = out + j;
      for (int64_t c = 0; c < d; ++c) o[c * kPanel] = row[c];
    }
  }
}

// Walks the cache lines of a PrefetchRows, one request per Next() (region by region, row
// by row). prefetcht0 although the lines are read a whole tile later, after more than L1
// holds has passed through it (they are then found in L2): on this Zen 4 the backward
// measured ~4% faster with t0 than with t1 (which barely beat no prefetch). Decoding's
// PrefetchCursor (kernels_decode.cc) measured the opposite (t1 ahead of t0 by ~20%): its
// stream runs 32 KiB ahead, as much as L1 holds, so t0 lines would evict the block being
// read.
class LineCursor {
 public:
  explicit LineCursor(const PrefetchRows& p) : p_(p) {}
  int64_t Lines() const {
    return p_.num * p_.rows * ((p_.row_floats + kLineFloats - 1) / kLineFloats);
  }
  HWY_INLINE void Next() {
    if (i_ >= p_.num) return;
    hwy::Prefetch(p_.base[i_] + r_ * p_.ld + c_);
    c_ += kLineFloats;
    if (c_ >= p_.row_floats) {
      c_ = 0;
      if (++r_ >= p_.rows) {
        r_ = 0;
        ++i_;
      }
    }
  }
  void Rest() {
    while (i_ < p_.num) Next();
  }

 private:
  static constexpr int64_t kLineFloats = 16;  // 64-byte lines
  const PrefetchRows& p_;
  int i_ = 0;
  int64_t r_ = 0, c_ = 0;
};

// Issues one LineCursor request every `every` calls of Tick().
struct PrefetchPacer {
  LineCursor* cursor = nullptr;
  int64_t every = 1, left = 1;
  HWY_INLINE void Tick() {
    if (--left == 0) {
      left = every;
      cursor->Next();
    }
  }
};

// MR x (NV vectors) block of S for the keys at panel column offset col. kAhead: one
// PrefetchPacer tick per component c (the arithmetic is the same).
template <int MR, int NV, bool kAhead = false>
HWY_INLINE void ScoreMicro(const float* HWY_RESTRICT q, int64_t ldq, int64_t d,
                           const float* HWY_RESTRICT panel, float* HWY_RESTRICT s,
                           int64_t lds, PrefetchPacer* pacer = nullptr) {
  const DF df;
  constexpr size_t N = hn::MaxLanes(DF());
  VF acc[MR][NV];
  HWY_UNROLL(32)
  for (int r = 0; r < MR; ++r) {
    HWY_UNROLL(32)
    for (int v = 0; v < NV; ++v) acc[r][v] = hn::Zero(df);
  }
  for (int64_t c = 0; c < d; ++c) {
    if constexpr (kAhead) pacer->Tick();
    VF k[NV];
    HWY_UNROLL(32)
    for (int v = 0; v < NV; ++v) k[v] = hn::Load(df, panel + c * kPanel + v * N);
    HWY_UNROLL(32)
    for (int r = 0; r < MR; ++r) {
      const VF qb = hn::Set(df, q[r * ldq + c]);
      HWY_UNROLL(32)
      for (int v = 0; v < NV; ++v) acc[r][v] = hn::MulAdd(qb, k[v], acc[r][v]);
    }
  }
  HWY_UNROLL(32)
  for (int r = 0; r < MR; ++r) {
    HWY_UNROLL(32)
    for (int v = 0; v < NV; ++v) hn::StoreU(acc[r][v], df, s + r * lds + v * N);
  }
}

// One panel (kPanel keys) against MR query rows.
template <int MR, bool kAhead = false>
HWY_INLINE void ScorePanelRows(const float* q, int64_t ldq, int64_t d, const float* panel,
                               float* s, int64_t lds, PrefetchPacer* pacer = nullptr) {
  constexpr int64_t kCols = kScoreVecs * static_cast<int64_t>(hn::MaxLanes(DF()));
  static_assert(kPanel % kCols == 0, "a panel holds whole register tiles");
  for (int64_t col = 0; col < kPanel; col += kCols) {
    ScoreMicro<MR, kScoreVecs, kAhead>(q, ldq, d, panel + col, s + col, lds, pacer);
  }
}

template <bool kAhead>
void ScoreTileAll(const float* q, int64_t ldq, int64_t mq, int64_t d, const float* panels,
                  int64_t num_panels, float* s, int64_t lds, PrefetchPacer* pacer) {
  // Panels outer: one panel (kPanel x d floats, 32 KiB at d = 128) stays in L1 while
  // every row tile of the query block streams past it.
  for (int64_t p = 0; p < num_panels; ++p) {
    const float* panel = panels + p * d * kPanel;
    float* sp = s + p * kPanel;
    int64_t r = 0;
    for (; r + kScoreRows <= mq; r += kScoreRows) {
      ScorePanelRows<kScoreRows, kAhead>(q + r * ldq, ldq, d, panel, sp + r * lds, lds, pacer);
    }
    const float* qr = q + r * ldq;
    float* sr = sp + r * lds;
    switch (mq - r) {  // the remainder, one tile of fewer rows
#define GPE_SCORE_CASE(k)                                                                   \
  case k:                                                                                   \
    if constexpr (k < kScoreRows) ScorePanelRows<k, kAhead>(qr, ldq, d, panel, sr, lds, pacer); \
    break;
      GPE_SCORE_CASE(1)
      GPE_SCORE_CASE(2)
      GPE_SCORE_CASE(3)
      GPE_SCORE_CASE(4)
      GPE_SCORE_CASE(5)
      GPE_SCORE_CASE(6)
      GPE_SCORE_CASE(7)
      GPE_SCORE_CASE(8)
      GPE_SCORE_CASE(9)
      GPE_SCORE_CASE(10)
      GPE_SCORE_CASE(11)
#undef GPE_SCORE_CASE
      default:
        break;
    }
  }
}

void ScoreTileImpl(const float* q, int64_t ldq, int64_t mq, int64_t d, const float* panels,
                   int64_t num_panels, float* s, int64_t lds) {
  ScoreTileAll<false>(q, ldq, mq, d, panels, num_panels, s, lds, nullptr);
}

void ScoreTileAheadImpl(const float* q, int64_t ldq, int64_t mq, int64_t d, const float* panels,
                        int64_t num_panels, float* s, int64_t lds, const PrefetchRows& ahead) {
  LineCursor cursor(ahead);
  const int64_t lines = cursor.Lines();
  if (lines <= 0) {
    ScoreTileAll<false>(q, ldq, mq, d, panels, num_panels, s, lds, nullptr);
    return;
  }
  // One request per `every` components of the micro-tiles: spread evenly over the call
  // (a burst of requests would fill the miss queues and stall the loads the FMAs need).
  const int64_t col_tiles = kPanel / (kScoreVecs * static_cast<int64_t>(hn::MaxLanes(DF())));
  const int64_t steps = num_panels * col_tiles * ((mq + kScoreRows - 1) / kScoreRows) * d;
  PrefetchPacer pacer;
  pacer.cursor = &cursor;
  pacer.every = pacer.left = std::max<int64_t>(1, steps / lines);
  ScoreTileAll<true>(q, ldq, mq, d, panels, num_panels, s, lds, &pacer);
  cursor.Rest();  // whatever the steps did not cover
}

// 2^t for finite |t| <= 64 (the softcap's tanh): no clamps, masks or NaN handling, which
// Exp2 needs for the softmax's scores.
HWY_INLINE VF Exp2Bounded(DF df, VF t) {
  const VF n = hn::Round(t);
  const VF p = Exp2Reduced(df, hn::Sub(t, n));
#if HWY_TARGET <= HWY_AVX3
  return VF{_mm512_scalef_ps(p.raw, n.raw)};
#else
  return TimesPow2(df, p, n);
#endif
}

// Gemma 2's softcap c tanh(x / c) (SoftcapTile; SoftmaxTile's fused cap), two ways:
//  - |x| <= c/3 (y = x / c within 1/3: every score of a model whose logits stay below a
//    third of its cap, the cap's purpose): tanh(y) = y (1 + z q(z)), z = y^2, q of degree
//    2 with the coefficients of least maximum relative error on z in [0, 1/9] (Remez
//    exchange: 2.8e-8 relative; at most 1.0 ulp in float with the roundings below), so
//    c tanh(y) = x + (x w) Q(w) with w = x^2 and Q's coefficients q_k / c^(2k+2) (folded
//    in once per call): 5 multiplications / FMAs, no exponential, no reciprocal. (Degree
//    3 on |y| <= 1/2, 0.92 ulp, took a sixth: BM_TileKernels on Zen 5, the pass of its
//    own 52.7 -> 48.8 ps per score, the softmax's fused cap 42 -> 36.) For caps outside
//    [2^-12, 2^12], where those coefficients would leave float's normal range,
//    z = (x / c)^2 and q itself (one multiplication more).
//  - elsewhere: with e = e^{2y} = 2^{2 x log2(e) / c}, tanh(y) = 1 - 2 r, r = 1 / (1 + e),
//    so c tanh(y) = c - 2c r: one Exp2Bounded (the exponent clamped to +-64: tanh is +-1
//    in float long before, and no NaN reaches the conversion) and a reciprocal refined by
//    one Newton step (no division). Absolute error of tanh about 2e-7.
// On a score, c times the error of tanh: the size of the product's own rounding. A
// vector whose lanes are all in the first range takes it alone (the second is skipped);
// each lane's value depends on its own score only. SoftmaxTile's fused cap and
// SoftcapTile give the same bits.
struct Softcapper {
  // q's coefficients, constant term first (z in [0, 1/9]).
  static constexpr double kQ[3] = {-3.3332828836633926e-01, 1.3305547194379727e-01,
                                   -4.957046881409209e-02};
  VF c, two_c, k, inv_c, bound, one, two, lo, hi, lowest;
  VF q0, q1, q2;  // Q's (scaled) or q's coefficients
  bool scaled;
  explicit Softcapper(DF df, float cap)
      : c(hn::Set(df, cap)),
        two_c(hn::Set(df, 2.0f * cap)),
        k(hn::Set(df, static_cast<float>(2.0 * 1.4426950408889634 / static_cast<double>(cap)))),
        inv_c(hn::Set(df, 1.0f / cap)),
        one(hn::Set(df, 1.0f)),
        two(hn::Set(df, 2.0f)),
        lo(hn::Set(df, -64.0f)),
        hi(hn::Set(df, 64.0f)),
        lowest(hn::Set(df, std::numeric_limits<float>::lowest())),
        scaled(cap >= 0x1p-12f && cap <= 0x1p12f) {
    const double c2 = static_cast<double>(cap) * static_cast<double>(cap);
    const double s = scaled ? 1.0 / c2 : 1.0;  // Q_k = q_k s^(k+1)
    q0 = hn::Set(df, static_cast<float>(kQ[0] * s));
    q1 = hn::Set(df, static_cast<float>(kQ[1] * s * s));
    q2 = hn::Set(df, static_cast<float>(kQ[2] * s * s * s));
    bound = hn::Set(df, static_cast<float>((scaled ? c2 : 1.0) / 9.0));
  }
  // r = 1 / (1 + e^{2x/c}); NaN lanes give a number (the callers restore them).
  HWY_INLINE VF HalfComplement(DF df, VF x) const {
    const VF den = hn::Add(Exp2Bounded(df, hn::Min(hn::Max(hn::Mul(x, k), lo), hi)), one);
    const VF r = hn::ApproximateReciprocal(den);
    return hn::Mul(r, hn::NegMulAdd(den, r, two));
  }
  // c tanh(x / c) of one vector. kKeepNegInf: -inf stays -inf (masked scores in the
  // softmax), else -c (SoftcapTile: +-inf become +-c); NaN stays NaN. deriv non-null:
  // 1 - tanh^2 there (NaN for NaN; 4 r (1 - r) in the second range).
  template <bool kKeepNegInf>
  HWY_INLINE VF Capped(DF df, VF x, VF* deriv) const {
    const VF w = scaled ? hn::Mul(x, x) : [&] {
      const VF y = hn::Mul(x, inv_c);
      return hn::Mul(y, y);
    }();
    const VF q = hn::MulAdd(hn::MulAdd(q2, w, q1), w, q0);
    const VF small = hn::MulAdd(hn::Mul(x, w), q, x);
    const auto in_small = hn::Le(w, bound);  // false for NaN and +-inf
    if (deriv != nullptr) {
      const VF t = hn::Mul(small, inv_c);
      *deriv = hn::NegMulAdd(t, t, one);
    }
    if (HWY_LIKELY(hn::AllTrue(df, in_small))) return small;
    const VF rc = HalfComplement(df, x);
    const auto keep = kKeepNegInf ? hn::Not(hn::Ge(x, lowest)) : hn::IsNaN(x);
    if (deriv != nullptr) {  // 1 - tanh^2 = 4 r (1 - r); exactly 0 at +-inf (r's exponent
                             // is clamped: 2^-62 there, which times an infinite k gave inf)
      const VF d = hn::IfThenZeroElse(
          hn::IsInf(x), hn::Mul(hn::Mul(hn::Set(df, 4.0f), rc), hn::Sub(one, rc)));
      *deriv = hn::IfThenElse(in_small, *deriv, hn::IfThenElse(hn::IsNaN(x), x, d));
    }
    return hn::IfThenElse(in_small, small, hn::IfThenElse(keep, x, hn::NegMulAdd(two_c, rc, c)));
  }
};

void SoftmaxTileImpl(float* s, int64_t lds, int64_t mq, int64_t n, float* m, float* l,
                     float* alpha, float cap) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const float kNegInf = -std::numeric_limits<float>::infinity();
  const Softcapper sc(df, cap > 0.0f ? cap : 1.0f);
  if (cap > 0.0f) {
    // The cap on the whole tile first, in a pass of its own: every vector independent of
    // the others, so the reorder window overlaps many of them. (Fused into the rows'
    // maxima passes, each row's chain -- cap, maximum, reference, exponentials -- was
    // twice as long and the window held too few rows to hide it: +13% on a causal
    // kernel at d = 128 on a CPU with full-width AVX-512 FMAs, against +7% this way.)
    for (int64_t r = 0; r < mq; ++r) {
      float* row = s + r * lds;
      for (int64_t j = 0; j < n; j += N) {
        hn::StoreU(sc.Capped<true>(df, hn::LoadU(df, row + j), nullptr), df, row + j);
      }
    }
  }
  for (int64_t r = 0; r < mq; ++r) {
    float* row = s + r * lds;
    float* lr = l + r * kSumLanes;
    VF vmax0 = hn::Set(df, kNegInf), vmax1 = vmax0;
    int64_t j = 0;
    for (; j + 2 * N <= n; j += 2 * N) {
      vmax0 = hn::Max(vmax0, hn::LoadU(df, row + j));
      vmax1 = hn::Max(vmax1, hn::LoadU(df, row + j + N));
    }
    for (; j < n; j += N) vmax0 = hn::Max(vmax0, hn::LoadU(df, row + j));
    vmax0 = hn::Max(vmax0, vmax1);
    alpha[r] = 1.0f;
    // Lazy rescaling: the reference m moves only when a score exceeds it by more than
    // kRescaleSlack, so probabilities stay <= 2^kRescaleSlack and most tiles need no
    // horizontal maximum and no rescaling of l and o (alpha = 1).
    if (!hn::AllFalse(df, hn::Gt(vmax0, hn::Set(df, m[r] + kRescaleSlack)))) {
      MoveRowReference(hn::GetLane(hn::MaxOfLanes(df, vmax0)), &m[r], lr, &alpha[r]);
    }
    if (m[r] == kNegInf && AnyNaN(row, n)) {
      m[r] = std::numeric_limits<float>::quiet_NaN();  // a NaN score: the row is NaN
    } else if (m[r] == kNegInf) {  // nothing allowed yet in this row
      std::memset(row, 0, static_cast<size_t>(n) * sizeof(float));
      continue;
    }
    const VF vm = hn::Set(df, m[r]);
    VF vsum = hn::Zero(df);
    for (j = 0; j < n; j += N) {
      const VF p = Exp2(df, hn::Sub(hn::LoadU(df, row + j), vm));
      hn::StoreU(p, df, row + j);
      vsum = hn::Add(vsum, p);
    }
    hn::StoreU(hn::Add(vsum, hn::LoadU(df, lr)), df, lr);
  }
}

void SoftcapTileImpl(float* s, int64_t lds, int64_t mq, int64_t n, float cap, float* deriv,
                     int64_t ldd) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const Softcapper sc(df, cap);
  for (int64_t r = 0; r < mq; ++r) {
    float* row = s + r * lds;
    float* drow = deriv == nullptr ? nullptr : deriv + r * ldd;
    int64_t j = 0;
    for (; j + N <= n; j += N) {
      VF d;
      hn::StoreU(sc.Capped<false>(df, hn::LoadU(df, row + j), drow != nullptr ? &d : nullptr),
                 df, row + j);
      if (drow != nullptr) hn::StoreU(d, df, drow + j);
    }
    for (; j < n; ++j) {
      const float t = std::tanh(row[j] / cap);
      row[j] = cap * t;
      if (drow != nullptr) drow[j] = 1.0f - t * t;
    }
  }
}

void ExpTileImpl(float* s, int64_t lds, int64_t mq, int64_t n, const float* shift) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t r = 0; r < mq; ++r) {
    float* row = s + r * lds;
    if (shift[r] == -std::numeric_limits<float>::infinity()) {
      std::memset(row, 0, static_cast<size_t>(n) * sizeof(float));
      continue;
    }
    if (std::isnan(shift[r])) {  // a NaN row: NaN where allowed, masked scores (-inf) 0
      for (int64_t j = 0; j < n; ++j) {
        row[j] = row[j] == -std::numeric_limits<float>::infinity() ? 0.0f : shift[r];
      }
      continue;
    }
    const VF vm = hn::Set(df, shift[r]);
    for (int64_t j = 0; j < n; j += N) {
      hn::StoreU(Exp2(df, hn::Sub(hn::LoadU(df, row + j), vm)), df, row + j);
    }
  }
}

void SoftmaxGradTileImpl(const float* p, int64_t ldp, float* dp, int64_t ldd, int64_t mq,
                         int64_t n, const float* dsum) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t r = 0; r < mq; ++r) {
    const float* pr = p + r * ldp;
    float* dr = dp + r * ldd;
    const VF vd = hn::Set(df, dsum[r]);
    for (int64_t j = 0; j < n; j += N) {
      hn::StoreU(hn::Mul(hn::LoadU(df, pr + j), hn::Sub(hn::LoadU(df, dr + j), vd)), df, dr + j);
    }
  }
}

// kTrans: the probabilities are read transposed, p[j * ldp + r] (o = P^T V).
// prefetch: request value rows kPrefetchRows ahead (rows far apart and not yet cached).
// kScale false: alpha is not read (null) and o is accumulated as it is (o += P V).
template <int MR, int NV, bool kTrans, bool kScale = true>
HWY_INLINE void AccMicro(const float* HWY_RESTRICT p, int64_t ldp, int64_t nk,
                         const float* HWY_RESTRICT v, int64_t ldv,
                         const float* HWY_RESTRICT alpha, float* HWY_RESTRICT o, int64_t ldo,
                         bool prefetch) {
  const DF df;
  constexpr size_t N = hn::MaxLanes(DF());
  VF acc[MR][NV];
  HWY_UNROLL(32)
  for (int r = 0; r < MR; ++r) {
    if constexpr (kScale) {
      const VF a = hn::Set(df, alpha[r]);
      HWY_UNROLL(32)
      for (int c = 0; c < NV; ++c) acc[r][c] = hn::Mul(a, hn::LoadU(df, o + r * ldo + c * N));
    } else {
      HWY_UNROLL(32)
      for (int c = 0; c < NV; ++c) acc[r][c] = hn::LoadU(df, o + r * ldo + c * N);
    }
  }
  for (int64_t j = 0; j < nk; ++j) {
    if (prefetch && j + kPrefetchRows < nk) {  // rows may be a page apart (a KV cache in place)
      const float* ahead = v + (j + kPrefetchRows) * ldv;
      HWY_UNROLL(4)
      for (int c = 0; c < NV; ++c) hwy::Prefetch(ahead + c * N);
    }
    VF vv[NV];
    HWY_UNROLL(32)
    for (int c = 0; c < NV; ++c) vv[c] = hn::LoadU(df, v + j * ldv + c * N);
    HWY_UNROLL(32)
    for (int r = 0; r < MR; ++r) {
      const VF pb = hn::Set(df, kTrans ? p[j * ldp + r] : p[r * ldp + j]);
      HWY_UNROLL(32)
      for (int c = 0; c < NV; ++c) acc[r][c] = hn::MulAdd(pb, vv[c], acc[r][c]);
    }
  }
  HWY_UNROLL(32)
  for (int r = 0; r < MR; ++r) {
    HWY_UNROLL(32)
    for (int c = 0; c < NV; ++c) hn::StoreU(acc[r][c], df, o + r * ldo + c * N);
  }
}

template <int NV, bool kTrans, bool kScale = true>
HWY_INLINE void AccColumns(const float* p, int64_t ldp, int64_t mq, int64_t nk, const float* v,
                           int64_t ldv, const float* alpha, float* o, int64_t ldo,
                           bool prefetch) {
  // Row r of the output starts its probabilities at p + r * ldp (or p + r transposed).
  const int64_t row_step = kTrans ? 1 : ldp;
  // Row r's factor (alpha is null without kScale: no offset applied to it).
  auto alpha_at = [alpha](int64_t r) { return kScale ? alpha + r : nullptr; };
  int64_t r = 0;
  for (; r + kAccRows <= mq; r += kAccRows) {
    AccMicro<kAccRows, NV, kTrans, kScale>(p + r * row_step, ldp, nk, v, ldv, alpha_at(r),
                                           o + r * ldo, ldo, prefetch);
  }
  const float* pr = p + r * row_step;
  float* orow = o + r * ldo;
  switch (mq - r) {
#define GPE_ACC_CASE(k)                                                                      \
  case k:                                                                                    \
    if constexpr (k < kAccRows)                                                              \
      AccMicro<k, NV, kTrans, kScale>(pr, ldp, nk, v, ldv, alpha_at(r), orow, ldo, prefetch); \
    break;
    GPE_ACC_CASE(1)
    GPE_ACC_CASE(2)
    GPE_ACC_CASE(3)
    GPE_ACC_CASE(4)
    GPE_ACC_CASE(5)
#undef GPE_ACC_CASE
    default:
      break;
  }
}

template <bool kTrans, bool kScale = true>
void AccumulateAll(const float* p, int64_t ldp, int64_t mq, int64_t nk, const float* v,
                   int64_t ldv, int64_t dp, const float* alpha, float* o, int64_t ldo) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
  // Rows within two rows' length of each other stream through the hardware prefetchers.
  const bool prefetch = ldv > 2 * dp;
  const int64_t vecs = dp / N;
  int64_t c = 0;
  for (; c + kAccVecs <= vecs; c += kAccVecs) {
    AccColumns<kAccVecs, kTrans, kScale>(p, ldp, mq, nk, v + c * N, ldv, alpha, o + c * N, ldo,
                                  prefetch);
  }
  switch (vecs - c) {
    case 1:
      AccColumns<1, kTrans, kScale>(p, ldp, mq, nk, v + c * N, ldv, alpha, o + c * N, ldo,
                                  prefetch);
      break;
    case 2:
      AccColumns<2, kTrans, kScale>(p, ldp, mq, nk, v + c * N, ldv, alpha, o + c * N, ldo,
                                  prefetch);
      break;
    case 3:
      AccColumns<3, kTrans, kScale>(p, ldp, mq, nk, v + c * N, ldv, alpha, o + c * N, ldo,
                                  prefetch);
      break;
    default:
      break;
  }
}

void AccumulateTileImpl(const float* p, int64_t ldp, int64_t mq, int64_t nk, const float* v,
                        int64_t ldv, int64_t dp, const float* alpha, float* o, int64_t ldo) {
  AccumulateAll<false>(p, ldp, mq, nk, v, ldv, dp, alpha, o, ldo);
}

void AccumulateTileTImpl(const float* p, int64_t ldp, int64_t mq, int64_t nk, const float* v,
                         int64_t ldv, int64_t dp, const float* alpha, float* o, int64_t ldo) {
  AccumulateAll<true>(p, ldp, mq, nk, v, ldv, dp, alpha, o, ldo);
}

void AccumulateTileAddImpl(const float* p, int64_t ldp, int64_t mq, int64_t nk, const float* v,
                           int64_t ldv, int64_t dp, float* o, int64_t ldo) {
  AccumulateAll<false, false>(p, ldp, mq, nk, v, ldv, dp, nullptr, o, ldo);
}

void AccumulateTileTAddImpl(const float* p, int64_t ldp, int64_t mq, int64_t nk, const float* v,
                            int64_t ldv, int64_t dp, float* o, int64_t ldo) {
  AccumulateAll<true, false>(p, ldp, mq, nk, v, ldv, dp, nullptr, o, ldo);
}

// dst[j] += c * (a + b[j]) for j < n (kSum false: dst[j] += c * b[j]); the tail past the
// last whole vector through one padded vector, so every entry takes the same operations
// (and the same FMA contraction by the compiler) whatever its column.
template <bool kSum>
HWY_INLINE void AddScaledRowTo(DF df, float* dst, float a, const float* b, int64_t n, VF vc) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const VF va = hn::Set(df, a);
  auto step = [&](VF d, VF x) HWY_ATTR {
    return hn::Add(d, hn::Mul(vc, kSum ? hn::Add(va, x) : x));
  };
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(step(hn::LoadU(df, dst + i), hn::LoadU(df, b + i)), df, dst + i);
  if (i < n) {
    HWY_ALIGN float bd[hn::MaxLanes(DF())] = {}, bb[hn::MaxLanes(DF())] = {};
    const size_t bytes = static_cast<size_t>(n - i) * sizeof(float);
    std::memcpy(bd, dst + i, bytes);
    std::memcpy(bb, b + i, bytes);
    hn::Store(step(hn::Load(df, bd), hn::Load(df, bb)), df, bd);
    std::memcpy(dst + i, bd, bytes);
  }
}

void AddScaledTileImpl(float* s, int64_t lds, const float* t, int64_t ldt, int64_t nr,
                       int64_t n, float c) {
  const DF df;
  const VF vc = hn::Set(df, c);
  for (int64_t r = 0; r < nr; ++r) AddScaledRowTo<false>(df, s + r * lds, 0.0f, t + r * ldt, n, vc);
}

void AddSeparableTileImpl(float* s, int64_t lds, const float* u, const float* w, int64_t nr,
                          int64_t n, float c) {
  const DF df;
  const VF vc = hn::Set(df, c);
  for (int64_t r = 0; r < nr; ++r) AddScaledRowTo<true>(df, s + r * lds, u[r], w, n, vc);
}

// Rows finite: x * 0 is 0 for finite x and NaN for +-inf and NaN, summed per lane.
bool RowsAllFiniteImpl(const float* x, int64_t rows, int64_t ld, int64_t d) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const VF zero = hn::Zero(df);
  VF acc = zero;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ld;
    int64_t c = 0;
    for (; c + N <= d; c += N) acc = hn::MulAdd(hn::LoadU(df, xr + c), zero, acc);
    for (; c < d; ++c) {
      if (!std::isfinite(xr[c])) return false;
    }
  }
  return hn::AllFalse(df, hn::IsNaN(acc));
}

// 16-bit float rows finite (bfloat16 or IEEE half bit patterns): the largest magnitude
// bit pattern (sign cleared) at most max_finite (0x7f7f bf16, 0x7bff half), below the
// patterns of infinity and NaN.
bool RowsAllFinite16Impl(const uint16_t* x, int64_t rows, int64_t ld, int64_t d,
                         int16_t max_finite) {
  // As int16: the magnitudes (sign cleared) are 0 .. 0x7fff, non-negative.
  const hn::ScalableTag<int16_t> di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(di));
  const auto magnitude = hn::Set(di, int16_t{0x7fff});
  auto acc = hn::Zero(di);
  for (int64_t r = 0; r < rows; ++r) {
    const int16_t* xr = reinterpret_cast<const int16_t*>(x + r * ld);
    int64_t c = 0;
    for (; c + N <= d; c += N) acc = hn::Max(acc, hn::And(hn::LoadU(di, xr + c), magnitude));
    for (; c < d; ++c) {
      if (static_cast<int16_t>(x[r * ld + c] & 0x7fffu) > max_finite) return false;
    }
  }
  return hn::AllFalse(di, hn::Gt(acc, hn::Set(di, max_finite)));
}

// IEEE half to float, exact (F16C's vcvtph2ps on AVX2 and AVX-512). The portable
// baseline uses rope.h's ToFloat: Highway's scalar PromoteTo reads the infinity and NaN
// patterns (exponent 31) as numbers (kernels_test: 0x7c00 gave 65536).
void WidenF16RowImpl(const uint16_t* src, float* dst, int64_t n) {
#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
  for (int64_t i = 0; i < n; ++i) dst[i] = encodings::sequence::ToFloat(encodings::sequence::Float16{src[i]});
#else
  const DF df;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const hwy::float16_t* h = reinterpret_cast<const hwy::float16_t*>(src);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, h + i)), df, dst + i);
  if (i < n) {
    HWY_ALIGN hwy::float16_t buf[hn::MaxLanes(DF())] = {};
    HWY_ALIGN float out[hn::MaxLanes(DF())];
    std::memcpy(buf, h + i, static_cast<size_t>(n - i) * sizeof(uint16_t));
    hn::Store(hn::PromoteTo(df, hn::Load(dh, buf)), df, out);
    std::memcpy(dst + i, out, static_cast<size_t>(n - i) * sizeof(float));
  }
#endif
}

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace attention
}  // namespace gpe
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace gpe {
namespace attention {
namespace cpu {

HWY_EXPORT(PackKeyPanelsImpl);
HWY_EXPORT(ScoreTileImpl);
HWY_EXPORT(ScoreTileAheadImpl);
HWY_EXPORT(SoftmaxTileImpl);
HWY_EXPORT(ExpTileImpl);
HWY_EXPORT(SoftcapTileImpl);
HWY_EXPORT(SoftmaxGradTileImpl);
HWY_EXPORT(AccumulateTileImpl);
HWY_EXPORT(AccumulateTileTImpl);
HWY_EXPORT(AccumulateTileAddImpl);
HWY_EXPORT(AccumulateTileTAddImpl);
HWY_EXPORT(Exp2InPlaceImpl);
HWY_EXPORT(TargetNameImpl);
HWY_EXPORT(RowsAllFiniteImpl);
HWY_EXPORT(AddScaledTileImpl);
HWY_EXPORT(AddSeparableTileImpl);
HWY_EXPORT(RowsAllFinite16Impl);
HWY_EXPORT(WidenF16RowImpl);

void AddScaledTile(float* s, int64_t lds, const float* t, int64_t ldt, int64_t nr, int64_t n,
                   float c) {
  HWY_DYNAMIC_DISPATCH(AddScaledTileImpl)(s, lds, t, ldt, nr, n, c);
}

void AddSeparableTile(float* s, int64_t lds, const float* u, const float* w, int64_t nr,
                      int64_t n, float c) {
  HWY_DYNAMIC_DISPATCH(AddSeparableTileImpl)(s, lds, u, w, nr, n, c);
}

bool RowsAllFinite(const float* x, int64_t rows, int64_t ld, int64_t d) {
  return HWY_DYNAMIC_DISPATCH(RowsAllFiniteImpl)(x, rows, ld, d);
}
bool RowsAllFiniteBf16(const uint16_t* x, int64_t rows, int64_t ld, int64_t d) {
  return HWY_DYNAMIC_DISPATCH(RowsAllFinite16Impl)(x, rows, ld, d, int16_t{0x7f7f});
}
bool RowsAllFiniteF16(const uint16_t* x, int64_t rows, int64_t ld, int64_t d) {
  return HWY_DYNAMIC_DISPATCH(RowsAllFinite16Impl)(x, rows, ld, d, int16_t{0x7bff});
}
void WidenF16Row(const uint16_t* src, float* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(WidenF16RowImpl)(src, dst, n);
}

void PackKeyPanels(const float* keys, int64_t nk, int64_t ld, int64_t d, float* panels) {
  HWY_DYNAMIC_DISPATCH(PackKeyPanelsImpl)(keys, nk, ld, d, panels);
}
void ScoreTile(const float* q, int64_t ldq, int64_t mq, int64_t d, const float* panels,
               int64_t num_panels, float* s, int64_t lds) {
  HWY_DYNAMIC_DISPATCH(ScoreTileImpl)(q, ldq, mq, d, panels, num_panels, s, lds);
}
void ScoreTileAhead(const float* q, int64_t ldq, int64_t mq, int64_t d, const float* panels,
                    int64_t num_panels, float* s, int64_t lds, const PrefetchRows& ahead) {
  HWY_DYNAMIC_DISPATCH(ScoreTileAheadImpl)(q, ldq, mq, d, panels, num_panels, s, lds, ahead);
}
void SoftmaxTile(float* s, int64_t lds, int64_t mq, int64_t n, float* m, float* l,
                 float* alpha, float cap) {
  HWY_DYNAMIC_DISPATCH(SoftmaxTileImpl)(s, lds, mq, n, m, l, alpha, cap);
}
void SoftcapTile(float* s, int64_t lds, int64_t mq, int64_t n, float cap, float* deriv,
                 int64_t ldd) {
  HWY_DYNAMIC_DISPATCH(SoftcapTileImpl)(s, lds, mq, n, cap, deriv, ldd);
}
void ExpTile(float* s, int64_t lds, int64_t mq, int64_t n, const float* shift) {
  HWY_DYNAMIC_DISPATCH(ExpTileImpl)(s, lds, mq, n, shift);
}
void SoftmaxGradTile(const float* p, int64_t ldp, float* dp, int64_t ldd, int64_t mq, int64_t n,
                     const float* dsum) {
  HWY_DYNAMIC_DISPATCH(SoftmaxGradTileImpl)(p, ldp, dp, ldd, mq, n, dsum);
}
void AccumulateTile(const float* p, int64_t ldp, int64_t mq, int64_t nk, const float* v,
                    int64_t ldv, int64_t dp, const float* alpha, float* o, int64_t ldo) {
  HWY_DYNAMIC_DISPATCH(AccumulateTileImpl)(p, ldp, mq, nk, v, ldv, dp, alpha, o, ldo);
}
void AccumulateTileT(const float* p, int64_t ldp, int64_t mq, int64_t nk, const float* v,
                     int64_t ldv, int64_t dp, const float* alpha, float* o, int64_t ldo) {
  HWY_DYNAMIC_DISPATCH(AccumulateTileTImpl)(p, ldp, mq, nk, v, ldv, dp, alpha, o, ldo);
}
void AccumulateTileAdd(const float* p, int64_t ldp, int64_t mq, int64_t nk, const float* v,
                       int64_t ldv, int64_t dp, float* o, int64_t ldo) {
  HWY_DYNAMIC_DISPATCH(AccumulateTileAddImpl)(p, ldp, mq, nk, v, ldv, dp, o, ldo);
}
void AccumulateTileTAdd(const float* p, int64_t ldp, int64_t mq, int64_t nk, const float* v,
                        int64_t ldv, int64_t dp, float* o, int64_t ldo) {
  HWY_DYNAMIC_DISPATCH(AccumulateTileTAddImpl)(p, ldp, mq, nk, v, ldv, dp, o, ldo);
}
void Exp2InPlace(float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(Exp2InPlaceImpl)(x, n); }
const char* KernelTargetName() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }
std::vector<int64_t> CompiledTargets() { return hwy::SupportedAndGeneratedTargets(); }

}  // namespace cpu
}  // namespace attention
}  // namespace gpe
#endif  // HWY_ONCE
