// The opaque RoPE handle of gpe/rope.h, shared by the entry points that create and apply
// it (rope.cc) and attention (c_api/src/attention/), which applies it to q and k inside
// the kernel. Internal to c_api.
#ifndef GPE_C_API_SRC_SEQUENCE_ROPE_HANDLE_H_
#define GPE_C_API_SRC_SEQUENCE_ROPE_HANDLE_H_

#include "c_api/include/gpe/rope.h"
#include "encodings/sequence/rope.h"

struct gpe_rope {
  gpe::encodings::sequence::Rope impl;
};

#endif  // GPE_C_API_SRC_SEQUENCE_ROPE_HANDLE_H_
