//! Helpers shared by the bench binaries; each declares `mod common;`.
//!
//! Lives in a directory (`common/mod.rs`) so cargo does not take it for a bench target.

#![allow(dead_code)] // each bench binary uses a different subset

use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::sync::{Barrier, OnceLock};
use std::task::Context;
use std::time::{Duration, Instant};

use criterion::SamplingMode;

/// Polls `f` once with a no-op waker and returns whether it was pending.
pub fn poll_pinned<F: Future + ?Sized>(f: Pin<&mut F>) -> bool {
    f.poll(&mut Context::from_waker(futures::task::noop_waker_ref()))
        .is_pending()
}

/// Create + first poll + drop: the whole life of a timeout that never fires.
///
/// `make` builds the future in its pinned slot, as an `.await` or `pin!` does and as
/// `bench/src/bin/compare.rs` does: passing the future by value would add a move of it to every
/// operation, which costs each peer by its size (≈ 13 ns for tokio's 112-byte `Sleep`,
/// nothing measurable for ours) and is not part of the work compared.
pub fn poll_once<F: Future>(make: impl FnOnce() -> F) {
    let mut f = std::pin::pin!(make());
    black_box(poll_pinned(f.as_mut()));
}

/// Whether single-thread figures are CPU time of the bench thread (`WHEEL_BENCH_CPU=1`)
/// rather than wall time.
///
/// On a shared, loaded machine wall time also counts the slices the scheduler gives other
/// processes, and the load changes between the minutes in which criterion measures one peer
/// and the next: ratios drift by 2× from run to run. The thread's CPU time counts only its
/// own work (waiting for a contended lock in the kernel is not counted, so two-thread
/// figures always use wall time).
pub fn cpu_clock() -> bool {
    static CPU: OnceLock<bool> = OnceLock::new();
    *CPU.get_or_init(|| std::env::var_os("WHEEL_BENCH_CPU").is_some_and(|v| v == "1"))
}

/// Measures one stretch of single-thread work with the clock [`cpu_clock`] selects.
pub enum Stopwatch {
    Wall(Instant),
    Cpu(cpu_time::ThreadTime),
}

impl Stopwatch {
    pub fn start() -> Stopwatch {
        if cpu_clock() {
            Stopwatch::Cpu(cpu_time::ThreadTime::now())
        } else {
            Stopwatch::Wall(Instant::now())
        }
    }

    pub fn elapsed(&self) -> Duration {
        match self {
            Stopwatch::Wall(start) => start.elapsed(),
            Stopwatch::Cpu(start) => start.elapsed(),
        }
    }
}

/// The runtime every real-clock bench enters: tokio's multi-thread scheduler (whose timer is
/// the one servers use), two workers for the machine's two vCPUs.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("build the bench runtime")
}

/// [`runtime`] with a tokio sleep always pending on its timer, for the create + first poll +
/// drop benches (`sleep`, `timeout`; `bench/src/bin/compare.rs` does the same).
///
/// tokio's time driver computes its next wake-up only when it parks, and a sleep registered
/// while that is unset or later than the sleep's deadline wakes it (an eventfd write),
/// again and again until it has parked anew. With nothing else pending it often parks with
/// none (each measured sleep lives a few nanoseconds), and how many registrations then pay
/// the write depends on when the parked worker gets a CPU: in one run of the in-task group,
/// 1.18M writes and 184 ns per tokio sleep, against 222 writes and 100 ns with this sleep
/// kept pending. A server always has some timer pending; so does this runtime: a task
/// re-arms a 500 ms sleep (two driver wake-ups a second), due before every 1 s deadline
/// measured.
pub fn runtime_with_pending_timer() -> tokio::runtime::Runtime {
    let rt = runtime();
    rt.spawn(async {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    rt
}

/// Runs `work(iters)` on two OS threads at once, both inside `rt`'s context, started
/// together; returns the slower thread's time (time per op per thread with both running).
pub fn on_two_threads<W>(rt: &tokio::runtime::Runtime, iters: u64, work: W) -> Duration
where
    W: Fn(u64) + Clone + Send,
{
    let other = work.clone();
    on_two_threads_each(rt, move || work(iters), move || other(iters))
}

/// Runs `first` and `second` on two OS threads at once, both inside `rt`'s context, started
/// together; returns the slower thread's time.
pub fn on_two_threads_each<A, B>(rt: &tokio::runtime::Runtime, first: A, second: B) -> Duration
where
    A: FnOnce() + Send,
    B: FnOnce() + Send,
{
    two_threads_timed(rt, false, first, second)
}

/// [`on_two_threads`] timing each thread's CPU time instead of wall time (the larger of
/// the two). On a machine whose two vCPUs are shared with other work, wall time per thread
/// also counts the slices in which one bench thread waited for a CPU, so a two-thread figure
/// cannot be compared with a one-thread figure; CPU time can: a cache line both threads
/// write on every operation makes each operation miss, and that shows in the thread's CPU
/// time. It hides only waiting that sleeps in the kernel (a futex): our shard lock spins and
/// yields, so it hides nothing of ours; for peers with a parking mutex, read the wall-time
/// group.
pub fn on_two_threads_cpu<W>(rt: &tokio::runtime::Runtime, iters: u64, work: W) -> Duration
where
    W: Fn(u64) + Clone + Send,
{
    let other = work.clone();
    two_threads_timed(rt, true, move || work(iters), move || other(iters))
}

fn two_threads_timed<A, B>(rt: &tokio::runtime::Runtime, cpu: bool, first: A, second: B) -> Duration
where
    A: FnOnce() + Send,
    B: FnOnce() + Send,
{
    let barrier = Barrier::new(2);
    let timed = |work: Box<dyn FnOnce() + Send + '_>| {
        let _enter = rt.handle().enter();
        barrier.wait();
        if cpu {
            let start = cpu_time::ThreadTime::now();
            work();
            return start.elapsed();
        }
        let start = Instant::now();
        work();
        start.elapsed()
    };
    std::thread::scope(|s| {
        let a = s.spawn(|| timed(Box::new(first)));
        let b = s.spawn(|| timed(Box::new(second)));
        let a = a.join().expect("bench thread panicked");
        let b = b.join().expect("bench thread panicked");
        a.max(b)
    })
}

/// Runs `round` (one round of `n` operations; returns its measured time) as many times as
/// `iters` operations need, rounded to the nearest whole round (at least one), and scales the
/// total to `iters` operations: criterion then reports time per operation, averaged over whole
/// rounds, for benches whose state only makes sense at full size (N timers held at once).
pub fn per_op(iters: u64, n: usize, mut round: impl FnMut() -> Duration) -> Duration {
    let n = n as u64;
    let rounds = ((iters + n / 2) / n).max(1);
    let total: Duration = (0..rounds).map(|_| round()).sum();
    let nanos = total.as_nanos() * u128::from(iters) / u128::from(rounds * n);
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// Configures `group` for [`per_op`] benches: one warm-up round, then ten flat samples of one
/// round each. Criterion then warns that it is "unable to complete 10 samples" in the
/// (deliberately tiny) target time and names the real expected time: that is expected.
pub fn rounds<M: criterion::measurement::Measurement>(
    group: &mut criterion::BenchmarkGroup<'_, M>,
) {
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_nanos(1))
        .measurement_time(Duration::from_millis(1))
        .throughput(criterion::Throughput::Elements(1));
}

/// A small deterministic generator (splitmix64): spreads deadlines without a `rand` dependency.
#[derive(Debug, Clone)]
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (multiply-shift; the bias is irrelevant here).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Shuffles `v` in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i as u64 + 1) as usize);
        }
    }
}
