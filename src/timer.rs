//! [`Timer`], the cheap handle to one timing wheel and its driver task, and its [`Builder`].

use std::fmt;
use std::future::IntoFuture;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::{self, Clock};
use crate::driver;
use crate::error::Error;
use crate::loom::{global, runtime, Arc};
use crate::shard::{Global, Options, ShardHandle};
use crate::sleep::Sleep;
use crate::stash;
use crate::task::{Executor, ExecutorFn};
use crate::timeout::Timeout;

/// Default tick: 1 ms, like tokio's timer.
const DEFAULT_TICK: Duration = Duration::from_millis(1);
/// Default level-0 size: one second of 1 ms ticks before the first cascade.
const DEFAULT_SLOTS: usize = 1024;
/// Largest accepted level-0 size. Netty allows 2^30, but here every shard holds two level-0
/// arrays (sleeps and tasks) of 4 bytes per slot: 2^30 slots would ask for 8 GiB per shard
/// and abort on allocation instead of failing cleanly. 2^20 (8 MiB per shard) already lets
/// a 1 ms tick reach 17 minutes without a cascade.
const MAX_SLOTS: usize = 1 << 20;
/// Largest accepted shard count.
const MAX_SHARDS: usize = 1024;
/// Smallest accepted tick: finer than this the driver would only burn CPU.
const MIN_TICK: Duration = Duration::from_micros(1);
/// Largest accepted tick.
const MAX_TICK_DURATION: Duration = Duration::from_secs(24 * 60 * 60);
/// More live timers than this in one process draw a warning (Netty's limit).
const INSTANCE_WARN_LIMIT: usize = 64;

/// A handle to a hierarchical timing wheel driven by a task on a tokio runtime.
///
/// Cloning is cheap (one reference count) and every clone drives the same wheel. The driver
/// task runs until the last handle, every [`Sleep`] made from one and every pending
/// [`TimerTask`](crate::TimerTask) are gone, or until [`Timer::shutdown`].
///
/// A timer is a shared resource: one per program (or per runtime) is the intended use. With
/// more than 64 timers alive at once the crate logs a `tracing` warning, once per process.
///
/// Most programs use the free functions ([`sleep_wheel`](crate::sleep_wheel),
/// [`timeout_wheel`](crate::timeout_wheel)…), which share one default timer per runtime; a
/// `Timer` of your own gives you its configuration and skips the per-call lookup of the
/// current runtime's default timer.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use wheel_timer::Timer;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), wheel_timer::Error> {
/// let timer = Timer::builder().tick(Duration::from_millis(10)).build()?;
/// timer.sleep(Duration::from_millis(25)).await;
/// assert_eq!(timer.pending(), 0);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Timer {
    inner: Arc<TimerInner>,
}

struct TimerInner {
    global: Arc<Global>,
    /// One counted handle per shard, cloned into each sleep.
    handles: Box<[Arc<ShardHandle>]>,
    /// A runtime's default timer, shared by every library in the process: it refuses
    /// `shutdown`.
    default: bool,
}

/// Timers alive in the process, for the too-many-instances warning.
static INSTANCES: global::AtomicUsize = global::AtomicUsize::new(0);
static INSTANCES_WARNED: global::AtomicUsize = global::AtomicUsize::new(0);

/// Configures a [`Timer`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use wheel_timer::Timer;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), wheel_timer::Error> {
/// let timer = Timer::builder()
///     .tick(Duration::from_millis(5))
///     .slots(512)
///     .build()?;
/// assert_eq!(timer.tick_duration(), Duration::from_millis(5));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Builder {
    tick: Duration,
    slots: usize,
    shards: Option<usize>,
    max_pending: Option<usize>,
    executor: Option<ExecutorFn>,
    /// Builds a runtime's default timer (see `Timer::shutdown`).
    default: bool,
}

// ===== impl Timer =====

impl Timer {
    /// A timer with the default configuration (1 ms tick, 1024 level-0 slots), driven by a
    /// task on the current tokio runtime.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime context, or on a runtime without its time driver.
    /// [`Builder::build`] reports those as errors instead.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let timer = wheel_timer::Timer::new();
    /// timer.sleep(std::time::Duration::from_millis(1)).await;
    /// # }
    /// ```
    #[track_caller]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Timer {
        match Builder::new().build() {
            Ok(timer) => timer,
            Err(e) if e.is_no_runtime() && tokio::runtime::Handle::try_current().is_err() => {
                panic!(
                    "wheel-timer: Timer::new() must be called from inside a tokio runtime context"
                )
            }
            Err(e) => panic!("wheel-timer: {e}"),
        }
    }

    /// A builder for a timer with a non-default configuration.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_timer::Error> {
    /// let timer = wheel_timer::Timer::builder().slots(64).build()?;
    /// # drop(timer);
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder() -> Builder {
        Builder::new()
    }

    /// A future that completes once `duration` has passed (rounded up to the next tick).
    ///
    /// A zero duration completes on the first poll; `Duration::MAX` and other deadlines past
    /// 146 years saturate there.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let timer = wheel_timer::Timer::new();
    /// timer.sleep(std::time::Duration::from_millis(10)).await;
    /// # }
    /// ```
    #[inline]
    pub fn sleep(&self, duration: Duration) -> Sleep {
        Sleep::after(self.sleep_handle(), duration)
    }

    /// A future that completes at `deadline` (rounded up to the next tick); a deadline that
    /// has passed completes on the first poll.
    ///
    /// # Examples
    ///
    /// ```
    /// use tokio::time::{Duration, Instant};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let timer = wheel_timer::Timer::new();
    /// let deadline = Instant::now() + Duration::from_millis(10);
    /// timer.sleep_until(deadline).await;
    /// assert!(Instant::now() >= deadline);
    /// # }
    /// ```
    #[inline]
    pub fn sleep_until(&self, deadline: Instant) -> Sleep {
        Sleep::until(self.sleep_handle(), deadline)
    }

    /// Runs `future` with a time limit: its output, or [`Elapsed`](crate::Elapsed) if
    /// `duration` passes first. The future is polled before the deadline is checked, so a
    /// ready future always wins.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let timer = wheel_timer::Timer::new();
    /// assert_eq!(timer.timeout(Duration::from_secs(1), async { 7 }).await, Ok(7));
    /// assert!(timer.timeout(Duration::from_millis(5), std::future::pending::<()>()).await.is_err());
    /// # }
    /// ```
    #[inline]
    pub fn timeout<F: IntoFuture>(&self, duration: Duration, future: F) -> Timeout<F::IntoFuture> {
        Timeout::new(future.into_future(), self.sleep(duration))
    }

    /// Like [`Timer::timeout`] with an absolute deadline.
    ///
    /// # Examples
    ///
    /// ```
    /// use tokio::time::{Duration, Instant};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let timer = wheel_timer::Timer::new();
    /// let deadline = Instant::now() + Duration::from_millis(5);
    /// assert!(timer.timeout_at(deadline, std::future::pending::<()>()).await.is_err());
    /// # }
    /// ```
    #[inline]
    pub fn timeout_at<F: IntoFuture>(
        &self,
        deadline: Instant,
        future: F,
    ) -> Timeout<F::IntoFuture> {
        Timeout::new(future.into_future(), self.sleep_until(deadline))
    }

    /// The number of timers registered and not yet fired or cancelled: polled sleeps that are
    /// still waiting (an unpolled sleep is not registered yet) and scheduled tasks (a
    /// repeating series counts once).
    ///
    /// Exact for each shard at the moment that shard is read.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::{future::Future, pin::pin, task::{Context, Waker}, time::Duration};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let timer = wheel_timer::Timer::new();
    /// let mut sleep = pin!(timer.sleep(Duration::from_secs(60)));
    /// assert_eq!(timer.pending(), 0);
    /// let _ = sleep.as_mut().poll(&mut Context::from_waker(Waker::noop()));
    /// assert_eq!(timer.pending(), 1);
    /// # }
    /// ```
    pub fn pending(&self) -> usize {
        self.inner.global.pending()
    }

    /// The wheel's tick: the granularity every deadline is rounded up to.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// assert_eq!(wheel_timer::Timer::new().tick_duration(), std::time::Duration::from_millis(1));
    /// # }
    /// ```
    pub fn tick_duration(&self) -> Duration {
        Duration::from_nanos(self.inner.global.clock.tick_ns)
    }

    /// Like [`Timer::sleep`], but refused when the timer cannot take it: the sleep is
    /// registered right away (not at its first poll), so that it counts against
    /// [`Builder::max_pending`] from the start.
    ///
    /// This is the constructor to use where refusing work is the right answer at capacity.
    /// [`Timer::sleep`] is never refused: its sleeps count against the limit once
    /// registered (so they can make fallible calls fail) but may exceed it.
    ///
    /// A registered sleep can fire before its first poll: [`Sleep::is_elapsed`] then reads
    /// `true` before it was ever polled.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_timer::Error> {
    /// let timer = wheel_timer::Timer::builder().max_pending(1).build()?;
    /// let first = timer.try_sleep(Duration::from_secs(1))?;
    /// assert!(timer.try_sleep(Duration::from_secs(1)).unwrap_err().is_at_capacity());
    /// drop(first);
    /// timer.try_sleep(Duration::from_millis(1))?.await;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_at_capacity`] when `max_pending` timers are pending;
    /// [`Error::is_shutdown`] after [`Timer::shutdown`] or once the timer's runtime is gone.
    pub fn try_sleep(&self, duration: Duration) -> Result<Sleep, Error> {
        let nanos = self
            .inner
            .global
            .clock
            .nanos_after(Instant::now(), duration);
        self.try_sleep_nanos(nanos, duration.is_zero())
    }

    /// Like [`Timer::sleep_until`], refused as [`Timer::try_sleep`] is.
    ///
    /// # Examples
    ///
    /// ```
    /// use tokio::time::{Duration, Instant};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_timer::Error> {
    /// let timer = wheel_timer::Timer::new();
    /// timer.try_sleep_until(Instant::now() + Duration::from_millis(5))?.await;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Timer::try_sleep`].
    pub fn try_sleep_until(&self, deadline: Instant) -> Result<Sleep, Error> {
        let past = deadline <= Instant::now();
        self.try_sleep_nanos(self.inner.global.clock.nanos(deadline), past)
    }

    fn try_sleep_nanos(&self, nanos: u64, past: bool) -> Result<Sleep, Error> {
        let global = &self.inner.global;
        if !global.is_running() {
            return Err(Error::shutdown());
        }
        if past {
            return Ok(Sleep::new(self.shard_handle(), nanos, true));
        }
        global.admit()?;
        Sleep::registered(self.shard_handle(), nanos)
    }

    /// A runtime's default timer: one that refuses [`Timer::shutdown`].
    pub(crate) fn build_default() -> Result<Timer, Error> {
        let mut builder = Builder::new();
        builder.default = true;
        builder.build()
    }

    /// Whether this is a runtime's default timer, which refuses [`Timer::shutdown`].
    pub(crate) fn is_default(&self) -> bool {
        self.inner.default
    }

    /// Whether the timer is still taking work (not shut down, driver alive).
    #[inline]
    pub(crate) fn is_running(&self) -> bool {
        self.inner.global.is_running()
    }

    pub(crate) fn global(&self) -> &Arc<Global> {
        &self.inner.global
    }

    /// The calling thread's shard handle.
    #[inline]
    pub(crate) fn shard_handle(&self) -> Arc<ShardHandle> {
        self.inner.handles[self.shard_index()].clone()
    }

    /// The calling thread's shard handle for a new sleep: the one the thread's stash kept
    /// from a dropped sleep, or a new reference.
    #[inline]
    pub(crate) fn sleep_handle(&self) -> Arc<ShardHandle> {
        stash::take(&self.inner.handles[self.shard_index()])
    }

    /// The calling thread's shard.
    #[inline]
    pub(crate) fn shard_index(&self) -> usize {
        thread_slot() & (self.inner.handles.len() - 1)
    }
}

// ===== impl TimerInner =====

impl TimerInner {
    fn new(global: Arc<Global>, handles: Box<[Arc<ShardHandle>]>, default: bool) -> TimerInner {
        let alive = INSTANCES.fetch_add(1, global::Ordering::Relaxed) + 1;
        if alive > INSTANCE_WARN_LIMIT && INSTANCES_WARNED.swap(1, global::Ordering::Relaxed) == 0 {
            tracing::warn!(
                alive,
                "wheel-timer: more than {INSTANCE_WARN_LIMIT} Timers are alive in this process; \
                 a Timer is a shared resource: create one and share clones of it (or use the \
                 free functions' per-runtime default timer) instead of one per use"
            );
        }
        TimerInner {
            global,
            handles,
            default,
        }
    }
}

impl Drop for TimerInner {
    fn drop(&mut self) {
        INSTANCES.fetch_sub(1, global::Ordering::Relaxed);
        // Threads stop keeping this timer's handles; this one lets go at once (see
        // `crate::stash`).
        self.global.orphan();
        stash::forget(&self.global);
    }
}

impl fmt::Debug for Timer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timer")
            .field("tick", &self.tick_duration())
            .field("shards", &self.inner.handles.len())
            .field("running", &self.is_running())
            .finish()
    }
}

/// A small per-thread number, handed out round-robin, that picks the thread's shard.
#[inline]
fn thread_slot() -> usize {
    static NEXT: global::AtomicUsize = global::AtomicUsize::new(0);
    thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, global::Ordering::Relaxed);
    }
    SLOT.with(|slot| *slot)
}

// ===== impl Builder =====

impl Builder {
    /// The default configuration: 1 ms tick, 1024 level-0 slots, four shards per CPU.
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = wheel_timer::Builder::new();
    /// # drop(builder);
    /// ```
    pub fn new() -> Builder {
        Builder {
            tick: DEFAULT_TICK,
            slots: DEFAULT_SLOTS,
            shards: None,
            max_pending: None,
            executor: None,
            default: false,
        }
    }

    /// The wheel's granularity (default 1 ms): every deadline is rounded up to a whole tick.
    /// Must lie between 1 µs and 24 h.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// let mut builder = wheel_timer::Timer::builder();
    /// builder.tick(Duration::from_millis(10));
    /// ```
    pub fn tick(&mut self, tick: Duration) -> &mut Self {
        self.tick = tick;
        self
    }

    /// Buckets in the finest level (default 1024), rounded up to a power of two; at most
    /// 2^20 (Netty allows 2^30, but each shard here holds its own level 0). Deadlines within
    /// `slots` ticks never cascade; later ones cascade once per level (each higher level has
    /// 64 buckets). Costs 8 bytes per slot per shard (a sleep wheel and a task wheel).
    ///
    /// # Examples
    ///
    /// ```
    /// let mut builder = wheel_timer::Timer::builder();
    /// builder.slots(512);
    /// ```
    pub fn slots(&mut self, slots: usize) -> &mut Self {
        self.slots = slots;
        self
    }

    /// Number of independently locked shards (default: four per available CPU), rounded up
    /// to a power of two; at most 1024. Each thread registers its timers in one shard, so
    /// more shards mean less lock sharing between threads.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut builder = wheel_timer::Timer::builder();
    /// builder.shards(1);
    /// ```
    pub fn shards(&mut self, shards: usize) -> &mut Self {
        self.shards = Some(shards);
        self
    }

    /// Bounds the timers the timer holds at once (default: unbounded), as Netty's
    /// `maxPendingTimeouts`: at `max` pending timers, [`Timer::schedule`] and its variants and
    /// [`Timer::try_sleep`] fail with [`Error::is_at_capacity`] instead of growing without
    /// bound. Must be at least 1. Unbounded, the hard limit is 2^32 − 1 timers per shard
    /// (some 160 GB of them); one more panics with a message saying so.
    ///
    /// What counts: every scheduled task (a repeating series once) until it fires or is
    /// cancelled (the slot is freed at once, not when the wheel comes round), and every
    /// registered sleep until it completes or is dropped. Sleeps from the infallible
    /// constructors ([`Timer::sleep`], [`Timer::timeout`], [`Timer::interval`]…) count but
    /// are never refused, so they may take the count above `max`; use [`Timer::try_sleep`]
    /// where a sleep should be refused. The count is exact even when cancels race fires.
    /// Sleeps the crate keeps on this timer for you count too: one per [`IdleTracker`]
    /// (its shutdown watch), per [`DelayQueue`] with entries, and up to two per standalone
    /// [`IdleStream`]; leave room for them.
    ///
    /// [`IdleTracker`]: crate::IdleTracker
    /// [`DelayQueue`]: crate::DelayQueue
    /// [`IdleStream`]: crate::IdleStream
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_timer::Error> {
    /// let timer = wheel_timer::Timer::builder().max_pending(2).build()?;
    /// let a = timer.schedule(Duration::from_secs(1), || {})?;
    /// let _b = timer.schedule(Duration::from_secs(1), || {})?;
    /// assert!(timer.schedule(Duration::from_secs(1), || {}).unwrap_err().is_at_capacity());
    /// a.cancel();
    /// timer.schedule(Duration::from_secs(1), || {})?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_pending(&mut self, max: usize) -> &mut Self {
        self.max_pending = Some(max);
        self
    }

    /// Runs sync callbacks ([`Timer::schedule`], [`Timer::schedule_at`],
    /// [`Timer::schedule_repeating`]) through `executor`: Netty's `taskExecutor`. The driver
    /// calls `executor` with no lock held, once per fired callback, handing it a job to run;
    /// the job catches and reports its own panics. `executor` should hand the job off rather
    /// than run it: a job run inline delays the driver, hence every timer. A job the
    /// executor drops is never run. A panic in `executor` itself is caught and counted like
    /// a callback's (that callback is lost). Async tasks
    /// ([`Timer::schedule_async`]) always run as tasks on the timer's runtime.
    ///
    /// The default runs each callback on the runtime's blocking pool (`spawn_blocking`), so
    /// a callback may block without delaying other timers (Netty's most common complaint).
    /// Plain tokio tasks are cheaper, but a callback that blocks a worker thread can then
    /// stall tokio's time driver, and with it every timer: choose them only for callbacks
    /// that never block, with `.executor(|job| drop(tokio::spawn(async move { job() })))`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_timer::Error> {
    /// let timer = wheel_timer::Timer::builder()
    ///     .executor(|job| drop(std::thread::spawn(job)))
    ///     .build()?;
    /// let (tx, rx) = tokio::sync::oneshot::channel();
    /// timer.schedule(Duration::from_millis(5), move || {
    ///     let _ = tx.send(std::thread::current().id());
    /// })?;
    /// assert_ne!(rx.await.ok(), Some(std::thread::current().id()));
    /// # Ok(())
    /// # }
    /// ```
    pub fn executor<E>(&mut self, executor: E) -> &mut Self
    where
        E: Fn(Box<dyn FnOnce() + Send>) + Send + Sync + 'static,
    {
        self.executor = Some(Arc::new(AssertUnwindSafe(Box::new(executor))));
        self
    }

    /// Builds the timer and spawns its driver on the current tokio runtime.
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_config`] for a tick, slot or shard count out of range, or a zero
    /// `max_pending`; [`Error::is_no_runtime`] outside a tokio runtime context, or on a
    /// runtime without its time driver (the driver task waits on tokio's time). tokio has
    /// no query for that: `build` asks by creating one tokio sleep, which panics there; the
    /// panic is caught, but a panic hook still sees it, and under `panic = "abort"` the
    /// process aborts (as tokio's own `sleep` would on that runtime).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::Duration;
    /// let err = wheel_timer::Timer::builder().tick(Duration::ZERO).build().unwrap_err();
    /// assert!(err.is_invalid_config());
    /// # }
    /// ```
    pub fn build(&self) -> Result<Timer, Error> {
        let (timer, driver) = self.build_unspawned()?;
        let handle = tokio::runtime::Handle::try_current().map_err(|_| Error::no_runtime())?;
        if !time_enabled() {
            return Err(Error::time_disabled());
        }
        driver.clock.settle_if_paused();
        handle.spawn(driver::task(driver));
        Ok(timer)
    }

    /// Validates the configuration and builds the timer without spawning its driver; the
    /// returned `Global` is what the driver task (or a test playing the driver) runs.
    pub(crate) fn build_unspawned(&self) -> Result<(Timer, Arc<Global>), Error> {
        if self.tick < MIN_TICK {
            return Err(Error::invalid_config("tick must be at least 1 µs"));
        }
        if self.tick > MAX_TICK_DURATION {
            return Err(Error::invalid_config("tick must be at most 24 h"));
        }
        if self.slots == 0 || self.slots > MAX_SLOTS {
            return Err(Error::invalid_config("slots must be between 1 and 2^20"));
        }
        let shards = self
            .shards
            .unwrap_or_else(|| clock::default_shards(MAX_SHARDS));
        if shards == 0 || shards > MAX_SHARDS {
            return Err(Error::invalid_config("shards must be between 1 and 1024"));
        }
        if self.max_pending == Some(0) {
            return Err(Error::invalid_config("max_pending must be at least 1"));
        }
        let clock = Clock::new(Instant::now(), self.tick.as_nanos() as u64);
        let options = Options {
            max_pending: self.max_pending,
            executor: Executor {
                runtime: tokio::runtime::Handle::try_current().ok(),
                custom: self.executor.clone(),
            },
            runtime: runtime::current(),
        };
        let global = Arc::new(Global::new(
            clock,
            shards.next_power_of_two(),
            self.slots.next_power_of_two(),
            options,
        ));
        let handles = (0..global.shard_count())
            .map(|i| Arc::new(Global::handle(&global, i)))
            .collect();
        let timer = Timer {
            inner: Arc::new(TimerInner::new(global.clone(), handles, self.default)),
        };
        Ok((timer, global))
    }
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("tick", &self.tick)
            .field("slots", &self.slots)
            .field("shards", &self.shards)
            .field("max_pending", &self.max_pending)
            .field("executor", &self.executor.as_ref().map(|_| "custom"))
            .finish()
    }
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

/// Whether the current runtime has its time driver. tokio offers no query, and creating one
/// of its sleeps on a runtime without it panics; the driver task would panic the same way
/// later, where nobody sees it, with every callback lost. So ask here, once per build.
fn time_enabled() -> bool {
    std::panic::catch_unwind(|| drop(tokio::time::sleep(Duration::ZERO))).is_ok()
}

#[cfg(all(test, not(wheel_loom)))]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Collects the messages of WARN events from every thread: installed process-wide, as
    /// the warning fires on whichever thread creates the 65th timer.
    #[derive(Clone, Default)]
    struct Warnings(Arc<Mutex<Vec<String>>>);

    impl tracing::Subscriber for Warnings {
        fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
            *metadata.level() <= tracing::Level::WARN
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            struct Message(String);
            impl tracing::field::Visit for Message {
                fn record_debug(&mut self, _: &tracing::field::Field, v: &dyn fmt::Debug) {
                    self.0.push_str(&format!("{v:?} "));
                }
            }
            let mut message = Message(String::new());
            event.record(&mut message);
            self.0.lock().unwrap().push(message.0);
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    impl Warnings {
        fn too_many_timers(&self) -> usize {
            let messages = self.0.lock().unwrap();
            messages
                .iter()
                .filter(|m| m.contains("Timers are alive") && m.contains("share clones"))
                .count()
        }
    }

    #[test]
    fn more_than_64_timers_warn_once_naming_the_fix() {
        let warnings = Warnings::default();
        tracing::subscriber::set_global_default(warnings.clone()).unwrap();
        let mut builder = Builder::new();
        builder.shards(1).slots(1);
        let timers: Vec<_> = (0..INSTANCE_WARN_LIMIT + 5)
            .map(|_| builder.build_unspawned().unwrap())
            .collect();
        assert_eq!(warnings.too_many_timers(), 1);
        drop(timers);
        let again: Vec<_> = (0..INSTANCE_WARN_LIMIT + 5)
            .map(|_| builder.build_unspawned().unwrap())
            .collect();
        assert_eq!(warnings.too_many_timers(), 1, "once per process");
        drop(again);
    }
}
