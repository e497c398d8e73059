// The opaque sequence-encoding handles of gpe.h, shared by the entry points that create
// them (sequence.cc) and those that consume them (attention.cc). Internal to c_api.
#ifndef GPE_C_API_SRC_SEQUENCE_HANDLES_H_
#define GPE_C_API_SRC_SEQUENCE_HANDLES_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "c_api/include/gpe/gpe.h"
#include "encodings/sequence/absolute.h"
#include "encodings/sequence/algebraic.h"
#include "encodings/sequence/bias.h"
#include "encodings/sequence/grape_a.h"
#include "encodings/sequence/grape_m.h"

struct gpe_learned_positions {
  gpe::encodings::sequence::LearnedPositionTable impl;
};
struct gpe_grape_m {
  gpe::encodings::sequence::GrapeMProduct impl;
};
struct gpe_algebraic_sequence {
  gpe::encodings::sequence::AlgebraicSequence impl;
};
struct gpe_algebraic_tree {
  gpe::encodings::sequence::AlgebraicTree impl;
};
// A grid: one algebraic sequence per axis, acting on consecutive blocks of coordinates.
struct gpe_algebraic_grid {
  std::vector<gpe::encodings::sequence::AlgebraicSequence> axes;
  int64_t dim() const {
    int64_t d = 0;
    for (const auto& a : axes) d += a.dim();
    return d;
  }
};

// An additive bias (bias.cc creates it; attention.cc applies it inside the kernel).
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

#endif  // GPE_C_API_SRC_SEQUENCE_HANDLES_H_
