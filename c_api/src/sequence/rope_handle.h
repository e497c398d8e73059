// The opaque RoPE handle of gpe/rope.h, shared by the entry points that create and apply
// it (rope.cc) and attention (c_api/src/attention/), which applies it to q and k inside
// the kernel. Internal to c_api.
#ifndef GPE_C_API_SRC_SEQUENCE_ROPE_HANDLE_H_
#define GPE_C_API_SRC_SEQUENCE_ROPE_HANDLE_H_

#include <cmath>
#include <cstdio>
#include <cstdlib>
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
// 0x1.fep127), float16 up to 65504 (each bound itself accepted). InvalidArgument past it.
inline absl::Status CheckAttentionFactorFits(const gpe::encodings::sequence::Rope& rope,
                                             DLDataType dtype) {
  const bool f16 = dtype.code == kDLFloat && dtype.bits == 16;
  const bool bf16 = dtype.code == kDLBfloat;
  const double largest = f16    ? 65504.0
                         : bf16 ? 0x1.fep127
                                : static_cast<double>(std::numeric_limits<float>::max());
  const double m = rope.attention_factor();
  // Refused only past the largest value (m = 65504 gives float16 entries up to 65504).
  if (m > largest) {
    // m with the fewest digits that read back as m, so that it is told from the bound.
    char mb[32], lb[32];
    for (int digits = 6; digits <= 17; ++digits) {
      std::snprintf(mb, sizeof mb, "%.*g", digits, m);
      if (std::strtod(mb, nullptr) == m) break;
    }
    std::snprintf(lb, sizeof lb, "%.9g", largest);
    return absl::InvalidArgumentError(absl::StrCat(
        "the gpe_rope's attention factor ", mb, " exceeds ",
        f16 ? "float16" : bf16 ? "bfloat16" : "float32", "'s largest value ", lb,
        ": the rotated tensor's entries would be infinite; give a smaller attention_factor "
        "(or mscale)"));
  }
  return absl::OkStatus();
}

}  // namespace gpe::c_api

#endif  // GPE_C_API_SRC_SEQUENCE_ROPE_HANDLE_H_
