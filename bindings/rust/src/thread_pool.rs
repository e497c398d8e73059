//! The thread pool every threaded computation of the library runs on (gpe/thread_pool.h,
//! since C ABI 0.8.0): the library's built-in pool, or the application's own.
//!
//! Attention forward, backward and decoding, RoPE with `num_threads > 1` and the
//! closed-form INR fits split their parallel work into batches of independent tasks. By
//! default a pool built into libgpe runs them on worker threads of its own; an
//! application that owns its threads installs a [`ThreadPool`] with [`set_thread_pool`],
//! after which the library starts no threads of its own. `set_thread_pool(None)` restores
//! the built-in pool.
//!
//! The setting is process-wide: it applies to every later call of every thread (and of
//! every other binding or C caller in the process), and is thread-safe.
//!
//! Safety of the callback, which this module guarantees whatever the implementation does:
//! - a pool's `parallel_for` sees each batch as `task(i)` for i in [0, n); a call with
//!   an index outside [0, n), or with an index already run, does nothing, and any index
//!   the pool has not run when `parallel_for` returns is run on the calling thread then,
//!   so the library always sees every task run exactly once;
//! - a panic in `parallel_for` (or on a thread it waits for) cannot unwind into the C
//!   library: it is reported on stderr and the process aborts;
//! - the library may still be running a call on a pool after that pool was replaced
//!   (calls in flight keep the pool they started with), so every pool installed is kept
//!   alive until the process exits: installing a new pool object each time retains each
//!   one (installing the same `Arc` again reuses its entry).

use std::io::Write;
use std::os::raw::c_void;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::{check, ffi, Result};

/// An application's thread pool (gpe_thread_pool).
///
/// `parallel_for(n, task)` should call `task(i)` for every i in [0, n), on any threads
/// (the calling one included), in any order, concurrently or one after another, and
/// return once every call has returned (the borrow of `task` ends with the call, so safe
/// code cannot do otherwise: e.g. `std::thread::scope`). Tasks never wait for one
/// another, so running them all on the calling thread is correct, only slower. Indices
/// skipped, repeated or out of range are dealt with as the module documentation says.
pub trait ThreadPool: Send + Sync + 'static {
    /// The parallelism the library plans for where a call asks for every thread
    /// (attention's `num_threads = 0`, the fits' automatic count): 1 ..= 1024. Read once,
    /// by `set_thread_pool`.
    fn num_threads(&self) -> i32;
    /// Runs `task(i)` for every i in [0, n) and returns when all have returned.
    fn parallel_for(&self, n: i64, task: &(dyn Fn(i64) + Sync));
}

// Every pool ever installed, boxed so that each has a fixed thin address (the C side's
// user_data; a Vec's own elements move when it grows). Never emptied: a call in flight
// may still be using any of them.
#[allow(clippy::vec_box)]
static INSTALLED: Mutex<Vec<Box<Arc<dyn ThreadPool>>>> = Mutex::new(Vec::new());

/// Installs `pool` for every later call of the process (`gpe_set_thread_pool`), or
/// restores the library's built-in pool with `None`. Calls already running finish on the
/// pool they started with. The pool is kept alive until the process exits (see the
/// module documentation). Errors: `InvalidArgument` for `num_threads()` outside
/// 1 ..= 1024; the pool in use is then unchanged.
pub fn set_thread_pool(pool: Option<Arc<dyn ThreadPool>>) -> Result<()> {
    let pool = match pool {
        // SAFETY: NULL restores the built-in pool.
        None => return check(unsafe { ffi::gpe_set_thread_pool(std::ptr::null()) }),
        Some(pool) => pool,
    };
    let num_threads = pool.num_threads();
    // Held across the C call, so that a failed install can drop its fresh entry knowing
    // no other install saw it.
    let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    let data = Arc::as_ptr(&pool) as *const u8;
    let (index, fresh) = match installed.iter().position(|p| Arc::as_ptr(p) as *const u8 == data) {
        Some(i) => (i, false),
        None => {
            installed.push(Box::new(pool));
            (installed.len() - 1, true)
        }
    };
    let mut c = ffi::gpe_thread_pool::init();
    c.num_threads = num_threads;
    c.user_data = &*installed[index] as *const Arc<dyn ThreadPool> as *mut c_void;
    c.parallel_for = Some(parallel_for_trampoline);
    // SAFETY: c is a valid gpe_thread_pool; user_data points into a Box that is never
    // freed (INSTALLED only grows) and the trampoline reads it as what it is.
    let status = check(unsafe { ffi::gpe_set_thread_pool(&c) });
    if status.is_err() && fresh {
        // Refused: the library never saw this entry, so no call can be using it.
        installed.pop();
    }
    status
}

/// The thread count a call that asks for every thread uses now: the installed pool's
/// `num_threads()`, else the hardware's thread count (`gpe_thread_pool_num_threads`).
pub fn thread_pool_num_threads() -> Result<i32> {
    let mut n = 0i32;
    // SAFETY: n is a valid out pointer.
    check(unsafe { ffi::gpe_thread_pool_num_threads(&mut n) })?;
    Ok(n)
}

// The library's task context, shared by the threads of one batch. The library's tasks
// are safe to run concurrently on any threads for distinct indices (thread_pool.h).
struct TaskContext(*mut c_void);
// SAFETY: see above; the pointer is only passed back to the library's task.
unsafe impl Send for TaskContext {}
unsafe impl Sync for TaskContext {}
impl TaskContext {
    // A method, so that closures capture the whole (Sync) context, not its raw field.
    fn get(&self) -> *mut c_void {
        self.0
    }
}

// gpe_thread_pool.parallel_for of every pool installed from Rust.
unsafe extern "C" fn parallel_for_trampoline(user_data: *mut c_void, n: i64, task: ffi::gpe_pool_task, task_ctx: *mut c_void) {
    let task = match task {
        Some(task) => task,
        None => return, // the library always passes one
    };
    if n <= 0 {
        return;
    }
    // SAFETY: user_data is the address of a Box<Arc<dyn ThreadPool>> in INSTALLED, never freed.
    let pool: &dyn ThreadPool = &**(user_data as *const Arc<dyn ThreadPool>);
    let ctx = TaskContext(task_ctx);
    // One bit per index: set by the first call of that index, which alone runs the task.
    let words = (n as u64 + 63) / 64;
    let done: Vec<AtomicU64> = (0..words).map(|_| AtomicU64::new(0)).collect();
    let claim = |i: i64| -> bool {
        let bit = 1u64 << (i % 64);
        done[(i / 64) as usize].fetch_or(bit, Ordering::AcqRel) & bit == 0
    };
    let run = |i: i64| {
        if (0..n).contains(&i) && claim(i) {
            // SAFETY: a valid index of this batch, run once; ctx lives until the batch returns.
            task(ctx.get(), i)
        }
    };
    if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| pool.parallel_for(n, &run))) {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-string panic".to_string());
        // writeln!, not eprintln!, which would panic here if stderr were closed.
        let _ = writeln!(std::io::stderr(), "gpe: a ThreadPool's parallel_for panicked ({}); a panic cannot unwind into libgpe: aborting", what);
        std::process::abort();
    }
    // `run`'s borrow has ended: no call of it is running. Indices the pool skipped run here.
    for i in 0..n {
        if claim(i) {
            // SAFETY: as above.
            task(ctx.get(), i);
        }
    }
}
