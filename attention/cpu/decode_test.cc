// Split-key decoding (decode.cc) against the double reference with the flash-attention
// accuracy criterion (test_util.h): long KV caches split across threads, with transforms
// and biases (the tile step per kv head) and read in token order as stored (the decode
// kernels), token-major and head-major caches, on every compiled instruction set.
#include "attention/cpu/cpu_attention.h"

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "attention/cpu/kernels.h"
#include "attention/cpu/test_util.h"
#include "attention/descriptor.h"
#include "attention/test_util.h"
#include "encodings/sequence/bias.h"
#include "encodings/sequence/rope.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"

namespace gpe {
namespace attention {
namespace {

using encodings::sequence::AlibiBias;
using encodings::sequence::AlibiForm;
using encodings::sequence::Rope;
using test::Bshd;
using test::CheckAgainstReference;
using test::MakeRope;
using test::Thd;

TEST(CpuDecode, LongKvCachesSplitAcrossThreads) {
  // Long KV caches split across threads (split-KV decoding), with RoPE and ALiBi, and a
  // packed batch with an empty cache, a 1-token cache and a long one.
  Rope rope = MakeRope(40, 40, group::PlanePairing::kHalfSplit);
  RopeRowTransform tr(rope);
  auto alibi = AlibiBias::CreateStandard(8, AlibiForm::kCausal);
  ASSERT_TRUE(alibi.ok());
  CpuAttentionOptions three;
  three.num_threads = 3;
  for (int64_t lq : {1, 2}) {
    AttentionArgs dec = Bshd(1, lq, 1500, 8, 2, 40);
    dec.causal = true;
    dec.q_transform = dec.k_transform = &tr;
    dec.biases = {&*alibi};
    CheckAgainstReference(dec, three, 47 + lq, "split-kv decode lq " + std::to_string(lq));
  }
  const std::vector<int64_t> cu_q = {0, 1, 2, 3}, cu_k = {0, 0, 1, 1300};
  AttentionArgs var = Thd(cu_q, cu_k, 4, 4, 32);
  var.causal = true;
  CheckAgainstReference(var, three, 49, "split-kv varlen decode");
}

TEST(CpuDecode, TokenOrderOnEveryInstructionSet) {
  // Long KV caches read in token order (keys as stored, values in place: no key
  // transform, head_dim a multiple of 16): GQA groups of 4 (four rows at a time on
  // AVX-512) and 3, one and two query tokens, ALiBi and the causal mask, on every
  // compiled instruction set.
  auto alibi = AlibiBias::CreateStandard(8, AlibiForm::kCausal);
  ASSERT_TRUE(alibi.ok());
  CpuAttentionOptions two;
  two.num_threads = 2;
  int64_t seed = 300;
  for (int64_t target : cpu::CompiledTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (auto [hq, hkv, d] : {std::tuple<int64_t, int64_t, int64_t>{8, 2, 48}, {6, 2, 16},
                              {8, 2, 128}}) {
      for (int64_t lq : {1, 2}) {
        for (bool bhsd : {false, true}) {
          AttentionArgs dec = Bshd(1, lq, 1100, hq, hkv, d);
          // bhsd: each kv head's cache contiguous (heads walked outermost, the next
          // block of every head requested ahead).
          if (bhsd) dec.k = dec.v = Strides{hkv * 1100 * d, d, 1100 * d};
          dec.causal = true;
          if (hq == 8) dec.biases = {&*alibi};
          CheckAgainstReference(dec, two, ++seed,
                                std::string("token-order decode ") + hwy::TargetName(target) +
                                    " hq " + std::to_string(hq) + " d " + std::to_string(d) +
                                    " lq " + std::to_string(lq) + (bhsd ? " bhsd" : ""));
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Decoding's per-thread workspace does not grow with the cache: a block's value rows are
// copied (16-bit caches, RoPE'd keys, padded rows) to the start of a one-block buffer,
// not at the block's offset in a buffer of the longest sequence's values (1M keys with
// RoPE held 0.6 GB per thread). Doubling the keys adds only their positions (8 bytes
// each, and the RoPE tables' 2 floats per component and key position) to the total.
TEST(CpuDecode, WorkspaceDoesNotGrowWithTheCache) {
  Rope rope = MakeRope(24, 24, group::PlanePairing::kHalfSplit);
  RopeRowTransform tr(rope);
  CpuAttentionOptions one;
  one.num_threads = 1;
  for (bool with_rope : {false, true}) {
    int64_t bytes[2];
    for (int i = 0; i < 2; ++i) {
      AttentionArgs dec = Bshd(1, 1, 4096 << i, 8, 2, 24);
      if (with_rope) dec.q_transform = dec.k_transform = &tr;
      absl::StatusOr<int64_t> b = CpuForwardWorkspaceBytes(dec, one);
      ASSERT_TRUE(b.ok()) << b.status();
      bytes[i] = *b;
    }
    const int64_t per_key = 8 + (with_rope ? 2 * 24 * 4 : 0);
    EXPECT_EQ(bytes[1] - bytes[0], 4096 * per_key) << (with_rope ? "rope" : "plain");
  }
}

}  // namespace
}  // namespace attention
}  // namespace gpe
