#include "tools/machine_limits.h"

#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace gpe {
namespace tools {
namespace {

using Clock = std::chrono::steady_clock;

// Each kernel keeps 12 independent accumulators in named registers, enough to cover FMA latency (4 cycles)
// times two FMA ports, and returns a value depending on all of them so the loop stays.
constexpr int kAccumulators = 12;

__attribute__((target("avx512f"))) float FmaLoopAvx512(int64_t iterations) {
  __m512 a0 = _mm512_set1_ps(0.001f * 0), a1 = _mm512_set1_ps(0.001f * 1), a2 = _mm512_set1_ps(0.001f * 2), a3 = _mm512_set1_ps(0.001f * 3), a4 = _mm512_set1_ps(0.001f * 4), a5 = _mm512_set1_ps(0.001f * 5), a6 = _mm512_set1_ps(0.001f * 6), a7 = _mm512_set1_ps(0.001f * 7), a8 = _mm512_set1_ps(0.001f * 8), a9 = _mm512_set1_ps(0.001f * 9), a10 = _mm512_set1_ps(0.001f * 10), a11 = _mm512_set1_ps(0.001f * 11);
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
    a0 = _mm512_fmadd_ps(a0, m, c);
    a1 = _mm512_fmadd_ps(a1, m, c);
    a2 = _mm512_fmadd_ps(a2, m, c);
    a3 = _mm512_fmadd_ps(a3, m, c);
    a4 = _mm512_fmadd_ps(a4, m, c);
    a5 = _mm512_fmadd_ps(a5, m, c);
    a6 = _mm512_fmadd_ps(a6, m, c);
    a7 = _mm512_fmadd_ps(a7, m, c);
    a8 = _mm512_fmadd_ps(a8, m, c);
    a9 = _mm512_fmadd_ps(a9, m, c);
    a10 = _mm512_fmadd_ps(a10, m, c);
    a11 = _mm512_fmadd_ps(a11, m, c);
  }
  a0 = _mm512_add_ps(a0, a1);
  a0 = _mm512_add_ps(a0, a2);
  a0 = _mm512_add_ps(a0, a3);
  a0 = _mm512_add_ps(a0, a4);
  a0 = _mm512_add_ps(a0, a5);
  a0 = _mm512_add_ps(a0, a6);
  a0 = _mm512_add_ps(a0, a7);
  a0 = _mm512_add_ps(a0, a8);
  a0 = _mm512_add_ps(a0, a9);
  a0 = _mm512_add_ps(a0, a10);
  a0 = _mm512_add_ps(a0, a11);
  // (_mm512_reduce_add_ps trips GCC 12's -Wuninitialized inside its own header.)
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, a0);
  float total = 0;
  for (float v : lanes) total += v;
  return total;
}

__attribute__((target("avx2,fma"))) float FmaLoopAvx2(int64_t iterations) {
  __m256 a0 = _mm256_set1_ps(0.001f * 0), a1 = _mm256_set1_ps(0.001f * 1), a2 = _mm256_set1_ps(0.001f * 2), a3 = _mm256_set1_ps(0.001f * 3), a4 = _mm256_set1_ps(0.001f * 4), a5 = _mm256_set1_ps(0.001f * 5), a6 = _mm256_set1_ps(0.001f * 6), a7 = _mm256_set1_ps(0.001f * 7), a8 = _mm256_set1_ps(0.001f * 8), a9 = _mm256_set1_ps(0.001f * 9), a10 = _mm256_set1_ps(0.001f * 10), a11 = _mm256_set1_ps(0.001f * 11);
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
    a0 = _mm256_fmadd_ps(a0, m, c);
    a1 = _mm256_fmadd_ps(a1, m, c);
    a2 = _mm256_fmadd_ps(a2, m, c);
    a3 = _mm256_fmadd_ps(a3, m, c);
    a4 = _mm256_fmadd_ps(a4, m, c);
    a5 = _mm256_fmadd_ps(a5, m, c);
    a6 = _mm256_fmadd_ps(a6, m, c);
    a7 = _mm256_fmadd_ps(a7, m, c);
    a8 = _mm256_fmadd_ps(a8, m, c);
    a9 = _mm256_fmadd_ps(a9, m, c);
    a10 = _mm256_fmadd_ps(a10, m, c);
    a11 = _mm256_fmadd_ps(a11, m, c);
  }
  a0 = _mm256_add_ps(a0, a1);
  a0 = _mm256_add_ps(a0, a2);
  a0 = _mm256_add_ps(a0, a3);
  a0 = _mm256_add_ps(a0, a4);
  a0 = _mm256_add_ps(a0, a5);
  a0 = _mm256_add_ps(a0, a6);
  a0 = _mm256_add_ps(a0, a7);
  a0 = _mm256_add_ps(a0, a8);
  a0 = _mm256_add_ps(a0, a9);
  a0 = _mm256_add_ps(a0, a10);
  a0 = _mm256_add_ps(a0, a11);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, a0);
  float total = 0;
  for (float v : lanes) total += v;
  return total;
}

// Without FMA: a multiply and an add, counted as 2 flops per lane.
float FmaLoopSse2(int64_t iterations) {
  __m128 a0 = _mm_set1_ps(0.001f * 0), a1 = _mm_set1_ps(0.001f * 1), a2 = _mm_set1_ps(0.001f * 2), a3 = _mm_set1_ps(0.001f * 3), a4 = _mm_set1_ps(0.001f * 4), a5 = _mm_set1_ps(0.001f * 5), a6 = _mm_set1_ps(0.001f * 6), a7 = _mm_set1_ps(0.001f * 7), a8 = _mm_set1_ps(0.001f * 8), a9 = _mm_set1_ps(0.001f * 9), a10 = _mm_set1_ps(0.001f * 10), a11 = _mm_set1_ps(0.001f * 11);
  const __m128 m = _mm_set1_ps(0.999999f), c = _mm_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
    a0 = _mm_add_ps(_mm_mul_ps(a0, m), c);
    a1 = _mm_add_ps(_mm_mul_ps(a1, m), c);
    a2 = _mm_add_ps(_mm_mul_ps(a2, m), c);
    a3 = _mm_add_ps(_mm_mul_ps(a3, m), c);
    a4 = _mm_add_ps(_mm_mul_ps(a4, m), c);
    a5 = _mm_add_ps(_mm_mul_ps(a5, m), c);
    a6 = _mm_add_ps(_mm_mul_ps(a6, m), c);
    a7 = _mm_add_ps(_mm_mul_ps(a7, m), c);
    a8 = _mm_add_ps(_mm_mul_ps(a8, m), c);
    a9 = _mm_add_ps(_mm_mul_ps(a9, m), c);
    a10 = _mm_add_ps(_mm_mul_ps(a10, m), c);
    a11 = _mm_add_ps(_mm_mul_ps(a11, m), c);
  }
  a0 = _mm_add_ps(a0, a1);
  a0 = _mm_add_ps(a0, a2);
  a0 = _mm_add_ps(a0, a3);
  a0 = _mm_add_ps(a0, a4);
  a0 = _mm_add_ps(a0, a5);
  a0 = _mm_add_ps(a0, a6);
  a0 = _mm_add_ps(a0, a7);
  a0 = _mm_add_ps(a0, a8);
  a0 = _mm_add_ps(a0, a9);
  a0 = _mm_add_ps(a0, a10);
  a0 = _mm_add_ps(a0, a11);
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, a0);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
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

double TriadBandwidthGBs(int threads, int64_t bytes_per_array) {
  threads = std::max(1, threads);
  const int64_t n = std::max<int64_t>(bytes_per_array / 4, 1024 * threads);
  LargeFloats a(n), b(n), c(n);
  const int64_t chunk = (n + threads - 1) / threads;
  // First touch by the thread that later streams the chunk (NUMA-friendly).
  TimeParallel(threads, [&](int t) {
    const int64_t lo = t * chunk, hi = std::min(n, lo + chunk);
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
      const int64_t lo = t * chunk, hi = std::min(n, lo + chunk);
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

}  // namespace tools
}  // namespace gpe
