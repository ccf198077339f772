//! The routes of a worker's claim loop (`worker.rs`): where each claimed job goes (its kind's
//! handler, with its cap's permit) and what each claim names ([`Routes::claim`]).
//!
//! # Ground rules
//!
//! - A worker's claim names its kinds and, per kind, at most what that kind may still run:
//!   its free cap if it has one, else the free slots of the worker. A kind at its cap is
//!   left out of the claim, so one claim per loop turn serves every kind with room: one
//!   claim (a commit, a script call, a statement) where a `run_kind` per kind made one
//!   each.
//! - A job is handed to its own kind's handler; a claim never returns a kind it did not
//!   name (the backend's contract), and a job of an undeclared kind is never claimed.
//! - Only the loop takes a cap's permits, and only its handlers give them back: the free
//!   permits it counted for a claim are still free when the claim's jobs come back.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::backend::{BoxFuture, ClaimKinds};
use crate::core::job::capped_error;
use crate::queue::delivery::Delivery;

/// A handler, boxed: its error is already the capped text a failure records.
pub(crate) type Handler =
    Arc<dyn Fn(Delivery) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// `handler` as a [`Handler`].
pub(crate) fn boxed<F, Fut, E>(handler: F) -> Handler
where
    F: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: fmt::Display + Send + 'static,
{
    Arc::new(move |delivery| {
        let run = handler(delivery);
        Box::pin(async move { run.await.map_err(capped_error) })
    })
}

/// A declared kind: its handler and its cap (`None`: the worker's concurrency).
#[derive(Clone)]
pub(crate) struct Route {
    pub(crate) handler: Handler,
    pub(crate) cap: Option<Arc<Semaphore>>,
}

/// Where a worker's claimed jobs go.
#[derive(Clone)]
pub(crate) enum Routes {
    /// Every kind, to one handler (`run`).
    All(Handler),
    /// The declared kinds, each to its own route.
    Kinds(BTreeMap<String, Route>),
}

impl Routes {
    /// The claim for `free` free slots of the worker: every kind, or each declared kind
    /// with room at most min(its free cap, `free`); `None` if every kind is at its cap.
    /// And whether a cap cut the claim (a kind left out or given less than `free`), so a
    /// cap's permit coming back should end an idle claim and make a new one.
    pub(crate) fn claim(&self, free: usize) -> (Option<ClaimKinds>, bool) {
        let routes = match self {
            Routes::All(_) => return (Some(ClaimKinds::All), false),
            Routes::Kinds(routes) => routes,
        };
        let mut kinds = Vec::with_capacity(routes.len());
        let mut capped = false;
        for (kind, route) in routes {
            let room = route
                .cap
                .as_ref()
                .map_or(free, |cap| cap.available_permits().min(free));
            capped |= room < free;
            if room > 0 {
                kinds.push((kind.clone(), room));
            }
        }
        if kinds.is_empty() {
            return (None, capped);
        }
        (Some(ClaimKinds::Some(kinds)), capped)
    }

    /// The handler of a claimed job of `kind`, with its cap's permit (if capped); `None`
    /// for a kind this worker did not declare (a backend's bug: the job is left to its
    /// lease).
    pub(crate) fn route(&self, kind: &str) -> Option<(Handler, Option<OwnedSemaphorePermit>)> {
        match self {
            Routes::All(handler) => Some((handler.clone(), None)),
            Routes::Kinds(routes) => {
                let route = routes.get(kind)?;
                let permit = match &route.cap {
                    // Free: the loop counted it free for the claim, and only the loop takes.
                    Some(cap) => Some(cap.clone().try_acquire_owned().ok()?),
                    None => None,
                };
                Some((route.handler.clone(), permit))
            }
        }
    }
}
