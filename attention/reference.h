// Reference attention: naive, exact, double-accumulating. The oracle every optimised
// implementation (cpu/, cuda/) is tested against. Same arguments as the kernels
// (descriptor.h documents the computation, layouts, positions and descriptors).
//
// Method: q and k rows are copied to double, transformed in double by the RowTransforms
// bound to their tokens (PrepareRowTransforms: int64 or structured positions, the same
// binding the kernels use; the prepared double overloads),
// and for each (query token, query head) the scores against all keys of its sequence
// are materialised (O(len_k) memory per row), the bias row filled with one FillTile
// (a 1 x len_k tile), softmax and output formed in double with max subtraction, and
// the result rounded once to T. Cost O(Hq * sum_b len_q(b) len_k(b) * head_dim).
#ifndef ATTENTION_REFERENCE_H_
#define ATTENTION_REFERENCE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "attention/descriptor.h"

namespace gpe {
namespace attention {

// o (strides args.o) and, if non-null, lse (num_q_tokens x num_q_heads, row-major,
// natural log, -inf for rows with no allowed key). T is float or double.
template <class T>
absl::Status ReferenceForward(const AttentionArgs& args, const T* q, const T* k, const T* v, T* o,
                              T* lse = nullptr);

// Gradients of L given dL/do (`d_o`, strides args.o): dq, dk, dv (strides of q, k, v;
// overwritten, any may be null to skip), taken with respect to the inputs BEFORE the
// row transforms. bias_sink, if set, receives dL/db tile by tile (a non-OK status from
// it aborts and is returned). The forward is recomputed internally.
template <class T>
absl::Status ReferenceBackward(const AttentionArgs& args, const T* q, const T* k, const T* v,
                               const T* d_o, T* dq, T* dk, T* dv,
                               const BiasGradientSink& bias_sink = nullptr);

// Optional outputs of ReferenceBackward: dL/daK (args.shaw_keys' key table) and dL/daV
// (args.shaw_values' value table), [2k + 1, head_dim] and [2k + 1, value_dim()] row-major
// double, overwritten.
// Asking for one without its table is InvalidArgument.
// sink_grad: dL/dz_h for args.sinks (num_q_heads doubles, overwritten; InvalidArgument
// without sinks).
struct ReferenceBackwardExtras {
  double* shaw_key_table_grad = nullptr;
  double* shaw_value_table_grad = nullptr;
  double* sink_grad = nullptr;
};
template <class T>
absl::Status ReferenceBackward(const AttentionArgs& args, const T* q, const T* k, const T* v,
                               const T* d_o, T* dq, T* dk, T* dv,
                               const BiasGradientSink& bias_sink,
                               const ReferenceBackwardExtras& extras);

}  // namespace attention
}  // namespace gpe

#endif  // ATTENTION_REFERENCE_H_
