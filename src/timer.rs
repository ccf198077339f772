//! [`Timer`], the cheap handle to one timing wheel and its driver task, and its [`Builder`].

use std::fmt;
use std::future::IntoFuture;
use std::time::Duration;

use tokio::time::Instant;

use crate::driver::{self, Clock, Global, ShardHandle, RUNNING};
use crate::loom::{global, Arc};
use crate::{Error, Sleep, Timeout};

/// Default tick: 1 ms, like tokio's timer.
const DEFAULT_TICK: Duration = Duration::from_millis(1);
/// Default level-0 size: one second of 1 ms ticks before the first cascade.
const DEFAULT_SLOTS: usize = 1024;
/// Largest accepted level-0 size (Netty's bound).
const MAX_SLOTS: usize = 1 << 30;
/// Largest accepted shard count.
const MAX_SHARDS: usize = 1024;
/// Smallest accepted tick: finer than this the driver would only burn CPU.
const MIN_TICK: Duration = Duration::from_micros(1);
/// Largest accepted tick.
const MAX_TICK_DURATION: Duration = Duration::from_secs(24 * 60 * 60);

/// A handle to a hierarchical timing wheel driven by a task on a tokio runtime.
///
/// Cloning is cheap (one reference count) and every clone drives the same wheel. The driver
/// task runs until the last handle, and every [`Sleep`] made from one, is gone.
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
}

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
#[derive(Debug, Clone)]
pub struct Builder {
    tick: Duration,
    slots: usize,
    shards: Option<usize>,
}

// ===== impl Timer =====

impl Timer {
    /// A timer with the default configuration (1 ms tick, 1024 level-0 slots), driven by a
    /// task on the current tokio runtime.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime context. [`Builder::build`] reports that as an error instead.
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
            Err(e) if e.is_no_runtime() => panic!(
                "wheel-timer: Timer::new() must be called from inside a tokio runtime context"
            ),
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
    pub fn sleep(&self, duration: Duration) -> Sleep {
        let clock = &self.inner.global.clock;
        let nanos = clock
            .nanos(Instant::now())
            .saturating_add(driver::duration_nanos(duration));
        Sleep::new(self.shard_handle(), nanos, duration.is_zero())
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
    pub fn sleep_until(&self, deadline: Instant) -> Sleep {
        let past = deadline <= Instant::now();
        Sleep::new(
            self.shard_handle(),
            self.inner.global.clock.nanos(deadline),
            past,
        )
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
    pub fn timeout_at<F: IntoFuture>(
        &self,
        deadline: Instant,
        future: F,
    ) -> Timeout<F::IntoFuture> {
        Timeout::new(future.into_future(), self.sleep_until(deadline))
    }

    /// The number of timers registered and not yet fired or cancelled: polled sleeps that are
    /// still waiting (an unpolled sleep is not registered yet).
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

    /// Whether the timer is still taking work (not shut down, driver alive).
    pub(crate) fn is_running(&self) -> bool {
        self.inner.global.state() == RUNNING
    }

    pub(crate) fn global(&self) -> &Arc<Global> {
        &self.inner.global
    }

    /// The calling thread's shard handle.
    pub(crate) fn shard_handle(&self) -> Arc<ShardHandle> {
        let handles = &self.inner.handles;
        handles[thread_slot() & (handles.len() - 1)].clone()
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
    /// 2^30. Deadlines within `slots` ticks never cascade; later ones cascade once per
    /// level (each higher level has 64 buckets). Costs 4 bytes per slot per shard.
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

    /// Builds the timer and spawns its driver on the current tokio runtime.
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_config`] for a tick, slot or shard count out of range;
    /// [`Error::is_no_runtime`] outside a tokio runtime context.
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
            return Err(Error::invalid_config("slots must be between 1 and 2^30"));
        }
        let shards = self.shards.unwrap_or_else(default_shards);
        if shards == 0 || shards > MAX_SHARDS {
            return Err(Error::invalid_config("shards must be between 1 and 1024"));
        }
        let clock = Clock::new(Instant::now(), self.tick.as_nanos() as u64);
        let global = Arc::new(Global::new(
            clock,
            shards.next_power_of_two(),
            self.slots.next_power_of_two(),
        ));
        let handles = (0..global.shards.len())
            .map(|i| Arc::new(global.handle(i)))
            .collect();
        let timer = Timer {
            inner: Arc::new(TimerInner {
                global: global.clone(),
                handles,
            }),
        };
        Ok((timer, global))
    }
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

fn default_shards() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cpus * 4).min(MAX_SHARDS)
}
