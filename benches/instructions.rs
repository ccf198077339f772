//! A driver for instruction counts: runs `n` operations of one case and nothing else, so
//! that callgrind's count at two values of `n` gives the count per operation with the setup
//! subtracted (`bin/instructions.sh` does that). No timing: on a shared machine instruction
//! counts repeat exactly where times swing by tens of percent.
//!
//! ```text
//! bin/instructions.sh sleep/timer task        # instructions per create + poll + drop
//! bin/instructions.sh touch/keyed thread --cache  # with callgrind's cache simulation
//! ```
//!
//! Cases (`PLACE` is `thread`, on the calling thread inside the runtime's context, or
//! `task`, inside a task on a runtime worker):
//!
//! - `sleep/timer`, `sleep/free`, `sleep/tokio`: create + first poll + drop of a 1 s sleep
//!   (`Timer::sleep`, `sleep_wheel`, `tokio::time::sleep`), built in place as in the `sleep`
//!   bench, on a runtime with a tokio sleep kept pending (`common::runtime_with_pending_timer`);
//! - `timeout/timer`, `timeout/free`, `timeout/tokio`: the same for a 1 s timeout around a
//!   pending future;
//! - `touch/keyed`, `touch/handle`, `touch/tokio`, `touch/delay_queue`: one touch of a
//!   connection among 100k in a fixed random order, as in the `idle_touch` bench
//!   (`IdleTracker::touch`, `IdleHandle::touch`, tokio `Sleep::reset` + poll, tokio-util
//!   `DelayQueue::reset`);
//! - `queue/wheel`, `queue/tokio_util`: insert + remove of one entry in an otherwise empty
//!   delay queue (ours runs on the crate's sans-IO wheel, no lock, no clock read per entry
//!   besides the insert's).
//!
//! Run with no case (as `cargo bench` does), it lists the cases and exits.

mod common;

use std::future::pending;
use std::hint::black_box;
use std::pin::Pin;
use std::time::Duration;

use common::{poll_once, poll_pinned, SplitMix};
use wheel_timer::{IdleHandle, IdleTracker, Timer};

const DELAY: Duration = Duration::from_secs(1);
const CONNECTIONS: usize = 100_000;
const IDLE_TIMEOUT: Duration = Duration::from_secs(3600);

const CASES: [&str; 12] = [
    "sleep/timer",
    "sleep/free",
    "sleep/tokio",
    "timeout/timer",
    "timeout/free",
    "timeout/tokio",
    "touch/keyed",
    "touch/handle",
    "touch/tokio",
    "touch/delay_queue",
    "queue/wheel",
    "queue/tokio_util",
];

/// A fixed random permutation of `0..n`, cycled.
struct Order {
    order: Vec<u32>,
    next: usize,
}

impl Order {
    fn new(n: usize) -> Order {
        let mut order: Vec<u32> = (0..n as u32).collect();
        SplitMix(1).shuffle(&mut order);
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

/// Runs `n` operations of `case`; the setup (a timer, 100k connections) is the same for
/// every `n`.
fn run(case: &str, timer: &Timer, n: u64) {
    match case {
        "sleep/timer" => (0..n).for_each(|_| poll_once(|| timer.sleep(DELAY))),
        "sleep/free" => (0..n).for_each(|_| poll_once(|| wheel_timer::sleep_wheel(DELAY))),
        "sleep/tokio" => (0..n).for_each(|_| poll_once(|| tokio::time::sleep(DELAY))),
        "timeout/timer" => (0..n).for_each(|_| poll_once(|| timer.timeout(DELAY, pending::<()>()))),
        "timeout/free" => {
            (0..n).for_each(|_| poll_once(|| wheel_timer::timeout_wheel(DELAY, pending::<()>())))
        }
        "timeout/tokio" => {
            (0..n).for_each(|_| poll_once(|| tokio::time::timeout(DELAY, pending::<()>())))
        }
        "touch/keyed" | "touch/handle" => {
            let (tracker, _expirations) = IdleTracker::<u64>::new(timer, IDLE_TIMEOUT);
            let mut order = Order::new(CONNECTIONS);
            if case == "touch/keyed" {
                (0..CONNECTIONS as u64).for_each(|k| tracker.touch(k));
                for _ in 0..n {
                    tracker.touch(order.next() as u64);
                }
            } else {
                let handles: Vec<IdleHandle<u64>> = (0..CONNECTIONS as u64)
                    .map(|k| tracker.register(k))
                    .collect();
                for _ in 0..n {
                    handles[order.next()].touch();
                }
            }
        }
        "touch/tokio" => {
            let mut sleeps: Vec<Pin<Box<tokio::time::Sleep>>> = (0..CONNECTIONS)
                .map(|_| {
                    let mut sleep = Box::pin(tokio::time::sleep(IDLE_TIMEOUT));
                    assert!(poll_pinned(sleep.as_mut()));
                    sleep
                })
                .collect();
            let mut order = Order::new(CONNECTIONS);
            for _ in 0..n {
                let mut sleep = sleeps[order.next()].as_mut();
                sleep
                    .as_mut()
                    .reset(tokio::time::Instant::now() + IDLE_TIMEOUT);
                black_box(poll_pinned(sleep));
            }
        }
        "touch/delay_queue" => {
            let mut queue = tokio_util::time::DelayQueue::with_capacity(CONNECTIONS);
            let keys: Vec<_> = (0..CONNECTIONS as u32)
                .map(|i| queue.insert(i, IDLE_TIMEOUT))
                .collect();
            let mut order = Order::new(CONNECTIONS);
            for _ in 0..n {
                queue.reset(&keys[order.next()], IDLE_TIMEOUT);
            }
        }
        "queue/wheel" => {
            let mut queue = wheel_timer::DelayQueue::with_timer(timer);
            for i in 0..n {
                let key = queue.insert(i, DELAY);
                black_box(queue.remove(&key));
            }
        }
        "queue/tokio_util" => {
            let mut queue = tokio_util::time::DelayQueue::new();
            for i in 0..n {
                let key = queue.insert(i, DELAY);
                black_box(queue.remove(&key));
            }
        }
        other => panic!("unknown case {other:?}; cases: {CASES:?}"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(case), Some(place), Some(n)) = (args.first(), args.get(1), args.get(2)) else {
        eprintln!(
            "usage: instructions CASE PLACE N (run by bin/instructions.sh); \
             PLACE: thread | task; CASE: {CASES:?}"
        );
        return;
    };
    if !CASES.contains(&case.as_str()) {
        eprintln!("unknown case {case:?}; cases: {CASES:?}");
        std::process::exit(2);
    }
    let n: u64 = n.parse().expect("N is a number");
    let rt = common::runtime_with_pending_timer();
    let timer = {
        let _enter = rt.enter();
        Timer::new()
    };
    match place.as_str() {
        "thread" => {
            let _enter = rt.enter();
            run(case, &timer, n);
        }
        "task" => {
            let case = case.clone();
            rt.block_on(rt.spawn(async move { run(&case, &timer, n) }))
                .expect("the measured task panicked");
        }
        other => panic!("unknown place {other:?}: thread | task"),
    }
}
