//! [`Postgres`] as a [`Backend`]: each call one statement (or, for series and schedules, one
//! transaction), within `postgres_timeout`.

use std::time::Duration;

use super::batch::MAX_BATCH;
use super::claims::{
    claimed, earliest, in_claim_order, in_room, listed, look_again, mergeable, rebalance,
    still_room, ClaimReq, HEAD_ROUNDS,
};
use super::error::pg_error;
use super::sql::{span, Settle, Settled};
use super::Postgres;
use crate::backend::{
    Backend, BoxFuture, ClaimBatch, ClaimKinds, Claimed, Import, KindFilter, NewJob,
};
use crate::core::error::Error;
use crate::core::job::{Counts, JobInfo, JobState, Scheduled, When};
use crate::core::recurrence::Recurrence;
use crate::core::series::{CatchUp, Recurring, RecurringInfo};
use crate::core::state::Retry;

impl Postgres {
    /// A retry, or with an `error` a failure.
    async fn give_back(
        &self,
        id: String,
        token: u64,
        after: Duration,
        error: Option<String>,
    ) -> Result<(Retry, u64), Error> {
        let _call = self.enter()?;
        // PostgreSQL's text refuses NUL: one in an error would fail the whole batch.
        let error = error.map(|e| e.replace('\0', "\u{FFFD}"));
        let settled = self
            .settles
            .call(Settle::Retry {
                id,
                token: token as i64,
                after: span(after),
                error,
            })
            .await?;
        Ok(match settled {
            Settled::Pending(at) => (Retry::Pending, at),
            Settled::Died(at) => (Retry::Died, at),
            Settled::Acked | Settled::Stale => (Retry::Stale, 0),
        })
    }
}

impl Backend for Postgres {
    fn schedule(&self, job: NewJob) -> BoxFuture<'_, Result<(Scheduled, u64), Error>> {
        Box::pin(async move {
            let _call = self.enter()?;
            super::names::check_id(&job.id)?;
            self.schedules.call(job).await
        })
    }

    fn schedule_many(
        &self,
        jobs: Vec<NewJob>,
    ) -> BoxFuture<'_, Result<Vec<(Scheduled, u64)>, Error>> {
        Box::pin(self.timed(async move {
            for job in &jobs {
                super::names::check_id(&job.id)?;
            }
            // One transaction: all or nothing.
            self.sql
                .schedule_tx(&self.pool, &self.queue, &jobs, None)
                .await
                .map_err(pg_error)
        }))
    }

    fn import(&self, jobs: Vec<Import>) -> BoxFuture<'_, Result<Vec<bool>, Error>> {
        Box::pin(self.timed(async move {
            for job in &jobs {
                super::names::check_id(&job.id)?;
            }
            // One transaction: all or nothing.
            self.sql.import(&self.pool, &self.queue, &jobs).await
        }))
    }

    fn cancel(&self, id: String) -> BoxFuture<'_, Result<bool, Error>> {
        Box::pin(self.timed(async move {
            let mut conn = self.pool.acquire().await.map_err(pg_error)?;
            self.sql.cancel(&mut conn, &self.queue, &id).await
        }))
    }

    fn reschedule(&self, id: String, when: When) -> BoxFuture<'_, Result<Option<u64>, Error>> {
        Box::pin(self.timed(async move {
            self.sql
                .reschedule(&self.pool, &self.queue, &id, when)
                .await
        }))
    }

    fn get(&self, id: String) -> BoxFuture<'_, Result<Option<JobInfo>, Error>> {
        Box::pin(self.timed(async move { self.sql.get(&self.pool, &self.queue, &id).await }))
    }

    fn pending(&self) -> BoxFuture<'_, Result<u64, Error>> {
        Box::pin(async move { Ok(self.counts().await?.pending) })
    }

    fn running(&self) -> BoxFuture<'_, Result<u64, Error>> {
        Box::pin(async move { Ok(self.counts().await?.running) })
    }

    fn claim(&self, max: usize, kinds: ClaimKinds) -> BoxFuture<'_, Result<ClaimBatch, Error>> {
        Box::pin(self.timed(async move {
            if self.fold_due() {
                self.sql.fold(&self.pool, &self.queue, self.slot()).await?;
            }
            let token = self.token();
            let want = max.min(MAX_BATCH);
            if let Some(kinds) = mergeable(&kinds, want) {
                // Shares a statement with the other loops' claims in flight (`claims.rs`).
                return self.claims.call(ClaimReq { want, kinds, token }).await;
            }
            let mut jobs: Vec<Claimed> = Vec::new();
            // Heads that delivered nothing, left out of the next round's statement.
            let mut skip: Vec<String> = Vec::new();
            let mut left = Some(kinds.clone());
            let (mut next_due, mut untimed, mut now) = (None, None, 0);
            let (mut paused, mut died, mut timers) = (false, 0, false);
            let mut heads_claimed = false;
            let mut head_error = None;
            for round in 0..HEAD_ROUNDS {
                let Some(of) = left.take() else { break };
                let rows = (self.sql)
                    .claim(&self.pool, &self.queue, want - jobs.len(), token, &of, &[], listed(round, &skip))
                    .await;
                let rows = match rows {
                    Ok(rows) => rows,
                    Err(err) if round == 0 => return Err(err),
                    Err(err) => {
                        tracing::warn!(error = %err, "wheel-jobs: a claim's statement without the series heads it could not claim failed; delivering what it has");
                        break;
                    }
                };
                jobs.extend(rows.jobs.into_iter().map(|job| claimed(job, token)));
                next_due = earliest(next_due, rows.next_due);
                untimed = earliest(untimed, rows.untimed);
                (now, paused, died, timers) =
                    (rows.now, paused || rows.paused, died + rows.died, timers || rows.timers);
                // The due heads of the claimed kinds the statement kept a place for, at
                // the highest priority of those due (it read no level below it: strict
                // priority), in due-time order with the jobs at it.
                let room = in_room(&rows.heads, &jobs, want, |kind| kinds.most(kind, want));
                if room.is_empty() {
                    break;
                }
                let claimed = self
                    .heads
                    .claim(&self.pool, &self.sql, &self.queue, &room, token)
                    .await;
                let short = match claimed {
                    Ok(done) => {
                        heads_claimed |= !done.jobs.is_empty();
                        jobs.extend(done.jobs);
                        // Each failed head was rolled back alone (and logged); with nothing
                        // else to deliver, the claim answers its error.
                        if let Some((_, err)) = done.failed.into_iter().next() {
                            head_error.get_or_insert(err);
                        }
                        done.short
                    }
                    // The jobs already leased are handed out all the same; the heads are
                    // claimed by a later claim.
                    Err(err) => {
                        tracing::warn!(error = %err, "wheel-jobs: claiming series heads failed; claiming below them");
                        head_error.get_or_insert(err);
                        room.into_iter().map(|h| h.id).collect()
                    }
                };
                // Heads that held places and delivered nothing held back the levels below
                // them: what the claim has room for still comes from below, without them.
                if !short.is_empty() {
                    skip.extend(short);
                    left = still_room(&kinds, want, &jobs);
                }
            }
            if jobs.is_empty() {
                if let Some(err) = head_error {
                    return Err(err);
                }
            }
            let (timers, rebalance_failed) =
                rebalance(&self.pool, &self.sql, &self.queue, &kinds, timers).await;
            let next_due = look_again(
                next_due,
                untimed,
                now,
                paused,
                jobs.len() >= want || timers,
                heads_claimed,
                rebalance_failed,
            );
            in_claim_order(&mut jobs);
            Ok(ClaimBatch {
                jobs,
                next_due,
                now,
                died,
            })
        }))
    }

    fn ack(&self, id: String, token: u64) -> BoxFuture<'_, Result<bool, Error>> {
        Box::pin(async move {
            let _call = self.enter()?;
            let settled = self
                .settles
                .call(Settle::Ack {
                    id,
                    token: token as i64,
                })
                .await?;
            Ok(settled == Settled::Acked)
        })
    }

    fn retry(
        &self,
        id: String,
        token: u64,
        after: Duration,
    ) -> BoxFuture<'_, Result<(Retry, u64), Error>> {
        Box::pin(self.give_back(id, token, after, None))
    }

    fn extend(&self, id: String, token: u64, by: Duration) -> BoxFuture<'_, Result<bool, Error>> {
        Box::pin(self.timed(async move {
            self.sql
                .extend(&self.pool, &self.queue, &id, token as i64, span(by))
                .await
        }))
    }

    fn remove_dead(&self, id: String) -> BoxFuture<'_, Result<bool, Error>> {
        Box::pin(
            self.timed(async move { self.sql.remove_dead(&self.pool, &self.queue, &id).await }),
        )
    }

    fn purge_dead(&self, limit: usize) -> BoxFuture<'_, Result<u64, Error>> {
        Box::pin(
            self.timed(async move { self.sql.purge_dead(&self.pool, &self.queue, limit).await }),
        )
    }

    fn close(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            self.close_calls().await;
            Ok(())
        })
    }

    fn schedule_recurring(
        &self,
        name: String,
        rule: Recurrence,
        payload: Vec<u8>,
        catch_up: CatchUp,
        spec: crate::core::kind::Spec,
    ) -> BoxFuture<'_, Result<(Recurring, Option<u64>), Error>> {
        Box::pin(self.timed(async move {
            let mut tx = self.pool.begin().await.map_err(pg_error)?;
            let now = self.sql.now(&mut *tx).await?;
            let set = self
                .heads
                .series
                .set(
                    &mut tx,
                    &self.queue,
                    now,
                    &name,
                    &rule,
                    payload,
                    catch_up,
                    &spec,
                )
                .await?;
            tx.commit().await.map_err(pg_error)?;
            Ok(set)
        }))
    }

    fn cancel_recurring(&self, name: String) -> BoxFuture<'_, Result<bool, Error>> {
        Box::pin(self.timed(async move {
            let mut tx = self.pool.begin().await.map_err(pg_error)?;
            let cancelled = self
                .heads
                .series
                .cancel(&mut tx, &self.queue, &name)
                .await?;
            tx.commit().await.map_err(pg_error)?;
            Ok(cancelled)
        }))
    }

    fn list_recurring(&self) -> BoxFuture<'_, Result<Vec<RecurringInfo>, Error>> {
        Box::pin(self.timed(async move {
            let mut conn = self.pool.acquire().await.map_err(pg_error)?;
            let heads = &self.heads;
            heads
                .series
                .list(&mut conn, &self.queue, &heads.rules, &self.plain)
                .await
        }))
    }

    fn fail(
        &self,
        id: String,
        token: u64,
        after: Duration,
        error: String,
    ) -> BoxFuture<'_, Result<(Retry, u64), Error>> {
        Box::pin(self.give_back(id, token, after, Some(error)))
    }

    fn counts(&self) -> BoxFuture<'_, Result<Counts, Error>> {
        Box::pin(self.timed(async move {
            if self.fold_due() {
                self.sql.fold(&self.pool, &self.queue, self.slot()).await?;
            }
            let ((pending, running, dead), paused, next_due, kinds) =
                self.sql.counts(&self.pool, &self.queue).await?;
            Ok(Counts::new(pending, running, dead, paused, next_due).with_kinds(kinds))
        }))
    }

    fn list(
        &self,
        state: JobState,
        after: Option<(u64, String)>,
        limit: usize,
        payloads: bool,
        kind: KindFilter,
    ) -> BoxFuture<'_, Result<Vec<(u64, JobInfo)>, Error>> {
        Box::pin(self.timed(async move {
            let kind = kind.as_deref();
            self.sql
                .list(&self.pool, &self.queue, state, after, limit, payloads, kind)
                .await
        }))
    }

    fn revive(&self, id: String, when: When) -> BoxFuture<'_, Result<Option<u64>, Error>> {
        Box::pin(
            self.timed(async move { self.sql.revive(&self.pool, &self.queue, &id, when).await }),
        )
    }

    fn revive_dead(
        &self,
        limit: usize,
        when: When,
    ) -> BoxFuture<'_, Result<(u64, Option<u64>), Error>> {
        Box::pin(self.timed(async move {
            self.sql
                .revive_dead(&self.pool, &self.queue, limit, when)
                .await
        }))
    }

    fn set_paused(&self, paused: bool) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(self.timed(async move {
            self.sql
                .set_paused(&self.pool, &self.queue, paused, &self.names.channel)
                .await
        }))
    }

    fn postgres(&self) -> Option<&Postgres> {
        Some(self)
    }
}
