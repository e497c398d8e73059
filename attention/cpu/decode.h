// Split-key decoding ("flash decoding"): for decoding shapes (few query rows per kv head,
// long KV caches) each item is a range of keys of one sequence for every kv head, so a
// thread streams one contiguous range of the cache; the ranges' unnormalised softmax
// states are combined at the end.
#ifndef ATTENTION_CPU_DECODE_H_
#define ATTENTION_CPU_DECODE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "attention/cpu/forward.h"
#include "attention/cpu/plan.h"
#include "attention/descriptor.h"

namespace gpe {
namespace attention {
namespace cpu {

// Whether CpuForward decodes by split keys for these arguments: few query rows per kv
// head (a group's heads times the longest query sequence at most kDirectRows), a long
// cache (at least kDecodeMinKeys keys) and no Shaw labels (whose per-row label sums the
// split states do not carry).
bool IsDecodeShape(const AttentionArgs& args, const Plan& plan);

// The plan RunDecode sizes its per-thread workspaces by (Workspace(p, /*decode=*/true)):
// every query head of a sequence's tokens in one tile.
Plan DecodeWorkspacePlan(const AttentionArgs& args, const Plan& plan);

// The whole forward of the call by split keys: each sequence's keys that its queries may
// attend to (Forward::DecodeKeyRange: a window's) in chunks spread over the threads.
template <class T, class KV>
absl::Status RunDecode(const Forward<T, KV>& fwd, const AttentionArgs& args, const Plan& plan);

}  // namespace cpu
}  // namespace attention
}  // namespace gpe

#endif  // ATTENTION_CPU_DECODE_H_
