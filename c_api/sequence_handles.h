// The opaque sequence-encoding handles of gpe.h, shared by the entry points that create
// them (sequence.cc) and those that consume them (attention.cc). Internal to c_api.
#ifndef GPE_C_API_SEQUENCE_HANDLES_H_
#define GPE_C_API_SEQUENCE_HANDLES_H_

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

#endif  // GPE_C_API_SEQUENCE_HANDLES_H_
