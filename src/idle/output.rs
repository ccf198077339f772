//! The queue of expired keys between a tracker's driver and its [`Expirations`] stream.
//!
//! # Ground rules
//! - The driver appends one batch per turn under the output lock, which nests in no other
//!   lock; the stream's waker is cloned before that lock is taken and woken or dropped after
//!   it is released.
//! - With nobody listening (the stream dropped) batches are dropped at once. While the stream
//!   lives and is not polled, batches pile up: `undelivered` counts their keys and a warning
//!   is logged each time it doubles past the tracker's threshold.
//!
//! [`Expirations`]: crate::idle::Expirations

use std::collections::VecDeque;
use std::fmt;
use std::task::{Context, Poll, Waker};

use crate::loom::{lock, Mutex};

/// The expired keys waiting for the stream, behind the output lock.
pub(crate) struct Output<K> {
    queue: Mutex<Queue<K>>,
    /// Undelivered expired keys past which a warning is logged.
    warn_undelivered: usize,
}

#[derive(Debug)]
struct Queue<K> {
    batches: VecDeque<Vec<K>>,
    waker: Option<Waker>,
    /// Keys in `batches`.
    undelivered: usize,
    /// `undelivered` past which the next warning is logged.
    warn_at: usize,
    /// The `Expirations` stream still exists.
    listening: bool,
    /// The driver has exited.
    done: bool,
}

impl<K> Output<K> {
    pub(crate) fn new(warn_undelivered: usize) -> Output<K> {
        Output {
            queue: Mutex::new(Queue {
                batches: VecDeque::new(),
                waker: None,
                undelivered: 0,
                warn_at: 0,
                listening: true,
                done: false,
            }),
            warn_undelivered,
        }
    }

    /// The `Expirations` stream still exists.
    pub(crate) fn listening(&self) -> bool {
        lock(&self.queue).listening
    }

    /// Expired keys queued for the stream and not yet taken.
    pub(crate) fn undelivered(&self) -> usize {
        lock(&self.queue).undelivered
    }

    /// Hands a turn's batch to the stream (or drops it if nobody listens).
    pub(crate) fn deliver(&self, batch: Vec<K>) {
        let mut out = lock(&self.queue);
        if !out.listening {
            drop(out);
            drop(batch);
            return;
        }
        out.undelivered += batch.len();
        out.batches.push_back(batch);
        let undelivered = out.undelivered;
        let warn = undelivered >= out.warn_at.max(self.warn_undelivered);
        if warn {
            out.warn_at = undelivered.saturating_mul(2);
        }
        let waker = out.waker.take();
        drop(out);
        if warn {
            tracing::warn!(
                undelivered,
                "wheel-timer: an idle tracker's Expirations stream is not being polled; \
                 expired keys pile up (poll it or drop it)"
            );
        }
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// The driver has exited: ends the stream.
    pub(crate) fn end(&self) {
        let waker = {
            let mut out = lock(&self.queue);
            out.done = true;
            out.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// The oldest batch, `None` once the driver has exited and every batch was taken, or
    /// pending with `cx`'s waker kept.
    pub(crate) fn poll_batch(&self, cx: &mut Context<'_>) -> Poll<Option<Vec<K>>> {
        // Cloned before the lock, and whichever waker is not kept dropped after it.
        let mut waker = Some(cx.waker().clone());
        let mut out = lock(&self.queue);
        if let Some(batch) = out.batches.pop_front() {
            out.undelivered -= batch.len();
            if out.undelivered == 0 {
                out.warn_at = 0;
            }
            return Poll::Ready(Some(batch));
        }
        if out.done {
            return Poll::Ready(None);
        }
        if !out.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            std::mem::swap(&mut out.waker, &mut waker);
        }
        drop(out);
        drop(waker);
        Poll::Pending
    }

    /// The stream is gone: later batches are dropped at once. The batches queued and the
    /// stream's waker are dropped after the lock is released.
    pub(crate) fn close(&self) {
        let (batches, waker) = {
            let mut out = lock(&self.queue);
            out.listening = false;
            out.undelivered = 0;
            (std::mem::take(&mut out.batches), out.waker.take())
        };
        drop(batches);
        drop(waker);
    }

    /// Queued batches, undelivered keys, and whether the driver has exited with nothing
    /// left queued (for `Expirations`' `Debug`).
    pub(crate) fn status(&self) -> (usize, usize, bool) {
        let out = lock(&self.queue);
        (
            out.batches.len(),
            out.undelivered,
            out.done && out.batches.is_empty(),
        )
    }
}

impl<K> fmt::Debug for Output<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (batches, undelivered, ended) = self.status();
        f.debug_struct("Output")
            .field("queued_batches", &batches)
            .field("undelivered", &undelivered)
            .field("ended", &ended)
            .field("warn_undelivered", &self.warn_undelivered)
            .finish()
    }
}
