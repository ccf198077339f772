//! [`IdleTrackerBuilder`] (and `IdleTracker::new`, `IdleTracker::builder`): a tracker's timeout,
//! tick, shards, hasher and backlog warning.

use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;
use std::time::Duration;

use hashbrown::DefaultHashBuilder;

use super::expirations::Expirations;
use super::state::{Config, TrackerState};
use super::tracker::IdleTracker;
use crate::loom::Arc;
use crate::timer::Timer;

/// A tracker, its stream and the state its (not yet spawned) driver runs on.
pub(crate) type Unspawned<K, S> = (
    IdleTracker<K, S>,
    Expirations<K, S>,
    Arc<TrackerState<K, S>>,
);

/// Configures an [`IdleTracker`]: its timeout, tick, shards and hasher. From
/// [`IdleTracker::builder`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use wheel_timer::{IdleTracker, Timer};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let timer = Timer::new();
/// let (tracker, _expirations) = IdleTracker::<String>::builder(Duration::from_secs(30))
///     .tick(Duration::from_secs(1)) // the original design: one tick per second
///     .shards(16)
///     .hasher(std::hash::RandomState::new()) // keys chosen by clients: SipHash
///     .build(&timer);
/// tracker.touch("alice".to_string());
/// assert!(tracker.contains("alice"));
/// assert_eq!(tracker.tick(), Duration::from_secs(1));
/// # }
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct IdleTrackerBuilder<K, S = DefaultHashBuilder> {
    config: Config<S>,
    key: PhantomData<fn() -> K>,
}

// ===== impl IdleTracker: construction =====

impl<K> IdleTracker<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// A tracker expiring keys `idle_timeout` after their last touch, with the default
    /// configuration (see [`IdleTracker::builder`]), and the stream of its expired keys.
    /// Spawns the tracker's driver task on the current tokio runtime.
    ///
    /// `idle_timeout` is rounded up to whole ticks of `timer` (at least one;
    /// `Duration::ZERO` means one tick) and saturates at 146 years.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime context.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use wheel_timer::{IdleTracker, Timer};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let timer = Timer::new();
    /// let (tracker, _expirations) = IdleTracker::<u64>::new(&timer, Duration::from_secs(30));
    /// assert_eq!(tracker.idle_timeout(), Duration::from_secs(30));
    /// # }
    /// ```
    #[track_caller]
    pub fn new(timer: &Timer, idle_timeout: Duration) -> (IdleTracker<K>, Expirations<K>) {
        Self::builder(idle_timeout).build(timer)
    }

    /// A builder for a tracker expiring keys idle for `idle_timeout`, to set its tick,
    /// shards or hasher (see [`IdleTrackerBuilder`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use wheel_timer::{IdleTracker, Timer};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let timer = Timer::new();
    /// let (tracker, _expirations) =
    ///     IdleTracker::<u64>::builder(Duration::from_secs(30)).shards(4).build(&timer);
    /// // The default tick: 1/64 of the timeout, in whole timer ticks.
    /// assert_eq!(tracker.tick(), Duration::from_millis(469));
    /// # }
    /// ```
    pub fn builder(idle_timeout: Duration) -> IdleTrackerBuilder<K> {
        IdleTrackerBuilder::new(idle_timeout)
    }
}

// ===== impl IdleTrackerBuilder =====

impl<K, S: Clone> Clone for IdleTrackerBuilder<K, S> {
    fn clone(&self) -> Self {
        IdleTrackerBuilder {
            config: self.config.clone(),
            key: PhantomData,
        }
    }
}

impl<K, S> fmt::Debug for IdleTrackerBuilder<K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdleTrackerBuilder")
            .field("timeout", &self.config.timeout)
            .field("tick", &self.config.tick)
            .field("shards", &self.config.shards)
            .field("warn_undelivered", &self.config.warn_undelivered)
            .finish_non_exhaustive()
    }
}

/// Undelivered expired keys past which a warning is logged, by default.
const WARN_UNDELIVERED: usize = 1 << 20;

impl<K> IdleTrackerBuilder<K> {
    /// The default configuration for `timeout` (see [`IdleTracker::builder`]).
    pub(super) fn new(timeout: Duration) -> Self {
        IdleTrackerBuilder {
            config: Config {
                timeout,
                tick: None,
                shards: None,
                hasher: DefaultHashBuilder::default(),
                warn_undelivered: WARN_UNDELIVERED,
            },
            key: PhantomData,
        }
    }
}

impl<K, S> IdleTrackerBuilder<K, S> {
    /// Keys idle this long expire (rounded up to the timer's tick, at least one tick;
    /// saturated at 146 years).
    pub fn timeout(&mut self, timeout: Duration) -> &mut Self {
        self.config.timeout = timeout;
        self
    }

    /// The tracker's tick: how often its driver wakes while keys are tracked, and so the
    /// precision of expiry (see [`IdleTracker`]'s *Timing*). Rounded up to a whole number of
    /// the timer's ticks, and coarsened to `timeout / 65534` if finer, so the ring stays
    /// small. Default: the timeout divided by 64.
    pub fn tick(&mut self, tick: Duration) -> &mut Self {
        self.config.tick = Some(tick);
        self
    }

    /// Number of shards (locks) the keys are spread over: rounded up to a power of two,
    /// between 1 and 64. Default: four per CPU.
    pub fn shards(&mut self, shards: usize) -> &mut Self {
        self.config.shards = Some(shards);
        self
    }

    /// Undelivered expired keys (an [`Expirations`] stream alive but not polled) past which
    /// a `tracing` warning is logged, and again each time the backlog doubles. Default: 2^20.
    pub fn warn_undelivered(&mut self, keys: usize) -> &mut Self {
        self.config.warn_undelivered = keys.max(1);
        self
    }

    /// The hasher of keys (see [`IdleTracker`]'s *Keys and hashing*).
    pub fn hasher<H>(&self, hasher: H) -> IdleTrackerBuilder<K, H> {
        let Config {
            timeout,
            tick,
            shards,
            warn_undelivered,
            ..
        } = self.config;
        IdleTrackerBuilder {
            config: Config {
                timeout,
                tick,
                shards,
                hasher,
                warn_undelivered,
            },
            key: PhantomData,
        }
    }

    /// The tracker, its stream, and the shared state its driver task runs on, without
    /// spawning that task (the loom models play it with `TrackerState::step`).
    pub(crate) fn unspawned(&self, timer: &Timer) -> Unspawned<K, S>
    where
        S: Clone,
    {
        let shared = Arc::new(TrackerState::new(timer, self.config.clone()));
        let tracker = IdleTracker::from_shared(shared.clone());
        (tracker, Expirations::new(shared.clone()), shared)
    }
}

impl<K, S> IdleTrackerBuilder<K, S>
where
    K: Hash + Eq + Send + Sync + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    /// Builds the tracker on `timer` and spawns its driver task on the current tokio
    /// runtime; returns it with the stream of its expired keys.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime context.
    #[track_caller]
    pub fn build(&self, timer: &Timer) -> (IdleTracker<K, S>, Expirations<K, S>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            panic!("wheel-timer: an IdleTracker must be built from inside a tokio runtime context");
        };
        let (tracker, expirations, shared) = self.unspawned(timer);
        runtime.spawn(super::driver::task(shared, timer.clone()));
        (tracker, expirations)
    }
}
