//! The claim: the first `max` keys of `due` and `running` up to now, each job leased by
//! [`Machine::claim`](crate::core::state::Machine::claim) (or killed, out of attempts), a series' head
//! moving its series on its first claim (`series.rs`).

use redb::ReadableTable;

use super::series::{self, FirstClaim};
use super::tables::{storage, Tables};
use super::Store;
use crate::backend::{ClaimBatch, Claimed};
use crate::core::error::Error;
use crate::core::job::add;
use crate::core::state::{Claim, Status, Tally};

impl Store {
    /// Leases up to `max` due jobs; whether anything changed (a job delivered or killed).
    pub(super) fn claim(
        &mut self,
        t: &mut Tables<'_>,
        counts: &mut Tally,
        now: u64,
        max: usize,
    ) -> Result<(ClaimBatch, bool), Error> {
        if t.paused {
            // Nothing is due until a resume, which wakes the consumers itself.
            let batch = ClaimBatch {
                jobs: Vec::new(),
                next_due: None,
                now,
                died: 0,
            };
            return Ok((batch, false));
        }
        // The first `max` keys up to now of pending run_ats and lease ends together.
        let due: Vec<(u64, String)> = {
            let mut due = Vec::new();
            for index in [&t.due, &t.running] {
                let range = index
                    .range(..(now.saturating_add(1), ""))
                    .map_err(storage)?;
                for entry in range.take(max) {
                    let (key, _) = entry.map_err(storage)?;
                    let (at, id) = key.value();
                    due.push((at, id.to_owned()));
                }
            }
            due.sort_unstable();
            due.truncate(max);
            due
        };
        let changed = !due.is_empty();
        let until = add(now, self.lease);
        let mut jobs = Vec::with_capacity(due.len());
        let mut died = 0;
        for (at, mut id) in due {
            let Some(mut stored) = t.load(&id)? else {
                return Err(Error::storage(format!(
                    "due index names a missing job {id:?} at {at}"
                )));
            };
            // The first claim of a series' head moves the series in this transaction.
            let before = stored.job;
            let first = before.attempt == 0 && before.status == Status::Pending;
            if first && id.contains('@') {
                match series::on_first_claim(t, counts, &mut self.rules, now, &id, before)? {
                    FirstClaim::Deliver => {}
                    FirstClaim::Skip => continue,
                    FirstClaim::Instead(instead) => {
                        stored = t.load(&instead)?.ok_or_else(|| {
                            Error::storage(format!("series occurrence {instead:?} is missing"))
                        })?;
                        id = instead;
                    }
                }
            }
            let mut job = stored.job;
            let token = self.token();
            let outcome = job.claim(now, until, token, self.max_attempts);
            if outcome == Claim::NotDue {
                return Err(Error::storage(format!(
                    "due index disagrees with job {id:?}"
                )));
            }
            let mut record = stored.with(job);
            if let Some(error) = stored.job.claim_error() {
                record.error = Some(error);
            }
            t.set(counts, &id, Some(stored.job), Some(record))?;
            died += u64::from(outcome == Claim::Died);
            if outcome == Claim::Deliver {
                jobs.push(Claimed {
                    id,
                    payload: stored.payload,
                    attempt: job.attempt,
                    run_at: job.run_at,
                    token,
                    spec: self.plain.clone(),
                });
            }
        }
        let mut next_due = None;
        for index in [&t.due, &t.running] {
            let first = index
                .first()
                .map_err(storage)?
                .map(|(key, _)| key.value().0);
            next_due = next_due.into_iter().chain(first).min();
        }
        Ok((
            ClaimBatch {
                jobs,
                next_due,
                now,
                died,
            },
            changed,
        ))
    }
}
