// Status plumbing for the C ABI: converts absl::Status and C++ exceptions into
// gpe_status codes plus the thread-local message that gpe_last_error_message returns.
#ifndef GPE_C_API_SRC_COMMON_ERROR_H_
#define GPE_C_API_SRC_COMMON_ERROR_H_

#include <exception>
#include <new>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "c_api/include/gpe/common.h"

namespace gpe::c_api {

// An error that reaches the caller as GPE_ERROR_VERSION_MISMATCH (absl has no such code;
// the gpe_status rides along as a payload that Report reads).
absl::Status VersionMismatchError(absl::string_view message);

// Records `status` for gpe_last_error_message (when it is an error) and returns its code.
gpe_status Report(const absl::Status& status);
// The thread's last error message ("" if none).
const char* LastErrorMessage();

// Runs `fn` (returning absl::Status) so that no exception escapes: every entry point
// of the ABI goes through here.
template <typename Fn>
gpe_status Guard(Fn&& fn) noexcept {
  try {
    return Report(std::forward<Fn>(fn)());
  } catch (const std::bad_alloc&) {
    return Report(absl::ResourceExhaustedError("out of memory"));
  } catch (const std::exception& e) {
    return Report(absl::InternalError(e.what()));
  } catch (...) {
    return Report(absl::InternalError("unknown C++ exception"));
  }
}

}  // namespace gpe::c_api

#endif  // GPE_C_API_SRC_COMMON_ERROR_H_
