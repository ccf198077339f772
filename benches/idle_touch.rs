//! Touching idle-tracked connections: 100k connections, each touch one connection picked in
//! random order, ours ([`IdleHandle::touch`], keyed [`IdleTracker::touch`]) beside re-arming a
//! tokio `Sleep` per connection (`Sleep::reset(now + timeout)` + poll) and
//! `tokio_util::time::DelayQueue::reset`; on 1 and 2 threads.
//!
//! `cargo bench --bench idle_touch`. Two-thread figures are wall time per touch per thread
//! with both threads running at once (throughput = 2 / figure); each thread touches its own
//! half of the connections, as a server's connection tasks do. `DelayQueue` needs `&mut`, so
//! it has no two-thread figure. `WHEEL_BENCH_CPU=1` makes the one-thread figures the bench
//! thread's CPU time, steadier on a loaded machine.
//!
//! - The idle timeout is 1 h, so no connection expires during the run: every touch is the
//!   steady-state "packet on a live connection" case.
//! - A tokio `Sleep` re-armed per packet must read the clock (`Instant::now()`) and be polled
//!   to re-register; both are part of its figure. Our touch reads no clock.
//! - The random order (a fixed shuffle, cycled) makes every touch land on a cold entry among
//!   100k, for every peer. Each peer reads only its own per-connection state: the tokio
//!   `Sleep`, the `DelayQueue` key, our `IdleHandle`; a keyed touch gets its key from the
//!   packet, so the bench computes it (`Keyed`) instead of reading it from a table.

mod common;

use std::pin::Pin;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use tokio_util::time::{delay_queue, DelayQueue};
use wheel_timer::{Expirations, IdleHandle, IdleTracker, Timer};

use common::{poll_pinned, SplitMix};

const CONNECTIONS: usize = 100_000;
const IDLE_TIMEOUT: Duration = Duration::from_secs(3600);

/// One thread's connections and the random order it touches them in.
trait Conns: Send {
    /// Touches `iters` connections, continuing the cycle through the order.
    fn touch(&mut self, iters: u64);
}

/// The cycle through a shuffled permutation of one thread's connections.
struct Order {
    order: Vec<u32>,
    next: usize,
}

impl Order {
    fn new(n: usize, seed: u64) -> Order {
        let mut order: Vec<u32> = (0..n as u32).collect();
        SplitMix(seed).shuffle(&mut order);
        Order { order, next: 0 }
    }

    #[inline]
    fn next(&mut self) -> usize {
        let i = self.order[self.next] as usize;
        self.next += 1;
        if self.next == self.order.len() {
            self.next = 0;
        }
        i
    }
}

struct Handles {
    handles: Vec<IdleHandle<u64>>,
    order: Order,
}

impl Conns for Handles {
    fn touch(&mut self, iters: u64) {
        for _ in 0..iters {
            self.handles[self.order.next()].touch();
        }
    }
}

/// Keyed touches. The key is computed from the connection's number rather than read from
/// a table: a server touches with the key its packet carries (the peer address, a session
/// id), already in a register, so a random read of a keys array (one more cache miss per
/// touch among 100k keys) would be the harness's cost, not the tracker's.
struct Keyed {
    tracker: IdleTracker<u64>,
    /// The first key; the connections' keys are `base..base + n`.
    base: u64,
    order: Order,
}

impl Conns for Keyed {
    fn touch(&mut self, iters: u64) {
        for _ in 0..iters {
            self.tracker.touch(self.base + self.order.next() as u64);
        }
    }
}

struct TokioSleeps {
    sleeps: Vec<Pin<Box<tokio::time::Sleep>>>,
    order: Order,
}

impl Conns for TokioSleeps {
    fn touch(&mut self, iters: u64) {
        for _ in 0..iters {
            let mut sleep = self.sleeps[self.order.next()].as_mut();
            sleep
                .as_mut()
                .reset(tokio::time::Instant::now() + IDLE_TIMEOUT);
            std::hint::black_box(poll_pinned(sleep));
        }
    }
}

struct Queue {
    queue: DelayQueue<u32>,
    keys: Vec<delay_queue::Key>,
    order: Order,
}

impl Conns for Queue {
    fn touch(&mut self, iters: u64) {
        for _ in 0..iters {
            let key = &self.keys[self.order.next()];
            self.queue.reset(key, IDLE_TIMEOUT);
        }
    }
}

/// Connection keys `base..base + n`.
fn keys(base: u64, n: usize) -> Vec<u64> {
    (base..base + n as u64).collect()
}

fn handles(tracker: &IdleTracker<u64>, keys: &[u64], seed: u64) -> Handles {
    Handles {
        handles: keys.iter().map(|&k| tracker.register(k)).collect(),
        order: Order::new(keys.len(), seed),
    }
}

fn keyed(tracker: &IdleTracker<u64>, keys: Vec<u64>, seed: u64) -> Keyed {
    let base = keys[0];
    assert!(
        keys.iter().zip(base..).all(|(&k, want)| k == want),
        "keys are consecutive"
    );
    keys.iter().for_each(|&k| tracker.touch(k));
    Keyed {
        tracker: tracker.clone(),
        base,
        order: Order::new(keys.len(), seed),
    }
}

fn tokio_sleeps(n: usize, seed: u64) -> TokioSleeps {
    let sleeps = (0..n)
        .map(|_| {
            let mut sleep = Box::pin(tokio::time::sleep(IDLE_TIMEOUT));
            assert!(poll_pinned(sleep.as_mut()));
            sleep
        })
        .collect();
    TokioSleeps {
        sleeps,
        order: Order::new(n, seed),
    }
}

fn queue(n: usize, seed: u64) -> Queue {
    let mut queue = DelayQueue::with_capacity(n);
    let keys = (0..n as u32)
        .map(|i| queue.insert(i, IDLE_TIMEOUT))
        .collect();
    Queue {
        queue,
        keys,
        order: Order::new(n, seed),
    }
}

fn bench_one<M, C>(group: &mut BenchmarkGroup<'_, M>, name: &str, conns: &mut C)
where
    M: criterion::measurement::Measurement<Value = Duration>,
    C: Conns,
{
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let start = common::Stopwatch::start();
            conns.touch(iters);
            start.elapsed()
        })
    });
}

/// Runs `touch(iters)` on both halves at once, each on its own thread inside `rt`'s context;
/// returns the slower thread's time.
fn both_halves<C: Conns>(
    rt: &tokio::runtime::Runtime,
    halves: &mut [C; 2],
    iters: u64,
) -> Duration {
    let [first, second] = halves;
    common::on_two_threads_each(rt, || first.touch(iters), || second.touch(iters))
}

fn bench_two<M, C>(
    group: &mut BenchmarkGroup<'_, M>,
    rt: &tokio::runtime::Runtime,
    name: &str,
    halves: &mut [C; 2],
) where
    M: criterion::measurement::Measurement<Value = Duration>,
    C: Conns,
{
    group.bench_function(name, |b| {
        b.iter_custom(|iters| both_halves(rt, halves, iters))
    });
}

fn configure<M: criterion::measurement::Measurement>(group: &mut BenchmarkGroup<'_, M>) {
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .throughput(criterion::Throughput::Elements(1));
}

/// A tracker on a timer of its own, with its timer and expiration stream kept alive as a
/// server keeps them.
struct Tracked {
    tracker: IdleTracker<u64>,
    _expirations: Expirations<u64>,
    _timer: Timer,
}

fn tracked() -> Tracked {
    let timer = Timer::new();
    let (tracker, expirations) = IdleTracker::new(&timer, IDLE_TIMEOUT);
    Tracked {
        tracker,
        _expirations: expirations,
        _timer: timer,
    }
}

fn one_thread(c: &mut Criterion) {
    let rt = common::runtime();
    let _enter = rt.enter();
    let mut group = c.benchmark_group("idle_touch_100k_1thread");
    configure(&mut group);
    {
        let tracked = tracked();
        let tracker = &tracked.tracker;
        bench_one(
            &mut group,
            "wheel_timer/IdleHandle::touch",
            &mut handles(tracker, &keys(0, CONNECTIONS), 1),
        );
    }
    {
        let tracked = tracked();
        let tracker = &tracked.tracker;
        bench_one(
            &mut group,
            "wheel_timer/IdleTracker::touch",
            &mut keyed(tracker, keys(0, CONNECTIONS), 1),
        );
    }
    bench_one(
        &mut group,
        "tokio/Sleep::reset+poll",
        &mut tokio_sleeps(CONNECTIONS, 1),
    );
    bench_one(
        &mut group,
        "tokio_util/DelayQueue::reset",
        &mut queue(CONNECTIONS, 1),
    );
    group.finish();
}

/// Two halves of `CONNECTIONS` built by `make(keys, seed)` in `rt`'s context.
fn halves<C>(rt: &tokio::runtime::Runtime, mut make: impl FnMut(Vec<u64>, u64) -> C) -> [C; 2] {
    let _enter = rt.enter();
    let half = CONNECTIONS / 2;
    [make(keys(0, half), 2), make(keys(half as u64, half), 3)]
}

fn two_threads(c: &mut Criterion) {
    let rt = common::runtime();
    let mut group = c.benchmark_group("idle_touch_100k_2threads");
    configure(&mut group);
    {
        let tracked = {
            let _enter = rt.enter();
            tracked()
        };
        let tracker = &tracked.tracker;
        let mut h = halves(&rt, |keys, seed| handles(tracker, &keys, seed));
        bench_two(&mut group, &rt, "wheel_timer/IdleHandle::touch", &mut h);
    }
    {
        let tracked = {
            let _enter = rt.enter();
            tracked()
        };
        let tracker = &tracked.tracker;
        let mut h = halves(&rt, |keys, seed| keyed(tracker, keys, seed));
        bench_two(&mut group, &rt, "wheel_timer/IdleTracker::touch", &mut h);
    }
    let mut h = halves(&rt, |keys, seed| tokio_sleeps(keys.len(), seed));
    bench_two(&mut group, &rt, "tokio/Sleep::reset+poll", &mut h);
    group.finish();
}

criterion_group!(benches, one_thread, two_threads);
criterion_main!(benches);
