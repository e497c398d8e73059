// Helpers shared by the tests of attention/cpu: seeded inputs, the naive float32 forward
// and backward the accuracy criterion compares with, the checks against the double
// reference (flash-attention's criterion: the kernel's float32 error at most twice the
// naive float32 implementation's, both against ReferenceForward<double>), and the case
// lists the forward and backward tests share.
#ifndef ATTENTION_CPU_TEST_UTIL_H_
#define ATTENTION_CPU_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "attention/cpu/cpu_attention.h"
#include "attention/descriptor.h"
#include "encodings/sequence/relative.h"
#include "encodings/sequence/rope.h"

namespace gpe {
namespace attention {
namespace test {

// n draws of N(0, scale^2) as floats.
std::vector<float> RandomF(size_t n, std::mt19937_64* rng, double scale = 1.0);

// RoPE of head_dim d rotating its first r components (default frequencies, base 1e4);
// a failed creation fails the test.
encodings::sequence::Rope MakeRope(int64_t d, int64_t r, group::PlanePairing pairing);

// Extent (elements) of a tensor with strides s (one of a.q, a.k, a.v, a.o: rows of
// head_dim, or value_dim() for a.v and a.o) over the args' tokens and heads.
size_t Extent(const AttentionArgs& a, const Strides& s, bool q_side);

// bf16 bit patterns of floats (round to nearest even) and back.
uint16_t Bf(float f);
float Fl(uint16_t b);

// The naive float32 implementation the accuracy criterion compares with: rows
// transformed in float by the same RowTransform (bound to the same int64 or structured
// positions), float dot products summed in order (Shaw key labels: q . (k + aK)), float
// max / exp / sum, float output accumulation (Shaw value labels: p (v + aV)).
void NaiveFloat(const AttentionArgs& a, const std::vector<float>& q, const std::vector<float>& k,
                const std::vector<float>& v, std::vector<float>* o);

// Runs CpuForward, the naive float version and the double reference on random inputs
// and checks the accuracy criterion, lse, and that padding is never written.
void CheckAgainstReference(const AttentionArgs& a, const CpuAttentionOptions& opt,
                           uint64_t seed, const std::string& what);

// CpuBackward (given o and lse, and recomputing them) against the double reference with
// the 2x-naive-float32 criterion, for dq, dk and dv (and the Shaw tables' gradients
// where the args carry tables).
void CheckBackward(const AttentionArgs& a, const CpuAttentionOptions& opt, uint64_t seed,
                   const std::string& what);

// The bfloat16 backward with opt (its bf16_arithmetic says which path) against the double
// reference on the same bf16 inputs: dq, dk and dv within 2e-2 of their largest entry
// (at least 1). The criterion: the output's rounding is 2^-9 relative, and the dot
// products round Qs, the rotated keys, P and dS to bf16 (each 2^-9 relative) before
// float sums of O(1) terms; a wrong or dropped term changes a gradient by O(1 / length).
// Skips with a message where kDotProducts is asked of a CPU without AVX512_BF16.
void CheckBackwardBf16(const AttentionArgs& a, const CpuAttentionOptions& opt, uint64_t seed,
                       const std::string& what);

// The tiles the case lists below are shaped around (block_q 16, block_k 64), on 3 threads.
CpuAttentionOptions CaseListOptions();

// A check run on each case of a list: check(args, name of the case).
using CaseCheck = std::function<void(const AttentionArgs&, const std::string&)>;

// Runs check(args, name) for every structured transform (multi-axis RoPE, algebraic
// trees and grids) on shapes below, at and above the tiles (block_q 16, block_k 64),
// causal and not, GQA 2/1, plus a KV-cache shape (queries shorter than keys, MQA, two
// sequences) and a packed varlen batch.
void ForEachStructuredCase(const CaseCheck& check);

// A Shaw et al. table pair (clip distance kmax, head_dim d) of random entries.
encodings::sequence::ShawRelative MakeShaw(int64_t kmax, int64_t d, std::mt19937_64* rng);

// Shaw key and/or value labels (k = 0: one label for every pair; k = 3; k = 200, wider
// than every sequence) on shapes below, at and above the tiles (block_q 16, block_k 64),
// causal and not, GQA, then with RoPE, ALiBi and locality at once, explicit unsorted
// positions, varlen and a decoding shape (one query against 1100 keys: the path that
// splits keys otherwise).
void ForEachShawCase(const CaseCheck& check);

}  // namespace test
}  // namespace attention
}  // namespace gpe

#endif  // ATTENTION_CPU_TEST_UTIL_H_
