// The gradients of an attention call's encoding parameters (gpe/attention.h): the Shaw
// tables', the bias's (accumulated tile by tile from the kernels' sink) and GRAPE-M's
// generators (formed from dq and dk afterwards). Internal to c_api.
#ifndef GPE_C_API_SRC_ATTENTION_PARAMETER_GRADIENTS_H_
#define GPE_C_API_SRC_ATTENTION_PARAMETER_GRADIENTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "attention/descriptor.h"
#include "c_api/include/gpe/attention.h"
#include "c_api/src/attention/call.h"
#include "c_api/src/common/tensor_view.h"
#include "dlpack/dlpack.h"
#include "encodings/sequence/algebraic.h"
#include "encodings/sequence/grape_m.h"
#include "encodings/sequence/relative.h"

namespace gpe::c_api::attn {

// A Shaw table gradient output: float64 [2k + 1, cols] row-major (cols: head_dim for the
// key table, value_dim() for the value table), for a table that is in the options. Data
// null when `t` is null.
absl::StatusOr<TensorView> TableGradient(const DLTensor* t, const char* name,
                                         const seq::ShawRelative* table, int64_t cols);

// The attention bias's parameter gradients (gpe_attention_backward_with_parameters):
// the shapes of gpe_bias_accumulate_gradient's outputs, accumulated tile by tile from the
// kernels' bias sink into double buffers, FoX prefix gradients turned into gate-logit
// gradients at the end, then written to the caller's float64 tensors.
struct BiasParameterGrads {
  const gpe_bias* bias = nullptr;
  std::vector<int64_t> shape;
  std::vector<double> a, b;  // b: GRAPE-AP's dL/du only
  TensorView va, vb;         // outputs (data null: skipped)

  bool wanted() const { return va.data != nullptr || vb.data != nullptr; }

  // Checks the outputs d_bias_a / d_bias_b (either may be NULL) against the bias
  // handle's gradient shapes and zeroes the accumulators.
  absl::Status Init(const gpe_bias* handle, DLTensor* da, DLTensor* db);

  // The kernels' sink (null when nothing is wanted): each tile's dL/db into a and b.
  att::BiasGradientSink Sink();

  // FoX-like gradients to gate logits, then the copies out (any strides).
  absl::Status Finish();
};

// GRAPE-M generator gradients (gpe_attention_param_grads): the kernels return dq = G(p)^T
// dL/dq' (pre-encoding), so dL/dq' = G(p) dq (G orthogonal); GrapeMProduct::Backward then
// gives dL/d(a, b, omega) through q' = G(p) q, and likewise for k; the two are summed.
absl::Status GrapeMParameterGrads(const Call& c, const seq::GrapeMProduct& grape, bool packed,
                                  const TensorView& dqv, const TensorView& dkv,
                                  const gpe_attention_param_grads& pg);

// Kogkalidis et al.'s skew generators (gpe_attention_param_grads' d_algebraic,
// d_algebraic_tree, d_algebraic_grid, each for its option): as GRAPE-M's, dL/dq' =
// rho(p) dq and dL/dk' = rho(p) dk (rho orthogonal), then the encoding's own backward
// (AlgebraicSequence::Backward, AlgebraicTree::Backward, AlgebraicGridBackward) gives
// dL/dS through x' = rho(p) x, summed over q's and k's tokens and heads.
absl::Status AlgebraicParameterGrads(const Call& c, const gpe_attention_options& o, bool packed,
                                     const TensorView& dqv, const TensorView& dkv,
                                     const gpe_attention_param_grads& pg);

}  // namespace gpe::c_api::attn

#endif  // GPE_C_API_SRC_ATTENTION_PARAMETER_GRADIENTS_H_
