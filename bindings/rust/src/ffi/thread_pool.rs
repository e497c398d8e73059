//! gpe/thread_pool.h (since 0.8.0): the pool every threaded entry point runs on, the
//! library's or the application's own (gpe_thread_pool, installed by gpe_set_thread_pool).

use std::os::raw::c_void;

use super::gpe_status;

/// gpe_pool_task: one task of a batch, `task(task_ctx, index)`.
pub type gpe_pool_task = Option<unsafe extern "C" fn(task_ctx: *mut c_void, index: i64)>;

/// gpe_thread_pool: `parallel_for(user_data, n, task, task_ctx)` must call
/// `task(task_ctx, i)` exactly once for every i in [0, n), on any threads, and return when
/// every call has returned.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_thread_pool {
    pub struct_size: u32,
    /// 1 .. 1024: the parallelism planned for calls that ask for every thread.
    pub num_threads: i32,
    pub user_data: *mut c_void,
    pub parallel_for: Option<unsafe extern "C" fn(user_data: *mut c_void, n: i64, task: gpe_pool_task, task_ctx: *mut c_void)>,
}
impl gpe_thread_pool {
    /// GPE_THREAD_POOL_INIT.
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), num_threads: 1, user_data: std::ptr::null_mut(), parallel_for: None }
    }
}

extern "C" {
    pub fn gpe_set_thread_pool(pool: *const gpe_thread_pool) -> gpe_status;
    pub fn gpe_thread_pool_num_threads(out: *mut i32) -> gpe_status;
}
