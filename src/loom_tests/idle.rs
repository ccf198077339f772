//! Models 5 and 6: the idle tracker's touches and removals racing the driver's turn that
//! expires the key; models 15 and 16: touches and registrations racing the tracker's stop, and
//! a dropped `Idle` future racing the expiry that takes its key's waiters. The tracker runs on the model's clock (`TrackerState::model_clock`), one shard
//! and a one-tick timeout; the main thread plays its driver task with [`IdleDriver`], which
//! calls `TrackerState::step` the way the task's loop does.
//!
//! With a one-tick timeout, epoch `e` (`e >= 2`) is published by the driver's turn at tick
//! `e - 2` (or, for `e = 2`, by the first insert, at tick 0) and replaced by the turn at tick
//! `e - 1`, so a key last touched in epoch `e` is due at tick `e`. A touch made after the
//! driver's turn at tick `b` records an epoch of at least `b + 2`: when such a touch
//! happened before an expiry check (a release/acquire pair of the model orders them), that
//! check may expire the key only at a tick of at least `b + 2`.

use std::hash::{Hash, Hasher};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use super::model;
use hashbrown::DefaultHashBuilder;

use crate::idle::Expirations;
use crate::idle::IdleTracker;
use crate::idle::{Next, Scratch, TrackerState};
use crate::loom::{thread, Arc, AtomicU64, Ordering};
use crate::timer::Builder;
use crate::timer::Timer;

/// The tick no turn has finished by (`turned`), or no touch has been seen at (`touched`).
const NONE: u64 = u64::MAX;

/// A key named `name`; `id` tells apart the instances a model hands to the tracker (equality
/// and hashing look at the name only, so the tracker keeps whichever instance inserted it).
#[derive(Debug, Clone)]
struct Key {
    name: u8,
    id: u8,
}

impl Key {
    fn new(id: u8) -> Key {
        Key { name: 0, id }
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.name == other.name
    }
}

impl Eq for Key {}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

/// Plays the tracker's driver task: each [`IdleDriver::step`] is one iteration of its loop.
struct IdleDriver {
    shared: Arc<TrackerState<Key, DefaultHashBuilder>>,
    timer: Timer,
    scratch: Scratch<Key>,
}

impl IdleDriver {
    /// One loop iteration at `tick`: the clock has moved to the tick's start, the task
    /// enables its notification (consuming any permit), then steps.
    fn step(&mut self, tick: u64) -> Next {
        let shared = &self.shared;
        shared.model_clock.set(tick * shared.tick_ns);
        shared.notify.take_permit();
        shared.step(&self.timer, &mut self.scratch)
    }

    /// Whether the driver task has been notified since its last step (it would not stay
    /// parked).
    fn notified(&self) -> bool {
        self.shared.notify.is_notified()
    }

    /// Keys tracked in the tracker's (only) shard, by the ring's own count.
    fn ring_len(&self) -> usize {
        self.shared.shards.iter().map(|s| s.lock().ring.len()).sum()
    }
}

/// A tracker with one shard and a one-tick (1 ms) timeout on the model's clock, at tick 0,
/// its stream, and its driver.
fn fixture() -> (IdleTracker<Key>, Expirations<Key>, IdleDriver) {
    let (timer, _global) = Builder::new()
        .tick(Duration::from_millis(1))
        .slots(4)
        .shards(1)
        .build_unspawned()
        .expect("a valid configuration");
    let (tracker, expirations, shared) = IdleTracker::builder(Duration::from_millis(1))
        .shards(1)
        .unspawned(&timer);
    let driver = IdleDriver {
        shared,
        timer,
        scratch: Scratch::default(),
    };
    (tracker, expirations, driver)
}

/// The ids of the keys delivered to `expirations` so far, without waiting.
fn delivered(expirations: &mut Expirations<Key>) -> Vec<u8> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut ids = Vec::new();
    while let Poll::Ready(Some(batch)) = expirations.poll_next_batch(&mut cx) {
        ids.extend(batch.into_iter().map(|key| key.id));
    }
    ids
}

/// Model 5: a task touches its key through an [`IdleHandle`](crate::IdleHandle) (lock-free)
/// and then waits for the key to go idle, while the driver turns tick by tick. The touch
/// records the epoch it read and the last turn it saw finished; before each turn the driver
/// looks whether the touch is done (acquire: the touch then happened before the turn's
/// expiry check).
/// - A touch that happened before the expiry check defers expiry to its epoch's due tick.
/// - Otherwise (the touch raced the check, or came after the expiry) the key expires once;
///   the sticky `EXPIRED` stamp survives the late touch, so the handle reports expiry.
/// - Expiry wakes the waiting task (no lost wakeup: loom reports a blocked task as a
///   deadlock), and nothing expires again.
#[test]
fn handle_touch_vs_expiry() {
    model(|| {
        let (tracker, mut expirations, mut driver) = fixture();
        let handle = tracker.register(Key::new(0));
        let turned = Arc::new(AtomicU64::new(0));
        let touched = Arc::new(AtomicU64::new(NONE));
        let task = {
            let (turned, touched) = (turned.clone(), touched.clone());
            thread::spawn(move || {
                let before = turned.load(Ordering::Acquire);
                handle.touch();
                touched.store(before, Ordering::Release);
                loom::future::block_on(handle.idle());
                assert!(handle.is_expired(), "woken but not expired");
            })
        };
        let mut expired_at = None;
        for tick in 1..=3 {
            let seen = touched.load(Ordering::Acquire);
            let next = driver.step(tick);
            turned.store(tick, Ordering::Release);
            let ids = delivered(&mut expirations);
            if ids.is_empty() {
                assert_eq!(next, Next::Tick(tick));
            } else {
                assert_eq!(ids, [0]);
                // Nothing left to expire: the driver parks.
                assert_eq!(next, Next::Park);
                if seen != NONE {
                    assert!(
                        tick >= seen + 2,
                        "expired at tick {tick} though touched after the turn at tick {seen}, \
                         before this check"
                    );
                }
                expired_at = Some(tick);
                break;
            }
        }
        assert!(expired_at.is_some(), "not expired by its latest due tick");
        task.join().unwrap();
        assert_eq!(tracker.len(), 0);
        assert_eq!(driver.ring_len(), 0);
        assert!(delivered(&mut expirations).is_empty(), "expired twice");
    });
}

/// Model 6: one thread touches a key by name while another removes it, racing the driver's
/// turn at the key's due tick; the key (instance 0) was tracked by a keyed touch at tick 0.
/// The touch either refreshes instance 0 or, if it is gone, tracks its own instance 1, and
/// may find the driver parking (the tracker just became empty). Once both threads joined:
/// - a touch that happened before the turn's expiry check kept instance 0 from expiring;
/// - `remove` returned `false` only if instance 0 had expired;
/// - no key is stranded: if the driver parked, nothing is tracked or it was notified (the
///   `park`/`inserted` handshake);
/// - driving on until the driver parks empties the tracker: every tracked instance ended
///   exactly once (expired or removed), as the tracker's count and the ring's agree at 0,
///   and no instance is delivered twice.
#[test]
fn keyed_touch_and_remove_vs_expiry() {
    model(|| {
        let (tracker, mut expirations, mut driver) = fixture();
        tracker.touch(Key::new(0));
        let touched = Arc::new(AtomicU64::new(NONE));
        let toucher = {
            let (tracker, touched) = (tracker.clone(), touched.clone());
            thread::spawn(move || {
                tracker.touch(Key::new(1));
                touched.store(0, Ordering::Release);
            })
        };
        let remover = {
            let tracker = tracker.clone();
            thread::spawn(move || tracker.remove(&Key::new(9)))
        };
        let seen = touched.load(Ordering::Acquire);
        let mut next = driver.step(1);
        let mut ids = delivered(&mut expirations);
        if seen != NONE && ids.contains(&0) {
            panic!("instance 0 expired at tick 1 though touched before this check");
        }
        toucher.join().unwrap();
        let removed = remover.join().unwrap();
        if !removed {
            assert!(
                ids.contains(&0),
                "remove found nothing though nothing expired"
            );
        }
        if next == Next::Park {
            assert!(
                tracker.is_empty() || driver.notified(),
                "a tracked key is stranded: the driver parked and was not notified"
            );
        }
        let mut tick = 1;
        while next != Next::Park || driver.notified() {
            assert!(tick < 4, "still tracking at tick {tick}");
            tick += 1;
            next = driver.step(tick);
            ids.extend(delivered(&mut expirations));
        }
        assert_eq!(tracker.len(), 0);
        assert_eq!(driver.ring_len(), 0);
        let mut unique = ids.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ids.len(), "an instance expired twice");
        assert!(
            ids.len() + usize::from(removed) >= 1,
            "instance 0 neither expired nor removed"
        );
    });
}

/// Model 15: a thread touches a key and registers another while the tracker stops (its timer
/// shut down: the driver task's `finish`). However they interleave, once both are done the
/// tracker holds nothing — every key was either refused (`DONE` seen under the shard lock) or
/// cleared — the handle's `idle()` completes (no lost wakeup: loom reports a blocked task as
/// a deadlock) without reporting an expiry, and the stream has ended.
#[test]
fn touch_and_register_vs_stop() {
    model(|| {
        let (tracker, mut expirations, driver) = fixture();
        let toucher = {
            let tracker = tracker.clone();
            thread::spawn(move || {
                tracker.touch(Key::new(0));
                let handle = tracker.register(Key { name: 1, id: 1 });
                loom::future::block_on(handle.idle());
                assert!(!handle.is_expired(), "a stopped tracker expired a key");
            })
        };
        driver.shared.finish(None);
        toucher.join().unwrap();
        assert_eq!(tracker.len(), 0, "a stopped tracker holds a key");
        assert_eq!(driver.ring_len(), 0);
        tracker.touch(Key::new(2));
        assert_eq!(tracker.len(), 0);
        let mut cx = Context::from_waker(Waker::noop());
        assert!(matches!(
            expirations.poll_next_batch(&mut cx),
            Poll::Ready(None)
        ));
    });
}

/// Model 16: one task polls `idle()` and drops the future while another waits on the same
/// handle, racing the driver's turn at tick 0 (the key is due at tick 1). Once the dropped
/// future is gone the tracker holds at most the waiting task's waker; the waiting task is
/// woken at expiry (the drop never removed its entry: loom reports a lost wakeup as a
/// deadlock), and then no waker is left.
#[test]
fn dropped_idle_vs_expiry() {
    model(|| {
        let (tracker, _expirations, mut driver) = fixture();
        let handle = Arc::new(tracker.register(Key::new(0)));
        let dropper = {
            let handle = handle.clone();
            thread::spawn(move || {
                // The future is dropped at the end of this block.
                let polled = {
                    let mut idle = std::pin::pin!(handle.idle());
                    std::future::Future::poll(
                        idle.as_mut(),
                        &mut Context::from_waker(Waker::noop()),
                    )
                };
                polled.is_ready()
            })
        };
        let waiter = {
            let handle = handle.clone();
            thread::spawn(move || {
                loom::future::block_on(handle.idle());
                assert!(handle.is_expired());
            })
        };
        let stored = |driver: &IdleDriver| -> usize {
            driver
                .shared
                .shards
                .iter()
                .map(|s| s.lock().waiters.total())
                .sum()
        };
        assert_eq!(driver.step(0), Next::Tick(0));
        assert!(!dropper.join().unwrap(), "ready before expiry");
        assert!(stored(&driver) <= 1, "the dropped future's waker was kept");
        assert_eq!(driver.step(1), Next::Park, "due at tick 1");
        waiter.join().unwrap();
        assert!(handle.is_expired());
        assert_eq!(stored(&driver), 0, "a waker outlived the key");
    });
}
