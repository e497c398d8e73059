// AVX512_BF16 implementations of kernels_bf16.h. Every function that uses the
// instructions carries the target attribute, so this file builds with the project's
// baseline flags and the code runs only after HasBf16DotProduct() says it may.
//
// Register tiles as kernels.cc's float ones (6 rows x 4 vectors, 24 accumulators), each
// vdpbf16ps doing 32 multiply-adds (16 lanes x a pair) where vfmadd231ps does 16.
#include "attention/cpu/kernels_bf16.h"

#include <immintrin.h>

#include <cstring>

#include "attention/cpu/kernels.h"

namespace gpe {
namespace attention {
namespace cpu {
namespace {

#define GPE_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

constexpr int kRows = 6;

inline int32_t Pair(const uint16_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

template <int MR>
GPE_BF16_TARGET void ScoreMicro(const uint16_t* q, int64_t ldq, int64_t pairs,
                                const uint16_t* panel, float* s, int64_t lds) {
  __m512 acc[MR][4];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_setzero_ps();
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
                              int64_t ldo) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    const __m512 a = _mm512_set1_ps(alpha[r]);
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) acc[r][c] = _mm512_mul_ps(a, _mm512_loadu_ps(o + r * ldo + 16 * c));
  }
  for (int64_t j2 = 0; j2 < pairs; ++j2) {
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
    AccMicro<kRows, NV>(p + r * ldp, ldp, pairs, vp, dp, alpha + r, o + r * ldo, ldo);
  }
  const uint16_t* pr = p + r * ldp;
  float* orow = o + r * ldo;
  switch (mq - r) {
    case 1: AccMicro<1, NV>(pr, ldp, pairs, vp, dp, alpha + r, orow, ldo); break;
    case 2: AccMicro<2, NV>(pr, ldp, pairs, vp, dp, alpha + r, orow, ldo); break;
    case 3: AccMicro<3, NV>(pr, ldp, pairs, vp, dp, alpha + r, orow, ldo); break;
    case 4: AccMicro<4, NV>(pr, ldp, pairs, vp, dp, alpha + r, orow, ldo); break;
    case 5: AccMicro<5, NV>(pr, ldp, pairs, vp, dp, alpha + r, orow, ldo); break;
    default: break;
  }
}

GPE_BF16_TARGET void ScoreTileImpl(const uint16_t* q, int64_t ldq, int64_t mq, int64_t d,
                                   const uint16_t* panels, int64_t num_panels, float* s,
                                   int64_t lds) {
  const int64_t pairs = (d + 1) / 2;
  for (int64_t pnl = 0; pnl < num_panels; ++pnl) {
    const uint16_t* panel = panels + pnl * pairs * 2 * kPanel;
    float* sp = s + pnl * kPanel;
    int64_t r = 0;
    for (; r + kRows <= mq; r += kRows) ScoreMicro<kRows>(q + r * ldq, ldq, pairs, panel, sp + r * lds, lds);
    const uint16_t* qr = q + r * ldq;
    float* sr = sp + r * lds;
    switch (mq - r) {
      case 1: ScoreMicro<1>(qr, ldq, pairs, panel, sr, lds); break;
      case 2: ScoreMicro<2>(qr, ldq, pairs, panel, sr, lds); break;
      case 3: ScoreMicro<3>(qr, ldq, pairs, panel, sr, lds); break;
      case 4: ScoreMicro<4>(qr, ldq, pairs, panel, sr, lds); break;
      case 5: ScoreMicro<5>(qr, ldq, pairs, panel, sr, lds); break;
      default: break;
    }
  }
}

GPE_BF16_TARGET void RoundRowsImpl(const float* p, int64_t ldp, int64_t mq, int64_t n,
                                   uint16_t* out, int64_t ldo) {
  for (int64_t r = 0; r < mq; ++r) {
    for (int64_t j = 0; j < n; j += 16) {
      const __m256bh b = _mm512_cvtneps_pbh(_mm512_loadu_ps(p + r * ldp + j));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + r * ldo + j), (__m256i)b);
    }
  }
}

GPE_BF16_TARGET void AccumulateImpl(const uint16_t* p, int64_t ldp, int64_t mq, int64_t nk,
                                    const uint16_t* pairs, int64_t dp, const float* alpha,
                                    float* o, int64_t ldo) {
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

}  // namespace

bool HasBf16DotProduct() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  }();
  return has;
}

void PackKeyPanelsBf16(const uint16_t* keys, int64_t nk, int64_t ld, int64_t d,
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

void PackValuePairsBf16(const uint16_t* vals, int64_t nk, int64_t ld, int64_t d, int64_t dp,
                        uint16_t* pairs) {
  const int64_t np = (nk + 1) / 2;
  std::memset(pairs, 0, static_cast<size_t>(np * 2 * dp) * sizeof(uint16_t));
  for (int64_t j = 0; j < nk; ++j) {
    uint16_t* o = pairs + (j / 2) * 2 * dp + j % 2;
    const uint16_t* row = vals + j * ld;
    for (int64_t c = 0; c < d; ++c) o[2 * c] = row[c];
  }
}

void ScoreTileBf16(const uint16_t* q, int64_t ldq, int64_t mq, int64_t d,
                   const uint16_t* panels, int64_t num_panels, float* s, int64_t lds) {
  ScoreTileImpl(q, ldq, mq, d, panels, num_panels, s, lds);
}

void RoundRowsBf16(const float* p, int64_t ldp, int64_t mq, int64_t n, uint16_t* out,
                   int64_t ldo) {
  RoundRowsImpl(p, ldp, mq, n, out, ldo);
}

void AccumulateTileBf16(const uint16_t* p, int64_t ldp, int64_t mq, int64_t nk,
                        const uint16_t* pairs, int64_t dp, const float* alpha, float* o,
                        int64_t ldo) {
  AccumulateImpl(p, ldp, mq, nk, pairs, dp, alpha, o, ldo);
}

}  // namespace cpu
}  // namespace attention
}  // namespace gpe
