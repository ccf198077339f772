//! [`Hub`]: what every handle of one queue, its consumers and its `run` loops share, and
//! [`Drain`], how `close` lets running handlers finish first.
//!
//! # Ground rules
//!
//! - One `Hub` per opened queue, behind an `Arc`: the backend (the only way to the
//!   store), the checked [`Config`], the local [`Wakeup`] of idle consumers, the drain,
//!   and the queue's [`Metrics`] handles (no-ops without the `metrics` feature).
//!   The front (`queue/mod.rs`), the consumer and the worker reach the store only through it.
//! - `Drain`: `close` marks the queue closing, which stops every claim (a fetch checks the
//!   mark after enabling its wakeup, and `close` wakes them all), then waits until every
//!   `run` loop has joined its handlers, so their acks commit before the store closes. A
//!   `close` from inside a handler skips the wait (it would wait for itself): handlers are
//!   polled inside [`in_handler`].

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

use tokio::sync::Notify;

use crate::backend::Backend;
use crate::core::config::Config;
use crate::core::kind::Defaults;
use crate::core::wakeup::Wakeup;
use crate::queue::metrics::Metrics;

/// The state one queue's handles share.
#[derive(Debug)]
pub(crate) struct Hub {
    pub(crate) backend: Box<dyn Backend>,
    pub(crate) config: Config,
    /// What jobs' options resolve from (the config's, computed once).
    pub(crate) defaults: Defaults,
    pub(crate) wakeup: Arc<Wakeup>,
    pub(crate) drain: Drain,
    pub(crate) metrics: Metrics,
}

impl Hub {
    pub(crate) fn new(backend: Box<dyn Backend>, config: Config, wakeup: Arc<Wakeup>) -> Hub {
        Hub {
            metrics: Metrics::new(&config.name),
            defaults: config.defaults(),
            backend,
            config,
            wakeup,
            drain: Drain::default(),
        }
    }
}

tokio::task_local! {
    /// Set while a handler of `run` is polled: a `close` from there must not wait for it.
    static IN_HANDLER: ();
}

/// Polls `handler` as a handler of `run`: a `close` called from inside it does not wait for
/// the handlers to finish.
pub(crate) fn in_handler<F: Future>(handler: F) -> impl Future<Output = F::Output> {
    IN_HANDLER.scope((), handler)
}

/// How `close` lets the running handlers finish first.
#[derive(Debug, Default)]
pub(crate) struct Drain {
    closing: AtomicBool,
    runs: AtomicUsize,
    idle: Notify,
}

/// One `run` loop, counted while it lives (dropped futures included).
#[derive(Debug)]
pub(crate) struct RunLoop(Arc<Hub>);

impl Drop for RunLoop {
    fn drop(&mut self) {
        self.0.drain.runs.fetch_sub(1, SeqCst);
        self.0.drain.idle.notify_waiters();
    }
}

impl Drain {
    /// Whether `close` began: no more claims.
    pub(crate) fn closing(&self) -> bool {
        self.closing.load(SeqCst)
    }

    /// Counts a new `run` loop of `hub`; `None` if `close` already began.
    pub(crate) fn enter(hub: &Arc<Hub>) -> Option<RunLoop> {
        hub.drain.runs.fetch_add(1, SeqCst);
        let running = RunLoop(hub.clone());
        (!hub.drain.closing()).then_some(running)
    }

    /// Stops the claims and waits until every `run` loop joined its handlers.
    pub(crate) async fn close(&self, wakeup: &Wakeup) {
        self.closing.store(true, SeqCst);
        wakeup.wake_all();
        if IN_HANDLER.try_with(|_| ()).is_ok() {
            return;
        }
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.runs.load(SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }
}
