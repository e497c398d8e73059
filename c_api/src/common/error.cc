#include "c_api/src/common/error.h"

#include <string>

#include "absl/strings/cord.h"

namespace gpe::c_api {
namespace {

std::string& ThreadMessage() {
  thread_local std::string message;
  return message;
}

constexpr char kVersionMismatchUrl[] = "gpe/status/version_mismatch";

gpe_status CodeOf(const absl::Status& s) {
  if (s.GetPayload(kVersionMismatchUrl).has_value()) return GPE_ERROR_VERSION_MISMATCH;
  switch (s.code()) {
    case absl::StatusCode::kOk: return GPE_OK;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists: return GPE_ERROR_INVALID_ARGUMENT;
    case absl::StatusCode::kOutOfRange: return GPE_ERROR_OUT_OF_RANGE;
    case absl::StatusCode::kUnimplemented: return GPE_ERROR_UNSUPPORTED;
    case absl::StatusCode::kResourceExhausted: return GPE_ERROR_OUT_OF_MEMORY;
    default: return GPE_ERROR_INTERNAL;
  }
}

}  // namespace

absl::Status VersionMismatchError(absl::string_view message) {
  absl::Status s = absl::FailedPreconditionError(message);
  s.SetPayload(kVersionMismatchUrl, absl::Cord("1"));
  return s;
}

gpe_status Report(const absl::Status& status) {
  if (status.ok()) return GPE_OK;
  try {
    ThreadMessage().assign(status.message().data(), status.message().size());
  } catch (...) {
    // Keep the previous message rather than let an allocation failure escape.
  }
  return CodeOf(status);
}

const char* LastErrorMessage() { return ThreadMessage().c_str(); }

}  // namespace gpe::c_api

extern "C" {

const char* gpe_last_error_message(void) { return gpe::c_api::LastErrorMessage(); }

const char* gpe_status_name(gpe_status status) {
  switch (status) {
    case GPE_OK: return "GPE_OK";
    case GPE_ERROR_INVALID_ARGUMENT: return "GPE_ERROR_INVALID_ARGUMENT";
    case GPE_ERROR_OUT_OF_RANGE: return "GPE_ERROR_OUT_OF_RANGE";
    case GPE_ERROR_UNSUPPORTED: return "GPE_ERROR_UNSUPPORTED";
    case GPE_ERROR_OUT_OF_MEMORY: return "GPE_ERROR_OUT_OF_MEMORY";
    case GPE_ERROR_INTERNAL: return "GPE_ERROR_INTERNAL";
    case GPE_ERROR_VERSION_MISMATCH: return "GPE_ERROR_VERSION_MISMATCH";
    default: return "GPE_ERROR_UNKNOWN";
  }
}

}  // extern "C"
