// Attention calls on CUDA tensors (gpe/attention.h, "CUDA TENSORS"): the call checked
// like a CPU one (call.h's Prepare over host descriptions of the tensors, which it never
// dereferences), the options the GPU kernels lack refused, then handed to the CUDA plugin
// (c_api/cuda/plugin.h), loaded on first use. Internal to c_api.
#ifndef GPE_C_API_SRC_ATTENTION_CUDA_CALL_H_
#define GPE_C_API_SRC_ATTENTION_CUDA_CALL_H_

#include "absl/status/status.h"
#include "c_api/include/gpe/attention.h"
#include "dlpack/dlpack.h"

namespace gpe::c_api::attn {

// True when q is a tensor on a CUDA device: the call goes to CudaForward / CudaBackward.
bool OnCuda(const DLTensor* q);

absl::Status CudaForward(const gpe_attention_options* options, const DLTensor* q,
                         const DLTensor* k, const DLTensor* v, DLTensor* o, DLTensor* lse);

// `parameter_grads`: the caller asked for gradients of the encodings' parameters or of
// the Shaw tables (refused on CUDA tensors).
absl::Status CudaBackward(const gpe_attention_options* options, const DLTensor* q,
                          const DLTensor* k, const DLTensor* v, const DLTensor* o,
                          const DLTensor* lse, const DLTensor* d_o, DLTensor* dq, DLTensor* dk,
                          DLTensor* dv, bool parameter_grads);

}  // namespace gpe::c_api::attn

#endif  // GPE_C_API_SRC_ATTENTION_CUDA_CALL_H_
