// The machine's limits, measured in the running binary, so that every benchmark can report
// its figures as ratios (timings differ between machines by 2x and more; only ratios taken
// in one run compare).
//
// - FmaPeakGflops: float32 fused multiply-add throughput with the widest vector ISA the
//   CPU has (AVX-512, else AVX2+FMA, else SSE2 multiply+add), chosen at run time, on
//   `threads` threads; 2 flops per lane per FMA.
// - TriadBandwidthGBs: STREAM's triad a[i] = b[i] + s c[i] over float arrays far larger
//   than the last-level cache, on `threads` threads; counts 12 bytes per element (two
//   reads, one write), as STREAM does.
// Both take the best of a few repetitions, so they estimate what the machine can do, not
// an average disturbed by other processes. The triad's arrays are LargeFloats (2 MiB pages
// where the kernel grants them): bandwidth-bound benchmarks put their data in the same
// kind of memory, so that their fraction of the triad compares like with like.
#ifndef MEASURE_MACHINE_LIMITS_H_
#define MEASURE_MACHINE_LIMITS_H_

#include <cstdint>
#include <string>

namespace gpe {
namespace measure {

// n floats (uninitialised: the first touch, e.g. by the threads that will stream them,
// places the pages) aligned to 2 MiB, advised for transparent huge pages
// (madvise(MADV_HUGEPAGE): granted where /sys/kernel/mm/transparent_hugepage/enabled is
// "madvise" or "always"; plain 4 KiB pages otherwise). Streams over huge pages need no
// page walk per 4 KiB and let the hardware prefetchers run across 4 KiB boundaries: a
// one-stream read measured up to 30% faster here. Move-only.
class LargeFloats {
 public:
  LargeFloats() = default;
  explicit LargeFloats(int64_t n);
  LargeFloats(LargeFloats&& other) noexcept;
  LargeFloats& operator=(LargeFloats&& other) noexcept;
  LargeFloats(const LargeFloats&) = delete;
  LargeFloats& operator=(const LargeFloats&) = delete;
  ~LargeFloats();

  float* data() { return data_; }
  const float* data() const { return data_; }
  int64_t size() const { return size_; }
  float* begin() { return data_; }
  float* end() { return data_ + size_; }
  float& operator[](int64_t i) { return data_[i]; }
  const float& operator[](int64_t i) const { return data_[i]; }

 private:
  float* data_ = nullptr;
  int64_t size_ = 0;
};

// "avx512", "avx2" or "sse2": the ISA FmaPeakGflops uses on this CPU.
std::string WidestVectorIsa();

// threads >= 1.
double FmaPeakGflops(int threads);

// threads >= 1; bytes_per_array defaults to 256 MiB (three arrays: 768 MiB). Each of
// the `threads` threads first touches, then streams, its own contiguous chunk of every
// array (TriadChunk), so on a host of several NUMA nodes the arrays' pages spread over the
// nodes the threads run on.
double TriadBandwidthGBs(int threads, int64_t bytes_per_array = int64_t{256} << 20);

// Thread t's chunk [*lo, *hi) of n elements split over `threads` threads as the triad
// splits its arrays: ceil(n / threads) elements each, the last ones shorter or empty.
void TriadChunk(int64_t n, int threads, int t, int64_t* lo, int64_t* hi);

// Writes `value` to every element of *x on `threads` threads (values below 1: one), each
// thread the chunk the triad's thread of the same index streams (TriadChunk). The first
// write places a page (Linux's first-touch policy), so a buffer filled here lies on the
// NUMA nodes the way the triad's arrays do; one filled by a single thread lies on that
// thread's node, and a bandwidth-bound run over it, compared to the triad, reads one
// node's bandwidth against all nodes'. Later writes (random values from one generator,
// say) leave the pages where they are.
void FillLikeTriad(LargeFloats* x, float value, int threads);

// The host's NUMA nodes with CPUs: the node<N> directories under sys_node_dir (Linux's
// /sys/devices/system/node) whose cpulist is not empty (memory-only nodes, CXL or HBM in
// flat mode, run no thread; a directory without the file counts); 1 where there are none
// (a kernel without NUMA, no sysfs).
// Printed beside the triad: on several nodes its bandwidth is the sum over the nodes.
int NumaNodeCount(const std::string& sys_node_dir = "/sys/devices/system/node");

// Whether the CPU has AVX512_BF16's vdpbf16ps (and AVX512F).
bool HasBf16DotProductInstruction();

// bfloat16 dot-product throughput (vdpbf16ps: each float lane adds two bf16 products, 4
// flops per lane per instruction) on `threads` threads, the bf16 limit of CPUs without
// AMX; 0 where the CPU lacks the instruction. About twice FmaPeakGflops on AMD Zen 4 and
// about half of it on Intel Xeons with AMX (whose tiles are their bf16 limit).
double Bf16DotPeakGflops(int threads);

// Whether this process may run Intel AMX-BF16 tile instructions: CPUID.(7, 0):EDX bits 24
// (AMX-TILE) and 22 (AMX-BF16), the OS saving the tile state (XCR0 bits 17 and 18), and
// Linux's per-process permission, arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA),
// requested on the first call (a tile instruction before it raises SIGILL); the answer
// is kept for the process.
bool HasAmxBf16Tiles();

// The 64-byte AMX tile configuration (LDTILECFG's operand; Intel SDM vol. 2) of palette
// 1 with tiles 0-7 each 16 rows of 64 bytes, the shape both the peak probe and the
// attention's tile kernels use.
void AmxTileConfig16x64(unsigned char cfg[64]);

// AMX TDPBF16PS throughput on `threads` threads (16 x 16 x 32 multiply-adds, 16,384
// flops, per instruction; six independent accumulator tiles), the bf16 limit of CPUs
// with AMX; 0 where HasAmxBf16Tiles() is false.
double AmxBf16PeakGflops(int threads);

// Hardware threads available to this process (at least 1).
int AvailableThreads();

}  // namespace measure
}  // namespace gpe

#endif  // MEASURE_MACHINE_LIMITS_H_
