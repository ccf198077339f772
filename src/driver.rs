//! The driver: the tokio task that moves a timer's time, and the [`Driver::step`] it runs.
//!
//! # Ground rules
//! - [`Driver::step`] is one turn at a given tick: every shard is advanced under its own lock
//!   (`Global::advance`, in batches), the wakers collected are woken and the fired tasks
//!   dispatched with no lock held, and it answers what to do next ([`Next`]). The task
//!   ([`run`]) and the loom models (`src/loom_tests/`) both drive this same step; only the
//!   waiting in between differs (tokio's timer and `Notify` here, loom threads there).
//! - The task waits with tokio's own timer, on the start of the next occupied tick. That
//!   sleep is polled with a [`TurnWaker`]: when tokio's time driver fires it (inside the
//!   runtime's park, where tokio fires its own sleeps), the waker turns the wheel right there
//!   before waking the task, so a wheel sleep is woken in the same park as a tokio sleep due
//!   at the same instant. This is what makes `tokio::time::advance` drive the wheel as it
//!   drives tokio: the sleeps it makes due are woken before `advance` returns.
//! - Two turns may run at once (the waker's and the task's); each advances shards under
//!   their locks, so an entry fires once, and both follow the `next_wake` protocol of
//!   `shard.rs`, so none is stranded.
//! - Before its first turn the task finds tokio's timer grid (`clock::GridProbe`); until
//!   then the driver's clock stands at tick 0.
//! - The task exits once the timer is closed or nothing can reach it (no handle, no task);
//!   dropped for any reason (its runtime shutting down), it closes the timer first.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll, Wake, Waker};

use crate::dispatch;
use crate::loom::{lock, Arc, Mutex, WakeArc};
use crate::shard::{Closing, Global, TurnCounts, BATCH, PARKED};
use crate::task::Fired;

/// What the driver does after a [`Driver::step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// The timer closed or nothing can reach it any more: the task ends.
    Exit,
    /// Nothing is scheduled: wait until notified.
    Park,
    /// Wait until this tick starts (or until notified).
    Until(u64),
}

/// The driver's state between steps: the timer and scratch space for one batch.
#[derive(Debug)]
pub(crate) struct Driver {
    global: Arc<Global>,
    wakers: Vec<Waker>,
    fired: Vec<Fired>,
}

impl Driver {
    pub(crate) fn new(global: Arc<Global>) -> Driver {
        Driver {
            global,
            wakers: Vec::with_capacity(BATCH),
            fired: Vec::with_capacity(BATCH),
        }
    }

    /// One turn at tick `now`: fires everything due, then says what to wait for.
    pub(crate) fn step(&mut self, now: u64) -> Next {
        self.global.count_wakeup();
        let target = turn(&self.global, now, &mut self.wakers, &mut self.fired);
        if !self.global.is_running() || self.global.is_abandoned() {
            return Next::Exit;
        }
        if target == PARKED {
            Next::Park
        } else {
            Next::Until(target)
        }
    }
}

/// Fires everything due at tick `now` in every shard and returns the tick to wake at next
/// (`PARKED`: none). `wakers` and `fired` are scratch space, empty on return.
///
/// Takes the `Arc` (fired callbacks hold the timer until they ran) as a plain argument:
/// loom's `Arc` cannot be a method receiver.
fn turn(global: &Arc<Global>, now: u64, wakers: &mut Vec<Waker>, fired: &mut Vec<Fired>) -> u64 {
    global.begin_turn(now);
    let mut next = PARKED;
    let mut counts = TurnCounts::default();
    for index in 0..global.shard_count() {
        loop {
            let done = global.advance(index, now, wakers, fired, &mut counts);
            wakers.drain(..).for_each(Waker::wake);
            for task in fired.drain(..) {
                dispatch::dispatch(global, task);
            }
            if let Some(shard_next) = done {
                next = next.min(shard_next);
                break;
            }
        }
    }
    if counts.sleeps + counts.tasks > 0 {
        tracing::debug!(
            tick = now,
            sleeps = counts.sleeps,
            tasks = counts.tasks,
            max_lateness_ticks = counts.lateness,
            "wheel-timer: driver turn fired timers"
        );
    }
    global.end_turn(next, &counts)
}

// ===== the driver task =====

/// Closes the timer if the driver task ends for any reason: its runtime shutting down drops
/// it, possibly before it was ever polled, so this lives outside the `async` body (captured
/// values of a future are dropped even when it never ran) and no sleep waits for a driver
/// that is gone.
struct DriverGuard(Arc<Global>);

impl Drop for DriverGuard {
    fn drop(&mut self) {
        let mut cancelled = Vec::new();
        self.0.close(Closing::DriverGone, &mut cancelled);
        // Tasks nobody may be watching (a dropped `TimerTask` is the fire-and-forget idiom):
        // say that they will never run rather than lose them without a trace.
        if !cancelled.is_empty() {
            tracing::warn!(
                cancelled = cancelled.len(),
                "wheel-timer: the runtime shut down with callbacks still scheduled; they are \
                 cancelled and will never run"
            );
        }
    }
}

/// The waker the driver's tokio sleep is polled with: turns the wheel where tokio fires the
/// sleep, then wakes the driver task to plan the next wait (see the ground rules).
///
/// In std's `Arc`: `Wake` is implemented for it alone. It is handed to tokio's timer and is
/// not part of the state the loom models explore (they drive [`Driver::step`] directly).
struct TurnWaker {
    global: Arc<Global>,
    task: Mutex<Option<Waker>>,
}

impl TurnWaker {
    /// Stores the task's waker (cloned here between two lock holds, the old one dropped after unlocking).
    fn register(&self, waker: &Waker) {
        if lock(&self.task)
            .as_ref()
            .is_some_and(|w| w.will_wake(waker))
        {
            return;
        }
        let new = waker.clone();
        let old = lock(&self.task).replace(new);
        drop(old);
    }
}

impl Wake for TurnWaker {
    fn wake(self: WakeArc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &WakeArc<Self>) {
        // The clock, never the tick the sleep was armed for: tokio may call this waker after
        // the task has already re-armed for a later tick (it wakes outside its lock), and a
        // turn to that tick would fire its entries early. Turning to the armed tick when the
        // clock reading lags tokio's is the task's (see `reached`): it polls the current
        // registration and knows its tick.
        waker_turn(&self.global, self.global.clock.driver_tick());
        // Taken, not cloned, under the lock; the task's next wait stores it again.
        let task = lock(&self.task).take();
        if let Some(task) = task {
            task.wake();
        }
    }
}

/// The turn a [`TurnWaker`] makes where tokio fired the driver's sleep, to `now`, the
/// clock's tick (loom model 14 runs it beside the task's step).
pub(crate) fn waker_turn(global: &Arc<Global>, now: u64) {
    if global.is_running() {
        turn(global, now, &mut Vec::new(), &mut Vec::new());
    }
}

/// The tick the task turns to once its current sleep, armed for tick `armed`, fired: the
/// current tick, or `armed` if that is later (only the task knows which registration fired;
/// the [`TurnWaker`] turns to the clock alone). tokio fired the sleep, so its deadline has
/// passed by tokio's reckoning even if the wheel's own clock reading still lags it; the wheel
/// then treats its deadlines up to `armed` as reached. Without this the driver would re-arm a
/// sleep tokio fires at once (a busy loop, and a hang on a paused clock).
fn reached(global: &Global, armed: u64) -> u64 {
    global.clock.driver_tick().max(armed)
}

/// The driver task for `global`, ready to spawn.
pub(crate) fn task(global: Arc<Global>) -> impl Future<Output = ()> + Send + 'static {
    let guard = DriverGuard(global);
    async move { run(&guard.0).await }
}

/// Turns the timer whenever a deadline comes or it is notified, and parks with no wakeups
/// while nothing is scheduled.
async fn run(global: &Arc<Global>) {
    let mut driver = Driver::new(global.clone());
    let clock = &global.clock;
    let mut probe = clock.probe_grid();
    let mut sleep = Box::pin(tokio::time::sleep_until(clock.start));
    let turner = WakeArc::new(TurnWaker {
        global: global.clone(),
        task: Mutex::new(None),
    });
    let turn_waker = Waker::from(turner.clone());
    let mut now = clock.driver_tick();
    loop {
        let notified = global.notify().notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let armed = match driver.step(now) {
            Next::Exit => return,
            // Until the grid is found the clock stands still: wait for the probe.
            Next::Until(tick) if probe.is_none() => {
                sleep.as_mut().reset(clock.tick_start(tick));
                Some(tick)
            }
            _ => None,
        };
        let mut waiting = Waiting {
            notified: notified.as_mut(),
            probe: &mut probe,
            sleep: sleep.as_mut(),
            armed: armed.is_some(),
            turner: &turner,
            turn_waker: &turn_waker,
        };
        let deadline = poll_fn(|cx| waiting.poll(cx)).await;
        now = match (deadline, armed) {
            (true, Some(tick)) => reached(global, tick),
            _ => clock.driver_tick(),
        };
    }
}

/// One wait of the driver task: until notified, the grid probe settles, or (if `armed`) the
/// sleep fires (`true`).
struct Waiting<'a, 'n> {
    notified: Pin<&'a mut tokio::sync::futures::Notified<'n>>,
    probe: &'a mut Option<crate::clock::GridProbe>,
    sleep: Pin<&'a mut tokio::time::Sleep>,
    armed: bool,
    turner: &'a WakeArc<TurnWaker>,
    turn_waker: &'a Waker,
}

impl Waiting<'_, '_> {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        if self.notified.as_mut().poll(cx).is_ready() {
            return Poll::Ready(false);
        }
        if let Some(probe) = self.probe {
            if self.turner.global.clock.poll_probe(probe, cx).is_ready() {
                *self.probe = None;
                return Poll::Ready(false);
            }
        }
        if self.armed {
            self.turner.register(cx.waker());
            let mut turning = Context::from_waker(self.turn_waker);
            if self.sleep.as_mut().poll(&mut turning).is_ready() {
                return Poll::Ready(true);
            }
        }
        Poll::Pending
    }
}
