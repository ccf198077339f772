//! [`Redis`] as a [`Backend`]: each call routed to its partition and run as its script;
//! claims across partitions.
//!
//! # Ground rules
//!
//! - A call that may have committed although it failed (a timeout after the script ran)
//!   still bumps the epoch (`Redis::changed`), so no `Idle` note outlives a change.
//! - A claim takes each partition on its own, in rotation: one failing partition never
//!   costs the leases taken on the others; its error is returned only when nothing was
//!   claimed.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::Duration;

use super::conn::Conn;
use super::keys::partition_of;
use super::keys::Keys;
use super::scripts::MAX_JOBS_PER_SCRIPT;
use super::{Idle, Redis};
use crate::backend::{Backend, BoxFuture, ClaimBatch, ClaimKinds, Import, KindFilter, NewJob};
use crate::core::error::Error;
use crate::core::job::{Counts, JobInfo, JobState, KindCounts, Scheduled, When};
use crate::core::kind::Spec;
use crate::core::recurrence::Recurrence;
use crate::core::series::{CatchUp, Recurring, RecurringInfo};
use crate::core::state::Retry;

impl Redis {
    /// `retry.lua`: a retry, or with an `error` a failure.
    async fn give_back(
        &self,
        id: String,
        token: u64,
        after: Duration,
        error: Option<String>,
    ) -> Result<(Retry, u64), Error> {
        let mut conn = self.writer()?;
        let given = (self.scripts)
            .retry(
                &mut conn,
                &self.part(&id).keys,
                &id,
                token,
                after,
                self.plain.max_attempts,
                error.as_deref(),
            )
            .await;
        // Even a failed call may have committed (a timeout after the script ran).
        self.changed();
        given
    }

    /// Refuses jobs whose key has a limit or a rate on a queue of several partitions: a
    /// key's jobs are spread over partitions by id, and no script sees all of them, so no
    /// limit could hold. A key alone is kept.
    fn gates_kept<'a>(&self, specs: impl IntoIterator<Item = &'a Spec>) -> Result<(), Error> {
        if self.parts.len() > 1 && specs.into_iter().any(|s| s.gate().is_some()) {
            return Err(Error::invalid_config(
                "a key's limit or rate needs a Redis queue of one partition: a partitioned \
                 queue spreads a key's jobs where no script sees them together",
            ));
        }
        Ok(())
    }
}

impl Redis {
    /// Runs `script` on `items` grouped by partition, at most [`MAX_JOBS_PER_SCRIPT`] per
    /// call, and puts the answers back in the callers' order (`filler` until answered).
    async fn per_partition<'a, T, A, F, Fut>(
        &'a self,
        items: Vec<T>,
        id_of: impl Fn(&T) -> &str,
        filler: A,
        script: F,
    ) -> Result<Vec<A>, Error>
    where
        A: Clone,
        F: Fn(Conn, Arc<Keys>, Vec<T>) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<A>, Error>> + 'a,
    {
        let mut groups: Vec<(Vec<usize>, Vec<T>)> = (0..self.parts.len())
            .map(|_| (Vec::new(), Vec::new()))
            .collect();
        let mut out = vec![filler; items.len()];
        for (i, item) in items.into_iter().enumerate() {
            let p = partition_of(id_of(&item), self.parts.len());
            groups[p].0.push(i);
            groups[p].1.push(item);
        }
        for (part, (positions, items)) in self.parts.iter().zip(groups) {
            // At most MAX_JOBS_PER_SCRIPT jobs per script: a script blocks the whole server
            // while it runs, so one huge batch would stall every other client (and outlast
            // `redis_timeout`, failing a call that did commit).
            let mut items = items.into_iter();
            for positions in positions.chunks(MAX_JOBS_PER_SCRIPT) {
                let chunk: Vec<T> = items.by_ref().take(positions.len()).collect();
                let answers = script(self.writer()?, part.keys.clone(), chunk).await;
                // Even a failed call may have committed (a timeout after the script ran).
                self.changed();
                for (answer, &i) in answers?.into_iter().zip(positions) {
                    out[i] = answer;
                }
            }
        }
        Ok(out)
    }
}

impl Backend for Redis {
    fn schedule(&self, job: NewJob) -> BoxFuture<'_, Result<(Scheduled, u64), Error>> {
        Box::pin(async move {
            self.conn()?;
            self.gates_kept([&job.spec])?;
            let scheduled = self.part(&job.id).schedules.call(job).await;
            // Even a failed call may have committed (a timeout after the script ran).
            self.changed();
            scheduled
        })
    }

    fn schedule_many(
        &self,
        jobs: Vec<NewJob>,
    ) -> BoxFuture<'_, Result<Vec<(Scheduled, u64)>, Error>> {
        Box::pin(async move {
            self.gates_kept(jobs.iter().map(|j| &j.spec))?;
            let schedule = |mut conn: Conn, keys: Arc<Keys>, chunk: Vec<NewJob>| async move {
                self.scripts.schedule(&mut conn, &keys, &chunk).await
            };
            let filler = (Scheduled::Exists, 0);
            self.per_partition(jobs, |job| &job.id, filler, schedule)
                .await
        })
    }

    fn import(&self, jobs: Vec<Import>) -> BoxFuture<'_, Result<Vec<bool>, Error>> {
        Box::pin(async move {
            self.gates_kept(jobs.iter().map(|j| &j.spec))?;
            let import = |mut conn: Conn, keys: Arc<Keys>, chunk: Vec<Import>| async move {
                self.scripts.import(&mut conn, &keys, &chunk).await
            };
            self.per_partition(jobs, |job| &job.id, false, import).await
        })
    }

    fn cancel(&self, id: String) -> BoxFuture<'_, Result<bool, Error>> {
        Box::pin(async move {
            let mut conn = self.writer()?;
            self.scripts
                .cancel(&mut conn, &self.part(&id).keys, &id)
                .await
        })
    }

    fn reschedule(&self, id: String, when: When) -> BoxFuture<'_, Result<Option<u64>, Error>> {
        Box::pin(async move {
            let mut conn = self.writer()?;
            let moved = (self.scripts)
                .reschedule(&mut conn, &self.part(&id).keys, &id, when)
                .await;
            // Even a failed call may have committed (a timeout after the script ran).
            self.changed();
            moved
        })
    }

    fn get(&self, id: String) -> BoxFuture<'_, Result<Option<JobInfo>, Error>> {
        Box::pin(async move {
            let mut conn = self.conn()?;
            (self.scripts)
                .get(&mut conn, &self.part(&id).keys, &id, &self.plain)
                .await
        })
    }

    fn pending(&self) -> BoxFuture<'_, Result<u64, Error>> {
        Box::pin(self.count("pending"))
    }

    fn running(&self) -> BoxFuture<'_, Result<u64, Error>> {
        Box::pin(self.count("running"))
    }

    fn claim(&self, max: usize, kinds: ClaimKinds) -> BoxFuture<'_, Result<ClaimBatch, Error>> {
        Box::pin(async move {
            // Partitions in rotation, so every one is served; stop once `max` jobs came.
            // Each partition is claimed on its own: one that fails (its node down) must not
            // cost the leases already taken on the others, so their jobs are handed out and
            // the error is returned only when nothing was claimed. Each kind's most counts
            // across the partitions: what one gave, the next is asked less.
            let names = match &kinds {
                ClaimKinds::All => None,
                ClaimKinds::Some(kinds) => Some(kinds.iter().map(|(k, _)| k.clone()).collect()),
            };
            if let Some(idle) = self.known_idle(&names) {
                return Ok(idle);
            }
            let mut kinds = kinds;
            let epoch = self.epoch.load(SeqCst);
            let sent = std::time::Instant::now();
            let deadline = self.timeout.map(|t| tokio::time::Instant::now() + t);
            let n = self.parts.len();
            let first = self.next_claim.fetch_add(1, SeqCst);
            let mut jobs = Vec::new();
            let mut wait: Option<u64> = None;
            let mut now = 0;
            let mut failed: Option<Error> = None;
            let mut died = 0;
            // Whether some partition may hold more due jobs than it gave.
            let mut more = false;
            for i in 0..n {
                let part = &self.parts[(first + i) % n];
                // At most MAX_JOBS_PER_SCRIPT per script: a script blocks the whole server while it
                // runs, and a reply that outlasts `redis_timeout` would strand the leases
                // it took. A larger `max` (prefetch, `run`'s concurrency) just claims again.
                let want = (max - jobs.len()).min(MAX_JOBS_PER_SCRIPT);
                let (claimed, part_now, next, part_died) =
                    match self.claim_part(part, want, &kinds, deadline).await {
                        Ok(claim) => claim,
                        Err(err) => {
                            failed.get_or_insert(err);
                            continue;
                        }
                    };
                more |= claimed.len() >= want;
                if let ClaimKinds::Some(left) = &mut kinds {
                    for (kind, most) in left.iter_mut() {
                        let got = claimed.iter().filter(|j| j.spec.kind == *kind).count();
                        // A kind that reached its most may have more due here.
                        more |= got > 0 && got >= (*most).min(want);
                        *most = most.saturating_sub(got);
                    }
                    left.retain(|(_, most)| *most > 0);
                }
                died += part_died;
                jobs.extend(claimed);
                now = part_now;
                // Each partition's next due time against its own server's clock.
                if let Some(next) = next {
                    let w = next.saturating_sub(part_now);
                    wait = Some(wait.map_or(w, |x| x.min(w)));
                }
                if jobs.len() >= max || kinds == ClaimKinds::Some(Vec::new()) {
                    wait = Some(0);
                    break;
                }
            }
            let complete = failed.is_none();
            if let Some(err) = failed {
                if jobs.is_empty() {
                    return Err(err);
                }
                tracing::warn!(error = %err, claimed = jobs.len(), "wheel-jobs: a partition failed to claim; delivering what the others gave");
            }
            // Claim order across the partitions claimed together (priority, run_at, id).
            jobs.sort_by(|x, y| {
                let key =
                    |j: &crate::backend::Claimed| (std::cmp::Reverse(j.spec.priority), j.run_at);
                (key(x), &x.id).cmp(&(key(y), &y.id))
            });
            let next_due = wait.map(|w| now.saturating_add(w));
            let note = match next_due {
                Some(until) if complete && !more && jobs.len() < max => Some(Idle {
                    epoch,
                    until,
                    now,
                    sent,
                }),
                _ => None,
            };
            let mut idle = self.idle.lock().expect("idle note");
            match note {
                Some(note) => idle.insert(names, note),
                None => idle.remove(&names),
            };
            Ok(ClaimBatch {
                jobs,
                next_due,
                now,
                died,
            })
        })
    }

    fn ack(&self, id: String, token: u64) -> BoxFuture<'_, Result<bool, Error>> {
        Box::pin(async move {
            self.conn()?;
            let part = self.part(&id);
            if let Some(answer) = part.folds.park(&id, token).await {
                return answer;
            }
            // Not `changed` (it would void the `Idle` note at every ack): an ack that hands
            // the id over to a successor (`lua/next.lua`) publishes a wake message in its
            // script, which this process hears too, bumping the epoch.
            part.acks.call((id, token)).await
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
        Box::pin(async move {
            let mut conn = self.conn()?;
            (self.scripts)
                .extend(&mut conn, &self.part(&id).keys, &id, token, by)
                .await
        })
    }

    fn remove_dead(&self, id: String) -> BoxFuture<'_, Result<bool, Error>> {
        Box::pin(async move {
            let mut conn = self.writer()?;
            (self.scripts)
                .remove_dead(&mut conn, &self.part(&id).keys, &id)
                .await
        })
    }

    fn purge_dead(&self, limit: usize) -> BoxFuture<'_, Result<u64, Error>> {
        Box::pin(async move {
            // As `revive_dead`: script calls of at most MAX_JOBS_PER_SCRIPT jobs (a script blocks the
            // server while it runs), partition after partition, `limit` in all.
            let mut removed = 0;
            for part in &self.parts {
                loop {
                    let want = (limit - removed as usize).min(MAX_JOBS_PER_SCRIPT);
                    if want == 0 {
                        break;
                    }
                    let mut conn = self.writer()?;
                    let n = self.scripts.purge_dead(&mut conn, &part.keys, want).await?;
                    removed += n;
                    if n < want as u64 {
                        break;
                    }
                }
            }
            Ok(removed)
        })
    }

    fn schedule_recurring(
        &self,
        name: String,
        rule: Recurrence,
        payload: Vec<u8>,
        catch_up: CatchUp,
        spec: Spec,
    ) -> BoxFuture<'_, Result<(Recurring, Option<u64>), Error>> {
        Box::pin(async move {
            self.set_series(&name, &rule, &payload, catch_up, &spec)
                .await
        })
    }

    fn cancel_recurring(&self, name: String) -> BoxFuture<'_, Result<bool, Error>> {
        Box::pin(async move { self.cancel_series(&name).await })
    }

    fn list_recurring(&self) -> BoxFuture<'_, Result<Vec<RecurringInfo>, Error>> {
        Box::pin(self.list_series())
    }

    fn close(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            self.closed.store(true, SeqCst);
            self.subscriber.abort();
            // Parked acks go out through their batchers now, not after the window.
            for part in &self.parts {
                part.folds.release();
            }
            Ok(())
        })
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
        Box::pin(async move {
            let mut total = Counts::new(0, 0, 0, false, None);
            let mut kinds: std::collections::BTreeMap<String, KindCounts> = Default::default();
            for part in &self.parts {
                let mut conn = self.conn()?;
                let part_counts = self.scripts.counts(&mut conn, &part.keys).await?;
                for (kind, k) in part_counts.kinds {
                    let sum = kinds.entry(kind).or_default();
                    sum.pending += k.pending;
                    sum.running += k.running;
                    sum.dead += k.dead;
                }
                let c = part_counts.counts;
                total.pending += c.pending;
                total.running += c.running;
                total.dead += c.dead;
                // A pause or resume that failed half-way shows as paused: retry it.
                total.paused |= c.paused;
                total.next_due = total.next_due.into_iter().chain(c.next_due).min();
            }
            Ok(total.with_kinds(kinds))
        })
    }

    fn list(
        &self,
        state: JobState,
        after: Option<(u64, String)>,
        limit: usize,
        payloads: bool,
        kind: KindFilter,
    ) -> BoxFuture<'_, Result<Vec<(u64, JobInfo)>, Error>> {
        Box::pin(async move {
            // Each partition's page after the position, merged: O(partitions × limit).
            let after = after.as_ref().map(|(at, id)| (*at, id.as_str()));
            let mut jobs = Vec::new();
            for part in &self.parts {
                let mut conn = self.conn()?;
                let page = (self.scripts)
                    .list(
                        &mut conn,
                        &part.keys,
                        state,
                        after,
                        limit,
                        payloads,
                        &kind,
                        &self.plain,
                    )
                    .await?;
                jobs.extend(page);
            }
            jobs.sort_by(|(x, a), (y, b)| (x, a.id()).cmp(&(y, b.id())));
            if state == JobState::Dead {
                jobs.reverse();
            }
            jobs.truncate(limit);
            Ok(jobs)
        })
    }

    fn revive(&self, id: String, when: When) -> BoxFuture<'_, Result<Option<u64>, Error>> {
        Box::pin(async move {
            let mut conn = self.writer()?;
            let revived = (self.scripts)
                .revive(&mut conn, &self.part(&id).keys, &id, when)
                .await;
            // Even a failed call may have committed (a timeout after the script ran).
            self.changed();
            revived
        })
    }

    fn revive_dead(
        &self,
        limit: usize,
        when: When,
    ) -> BoxFuture<'_, Result<(u64, Option<u64>), Error>> {
        Box::pin(async move {
            // Each partition in script calls of at most MAX_JOBS_PER_SCRIPT jobs (a script blocks the
            // server while it runs), until it has no more dead jobs or `limit` were revived.
            let mut total = 0;
            let mut earliest: Option<u64> = None;
            for part in &self.parts {
                loop {
                    let want = (limit - total as usize).min(MAX_JOBS_PER_SCRIPT);
                    if want == 0 {
                        break;
                    }
                    let mut conn = self.writer()?;
                    let revived = self
                        .scripts
                        .revive_dead(&mut conn, &part.keys, want, when)
                        .await;
                    self.changed();
                    let (n, run_at) = revived?;
                    if n > 0 {
                        total += n;
                        earliest = Some(earliest.map_or(run_at, |e| e.min(run_at)));
                    }
                    if n < want as u64 {
                        break;
                    }
                }
            }
            Ok((total, earliest))
        })
    }

    fn set_paused(&self, paused: bool) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            // Every partition: its claims read only their own slot's flag.
            for part in &self.parts {
                let mut conn = self.writer()?;
                let set = self.scripts.pause(&mut conn, &part.keys, paused).await;
                self.changed();
                set?;
            }
            Ok(())
        })
    }
}
