#include "measure/machine_limits.h"

#include <cpuid.h>
#include <immintrin.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace gpe {
namespace measure {
namespace {

using Clock = std::chrono::steady_clock;

// Each kernel keeps 12 independent accumulators in named registers, enough to cover FMA latency (4 cycles)
// times two FMA ports, and returns a value depending on all of them so the loop stays.
constexpr int kAccumulators = 12;

// The kernels differ only in their vector type V and intrinsics, so one macro writes each:
// NAME(iterations) starts accumulator k at 0.001 k in every lane (SET1: broadcast), steps
// every accumulator a <- STEP(a, m, c) per iteration, sums them into a0 in order (ADD)
// and returns the sum of a0's lanes (STORE: aligned store; _mm512_reduce_add_ps trips
// GCC 12's -Wuninitialized inside its own header). The caller puts the ISA's target
// attribute before it.
#define GPE_DEFINE_FMA_LOOP(NAME, V, SET1, STEP, ADD, STORE)                                      \
  float NAME(int64_t iterations) {                                                                \
    static_assert(kAccumulators == 12, "GPE_DEFINE_FMA_LOOP names twelve accumulators");          \
    V a0 = SET1(0.001f * 0), a1 = SET1(0.001f * 1), a2 = SET1(0.001f * 2), a3 = SET1(0.001f * 3), \
      a4 = SET1(0.001f * 4), a5 = SET1(0.001f * 5), a6 = SET1(0.001f * 6), a7 = SET1(0.001f * 7), \
      a8 = SET1(0.001f * 8), a9 = SET1(0.001f * 9), a10 = SET1(0.001f * 10),                      \
      a11 = SET1(0.001f * 11);                                                                    \
    const V m = SET1(0.999999f), c = SET1(1e-7f);                                                 \
    for (int64_t it = 0; it < iterations; ++it) {                                                 \
      a0 = STEP(a0, m, c);                                                                        \
      a1 = STEP(a1, m, c);                                                                        \
      a2 = STEP(a2, m, c);                                                                        \
      a3 = STEP(a3, m, c);                                                                        \
      a4 = STEP(a4, m, c);                                                                        \
      a5 = STEP(a5, m, c);                                                                        \
      a6 = STEP(a6, m, c);                                                                        \
      a7 = STEP(a7, m, c);                                                                        \
      a8 = STEP(a8, m, c);                                                                        \
      a9 = STEP(a9, m, c);                                                                        \
      a10 = STEP(a10, m, c);                                                                      \
      a11 = STEP(a11, m, c);                                                                      \
    }                                                                                             \
    a0 = ADD(a0, a1);                                                                             \
    a0 = ADD(a0, a2);                                                                             \
    a0 = ADD(a0, a3);                                                                             \
    a0 = ADD(a0, a4);                                                                             \
    a0 = ADD(a0, a5);                                                                             \
    a0 = ADD(a0, a6);                                                                             \
    a0 = ADD(a0, a7);                                                                             \
    a0 = ADD(a0, a8);                                                                             \
    a0 = ADD(a0, a9);                                                                             \
    a0 = ADD(a0, a10);                                                                            \
    a0 = ADD(a0, a11);                                                                            \
    alignas(sizeof(V)) float lanes[sizeof(V) / sizeof(float)];                                    \
    STORE(lanes, a0);                                                                             \
    float total = 0;                                                                              \
    for (float v : lanes) total += v;                                                             \
    return total;                                                                                 \
  }

__attribute__((target("avx512f")))
GPE_DEFINE_FMA_LOOP(FmaLoopAvx512, __m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps,
                    _mm512_store_ps)

__attribute__((target("avx2,fma")))
GPE_DEFINE_FMA_LOOP(FmaLoopAvx2, __m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps,
                    _mm256_store_ps)

// Without FMA: a multiply and an add, counted as 2 flops per lane.
inline __m128 MulAddSse2(__m128 a, __m128 m, __m128 c) { return _mm_add_ps(_mm_mul_ps(a, m), c); }
GPE_DEFINE_FMA_LOOP(FmaLoopSse2, __m128, _mm_set1_ps, MulAddSse2, _mm_add_ps, _mm_store_ps)

#undef GPE_DEFINE_FMA_LOOP

// vdpbf16ps (AVX512_BF16): each step adds two bf16 products per float lane, 64 flops per
// instruction. The operands are bf16 pairs (1.0, 1.0) and (~1e-7, ~1e-7): normal numbers
// throughout, so no denormal assist slows the loop.
__attribute__((target("avx512f,avx512bf16"))) float Bf16DotLoop(int64_t iterations) {
  static_assert(kAccumulators == 12, "Bf16DotLoop names twelve accumulators");
  // Named accumulators, as the FMA loops': an array of them is kept in memory by
  // unoptimised and sanitizer builds, which then time loads and stores instead.
  __m512 a0 = _mm512_set1_ps(0.000f), a1 = _mm512_set1_ps(0.001f), a2 = _mm512_set1_ps(0.002f),
         a3 = _mm512_set1_ps(0.003f), a4 = _mm512_set1_ps(0.004f), a5 = _mm512_set1_ps(0.005f),
         a6 = _mm512_set1_ps(0.006f), a7 = _mm512_set1_ps(0.007f), a8 = _mm512_set1_ps(0.008f),
         a9 = _mm512_set1_ps(0.009f), a10 = _mm512_set1_ps(0.010f), a11 = _mm512_set1_ps(0.011f);
  const __m512bh m = (__m512bh)_mm512_set1_epi32(0x3F803F80);  // bf16 1.0, twice
  const __m512bh c = (__m512bh)_mm512_set1_epi32(0x33D733D7);  // bf16 ~1e-7, twice
  for (int64_t it = 0; it < iterations; ++it) {
    a0 = _mm512_dpbf16_ps(a0, m, c);
    a1 = _mm512_dpbf16_ps(a1, m, c);
    a2 = _mm512_dpbf16_ps(a2, m, c);
    a3 = _mm512_dpbf16_ps(a3, m, c);
    a4 = _mm512_dpbf16_ps(a4, m, c);
    a5 = _mm512_dpbf16_ps(a5, m, c);
    a6 = _mm512_dpbf16_ps(a6, m, c);
    a7 = _mm512_dpbf16_ps(a7, m, c);
    a8 = _mm512_dpbf16_ps(a8, m, c);
    a9 = _mm512_dpbf16_ps(a9, m, c);
    a10 = _mm512_dpbf16_ps(a10, m, c);
    a11 = _mm512_dpbf16_ps(a11, m, c);
  }
  a0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                     _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  a0 = _mm512_add_ps(a0, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, a0);
  float total = 0;
  for (float v : lanes) total += v;
  return total;
}

int Lanes(const std::string& isa) { return isa == "avx512" ? 16 : isa == "avx2" ? 8 : 4; }

float RunFmaLoop(const std::string& isa, int64_t iterations) {
  if (isa == "avx512") return FmaLoopAvx512(iterations);
  if (isa == "avx2") return FmaLoopAvx2(iterations);
  return FmaLoopSse2(iterations);
}

// Runs fn(thread_index) on `threads` threads started together; returns the seconds from
// the common start to the last finish.
template <class Fn>
double TimeParallel(int threads, Fn fn) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  Clock::time_point start;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      fn(t);
    });
  }
  while (ready.load() < threads) {
  }
  start = Clock::now();
  go.store(true, std::memory_order_release);
  for (std::thread& th : pool) th.join();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::atomic<float> g_sink{0};

}  // namespace

std::string WidestVectorIsa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "avx512";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
  return "sse2";
}

int AvailableThreads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

double FmaPeakGflops(int threads) {
  threads = std::max(1, threads);
  const std::string isa = WidestVectorIsa();
  // ~50 ms per repetition at a few GHz.
  const int64_t iterations = (int64_t{40} << 20) / (Lanes(isa) / 4);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double seconds = TimeParallel(threads, [&](int) {
      g_sink.store(RunFmaLoop(isa, iterations), std::memory_order_relaxed);
    });
    const double flops = 2.0 * Lanes(isa) * kAccumulators * static_cast<double>(iterations) * threads;
    best = std::max(best, flops / seconds * 1e-9);
  }
  return best;
}

bool HasBf16DotProductInstruction() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
}

double Bf16DotPeakGflops(int threads) {
  if (!HasBf16DotProductInstruction()) return 0.0;
  threads = std::max(1, threads);
  const int64_t iterations = int64_t{10} << 20;  // ~50 ms per repetition, as above
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double seconds = TimeParallel(threads, [&](int) {
      g_sink.store(Bf16DotLoop(iterations), std::memory_order_relaxed);
    });
    const double flops = 64.0 * kAccumulators * static_cast<double>(iterations) * threads;
    best = std::max(best, flops / seconds * 1e-9);
  }
  return best;
}

namespace {

bool RequestAmxTiles() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  if ((d & (1u << 24)) == 0 || (d & (1u << 22)) == 0) return false;  // AMX-TILE, AMX-BF16
  if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & (1u << 27)) == 0) return false;  // OSXSAVE
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  (void)hi;
  if ((lo & (3u << 17)) != (3u << 17)) return false;  // XTILECFG, XTILEDATA
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// `iterations` rounds of six TDPBF16PS into tiles 0-5 from tiles 6 and 7 (bf16 2^-8
// everywhere: non-zero operands, as the kernels' power and clock see them, whose sums stay
// far from overflow), the tiles configured and released here.
__attribute__((target("amx-tile,amx-bf16"))) float AmxLoop(int64_t iterations) {
  alignas(64) unsigned char cfg[64];
  AmxTileConfig16x64(cfg);
  alignas(64) float out[256];
  _tile_loadconfig(cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  alignas(64) uint16_t operand[16 * 32];
  std::fill(operand, operand + 16 * 32, uint16_t{0x3B80});  // 2^-8
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  for (int64_t i = 0; i < iterations; ++i) {
    _tile_dpbf16ps(0, 6, 7);
    _tile_dpbf16ps(1, 6, 7);
    _tile_dpbf16ps(2, 6, 7);
    _tile_dpbf16ps(3, 6, 7);
    _tile_dpbf16ps(4, 6, 7);
    _tile_dpbf16ps(5, 6, 7);
  }
  _tile_stored(0, out, 64);
  _tile_release();
  return out[0];
}

}  // namespace

void AmxTileConfig16x64(unsigned char cfg[64]) {
  std::memset(cfg, 0, 64);
  cfg[0] = 1;  // palette 1; start_row 0
  for (int i = 0; i < 8; ++i) {
    const uint16_t colsb = 64;
    std::memcpy(cfg + 16 + 2 * i, &colsb, sizeof(colsb));  // bytes per row, tile i
    cfg[48 + i] = 16;                                       // rows, tile i
  }
}

bool HasAmxBf16Tiles() {
  static const bool usable = RequestAmxTiles();
  return usable;
}

double AmxBf16PeakGflops(int threads) {
  if (!HasAmxBf16Tiles()) return 0.0;
  threads = std::max(1, threads);
  const int64_t iterations = int64_t{1} << 18;  // ~30 ms per repetition at ~1,000 flops a cycle
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double seconds = TimeParallel(threads, [&](int) {
      g_sink.store(AmxLoop(iterations), std::memory_order_relaxed);
    });
    const double flops = 16384.0 * 6 * static_cast<double>(iterations) * threads;
    best = std::max(best, flops / seconds * 1e-9);
  }
  return best;
}

LargeFloats::LargeFloats(int64_t n) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t bytes = (static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float) + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, bytes);
  if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(p, bytes, MADV_HUGEPAGE);  // advice only: plain pages where refused
#endif
  data_ = static_cast<float*>(p);
  size_ = n;
}
LargeFloats::LargeFloats(LargeFloats&& other) noexcept : data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}
LargeFloats& LargeFloats::operator=(LargeFloats&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}
LargeFloats::~LargeFloats() { std::free(data_); }

void TriadChunk(int64_t n, int threads, int t, int64_t* lo, int64_t* hi) {
  threads = std::max(1, threads);
  const int64_t chunk = (n + threads - 1) / threads;
  *lo = std::min(n, static_cast<int64_t>(t) * chunk);
  *hi = std::min(n, *lo + chunk);
}

void FillLikeTriad(LargeFloats* x, float value, int threads) {
  threads = std::max(1, threads);
  const int64_t n = x->size();
  float* data = x->data();
  auto fill = [&](int t) {
    int64_t lo = 0, hi = 0;
    TriadChunk(n, threads, t, &lo, &hi);
    std::fill(data + lo, data + hi, value);
  };
  if (threads == 1) {
    fill(0);
    return;
  }
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(fill, t);
  for (std::thread& th : pool) th.join();
}

int NumaNodeCount(const std::string& sys_node_dir) {
  std::error_code ec;
  std::filesystem::directory_iterator it(sys_node_dir, ec);
  if (ec) return 1;
  int nodes = 0;
  for (const std::filesystem::directory_entry& e : it) {
    const std::string name = e.path().filename().string();
    // node0, node1, ...: not "possible", "online" and the other files beside them.
    if (name.size() > 4 && name.compare(0, 4, "node") == 0 &&
        name.find_first_not_of("0123456789", 4) == std::string::npos && e.is_directory(ec)) {
      // A node without CPUs (memory only: CXL, HBM in flat mode) runs no triad thread:
      // its cpulist is empty. A node without the file (older kernels) counts.
      std::ifstream cpus(e.path() / "cpulist");
      std::string list;
      if (cpus && !(cpus >> list)) continue;
      ++nodes;
    }
  }
  return std::max(1, nodes);
}

double TriadBandwidthGBs(int threads, int64_t bytes_per_array) {
  threads = std::max(1, threads);
  const int64_t n = std::max<int64_t>(bytes_per_array / 4, 1024 * threads);
  LargeFloats a(n), b(n), c(n);
  // First touch by the thread that later streams the chunk (NUMA-friendly).
  TimeParallel(threads, [&](int t) {
    int64_t lo = 0, hi = 0;
    TriadChunk(n, threads, t, &lo, &hi);
    for (int64_t i = lo; i < hi; ++i) {
      a[i] = 0.0f;
      b[i] = 1.0f;
      c[i] = 2.0f;
    }
  });
  const float s = 3.0f;
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double seconds = TimeParallel(threads, [&](int t) {
      int64_t lo = 0, hi = 0;
      TriadChunk(n, threads, t, &lo, &hi);
      float* __restrict pa = a.data();
      const float* __restrict pb = b.data();
      const float* __restrict pc = c.data();
      for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + s * pc[i];
    });
    best = std::max(best, 12.0 * static_cast<double>(n) / seconds * 1e-9);
  }
  g_sink.store(a[n / 2], std::memory_order_relaxed);
  return best;
}

}  // namespace measure
}  // namespace gpe
