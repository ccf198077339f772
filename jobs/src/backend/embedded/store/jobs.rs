//! Each operation on jobs, whole: what it reads, the transition it makes through [`Machine`]
//! (`core/state/mod.rs`), what it writes through [`Tables::set`], and its reply with whether it
//! changed anything. The claim is in `claim.rs`, the series' operations in `series.rs`.

use std::borrow::Cow;

use redb::ReadableTable;

use super::counts::Counters;
use super::index::{self, Position};
use super::reply::Reply;
use super::tables::{state, storage, Stored, Tables};
use crate::backend::embedded::record::Record;
use crate::backend::{Import, NewJob};
use crate::core::error::Error;
use crate::core::job::{add, system_time, JobInfo, JobState, Scheduled, When};
use crate::core::kind::Dedup;
use crate::core::series::occurrence_series;
use crate::core::state::{Machine, Retry, Status};

/// What an operation answers, and whether it changed anything (an unchanged batch is
/// aborted: it costs no commit and no fsync).
pub(super) type Outcome = Result<(Reply, bool), Error>;

/// Schedules `job` as its [`Dedup`] mode says: refused while a tombstone holds its id off
/// (an expired tombstone is deleted here), then created if the id is free; a pending job
/// replaced under [`Dedup::Replace`] (not a series' occurrence: its time is its id), a
/// successor waiting for it after a retry dropped; a running job without a successor given
/// `job` as one under [`Dedup::AllowWhileRunning`] (not a series' occurrence: it never has
/// one); else left as it is. The outcome, the run_at (for `HeldOff` the end of the
/// hold-off), and whether anything changed.
pub(super) fn schedule(
    t: &mut Tables<'_>,
    counts: &mut Counters,
    now: u64,
    job: &NewJob,
) -> Result<(Scheduled, u64, bool), Error> {
    let id = job.id.as_str();
    let mut changed = false;
    if let Some(until) = t.held(id)? {
        if now < until {
            let outcome = Scheduled::HeldOff {
                until: system_time(until),
            };
            return Ok((outcome, until, false));
        }
        t.put_held(id, None)?;
        changed = true;
    }
    let run_at = job.when.resolve(now);
    let Some(stored) = t.load(id)? else {
        let record = Record {
            job: Machine::new(run_at),
            spec: Cow::Borrowed(&job.spec),
            error: None,
            payload: &job.payload,
            next: false,
            waiting: false,
        };
        t.set(counts, id, None, Some(record))?;
        return Ok((Scheduled::Created, run_at, true));
    };
    let mut moved = stored.job;
    if job.dedup == Dedup::Replace && moved.reschedule(run_at) && !super::series::is_head(t, id)? {
        // A job pending again after a retry may have a successor waiting: the newest
        // schedule wins, so it is dropped (bit and `next` entry in the same batch).
        if stored.next {
            t.put_next(id, None)?;
        }
        let record = Record {
            job: moved,
            spec: Cow::Borrowed(&job.spec),
            error: stored.error.as_deref(),
            payload: &job.payload,
            next: false,
            waiting: false,
        };
        t.set(counts, id, Some(&stored), Some(record))?;
        return Ok((Scheduled::Replaced, run_at, true));
    }
    let running = matches!(stored.job.status, Status::Running { .. });
    if job.dedup == Dedup::AllowWhileRunning
        && running
        && !stored.next
        && occurrence_series(id).is_none()
    {
        let successor = Record {
            job: Machine::new(run_at),
            spec: Cow::Borrowed(&job.spec),
            error: None,
            payload: &job.payload,
            next: false,
            waiting: false,
        };
        t.put_next(id, Some(&successor.encode()))?;
        let mut marked = stored.with(stored.job);
        marked.next = true;
        t.set(counts, id, Some(&stored), Some(marked))?;
        return Ok((Scheduled::Successor, run_at, true));
    }
    Ok((Scheduled::Exists, stored.job.run_at, changed))
}

pub(super) fn schedule_one(
    t: &mut Tables<'_>,
    counts: &mut Counters,
    now: u64,
    job: &NewJob,
) -> Outcome {
    let (outcome, run_at, changed) = schedule(t, counts, now, job)?;
    Ok((Reply::Scheduled(outcome, run_at), changed))
}

/// [`schedule`] for each job in order (a later job of the same id meets what an earlier one
/// left).
pub(super) fn schedule_many(
    t: &mut Tables<'_>,
    counts: &mut Counters,
    now: u64,
    jobs: &[NewJob],
) -> Outcome {
    let mut outcomes = Vec::with_capacity(jobs.len());
    let mut changed = false;
    for job in jobs {
        let (outcome, run_at, did) = schedule(t, counts, now, job)?;
        changed |= did;
        outcomes.push((outcome, run_at));
    }
    Ok((Reply::ScheduledMany(outcomes), changed))
}

/// Writes each job as given unless its id exists or a tombstone holds it off at `now`:
/// pending at its `run_at`, or dead since its `died_at`, its attempts and last error kept
/// (a copy from another queue; tombstones are not copied).
pub(super) fn import(
    t: &mut Tables<'_>,
    counts: &mut Counters,
    now: u64,
    jobs: Vec<Import>,
) -> Outcome {
    let mut written = Vec::with_capacity(jobs.len());
    for job in &jobs {
        let held = t.held(&job.id)?.is_some_and(|until| now < until);
        if held || t.load(&job.id)?.is_some() {
            written.push(false);
            continue;
        }
        let status = match job.died_at {
            Some(at) => Status::Dead { at },
            None => Status::Pending,
        };
        let record = Record {
            job: Machine {
                run_at: job.run_at,
                attempt: job.attempt,
                status,
            },
            spec: Cow::Borrowed(&job.spec),
            error: job.last_error.as_deref(),
            payload: &job.payload,
            next: false,
            waiting: false,
        };
        t.set(counts, &job.id, None, Some(record))?;
        written.push(true);
    }
    let changed = written.contains(&true);
    Ok((Reply::Imported(written), changed))
}

/// Removes a pending job (with its successor, if a retry left it one), but the pending
/// occurrence of a series (it would have none); or the successor of a running job, which
/// runs on.
pub(super) fn cancel(t: &mut Tables<'_>, counts: &mut Counters, id: &str) -> Outcome {
    match t.load(id)? {
        Some(stored) if stored.job.cancel() && !super::series::is_head(t, id)? => {
            if stored.next {
                t.put_next(id, None)?;
            }
            t.set(counts, id, Some(&stored), None)?;
            Ok((Reply::Bool(true), true))
        }
        // Running: a dead job never has a successor, and a pending one was removed above.
        Some(stored) if stored.next && !stored.job.cancel() => {
            t.put_next(id, None)?;
            let mut alone = stored.with(stored.job);
            alone.next = false;
            t.set(counts, id, Some(&stored), Some(alone))?;
            Ok((Reply::Bool(true), true))
        }
        _ => Ok((Reply::Bool(false), false)),
    }
}

/// Moves a pending job; a series' pending occurrence keeps its time (its id and its
/// series').
pub(super) fn reschedule(
    t: &mut Tables<'_>,
    counts: &mut Counters,
    now: u64,
    id: &str,
    when: When,
) -> Outcome {
    match t.load(id)? {
        Some(stored) if !super::series::is_head(t, id)? => {
            let mut job = stored.job;
            if job.reschedule(when.resolve(now)) {
                t.set(counts, id, Some(&stored), Some(stored.with(job)))?;
                Ok((Reply::Moved(Some(job.run_at)), true))
            } else {
                Ok((Reply::Moved(None), false))
            }
        }
        _ => Ok((Reply::Moved(None), false)),
    }
}

/// The job, with its successor's run_at if one waits.
pub(super) fn get(t: &Tables<'_>, id: String) -> Outcome {
    let Some(stored) = t.load(&id)? else {
        return Ok((Reply::Info(None), false));
    };
    let successor = match stored.next {
        true => Some(successor_of(t, &id)?.job.run_at),
        false => None,
    };
    let info = stored.info(id).with_successor(successor);
    Ok((Reply::Info(Some(info)), false))
}

/// The successor the `next` bit of `id`'s record says waits.
fn successor_of(t: &Tables<'_>, id: &str) -> Result<Stored, Error> {
    t.successor(id)?.ok_or_else(|| {
        Error::storage(format!(
            "job {id:?} is marked with a successor that is missing"
        ))
    })
}

/// Makes the successor waiting for `stored` (just acked, or dead) the pending job `id`, in
/// the caller's transaction: attempt 0, its own spec and payload, due at its own run_at or
/// `not_before` if later, `error` as its last error. Its run_at.
pub(super) fn hand_over(
    t: &mut Tables<'_>,
    counts: &mut Counters,
    id: &str,
    stored: &Stored,
    not_before: u64,
    error: Option<&str>,
) -> Result<u64, Error> {
    let successor = successor_of(t, id)?;
    t.put_next(id, None)?;
    let run_at = successor.job.run_at.max(not_before);
    let record = Record {
        job: Machine::new(run_at),
        spec: Cow::Borrowed(&successor.spec),
        error,
        payload: &successor.payload,
        next: false,
        waiting: false,
    };
    t.set(counts, id, Some(stored), Some(record))?;
    Ok(run_at)
}

/// Deletes a leased job; with a hold-off in its spec, leaves a tombstone that refuses its
/// id until `now` + the hold-off. A job with a successor hands over to it instead (no
/// tombstone; the successor not due before the hold-off ends): the reply then carries the
/// successor's run_at, for the wakeup.
pub(super) fn ack(
    t: &mut Tables<'_>,
    counts: &mut Counters,
    now: u64,
    id: &str,
    token: u64,
) -> Outcome {
    // The job is deleted: its payload is not copied out.
    match t.load_with(id, false)? {
        Some(stored) if stored.job.ack(token) => {
            let hold_off =
                (!stored.spec.hold_off.is_zero()).then(|| add(now, stored.spec.hold_off));
            // The one check a job without a successor pays: a bit of the record just read.
            if stored.next {
                let at = hand_over(t, counts, id, &stored, hold_off.unwrap_or(0), None)?;
                return Ok((Reply::Acked(true, Some(at)), true));
            }
            t.set(counts, id, Some(&stored), None)?;
            if hold_off.is_some() {
                t.put_held(id, hold_off)?;
            }
            Ok((Reply::Acked(true, None), true))
        }
        _ => Ok((Reply::Acked(false, None), false)),
    }
}

/// A retry, or with an `error` a failure (the job's last error is then replaced); the job
/// dies if that was the last of its own `max_attempts`, and a successor then takes its
/// place, with its last error (its run_at in the reply, for the wakeup); while it retries
/// the successor waits.
pub(super) fn retry(
    t: &mut Tables<'_>,
    counts: &mut Counters,
    now: u64,
    id: &str,
    token: u64,
    after: std::time::Duration,
    error: Option<String>,
) -> Outcome {
    let run_at = add(now, after);
    let Some(stored) = t.load(id)? else {
        return Ok((Reply::Retried(Retry::Stale, run_at, None), false));
    };
    let mut job = stored.job;
    let outcome = job.retry(token, now, run_at, stored.spec.max_attempts);
    let mut record = stored.with(job);
    if error.is_some() {
        record.error = error.as_deref();
    }
    let successor = match outcome {
        Retry::Stale => None,
        Retry::Died if stored.next => {
            let error = record.error;
            Some(hand_over(t, counts, id, &stored, 0, error)?)
        }
        Retry::Pending | Retry::Died => {
            t.set(counts, id, Some(&stored), Some(record))?;
            None
        }
    };
    let reply = Reply::Retried(outcome, run_at, successor);
    Ok((reply, outcome != Retry::Stale))
}

pub(super) fn extend(
    t: &mut Tables<'_>,
    counts: &mut Counters,
    now: u64,
    id: &str,
    token: u64,
    by: std::time::Duration,
) -> Outcome {
    let Some(stored) = t.load(id)? else {
        return Ok((Reply::Bool(false), false));
    };
    let mut job = stored.job;
    let extended = job.extend(token, add(now, by));
    if extended {
        t.set(counts, id, Some(&stored), Some(stored.with(job)))?;
    }
    Ok((Reply::Bool(extended), extended))
}

pub(super) fn remove_dead(t: &mut Tables<'_>, counts: &mut Counters, id: &str) -> Outcome {
    match t.load(id)? {
        Some(stored) if matches!(stored.job.status, Status::Dead { .. }) => {
            t.set(counts, id, Some(&stored), None)?;
            Ok((Reply::Bool(true), true))
        }
        _ => Ok((Reply::Bool(false), false)),
    }
}

/// Deletes up to `limit` dead jobs, oldest deaths first.
pub(super) fn purge_dead(t: &mut Tables<'_>, counts: &mut Counters, limit: usize) -> Outcome {
    let mut keys = Vec::new();
    for entry in t.died.iter().map_err(storage)?.take(limit) {
        let (key, _) = entry.map_err(storage)?;
        let (at, id) = key.value();
        keys.push((at, id.to_owned()));
    }
    for (at, id) in &keys {
        if let Some(stored) = t.load(id)? {
            t.set(counts, id, Some(&stored), None)?;
        } else {
            t.died.remove((*at, id.as_str())).map_err(storage)?;
        }
    }
    Ok((Reply::Count(keys.len() as u64), !keys.is_empty()))
}

/// Makes a dead job pending again.
pub(super) fn revive(
    t: &mut Tables<'_>,
    counts: &mut Counters,
    now: u64,
    id: &str,
    when: When,
) -> Outcome {
    let Some(stored) = t.load(id)? else {
        return Ok((Reply::Moved(None), false));
    };
    let mut job = stored.job;
    if job.revive(when.resolve(now)) {
        t.set(counts, id, Some(&stored), Some(stored.with(job)))?;
        Ok((Reply::Moved(Some(job.run_at)), true))
    } else {
        Ok((Reply::Moved(None), false))
    }
}

/// Makes up to `limit` dead jobs pending again, oldest deaths first.
pub(super) fn revive_dead(
    t: &mut Tables<'_>,
    counts: &mut Counters,
    now: u64,
    limit: usize,
    when: When,
) -> Outcome {
    let run_at = when.resolve(now);
    let mut ids = Vec::new();
    for entry in t.died.iter().map_err(storage)?.take(limit) {
        let (key, _) = entry.map_err(storage)?;
        ids.push(key.value().1.to_owned());
    }
    let mut revived = 0;
    for id in &ids {
        let Some(stored) = t.load(id)? else {
            return Err(Error::storage(format!(
                "the dead index names a missing job {id:?}"
            )));
        };
        let mut job = stored.job;
        if job.revive(run_at) {
            t.set(counts, id, Some(&stored), Some(stored.with(job)))?;
            revived += 1;
        }
    }
    Ok((Reply::Revived(revived, run_at), revived > 0))
}

/// Stops (or lets again) every claim; the batch is then a checkpoint (the log holds jobs
/// only, so the flag is made durable by redb's commit).
pub(super) fn pause(t: &mut Tables<'_>, paused: bool) -> Outcome {
    let changed = t.paused != paused;
    if changed {
        t.paused = paused;
        t.log = None;
    }
    Ok((Reply::Bool(changed), changed))
}

/// The per-state and per-kind counts, the paused flag and the next pending job's due time
/// (the earliest first key of `due`'s levels: a gated job waiting for its key's slot is
/// counted pending but is not due, so it is not this time's).
pub(super) fn counts(t: &Tables<'_>, counts: &Counters) -> Outcome {
    let next_due = index::levels(t, None)?.iter().map(|l| l.first).min();
    Ok((Reply::Counts(counts.snapshot(t.paused, next_due)), false))
}

/// Up to `limit` jobs in `state` (of kind `kind` only, if given) after the position `after`,
/// each with its position: pending by `(run_at, id)` and running by `(lease end, id)`, each
/// a merge of its kinds' (and levels') ranges, only `kind`'s read for a kind (pending: the
/// gated jobs waiting for their key's slot too, `waiting_by_kind`); dead by
/// `(death time, id)` descending, a range of `died`, or of `kind`'s keys in
/// `died_by_kind`.
pub(super) fn list(
    t: &Tables<'_>,
    wanted: JobState,
    after: Option<(u64, String)>,
    limit: usize,
    payloads: bool,
    kind: Option<&str>,
) -> Outcome {
    use std::ops::Bound::{Excluded, Included, Unbounded};
    let after = after.as_ref().map(|(at, id)| (*at, id.as_str()));
    let keys: Box<dyn Iterator<Item = Result<Position, Error>>> = match wanted {
        JobState::Pending => {
            let levels = index::levels(t, kind)?;
            // The gated jobs waiting for their key's slot, pending too (`gates.rs`).
            let waiting = index::kinds_of(&t.waiting_by_kind, kind)?;
            let mut streams: Vec<index::Stream<'_>> = levels
                .iter()
                .map(|l| index::due_range(t, &l.kind, l.level, after, u64::MAX))
                .collect::<Result<_, _>>()?;
            for (k, _) in &waiting {
                streams.push(index::kind_range(&t.waiting_by_kind, k, after, u64::MAX)?);
            }
            Box::new(index::merge(streams, limit)?.into_iter().map(Ok))
        }
        JobState::Running => {
            let kinds = index::lease_kinds(t, kind)?;
            let streams = kinds
                .iter()
                .map(|(k, _)| index::lease_range(t, k, after, u64::MAX))
                .collect::<Result<_, _>>()?;
            Box::new(index::merge(streams, limit)?.into_iter().map(Ok))
        }
        JobState::Dead if kind.is_some() => {
            let kind = kind.unwrap_or_default();
            // The smallest kind above `kind`: its keys follow every key of `kind`.
            let next_kind = format!("{kind}\0");
            let end = match after {
                Some((at, id)) => Excluded((kind, at, id)),
                None => Excluded((next_kind.as_str(), 0, "")),
            };
            let range = t
                .died_by_kind
                .range((Included((kind, 0, "")), end))
                .map_err(storage)?
                .rev();
            Box::new(range.map(|entry| {
                let (key, _) = entry.map_err(storage)?;
                let (_, at, id) = key.value();
                Ok((at, id.to_owned()))
            }))
        }
        JobState::Dead => {
            let start = after.map_or(Unbounded, Excluded);
            let range = t.died.range((Unbounded, start)).map_err(storage)?.rev();
            Box::new(range.map(|entry| {
                let (key, _) = entry.map_err(storage)?;
                let (at, id) = key.value();
                Ok((at, id.to_owned()))
            }))
        }
    };
    let mut out: Vec<(u64, JobInfo)> = Vec::with_capacity(limit.min(1024));
    for entry in keys {
        if out.len() == limit {
            break;
        }
        let (at, id) = entry?;
        let Some(stored) = t.load_with(&id, payloads)? else {
            return Err(Error::storage(format!(
                "an index names a missing job {id:?}"
            )));
        };
        if state(stored.job.status) == wanted && kind.is_none_or(|k| k == stored.spec.kind) {
            out.push((at, stored.info(id)));
        }
    }
    Ok((Reply::Listed(out), false))
}
