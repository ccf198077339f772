//! What a queue reports through the [`metrics`](https://docs.rs/metrics) facade (feature
//! `metrics`): counters of what this process did, gauges of the queue's states, and two
//! histograms. With the feature off the same calls compile to nothing, so call sites carry
//! no `cfg`.
//!
//! # Ground rules
//!
//! - Every metric has one label, `queue`: the Redis queue's name, or the embedded store's
//!   file name without its extension (`jobs` for `jobs.redb`). Handles are registered once
//!   per opened queue, so recording costs what the installed recorder makes it cost.
//! - Counters count what *this process* did (on Redis, sum them over processes);
//!   gauges are the queue's state read from the store's counters (`JobQueue::counts`),
//!   never from a scan: set on every `counts` call and every 5 s by a task per queue
//!   (`refresh`), so every process on one Redis queue reports the same values.
//! - Lateness is measured with the store's clock at the claim (its `now` minus the job's
//!   `run_at`), so a client's skewed clock does not show up as lateness.
//!
//! | name | kind | what |
//! |---|---|---|
//! | `wheel_jobs_scheduled_total` | counter | jobs created by `schedule` / `schedule_many` |
//! | `wheel_jobs_delivered_total` | counter | deliveries (claims that leased a job) |
//! | `wheel_jobs_acked_total` | counter | acks that deleted a job |
//! | `wheel_jobs_failed_total` | counter | deliveries failed (`fail`, a `run` handler's `Err` or panic) |
//! | `wheel_jobs_retried_total` | counter | deliveries given back by a plain `retry` |
//! | `wheel_jobs_dead_total` | counter | jobs that died (last attempt failed, or its lease ended) |
//! | `wheel_jobs_revived_total` | counter | dead jobs sent back by `revive` / `revive_all_dead` |
//! | `wheel_jobs_pending` | gauge | pending jobs |
//! | `wheel_jobs_running` | gauge | running jobs |
//! | `wheel_jobs_dead` | gauge | dead jobs |
//! | `wheel_jobs_paused` | gauge | 1 while paused, else 0 |
//! | `wheel_jobs_lateness_seconds` | histogram | claim time minus `run_at`, per first delivery (attempt 1: a redelivery after a lost lease would count the lease) |
//! | `wheel_jobs_handler_seconds` | histogram | how long each `run` handler took |

use std::time::Duration;

use crate::core::job::Counts;

#[cfg(feature = "metrics")]
use metrics::{counter, gauge, histogram, Counter, Gauge, Histogram};

/// One queue's metric handles; no-ops without the `metrics` feature.
#[derive(Debug)]
pub(crate) struct Metrics {
    #[cfg(feature = "metrics")]
    handles: Handles,
}

#[cfg(feature = "metrics")]
struct Handles {
    scheduled: Counter,
    delivered: Counter,
    acked: Counter,
    failed: Counter,
    retried: Counter,
    died: Counter,
    revived: Counter,
    pending: Gauge,
    running: Gauge,
    dead: Gauge,
    paused: Gauge,
    lateness: Histogram,
    handler: Histogram,
}

#[cfg(feature = "metrics")]
impl std::fmt::Debug for Handles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Handles")
    }
}

impl Metrics {
    /// The handles of the queue labelled `queue`.
    #[cfg(feature = "metrics")]
    pub(crate) fn new(queue: &str) -> Metrics {
        let label = [("queue", queue.to_owned())];
        Metrics {
            handles: Handles {
                scheduled: counter!("wheel_jobs_scheduled_total", &label),
                delivered: counter!("wheel_jobs_delivered_total", &label),
                acked: counter!("wheel_jobs_acked_total", &label),
                failed: counter!("wheel_jobs_failed_total", &label),
                retried: counter!("wheel_jobs_retried_total", &label),
                died: counter!("wheel_jobs_dead_total", &label),
                revived: counter!("wheel_jobs_revived_total", &label),
                pending: gauge!("wheel_jobs_pending", &label),
                running: gauge!("wheel_jobs_running", &label),
                dead: gauge!("wheel_jobs_dead", &label),
                paused: gauge!("wheel_jobs_paused", &label),
                lateness: histogram!("wheel_jobs_lateness_seconds", &label),
                handler: histogram!("wheel_jobs_handler_seconds", &label),
            },
        }
    }

    /// Nothing to register without the feature.
    #[cfg(not(feature = "metrics"))]
    pub(crate) fn new(_queue: &str) -> Metrics {
        Metrics {}
    }
}

// Each method below does nothing without the feature (its body is compiled out).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
impl Metrics {
    /// `n` jobs were created.
    pub(crate) fn scheduled(&self, n: u64) {
        #[cfg(feature = "metrics")]
        self.handles.scheduled.increment(n);
    }

    /// A job was delivered, `late` after its `run_at` by the store's clock if this is its
    /// first delivery (`None` for a redelivery, whose lateness would include a lost lease).
    pub(crate) fn delivered(&self, late: Option<Duration>) {
        #[cfg(feature = "metrics")]
        {
            self.handles.delivered.increment(1);
            if let Some(late) = late {
                self.handles.lateness.record(late.as_secs_f64());
            }
        }
    }

    /// A job was acked.
    pub(crate) fn acked(&self) {
        #[cfg(feature = "metrics")]
        self.handles.acked.increment(1);
    }

    /// A delivery was given back: failed (with an error) or retried; `died` if that was its
    /// last attempt.
    pub(crate) fn settled(&self, failed: bool, died: bool) {
        #[cfg(feature = "metrics")]
        {
            let h = &self.handles;
            if failed { &h.failed } else { &h.retried }.increment(1);
            h.died.increment(u64::from(died));
        }
    }

    /// `n` jobs died at a claim (their last lease had ended).
    pub(crate) fn died(&self, n: u64) {
        #[cfg(feature = "metrics")]
        self.handles.died.increment(n);
    }

    /// `n` dead jobs were revived.
    pub(crate) fn revived(&self, n: u64) {
        #[cfg(feature = "metrics")]
        self.handles.revived.increment(n);
    }

    /// A `run` handler took `took`.
    pub(crate) fn handled(&self, took: Duration) {
        #[cfg(feature = "metrics")]
        self.handles.handler.record(took.as_secs_f64());
    }

    /// The queue's state as its counters say.
    pub(crate) fn counts(&self, counts: &Counts) {
        #[cfg(feature = "metrics")]
        {
            let h = &self.handles;
            // Gauges are f64: counts past 2^53 jobs lose precision, not meaning.
            h.pending.set(counts.pending as f64);
            h.running.set(counts.running as f64);
            h.dead.set(counts.dead as f64);
            h.paused.set(if counts.paused { 1.0 } else { 0.0 });
        }
    }
}
