//! `DelayQueue` insert, remove, reset and expire, ours beside tokio-util's, in one run.
//!
//! `cargo bench --bench delay_queue`. Each figure is time per value over a batch of `iters`
//! (`insert_with_capacity`: into queues made `with_capacity(iters)`)
//! values with deadlines spread over 1–1000 ms (levels 0–2 of both wheels), on a
//! current-thread runtime with a paused clock (so expiry is a clock jump, not a wait). Only
//! the named operation is timed: filling the queue for remove/reset/expire and dropping it
//! are not. `WHEEL_BENCH_CPU=1` times the bench thread's CPU instead of wall time.

mod common;

use std::future::poll_fn;
use std::hint::black_box;
use std::task::Poll;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use tokio::time::Instant;

/// The spread of deadlines, in ms.
const SPREAD: u64 = 1000;

/// The deadline of the `i`th value: scattered over 1..=SPREAD ms so that neither queue
/// sees them in order.
fn deadline(start: Instant, i: u64) -> Instant {
    start + Duration::from_millis(1 + (i.wrapping_mul(7919) % SPREAD))
}

/// The two queues behind one interface, so each case is written once.
trait Queue: Sized {
    type Key: Copy;
    fn new() -> Self;
    fn with_capacity(capacity: usize) -> Self;
    fn insert_at(&mut self, value: u64, when: Instant) -> Self::Key;
    fn remove(&mut self, key: &Self::Key) -> u64;
    fn reset_at(&mut self, key: &Self::Key, when: Instant);
    /// Takes out every expired value; returns how many.
    fn drain(&mut self, rt: &tokio::runtime::Runtime) -> u64;
}

impl Queue for wheel_timer::DelayQueue<u64> {
    type Key = wheel_timer::delay_queue::Key;
    fn new() -> Self {
        wheel_timer::DelayQueue::new()
    }
    fn with_capacity(capacity: usize) -> Self {
        wheel_timer::DelayQueue::with_capacity(capacity)
    }
    fn insert_at(&mut self, value: u64, when: Instant) -> Self::Key {
        wheel_timer::DelayQueue::insert_at(self, value, when)
    }
    fn remove(&mut self, key: &Self::Key) -> u64 {
        wheel_timer::DelayQueue::remove(self, key).into_inner()
    }
    fn reset_at(&mut self, key: &Self::Key, when: Instant) {
        wheel_timer::DelayQueue::reset_at(self, key, when)
    }
    fn drain(&mut self, rt: &tokio::runtime::Runtime) -> u64 {
        drain_with(rt, |cx| {
            self.poll_expired(cx).map(|e| e.map(|e| e.into_inner()))
        })
    }
}

impl Queue for tokio_util::time::DelayQueue<u64> {
    type Key = tokio_util::time::delay_queue::Key;
    fn new() -> Self {
        tokio_util::time::DelayQueue::new()
    }
    fn with_capacity(capacity: usize) -> Self {
        tokio_util::time::DelayQueue::with_capacity(capacity)
    }
    fn insert_at(&mut self, value: u64, when: Instant) -> Self::Key {
        tokio_util::time::DelayQueue::insert_at(self, value, when)
    }
    fn remove(&mut self, key: &Self::Key) -> u64 {
        tokio_util::time::DelayQueue::remove(self, key).into_inner()
    }
    fn reset_at(&mut self, key: &Self::Key, when: Instant) {
        tokio_util::time::DelayQueue::reset_at(self, key, when)
    }
    fn drain(&mut self, rt: &tokio::runtime::Runtime) -> u64 {
        drain_with(rt, |cx| {
            self.poll_expired(cx).map(|e| e.map(|e| e.into_inner()))
        })
    }
}

/// Takes out values until the queue says `Ready(None)` or, with values left, `Pending` after
/// a yield to the runtime (tokio-util's queue may need driver turns to see a clock jump:
/// they are part of its cost of expiring). Returns how many came out.
fn drain_with(
    rt: &tokio::runtime::Runtime,
    mut poll: impl FnMut(&mut std::task::Context<'_>) -> Poll<Option<u64>>,
) -> u64 {
    rt.block_on(async {
        let mut n = 0;
        let mut idle_yields = 0;
        loop {
            match poll_fn(|cx| Poll::Ready(poll(cx))).await {
                Poll::Ready(Some(v)) => {
                    black_box(v);
                    n += 1;
                    idle_yields = 0;
                }
                Poll::Ready(None) => return n,
                // Nothing due now, even after a few turns of the driver: the rest is later.
                Poll::Pending if idle_yields == 3 => return n,
                Poll::Pending => {
                    idle_yields += 1;
                    tokio::task::yield_now().await;
                }
            }
        }
    })
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("build the bench runtime")
}

fn filled<Q: Queue>(iters: u64, start: Instant) -> (Q, Vec<Q::Key>) {
    let mut queue = Q::new();
    let keys = (0..iters)
        .map(|i| queue.insert_at(i, deadline(start, i)))
        .collect();
    (queue, keys)
}

fn insert<Q: Queue>(rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    let _enter = rt.enter();
    let start = Instant::now();
    let mut queue = Q::new();
    let watch = common::Stopwatch::start();
    for i in 0..iters {
        black_box(queue.insert_at(i, deadline(start, i)));
    }
    let took = watch.elapsed();
    drop(queue);
    took
}

/// `insert` into a queue made `with_capacity`: the same work without growing the slab.
fn insert_reserved<Q: Queue>(rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    let _enter = rt.enter();
    let start = Instant::now();
    let mut queue = Q::with_capacity(usize::try_from(iters).expect("iters fit in memory"));
    let watch = common::Stopwatch::start();
    for i in 0..iters {
        black_box(queue.insert_at(i, deadline(start, i)));
    }
    let took = watch.elapsed();
    drop(queue);
    took
}

fn remove<Q: Queue>(rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    let _enter = rt.enter();
    let (mut queue, keys) = filled::<Q>(iters, Instant::now());
    let watch = common::Stopwatch::start();
    for key in &keys {
        black_box(queue.remove(key));
    }
    watch.elapsed()
}

fn reset<Q: Queue>(rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    let _enter = rt.enter();
    let start = Instant::now();
    let (mut queue, keys) = filled::<Q>(iters, start);
    let watch = common::Stopwatch::start();
    for (i, key) in keys.iter().enumerate() {
        queue.reset_at(key, deadline(start, i as u64 + 500));
    }
    let took = watch.elapsed();
    drop(queue);
    took
}

fn expire<Q: Queue>(rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    let start = rt.block_on(async { Instant::now() });
    let (mut queue, _keys) = {
        let _enter = rt.enter();
        filled::<Q>(iters, start)
    };
    // Arm the queue's timer, then jump the paused clock past every deadline.
    assert_eq!(queue.drain(rt), 0);
    rt.block_on(tokio::time::advance(Duration::from_millis(SPREAD + 1)));
    let watch = common::Stopwatch::start();
    let drained = queue.drain(rt);
    let took = watch.elapsed();
    assert_eq!(drained, iters, "every value expired");
    took
}

type Case = fn(&tokio::runtime::Runtime, u64) -> Duration;

fn bench(c: &mut Criterion) {
    let cases: [(&str, Case, Case); 5] = [
        (
            "insert",
            insert::<wheel_timer::DelayQueue<u64>>,
            insert::<tokio_util::time::DelayQueue<u64>>,
        ),
        (
            "insert_with_capacity",
            insert_reserved::<wheel_timer::DelayQueue<u64>>,
            insert_reserved::<tokio_util::time::DelayQueue<u64>>,
        ),
        (
            "remove",
            remove::<wheel_timer::DelayQueue<u64>>,
            remove::<tokio_util::time::DelayQueue<u64>>,
        ),
        (
            "reset",
            reset::<wheel_timer::DelayQueue<u64>>,
            reset::<tokio_util::time::DelayQueue<u64>>,
        ),
        (
            "expire",
            expire::<wheel_timer::DelayQueue<u64>>,
            expire::<tokio_util::time::DelayQueue<u64>>,
        ),
    ];
    for (op, ours, theirs) in cases {
        let mut group = c.benchmark_group(format!("delay_queue_{op}"));
        group.bench_function("wheel_timer", |b| {
            b.iter_custom(|iters| ours(&paused_runtime(), iters))
        });
        group.bench_function("tokio_util", |b| {
            b.iter_custom(|iters| theirs(&paused_runtime(), iters))
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
