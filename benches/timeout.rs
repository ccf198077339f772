//! Create + first poll + drop of a 1 s timeout, ours beside tokio's and pingora-timeout's:
//! around a ready future (the deadline is never registered) and around a pending one (it is
//! registered, then cancelled by the drop), on 1 thread and, for the pending case, 2 threads.
//!
//! `cargo bench --bench timeout`. Two-thread figures are wall time per operation per thread
//! with both threads running at once (throughput = 2 / figure); this machine's two vCPUs give
//! about one core of throughput, so compare ratios, not scaling. `WHEEL_BENCH_CPU=1` makes
//! the one-thread figures the bench thread's CPU time, steadier on a loaded machine.

mod common;

use std::future::{pending, ready, Future};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use wheel_timer::Timer;

use common::poll_once;

const DELAY: Duration = Duration::from_secs(1);

/// The timeouts compared, each created inside a runtime context.
#[derive(Clone, Copy)]
enum Op {
    WheelTimer,
    WheelFree,
    Tokio,
    Pingora,
}

const OPS: [(&str, Op); 4] = [
    ("wheel_timer/Timer::timeout", Op::WheelTimer),
    ("wheel_timer/timeout_wheel", Op::WheelFree),
    ("tokio/timeout", Op::Tokio),
    ("pingora/fast_timeout", Op::Pingora),
];

fn run<F: Future>(op: Op, timer: &Timer, iters: u64, inner: fn() -> F) {
    match op {
        Op::WheelTimer => (0..iters).for_each(|_| poll_once(|| timer.timeout(DELAY, inner()))),
        Op::WheelFree => {
            (0..iters).for_each(|_| poll_once(|| wheel_timer::timeout_wheel(DELAY, inner())))
        }
        Op::Tokio => (0..iters).for_each(|_| poll_once(|| tokio::time::timeout(DELAY, inner()))),
        Op::Pingora => (0..iters).for_each(|_| {
            poll_once(|| pingora_timeout::fast_timeout::fast_timeout(DELAY, inner()))
        }),
    }
}

fn one_thread<F: Future>(c: &mut Criterion, name: &str, inner: fn() -> F) {
    let rt = common::runtime_with_pending_timer();
    let _enter = rt.enter();
    let timer = Timer::new();
    let mut group = c.benchmark_group(name);
    for (name, op) in OPS {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let start = common::Stopwatch::start();
                run(op, &timer, iters, inner);
                start.elapsed()
            })
        });
    }
    group.finish();
}

fn ready_1thread(c: &mut Criterion) {
    one_thread(c, "timeout_ready_1thread", || ready(()));
}

fn pending_1thread(c: &mut Criterion) {
    one_thread(c, "timeout_pending_1thread", pending::<()>);
}

fn pending_2threads(c: &mut Criterion) {
    let rt = common::runtime_with_pending_timer();
    let timer = {
        let _enter = rt.enter();
        Timer::new()
    };
    let mut group = c.benchmark_group("timeout_pending_2threads");
    for (name, op) in OPS {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let timer = timer.clone();
                common::on_two_threads(&rt, iters, move |iters| {
                    run(op, &timer, iters, pending::<()>)
                })
            })
        });
    }
    group.finish();
}

criterion_group!(benches, ready_1thread, pending_1thread, pending_2threads);
criterion_main!(benches);
