//! The tracker's driver task: publishes an epoch per tick while keys are tracked, expires
//! what is due, parks while nothing is tracked, and stops the tracker when its timer stops.
//!
//! # Ground rules
//! - One [`TrackerState::step`] is one iteration of the task's loop; the loom models call it to
//!   play the task without a runtime. A step looks at no more than `TURN_BUDGET` slots: a
//!   turn that must look at more (a million keys due in one tick) is finished over several
//!   steps, the task yielding to the runtime in between, so other tasks on its worker wait
//!   for one slice, not for the whole turn. Expired keys are counted out of `len` and their
//!   waiters woken after every slice; the stream gets the turn's keys as one batch at its end.
//! - A shard's lock is held for at most `BUDGET` slots; no lock is held while a waker is
//!   woken or a key dropped.
//! - The task waits for its ticks with tokio's timer (one runtime wake-up per tick: the
//!   tracker's tick is coarse, and the wheel's levels would add cascade wake-ups), and at
//!   all times on a sleep of its `Timer` 146 years out: a timer shut down wakes every sleep,
//!   so the tracker stops even while parked (and its stream ends).
//! - Stopping (`TrackerState::finish`) marks the tracker `DONE` before it locks any shard, then
//!   empties every shard: a touch or register checks `DONE` under its shard's lock, so it
//!   either sees it (and tracks nothing) or ran before the shard was emptied.

use std::future::{poll_fn, Future};
use std::hash::{BuildHasher, Hash};
use std::pin::pin;
use std::task::{Poll, Waker};

use super::ring::Dues;
use super::state::TrackerState;
use crate::clock;
use crate::loom::{lock, runtime, Arc, Ordering};
use crate::shard::Closing;
use crate::timer::Timer;

/// Slots the driver looks at per shard lock hold, so touches of that shard are never
/// stalled long.
const BUDGET: usize = 1024;
/// Slots one driver step looks at before the task yields to the runtime.
pub(crate) const TURN_BUDGET: usize = 4096;

/// What the driver task does after a [`TrackerState::step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Exit: nothing can touch and nothing is left to expire (or nobody listens), or the
    /// timer stopped.
    Exit,
    /// Step again at once: a key was tracked while the driver was parking.
    Again,
    /// The turn is not finished: yield to the runtime, then step again.
    Yield,
    /// Parked (nothing tracked): wait for a notification (or the timer's shutdown).
    Park,
    /// Wait for the start of the tick after this one (or a notification).
    Tick(u64),
}

/// The driver's buffers, reused across steps, and where an unfinished turn stopped.
#[derive(Debug)]
pub(crate) struct Scratch<K> {
    expired: Vec<K>,
    /// Keys of `expired` already counted out of `len`.
    counted: usize,
    slots: Vec<u32>,
    wakers: Vec<Waker>,
    /// The unfinished turn's tick and the shard it stopped in.
    resume: Option<(u64, usize)>,
}

impl<K> Default for Scratch<K> {
    fn default() -> Self {
        Scratch {
            expired: Vec::new(),
            counted: 0,
            slots: Vec::new(),
            wakers: Vec::new(),
            resume: None,
        }
    }
}

// ===== impl TrackerState: the driver's side =====

impl<K: Hash + Eq, S: BuildHasher> TrackerState<K, S> {
    /// A turn, or its next slice: publishes a new epoch if a new tick began (not when
    /// resuming), then processes every shard up to the turn's tick. Expired keys are
    /// appended to `scratch.expired` and counted out of `len`; waiters of expired handles
    /// are woken at the end, with no lock held. Returns the tick once the turn is done,
    /// `None` if its slice's budget ran out first.
    fn turn(&self, scratch: &mut Scratch<K>) -> Option<u64> {
        let mut clock = lock(&self.clock);
        let (now, first) = match scratch.resume.take() {
            Some(resume) => resume,
            None => {
                let tick = self.clock_nanos() / self.tick_ns;
                let now = match clock.published {
                    Some(published) if tick <= published => tick,
                    _ => {
                        let now = self.publish(&mut clock);
                        clock.published = Some(now);
                        now
                    }
                };
                (now, 0)
            }
        };
        let dues = Dues {
            current: self.epoch(),
            lower: clock.lower,
            ring: &clock.dues,
        };
        let mut budget = TURN_BUDGET;
        for (index, shard) in self.shards.iter().enumerate().skip(first) {
            loop {
                let mut core = shard.lock();
                let mut hold = BUDGET.min(budget);
                let before = hold;
                let done = core.ring.advance(
                    now,
                    &dues,
                    &mut hold,
                    &mut scratch.expired,
                    &mut scratch.slots,
                );
                budget -= before - hold;
                for handle in scratch.slots.drain(..) {
                    if let Some(list) = core.waiters.take(handle) {
                        scratch.wakers.extend(list.into_wakers());
                    }
                }
                drop(core);
                if done {
                    break;
                }
                if budget == 0 {
                    scratch.resume = Some((now, index));
                    break;
                }
            }
            if scratch.resume.is_some() {
                break;
            }
        }
        drop(clock);
        // Counted out before any waiter wakes, so `len()` never still counts a key whose
        // `idle()` has completed.
        let fresh = scratch.expired.len() - scratch.counted;
        if fresh > 0 {
            self.len.fetch_sub(fresh, Ordering::SeqCst);
            scratch.counted = scratch.expired.len();
        }
        // With no lock held: a waker may run code that touches or registers.
        scratch.wakers.drain(..).for_each(Waker::wake);
        scratch.resume.is_none().then_some(now)
    }

    /// One iteration of the driver task's loop, after it enabled its notification: a turn
    /// (or a slice of one), the expired keys handed to the stream, then what to do next
    /// (parking if nothing is tracked). The loom models call it to play the driver without a
    /// runtime.
    pub(crate) fn step(&self, timer: &Timer, scratch: &mut Scratch<K>) -> Next {
        let Some(now) = self.turn(scratch) else {
            return Next::Yield;
        };
        if !scratch.expired.is_empty() {
            scratch.counted = 0;
            self.out.deliver(std::mem::take(&mut scratch.expired));
        }
        if self.handles.load(Ordering::Acquire) == 0
            && (self.len.load(Ordering::SeqCst) == 0 || !self.out.listening())
        {
            return Next::Exit;
        }
        if !timer.is_running() {
            return Next::Exit;
        }
        if self.len.load(Ordering::SeqCst) == 0 {
            return if self.park() { Next::Park } else { Next::Again };
        }
        Next::Tick(now)
    }
}

impl<K, S> TrackerState<K, S> {
    /// The driver has exited: marks the tracker `DONE` (`ended_with`: the runtime whose
    /// shutdown stopped it, if one did), ends the stream, empties every shard (the keys left
    /// can no longer expire: they are dropped, not reported) and releases every waiter.
    pub(crate) fn finish(&self, ended_with: Option<runtime::Id>) {
        self.set_done(ended_with);
        self.out.end();
        let mut keys = Vec::new();
        let mut handles = Vec::new();
        for shard in self.shards.iter() {
            let mut core = shard.lock();
            let waiters = core.waiters.take_all();
            core.ring.clear(&mut keys, &mut handles);
            drop(core);
            handles.clear();
            if !keys.is_empty() {
                self.len.fetch_sub(keys.len(), Ordering::SeqCst);
            }
            keys.clear();
            waiters
                .into_iter()
                .flat_map(|list| list.into_wakers())
                .for_each(Waker::wake);
        }
    }
}

// ===== the driver task =====

/// Stops the tracker however the driver task ends, including being dropped with its
/// runtime before it was ever polled: so it lives outside the `async` body (a future's
/// captured values are dropped even when it never ran), as the timer's driver guard does.
struct Finish<K, S> {
    shared: Arc<TrackerState<K, S>>,
    timer: Timer,
    /// The task's loop returned (rather than the task being dropped by its runtime).
    exited: bool,
}

impl<K, S> Finish<K, S> {
    /// The task's loop returned.
    fn exit(&mut self) {
        self.exited = true;
    }
}

impl<K, S> Drop for Finish<K, S> {
    fn drop(&mut self) {
        // Dropped unfinished: by its runtime's shutdown (nothing else drops the task). Exited
        // on its timer's closing: by the timer's runtime's shutdown if its driver is gone.
        let global = self.timer.global();
        let ended_with = if !self.exited {
            self.shared.runtime
        } else if global.closing() == Some(Closing::DriverGone) {
            global.runtime()
        } else {
            None
        };
        self.shared.finish(ended_with);
    }
}

/// The tracker's driver: while keys are tracked, wakes at every tick boundary (on the
/// tracker's timer) to publish an epoch and expire what is due; parks while nothing is
/// tracked; exits once nothing can touch and nothing is left to expire (or nobody listens),
/// or once its timer stops.
pub(super) fn task<K, S>(shared: Arc<TrackerState<K, S>>, timer: Timer) -> impl Future<Output = ()>
where
    K: Hash + Eq + Send + Sync + 'static,
    S: BuildHasher + Send + Sync + 'static,
{
    let mut finish = Finish {
        shared,
        timer,
        exited: false,
    };
    async move {
        run(&finish.shared, &finish.timer).await;
        finish.exit();
    }
}

async fn run<K, S>(shared: &TrackerState<K, S>, timer: &Timer)
where
    K: Hash + Eq + Send + Sync + 'static,
    S: BuildHasher + Send + Sync + 'static,
{
    let mut scratch = Scratch::default();
    // Ticks are waited for with tokio's own timer, which wakes the runtime exactly at the
    // deadline (one wake-up per tracker tick); the timer's sleep, 146 years out, only tells
    // of the timer's shutdown (it wakes every sleep), so a parked tracker stops too.
    let mut tick = pin!(tokio::time::sleep_until(shared.start));
    let mut stopped = timer.sleep_until(shared.instant(clock::MAX_NANOS));
    loop {
        let mut notified = pin!(shared.notify.notified());
        notified.as_mut().enable();
        let wake_at = match shared.step(timer, &mut scratch) {
            Next::Exit => break,
            Next::Again => continue,
            Next::Yield => {
                tokio::task::yield_now().await;
                continue;
            }
            Next::Park => None,
            Next::Tick(now) => Some(shared.tick_start(now + 1)),
        };
        if let Some(at) = wake_at {
            tick.as_mut().reset(at);
        }
        let woken = poll_fn(|cx| {
            if notified.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(()));
            }
            if wake_at.is_some() && tick.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(()));
            }
            stopped.poll_unless_closed(cx)
        })
        .await;
        if woken.is_err() {
            // The timer was shut down (or lost its driver) under us: stop, and let `finish`
            // end the stream, rather than panic in a library task.
            break;
        }
    }
}
