// gpe_set_thread_pool and gpe_thread_pool_num_threads: the application's pool for every
// threaded entry point, over parallel/thread_pool.h.
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "c_api/src/common/checks.h"
#include "c_api/src/common/error.h"
#include "c_api/include/gpe/thread_pool.h"
#include "parallel/thread_pool.h"

using gpe::c_api::CheckStructSize;
using gpe::c_api::Guard;

extern "C" {

gpe_status gpe_set_thread_pool(const gpe_thread_pool* pool) {
  return Guard([&]() -> absl::Status {
    if (pool == nullptr) {
      gpe::parallel::SetExternalPool(nullptr);
      return absl::OkStatus();
    }
    absl::Status s =
        CheckStructSize(pool->struct_size, sizeof(gpe_thread_pool), sizeof(gpe_thread_pool),
                        "gpe_thread_pool");
    if (!s.ok()) return s;
    if (pool->parallel_for == nullptr) {
      return absl::InvalidArgumentError("gpe_thread_pool.parallel_for is NULL");
    }
    if (pool->num_threads < 1 || pool->num_threads > 1024) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gpe_thread_pool.num_threads must be in [1, 1024]; got ", pool->num_threads));
    }
    gpe::parallel::ExternalPool external;
    external.user_data = pool->user_data;
    external.num_threads = pool->num_threads;
    external.parallel_for = pool->parallel_for;
    gpe::parallel::SetExternalPool(&external);
    return absl::OkStatus();
  });
}

gpe_status gpe_thread_pool_num_threads(int32_t* out) {
  return Guard([&]() -> absl::Status {
    if (out == nullptr) return absl::InvalidArgumentError("out is NULL");
    *out = gpe::parallel::DefaultThreads();
    return absl::OkStatus();
  });
}

}  // extern "C"
