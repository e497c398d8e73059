// Highway per-target implementations of kernels_bf16.h, dispatched as kernels.cc's:
// foreach_target.h re-includes this file once per instruction set (HWY_TARGET set), and
// HWY_EXPORT / HWY_DYNAMIC_DISPATCH call the best compiled one the CPU runs.
//
// The AVX3 target's code is AVX-512 intrinsics: Highway 1.0.3 has no op for vdpbf16ps or
// vcvtneps2bf16 (its bf16 DemoteTo truncates; ReorderWidenMulAccumulate widens and makes
// two FMAs into two sums, another rounding) and no target that implies AVX512_BF16
// (AVX3_ZEN4 and AVX3_SPR come in later releases). So the dot-product functions carry the AVX3 target's
// flags plus avx512bf16 (GPE_BF16_TARGET) and run only where HasBf16DotProductImpl, the
// one CPUID check left, says so (each kernel checks on entry and otherwise aborts); the
// packs and conversions need AVX512BW only, which the AVX3 target itself guarantees.
// Every other target runs the element loops and has no dot products.
//
// Register tiles as kernels.cc's float ones (6 rows x 4 vectors, 24 accumulators), each
// vdpbf16ps doing 32 multiply-adds (16 lanes x a pair) where vfmadd231ps does 16.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "attention/cpu/kernels_bf16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// Per target, before HWY_BEFORE_NAMESPACE (it opens the namespaces itself).
#include "attention/cpu/decode_shared-inl.h"

#if HWY_ARCH_X86
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attention/cpu/kernels.h"
#include "attention/cpu/kernels_bf16.h"
#include "encodings/sequence/rope.h"

HWY_BEFORE_NAMESPACE();
namespace gpe {
namespace attention {
namespace cpu {
namespace HWY_NAMESPACE {
// Internal linkage, as for code outside HWY_NAMESPACE: HWY_EXPORT below takes the
// addresses; the helpers inline as the compiler sees fit.
namespace {

// A dot-product kernel called where HasBf16DotProduct() is false stops here with a
// message (instead of an illegal instruction).
#define GPE_NO_BF16_DOT(name) \
  HWY_ABORT("%s needs AVX512_BF16: call it only where HasBf16DotProduct()", name)

#if HWY_TARGET <= HWY_AVX3

// GCC 12's unmasked AVX-512 intrinsics (shuffles, shifts, widening, max, roundscale)
// start from a deliberately undefined register (_mm512_undefined_epi32), which
// -Wmaybe-uninitialized reports once inlined here; the value is never read.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// This target's instruction sets plus AVX512_BF16 (a superset of the target's, so its
// inline helpers still inline).
#define GPE_BF16_TARGET __attribute__((target(HWY_TARGET_STR ",avx512bf16")))

// AVX3 guarantees AVX512F/VL/DQ/BW and the OS's saving of their registers; the bf16 dot
// product is the one feature beyond it (Zen 4, Cooper Lake, Sapphire Rapids and later).
bool HasBf16DotProductImpl() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") != 0;
  }();
  return has;
}

constexpr int kRows = 6;

inline int32_t Pair(const uint16_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

template <int MR>
GPE_BF16_TARGET void ScoreMicro(const uint16_t* q, int64_t ldq, int64_t pairs,
                                const uint16_t* panel, float* s, int64_t lds,
                                const float* init, int64_t ldi, float init_scale) {
  __m512 acc[MR][4];
  if (init != nullptr) {  // the fused bias: its rounded products, the sums' start
    const __m512 c = _mm512_set1_ps(init_scale);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_mul_ps(c, _mm512_loadu_ps(init + r * ldi + 16 * v));
    }
  } else {
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_setzero_ps();
    }
  }
  for (int64_t c2 = 0; c2 < pairs; ++c2) {
    const uint16_t* kp = panel + c2 * 2 * kPanel;
    __m512bh k[4];
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) k[v] = (__m512bh)_mm512_loadu_si512(kp + 32 * v);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512bh qb = (__m512bh)_mm512_set1_epi32(Pair(q + r * ldq + 2 * c2));
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], qb, k[v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) _mm512_storeu_ps(s + r * lds + 16 * v, acc[r][v]);
  }
}

template <int MR, int NV>
GPE_BF16_TARGET void AccMicro(const uint16_t* p, int64_t ldp, int64_t pairs,
                              const uint16_t* vp, int64_t dp, const float* alpha, float* o,
                              int64_t ldo, const float* next_o) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    const __m512 a = _mm512_set1_ps(alpha[r]);
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) acc[r][c] = _mm512_mul_ps(a, _mm512_loadu_ps(o + r * ldo + 16 * c));
  }
  for (int64_t j2 = 0; j2 < pairs; ++j2) {
    // The next tile's o rows (an L2 round trip each: a query tile's o outgrows L1),
    // one cache line per iteration.
    if (j2 < MR * NV) {
      _mm_prefetch(reinterpret_cast<const char*>(next_o + (j2 / NV) * ldo + 16 * (j2 % NV)),
                   _MM_HINT_T0);
    }
    const uint16_t* row = vp + j2 * 2 * dp;
    __m512bh vv[NV];
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) vv[c] = (__m512bh)_mm512_loadu_si512(row + 32 * c);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512bh pb = (__m512bh)_mm512_set1_epi32(Pair(p + r * ldp + 2 * j2));
#pragma GCC unroll 4
      for (int c = 0; c < NV; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], pb, vv[c]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) _mm512_storeu_ps(o + r * ldo + 16 * c, acc[r][c]);
  }
}

template <int NV>
GPE_BF16_TARGET void AccColumns(const uint16_t* p, int64_t ldp, int64_t mq, int64_t pairs,
                                const uint16_t* vp, int64_t dp, const float* alpha, float* o,
                                int64_t ldo) {
  int64_t r = 0;
  for (; r + kRows <= mq; r += kRows) {
    // Prefetch target: the next row group's o (the last group's: its own, already cached).
    const int64_t next = r + 2 * kRows <= mq ? r + kRows : r;
    AccMicro<kRows, NV>(p + r * ldp, ldp, pairs, vp, dp, alpha + r, o + r * ldo, ldo,
                        o + next * ldo);
  }
  const uint16_t* pr = p + r * ldp;
  float* orow = o + r * ldo;
  switch (mq - r) {
    case 1: AccMicro<1, NV>(pr, ldp, pairs, vp, dp, alpha + r, orow, ldo, orow); break;
    case 2: AccMicro<2, NV>(pr, ldp, pairs, vp, dp, alpha + r, orow, ldo, orow); break;
    case 3: AccMicro<3, NV>(pr, ldp, pairs, vp, dp, alpha + r, orow, ldo, orow); break;
    case 4: AccMicro<4, NV>(pr, ldp, pairs, vp, dp, alpha + r, orow, ldo, orow); break;
    case 5: AccMicro<5, NV>(pr, ldp, pairs, vp, dp, alpha + r, orow, ldo, orow); break;
    default: break;
  }
}

GPE_BF16_TARGET void ScoreTileImpl(const uint16_t* q, int64_t ldq, int64_t mq, int64_t d,
                                   const uint16_t* panels, int64_t num_panels, float* s,
                                   int64_t lds, const float* init, int64_t ldi,
                                   float init_scale) {
  if (HWY_UNLIKELY(!HasBf16DotProductImpl())) GPE_NO_BF16_DOT("ScoreTileBf16");
  const int64_t pairs = (d + 1) / 2;
  for (int64_t pnl = 0; pnl < num_panels; ++pnl) {
    const uint16_t* panel = panels + pnl * pairs * 2 * kPanel;
    float* sp = s + pnl * kPanel;
    const float* ip = init == nullptr ? nullptr : init + pnl * kPanel;
    // Rows r.. of the init tile (null without one).
    auto init_at = [&](int64_t r) { return ip == nullptr ? nullptr : ip + r * ldi; };
    int64_t r = 0;
    for (; r + kRows <= mq; r += kRows) {
      ScoreMicro<kRows>(q + r * ldq, ldq, pairs, panel, sp + r * lds, lds, init_at(r), ldi,
                        init_scale);
    }
    const uint16_t* qr = q + r * ldq;
    float* sr = sp + r * lds;
    const float* ir = init_at(r);
    switch (mq - r) {
      case 1: ScoreMicro<1>(qr, ldq, pairs, panel, sr, lds, ir, ldi, init_scale); break;
      case 2: ScoreMicro<2>(qr, ldq, pairs, panel, sr, lds, ir, ldi, init_scale); break;
      case 3: ScoreMicro<3>(qr, ldq, pairs, panel, sr, lds, ir, ldi, init_scale); break;
      case 4: ScoreMicro<4>(qr, ldq, pairs, panel, sr, lds, ir, ldi, init_scale); break;
      case 5: ScoreMicro<5>(qr, ldq, pairs, panel, sr, lds, ir, ldi, init_scale); break;
      default: break;
    }
  }
}

GPE_BF16_TARGET void RoundRowsImpl(const float* p, int64_t ldp, int64_t mq, int64_t n,
                                   uint16_t* out, int64_t ldo) {
  if (HWY_UNLIKELY(!HasBf16DotProductImpl())) GPE_NO_BF16_DOT("RoundRowsBf16");
  for (int64_t r = 0; r < mq; ++r) {
    for (int64_t j = 0; j < n; j += 16) {
      const __m256bh b = _mm512_cvtneps_pbh(_mm512_loadu_ps(p + r * ldp + j));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + r * ldo + j), (__m256i)b);
    }
  }
}

// kernels.cc's Exp2 on AVX-512, operation for operation (the same rounding, polynomial
// and vscalefps), so the fused softmax below gives the float path's probabilities bit for
// bit: 2^x = 2^n p(f), n = round(x), f = x - n in [-1/2, 1/2], p kExp2Poly (kernels.h,
// degree 6, by Estrin's scheme as Exp2Reduced); exactly 0 below -126 (masked scores, -inf, included),
// NaN for NaN.
GPE_BF16_TARGET inline __m512 Exp2(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-126.0f);
  const __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ);  // NaN kept
  x = _mm512_max_ps(lo, x);  // the second operand when either is NaN: NaN stays
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  const __m512 f2 = _mm512_mul_ps(f, f);
  const __m512 p01 = _mm512_fmadd_ps(_mm512_set1_ps(kExp2Poly[5]), f, _mm512_set1_ps(kExp2Poly[6]));
  const __m512 p23 = _mm512_fmadd_ps(_mm512_set1_ps(kExp2Poly[3]), f, _mm512_set1_ps(kExp2Poly[4]));
  const __m512 p45 = _mm512_fmadd_ps(_mm512_set1_ps(kExp2Poly[1]), f, _mm512_set1_ps(kExp2Poly[2]));
  const __m512 f4 = _mm512_mul_ps(f2, f2);
  const __m512 p456 = _mm512_fmadd_ps(_mm512_set1_ps(kExp2Poly[0]), f2, p45);
  const __m512 p = _mm512_fmadd_ps(p456, f4, _mm512_fmadd_ps(p23, f2, p01));
  return _mm512_maskz_scalef_ps(keep, p, n);
}

// kernels.h's SoftmaxTile, the online softmax of flash attention (Dao et al. 2022, Alg. 1)
// with lazy rescaling (same steps, same order of operations), with the probabilities
// rounded to bf16 as they are made (RoundRowsBf16's vcvtneps2bf16): one pass over the
// tile instead of two; the float probabilities are stored back only when keep_float.
GPE_BF16_TARGET void SoftmaxRoundImpl(float* s, int64_t lds, int64_t mq, int64_t n, float* m,
                                      float* l, float* alpha, uint16_t* p16, int64_t ldp,
                                      bool keep_float) {
  if (HWY_UNLIKELY(!HasBf16DotProductImpl())) GPE_NO_BF16_DOT("SoftmaxRoundTileBf16");
  const float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < mq; ++r) {
    float* row = s + r * lds;
    uint16_t* out = p16 + r * ldp;
    float* lr = l + r * kSumLanes;
    __m512 vmax0 = _mm512_set1_ps(kNegInf), vmax1 = vmax0;
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
      vmax0 = _mm512_max_ps(vmax0, _mm512_loadu_ps(row + j));
      vmax1 = _mm512_max_ps(vmax1, _mm512_loadu_ps(row + j + 16));
    }
    for (; j < n; j += 16) vmax0 = _mm512_max_ps(vmax0, _mm512_loadu_ps(row + j));
    vmax0 = _mm512_max_ps(vmax0, vmax1);
    alpha[r] = 1.0f;
    // Lazy rescaling, as SoftmaxTile (kernels.h: kRescaleSlack).
    if (_mm512_cmp_ps_mask(vmax0, _mm512_set1_ps(m[r] + kRescaleSlack), _CMP_GT_OQ) != 0) {
      MoveRowReference(_mm512_reduce_max_ps(vmax0), &m[r], lr, &alpha[r]);
    }
    if (m[r] == kNegInf && AnyNaN(row, n)) {
      m[r] = std::numeric_limits<float>::quiet_NaN();  // a NaN score: the row is NaN
    } else if (m[r] == kNegInf) {  // nothing allowed yet in this row
      std::memset(out, 0, static_cast<size_t>(n) * sizeof(uint16_t));
      if (keep_float) std::memset(row, 0, static_cast<size_t>(n) * sizeof(float));
      continue;
    }
    const __m512 vm = _mm512_set1_ps(m[r]);
    __m512 vsum = _mm512_setzero_ps();
    for (j = 0; j < n; j += 16) {
      const __m512 p = Exp2(_mm512_sub_ps(_mm512_loadu_ps(row + j), vm));
      if (keep_float) _mm512_storeu_ps(row + j, p);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), (__m256i)_mm512_cvtneps_pbh(p));
      vsum = _mm512_add_ps(vsum, p);
    }
    _mm512_storeu_ps(lr, _mm512_add_ps(vsum, _mm512_loadu_ps(lr)));
  }
}

// vpermt2w indices interleaving two rows a, b of 32 bf16 into pairs (a_c, b_c): columns
// 0-15 (kPairLo) and 16-31 (kPairHi). The value-pair pack and the decode P V use them.
alignas(64) constexpr uint16_t kPairLo[32] = {
    0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
    8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
alignas(64) constexpr uint16_t kPairHi[32] = {
    16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
    24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};

// The decode kernels' walk over a block: steps of four tokens (the last nt <= 4) for
// each kv head, heads outermost where each head's rows are contiguous (head-major
// caches, ldh > ld), else tokens outermost, the cache read in the order it lies
// (kernels_decode.h); one prefetch step per call of fn(g, j, nt).
template <class Fn>
HWY_INLINE void ForEachDecodeStep(int64_t heads, int64_t nk, int64_t ld, int64_t ldh,
                                  PrefetchAhead ahead, Fn fn) {
  const int64_t steps = (nk + 3) / 4;
  PrefetchCursor pf(ahead, steps * heads);
  const bool head_major = ldh > ld;
  const int64_t outer = head_major ? heads : steps, inner = head_major ? steps : heads;
  for (int64_t a = 0; a < outer; ++a) {
    for (int64_t b = 0; b < inner; ++b) {
      const int64_t g = head_major ? a : b, j = 4 * (head_major ? b : a);
      pf.Step();
      fn(g, j, nk - j < 4 ? nk - j : 4);
    }
  }
}

// The first n of 32 16-bit lanes (n clamped to [0, 32]).
inline __mmask32 FirstLanes16(int64_t n) {
  if (n <= 0) return 0;
  return n >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((uint32_t{1} << n) - 1u);
}
// The first n of 16 32-bit lanes (n clamped to [0, 16]).
inline __mmask16 FirstLanes32(int64_t n) {
  if (n <= 0) return 0;
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
}

// Decoding on the dot products (kernels_bf16.h, ScoreDecodeBf16): R query rows of one
// kv head against four keys read in place, 32 components per vdpbf16ps (masked loads
// zero those past d in both operands), then kernels_decode's 4 x 4 reduction.
template <int R>
GPE_BF16_TARGET void DecodeDots(const uint16_t* q, int64_t ldq, int64_t d, const uint16_t* k,
                                int64_t ldk, int64_t nt, float* s, int64_t lds) {
  __m512 acc[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t c = 0; c < d; c += 32) {
    const __mmask32 m = FirstLanes16(d - c);
    __m512bh kv[4], qv[R];
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
      kv[t] = (__m512bh)(t < nt ? _mm512_maskz_loadu_epi16(m, k + t * ldk + c)
                                : _mm512_setzero_si512());
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) qv[r] = (__m512bh)_mm512_maskz_loadu_epi16(m, q + r * ldq + c);
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[4 * t + r] = _mm512_dpbf16_ps(acc[4 * t + r], qv[r], kv[t]);
    }
  }
  if (R == 4 && nt == 4) {
    StoreSums4x4(acc, s, lds);
    return;
  }
  alignas(64) float sums[16];
  StoreSums4x4(acc, sums, 4);
  for (int r = 0; r < R; ++r) {
    for (int64_t t = 0; t < nt; ++t) s[r * lds + t] = sums[4 * r + t];
  }
}

GPE_BF16_TARGET void ScoreDecodeImpl(const uint16_t* q, int64_t ldq, int64_t rows,
                                     int64_t heads, int64_t d, const uint16_t* keys,
                                     int64_t ldk, int64_t ldh, int64_t nk, float* s,
                                     int64_t lds, PrefetchAhead ahead) {
  if (HWY_UNLIKELY(!HasBf16DotProductImpl())) GPE_NO_BF16_DOT("ScoreDecodeBf16");
  auto step = [&](int64_t g, int64_t j, int64_t nt) GPE_BF16_TARGET {
    const uint16_t* k = keys + j * ldk + g * ldh;
    for (int64_t r = 0; r < rows; r += 4) {
      const uint16_t* qr = q + (g * rows + r) * ldq;
      float* sr = s + (g * rows + r) * lds + j;
      switch (rows - r < 4 ? rows - r : 4) {
        case 1: DecodeDots<1>(qr, ldq, d, k, ldk, nt, sr, lds); break;
        case 2: DecodeDots<2>(qr, ldq, d, k, ldk, nt, sr, lds); break;
        case 3: DecodeDots<3>(qr, ldq, d, k, ldk, nt, sr, lds); break;
        default: DecodeDots<4>(qr, ldq, d, k, ldk, nt, sr, lds); break;
      }
    }
  };
  ForEachDecodeStep(heads, nk, ldk, ldh, ahead, step);
}

// P V for decoding on the dot products, the cache read in token order as
// kernels_decode's AccumulateDecode16 reads it (four tokens per step, kv heads inner):
// two tokens' value columns interleaved into pairs (vpermt2w, as PackValuePairs), each
// row's two probabilities broadcast as one pair (the bf16 rows are zero from nk to their
// padded width, so a last odd token pairs with a zero), o loaded and stored once per
// four tokens.
GPE_BF16_TARGET void AccumulateDecodeImpl(const uint16_t* p, int64_t ldp, int64_t rows,
                                          int64_t heads, int64_t nk, const uint16_t* v,
                                          int64_t ldv, int64_t ldh, int64_t dv, int64_t dp,
                                          const float* alpha, float* o, int64_t ldo,
                                          PrefetchAhead ahead) {
  if (HWY_UNLIKELY(!HasBf16DotProductImpl())) GPE_NO_BF16_DOT("AccumulateDecodeBf16");
  const __m512i lo = _mm512_load_si512(kPairLo), hi = _mm512_load_si512(kPairHi);
  for (int64_t i = 0; i < heads * rows; ++i) {
    if (alpha[i] == 1.0f) continue;  // lazy rescaling leaves most rows alone
    const __m512 a = _mm512_set1_ps(alpha[i]);
    float* orow = o + i * ldo;
    for (int64_t c = 0; c < dp; c += 16) {
      _mm512_storeu_ps(orow + c, _mm512_mul_ps(a, _mm512_loadu_ps(orow + c)));
    }
  }
  auto step = [&](int64_t g, int64_t j, int64_t nt) GPE_BF16_TARGET {
    const uint16_t* vg = v + j * ldv + g * ldh;
    for (int64_t c = 0; c < dp; c += 32) {
      const __mmask32 m = FirstLanes16(dv - c);
      __m512i t[4];
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) {
        t[u] = u < nt && m != 0 ? _mm512_maskz_loadu_epi16(m, vg + u * ldv + c)
                                : _mm512_setzero_si512();
      }
      // Pairs (tokens 0, 1) and (2, 3) for columns c .. c + 15 and c + 16 .. c + 31.
      const __m512bh p01lo = (__m512bh)_mm512_permutex2var_epi16(t[0], lo, t[1]);
      const __m512bh p01hi = (__m512bh)_mm512_permutex2var_epi16(t[0], hi, t[1]);
      const __m512bh p23lo = (__m512bh)_mm512_permutex2var_epi16(t[2], lo, t[3]);
      const __m512bh p23hi = (__m512bh)_mm512_permutex2var_epi16(t[2], hi, t[3]);
      const bool two = c + 16 < dp;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t row = g * rows + r;
        // Tokens j .. j + 3 of the row (past nk: the row's zero padding).
        const uint16_t* pr = p + row * ldp + j;
        const __m512bh b01 = (__m512bh)_mm512_set1_epi32(Pair(pr));
        const __m512bh b23 = (__m512bh)_mm512_set1_epi32(Pair(pr + 2));
        float* orow = o + row * ldo + c;
        __m512 a0 = _mm512_loadu_ps(orow);
        a0 = _mm512_dpbf16_ps(_mm512_dpbf16_ps(a0, b01, p01lo), b23, p23lo);
        _mm512_storeu_ps(orow, a0);
        if (two) {
          __m512 a1 = _mm512_loadu_ps(orow + 16);
          a1 = _mm512_dpbf16_ps(_mm512_dpbf16_ps(a1, b01, p01hi), b23, p23hi);
          _mm512_storeu_ps(orow + 16, a1);
        }
      }
    }
  };
  ForEachDecodeStep(heads, nk, ldv, ldh, ahead, step);
}

GPE_BF16_TARGET void AccumulateImpl(const uint16_t* p, int64_t ldp, int64_t mq, int64_t nk,
                                    const uint16_t* pairs, int64_t dp, const float* alpha,
                                    float* o, int64_t ldo) {
  if (HWY_UNLIKELY(!HasBf16DotProductImpl())) GPE_NO_BF16_DOT("AccumulateTileBf16");
  const int64_t np = (nk + 1) / 2, vecs = dp / 16;
  int64_t c = 0;
  for (; c + 4 <= vecs; c += 4) AccColumns<4>(p, ldp, mq, np, pairs + 32 * c, dp, alpha, o + 16 * c, ldo);
  switch (vecs - c) {
    case 1: AccColumns<1>(p, ldp, mq, np, pairs + 32 * c, dp, alpha, o + 16 * c, ldo); break;
    case 2: AccColumns<2>(p, ldp, mq, np, pairs + 32 * c, dp, alpha, o + 16 * c, ldo); break;
    case 3: AccColumns<3>(p, ldp, mq, np, pairs + 32 * c, dp, alpha, o + 16 * c, ldo); break;
    default: break;
  }
}

// In place: r[i] lane k <- r[k] lane i, 32-bit lanes (4 stages of 2-input shuffles:
// 32-bit and 64-bit unpacks within 128-bit lanes, then two rounds of 128-bit lane
// selections).
inline void Transpose16x16(__m512i r[16]) {
  __m512i t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // r[4g + k], 128-bit lane L: column 4L + k of rows 4g .. 4g + 3.
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    r[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    r[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  // t[k] (0x88: lanes 0, 2 of each input): columns k and 8 + k of rows 0-7 (8-15 for
  // t[8 + k]); t[4 + k] (0xdd: lanes 1, 3): columns 4 + k and 12 + k.
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    t[k] = _mm512_shuffle_i32x4(r[k], r[4 + k], 0x88);
    t[4 + k] = _mm512_shuffle_i32x4(r[k], r[4 + k], 0xdd);
    t[8 + k] = _mm512_shuffle_i32x4(r[8 + k], r[12 + k], 0x88);
    t[12 + k] = _mm512_shuffle_i32x4(r[8 + k], r[12 + k], 0xdd);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm512_shuffle_i32x4(t[k], t[8 + k], 0x88);
    r[8 + k] = _mm512_shuffle_i32x4(t[k], t[8 + k], 0xdd);
    r[4 + k] = _mm512_shuffle_i32x4(t[4 + k], t[12 + k], 0x88);
    r[12 + k] = _mm512_shuffle_i32x4(t[4 + k], t[12 + k], 0xdd);
  }
}

// The key panel layout is a transpose of 32-bit words (bf16 pairs): word (c / 2, j) of
// the panel is word c / 2 of key j. Blocks of 16 keys x 16 pairs: masked loads zero the
// components past d (an odd d's last pair gets a zero high half) and keys past nk.
void PackKeyPanelsImpl(const uint16_t* keys, int64_t nk, int64_t ld, int64_t d,
                       uint16_t* panels) {
  const int64_t pairs = (d + 1) / 2, num_panels = (nk + kPanel - 1) / kPanel;
  for (int64_t pnl = 0; pnl < num_panels; ++pnl) {
    uint16_t* out = panels + pnl * pairs * 2 * kPanel;
    const int64_t j0 = pnl * kPanel, nj = nk - j0 < kPanel ? nk - j0 : kPanel;
    for (int64_t jb = 0; jb < kPanel; jb += 16) {
      for (int64_t cb = 0; cb < pairs; cb += 16) {
        const __mmask32 m = FirstLanes16(d - 2 * cb);
        __m512i r[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) {
          r[i] = jb + i < nj ? _mm512_maskz_loadu_epi16(m, keys + (j0 + jb + i) * ld + 2 * cb)
                             : _mm512_setzero_si512();
        }
        Transpose16x16(r);
        const int64_t nc = pairs - cb < 16 ? pairs - cb : 16;
        for (int64_t k = 0; k < nc; ++k) {
          _mm512_storeu_si512(out + (cb + k) * 2 * kPanel + 2 * jb, r[k]);
        }
      }
    }
  }
}

// Value pairs: rows 2 i and 2 i + 1 interleaved at 16-bit granularity (vpermt2w), 32
// columns per pair of loads; masked loads zero the columns past d and a missing last key.
void PackValuePairsImpl(const uint16_t* vals, int64_t nk, int64_t ld, int64_t d,
                        int64_t dp, uint16_t* pairs) {
  const __m512i lo = _mm512_load_si512(kPairLo), hi = _mm512_load_si512(kPairHi);
  const int64_t np = (nk + 1) / 2;
  for (int64_t j2 = 0; j2 < np; ++j2) {
    const uint16_t* a = vals + 2 * j2 * ld;
    const bool has_b = 2 * j2 + 1 < nk;
    uint16_t* out = pairs + j2 * 2 * dp;
    for (int64_t cb = 0; cb < dp; cb += 32) {
      const __mmask32 m = FirstLanes16(d - cb);
      const __m512i va = m != 0 ? _mm512_maskz_loadu_epi16(m, a + cb) : _mm512_setzero_si512();
      const __m512i vb = m != 0 && has_b ? _mm512_maskz_loadu_epi16(m, a + ld + cb)
                                         : _mm512_setzero_si512();
      _mm512_storeu_si512(out + 2 * cb, _mm512_permutex2var_epi16(va, lo, vb));
      if (cb + 16 < dp) {
        _mm512_storeu_si512(out + 2 * cb + 32, _mm512_permutex2var_epi16(va, hi, vb));
      }
    }
  }
}

void WidenImpl(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = FirstLanes32(n - i);
    const __m256i h = _mm256_maskz_loadu_epi16(m, src + i);
    const __m512i u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_castsi512_ps(u));
  }
}

// rope.cc's ToBFloat16 per lane: u + 0x7fff + (bit 16 of u), high half; NaN (magnitude
// above infinity's pattern): high half with the quiet bit 0x0040 set. Returns the
// rounded pattern, whose high half is the bf16 value (and, with the low half cleared,
// that value as a float).
inline __m512i RoundPattern(__m512i u) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
  const __m512i bias = _mm512_set1_epi32(0x7FFF), bit16 = _mm512_set1_epi32(0x10000);
  const __m512i quiet = _mm512_set1_epi32(0x00400000);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
  const __m512i odd = _mm512_srli_epi32(_mm512_and_si512(u, bit16), 16);
  const __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(u, bias), odd);
  return _mm512_mask_or_epi32(rounded, nan, u, quiet);
}

// Word indices of the high halves of two vectors of 32-bit lanes (vpermt2w).
alignas(64) constexpr uint16_t kHighWords[32] = {
    1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31,
    33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, 59, 61, 63};

// RoundPattern on 32 floats per step: the two vectors' high halves gathered into one
// register by a word permute (vpermt2w) and stored whole. (A per-vector narrowing,
// vpmovdw, is folded by the compiler into its store form, which is microcoded on AMD
// Zen 4 and 5: it took 60% of this function.)
void RoundImpl(const float* src, uint16_t* dst, int64_t n) {
  const __m512i high_words = _mm512_load_si512(kHighWords);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i a = RoundPattern(_mm512_castps_si512(_mm512_loadu_ps(src + i)));
    const __m512i b = RoundPattern(_mm512_castps_si512(_mm512_loadu_ps(src + i + 16)));
    _mm512_storeu_si512(dst + i, _mm512_permutex2var_epi16(a, high_words, b));
  }
  if (i < n) {
    const __mmask16 ma = FirstLanes32(n - i), mb = FirstLanes32(n - i - 16);
    const __m512i a = RoundPattern(_mm512_castps_si512(_mm512_maskz_loadu_ps(ma, src + i)));
    const __m512i b = RoundPattern(_mm512_castps_si512(_mm512_maskz_loadu_ps(mb, src + i + 16)));
    _mm512_mask_storeu_epi16(dst + i, FirstLanes16(n - i),
                             _mm512_permutex2var_epi16(a, high_words, b));
  }
}

// SplitPartsToBf16: each part RoundPattern's of the rest, the rest less the part (its
// rounded pattern with the low half cleared) in float, 32 values per step in registers,
// every destination stored from them.
void SplitPartsToImpl(const float* x, int64_t n, int count, const int* part,
                      uint16_t* const* dst) {
  const __m512i high_words = _mm512_load_si512(kHighWords);
  const __m512i high_half = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  int parts = 0;
  for (int t = 0; t < count; ++t) parts = std::max(parts, part[t] + 1);
  for (int64_t i = 0; i < n; i += 32) {
    const __mmask16 ma = FirstLanes32(n - i), mb = FirstLanes32(n - i - 16);
    const __mmask32 m = FirstLanes16(n - i);
    __m512 a = _mm512_maskz_loadu_ps(ma, x + i), b = _mm512_maskz_loadu_ps(mb, x + i + 16);
    __m512i words[3];
    for (int p = 0; p < parts; ++p) {
      const __m512i ra = RoundPattern(_mm512_castps_si512(a));
      const __m512i rb = RoundPattern(_mm512_castps_si512(b));
      words[p] = _mm512_permutex2var_epi16(ra, high_words, rb);
      a = _mm512_sub_ps(a, _mm512_castsi512_ps(_mm512_and_si512(ra, high_half)));
      b = _mm512_sub_ps(b, _mm512_castsi512_ps(_mm512_and_si512(rb, high_half)));
    }
    for (int t = 0; t < count; ++t) _mm512_mask_storeu_epi16(dst[t] + i, m, words[part[t]]);
  }
}

#pragma GCC diagnostic pop

// Best seconds of `reps` runs of fn.
template <class Fn>
double BestOf(int reps, Fn fn) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

constexpr int kProbeAcc = 12;        // independent accumulators: covers latency x issue width
constexpr int64_t kProbeIters = 4096;

// Twelve named accumulators (kProbeAcc), each step one instruction per accumulator: named
// variables stay in registers (an array indexed in a loop was kept on the stack, and the
// probe then timed store forwarding: its ratio fell from ~2.5 to ~1.4 under load, near
// the 1.25 cut-off). The empty asm keeps every instruction.
#define GPE_PROBE_STEP(OP) \
  do {                     \
    OP(a0); OP(a1); OP(a2); OP(a3); OP(a4); OP(a5); \
    OP(a6); OP(a7); OP(a8); OP(a9); OP(a10); OP(a11); \
  } while (0)

// a0 .. a11 = 0, 1, .., 11 in every lane.
#define GPE_PROBE_ACCUMULATORS                                                        \
  __m512 a0 = _mm512_set1_ps(0.0f), a1 = _mm512_set1_ps(1.0f), a2 = _mm512_set1_ps(2.0f),  \
         a3 = _mm512_set1_ps(3.0f), a4 = _mm512_set1_ps(4.0f), a5 = _mm512_set1_ps(5.0f),  \
         a6 = _mm512_set1_ps(6.0f), a7 = _mm512_set1_ps(7.0f), a8 = _mm512_set1_ps(8.0f),  \
         a9 = _mm512_set1_ps(9.0f), a10 = _mm512_set1_ps(10.0f), a11 = _mm512_set1_ps(11.0f)

// Lane 0 of the accumulators' sum (after the timed loop: the result keeps it alive).
GPE_BF16_TARGET float FirstLaneOfSum(const __m512 (&a)[kProbeAcc]) {
  __m512 s = a[0];
  for (int i = 1; i < kProbeAcc; ++i) s = _mm512_add_ps(s, a[i]);
  float lanes[16];
  _mm512_storeu_ps(lanes, s);
  return lanes[0];
}

GPE_BF16_TARGET float ProbeDot() {
  static_assert(kProbeAcc == 12, "GPE_PROBE_STEP names twelve accumulators");
  GPE_PROBE_ACCUMULATORS;
  const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80);  // (1, 1) in bf16
  const __m512bh y = (__m512bh)_mm512_set1_epi32(0x3c003c00);  // (2^-7, 2^-7): sums stay small
#define GPE_DOT(acc)                       \
  acc = _mm512_dpbf16_ps(acc, x, y);       \
  __asm__ volatile("" : "+v"(acc))
  for (int64_t it = 0; it < kProbeIters; ++it) GPE_PROBE_STEP(GPE_DOT);
#undef GPE_DOT
  return FirstLaneOfSum({a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11});
}

GPE_BF16_TARGET float ProbeFma() {
  GPE_PROBE_ACCUMULATORS;
  const __m512 x = _mm512_set1_ps(1.0f), y = _mm512_set1_ps(1e-30f);
#define GPE_FMA(acc)                       \
  acc = _mm512_fmadd_ps(x, y, acc);        \
  __asm__ volatile("" : "+v"(acc))
  for (int64_t it = 0; it < kProbeIters; ++it) GPE_PROBE_STEP(GPE_FMA);
#undef GPE_FMA
  return FirstLaneOfSum({a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11});
}
#undef GPE_PROBE_STEP
#undef GPE_PROBE_ACCUMULATORS

double Bf16DotProductSpeedupImpl() {
  if (!HasBf16DotProductImpl()) return 0.0;
  volatile float sink = 0.0f;
  // Warm up (clock ramp, first use of the wide units), then the best of 7 of each.
  sink = sink + ProbeDot() + ProbeFma();
  const double dot = BestOf(7, [&] { sink = sink + ProbeDot(); });
  const double fma = BestOf(7, [&] { sink = sink + ProbeFma(); });
  // vdpbf16ps: 32 multiply-adds per instruction; vfmadd231ps: 16.
  return (32.0 / dot) / (16.0 / fma);
}

// Cached per target (this function's static), so a test that forces a target without
// the instruction first does not fix the answer for the process.
bool Bf16DotProductsFasterImpl() {
  // Measured once per process (about 0.3 ms). A margin of 1.25: where the dot products
  // only match the float FMAs, the widening path is as fast and more exact.
  static const bool faster = Bf16DotProductSpeedupImpl() > 1.25;
  return faster;
}

#undef GPE_BF16_TARGET

#else  // HWY_TARGET <= HWY_AVX3

// Without AVX-512: the element loops (bit for bit what the AVX3 code gives) and no dot
// products (HasBf16DotProduct() is false here).
void PackKeyPanelsImpl(const uint16_t* keys, int64_t nk, int64_t ld, int64_t d,
                       uint16_t* panels) {
  PackKeyPanelsBf16Reference(keys, nk, ld, d, panels);
}

void PackValuePairsImpl(const uint16_t* vals, int64_t nk, int64_t ld, int64_t d,
                        int64_t dp, uint16_t* pairs) {
  PackValuePairsBf16Reference(vals, nk, ld, d, dp, pairs);
}

void WidenImpl(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = encodings::sequence::ToFloat(encodings::sequence::BFloat16{src[i]});
  }
}

void RoundImpl(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = encodings::sequence::ToBFloat16(src[i]).bits;
}

void SplitPartsToImpl(const float* x, int64_t n, int count, const int* part,
                      uint16_t* const* dst) {
  SplitPartsToBf16Reference(x, n, count, part, dst);
}

void ScoreTileImpl(const uint16_t*, int64_t, int64_t, int64_t, const uint16_t*, int64_t,
                   float*, int64_t, const float*, int64_t, float) {
  GPE_NO_BF16_DOT("ScoreTileBf16");
}

void RoundRowsImpl(const float*, int64_t, int64_t, int64_t, uint16_t*, int64_t) {
  GPE_NO_BF16_DOT("RoundRowsBf16");
}

void SoftmaxRoundImpl(float*, int64_t, int64_t, int64_t, float*, float*, float*, uint16_t*,
                      int64_t, bool) {
  GPE_NO_BF16_DOT("SoftmaxRoundTileBf16");
}

void AccumulateImpl(const uint16_t*, int64_t, int64_t, int64_t, const uint16_t*, int64_t,
                    const float*, float*, int64_t) {
  GPE_NO_BF16_DOT("AccumulateTileBf16");
}

void ScoreDecodeImpl(const uint16_t*, int64_t, int64_t, int64_t, int64_t, const uint16_t*,
                     int64_t, int64_t, int64_t, float*, int64_t, PrefetchAhead) {
  GPE_NO_BF16_DOT("ScoreDecodeBf16");
}

void AccumulateDecodeImpl(const uint16_t*, int64_t, int64_t, int64_t, int64_t,
                          const uint16_t*, int64_t, int64_t, int64_t, int64_t, const float*,
                          float*, int64_t, PrefetchAhead) {
  GPE_NO_BF16_DOT("AccumulateDecodeBf16");
}

bool HasBf16DotProductImpl() { return false; }
double Bf16DotProductSpeedupImpl() { return 0.0; }
bool Bf16DotProductsFasterImpl() { return false; }

#endif  // HWY_TARGET <= HWY_AVX3

#undef GPE_NO_BF16_DOT

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace
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
HWY_EXPORT(PackValuePairsImpl);
HWY_EXPORT(WidenImpl);
HWY_EXPORT(RoundImpl);
HWY_EXPORT(SplitPartsToImpl);
HWY_EXPORT(ScoreTileImpl);
HWY_EXPORT(RoundRowsImpl);
HWY_EXPORT(SoftmaxRoundImpl);
HWY_EXPORT(AccumulateImpl);
HWY_EXPORT(ScoreDecodeImpl);
HWY_EXPORT(AccumulateDecodeImpl);
HWY_EXPORT(HasBf16DotProductImpl);
HWY_EXPORT(Bf16DotProductSpeedupImpl);
HWY_EXPORT(Bf16DotProductsFasterImpl);
HWY_EXPORT(TargetNameImpl);

bool HasBf16DotProduct() { return HWY_DYNAMIC_DISPATCH(HasBf16DotProductImpl)(); }

double Bf16DotProductSpeedup() { return HWY_DYNAMIC_DISPATCH(Bf16DotProductSpeedupImpl)(); }

bool Bf16DotProductsFaster() { return HWY_DYNAMIC_DISPATCH(Bf16DotProductsFasterImpl)(); }

void PackKeyPanelsBf16Reference(const uint16_t* keys, int64_t nk, int64_t ld, int64_t d,
                                uint16_t* panels) {
  const int64_t pairs = (d + 1) / 2, num_panels = (nk + kPanel - 1) / kPanel;
  for (int64_t pnl = 0; pnl < num_panels; ++pnl) {
    uint16_t* out = panels + pnl * pairs * 2 * kPanel;
    const int64_t j0 = pnl * kPanel, nj = nk - j0 < kPanel ? nk - j0 : kPanel;
    if (nj < kPanel || d % 2 != 0) {
      std::memset(out, 0, static_cast<size_t>(pairs * 2 * kPanel) * sizeof(uint16_t));
    }
    for (int64_t c = 0; c < d; ++c) {
      uint16_t* o = out + (c / 2) * 2 * kPanel + c % 2;
      for (int64_t j = 0; j < nj; ++j) o[2 * j] = keys[(j0 + j) * ld + c];
    }
  }
}

void PackValuePairsBf16Reference(const uint16_t* vals, int64_t nk, int64_t ld, int64_t d,
                                 int64_t dp, uint16_t* pairs) {
  const int64_t np = (nk + 1) / 2;
  std::memset(pairs, 0, static_cast<size_t>(np * 2 * dp) * sizeof(uint16_t));
  for (int64_t j = 0; j < nk; ++j) {
    uint16_t* o = pairs + (j / 2) * 2 * dp + j % 2;
    const uint16_t* row = vals + j * ld;
    for (int64_t c = 0; c < d; ++c) o[2 * c] = row[c];
  }
}

void PackKeyPanelsBf16(const uint16_t* keys, int64_t nk, int64_t ld, int64_t d,
                       uint16_t* panels) {
  HWY_DYNAMIC_DISPATCH(PackKeyPanelsImpl)(keys, nk, ld, d, panels);
}

void PackValuePairsBf16(const uint16_t* vals, int64_t nk, int64_t ld, int64_t d, int64_t dp,
                        uint16_t* pairs) {
  HWY_DYNAMIC_DISPATCH(PackValuePairsImpl)(vals, nk, ld, d, dp, pairs);
}

void WidenBf16Row(const uint16_t* src, float* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(WidenImpl)(src, dst, n);
}

void RoundBf16Row(const float* src, uint16_t* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(RoundImpl)(src, dst, n);
}

void SplitPartsToBf16(const float* x, int64_t n, int count, const int* part,
                      uint16_t* const* dst) {
  HWY_DYNAMIC_DISPATCH(SplitPartsToImpl)(x, n, count, part, dst);
}

void SplitPartsToBf16Reference(const float* x, int64_t n, int count, const int* part,
                               uint16_t* const* dst) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t bits[3] = {0, 0, 0};
    float rest = x[i];
    for (int p = 0; p < 3; ++p) {
      const encodings::sequence::BFloat16 b = encodings::sequence::ToBFloat16(rest);
      bits[p] = b.bits;
      rest -= encodings::sequence::ToFloat(b);
    }
    for (int t = 0; t < count; ++t) dst[t][i] = bits[part[t]];
  }
}

void ScoreTileBf16(const uint16_t* q, int64_t ldq, int64_t mq, int64_t d,
                   const uint16_t* panels, int64_t num_panels, float* s, int64_t lds,
                   const float* init, int64_t ldi, float init_scale) {
  HWY_DYNAMIC_DISPATCH(ScoreTileImpl)(q, ldq, mq, d, panels, num_panels, s, lds, init, ldi,
                                      init_scale);
}

void RoundRowsBf16(const float* p, int64_t ldp, int64_t mq, int64_t n, uint16_t* out,
                   int64_t ldo) {
  HWY_DYNAMIC_DISPATCH(RoundRowsImpl)(p, ldp, mq, n, out, ldo);
}

void SoftmaxRoundTileBf16(float* s, int64_t lds, int64_t mq, int64_t n, float* m, float* l,
                          float* alpha, uint16_t* p16, int64_t ldp, bool keep_float) {
  HWY_DYNAMIC_DISPATCH(SoftmaxRoundImpl)(s, lds, mq, n, m, l, alpha, p16, ldp, keep_float);
}

void AccumulateTileBf16(const uint16_t* p, int64_t ldp, int64_t mq, int64_t nk,
                        const uint16_t* pairs, int64_t dp, const float* alpha, float* o,
                        int64_t ldo) {
  HWY_DYNAMIC_DISPATCH(AccumulateImpl)(p, ldp, mq, nk, pairs, dp, alpha, o, ldo);
}

void ScoreDecodeBf16(const uint16_t* q, int64_t ldq, int64_t rows, int64_t heads, int64_t d,
                     const uint16_t* keys, int64_t ldk, int64_t ldh, int64_t nk, float* s,
                     int64_t lds, PrefetchAhead ahead) {
  HWY_DYNAMIC_DISPATCH(ScoreDecodeImpl)(q, ldq, rows, heads, d, keys, ldk, ldh, nk, s, lds,
                                        ahead);
}

void AccumulateDecodeBf16(const uint16_t* p, int64_t ldp, int64_t rows, int64_t heads,
                          int64_t nk, const uint16_t* v, int64_t ldv, int64_t ldh, int64_t dv,
                          int64_t dp, const float* alpha, float* o, int64_t ldo,
                          PrefetchAhead ahead) {
  HWY_DYNAMIC_DISPATCH(AccumulateDecodeImpl)(p, ldp, rows, heads, nk, v, ldv, ldh, dv, dp,
                                             alpha, o, ldo, ahead);
}

std::vector<int64_t> CompiledTargetsBf16() { return hwy::SupportedAndGeneratedTargets(); }

const char* KernelTargetNameBf16() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

}  // namespace cpu
}  // namespace attention
}  // namespace gpe
#endif  // HWY_ONCE
