//! Create + first poll + drop of a 1 s sleep (the never-firing timeout case), ours beside
//! tokio's and pingora-timeout's, on 1 and 2 threads.
//!
//! `cargo bench --bench sleep`. Two-thread figures are wall time per operation per thread with
//! both threads running at once (throughput = 2 / figure). `WHEEL_BENCH_CPU=1` makes the
//! one-thread figures the bench thread's CPU time, steadier on a loaded machine. The
//! `…_in_task` group repeats the one-thread case from inside a tokio task. The `…_2threads_cpu`
//! group repeats the two-thread case timing each thread's CPU time (always, whatever
//! `WHEEL_BENCH_CPU` says): per-thread ns/op comparable with the one-thread CPU figures.

mod common;

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};

use common::poll_once;

const DELAY: Duration = Duration::from_secs(1);

/// The operations compared, each run inside a runtime context.
#[derive(Clone, Copy)]
enum Op {
    WheelTimer,
    WheelFree,
    Tokio,
    Pingora,
}

fn run(op: Op, timer: &wheel_timer::Timer, iters: u64) {
    match op {
        Op::WheelTimer => (0..iters).for_each(|_| poll_once(|| timer.sleep(DELAY))),
        Op::WheelFree => (0..iters).for_each(|_| poll_once(|| wheel_timer::sleep_wheel(DELAY))),
        Op::Tokio => (0..iters).for_each(|_| poll_once(|| tokio::time::sleep(DELAY))),
        Op::Pingora => {
            (0..iters).for_each(|_| poll_once(|| pingora_timeout::fast_timeout::fast_sleep(DELAY)))
        }
    }
}

const OPS: [(&str, Op); 4] = [
    ("wheel_timer/Timer::sleep", Op::WheelTimer),
    ("wheel_timer/sleep_wheel", Op::WheelFree),
    ("tokio/sleep", Op::Tokio),
    ("pingora/fast_sleep", Op::Pingora),
];

fn one_thread(c: &mut Criterion) {
    let rt = common::runtime_with_pending_timer();
    let _enter = rt.enter();
    let timer = wheel_timer::Timer::new();
    let mut group = c.benchmark_group("sleep_create_poll_drop_1thread");
    for (name, op) in OPS {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let start = common::Stopwatch::start();
                run(op, &timer, iters);
                start.elapsed()
            })
        });
    }
    group.finish();
}

fn two_threads(c: &mut Criterion) {
    let rt = common::runtime_with_pending_timer();
    let timer = {
        let _enter = rt.enter();
        wheel_timer::Timer::new()
    };
    let mut group = c.benchmark_group("sleep_create_poll_drop_2threads");
    for (name, op) in OPS {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let timer = timer.clone();
                common::on_two_threads(&rt, iters, move |iters| run(op, &timer, iters))
            })
        });
    }
    group.finish();
    // The same, timing each thread's CPU time: comparable with the one-thread figures (see
    // `common::on_two_threads_cpu`), so a cache line both threads write per operation would
    // show as a higher figure here than there.
    let mut group = c.benchmark_group("sleep_create_poll_drop_2threads_cpu");
    for (name, op) in OPS {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let timer = timer.clone();
                common::on_two_threads_cpu(&rt, iters, move |iters| run(op, &timer, iters))
            })
        });
    }
    group.finish();
}

/// The same on one thread, from inside a tokio task, where servers set their timeouts: the
/// free function can then skip naming the runtime (see `src/default.rs`), and tokio's own
/// `sleep` finds its timer from the task's context as usual.
fn one_thread_in_task(c: &mut Criterion) {
    let rt = common::runtime_with_pending_timer();
    let timer = {
        let _enter = rt.enter();
        wheel_timer::Timer::new()
    };
    let mut group = c.benchmark_group("sleep_create_poll_drop_1thread_in_task");
    for (name, op) in OPS {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let timer = timer.clone();
                let task = rt.spawn(async move {
                    // A task that never yields stays on its worker thread, whose CPU time the
                    // stopwatch reads.
                    let start = common::Stopwatch::start();
                    run(op, &timer, iters);
                    start.elapsed()
                });
                rt.block_on(task).expect("bench task panicked")
            })
        });
    }
    group.finish();
}

criterion_group!(benches, one_thread, two_threads, one_thread_in_task);
criterion_main!(benches);
