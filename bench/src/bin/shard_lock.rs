//! Why the shard lock is a yielding spin lock: 32 threads hammer one lock guarding a shard-sized
//! critical section (a few list operations on a small wheel-like structure), first with the
//! spin lock the shards use (`spin::mutex::SpinMutex` with `spin::relax::Yield`, as in
//! `src/loom.rs`), then with `std::sync::Mutex`. It prints, for each, the total throughput
//! and the worst single operation (lock, work, unlock) any thread saw, plus its p99.9.
//!
//! ```text
//! cargo run --release -p wheel-bench --bin shard_lock          # 32 threads, 2 s per lock
//! cargo run --release -p wheel-bench --bin shard_lock -- 8 5   # 8 threads, 5 s per lock
//! ```
//!
//! 32 threads on a 2-vCPU machine is the adversarial case: every shard's threads preempted
//! while holding the lock. Real shards see one thread each most of the time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;

/// The work done under the lock: what a register or a cancel does to a shard (push to a
/// bucket list, bump a counter, pop another entry).
#[derive(Default)]
struct Work {
    slots: Vec<u32>,
    count: u64,
}

impl Work {
    fn step(&mut self, i: u32) {
        self.slots.push(i);
        if self.slots.len() > 64 {
            self.slots.swap_remove((i as usize) % 64);
        }
        self.count += 1;
    }
}

/// A lock under test.
trait Lock: Send + Sync + 'static {
    fn with(&self, f: &mut dyn FnMut(&mut Work));
}

struct Spin(spin::mutex::SpinMutex<Work, spin::relax::Yield>);

impl Lock for Spin {
    fn with(&self, f: &mut dyn FnMut(&mut Work)) {
        f(&mut self.0.lock());
    }
}

struct Std(Mutex<Work>);

impl Lock for Std {
    fn with(&self, f: &mut dyn FnMut(&mut Work)) {
        f(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()));
    }
}

struct Outcome {
    ops: u64,
    worst: Duration,
    p999: Duration,
}

fn hammer(lock: Arc<dyn Lock>, threads: usize, run: Duration) -> Outcome {
    let start = Arc::new(Barrier::new(threads + 1));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (lock, start, stop) = (lock.clone(), start.clone(), stop.clone());
            std::thread::spawn(move || {
                // Every operation counts for the worst; one in 16 is kept for the p99.9 (a
                // sample keeps memory small: tens of millions of operations run).
                let (mut sample, mut worst, mut ops) = (Vec::new(), Duration::ZERO, 0u64);
                start.wait();
                let mut i = t as u32;
                while !stop.load(Ordering::Relaxed) {
                    let began = Instant::now();
                    lock.with(&mut |w| w.step(i));
                    let took = began.elapsed();
                    worst = worst.max(took);
                    if ops % 16 == 0 {
                        sample.push(took);
                    }
                    ops += 1;
                    i = i.wrapping_add(1);
                }
                (sample, worst, ops)
            })
        })
        .collect();
    start.wait();
    std::thread::sleep(run);
    stop.store(true, Ordering::Relaxed);
    let (mut all, mut worst, mut ops) = (Vec::new(), Duration::ZERO, 0);
    for worker in workers {
        let (sample, w, n) = worker.join().expect("worker panicked");
        all.extend(sample);
        worst = worst.max(w);
        ops += n;
    }
    all.sort_unstable();
    Outcome {
        ops,
        worst,
        p999: all[(all.len() - 1) * 999 / 1000],
    }
}

/// One lock, many threads: the shard's spin lock beside `std::sync::Mutex`.
#[derive(Debug, Parser)]
#[command(name = "shard_lock")]
struct Args {
    /// Threads hammering the lock
    #[arg(default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..))]
    threads: u16,
    /// Seconds each lock is hammered
    #[arg(default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..))]
    secs: u64,
}

fn main() {
    let Args { threads, secs } = Args::parse();
    let threads = usize::from(threads);
    let run = Duration::from_secs(secs);
    println!("{threads} threads on one lock, {secs} s each\n");
    println!("| lock | throughput | worst single operation | p99.9 |");
    println!("|---|---:|---:|---:|");
    let locks: [(&str, Arc<dyn Lock>); 2] = [
        (
            "spin (yield), the shard lock",
            Arc::new(Spin(spin::mutex::SpinMutex::new(Work::default()))),
        ),
        (
            "std::sync::Mutex",
            Arc::new(Std(Mutex::new(Work::default()))),
        ),
    ];
    for (name, lock) in locks {
        let out = hammer(lock, threads, run);
        println!(
            "| {name} | {:.1} M ops/s | {:.1} ms | {:.1} µs |",
            out.ops as f64 / run.as_secs_f64() / 1e6,
            out.worst.as_secs_f64() * 1e3,
            out.p999.as_secs_f64() * 1e6,
        );
    }
}
