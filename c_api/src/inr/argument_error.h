// Status codes of inr/ that are the caller's argument problems at the C ABI (training.cc,
// image.cc). Internal to c_api.
#ifndef GPE_C_API_SRC_INR_ARGUMENT_ERROR_H_
#define GPE_C_API_SRC_INR_ARGUMENT_ERROR_H_

#include "absl/status/status.h"

namespace gpe::c_api {

// Failures the solvers report as FailedPrecondition (divergence) or the image writers as
// Internal / Unavailable (an unwritable path) are the caller's argument problems.
inline absl::Status AsArgumentError(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kNotFound:
      return absl::InvalidArgumentError(s.message());
    default:
      return s;
  }
}

}  // namespace gpe::c_api

#endif  // GPE_C_API_SRC_INR_ARGUMENT_ERROR_H_
