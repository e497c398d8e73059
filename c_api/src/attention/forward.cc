// The C ABI's attention forward (gpe/attention.h): the tensors and options checked
// (call.h), then attention/cpu's CpuForward (float32, bfloat16) or the exact
// ReferenceForward<double> (float64), which check the call itself (ValidateAttention) and
// return at once on an empty one; tensors on a CUDA device go to cuda_call.h. Runs under
// Guard.
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "attention/cpu/cpu_attention.h"
#include "attention/descriptor.h"
#include "attention/reference.h"
#include "c_api/include/gpe/attention.h"
#include "c_api/src/attention/call.h"
#include "c_api/src/attention/cuda_call.h"
#include "c_api/src/common/checks.h"
#include "c_api/src/common/error.h"
#include "c_api/src/common/tensor_view.h"
#include "dlpack/dlpack.h"

using gpe::c_api::DType;
using gpe::c_api::Guard;
using gpe::c_api::NamedView;
using gpe::c_api::TensorView;
using gpe::c_api::attn::Call;
using gpe::c_api::attn::CheckOutputs;
using gpe::c_api::attn::LseOf;
using gpe::c_api::attn::OutputLike;
using gpe::c_api::attn::Prepare;
using gpe::c_api::attn::StridesOf;
using BF = gpe::c_api::attn::BF;
using F16 = gpe::c_api::attn::F16;
namespace att = gpe::attention;

gpe_status gpe_attention_forward(const gpe_attention_options* options, const DLTensor* q,
                                 const DLTensor* k, const DLTensor* v, DLTensor* o,
                                 DLTensor* lse) {
  return Guard([&]() -> absl::Status {
    if (gpe::c_api::attn::OnCuda(q)) return gpe::c_api::attn::CudaForward(options, q, k, v, o, lse);
    Call c;
    if (absl::Status s = Prepare(options, q, k, v, &c); !s.ok()) return s;
    const bool packed = c.args.layout == att::Layout::kTHD;
    absl::StatusOr<TensorView> ov =
        OutputLike(o, "o", c.OutputShape(), "q with v's head size", packed);
    if (!ov.ok()) return ov.status();
    c.args.o = StridesOf(*ov, packed);
    absl::StatusOr<TensorView> lv = LseOf(lse, c.args, c.dtype);
    if (!lv.ok()) return lv.status();
    const NamedView ins[] = {{&c.q, "q"}, {&c.k, "k"}, {&c.v, "v"},
                             {c.mask.data != nullptr ? &c.mask : nullptr, "attn_mask"}};
    const NamedView outs[] = {{&*ov, "o"}, {lse != nullptr ? &*lv : nullptr, "lse"}};
    if (absl::Status s = CheckOutputs(outs, ins); !s.ok()) return s;
    if (c.dtype == DType::kFloat64) {
      // The exact oracle (reference.h): double throughout, single-threaded.
      return att::ReferenceForward(c.args, c.q.typed<const double>(), c.k.typed<const double>(),
                                   c.v.typed<const double>(), ov->typed<double>(),
                                   lv->typed<double>());
    }
    const att::CpuAttentionOptions& opt = c.cpu;  // num_threads and the arithmetic
    if (c.kv_dtype != c.dtype) {  // a 16-bit KV cache (Prepare admitted only those)
      if (c.dtype == DType::kFloat32 && c.kv_dtype == DType::kBFloat16) {
        return att::CpuForward(c.args, c.q.typed<const float>(), c.k.typed<const BF>(),
                               c.v.typed<const BF>(), ov->typed<float>(), lv->typed<float>(), opt);
      }
      if (c.dtype == DType::kFloat32) {
        return att::CpuForward(c.args, c.q.typed<const float>(), c.k.typed<const F16>(),
                               c.v.typed<const F16>(), ov->typed<float>(), lv->typed<float>(),
                               opt);
      }
      return att::CpuForward(c.args, c.q.typed<const BF>(), c.k.typed<const F16>(),
                             c.v.typed<const F16>(), ov->typed<BF>(), lv->typed<float>(), opt);
    }
    if (c.dtype == DType::kFloat32) {
      return att::CpuForward(c.args, c.q.typed<const float>(), c.k.typed<const float>(),
                             c.v.typed<const float>(), ov->typed<float>(), lv->typed<float>(),
                             opt);
    }
    return att::CpuForward(c.args, c.q.typed<const BF>(), c.k.typed<const BF>(),
                           c.v.typed<const BF>(), ov->typed<BF>(), lv->typed<float>(), opt);
  });
}
