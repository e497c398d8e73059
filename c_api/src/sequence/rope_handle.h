// The opaque RoPE handle of gpe/rope.h, shared by the entry points that create and apply
// it (rope.cc) and attention (c_api/src/attention/), which applies it to q and k inside
// the kernel. Internal to c_api.
#ifndef GPE_C_API_SRC_SEQUENCE_ROPE_HANDLE_H_
#define GPE_C_API_SRC_SEQUENCE_ROPE_HANDLE_H_

#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "c_api/include/gpe/rope.h"
#include "encodings/sequence/rope.h"

struct gpe_rope {
  gpe::encodings::sequence::Rope impl;
};

namespace gpe::c_api {

// The CPU refuses an attention factor whose cos / sin entries leave the tensor's type
// (Rope::MakeTable, Rope::CheckApply); the CUDA calls, which form them on the device, make
// the same check on the host: float32 and bfloat16 up to float's largest value (bfloat16's
// 0x1.fep127), float16 up to 65504. InvalidArgument past it.
inline absl::Status CheckAttentionFactorFits(const gpe::encodings::sequence::Rope& rope,
                                             DLDataType dtype) {
  const bool f16 = dtype.code == kDLFloat && dtype.bits == 16;
  const bool bf16 = dtype.code == kDLBfloat;
  const double largest = f16    ? 65504.0
                         : bf16 ? 0x1.fep127
                                : static_cast<double>(std::numeric_limits<float>::max());
  const double m = rope.attention_factor();
  if (!(m < largest)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the gpe_rope's attention factor ", m, " is beyond ",
        f16 ? "float16" : bf16 ? "bfloat16" : "float32", "'s range (", largest,
        "): the rotated tensor's entries would be infinite; give a smaller attention_factor "
        "(or mscale)"));
  }
  return absl::OkStatus();
}

}  // namespace gpe::c_api

#endif  // GPE_C_API_SRC_SEQUENCE_ROPE_HANDLE_H_
