//! An application's thread pool (gpe::set_thread_pool, C ABI 0.8.0) through the Rust
//! bindings: threaded calls run their tasks on it and give the built-in pool's bits, the
//! planned thread count follows it, bad pools are refused, None restores the built-in
//! pool, a pool that skips or repeats indices still gets every task run exactly once,
//! and a panicking pool aborts instead of unwinding into C.
//!
//! The pool is process-wide and cargo runs the tests of this file on parallel threads:
//! every assertion that installs a pool is in the one test `pools_install_and_restore`.
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use gpe::*;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^= z >> 31;
        ((z >> 11) as f64 / (1u64 << 53) as f64 - 0.5) as f32
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.next()).collect()
    }
}

// Each batch goes to `workers` scoped threads (the calling one included), each taking
// indices from the end of the range down, the reverse of the built-in pool's order.
struct ScopedPool {
    workers: usize,
    num_threads: i32,
    regions: AtomicU64,
    tasks: AtomicU64,
}

impl ScopedPool {
    fn new(workers: usize, num_threads: i32) -> Arc<ScopedPool> {
        Arc::new(ScopedPool { workers, num_threads, regions: AtomicU64::new(0), tasks: AtomicU64::new(0) })
    }
    fn counts(&self) -> (u64, u64) {
        (self.regions.load(Ordering::SeqCst), self.tasks.load(Ordering::SeqCst))
    }
}

impl ThreadPool for ScopedPool {
    fn num_threads(&self) -> i32 {
        self.num_threads
    }
    fn parallel_for(&self, n: i64, task: &(dyn Fn(i64) + Sync)) {
        self.regions.fetch_add(1, Ordering::SeqCst);
        let next = AtomicI64::new(n - 1);
        let drain = || loop {
            let i = next.fetch_sub(1, Ordering::SeqCst);
            if i < 0 {
                break;
            }
            self.tasks.fetch_add(1, Ordering::SeqCst);
            task(i);
        };
        std::thread::scope(|s| {
            for _ in 1..self.workers {
                s.spawn(drain);
            }
            drain();
        });
    }
}

// Breaks the contract on the calling thread: skips every third index, runs the others
// twice, and asks for indices -1 and n. The bindings still run each task exactly once.
struct SloppyPool {
    regions: AtomicU64,
}

impl ThreadPool for SloppyPool {
    fn num_threads(&self) -> i32 {
        3
    }
    fn parallel_for(&self, n: i64, task: &(dyn Fn(i64) + Sync)) {
        self.regions.fetch_add(1, Ordering::SeqCst);
        task(-1);
        task(n);
        for i in 0..n {
            if i % 3 != 0 {
                task(i);
                task(i);
            }
        }
    }
}

// Fails with the first differing value of the first differing output, not all of them.
fn assert_same_bits(got: &[Vec<u32>], want: &[Vec<u32>], what: &str) {
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "{}: output {} has {} values; expected {}", what, k, g.len(), w.len());
        if let Some(i) = (0..g.len()).find(|&i| g[i] != w[i]) {
            panic!("{}: output {} differs first at {}: {} vs {} (the built-in pool's)", what, k, i, f32::from_bits(g[i]), f32::from_bits(w[i]));
        }
    }
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

// Attention forward (float32, the optimised kernels) on [1, 200, 4, 32] queries over 2
// kv heads, and RoPE forward on [2, 300, 4, 64] with 4 threads: the outputs' bits.
fn workload(attention_threads: i32) -> Vec<Vec<u32>> {
    let (s, hq, hk, d) = (200usize, 4usize, 2usize, 32usize);
    let mut rng = Rng(20261127);
    let (q, k, v) = (rng.vec(s * hq * d), rng.vec(s * hk * d), rng.vec(s * hk * d));
    let layout = AttentionLayout::Padded { batch: 1, seq_q: s, seq_k: s };
    let heads = AttentionHeads { heads_q: hq, heads_kv: hk, head_dim: d, head_dim_v: None };
    let options = AttentionOptions { num_threads: attention_threads, ..Default::default() };
    let (o, lse) = attention_forward(&options, &layout, &heads, &q, &k, &v).unwrap();

    let rope = Rope::new(&RopeOptions { num_threads: 4, ..RopeOptions::new(64) }).unwrap();
    let shape = [2usize, 300, 4, 64];
    let x = rng.vec(shape.iter().product());
    let y = rope.forward(&Tokens::bshd(), &x, &shape).unwrap();
    vec![bits(&o), bits(&lse), bits(&y)]
}

#[test]
fn pools_install_and_restore() {
    let built_in_threads = thread_pool_num_threads().unwrap();
    assert!(built_in_threads >= 1);
    // Attention with an explicit 3 threads: the same split of the work on either pool.
    let reference = workload(3);

    // Bad pools are refused and leave the built-in pool in place.
    for bad in [0, 1025, 2000, -1] {
        let pool = ScopedPool::new(2, bad);
        let e = set_thread_pool(Some(pool.clone())).expect_err("a bad num_threads must be refused");
        assert_eq!(e.status, Status::InvalidArgument, "num_threads {}: {}", bad, e);
        assert!(e.message.contains("num_threads"), "{}", e.message);
        assert_eq!(thread_pool_num_threads().unwrap(), built_in_threads);
        assert_same_bits(&workload(3), &reference, "refused pool");
        assert_eq!(pool.counts(), (0, 0), "a refused pool ran tasks");
    }

    // The application's pool: every threaded call's tasks run there, with the same bits.
    let pool = ScopedPool::new(3, 3);
    set_thread_pool(Some(pool.clone())).unwrap();
    assert_eq!(thread_pool_num_threads().unwrap(), 3);
    assert_same_bits(&workload(3), &reference, "scoped pool");
    let (regions, tasks) = pool.counts();
    assert!(regions >= 2, "attention and RoPE each make a region; got {}", regions);
    assert!(tasks >= 2 * regions, "{} tasks in {} regions", tasks, regions);
    // num_threads = 0 plans for the installed pool's count, 3: the same split again.
    assert_same_bits(&workload(0), &reference, "scoped pool, num_threads = 0");
    assert!(pool.counts().0 > regions);

    // A refused pool leaves the installed one in place.
    let refused = ScopedPool::new(2, 0);
    assert!(set_thread_pool(Some(refused.clone())).is_err());
    assert_eq!(thread_pool_num_threads().unwrap(), 3);
    let before = pool.counts().0;
    assert_same_bits(&workload(3), &reference, "still the scoped pool");
    assert!(pool.counts().0 > before);
    assert_eq!(refused.counts(), (0, 0));

    // Installing the same pool again, and another count.
    set_thread_pool(Some(pool.clone())).unwrap();
    let wide = ScopedPool::new(2, 1024);
    set_thread_pool(Some(wide.clone())).unwrap();
    assert_eq!(thread_pool_num_threads().unwrap(), 1024);
    assert_same_bits(&workload(3), &reference, "1024-thread pool");
    assert!(wide.counts().0 >= 2);

    // A pool that skips, repeats and invents indices: each task still runs exactly once.
    let sloppy = Arc::new(SloppyPool { regions: AtomicU64::new(0) });
    set_thread_pool(Some(sloppy.clone())).unwrap();
    assert_same_bits(&workload(3), &reference, "sloppy pool");
    assert!(sloppy.regions.load(Ordering::SeqCst) >= 2);

    // None restores the built-in pool: no region reaches the old pools.
    set_thread_pool(None).unwrap();
    assert_eq!(thread_pool_num_threads().unwrap(), built_in_threads);
    let (counts, wide_counts, sloppy_regions) = (pool.counts(), wide.counts(), sloppy.regions.load(Ordering::SeqCst));
    assert_same_bits(&workload(3), &reference, "built-in pool restored");
    assert_eq!(pool.counts(), counts);
    assert_eq!(wide.counts(), wide_counts);
    assert_eq!(sloppy.regions.load(Ordering::SeqCst), sloppy_regions);
    // Restoring twice is harmless.
    set_thread_pool(None).unwrap();
}

// A panic in parallel_for cannot unwind into C: the process aborts. Run in a child
// process (this test binary, filtered to `panicking_pool_child`), which must die of
// SIGABRT after printing the panic.
#[cfg(unix)]
#[test]
fn a_panicking_pool_aborts_the_process() {
    use std::os::unix::process::ExitStatusExt;
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "panicking_pool_child", "--nocapture", "--test-threads=1"])
        .env("GPE_PANICKING_POOL_CHILD", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(6), "status {:?}, stderr: {}", out.status, stderr);
    assert!(stderr.contains("pool panics on purpose"), "{}", stderr);
    assert!(stderr.contains("aborting"), "{}", stderr);
}

struct PanickingPool;
impl ThreadPool for PanickingPool {
    fn num_threads(&self) -> i32 {
        2
    }
    fn parallel_for(&self, _n: i64, _task: &(dyn Fn(i64) + Sync)) {
        panic!("pool panics on purpose");
    }
}

#[test]
#[ignore = "runs in a child process of a_panicking_pool_aborts_the_process"]
fn panicking_pool_child() {
    if std::env::var_os("GPE_PANICKING_POOL_CHILD").is_none() {
        return;
    }
    set_thread_pool(Some(Arc::new(PanickingPool))).unwrap();
    let _ = workload(3);
    unreachable!("the panicking pool returned");
}
