//! [`Expirations`], the stream of a tracker's expired keys (the queue behind it is
//! `output.rs`).

use std::fmt;
use std::future::poll_fn;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures_core::Stream;
use hashbrown::DefaultHashBuilder;

use super::state::TrackerState;
use crate::loom::Arc;

/// The keys of an [`IdleTracker`](crate::IdleTracker) that expired, one batch per tick, as a
/// [`Stream`](futures_core::Stream) of keys or with [`Expirations::next_batch`].
///
/// The stream ends once every `IdleTracker` handle and every
/// [`IdleHandle`](crate::IdleHandle) is dropped and every key left has expired, or once the
/// tracker stops (its timer shut down or its runtime ended). Dropping it does not stop the
/// tracker: keys keep expiring (for [`IdleHandle::idle`](crate::IdleHandle::idle) and
/// [`IdleStream`](crate::IdleStream)) and are dropped.
///
/// # Backlog
///
/// Batches wait here until polled: a live stream that nobody polls keeps every expired key
/// (memory grows with the expiries). [`IdleTracker::undelivered`](crate::IdleTracker::undelivered)
/// counts the keys waiting, and a `tracing` warning is logged when that count passes the
/// tracker's threshold ([`IdleTrackerBuilder::warn_undelivered`](crate::IdleTrackerBuilder::warn_undelivered))
/// and each time it doubles after. Drop the stream if expiries are not wanted.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use futures::StreamExt;
/// use wheel_timer::{IdleTracker, Timer};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let timer = Timer::new();
/// let (tracker, expirations) = IdleTracker::new(&timer, Duration::from_millis(50));
/// for user in 0..3u32 {
///     tracker.touch(user);
/// }
/// drop(tracker); // once everything expired, the stream ends
/// let mut offline: Vec<u32> = expirations.collect().await;
/// offline.sort();
/// assert_eq!(offline, [0, 1, 2]);
/// # }
/// ```
#[must_use = "streams do nothing unless polled"]
pub struct Expirations<K, S = DefaultHashBuilder> {
    shared: Arc<TrackerState<K, S>>,
    current: std::vec::IntoIter<K>,
}

// ===== impl Expirations =====

impl<K, S> Expirations<K, S> {
    pub(crate) fn new(shared: Arc<TrackerState<K, S>>) -> Self {
        Expirations {
            shared,
            current: Vec::new().into_iter(),
        }
    }

    /// The next batch of expired keys: every key that expired in one driver turn (one tick,
    /// or several if the driver was late), or what is left of the batch the
    /// [`Stream`](futures_core::Stream) side was consuming. `None` once the stream has ended.
    ///
    /// # Cancellation
    ///
    /// Cancel safe: a batch is only taken when this future completes.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use wheel_timer::{IdleTracker, Timer};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let timer = Timer::new();
    /// let (tracker, mut expirations) = IdleTracker::new(&timer, Duration::from_millis(100));
    /// tracker.touch(1u32);
    /// tracker.touch(2u32);
    /// let mut batch = expirations.next_batch().await.unwrap_or_default();
    /// batch.sort();
    /// assert_eq!(batch, [1, 2]);
    /// # }
    /// ```
    pub async fn next_batch(&mut self) -> Option<Vec<K>> {
        poll_fn(|cx| self.poll_next_batch(cx)).await
    }

    /// Polls for the next batch of expired keys (see [`Expirations::next_batch`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::task::Context;
    /// use std::time::Duration;
    /// use wheel_timer::{IdleTracker, Timer};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let timer = Timer::new();
    /// let (_tracker, mut expirations) = IdleTracker::<u32>::new(&timer, Duration::from_secs(1));
    /// let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    /// assert!(expirations.poll_next_batch(&mut cx).is_pending());
    /// # }
    /// ```
    pub fn poll_next_batch(&mut self, cx: &mut Context<'_>) -> Poll<Option<Vec<K>>> {
        if self.current.len() > 0 {
            return Poll::Ready(Some(std::mem::take(&mut self.current).collect()));
        }
        self.shared.out.poll_batch(cx)
    }
}

// Keys are never pinned: the batch is a plain `Vec`.
impl<K, S> Unpin for Expirations<K, S> {}

impl<K, S> Stream for Expirations<K, S> {
    type Item = K;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<K>> {
        let this = self.get_mut();
        loop {
            if let Some(key) = this.current.next() {
                return Poll::Ready(Some(key));
            }
            match ready!(this.poll_next_batch(cx)) {
                Some(batch) => this.current = batch.into_iter(),
                None => return Poll::Ready(None),
            }
        }
    }
}

impl<K, S> Drop for Expirations<K, S> {
    fn drop(&mut self) {
        self.shared.out.close();
        self.shared.notify.notify_one();
    }
}

impl<K, S> fmt::Debug for Expirations<K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (batches, undelivered, ended) = self.shared.out.status();
        f.debug_struct("Expirations")
            .field("queued_batches", &batches)
            .field("undelivered", &undelivered)
            .field("current_batch_left", &self.current.len())
            .field("ended", &ended)
            .finish()
    }
}
