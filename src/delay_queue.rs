//! [`DelayQueue`], tokio-util's keyed delay queue on the crate's sans-IO wheel.
//!
//! Ground rules:
//! - The queue owns one private `Wheel` (`&mut self` only: no lock, no atomics). Its ticks
//!   are the timer's own ticks (`crate::clock::Clock`: same start, tick and phase), so an
//!   item's tick and the tick its sleep is armed for are one number, rounded once: a deadline
//!   rounds *up* to a tick and the clock rounds *down*, so an item never comes out before
//!   the timer's own `Sleep` for that deadline would complete.
//! - When the sleep fires, its tick counts as reached even if the clock reads an earlier tick
//!   (a deadline past tokio's timer range, which tokio fires at the range's end), exactly as
//!   the driver does: otherwise the queue would re-arm a sleep that fires at once, forever.
//! - The timer is touched through ONE wheel [`Sleep`], armed for the wheel's next expiration
//!   only while the queue is polled and holds items. An empty queue holds no sleep, so it
//!   costs the driver no wakeup; a sleep armed for an item that was since removed costs one
//!   spurious poll, after which it is re-armed or dropped.
//! - `insert`, `remove` and `reset` never touch the timer: when they move the next expiration
//!   earlier (or empty the queue) they wake the task that last polled, which re-arms.
//! - `poll_expired` reads the clock itself: an item whose deadline the clock has reached is
//!   handed out on that poll, whether or not the sleep has fired yet.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::Clock;
use crate::sleep::Closed;
use crate::sleep::Sleep;
use crate::timer::Timer;
use crate::wheel::{self, Wheel};

/// Level-0 buckets of the queue's wheel: 256 one-tick buckets (a quarter second at 1 ms)
/// keep the per-queue footprint small while most deadlines of a request-scoped queue never
/// cascade more than once. The wheel then has 9 upper levels of 64 buckets; with the due
/// list that is 833 `u32` list heads (3,332 bytes) plus one occupancy bit per head (120 bytes
/// with the summary word) and the level tables (224 bytes), about 3.7 KB per queue before any
/// value is inserted.
const SLOTS: usize = 256;

/// A queue of values that each come out once their deadline is reached, the wheel's drop-in
/// for [`tokio_util::time::DelayQueue`](https://docs.rs/tokio-util/latest/tokio_util/time/struct.DelayQueue.html).
///
/// [`insert`](DelayQueue::insert) returns a [`Key`] that [`remove`](DelayQueue::remove)s the
/// value or [`reset`](DelayQueue::reset)s its deadline, in O(1). Expired values come out of
/// [`poll_expired`](DelayQueue::poll_expired) or the [`Stream`](futures_core::Stream)
/// implementation as [`Expired`], in deadline order to the timer's tick (1 ms by default);
/// values due in the same tick come out in any order. When the queue is empty, polling
/// returns `Ready(None)`, and polling again after new inserts yields again: the stream is not
/// fused.
///
/// Deadlines round up to the timer's tick and a value never comes out before its deadline.
/// The queue arms a single wheel [`Sleep`] for its next expiration, and none while it is
/// empty.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use futures::StreamExt;
/// use wheel_timer::DelayQueue;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mut queue = DelayQueue::new();
/// let session = queue.insert("session", Duration::from_millis(30));
/// queue.insert("retry", Duration::from_millis(10));
/// queue.reset(&session, Duration::from_millis(20));
///
/// let first = queue.next().await.expect("two values are queued");
/// assert_eq!(first.into_inner(), "retry");
/// assert_eq!(queue.next().await.map(|e| e.into_inner()), Some("session"));
/// assert!(queue.next().await.is_none(), "empty: the stream yields None");
/// # }
/// ```
///
/// # Panics
///
/// Methods that take a [`Key`] panic when it is stale (its value was removed or came out of
/// the queue), as tokio-util's do; [`try_remove`](DelayQueue::try_remove) returns `None`
/// instead. Inserting with [`new`](DelayQueue::new)'s default timer panics outside a tokio
/// runtime, and polling panics if the timer was shut down.
pub struct DelayQueue<T> {
    /// Values by key; an entry's tick is its deadline rounded up to the timer's tick.
    wheel: Wheel<Option<T>>,
    /// The timer, resolved at the first insert for [`DelayQueue::new`]; ticks are its clock's.
    timer: Option<Timer>,
    /// The sleep armed for `armed`, `None` while nothing is armed.
    sleep: Option<Sleep>,
    /// The tick `sleep` is armed for; `u64::MAX` when `sleep` is `None` or must be re-armed.
    armed: u64,
    /// The waker of the task that last polled, woken when the next expiration moves earlier.
    waker: Option<Waker>,
}

/// Names a value in a [`DelayQueue`], returned by [`insert`](DelayQueue::insert).
///
/// A key is valid until its value is removed or comes out of the queue; after that it is
/// *stale*, and it stays stale even when the queue reuses the value's slot (keys carry a
/// generation, unlike tokio-util's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key(wheel::Key);

/// A value that came out of a [`DelayQueue`], with its deadline and the key it had.
#[derive(Debug)]
pub struct Expired<T> {
    data: T,
    deadline: Instant,
    key: Key,
}

// ===== impl DelayQueue =====

impl<T> DelayQueue<T> {
    /// An empty queue on the current runtime's default timer (looked up at the first insert,
    /// so creating the queue needs no runtime).
    ///
    /// # Examples
    ///
    /// ```
    /// let queue: wheel_timer::DelayQueue<u32> = wheel_timer::DelayQueue::new();
    /// assert!(queue.is_empty());
    /// ```
    pub fn new() -> DelayQueue<T> {
        DelayQueue::with_capacity(0)
    }

    /// An empty queue with room for `capacity` values before it allocates, on the current
    /// runtime's default timer.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue: wheel_timer::DelayQueue<u32> = wheel_timer::DelayQueue::with_capacity(100);
    /// assert!(queue.capacity() >= 100);
    /// ```
    pub fn with_capacity(capacity: usize) -> DelayQueue<T> {
        let mut wheel = Wheel::new(SLOTS);
        wheel.reserve(capacity);
        DelayQueue {
            wheel,
            timer: None,
            sleep: None,
            armed: u64::MAX,
            waker: None,
        }
    }

    /// An empty queue on `timer`: its deadlines round up to that timer's tick.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use wheel_timer::{DelayQueue, Timer};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_timer::Error> {
    /// let timer = Timer::builder().tick(Duration::from_millis(10)).build()?;
    /// let mut queue = DelayQueue::with_timer(&timer);
    /// queue.insert("tick", Duration::from_millis(25));
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_timer(timer: &Timer) -> DelayQueue<T> {
        let mut queue = DelayQueue::new();
        queue.timer = Some(timer.clone());
        queue
    }

    /// Inserts `value`, to come out `timeout` from now. A zero `timeout` makes it come out on
    /// the next poll; `Duration::MAX` saturates 146 years out, and such a value comes out
    /// when the timer's own [`Sleep`] for that deadline completes (tokio's timer fires
    /// deadlines past its range at the end of that range).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut queue = wheel_timer::DelayQueue::new();
    /// let key = queue.insert("foo", Duration::from_secs(5));
    /// assert_eq!(queue.remove(&key).into_inner(), "foo");
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// On [`new`](DelayQueue::new)'s default timer, outside a tokio runtime.
    #[track_caller]
    pub fn insert(&mut self, value: T, timeout: Duration) -> Key {
        self.timer();
        let nanos = self.nanos_after_now(timeout);
        self.insert_nanos(value, nanos)
    }

    /// Inserts `value`, to come out at `when`. A deadline in the past makes it come out on
    /// the next poll.
    ///
    /// # Examples
    ///
    /// ```
    /// use tokio::time::{Duration, Instant};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut queue = wheel_timer::DelayQueue::new();
    /// let when = Instant::now() + Duration::from_millis(5);
    /// let key = queue.insert_at("foo", when);
    /// let deadline = queue.deadline(&key); // rounded up to the 1 ms tick
    /// assert!(deadline >= when && deadline - when < Duration::from_millis(1));
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// On [`new`](DelayQueue::new)'s default timer, outside a tokio runtime.
    #[track_caller]
    pub fn insert_at(&mut self, value: T, when: Instant) -> Key {
        self.timer();
        let nanos = self.clock().nanos(when);
        self.insert_nanos(value, nanos)
    }

    /// Removes the value of `key` and returns it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut queue = wheel_timer::DelayQueue::new();
    /// let key = queue.insert("foo", Duration::from_secs(5));
    /// assert_eq!(*queue.remove(&key).get_ref(), "foo");
    /// assert!(queue.is_empty());
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// If `key` is stale: its value was already removed or came out of the queue.
    #[track_caller]
    pub fn remove(&mut self, key: &Key) -> Expired<T> {
        match self.try_remove(key) {
            Some(expired) => expired,
            None => panic!("wheel-timer: DelayQueue::remove with a stale key {key:?}"),
        }
    }

    /// Removes the value of `key` and returns it, or `None` if the key is stale.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut queue = wheel_timer::DelayQueue::new();
    /// let key = queue.insert("foo", Duration::from_secs(5));
    /// assert!(queue.try_remove(&key).is_some());
    /// assert!(queue.try_remove(&key).is_none());
    /// # }
    /// ```
    pub fn try_remove(&mut self, key: &Key) -> Option<Expired<T>> {
        let tick = self.wheel.tick(key.0)?;
        let value = self.wheel.try_remove(key.0)??;
        if self.is_empty() {
            self.emptied();
        }
        Some(self.expired(value, tick, *key))
    }

    /// Moves the deadline of `key`'s value to `timeout` from now.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut queue = wheel_timer::DelayQueue::new();
    /// let key = queue.insert("foo", Duration::from_secs(5));
    /// queue.reset(&key, Duration::from_millis(1));
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// If `key` is stale.
    #[track_caller]
    pub fn reset(&mut self, key: &Key, timeout: Duration) {
        if self.timer.is_none() {
            panic!("wheel-timer: DelayQueue::reset with a stale key {key:?}");
        }
        let nanos = self.nanos_after_now(timeout);
        self.reset_nanos(key, nanos);
    }

    /// Moves the deadline of `key`'s value to `when`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tokio::time::{Duration, Instant};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut queue = wheel_timer::DelayQueue::new();
    /// let key = queue.insert("foo", Duration::from_secs(5));
    /// let when = Instant::now() + Duration::from_secs(1);
    /// queue.reset_at(&key, when);
    /// let deadline = queue.deadline(&key); // rounded up to the 1 ms tick
    /// assert!(deadline >= when && deadline - when < Duration::from_millis(1));
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// If `key` is stale.
    #[track_caller]
    pub fn reset_at(&mut self, key: &Key, when: Instant) {
        let nanos = match &self.timer {
            Some(timer) => timer.global().clock.nanos(when),
            None => panic!("wheel-timer: DelayQueue::reset with a stale key {key:?}"),
        };
        self.reset_nanos(key, nanos);
    }

    /// The deadline of `key`'s value: the instant it was inserted or reset for, rounded up to
    /// the timer's tick (1 ms by default), as tokio-util rounds it up to the millisecond.
    ///
    /// # Examples
    ///
    /// ```
    /// use tokio::time::{Duration, Instant};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut queue = wheel_timer::DelayQueue::new();
    /// let when = Instant::now() + Duration::from_secs(5);
    /// let key = queue.insert_at((), when);
    /// let deadline = queue.deadline(&key); // rounded up to the 1 ms tick
    /// assert!(deadline >= when && deadline - when < Duration::from_millis(1));
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// If `key` is stale.
    #[track_caller]
    pub fn deadline(&self, key: &Key) -> Instant {
        match self.wheel.tick(key.0) {
            Some(tick) => self.tick_instant(tick),
            None => panic!("wheel-timer: DelayQueue::deadline with a stale key {key:?}"),
        }
    }

    /// The key of the value that comes out next, `None` when the queue is empty.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut queue = wheel_timer::DelayQueue::new();
    /// queue.insert("foo", Duration::from_secs(10));
    /// let bar = queue.insert("bar", Duration::from_secs(5));
    /// assert_eq!(queue.peek(), Some(bar));
    /// # }
    /// ```
    pub fn peek(&self) -> Option<Key> {
        self.wheel.peek().map(Key)
    }

    /// Returns the next expired value: `Ready(Some(_))` once one's deadline is reached,
    /// `Pending` (with `cx`'s task woken when one is due, or when an insert, reset or removal
    /// changes what is next) while none is, and `Ready(None)` when the queue is empty. Polling
    /// again after new inserts yields again.
    ///
    /// Each value handed out spends one unit of tokio's cooperative budget, as with
    /// tokio-util's queue: once the task's budget is spent this returns `Pending` (the task
    /// woken at once), so a task draining many expired values lets its neighbours run.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::future::poll_fn;
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut queue = wheel_timer::DelayQueue::new();
    /// queue.insert(7, Duration::from_millis(5));
    /// let expired = poll_fn(|cx| queue.poll_expired(cx)).await;
    /// assert_eq!(expired.map(|e| e.into_inner()), Some(7));
    /// assert!(poll_fn(|cx| queue.poll_expired(cx)).await.is_none());
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// If the queue's timer was shut down or lost its runtime while values are pending.
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<Option<Expired<T>>> {
        // tokio's cooperative budget, as tokio-util's queue spends it: a task draining many
        // expired values yields once the budget is spent instead of starving its neighbours.
        let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
        let polled = self.poll_next_expired(cx);
        if let Poll::Ready(Some(_)) = polled {
            coop.made_progress();
        }
        polled
    }

    fn poll_next_expired(&mut self, cx: &mut Context<'_>) -> Poll<Option<Expired<T>>> {
        if !self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            self.waker = Some(cx.waker().clone());
        }
        let mut now = self.wheel.elapsed();
        loop {
            if let Some(key) = self.wheel.poll(now) {
                let tick = self.wheel.tick(key).unwrap_or(now);
                let value = self
                    .wheel
                    .try_remove(key)
                    .flatten()
                    .expect("a polled entry is allocated and holds its value");
                if self.is_empty() {
                    // No driver wakeup for an empty queue (the poller is not woken: it is
                    // being handed the value).
                    self.disarm();
                }
                return Poll::Ready(Some(self.expired(value, tick, Key(key))));
            }
            let Some(next) = self.wheel.next_expiration() else {
                self.disarm();
                return Poll::Ready(None);
            };
            let clock = self.now_tick();
            if clock > now {
                now = clock;
                continue;
            }
            if next != self.armed {
                // The queue's ticks are the timer's: the sleep lands on exactly `next`.
                let deadline = self.clock().tick_start(next);
                if let Some(sleep) = &mut self.sleep {
                    sleep.reset_inner(deadline);
                } else {
                    let sleep = self.timer().sleep_until(deadline);
                    self.sleep = Some(sleep);
                }
                self.armed = next;
            }
            let sleep = self.sleep.as_mut().expect("armed above");
            match sleep.poll_unless_closed(cx) {
                // The timer has reached the armed tick (see the ground rules): so has the
                // queue, whatever the clock reads. `next > now` here, so time moves forward
                // and the loop ends: the next pass hands out an entry or arms a later tick.
                Poll::Ready(Ok(())) => {
                    now = now.max(next);
                    self.armed = u64::MAX;
                }
                // Its runtime is shutting down under this task: pending, as `Sleep`.
                Poll::Ready(Err(Closed)) if sleep.caller_runtime_shutting_down() => {
                    return Poll::Pending
                }
                Poll::Ready(Err(Closed)) => {
                    panic!("wheel-timer: a DelayQueue was polled after its timer was shut down or lost its runtime")
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Number of values in the queue.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut queue = wheel_timer::DelayQueue::new();
    /// queue.insert(1, Duration::from_secs(1));
    /// assert_eq!(queue.len(), 1);
    /// # }
    /// ```
    pub fn len(&self) -> usize {
        self.wheel.allocated()
    }

    /// Whether the queue holds no value.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue = wheel_timer::DelayQueue::<()>::new();
    /// assert!(queue.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of values the queue holds room for without allocating.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue = wheel_timer::DelayQueue::<()>::with_capacity(10);
    /// assert!(queue.capacity() >= 10);
    /// ```
    pub fn capacity(&self) -> usize {
        self.wheel.capacity()
    }

    /// Makes room for at least `additional` more values.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut queue = wheel_timer::DelayQueue::<()>::new();
    /// queue.reserve(10);
    /// assert!(queue.capacity() >= 10);
    /// ```
    pub fn reserve(&mut self, additional: usize) {
        self.wheel.reserve(additional);
    }

    /// Drops every value and disarms the queue's sleep; [`poll_expired`](Self::poll_expired)
    /// then returns `Ready(None)`, and every key is stale.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut queue = wheel_timer::DelayQueue::new();
    /// queue.insert("foo", Duration::from_secs(5));
    /// queue.clear();
    /// assert!(queue.is_empty());
    /// # }
    /// ```
    pub fn clear(&mut self) {
        let had = !self.is_empty();
        for key in self.wheel.keys() {
            self.wheel.try_remove(key);
        }
        if had {
            self.emptied();
        }
    }

    /// Gives back memory the queue does not need. An empty queue frees everything; otherwise
    /// spare room past the highest slot ever used is returned (slots freed in between stay
    /// for reuse, since live keys name slots by index).
    ///
    /// # Examples
    ///
    /// ```
    /// let mut queue = wheel_timer::DelayQueue::<()>::with_capacity(100);
    /// queue.shrink_to_fit();
    /// assert_eq!(queue.capacity(), 0);
    /// ```
    pub fn shrink_to_fit(&mut self) {
        // An empty wheel frees its whole arena but keeps counting generations, so a stale
        // key never matches a value inserted after.
        self.wheel.shrink_to_fit();
    }

    /// Compacts the queue's storage: gives back the room of every freed slot past the
    /// highest one in use, and makes later inserts reuse the lowest free slots first. Keys of
    /// queued values stay valid, as with tokio-util's `compact`; unlike it, values are not
    /// moved (a key names its slot), so slots freed below the highest one in use are kept
    /// for reuse and [`capacity`](Self::capacity) may stay above [`len`](Self::len). O(capacity).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut queue = wheel_timer::DelayQueue::new();
    /// let keys: Vec<_> = (0..100).map(|i| queue.insert(i, Duration::from_secs(5))).collect();
    /// for key in &keys[10..] {
    ///     queue.remove(key);
    /// }
    /// queue.compact();
    /// assert_eq!(queue.capacity(), 10);
    /// assert_eq!(queue.remove(&keys[3]).into_inner(), 3); // keys stay valid
    /// # }
    /// ```
    pub fn compact(&mut self) {
        self.wheel.compact();
    }

    // ----- internals -----

    #[track_caller]
    fn timer(&mut self) -> &Timer {
        if self.timer.is_none() {
            self.timer = Some(crate::default_timer());
        }
        self.timer.as_ref().expect("resolved above")
    }

    /// The timer's clock. Only called once the timer is resolved: after an insert (a live
    /// key or a queued value implies one) or by `timer()`.
    fn clock(&self) -> &Clock {
        &self
            .timer
            .as_ref()
            .expect("the timer is resolved at the first insert")
            .global()
            .clock
    }

    #[track_caller]
    fn insert_nanos(&mut self, value: T, nanos: u64) -> Key {
        self.timer();
        let tick = self.tick_at_or_after(nanos);
        let key = Key(self.wheel.insert(tick, Some(value)));
        if tick < self.armed {
            self.wake();
        }
        key
    }

    #[track_caller]
    fn reset_nanos(&mut self, key: &Key, nanos: u64) {
        let tick = self.tick_at_or_after(nanos);
        if !self.wheel.reschedule(key.0, tick) {
            panic!("wheel-timer: DelayQueue::reset with a stale key {key:?}");
        }
        if tick < self.armed {
            self.wake();
        }
    }

    /// The last value left: drop the sleep (no driver wakeup for an empty queue) and let a
    /// waiting poller see `Ready(None)`.
    fn emptied(&mut self) {
        self.disarm();
        self.wake();
    }

    /// Drops the queue's sleep: nothing is armed, and the driver has nothing to wake for.
    fn disarm(&mut self) {
        self.sleep = None;
        self.armed = u64::MAX;
    }

    fn wake(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    fn expired(&self, data: T, tick: u64, key: Key) -> Expired<T> {
        Expired {
            data,
            deadline: self.tick_instant(tick),
            key,
        }
    }

    /// The start of `tick`: a deadline rounded up to the tick.
    fn tick_instant(&self, tick: u64) -> Instant {
        self.clock().tick_start(tick)
    }

    fn nanos_after_now(&self, timeout: Duration) -> u64 {
        self.clock().nanos_after(Instant::now(), timeout)
    }

    fn tick_at_or_after(&self, nanos: u64) -> u64 {
        self.clock().tick_at_or_after(nanos)
    }

    fn now_tick(&self) -> u64 {
        match &self.timer {
            Some(timer) => timer.global().clock.tick_of(Instant::now()),
            None => 0,
        }
    }
}

impl<T> Default for DelayQueue<T> {
    fn default() -> Self {
        DelayQueue::new()
    }
}

impl<T> Unpin for DelayQueue<T> {}

impl<T> futures_core::Stream for DelayQueue<T> {
    type Item = Expired<T>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Expired<T>>> {
        self.get_mut().poll_expired(cx)
    }
}

impl<T> fmt::Debug for DelayQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayQueue")
            .field("len", &self.len())
            .field("armed", &(self.sleep.is_some() && self.armed != u64::MAX))
            .finish()
    }
}

// ===== impl Expired =====

impl<T> Expired<T> {
    /// The value.
    pub fn get_ref(&self) -> &T {
        &self.data
    }

    /// The value, mutably.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.data
    }

    /// Takes the value out.
    pub fn into_inner(self) -> T {
        self.data
    }

    /// The deadline the value had (as [`DelayQueue::deadline`] read it).
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The key the value had in the queue; it is stale now.
    pub fn key(&self) -> Key {
        self.key
    }
}
