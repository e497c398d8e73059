// Highway per-target implementations of kernels_decode.h, compiled once per instruction
// set as kernels.cc is (foreach_target.h re-includes this file with HWY_TARGET set).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "attention/cpu/kernels_decode.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/cache_control.h"
// Per target, before HWY_BEFORE_NAMESPACE (it opens the namespaces itself).
#include "attention/cpu/decode_shared-inl.h"

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "attention/cpu/kernels.h"
#include "attention/cpu/kernels_decode.h"
#include "encodings/sequence/rope.h"

HWY_BEFORE_NAMESPACE();
namespace gpe {
namespace attention {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// The KV cache's element types (kernels_decode.h: float32, bfloat16, IEEE half), widened
// to float exactly in registers as the kernels load them. E::T is the stored type.
struct F32 {
  using T = float;
};
struct Bf16 {
  using T = uint16_t;
};
struct F16 {
  using T = uint16_t;
};

template <class E>
HWY_INLINE float ToScalar(const typename E::T* p) {
  if constexpr (std::is_same_v<E, F32>) {
    return *p;
  } else if constexpr (std::is_same_v<E, Bf16>) {
    const uint32_t u = static_cast<uint32_t>(*p) << 16;
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
  } else {
    return encodings::sequence::ToFloat(encodings::sequence::Float16{*p});
  }
}

// One vector of floats from the cache at p.
template <class E>
HWY_INLINE VF LoadKV(DF df, const typename E::T* HWY_RESTRICT p) {
  if constexpr (std::is_same_v<E, F32>) {
    return hn::LoadU(df, p);
  } else if constexpr (std::is_same_v<E, Bf16>) {
    const hn::Rebind<uint16_t, DF> d16;
    const hn::RebindToUnsigned<DF> du;
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p))));
  } else {
#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
    HWY_ALIGN float buf[hn::MaxLanes(DF())];
    // rope.h's exact decoding: Highway's scalar PromoteTo misreads infinity and NaN.
    for (size_t i = 0; i < hn::Lanes(df); ++i) {
      buf[i] = encodings::sequence::ToFloat(encodings::sequence::Float16{p[i]});
    }
    return hn::Load(df, buf);
#else
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
#endif
  }
}

#if HWY_TARGET <= HWY_AVX3
template <class E>
HWY_INLINE __m512 Load512(const typename E::T* p) {
  if constexpr (std::is_same_v<E, F32>) {
    return _mm512_loadu_ps(p);
  } else if constexpr (std::is_same_v<E, Bf16>) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
}
#endif

// Scores straight from key rows (no panel): per key, up to 4 query rows share each
// vector load of the key; one horizontal sum per (row, key). For few query rows per key
// block (decoding), where packing panels would cost more than it saves.
template <int R>
HWY_INLINE void ScoreDirectRows(const float* HWY_RESTRICT q, int64_t ldq, int64_t d,
                                const float* HWY_RESTRICT keys, int64_t ldk, int64_t nk,
                                float* HWY_RESTRICT s, int64_t lds) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t dv = d / N * N;
  for (int64_t j = 0; j < nk; ++j) {
    const float* k = keys + j * ldk;
    // Key rows of a KV cache are often a page apart (all heads of a token lie between
    // them), beyond what hardware prefetchers follow: fetch a few keys ahead.
    if (j + kPrefetchRows < nk) {
      const float* ahead = k + kPrefetchRows * ldk;
      for (int64_t c = 0; c < d; c += 16) hwy::Prefetch(ahead + c);
    }
    VF acc[R];
    HWY_UNROLL(4)
    for (int r = 0; r < R; ++r) acc[r] = hn::Zero(df);
    for (int64_t c = 0; c < dv; c += N) {
      const VF kv = hn::LoadU(df, k + c);
      HWY_UNROLL(4)
      for (int r = 0; r < R; ++r) acc[r] = hn::MulAdd(hn::LoadU(df, q + r * ldq + c), kv, acc[r]);
    }
    HWY_UNROLL(4)
    for (int r = 0; r < R; ++r) {
      float sum = hn::GetLane(hn::SumOfLanes(df, acc[r]));
      for (int64_t c = dv; c < d; ++c) sum += q[r * ldq + c] * k[c];
      s[r * lds + j] = sum;
    }
  }
}

void ScoreDirectImpl(const float* q, int64_t ldq, int64_t mq, int64_t d, const float* keys,
                     int64_t ldk, int64_t nk, float* s, int64_t lds) {
  int64_t r = 0;
  for (; r + 4 <= mq; r += 4) ScoreDirectRows<4>(q + r * ldq, ldq, d, keys, ldk, nk, s + r * lds, lds);
  switch (mq - r) {
    case 1:
      ScoreDirectRows<1>(q + r * ldq, ldq, d, keys, ldk, nk, s + r * lds, lds);
      break;
    case 2:
      ScoreDirectRows<2>(q + r * ldq, ldq, d, keys, ldk, nk, s + r * lds, lds);
      break;
    case 3:
      ScoreDirectRows<3>(q + r * ldq, ldq, d, keys, ldk, nk, s + r * lds, lds);
      break;
    default:
      break;
  }
}

// Sums of the lanes of R vectors into out[r * lds] (R <= 4).
template <int R>
HWY_INLINE void StoreLaneSums(DF df, const VF* v, float* HWY_RESTRICT out, int64_t lds) {
#if HWY_TARGET <= HWY_AVX3
  if constexpr (R == 4) {  // one pass of pairwise additions for the four rows
    __m256 b[4];
    for (int r = 0; r < 4; ++r) {
      b[r] = _mm256_add_ps(_mm512_castps512_ps256(v[r].raw),
                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v[r].raw), 1)));
    }
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(b[0], b[1]), _mm256_hadd_ps(b[2], b[3]));
    HWY_ALIGN float sums[4];
    _mm_store_ps(sums, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
    for (int r = 0; r < 4; ++r) out[r * lds] = sums[r];
    return;
  }
#endif
  HWY_UNROLL(4)
  for (int r = 0; r < R; ++r) out[r * lds] = hn::GetLane(hn::SumOfLanes(df, v[r]));
}

// R query rows against one key row k: out[r * lds] = q_r . k. Two accumulators per row
// (even and odd vectors of the row) halve the chains of dependent FMAs.
template <class E, int R>
HWY_INLINE void DotRows(const float* HWY_RESTRICT q, int64_t ldq, int64_t d,
                        const typename E::T* HWY_RESTRICT k, float* HWY_RESTRICT out,
                        int64_t lds) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t dv = d / N * N;
  VF a0[R], a1[R];
  HWY_UNROLL(4)
  for (int r = 0; r < R; ++r) a0[r] = a1[r] = hn::Zero(df);
  int64_t c = 0;
  for (; c + 2 * N <= dv; c += 2 * N) {
    const VF k0 = LoadKV<E>(df, k + c), k1 = LoadKV<E>(df, k + c + N);
    HWY_UNROLL(4)
    for (int r = 0; r < R; ++r) {
      a0[r] = hn::MulAdd(hn::LoadU(df, q + r * ldq + c), k0, a0[r]);
      a1[r] = hn::MulAdd(hn::LoadU(df, q + r * ldq + c + N), k1, a1[r]);
    }
  }
  if (c < dv) {
    const VF k0 = LoadKV<E>(df, k + c);
    HWY_UNROLL(4)
    for (int r = 0; r < R; ++r) a0[r] = hn::MulAdd(hn::LoadU(df, q + r * ldq + c), k0, a0[r]);
  }
  HWY_UNROLL(4)
  for (int r = 0; r < R; ++r) a0[r] = hn::Add(a0[r], a1[r]);
  StoreLaneSums<R>(df, a0, out, lds);
  if (dv < d) {
    for (int r = 0; r < R; ++r) {
      float tail = 0.0f;
      for (int64_t e = dv; e < d; ++e) tail += q[r * ldq + e] * ToScalar<E>(k + e);
      out[r * lds] += tail;
    }
  }
}

#if HWY_TARGET <= HWY_AVX3
// Four query rows against four consecutive keys (rows k, k + ldk, ...): 16 dot products
// with 16 independent accumulators (each vector of q and k loaded once per four FMAs),
// then one transposing reduction of the 16 vectors: s[r * lds + t] = q_r . k_t.
template <class E>
HWY_INLINE void Dot4x4(const float* HWY_RESTRICT q, int64_t ldq, int64_t d,
                       const typename E::T* HWY_RESTRICT k, int64_t ldk, float* HWY_RESTRICT s,
                       int64_t lds) {
  constexpr int64_t N = 16;
  const int64_t dv = d / N * N;
  __m512 acc[16];  // acc[4 t + r]: key t, row r
  HWY_UNROLL(16)
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t c = 0; c < dv; c += N) {
    __m512 kv[4], qv[4];
    HWY_UNROLL(16)
    for (int t = 0; t < 4; ++t) kv[t] = Load512<E>(k + t * ldk + c);
    HWY_UNROLL(16)
    for (int r = 0; r < 4; ++r) qv[r] = _mm512_loadu_ps(q + r * ldq + c);
    HWY_UNROLL(16)
    for (int t = 0; t < 4; ++t) {
      HWY_UNROLL(16)
      for (int r = 0; r < 4; ++r) acc[4 * t + r] = _mm512_fmadd_ps(qv[r], kv[t], acc[4 * t + r]);
    }
  }
  StoreSums4x4(acc, s, lds);
  if (dv < d) {
    HWY_UNROLL(16)
    for (int r = 0; r < 4; ++r) {
      HWY_UNROLL(16)
      for (int t = 0; t < 4; ++t) {
        float tail = 0.0f;
        for (int64_t e = dv; e < d; ++e) tail += q[r * ldq + e] * ToScalar<E>(k + t * ldk + e);
        s[r * lds + t] += tail;
      }
    }
  }
}
#endif

// Whether a decode kernel walks kv heads outermost (see ScoreDecode in kernels_decode.h).
HWY_INLINE bool HeadMajor(int64_t ld, int64_t ldh) { return ldh > ld; }


template <class E>
void ScoreDecodeT(const float* q, int64_t ldq, int64_t rows, int64_t heads, int64_t d,
                  const typename E::T* keys, int64_t ldk, int64_t ldh, int64_t nk, float* s,
                  int64_t lds, PrefetchAhead ahead) {
  const DF df;
  int64_t j = 0;
  PrefetchCursor pf(ahead, (nk + 3) / 4 * heads);
#if HWY_TARGET <= HWY_AVX3
  if (rows % 4 == 0) {  // four keys at a time
    const int64_t n4 = nk / 4 * 4;
    auto step = [&](int64_t jj, int64_t g) {
      pf.Step();
      const typename E::T* k = keys + jj * ldk + g * ldh;
      for (int64_t r = 0; r < rows; r += 4) {
        Dot4x4<E>(q + (g * rows + r) * ldq, ldq, d, k, ldk, s + (g * rows + r) * lds + jj, lds);
      }
    };
    if (HeadMajor(ldk, ldh)) {
      for (int64_t g = 0; g < heads; ++g) {
        for (int64_t jj = 0; jj < n4; jj += 4) step(jj, g);
      }
    } else {
      for (int64_t jj = 0; jj < n4; jj += 4) {
        for (int64_t g = 0; g < heads; ++g) step(jj, g);
      }
    }
    j = n4;
  }
#endif
  for (; j < nk; ++j) {
    for (int64_t g = 0; g < heads; ++g) {
      if (j % 4 == 0) pf.Step();
      const typename E::T* k = keys + j * ldk + g * ldh;
      const float* qg = q + g * rows * ldq;
      float* sg = s + g * rows * lds + j;
      int64_t r = 0;
      for (; r + 4 <= rows; r += 4) DotRows<E, 4>(qg + r * ldq, ldq, d, k, sg + r * lds, lds);
      switch (rows - r) {
        case 1:
          DotRows<E, 1>(qg + r * ldq, ldq, d, k, sg + r * lds, lds);
          break;
        case 2:
          DotRows<E, 2>(qg + r * ldq, ldq, d, k, sg + r * lds, lds);
          break;
        case 3:
          DotRows<E, 3>(qg + r * ldq, ldq, d, k, sg + r * lds, lds);
          break;
        default:
          break;
      }
    }
  }
  (void)df;
}

void ScoreDecodeImpl(const float* q, int64_t ldq, int64_t rows, int64_t heads, int64_t d,
                     const float* keys, int64_t ldk, int64_t ldh, int64_t nk, float* s,
                     int64_t lds, PrefetchAhead ahead) {
  ScoreDecodeT<F32>(q, ldq, rows, heads, d, keys, ldk, ldh, nk, s, lds, ahead);
}
void ScoreDecode16Impl(const float* q, int64_t ldq, int64_t rows, int64_t heads, int64_t d,
                       const uint16_t* keys, int64_t ldk, int64_t ldh, int64_t nk, float* s,
                       int64_t lds, PrefetchAhead ahead, bool half) {
  if (half) {
    ScoreDecodeT<F16>(q, ldq, rows, heads, d, keys, ldk, ldh, nk, s, lds, ahead);
  } else {
    ScoreDecodeT<Bf16>(q, ldq, rows, heads, d, keys, ldk, ldh, nk, s, lds, ahead);
  }
}

// Decoding's P V in token order (see AccumulateDecode in kernels_decode.h). Four tokens per
// step: their probabilities for MR rows of one kv head sit in registers (4 MR
// broadcasts), and every output vector takes four FMAs per load and store. The value
// rows of the four tokens are read head after head, i.e. four contiguous streams
// (one per token's row of kv heads) that the hardware prefetchers follow.
template <class E, int MR>
HWY_INLINE void AccDecodeStep(const float* HWY_RESTRICT p, int64_t lds,
                              const typename E::T* HWY_RESTRICT v, int64_t ldv, int64_t dp,
                              float* HWY_RESTRICT o, int64_t ldo) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  VF pb[MR][4];
  HWY_UNROLL(16)
  for (int r = 0; r < MR; ++r) {
    HWY_UNROLL(4)
    for (int t = 0; t < 4; ++t) pb[r][t] = hn::Set(df, p[r * lds + t]);
  }
  for (int64_t c = 0; c < dp; c += N) {
    const VF v0 = LoadKV<E>(df, v + c), v1 = LoadKV<E>(df, v + ldv + c);
    const VF v2 = LoadKV<E>(df, v + 2 * ldv + c), v3 = LoadKV<E>(df, v + 3 * ldv + c);
    HWY_UNROLL(16)
    for (int r = 0; r < MR; ++r) {
      float* orow = o + r * ldo + c;
      VF acc = hn::MulAdd(pb[r][0], v0, hn::LoadU(df, orow));
      acc = hn::MulAdd(pb[r][1], v1, acc);
      acc = hn::MulAdd(pb[r][2], v2, acc);
      acc = hn::MulAdd(pb[r][3], v3, acc);
      hn::StoreU(acc, df, orow);
    }
  }
}

template <class E>
void AccumulateDecodeT(const float* p, int64_t lds, int64_t rows, int64_t heads, int64_t nk,
                       const typename E::T* v, int64_t ldv, int64_t ldh, int64_t dp,
                       const float* alpha, float* o, int64_t ldo, PrefetchAhead ahead) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  PrefetchCursor pf(ahead, (nk + 3) / 4 * heads);
  for (int64_t i = 0; i < heads * rows; ++i) {
    if (alpha[i] == 1.0f) continue;  // lazy rescaling leaves most rows alone
    const VF a = hn::Set(df, alpha[i]);
    float* orow = o + i * ldo;
    for (int64_t c = 0; c < dp; c += N) hn::StoreU(hn::Mul(a, hn::LoadU(df, orow + c)), df, orow + c);
  }
  const int64_t n4 = nk / 4 * 4;
  auto step = [&](int64_t jj, int64_t g) {
    pf.Step();
    const typename E::T* vg = v + jj * ldv + g * ldh;
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) {
      const int64_t row = g * rows + r;
      AccDecodeStep<E, 4>(p + row * lds + jj, lds, vg, ldv, dp, o + row * ldo, ldo);
    }
    const int64_t row = g * rows + r;
    switch (rows - r) {
      case 1:
        AccDecodeStep<E, 1>(p + row * lds + jj, lds, vg, ldv, dp, o + row * ldo, ldo);
        break;
      case 2:
        AccDecodeStep<E, 2>(p + row * lds + jj, lds, vg, ldv, dp, o + row * ldo, ldo);
        break;
      case 3:
        AccDecodeStep<E, 3>(p + row * lds + jj, lds, vg, ldv, dp, o + row * ldo, ldo);
        break;
      default:
        break;
    }
  };
  if (HeadMajor(ldv, ldh)) {  // (each row's tokens still in increasing order)
    for (int64_t g = 0; g < heads; ++g) {
      for (int64_t jj = 0; jj < n4; jj += 4) step(jj, g);
    }
  } else {
    for (int64_t jj = 0; jj < n4; jj += 4) {
      for (int64_t g = 0; g < heads; ++g) step(jj, g);
    }
  }
  int64_t j = n4;
  for (; j < nk; ++j) {  // the last nk % 4 tokens, one at a time
    for (int64_t g = 0; g < heads; ++g) {
      if (j % 4 == 0) pf.Step();
      const typename E::T* vr = v + j * ldv + g * ldh;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t row = g * rows + r;
        const VF pj = hn::Set(df, p[row * lds + j]);
        float* orow = o + row * ldo;
        for (int64_t c = 0; c < dp; c += N) {
          hn::StoreU(hn::MulAdd(pj, LoadKV<E>(df, vr + c), hn::LoadU(df, orow + c)), df, orow + c);
        }
      }
    }
  }
}

void AccumulateDecodeImpl(const float* p, int64_t lds, int64_t rows, int64_t heads, int64_t nk,
                          const float* v, int64_t ldv, int64_t ldh, int64_t dp,
                          const float* alpha, float* o, int64_t ldo, PrefetchAhead ahead) {
  AccumulateDecodeT<F32>(p, lds, rows, heads, nk, v, ldv, ldh, dp, alpha, o, ldo, ahead);
}
void AccumulateDecode16Impl(const float* p, int64_t lds, int64_t rows, int64_t heads,
                            int64_t nk, const uint16_t* v, int64_t ldv, int64_t ldh, int64_t dp,
                            const float* alpha, float* o, int64_t ldo, PrefetchAhead ahead,
                            bool half) {
  if (half) {
    AccumulateDecodeT<F16>(p, lds, rows, heads, nk, v, ldv, ldh, dp, alpha, o, ldo, ahead);
  } else {
    AccumulateDecodeT<Bf16>(p, lds, rows, heads, nk, v, ldv, ldh, dp, alpha, o, ldo, ahead);
  }
}

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

HWY_EXPORT(ScoreDirectImpl);
HWY_EXPORT(ScoreDecodeImpl);
HWY_EXPORT(AccumulateDecodeImpl);
HWY_EXPORT(ScoreDecode16Impl);
HWY_EXPORT(AccumulateDecode16Impl);

void ScoreDirect(const float* q, int64_t ldq, int64_t mq, int64_t d, const float* keys,
                 int64_t ldk, int64_t nk, float* s, int64_t lds) {
  HWY_DYNAMIC_DISPATCH(ScoreDirectImpl)(q, ldq, mq, d, keys, ldk, nk, s, lds);
}
void ScoreDecode(const float* q, int64_t ldq, int64_t rows, int64_t heads, int64_t d,
                 const float* keys, int64_t ldk, int64_t ldh, int64_t nk, float* s, int64_t lds,
                 PrefetchAhead ahead) {
  HWY_DYNAMIC_DISPATCH(ScoreDecodeImpl)(q, ldq, rows, heads, d, keys, ldk, ldh, nk, s, lds, ahead);
}
void AccumulateDecode(const float* p, int64_t lds, int64_t rows, int64_t heads, int64_t nk,
                      const float* v, int64_t ldv, int64_t ldh, int64_t dp, const float* alpha,
                      float* o, int64_t ldo, PrefetchAhead ahead) {
  HWY_DYNAMIC_DISPATCH(AccumulateDecodeImpl)(p, lds, rows, heads, nk, v, ldv, ldh, dp, alpha, o,
                                             ldo, ahead);
}
void ScoreDecode16(const float* q, int64_t ldq, int64_t rows, int64_t heads, int64_t d,
                   const uint16_t* keys, int64_t ldk, int64_t ldh, int64_t nk, float* s,
                   int64_t lds, bool half, PrefetchAhead ahead) {
  HWY_DYNAMIC_DISPATCH(ScoreDecode16Impl)(q, ldq, rows, heads, d, keys, ldk, ldh, nk, s, lds,
                                          ahead, half);
}
void AccumulateDecode16(const float* p, int64_t lds, int64_t rows, int64_t heads, int64_t nk,
                        const uint16_t* v, int64_t ldv, int64_t ldh, int64_t dp,
                        const float* alpha, float* o, int64_t ldo, bool half,
                        PrefetchAhead ahead) {
  HWY_DYNAMIC_DISPATCH(AccumulateDecode16Impl)(p, lds, rows, heads, nk, v, ldv, ldh, dp, alpha,
                                               o, ldo, ahead, half);
}

}  // namespace cpu
}  // namespace attention
}  // namespace gpe
#endif  // HWY_ONCE
