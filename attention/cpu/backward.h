// The backward (FlashAttention-2's, Dao 2023, Alg. 2): per key block, recompute S and
// P = exp2(S - lse2) for every allowed query tile, then dV += P^T dO, dP = dO V^T,
// dS = P (dP - D) with D = rowsum(dO o), dK += dS^T Q, dQ += dS K. Items are chunks of
// keys of one kv head; dQ is summed over the chunks at the end.
#ifndef ATTENTION_CPU_BACKWARD_H_
#define ATTENTION_CPU_BACKWARD_H_

#include "absl/status/status.h"
#include "attention/cpu/cpu_attention.h"
#include "attention/cpu/plan.h"
#include "attention/descriptor.h"

namespace gpe {
namespace attention {
namespace cpu {

// dq, dk, dv (any may be null) and the extras of CpuBackward for arguments the entry
// point has checked: o (strides args.o) and lse are the forward's, and the requested
// Shaw table gradients are zeroed. T is float or encodings::sequence::BFloat16.
template <class T>
absl::Status RunBackward(const AttentionArgs& args, const Plan& plan, const T* q, const T* k,
                         const T* v, const T* o, const float* lse, const T* d_o, T* dq, T* dk,
                         T* dv, const BiasGradientSink& bias_sink,
                         const CpuBackwardExtras& extras);

}  // namespace cpu
}  // namespace attention
}  // namespace gpe

#endif  // ATTENTION_CPU_BACKWARD_H_
