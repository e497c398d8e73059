// SIMD tile kernels of the CPU attention (cpu_attention.h), compiled once per
// instruction set with Highway (kernels.cc: AVX-512, AVX2 and a portable baseline) and
// chosen at run time from the CPU's features (HWY_DYNAMIC_DISPATCH: the best target the
// CPU supports, on each call). kernels_bf16.h's kernels are dispatched the same way, over
// the same targets. Tests force each target of CompiledTargets() in turn with
// hwy::SetSupportedTargetsForTest (0 restores the CPU's own). Internal to attention/cpu;
// the tests call them directly against plain loops.
//
// Conventions shared by every function here (row-major, strides in floats):
//  - Scores live in the base-2 log domain: the driver multiplies q by
//    softmax_scale * log2(e) and biases by log2(e), so softmax is exp2(s - max).
//  - A key panel holds kPanel consecutive keys transposed: panel[c * kPanel + j] is
//    component c of key j. A key block of nk keys occupies ceil(nk / kPanel) panels; keys
//    past nk are zero (their scores are masked by the caller).
//  - Value rows and output-accumulator rows are padded to a multiple of kVecPad floats;
//    padded columns are zero and stay zero.
#ifndef ATTENTION_CPU_KERNELS_H_
#define ATTENTION_CPU_KERNELS_H_

#include <cmath>
#include <cstdint>
#include <vector>

namespace gpe {
namespace attention {
namespace cpu {

inline constexpr int64_t kPanel = 64;   // keys per transposed key panel
inline constexpr int64_t kVecPad = 16;  // value/output rows padded to this many floats
// Rows ahead that loops over strided rows (a token stride apart, in different pages: a KV
// cache read in place, q / k / v rows loaded into the tiles) request.
inline constexpr int64_t kPrefetchRows = 8;

// Packs nk keys (row j at keys + j * ld, d components) into ceil(nk / kPanel) panels at
// `panels` (zero-filled past nk).
void PackKeyPanels(const float* keys, int64_t nk, int64_t ld, int64_t d, float* panels);

// s[r * lds + j] = sum_c q[r * ldq + c] * key_j[c] for r < mq and every j of
// `num_panels` panels (j < num_panels * kPanel). lds >= num_panels * kPanel.
void ScoreTile(const float* q, int64_t ldq, int64_t mq, int64_t d, const float* panels,
               int64_t num_panels, float* s, int64_t lds);

// Rows a kernel requests into the caches (software prefetch) while it computes, spread
// over its inner iterations: rows [0, rows) of each of `num` regions, row r of region i at
// base[i] + r * ld, row_floats floats each. The backward names the next query tile's rows
// (first read from memory otherwise, with the FMA units waiting on them).
struct PrefetchRows {
  const float* base[3] = {nullptr, nullptr, nullptr};
  int num = 0;
  int64_t rows = 0, ld = 0, row_floats = 0;
};

// ScoreTile's scores (bit for bit) while requesting the lines of `ahead`.
void ScoreTileAhead(const float* q, int64_t ldq, int64_t mq, int64_t d, const float* panels,
                    int64_t num_panels, float* s, int64_t lds, const PrefetchRows& ahead);

// Partial row sums of the softmax denominator are kept as kSumLanes floats per row
// (their sum is the row's sum), so that no tile needs a horizontal addition.
inline constexpr int64_t kSumLanes = 16;
// The reference maximum of a row moves only when a score exceeds it by more than this
// (base-2 units), bounding unnormalised probabilities by 2^8 (lazy rescaling).
inline constexpr float kRescaleSlack = 8.0f;

// The kernels' 2^f for |f| <= 1/2 (the float and bf16 softmaxes, the softcap's tanh):
// c[0] + c[1] f + ... + c[6] f^6, the degree-6 polynomial of least maximum relative
// error on [-1/2, 1/2] (Remez exchange: 1.9e-9 relative; 8e-8 with Horner's steps in
// float). Highest degree first.
inline constexpr float kExp2Poly[7] = {1.5347320e-04f, 1.3400154e-03f, 9.6184842e-03f,
                                       5.5503281e-02f, 2.4022647e-01f, 6.9314721e-01f, 1.0f};

// Lazy rescaling's move of row r's reference maximum to m_new (SoftmaxTile and the bf16
// softmax): alpha = exp2(m - m_new), the row's kSumLanes partial sums scaled by it, m =
// m_new. alpha is 0 on the first allowed tile, and also (not a subnormal) when the old
// reference is more than 126 below: subnormal accumulators would cost a microcode assist
// on every FMA that reads them.
inline void MoveRowReference(float m_new, float* m, float* l, float* alpha) {
  const float diff = *m - m_new;
  const float a = diff < -126.0f ? 0.0f : std::exp2(diff);
  for (int64_t i = 0; i < kSumLanes; ++i) l[i] *= a;
  *alpha = a;
  *m = m_new;
}

// Whether any of x[0 .. n) is NaN: the softmax's rare path for a row with nothing
// allowed yet (m = -inf), where a NaN score, which no maximum sees, must still make the
// row NaN rather than empty.
inline bool AnyNaN(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return true;
  }
  return false;
}

// One online-softmax step over an mq x n tile (n a multiple of the vector width, e.g. of
// kPanel; masked scores are -inf). Per row r with reference maximum m[r] (-inf before
// any allowed score) and partial sums l[r * kSumLanes .. + kSumLanes):
//  - if some score exceeds m[r] + kRescaleSlack: m' = max_j s, alpha[r] = exp2(m[r] - m'),
//    l *= alpha, m[r] = m'; otherwise alpha[r] = 1 and m[r] stays;
//  - s <- exp2(s - m[r]) (unnormalised probabilities, <= 2^kRescaleSlack), l += their sum.
// A row with m[r] = -inf (nothing allowed yet) gets s = 0, alpha = 1 and keeps l = 0,
// unless one of its scores is NaN: then m[r] = NaN. NaN scores give NaN probabilities
// (so l and o become NaN: the row's output and lse are NaN, as PyTorch's), +inf scores
// make m[r] = +inf and their probabilities NaN (inf - inf), -inf scores give 0.
// Every alpha is exp2 of a non-positive difference, so o and l only ever shrink.
// cap > 0 first applies SoftcapTile's cap (cap tanh(s / cap), the same bits) to every
// score that is not -inf, in the pass that finds the maxima (no pass of its own; masked
// scores stay -inf): for scores that take nothing between the softcap and the softmax
// (no bias, no additive mask).
void SoftmaxTile(float* s, int64_t lds, int64_t mq, int64_t n, float* m, float* l,
                 float* alpha, float cap = 0.0f);

// Gemma 2's logit softcap (descriptor.h, SOFTCAP) on a tile: s[r * lds + j] <-
// cap * tanh(s[r * lds + j] / cap) for r < mq, j < n (any n), cap > 0; where deriv is
// non-null, deriv[r * ldd + j] <- 1 - tanh^2, the derivative the backward multiplies
// dS by. NaN stays NaN (its derivative NaN); +-inf become +-cap (derivative 0).
// On the vectors: for |y| <= 1/2 an odd polynomial (cap tanh(y) = x + x z q(z), z =
// y^2, q of degree 3), else cap - 2 cap / (1 + 2^(2 y log2 e)) (the softmax's 2^f polynomial, a refined
// reciprocal r; the derivative as 4 r (1 - r)); absolute error of tanh ~2e-7 (Highway's
// tanh with its division cost 6x as much here). std::tanh on a tail shorter than one.
void SoftcapTile(float* s, int64_t lds, int64_t mq, int64_t n, float cap, float* deriv,
                 int64_t ldd);

// s[r * lds + j] <- exp2(s[r * lds + j] - shift[r]) for r < mq, j < n (n a multiple of
// the vector width): probabilities from scores and the forward's base-2 log-sum-exp.
// Rows with shift = -inf (no allowed key) become 0; rows with shift = NaN (the forward
// row was NaN) become NaN except where the score is -inf (masked), which stays 0.
void ExpTile(float* s, int64_t lds, int64_t mq, int64_t n, const float* shift);

// The softmax gradient in place of dP (FlashAttention-2, Dao 2023, Alg. 2:
// dS_ij = P_ij (dP_ij - D_i)): dp[r * ldd + j] <- p[r * ldp + j] * (dp[r * ldd + j] - dsum[r])
// for r < mq, j < n (n a multiple of the vector width), rounded as that expression is.
void SoftmaxGradTile(const float* p, int64_t ldp, float* dp, int64_t ldd, int64_t mq, int64_t n,
                     const float* dsum);

// o[r * ldo + c] <- alpha[r] * o[r * ldo + c] + sum_{j < nk} p[r * ldp + j] * v[j * ldv + c]
// for r < mq, c < dp (dp a multiple of kVecPad; ldv and ldo any strides >= dp). Value
// rows far apart (ldv > 2 dp, e.g. a KV cache read in place) are requested a few rows
// ahead; nearer rows are left to the hardware prefetchers.
void AccumulateTile(const float* p, int64_t ldp, int64_t mq, int64_t nk, const float* v,
                    int64_t ldv, int64_t dp, const float* alpha, float* o, int64_t ldo);

// The same with p read transposed, o <- alpha o + P^T V: p[j * ldp + r] for output row
// r < mq and reduction index j < nk (the backward's dV += P^T dO and dK += dS^T Q).
void AccumulateTileT(const float* p, int64_t ldp, int64_t mq, int64_t nk, const float* v,
                     int64_t ldv, int64_t dp, const float* alpha, float* o, int64_t ldo);

// AccumulateTile and AccumulateTileT with alpha = 1 (o += P V, o += P^T V; the same bits):
// the backward's accumulations, without a multiplication per output vector per call.
void AccumulateTileAdd(const float* p, int64_t ldp, int64_t mq, int64_t nk, const float* v,
                       int64_t ldv, int64_t dp, float* o, int64_t ldo);
void AccumulateTileTAdd(const float* p, int64_t ldp, int64_t mq, int64_t nk, const float* v,
                        int64_t ldv, int64_t dp, float* o, int64_t ldo);

// s[r * lds + j] += c * t[r * ldt + j] for r < nr, j < n: the additive biases' log2 e b
// added to score tiles, identically in forward and backward (one function: where the
// target has FMAs the compiler may fuse the product and the sum, alike in both). ldt may be negative (a Toeplitz tile from its diagonals: t the
// first row's start in them, ldt = -1). One dispatched call per tile.
void AddScaledTile(float* s, int64_t lds, const float* t, int64_t ldt, int64_t nr, int64_t n,
                   float c);

// s[r * lds + j] += c * (u[r] + w[j]) for r < nr, j < n, rounded as AddScaledTile of the
// tile u[r] + w[j] (a separable bias tile, AdditiveBias::SeparableTile, without forming
// it).
void AddSeparableTile(float* s, int64_t lds, const float* u, const float* w, int64_t nr,
                      int64_t n, float c);

// Whether rows [0, rows) of x (stride ld, d elements each) are all finite: float, and
// bfloat16 bit patterns. For the careful path of non-finite inputs (nonfinite.h).
bool RowsAllFinite(const float* x, int64_t rows, int64_t ld, int64_t d);
bool RowsAllFiniteBf16(const uint16_t* x, int64_t rows, int64_t ld, int64_t d);
bool RowsAllFiniteF16(const uint16_t* x, int64_t rows, int64_t ld, int64_t d);

// n IEEE half-precision bit patterns widened to float (exact; F16C where the target has
// it): float16 KV caches.
void WidenF16Row(const uint16_t* src, float* dst, int64_t n);

// exp2 of n floats in place with the kernels' polynomial (for the tests' accuracy check).
void Exp2InPlace(float* x, int64_t n);

// The Highway targets (hwy::TargetName) kernels.cc and kernels_decode.cc were compiled
// for that this CPU runs,
// best first; tests force each in turn with hwy::SetSupportedTargetsForTest.
std::vector<int64_t> CompiledTargets();

// Name of the instruction set the dispatcher picked on this CPU (e.g. "AVX3", "AVX2").
const char* KernelTargetName();

}  // namespace cpu
}  // namespace attention
}  // namespace gpe

#endif  // ATTENTION_CPU_KERNELS_H_
