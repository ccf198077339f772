//! The store's requests ([`Op`]) and answers ([`Reply`]): what the writer thread
//! (`mod.rs`) sends [`Store::apply`](super::Store::apply) and gets back, one reply per op
//! in order.

use std::time::Duration;

use crate::backend::ClaimBatch;
use crate::core::job::{self, JobInfo, JobState, Scheduled, When};
use crate::core::recurrence::Recurrence;
use crate::core::series::{CatchUp, Recurring, RecurringInfo};
use crate::core::state::Retry;

/// One request to the store.
#[derive(Debug)]
pub(crate) enum Op {
    ScheduleMany {
        jobs: Vec<(String, When, Vec<u8>)>,
    },
    Schedule {
        id: String,
        when: When,
        payload: Vec<u8>,
    },
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
    Claim {
        max: usize,
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
    /// The per-state counts and the next pending job's due time.
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
    SetRecurring {
        name: String,
        rule: Recurrence,
        payload: Vec<u8>,
        catch_up: CatchUp,
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

/// The answer to one [`Op`], in the same order.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    Scheduled(Scheduled, u64),
    ScheduledMany(Vec<(Scheduled, u64)>),
    Bool(bool),
    Moved(Option<u64>),
    Info(Option<JobInfo>),
    Claimed(ClaimBatch),
    Retried(Retry, u64),
    Count(u64),
    Counts(job::Counts),
    /// How many jobs a `ReviveDead` revived, and their run_at.
    Revived(u64, u64),
    Listed(Vec<(u64, JobInfo)>),
    Recurring(Recurring, Option<u64>),
    RecurringList(Vec<RecurringInfo>),
}
