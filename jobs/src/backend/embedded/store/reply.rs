//! The store's answers: one [`Reply`] per [`Op`](super::Op) of a batch, in order.

use crate::backend::ClaimBatch;
use crate::core::job::{self, JobInfo, Scheduled};
use crate::core::series::{Recurring, RecurringInfo};
use crate::core::state::Retry;

/// The answer to one [`Op`], in the same order.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    Scheduled(Scheduled, u64),
    ScheduledMany(Vec<(Scheduled, u64)>),
    Bool(bool),
    /// Whether an ack held the lease, and the run_at of the successor it made pending.
    Acked(bool, Option<u64>),
    /// Per job of an `Import`, whether it was written.
    Imported(Vec<bool>),
    Moved(Option<u64>),
    Info(Option<JobInfo>),
    /// The batch, and the earliest run_at of the successors its kills made pending.
    Claimed(ClaimBatch, Option<u64>),
    /// The outcome, the new run_at, and the run_at of the successor a death made pending.
    Retried(Retry, u64, Option<u64>),
    Count(u64),
    Counts(job::Counts),
    /// How many jobs a `ReviveDead` revived, and their run_at.
    Revived(u64, u64),
    Listed(Vec<(u64, JobInfo)>),
    Recurring(Recurring, Option<u64>),
    RecurringList(Vec<RecurringInfo>),
}
