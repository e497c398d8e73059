/* GroupPE's C ABI: the thread pool every threaded entry point runs on, the library's or
 * the application's own (since 0.8.0). One part of gpe/gpe.h (include that); valid C99
 * on its own.
 */
#ifndef GPE_THREAD_POOL_H_
#define GPE_THREAD_POOL_H_

#include "gpe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Threads: the library pool, or the application's own (since 0.8.0) ---------------
 *
 * Every threaded computation of the library (attention forward, backward and decoding;
 * RoPE's apply with num_threads > 1; the closed-form INR fits) runs its parallel work on
 * one pool. By default that is a pool built into the library: worker threads started on
 * first use, parked between calls, joined when the library is unloaded or the process
 * exits, started afresh in a forked child. An application that owns its threads (an
 * inference engine, a framework's intra-op pool) installs its own with
 * gpe_set_thread_pool; from then on the library starts no threads of its own.
 *
 * The work the library hands a pool is a batch of n independent tasks: parallel_for
 * must call task(task_ctx, i) exactly once for every i in [0, n), on any threads (the
 * calling thread included) in any order, concurrently or one after another, and return
 * when every call has returned. Tasks never wait for one another, so a pool that runs
 * them all on the calling thread is correct (only slower). Tasks do not throw and do not
 * call back into the pool's own waiting primitives. */
typedef void (*gpe_pool_task)(void* task_ctx, int64_t index);

typedef struct gpe_thread_pool {
  uint32_t struct_size; /* sizeof(gpe_thread_pool) */
  /* The parallelism the library plans for where a call asks for every thread
     (attention's num_threads = 0, the fits' automatic count): 1 .. 1024. */
  int32_t num_threads;
  void* user_data; /* passed back to parallel_for */
  void (*parallel_for)(void* user_data, int64_t n, gpe_pool_task task, void* task_ctx);
} gpe_thread_pool;

#define GPE_THREAD_POOL_INIT {sizeof(gpe_thread_pool), 1, NULL, NULL}

/* Installs `pool` (copied) for every later call of the process, or restores the built-in
 * pool when `pool` is NULL. Each parallel region of a call runs on the pool installed
 * when the region starts (a call of several regions may see a later pool for its later
 * ones): keep a pool's user_data valid until every call that may use it has returned.
 * Thread-safe. Errors:
 * INVALID_ARGUMENT for a NULL parallel_for or num_threads outside 1 .. 1024;
 * VERSION_MISMATCH for a struct_size larger than this library's. */
GPE_API GPE_NODISCARD gpe_status gpe_set_thread_pool(const gpe_thread_pool* pool);

/* The thread count a call that asks for every thread uses now: the installed pool's
 * num_threads, else the hardware's thread count. */
GPE_API GPE_NODISCARD gpe_status gpe_thread_pool_num_threads(int32_t* out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPE_THREAD_POOL_H_ */
