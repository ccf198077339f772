//! The store's requests ([`Op`]): what the writer thread (`embedded/mod.rs`) sends
//! [`Store::apply`], and the dispatch of each to the one function that does it.

use std::time::Duration;

use super::counts::Counters;
use super::reply::Reply;
use super::tables::Tables;
use super::{jobs, series, Store};
use crate::backend::{ClaimKinds, Import, NewJob};
use crate::core::error::Error;
use crate::core::job::{JobState, When};
use crate::core::kind::Spec;
use crate::core::recurrence::Recurrence;
use crate::core::series::CatchUp;

/// One request to the store.
#[derive(Debug)]
pub(crate) enum Op {
    ScheduleMany {
        jobs: Vec<NewJob>,
    },
    /// Writes jobs exactly as given where their ids are free (a copy between queues).
    Import {
        jobs: Vec<Import>,
    },
    Schedule(NewJob),
    Cancel {
        id: String,
    },
    Reschedule {
        id: String,
        when: When,
    },
    Get {
        id: String,
    },
    /// Up to `max` due jobs of the kinds `kind` names, each kind at most its own most.
    Claim {
        max: usize,
        kind: ClaimKinds,
    },
    Ack {
        id: String,
        token: u64,
    },
    /// A retry, or with an `error` a failure (the job's last error is then replaced).
    Retry {
        id: String,
        token: u64,
        after: Duration,
        error: Option<String>,
    },
    Extend {
        id: String,
        token: u64,
        by: Duration,
    },
    RemoveDead {
        id: String,
    },
    /// The per-state and per-kind counts and the next pending job's due time.
    Counts,
    /// Makes a dead job pending again.
    Revive {
        id: String,
        when: When,
    },
    /// Makes up to `limit` dead jobs pending again, oldest deaths first.
    ReviveDead {
        limit: usize,
        when: When,
    },
    /// Stops (or lets again) every claim; durable: the batch is a checkpoint.
    Pause {
        paused: bool,
    },
    /// Creates or replaces a series, its occurrences made with `spec`.
    SetRecurring {
        name: String,
        rule: Recurrence,
        payload: Vec<u8>,
        catch_up: CatchUp,
        spec: Spec,
    },
    CancelRecurring {
        name: String,
    },
    ListRecurring,
    /// Up to `limit` jobs in `state`, in its list's order, after the position `after`.
    List {
        state: JobState,
        after: Option<(u64, String)>,
        limit: usize,
        /// Whether each job's payload is copied into the reply.
        payloads: bool,
        /// Only jobs of this kind (every kind for `None`).
        kind: Option<String>,
    },
    PurgeDead {
        limit: usize,
    },
}

impl Op {
    /// Whether a change made by this op must be on disk before it is answered.
    ///
    /// Everything but extends and reads. A claim must be: it spends an attempt, and a
    /// delivery handed out before its claim is durable would, after a crash, be forgotten
    /// (the job back to pending at the old attempt, so a job that crashes its process
    /// would never reach `max_attempts`, and `cancel` could remove a job whose handler
    /// already ran). An extend need not be: lost in a crash, the lease reverts to its
    /// durable end, and the holder died with the process anyway.
    pub(crate) fn needs_fsync(&self) -> bool {
        !matches!(
            self,
            Op::Extend { .. } | Op::Get { .. } | Op::Counts | Op::List { .. } | Op::ListRecurring
        )
    }
}

// ===== impl Store =====

impl Store {
    /// Applies one op inside the batch's transaction: its reply, and whether it changed
    /// anything. Each op's logic is one function (`jobs.rs`, `claim.rs`, `series.rs`); the
    /// gates it touched are settled after it (`gates.rs`).
    pub(super) fn op(
        &mut self,
        t: &mut Tables<'_>,
        counts: &mut Counters,
        now: u64,
        op: Op,
    ) -> Result<(Reply, bool), Error> {
        let done = self.dispatch(t, counts, now, op)?;
        t.settle(counts)?;
        Ok(done)
    }

    fn dispatch(
        &mut self,
        t: &mut Tables<'_>,
        counts: &mut Counters,
        now: u64,
        op: Op,
    ) -> Result<(Reply, bool), Error> {
        match op {
            Op::Schedule(job) => jobs::schedule_one(t, counts, now, &job),
            Op::ScheduleMany { jobs } => jobs::schedule_many(t, counts, now, &jobs),
            Op::Import { jobs } => jobs::import(t, counts, now, jobs),
            Op::Cancel { id } => jobs::cancel(t, counts, &id),
            Op::Reschedule { id, when } => jobs::reschedule(t, counts, now, &id, when),
            Op::Get { id } => jobs::get(t, id),
            Op::Claim { max, kind } => {
                let (batch, handed, changed) = self.claim(t, counts, now, max, &kind)?;
                Ok((Reply::Claimed(batch, handed), changed))
            }
            Op::Ack { id, token } => jobs::ack(t, counts, now, &id, token),
            Op::Retry {
                id,
                token,
                after,
                error,
            } => jobs::retry(t, counts, now, &id, token, after, error),
            Op::Extend { id, token, by } => jobs::extend(t, counts, now, &id, token, by),
            Op::RemoveDead { id } => jobs::remove_dead(t, counts, &id),
            Op::PurgeDead { limit } => jobs::purge_dead(t, counts, limit),
            Op::Revive { id, when } => jobs::revive(t, counts, now, &id, when),
            Op::ReviveDead { limit, when } => jobs::revive_dead(t, counts, now, limit, when),
            Op::Pause { paused } => jobs::pause(t, paused),
            Op::Counts => jobs::counts(t, counts),
            Op::List {
                state,
                after,
                limit,
                payloads,
                kind,
            } => jobs::list(t, state, after, limit, payloads, kind.as_deref()),
            Op::SetRecurring {
                name,
                rule,
                payload,
                catch_up,
                spec,
            } => {
                let (outcome, head) =
                    series::set(t, counts, now, &name, &rule, payload, catch_up, spec)?;
                Ok((Reply::Recurring(outcome, head), true))
            }
            Op::CancelRecurring { name } => {
                let removed = series::cancel(t, counts, &name)?;
                Ok((Reply::Bool(removed), removed))
            }
            Op::ListRecurring => Ok((
                Reply::RecurringList(series::list(t, &mut self.rules)?),
                false,
            )),
        }
    }
}
