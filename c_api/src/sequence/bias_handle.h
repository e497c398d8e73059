// The opaque additive-bias handle of gpe/bias.h, shared by the entry points that create
// and fill it (bias.cc) and attention (c_api/src/attention/), which applies it inside the
// kernel. Internal to c_api.
#ifndef GPE_C_API_SRC_SEQUENCE_BIAS_HANDLE_H_
#define GPE_C_API_SRC_SEQUENCE_BIAS_HANDLE_H_

#include <cstdint>
#include <optional>

#include "c_api/include/gpe/bias.h"
#include "encodings/sequence/bias.h"
#include "encodings/sequence/grape_a.h"

// An additive bias of any kind: the one its kind names is set.
struct gpe_bias {
  int32_t kind = GPE_BIAS_ALIBI;
  std::optional<gpe::encodings::sequence::AlibiBias> alibi;
  std::optional<gpe::encodings::sequence::T5RelativeBias> t5;
  std::optional<gpe::encodings::sequence::FoxBias> fox;
  std::optional<gpe::encodings::sequence::GrapeApBias> grape_ap;
  std::optional<gpe::encodings::sequence::GrapeABias> grape_a;

  const gpe::encodings::sequence::AdditiveBias& base() const {
    switch (kind) {
      case GPE_BIAS_T5: return *t5;
      case GPE_BIAS_FOX: return *fox;
      case GPE_BIAS_GRAPE_AP: return *grape_ap;
      case GPE_BIAS_GRAPE_A: return *grape_a;
      default: return *alibi;
    }
  }
};

#endif  // GPE_C_API_SRC_SEQUENCE_BIAS_HANDLE_H_
