//! Loom models of every cross-thread transition of the timer core, its callback tasks and
//! the idle tracker.
//!
//! Built only with `--cfg wheel_loom` (run them with `bin/loom.sh`). Each model builds a tiny
//! timer with [`Builder::build_unspawned`] (1 ms tick, 4 level-0 slots, 1–2 shards), lets loom
//! threads register, re-poll, reset and drop sleeps, and plays the driver task itself with
//! [`Driver`], which runs the shipped [`driver::Driver::step`](crate::driver::Driver::step)
//! and waits where the task would: only the waiting (tokio's timer and `Notify` there, loom
//! threads here) is the model's own. Loom runs every
//! interleaving of those threads up to `LOOM_MAX_PREEMPTIONS` preemptions.
//!
//! | model | file | proves |
//! |---|---|---|
//! | 1 | `sleep.rs` | the fire wakes the waker stored last |
//! | 2 | `sleep.rs` | cancel (drop) vs fire: one wins, the entry is freed once, wakes run unlocked |
//! | 3 | `sleep.rs` | reset later vs advance: fires at the new deadline only |
//! | 4 | `shards.rs` | inserts/cancels on two shards vs the driver: none lost, none stranded |
//! | 5 | `idle.rs` | `IdleHandle::touch` vs expiry: a prior touch defers it, else it expires once |
//! | 6 | `idle.rs` | keyed touch/remove vs expiry and parking: each key ends once, none stranded |
//! | 7 | `shutdown.rs` | shutdown vs schedule/poll: nothing hangs, nothing it stopped runs |
//! | 8 | `lifecycle.rs` | last handle dropped vs the driver parking: it exits, nothing leaks |
//! | 9 | `callback.rs` | cancel vs a repeating run already handed to the executor: `true` is final |
//! | 10 | `sleep.rs` | a woken lock-free re-poll sees the fire (the `elapsed` mirror) |
//! | 11 | `sleep.rs` | reset earlier vs advance: the driver is notified, fires at the new deadline |
//! | 12 | `callback.rs` | `TimerTask::cancel` vs fire: one wins, counted and freed once, never runs |
//! | 13 | `callback.rs` | cancel vs a repeating series' run: the cancel wins, no run afterwards |
//! | 14 | `turns.rs` | the task's step and the `TurnWaker`'s turn at once vs a registration |
//! | 15 | `idle.rs` | touch and register vs the tracker stopping: the tracker ends empty, `idle()` completes, no expiry |
//! | 16 | `idle.rs` | a dropped `idle()` wait vs expiry: the other waiter on the handle is still woken |
//! | 17 | `driver_gone.rs` | the driver dropped by its runtime's shutdown vs a task registering: it stays pending, no panic, no lost wake |
//!
//! The idle tracker's models (`idle.rs`) play its own driver task with `TrackerState::step`, on a
//! clock the model sets (`crate::loom::ModelClock`).
//!
//! # Running
//! `bin/loom.sh` runs them all; `bin/loom.sh sleep::drop_vs_fire` runs one (any libtest
//! filter below `loom_tests::`). Each prints how many executions loom explored.
//!
//! # Adding a model
//! A new file here with a `mod` line above; each `#[test]` calls [`model`] with a closure
//! that builds its timer with [`fixture`] (or [`fixture_with`]), spawns at most three
//! `crate::loom::thread`s (loom's limit is five, counting the main thread, and the state
//! space grows fast), lets the main thread or a spawned one play the driver with
//! [`Driver::turn`], and after joining checks outcomes:
//! [`Probe`] counts wakes, [`Driver::assert_none_stranded`] checks the wake protocol, and
//! loom itself reports deadlocks (a lost wakeup under `loom::future::block_on` or
//! [`Notify::wait`](crate::loom::Notify)) and leaked `Arc`s. A model must be seen to fail
//! when the ordering or check it guards is broken; ARCHITECTURE.md lists the mutation tried
//! for each.
//!
//! # Determinism
//! Loom replays each model many times and needs every run to take the same path for the same
//! schedule. Sleeps read the real clock (`Instant::now()`) only to decide whether a deadline
//! has already passed, so every deadline here lies [`BASE`] ticks (70 min) after the timer's
//! start: never in the past, whatever the machine's load. The driver's "now" is a tick the
//! model hands to `turn`, never read from a clock.

mod callback;
mod driver_gone;
mod idle;
mod lifecycle;
mod shards;
mod shutdown;
mod sleep;
mod turns;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use tokio::time::Instant;

use crate::driver::{self, Next};
use crate::loom::{global, lock, Arc, AtomicUsize, Mutex, Ordering, StdArc};
use crate::shard::Global;
use crate::sleep::Sleep;
use crate::timer::Builder;
use crate::timer::Timer;

/// The tick models start at (a power of two, so ticks `BASE..BASE + 4` share one level-0
/// rotation of a 4-slot wheel).
pub(super) const BASE: u64 = 1 << 22;

/// Not parked on a deadline (the driver's `PARKED`).
pub(super) const PARKED: u64 = crate::shard::PARKED;

/// Runs `f` under loom with the settings from the environment (`LOOM_MAX_PREEMPTIONS`…),
/// then reports how many executions loom explored (shown with `--nocapture`).
pub(super) fn model(f: impl Fn() + Sync + Send + 'static) {
    let executions = StdArc::new(global::AtomicUsize::new(0));
    let counter = executions.clone();
    loom::model(move || {
        counter.fetch_add(1, global::Ordering::Relaxed);
        f();
    });
    let name = std::thread::current().name().unwrap_or("model").to_owned();
    let preemptions = std::env::var("LOOM_MAX_PREEMPTIONS").unwrap_or_else(|_| "unbounded".into());
    eprintln!(
        "{name}: {} executions (LOOM_MAX_PREEMPTIONS={preemptions})",
        executions.load(global::Ordering::Relaxed)
    );
}

/// A timer with `shards` shards, a 1 ms tick and 4 level-0 slots, not driven yet, and a
/// [`Driver`] that has turned it to [`BASE`].
pub(super) fn fixture(shards: usize) -> (Timer, Arc<Global>, Driver) {
    fixture_with(shards, None)
}

/// [`fixture`] with [`Builder::max_pending`] set if `max_pending` is. Without a runtime or
/// an executor, fired callbacks run on the driver's thread once it unlocked the shard.
pub(super) fn fixture_with(
    shards: usize,
    max_pending: Option<usize>,
) -> (Timer, Arc<Global>, Driver) {
    let mut builder = Builder::new();
    builder
        .tick(Duration::from_millis(1))
        .slots(4)
        .shards(shards);
    if let Some(max) = max_pending {
        builder.max_pending(max);
    }
    let (timer, global) = builder.build_unspawned().expect("a valid configuration");
    let mut driver = Driver::new(global.clone());
    driver.turn(BASE);
    (timer, global, driver)
}

/// The instant tick `tick` of `global`'s clock starts at.
pub(super) fn at(global: &Global, tick: u64) -> Instant {
    global.clock.tick_start(tick)
}

/// A sleep until `tick` registered (on first poll) in shard `shard`, whatever thread polls
/// it, unlike [`Timer::sleep_until`], which picks the calling thread's shard.
pub(super) fn sleep_in(global: &Arc<Global>, shard: usize, tick: u64) -> Sleep {
    let handle = Arc::new(Global::handle(global, shard));
    Sleep::new(handle, tick * global.clock.tick_ns, false)
}

/// Entries allocated in all shards (scheduled, or fired and not yet freed by their sleep).
pub(super) fn allocated(global: &Global) -> usize {
    global.allocated_sleeps()
}

/// Shard `index`'s `elapsed` mirror, which a sleep's lock-free re-poll reads.
pub(super) fn mirror(global: &Global, index: usize) -> u64 {
    global.mirror(index)
}

// ===== Driver =====

/// Plays the driver task: each [`Driver::turn`] is one iteration of its loop, around the
/// shipped [`driver::Driver::step`].
#[derive(Debug)]
pub(super) struct Driver {
    global: Arc<Global>,
    driver: driver::Driver,
    /// The tick the last turn planned to wake at ([`PARKED`]: until notified).
    pub(super) planned: u64,
}

impl Driver {
    pub(super) fn new(global: Arc<Global>) -> Driver {
        Driver {
            driver: driver::Driver::new(global.clone()),
            global,
            planned: PARKED,
        }
    }

    /// One loop iteration at tick `now`: consume the notification permit (the task's
    /// `notified().enable()` comes first), then step.
    pub(super) fn step(&mut self, now: u64) -> Next {
        self.global.notify().take_permit();
        let next = self.driver.step(now);
        self.planned = match next {
            Next::Until(tick) => tick,
            Next::Park | Next::Exit => PARKED,
        };
        next
    }

    /// [`Driver::step`], returning the planned wake tick.
    pub(super) fn turn(&mut self, now: u64) -> u64 {
        self.step(now);
        self.planned
    }

    /// The driver task's whole loop from tick `now`: step, exit when told, otherwise park
    /// until notified or move to the planned tick.
    pub(super) fn run(mut self, mut now: u64) {
        loop {
            match self.step(now) {
                Next::Exit => return,
                Next::Park => self.global.notify().wait(),
                Next::Until(tick) => now = now.max(tick),
            }
        }
    }

    /// Whether the driver task would turn again by `tick`: it has been notified since its
    /// last turn, or that turn planned to wake by then.
    pub(super) fn wakes_by(&self, tick: u64) -> bool {
        self.global.notify().is_notified() || self.planned <= tick
    }

    /// The `next_wake` protocol's promise, checked once every other thread has joined: no
    /// scheduled entry is stranded, i.e. the driver wakes by each entry's tick.
    #[track_caller]
    pub(super) fn assert_none_stranded(&self) {
        for (index, ticks) in self.global.scheduled_sleep_ticks().into_iter().enumerate() {
            for tick in ticks {
                assert!(
                    self.wakes_by(tick),
                    "entry at tick {tick} in shard {index} is stranded: the driver plans to wake \
                     at {} (next_wake {}) and was not notified",
                    self.planned,
                    self.global.next_wake(),
                );
            }
        }
    }
}

// ===== Probe =====

/// A waker that counts its wakes in a loom atomic; optionally it drops a sleep when woken
/// (a waker may drop sleeps of the shard that fired it, so it must run with no lock held).
#[derive(Debug, Clone)]
pub(super) struct Probe {
    waker: Waker,
    state: StdArc<ProbeState>,
}

#[derive(Debug)]
struct ProbeState {
    wakes: AtomicUsize,
    drop_on_wake: Option<Mutex<Option<Sleep>>>,
}

impl Wake for ProbeState {
    fn wake(self: StdArc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &StdArc<Self>) {
        self.wakes.fetch_add(1, Ordering::AcqRel);
        if let Some(slot) = &self.drop_on_wake {
            let sleep = lock(slot).take();
            drop(sleep);
        }
    }
}

impl Probe {
    pub(super) fn new() -> Probe {
        Probe::with(None)
    }

    /// A probe that drops `sleep` the first time it is woken.
    pub(super) fn dropping(sleep: Sleep) -> Probe {
        Probe::with(Some(Mutex::new(Some(sleep))))
    }

    fn with(drop_on_wake: Option<Mutex<Option<Sleep>>>) -> Probe {
        let state = StdArc::new(ProbeState {
            wakes: AtomicUsize::new(0),
            drop_on_wake,
        });
        Probe {
            waker: Waker::from(state.clone()),
            state,
        }
    }

    /// Polls `sleep` with this probe's waker (always the same waker, so re-polls may take the
    /// lock-free path).
    pub(super) fn poll(&self, sleep: &mut Sleep) -> Poll<()> {
        Pin::new(sleep).poll(&mut Context::from_waker(&self.waker))
    }

    pub(super) fn wakes(&self) -> usize {
        self.state.wakes.load(Ordering::Acquire)
    }

    /// Drops the sleep held for [`Probe::dropping`] if no wake has.
    pub(super) fn release(&self) {
        if let Some(slot) = &self.state.drop_on_wake {
            let sleep = lock(slot).take();
            drop(sleep);
        }
    }
}
