// Optimised CPU attention: tiled online-softmax forward (flash attention, Dao et al.
// 2022, Alg. 1) with the positional encodings of descriptor.h applied inside the kernel.
// Computes exactly what descriptor.h documents (layouts, GQA, causal masks from
// positions, KV-cache defaults, row transforms, tile biases, locality); the reference
// (reference.h) is its oracle.
//
// HOW
// ---
// Work items are (sequence, kv head, chunk of query rows); threads take them from a
// shared counter, the most expensive first. An item processes every query head of its
// kv head's group, so K and V are prepared once per item and shared by the group (GQA):
// each key block is rotated by the prepared k transform, transposed into panels and its
// values copied, on first use. Per query head, blocks of block_q rows are rotated by the
// prepared q transform, multiplied by softmax_scale * log2(e), and run against every key
// block their positions allow (blocks wholly outside the causal mask and the sliding
// window are skipped, blocks wholly inside are not masked): S = Q K^T, locality factor,
// softcap, bias tile (AdditiveBias::FillTile), mask, online softmax in base 2, O += P V;
// each row ends with its head's sink in the denominator (descriptor.h). The SIMD kernels
// (kernels.h) are compiled for AVX-512, AVX2 and a portable baseline and chosen at run
// time. float32 or bfloat16 inputs and outputs, float32 arithmetic and accumulation.
// Transforms are bound to their tokens' int64 or structured positions once per call
// (descriptor.h's PrepareRowTransforms), so multi-axis RoPE, algebraic trees and grids
// rotate tiles like RoPE does. Shaw labels: each query row's 2k + 1 key-label dot
// products are formed once per pass and gathered into its score tiles; its probability
// mass per value label is accumulated (rescaled with o) and multiplied by the value
// table at the end; the backward keeps the same per-row label sums for dQ and the
// tables' gradients.
//
// MEMORY: per thread, O(len_k x head_dim) for the item's packed keys and values (the
// longest key sequence) plus O(block_q x (block_k + head_dim)) of tiles; the q and k
// transforms' prepared state is O((tokens_q + tokens_k) x head_dim) shared (the
// algebraic encodings add four d_i x d_i float matrices per Schur block: d_i = head_dim
// for a sequence, each axis' size for a grid), and Shaw
// labels add O(rows x (2k + 1)) per thread. Decoding shapes (split keys) score from key
// rows and keep no packed keys: O(len_k x value_dim) per thread for value copies. No
// len_q x len_k matrix is ever formed. CpuForwardWorkspaceBytes gives the total.
#ifndef ATTENTION_CPU_CPU_ATTENTION_H_
#define ATTENTION_CPU_CPU_ATTENTION_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "attention/descriptor.h"
#include "encodings/sequence/rope.h"

namespace gpe {
namespace attention {

struct CpuAttentionOptions {
  int num_threads = 0;   // 0: parallel::DefaultThreads() (an installed pool's, else every
                         // hardware thread); otherwise 1 .. 1024
  int64_t block_q = 0;   // query rows per tile; 0: 96; otherwise 1 .. 4096
  // keys per tile, rounded up to a multiple of 64; 0: 128 (64 for windows narrower than
  // 4096 keys); <= 4096
  int64_t block_k = 0;
  // bfloat16 forward arithmetic. kDotProducts: scores and P V by the CPU's bf16 dot
  // products (AVX512_BF16 vdpbf16ps; q, the rotated keys and the probabilities rounded
  // to bf16, float accumulation), where the CPU has them (else as kWiden). kWiden: rows
  // widened to float32 and the float kernels (also the more exact). kAuto: the dot
  // products where a one-time probe (about 0.3 ms, at the first bf16 call) finds them
  // faster than float FMAs by 1.25x or more. Measured: AMD Zen 4 issues vdpbf16ps at the
  // FMA's rate (twice the multiply-adds: kernels at 1.42 vs 0.81 of the float32 FMA
  // peak); an earlier Intel development machine at half its rate (0.50 vs 1.00).
  // kAmxTiles: as kDotProducts, with the products of the forward and the backward (whole
  // 16-row blocks, 32-element steps) on Intel AMX tiles (TDPBF16PS;
  // attention/cpu/kernels_amx.h) where the CPU and the OS allow them (CpuAmxUsable), else
  // exactly kDotProducts; decoding stays on the dot products (it reads memory, not
  // multiplies). Opt-in: kAuto does not choose it until it has been measured on AMX
  // hardware (its tests run an emulation of the tiles on every CPU).
  enum class Bf16Arithmetic { kAuto, kDotProducts, kWiden, kAmxTiles };
  Bf16Arithmetic bf16_arithmetic = Bf16Arithmetic::kAuto;
  // float32 forward arithmetic (q, k, v and o float32). kExact: float32 FMAs. The split
  // modes run both products, S = Q K^T and P V, on Intel AMX tiles (TDPBF16PS, as
  // kAmxTiles) with each float x split into bfloat16 parts, x = x0 + x1 + x2 + r (x0 its
  // bf16 rounding, x1 that of x - x0, x2 that of x - x0 - x1; |r| <= 2^-24 |x| about):
  //  - kSplitBf16x6: six bf16 products per float product, a b ~ a1 b1 + a0 b2 + a2 b0 +
  //    a0 b1 + a1 b0 + a0 b0 (smallest first): about float32's accuracy, within the
  //    float32 tests' criterion (twice the error of naive float32 sums);
  //  - kSplitBf16x3: three, a1 b0 + a0 b1 + a0 b0: about 2^-16 relative per product
  //    (16 of float32's 24 significant bits); outputs measured 7-21x further from the
  //    exact result than float32 FMAs' (split_bf16_test); for workloads that accept that.
  // Key blocks with a value or a transformed key that does not split (non-finite, beyond
  // 3.38e38, or nonzero below 2^-100, where the tiles' flushing of subnormals would cost
  // accuracy), and passes of query rows (up to 384 rows of a kv head's group) with such a
  // transformed query, take the float32 FMAs. The backward stays exact float32 (it
  // recomputes P from this forward's lse). Where the tiles are not usable
  // (CpuAmxUsable false) the split modes are kExact exactly: on the dot products
  // (AVX512_BF16) six or three products at twice the FMA rate are slower than float32
  // FMAs. Memory: the split keys and values (terms x bf16 per element, kept beside the
  // float packing the fallback uses) make a thread's workspace about 4x kExact's with
  // six terms. Opt-in: nothing chooses them by default. Decoding (few query rows against
  // a cache) stays on float32 FMAs.
  enum class Float32Arithmetic { kExact, kSplitBf16x6, kSplitBf16x3 };
  Float32Arithmetic float32_arithmetic = Float32Arithmetic::kExact;
};

// InvalidArgument naming the field when an option is out of its range above (num_threads,
// block_q, block_k). Every entry point checks its options so; callers that hold options
// before they hold a call (the C ABI) check them here too.
absl::Status ValidateCpuAttentionOptions(const CpuAttentionOptions& options);

// o (strides args.o) and, if non-null, lse (num_q_tokens x num_q_heads row-major, natural
// log, -inf for rows with no allowed key), as ReferenceForward. Errors: everything
// ValidateAttention rejects, null tensors, bad options, and any error of a transform or
// bias (the first one met is returned; outputs are then unspecified).
absl::Status CpuForward(const AttentionArgs& args, const float* q, const float* k,
                        const float* v, float* o, float* lse = nullptr,
                        const CpuAttentionOptions& options = {});

// Gradients given dL/do (`d_o`, strides args.o), with respect to q, k, v BEFORE the row
// transforms, as ReferenceBackward: dq, dk, dv (strides of q, k, v; overwritten; any may
// be null to skip). o and lse are the forward's outputs for the same inputs (o with
// strides args.o, lse as CpuForward writes it); pass both null to have them recomputed
// by one extra forward. bias_sink, if set, receives dL/db tile by tile (under a lock,
// one call at a time; a non-OK status aborts). Method: FlashAttention-2's backward
// (Dao 2023, Alg. 2) per (sequence, kv head, chunk of keys): scores and probabilities
// recomputed per tile from lse, dV += P^T dO, dP = dO V^T, dS = P (dP - D),
// dK += dS^T Q, dQ += dS K (dq summed over key chunks at the end). Extra memory: the
// group's queries and dO per thread (O(len_q x group x head_dim)) and one float dq
// accumulator per key chunk (O(tokens_q x heads x head_dim)).
absl::Status CpuBackward(const AttentionArgs& args, const float* q, const float* k,
                         const float* v, const float* o, const float* lse, const float* d_o,
                         float* dq, float* dk, float* dv,
                         const BiasGradientSink& bias_sink = nullptr,
                         const CpuAttentionOptions& options = {});

// Optional extra outputs of CpuBackward (float32). dq_rotated and dk_rotated receive
// dL/dq' and dL/dk', the gradients with respect to the TRANSFORMED rows q' = T(p) q and
// k' = T(p) k (strides of q and k), before the transposes that give dq and dk. A learned
// encoding's parameter gradients follow from its own backward: e.g. for GRAPE-M,
// GrapeMProduct::Backward(positions, q, dq_rotated) (plus the same on the key side)
// gives dL/d(a, b, omega) (Zhang et al., GRAPE; the chain rule through q' = G(p) q).
// shaw_key_table_grad / shaw_value_table_grad receive dL/daK and dL/daV for
// args.shaw_keys / shaw_values (descriptor.h, SHAW LABELS): [2k + 1, head_dim]
// row-major double, overwritten; float arithmetic per item, summed in double.
// sink_grad receives dL/dz for args.sinks (num_q_heads doubles, overwritten; descriptor.h,
// SINKS): -sum_i exp(z_h - lse_i) <dL/do_i, o_i> over the rows of head h, in double.
struct CpuBackwardExtras {
  float* dq_rotated = nullptr;
  float* dk_rotated = nullptr;
  double* shaw_key_table_grad = nullptr;
  double* shaw_value_table_grad = nullptr;
  double* sink_grad = nullptr;
};
absl::Status CpuBackward(const AttentionArgs& args, const float* q, const float* k,
                         const float* v, const float* o, const float* lse, const float* d_o,
                         float* dq, float* dk, float* dv, const BiasGradientSink& bias_sink,
                         const CpuAttentionOptions& options, const CpuBackwardExtras& extras);

// bfloat16 inputs and outputs (rope.h's BFloat16 bit patterns), float32 arithmetic: rows
// are widened to float as tiles load and results rounded to nearest even once on
// store; lse stays float.
absl::Status CpuForward(const AttentionArgs& args, const encodings::sequence::BFloat16* q,
                        const encodings::sequence::BFloat16* k,
                        const encodings::sequence::BFloat16* v,
                        encodings::sequence::BFloat16* o, float* lse = nullptr,
                        const CpuAttentionOptions& options = {});

// 16-bit KV caches: k and v in bfloat16 or IEEE float16 (half the bytes a decoding step
// reads), q and o float32 (or, with a float16 cache, bfloat16). Keys and values are
// widened to float exactly as tiles load (float16: F16C's vcvtph2ps) and every product is
// float32, so the result equals CpuForward on the widened k and v; with a bfloat16 q
// and a bfloat16 cache use the overload above. Forward only (inference).
absl::Status CpuForward(const AttentionArgs& args, const float* q,
                        const encodings::sequence::BFloat16* k,
                        const encodings::sequence::BFloat16* v, float* o, float* lse = nullptr,
                        const CpuAttentionOptions& options = {});
absl::Status CpuForward(const AttentionArgs& args, const float* q,
                        const encodings::sequence::Float16* k,
                        const encodings::sequence::Float16* v, float* o, float* lse = nullptr,
                        const CpuAttentionOptions& options = {});
absl::Status CpuForward(const AttentionArgs& args, const encodings::sequence::BFloat16* q,
                        const encodings::sequence::Float16* k,
                        const encodings::sequence::Float16* v,
                        encodings::sequence::BFloat16* o, float* lse = nullptr,
                        const CpuAttentionOptions& options = {});

absl::Status CpuBackward(const AttentionArgs& args, const encodings::sequence::BFloat16* q,
                         const encodings::sequence::BFloat16* k,
                         const encodings::sequence::BFloat16* v,
                         const encodings::sequence::BFloat16* o, const float* lse,
                         const encodings::sequence::BFloat16* d_o,
                         encodings::sequence::BFloat16* dq, encodings::sequence::BFloat16* dk,
                         encodings::sequence::BFloat16* dv,
                         const BiasGradientSink& bias_sink = nullptr,
                         const CpuAttentionOptions& options = {});
// The same with the float32 overload's extras (Shaw table and sink gradients in double,
// the rotated dq / dk in float).
absl::Status CpuBackward(const AttentionArgs& args, const encodings::sequence::BFloat16* q,
                         const encodings::sequence::BFloat16* k,
                         const encodings::sequence::BFloat16* v,
                         const encodings::sequence::BFloat16* o, const float* lse,
                         const encodings::sequence::BFloat16* d_o,
                         encodings::sequence::BFloat16* dq, encodings::sequence::BFloat16* dk,
                         encodings::sequence::BFloat16* dv, const BiasGradientSink& bias_sink,
                         const CpuAttentionOptions& options, const CpuBackwardExtras& extras);

// Extra memory CpuForward allocates for these arguments (bytes, all threads together,
// including the prepared transforms' tables estimated at 2 floats per position and
// component, not the algebraic encodings' d_i^2 matrices), counted for float32 tensors (with options' float32_arithmetic where the
// tiles are usable).
absl::StatusOr<int64_t> CpuForwardWorkspaceBytes(const AttentionArgs& args,
                                                 const CpuAttentionOptions& options = {});

// The instruction set the kernels run with on this CPU (e.g. "AVX3" for AVX-512, "AVX2").
std::string CpuAttentionIsa();

// Whether this CPU has the bfloat16 dot-product instruction (AVX512_BF16's vdpbf16ps)
// that CpuAttentionOptions::bf16_arithmetic uses; and whether kAuto picks it here.
bool CpuHasBf16DotProducts();
// Whether Bf16Arithmetic::kAmxTiles runs on AMX tiles here (AMX-TILE and AMX-BF16, the
// tile state saved by the OS, Linux's per-process permission granted, and the dot
// products for the parts the tiles leave; the permission is requested on the first
// call).
bool CpuAmxUsable();
bool CpuBf16AutoUsesDotProducts();

}  // namespace attention
}  // namespace gpe

#endif  // ATTENTION_CPU_CPU_ATTENTION_H_
