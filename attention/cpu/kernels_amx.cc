#include "attention/cpu/kernels_amx.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "attention/cpu/kernels.h"
#include "attention/cpu/kernels_bf16.h"
#include "measure/machine_limits.h"

namespace gpe {
namespace attention {
namespace cpu {
namespace {

std::atomic<bool> g_emulate{false};

// --- The emulated tiles: TDPBF16PS per the SDM's definition (kernels_amx.h). ---

// A bf16 input as the instruction reads it: subnormals (exponent 0) as a signed zero.
inline float Bf16In(uint16_t h) {
  const uint32_t u = (h & 0x7F80u) == 0 ? (uint32_t{h} & 0x8000u) << 16 : uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
// A float result as the instruction writes it: subnormals flushed to a signed zero.
inline float FlushSubnormal(float x) {
  return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x;
}

std::atomic<int64_t> g_emulated_dots{0};

// The SDM's Operation section of TDPBF16PS: per row, the even and the odd products of
// every pair summed apart, each from 0 by FMAs in order of k; then their sum added to C.
// Every step rounds to nearest even with inputs' subnormals as zero and results'
// flushed.
void EmulatedDot(float* c, const unsigned char* a_bytes, const unsigned char* b_bytes) {
  uint16_t a[16 * 32], b[16 * 32];
  std::memcpy(a, a_bytes, sizeof(a));
  std::memcpy(b, b_bytes, sizeof(b));
  for (int m = 0; m < 16; ++m) {
    float even[16] = {}, odd[16] = {};
    for (int k = 0; k < 16; ++k) {
      const float a0 = Bf16In(a[m * 32 + 2 * k]), a1 = Bf16In(a[m * 32 + 2 * k + 1]);
      for (int n = 0; n < 16; ++n) {
        even[n] = FlushSubnormal(std::fma(a0, Bf16In(b[k * 32 + 2 * n]), even[n]));
        odd[n] = FlushSubnormal(std::fma(a1, Bf16In(b[k * 32 + 2 * n + 1]), odd[n]));
      }
    }
    for (int n = 0; n < 16; ++n) {
      const float t = FlushSubnormal(even[n] + odd[n]);
      c[m * 16 + n] = FlushSubnormal(FlushSubnormal(c[m * 16 + n]) + t);
    }
  }
  g_emulated_dots.fetch_add(1, std::memory_order_relaxed);
}

struct EmulatedTiles {
  alignas(64) unsigned char t[8][16][64];
  bool configured = false;
};
EmulatedTiles& ThreadTiles() {
  thread_local EmulatedTiles tiles;
  return tiles;
}

// Every tile 16 rows x 64 bytes (palette 1); a load or store of an unconfigured tile
// aborts, as the instruction faults.
struct EmulatedOps {
  static void Config() { ThreadTiles().configured = true; }
  static void Release() { ThreadTiles().configured = false; }
  static unsigned char* Tile(int i) {
    EmulatedTiles& e = ThreadTiles();
    if (!e.configured) __builtin_trap();
    return &e.t[i][0][0];
  }
  template <int T>
  static void Zero() {
    std::memset(Tile(T), 0, 16 * 64);
  }
  template <int T>
  static void Load(const void* p, int64_t stride) {
    for (int r = 0; r < 16; ++r) {
      std::memcpy(Tile(T) + r * 64, static_cast<const unsigned char*>(p) + r * stride, 64);
    }
  }
  template <int T>
  static void Store(void* p, int64_t stride) {
    for (int r = 0; r < 16; ++r) {
      std::memcpy(static_cast<unsigned char*>(p) + r * stride, Tile(T) + r * 64, 64);
    }
  }
  template <int C, int A, int B>
  static void Dot() {
    float c[256];
    std::memcpy(c, Tile(C), sizeof(c));
    EmulatedDot(c, Tile(A), Tile(B));
    std::memcpy(Tile(C), c, sizeof(c));
  }
};

#if defined(__x86_64__)
#define GPE_AMX_TARGET __attribute__((target("amx-tile,amx-bf16")))

// The hardware's tiles. GCC's _tile_* macros paste the tile number into the assembly
// as written, so each is spelled out with a literal number. GCC 12's tileloadd asm names
// no memory operand: a buffer written and then tile-loaded inside one function could be
// loaded before the write lands. Here every tile load sits in a kernel whose buffers
// were written by other (non-inlined) functions before it was called.
#define GPE_TILE_CASES(op, ...)                                                    \
  if constexpr (T == 0) op(0, ##__VA_ARGS__);                                      \
  else if constexpr (T == 1) op(1, ##__VA_ARGS__);                                 \
  else if constexpr (T == 2) op(2, ##__VA_ARGS__);                                 \
  else if constexpr (T == 3) op(3, ##__VA_ARGS__);                                 \
  else if constexpr (T == 4) op(4, ##__VA_ARGS__);                                 \
  else if constexpr (T == 5) op(5, ##__VA_ARGS__);                                 \
  else if constexpr (T == 6) op(6, ##__VA_ARGS__);                                 \
  else op(7, ##__VA_ARGS__)

struct HardwareOps {
  GPE_AMX_TARGET static inline void Config() {
    alignas(64) unsigned char cfg[64];
    measure::AmxTileConfig16x64(cfg);
    _tile_loadconfig(cfg);
  }
  GPE_AMX_TARGET static inline void Release() { _tile_release(); }
  template <int T>
  GPE_AMX_TARGET static inline void Zero() {
    static_assert(T >= 0 && T < 8);
    GPE_TILE_CASES(_tile_zero);
  }
  template <int T>
  GPE_AMX_TARGET static inline void Load(const void* p, int64_t stride) {
    static_assert(T >= 0 && T < 8);
    GPE_TILE_CASES(_tile_loadd, p, stride);
  }
  template <int T>
  GPE_AMX_TARGET static inline void Store(void* p, int64_t stride) {
    static_assert(T >= 0 && T < 8);
    GPE_TILE_CASES(_tile_stored, p, stride);
  }
  // The (C, A, B) triples the kernels use.
  template <int C, int A, int B>
  GPE_AMX_TARGET static inline void Dot() {
    if constexpr (C == 0 && A == 4 && B == 6) {
      _tile_dpbf16ps(0, 4, 6);
    } else if constexpr (C == 1 && A == 4 && B == 7) {
      _tile_dpbf16ps(1, 4, 7);
    } else if constexpr (C == 2 && A == 5 && B == 6) {
      _tile_dpbf16ps(2, 5, 6);
    } else if constexpr (C == 3 && A == 5 && B == 7) {
      _tile_dpbf16ps(3, 5, 7);
    } else {
      static_assert(C == 0 && A == 1 && B == 2, "add the triple here");
      _tile_dpbf16ps(0, 1, 2);
    }
  }
};
#undef GPE_TILE_CASES
#else
#define GPE_AMX_TARGET
#endif

// S rows [0, mfull) (mfull a multiple of 16) of ScoreTileBf16 on tiles: C tiles 0-3 hold
// a 2 x 2 block of 16 x 16 scores (two row blocks, two groups of 16 keys), A tiles 4-5
// the rows' 32 components of the step, B tiles 6-7 the groups' 16 pair rows of it. A key
// panel (kernels_bf16.h) holds kPanel keys per pair row: group g of 16 keys is 64 bytes
// at 64 g in each of its rows, which are 4 kPanel bytes apart.
template <class Ops>
GPE_AMX_TARGET void ScoreTiles(const uint16_t* q, int64_t ldq, int64_t mfull, int64_t pair_rows,
                               const uint16_t* panels, int64_t num_panels, float* s,
                               int64_t lds) {
  constexpr int64_t kGroups = kPanel / 16;  // groups of 16 keys per panel
  const int64_t steps = pair_rows / 16, groups = num_panels * kGroups;
  const int64_t qs = ldq * 2, ss = lds * 4, ks = kPanel * 4;
  // Pair row 16 k of key group g.
  auto group_at = [&](int64_t g, int64_t k) {
    return panels + (g / kGroups) * pair_rows * 2 * kPanel + 16 * k * 2 * kPanel +
           (g % kGroups) * 32;
  };
  for (int64_t r = 0; r < mfull; r += 32) {
    const bool two_r = r + 16 < mfull;
    for (int64_t g = 0; g < groups; g += 2) {
      const bool two_g = g + 1 < groups;
      Ops::template Zero<0>();
      Ops::template Zero<1>();
      Ops::template Zero<2>();
      Ops::template Zero<3>();
      for (int64_t k = 0; k < steps; ++k) {
        Ops::template Load<4>(q + r * ldq + k * 32, qs);
        Ops::template Load<6>(group_at(g, k), ks);
        Ops::template Dot<0, 4, 6>();
        if (two_g) {
          Ops::template Load<7>(group_at(g + 1, k), ks);
          Ops::template Dot<1, 4, 7>();
        }
        if (two_r) {
          Ops::template Load<5>(q + (r + 16) * ldq + k * 32, qs);
          Ops::template Dot<2, 5, 6>();
          if (two_g) Ops::template Dot<3, 5, 7>();
        }
      }
      Ops::template Store<0>(s + r * lds + g * 16, ss);
      if (two_g) Ops::template Store<1>(s + r * lds + (g + 1) * 16, ss);
      if (two_r) {
        Ops::template Store<2>(s + (r + 16) * lds + g * 16, ss);
        if (two_g) Ops::template Store<3>(s + (r + 16) * lds + (g + 1) * 16, ss);
      }
    }
  }
}

// O rows [0, mfull) += P V over keys [0, kfull) (kfull a multiple of 32) on tiles: C tiles
// 0-3 a 2 x 2 block of 16 x 16 outputs (two row blocks, two column blocks), A tiles 4-5
// the rows' 32 probabilities of the step, B tiles 6-7 its 16 pair rows of 16 columns.
template <class Ops>
GPE_AMX_TARGET void AccumulateTiles(const uint16_t* p, int64_t ldp, int64_t mfull,
                                    int64_t kfull, const uint16_t* pairs, int64_t dp, float* o,
                                    int64_t ldo) {
  const int64_t ps = ldp * 2, vs = dp * 4, os = ldo * 4;
  for (int64_t r = 0; r < mfull; r += 32) {
    const bool two_r = r + 16 < mfull;
    for (int64_t c = 0; c < dp; c += 32) {
      const bool two_c = c + 16 < dp;
      Ops::template Load<0>(o + r * ldo + c, os);
      if (two_c) Ops::template Load<1>(o + r * ldo + c + 16, os);
      if (two_r) {
        Ops::template Load<2>(o + (r + 16) * ldo + c, os);
        if (two_c) Ops::template Load<3>(o + (r + 16) * ldo + c + 16, os);
      }
      for (int64_t k = 0; k < kfull; k += 32) {
        const uint16_t* vk = pairs + (k / 2) * 2 * dp;
        Ops::template Load<4>(p + r * ldp + k, ps);
        Ops::template Load<6>(vk + 2 * c, vs);
        Ops::template Dot<0, 4, 6>();
        if (two_c) {
          Ops::template Load<7>(vk + 2 * (c + 16), vs);
          Ops::template Dot<1, 4, 7>();
        }
        if (two_r) {
          Ops::template Load<5>(p + (r + 16) * ldp + k, ps);
          Ops::template Dot<2, 5, 6>();
          if (two_c) Ops::template Dot<3, 5, 7>();
        }
      }
      Ops::template Store<0>(o + r * ldo + c, os);
      if (two_c) Ops::template Store<1>(o + r * ldo + c + 16, os);
      if (two_r) {
        Ops::template Store<2>(o + (r + 16) * ldo + c, os);
        if (two_c) Ops::template Store<3>(o + (r + 16) * ldo + c + 16, os);
      }
    }
  }
}

template <class Ops>
GPE_AMX_TARGET void ScoreWithConfig(const uint16_t* q, int64_t ldq, int64_t mfull,
                                    int64_t pair_rows, const uint16_t* panels,
                                    int64_t num_panels, float* s, int64_t lds) {
  Ops::Config();
  ScoreTiles<Ops>(q, ldq, mfull, pair_rows, panels, num_panels, s, lds);
  Ops::Release();
}

template <class Ops>
GPE_AMX_TARGET void AccumulateWithConfig(const uint16_t* p, int64_t ldp, int64_t mfull,
                                         int64_t kfull, const uint16_t* pairs, int64_t dp,
                                         float* o, int64_t ldo) {
  Ops::Config();
  AccumulateTiles<Ops>(p, ldp, mfull, kfull, pairs, dp, o, ldo);
  Ops::Release();
}

// Ones for the dot-product kernels' alpha where the tiles have rescaled already.
const float* Ones(int64_t n) {
  thread_local std::vector<float> ones;
  if (static_cast<int64_t>(ones.size()) < n) ones.assign(static_cast<size_t>(n), 1.0f);
  return ones.data();
}

}  // namespace

bool AmxHardwareUsable() { return measure::HasAmxBf16Tiles(); }

bool AmxUsable() { return AmxEmulated() || AmxHardwareUsable(); }

void SetAmxEmulationForTest(bool on) { g_emulate.store(on, std::memory_order_relaxed); }
int64_t AmxEmulatedDotsForTest() { return g_emulated_dots.load(std::memory_order_relaxed); }
bool AmxEmulated() { return g_emulate.load(std::memory_order_relaxed); }

void ScoreTileAmx(const uint16_t* q, int64_t ldq, int64_t mq, int64_t d,
                  const uint16_t* panels, int64_t num_panels, float* s, int64_t lds) {
  const int64_t pair_rows = (d + 1) / 2, mfull = mq / 16 * 16;
  // Neither tiles nor their emulation (the emulation switched off after a plan chose the
  // tiles): the dot products, never an instruction the CPU lacks.
  if (pair_rows % 16 != 0 || mfull == 0 || num_panels == 0 || !AmxUsable()) {
    ScoreTileBf16(q, ldq, mq, d, panels, num_panels, s, lds);
    return;
  }
  if (AmxEmulated()) {
    ScoreWithConfig<EmulatedOps>(q, ldq, mfull, pair_rows, panels, num_panels, s, lds);
  } else {
#if defined(__x86_64__)
    ScoreWithConfig<HardwareOps>(q, ldq, mfull, pair_rows, panels, num_panels, s, lds);
#endif
  }
  if (mfull < mq) {
    ScoreTileBf16(q + mfull * ldq, ldq, mq - mfull, d, panels, num_panels, s + mfull * lds, lds);
  }
}

void AccumulateTileAmx(const uint16_t* p, int64_t ldp, int64_t mq, int64_t nk,
                       const uint16_t* pairs, int64_t dp, const float* alpha, float* o,
                       int64_t ldo) {
  const int64_t mfull = mq / 16 * 16, kfull = nk / 32 * 32;
  if (mfull == 0 || kfull == 0 || !AmxUsable()) {
    AccumulateTileBf16(p, ldp, mq, nk, pairs, dp, alpha, o, ldo);
    return;
  }
  // The tiles add to O as it stands: its rows rescaled first (lazy rescaling leaves most
  // alpha at 1).
  for (int64_t r = 0; r < mfull; ++r) {
    if (alpha[r] == 1.0f) continue;
    float* orow = o + r * ldo;
    for (int64_t c = 0; c < dp; ++c) orow[c] *= alpha[r];
  }
  if (AmxEmulated()) {
    AccumulateWithConfig<EmulatedOps>(p, ldp, mfull, kfull, pairs, dp, o, ldo);
  } else {
#if defined(__x86_64__)
    AccumulateWithConfig<HardwareOps>(p, ldp, mfull, kfull, pairs, dp, o, ldo);
#endif
  }
  if (kfull < nk) {  // the last keys, fewer than 32
    AccumulateTileBf16(p + kfull, ldp, mfull, nk - kfull, pairs + kfull * dp, dp, Ones(mfull),
                       o, ldo);
  }
  if (mfull < mq) {  // the last rows, fewer than 16
    AccumulateTileBf16(p + mfull * ldp, ldp, mq - mfull, nk, pairs, dp, alpha + mfull,
                       o + mfull * ldo, ldo);
  }
}

void TileDotBf16Emulated(float* c, const uint16_t* a, const uint16_t* b) {
  EmulatedDot(c, reinterpret_cast<const unsigned char*>(a),
              reinterpret_cast<const unsigned char*>(b));
}

#if defined(__x86_64__)
GPE_AMX_TARGET void TileDotBf16Hardware(float* c, const uint16_t* a, const uint16_t* b) {
  HardwareOps::Config();
  HardwareOps::Load<0>(c, 64);
  HardwareOps::Load<1>(a, 64);
  HardwareOps::Load<2>(b, 64);
  HardwareOps::Dot<0, 1, 2>();
  HardwareOps::Store<0>(c, 64);
  HardwareOps::Release();
}
#else
void TileDotBf16Hardware(float*, const uint16_t*, const uint16_t*) { __builtin_trap(); }
#endif

}  // namespace cpu
}  // namespace attention
}  // namespace gpe
