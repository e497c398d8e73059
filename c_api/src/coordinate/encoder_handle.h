// The opaque coordinate-encoder handle of gpe/coordinate.h, shared by the entry points
// that create and apply it (coordinate.cc) and the INR fits that take 1-D encoders
// (c_api/src/inr/least_squares.cc). Internal to c_api.
#ifndef GPE_C_API_SRC_COORDINATE_ENCODER_HANDLE_H_
#define GPE_C_API_SRC_COORDINATE_ENCODER_HANDLE_H_

#include <memory>

#include "encodings/coordinate/encoder.h"
#include "encodings/coordinate/fourier_features.h"
#include "encodings/coordinate/so2_bessel.h"

// The encoder behind the common interface, and the concrete type for the accessors that
// only one kind answers (frequencies, SO(2) terms).
struct gpe_coordinate_encoder {
  std::unique_ptr<gpe::encodings::CoordinateEncoder> impl;
  const gpe::encodings::FourierFeatures* fourier = nullptr;
  const gpe::encodings::So2BesselEncoder* so2 = nullptr;
};

#endif  // GPE_C_API_SRC_COORDINATE_ENCODER_HANDLE_H_
