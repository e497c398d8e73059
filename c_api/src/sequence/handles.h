// The opaque sequence-encoding handles of gpe/sequence.h and gpe/algebraic.h, shared by
// the entry points that create them (absolute.cc, grape_m.cc, algebraic.cc) and attention
// (c_api/src/attention/), which takes GRAPE-M and algebraic handles. Internal to c_api.
#ifndef GPE_C_API_SRC_SEQUENCE_HANDLES_H_
#define GPE_C_API_SRC_SEQUENCE_HANDLES_H_

#include <cstdint>
#include <vector>

#include "c_api/include/gpe/algebraic.h"
#include "c_api/include/gpe/sequence.h"
#include "encodings/sequence/absolute.h"
#include "encodings/sequence/algebraic.h"
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

#endif  // GPE_C_API_SRC_SEQUENCE_HANDLES_H_
