//! The Lua scripts (`lua/*.lua`, each headed by its keys, arguments, return value and why it
//! is atomic) and one typed function per script.
//!
//! # Ground rules
//!
//! - Each function here owns its script's KEYS and ARGV order and decodes its reply: call
//!   sites never build a key list by hand, so a script and its caller change together, in
//!   this file.
//! - Times cross the boundary as the scripts want them: delays in microseconds, due scores
//!   in microseconds rounded up (never early), run_at in nanoseconds. Delays past
//!   [`MAX_AFTER`] are stored as the saturation point (Lua's doubles are exact only below
//!   2^53 microseconds).

use std::time::Duration;

use ::redis::{Script, ScriptInvocation, Value};

use super::conn::Conn;
use super::keys::Keys;
use super::reply::{array, bytes, int, redis_error, score_ns, text};
use crate::backend::Claimed;
use crate::error::Error;
use crate::job::{nanos, Counts, JobInfo, JobState, Scheduled, When};
use crate::model::Retry;
use crate::recurrence::utc_text;
use crate::series::Recurring;

/// Delays past this are stored as `When::At` the saturation point: Lua's doubles hold
/// microseconds exactly only below 2^53 (year 2255).
const MAX_AFTER: Duration = Duration::from_secs(100 * 365 * 86_400);

/// Jobs one script call takes at most (schedules, acks, claims, purges, revivals): a script
/// blocks the whole server while it runs, so one huge call would stall every other client
/// (and could outlast `redis_timeout`, failing a call that did commit). The scripts' headers
/// say "at most 512".
pub(super) const MAX_JOBS_PER_SCRIPT: usize = 512;

/// A job to schedule: id, due time, payload.
pub(super) type NewJob = (String, When, Vec<u8>);

/// What one partition's claim returned: the jobs, the server's now and the next due time,
/// in that server's nanoseconds, the series whose lists need Rust, how many jobs it
/// killed, and the answers to the acks folded into it.
pub(super) type PartClaim = (
    Vec<Claimed>,
    u64,
    Option<u64>,
    Vec<SeriesNote>,
    u64,
    Vec<bool>,
);

/// A claim's note about a recurring series (`lua/series.lua`): its list of upcoming
/// occurrences runs low, or ran out before the claim's time (`dry`: the head waits for
/// Rust to decide the catch-up).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SeriesNote {
    pub(super) name: String,
    pub(super) dry: bool,
    pub(super) version: String,
    pub(super) head: Option<u64>,
    pub(super) runs: u32,
    pub(super) rule: String,
}

/// One series as `series.lua` stores it: (version, runs, head_ns, last_ns, rule).
pub(super) type SeriesRecord = (u32, Option<u64>, Option<u64>, String);

/// Occurrences as the series scripts take them: `ns=text,...`.
fn entries(times: &[u64]) -> String {
    let mut out = String::new();
    for (i, at) in times.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!("{at}={}", utc_text(*at)));
    }
    out
}

/// The keys every script that changes a series takes first, in `series.lua`'s order:
/// meta, payload, due, counts, series, series_payload, series_next.
fn series_keys<'a, 'b>(
    call: &'b mut ScriptInvocation<'a>,
    k: &Keys,
) -> &'b mut ScriptInvocation<'a> {
    call.key(&k.meta)
        .key(&k.payload)
        .key(&k.due)
        .key(&k.counts)
        .key(&k.series)
        .key(&k.series_payload)
        .key(&k.series_next)
}

/// A series record's time field: empty for none.
fn opt_ns(field: &str) -> Result<Option<u64>, Error> {
    if field.is_empty() {
        return Ok(None);
    }
    field
        .parse()
        .map(Some)
        .map_err(|_| Error::storage(format!("corrupt series time {field:?}")))
}

/// Decodes a record of `{tag}:series`.
pub(super) fn series_record(text: &str) -> Result<SeriesRecord, Error> {
    let corrupt = || Error::storage(format!("corrupt series record {text:?}"));
    let mut fields = text.splitn(6, '|');
    let mut field = || fields.next().ok_or_else(corrupt);
    let _version = field()?;
    let runs = field()?.parse().map_err(|_| corrupt())?;
    let head = opt_ns(field()?)?;
    let _head_text = field()?;
    let last = opt_ns(field()?)?;
    Ok((runs, head, last, field()?.to_owned()))
}

pub(super) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The script arguments for a due time: mode, value, score.
fn when_args(when: When) -> (&'static str, String, String) {
    match when {
        When::After(d) if d <= MAX_AFTER => ("after", micros(d).to_string(), String::new()),
        When::After(_) => at_args(u64::MAX),
        When::At(t) => at_args(nanos(t)),
    }
}

fn at_args(ns: u64) -> (&'static str, String, String) {
    ("at", ns.to_string(), ns.div_ceil(1000).to_string())
}

/// Every script of the backend, loaded once per queue handle.
pub(super) struct Scripts {
    schedule: Script,
    cancel: Script,
    reschedule: Script,
    get: Script,
    claim: Script,
    ack: Script,
    retry: Script,
    extend: Script,
    remove_dead: Script,
    recurring_set: Script,
    recurring_fill: Script,
    recurring_cancel: Script,
    counts: Script,
    list: Script,
    revive: Script,
    pause: Script,
    layout: Script,
}

/// A script that changes recurring series or leaves their pending occurrences alone:
/// `lua/series.lua`'s functions, then its body.
macro_rules! series_script {
    ($file:literal) => {
        Script::new(concat!(
            include_str!("lua/series.lua"),
            include_str!(concat!("lua/", $file))
        ))
    };
}

impl Scripts {
    pub(super) fn load() -> Scripts {
        Scripts {
            schedule: Script::new(include_str!("lua/schedule.lua")),
            cancel: series_script!("cancel.lua"),
            reschedule: series_script!("reschedule.lua"),
            get: Script::new(include_str!("lua/get.lua")),
            claim: Script::new(concat!(
                include_str!("lua/acks.lua"),
                include_str!("lua/series.lua"),
                include_str!("lua/claim.lua")
            )),
            ack: Script::new(concat!(
                include_str!("lua/acks.lua"),
                include_str!("lua/ack.lua")
            )),
            retry: Script::new(include_str!("lua/retry.lua")),
            extend: Script::new(include_str!("lua/extend.lua")),
            remove_dead: Script::new(include_str!("lua/remove_dead.lua")),
            recurring_set: series_script!("recurring_set.lua"),
            recurring_fill: series_script!("recurring_fill.lua"),
            recurring_cancel: series_script!("recurring_cancel.lua"),
            counts: Script::new(include_str!("lua/counts.lua")),
            list: Script::new(include_str!("lua/list.lua")),
            revive: Script::new(include_str!("lua/revive.lua")),
            pause: Script::new(include_str!("lua/pause.lua")),
            layout: Script::new(include_str!("lua/layout.lua")),
        }
    }

    /// `schedule.lua`: creates each job unless its id exists; the outcomes and run_ats in
    /// order.
    pub(super) async fn schedule(
        &self,
        conn: &mut Conn,
        k: &Keys,
        jobs: &[NewJob],
    ) -> Result<Vec<(Scheduled, u64)>, Error> {
        let mut call = self.schedule.prepare_invoke();
        call.key(&k.meta).key(&k.payload).key(&k.due).key(&k.counts);
        call.arg(&k.wake).arg(k.publish);
        for (id, when, payload) in jobs {
            let (mode, value, score) = when_args(*when);
            call.arg(id)
                .arg(mode)
                .arg(value)
                .arg(score)
                .arg(payload.as_slice());
        }
        let reply: Value = call.invoke_async(conn).await.map_err(redis_error)?;
        array(reply)?
            .into_iter()
            .map(|pair| {
                let pair = array(pair)?;
                let [created, run_at] = pair.as_slice() else {
                    return Err(Error::storage("short schedule reply"));
                };
                let outcome = if int(created)? == 1 {
                    Scheduled::Created
                } else {
                    Scheduled::Exists
                };
                Ok((outcome, int(run_at)?))
            })
            .collect()
    }

    /// `ack.lua`: deletes each job whose lease is held with its token; one answer each.
    pub(super) async fn ack(
        &self,
        conn: &mut Conn,
        k: &Keys,
        acks: &[(String, u64)],
    ) -> Result<Vec<bool>, Error> {
        let mut call = self.ack.prepare_invoke();
        call.key(&k.meta)
            .key(&k.payload)
            .key(&k.counts)
            .key(&k.errors)
            .key(&k.running);
        for (id, token) in acks {
            call.arg(id).arg(token);
        }
        let reply: Value = call.invoke_async(conn).await.map_err(redis_error)?;
        array(reply)?.iter().map(|v| Ok(int(v)? == 1)).collect()
    }

    /// `cancel.lua`: removes a pending job.
    pub(super) async fn cancel(&self, conn: &mut Conn, k: &Keys, id: &str) -> Result<bool, Error> {
        let mut call = self.cancel.prepare_invoke();
        call.key(&k.meta)
            .key(&k.payload)
            .key(&k.due)
            .key(&k.counts)
            .key(&k.series)
            .key(&k.errors)
            .arg(id);
        let removed: u64 = call.invoke_async(conn).await.map_err(redis_error)?;
        Ok(removed == 1)
    }

    /// `reschedule.lua`: moves a pending job; its new run_at if it moved.
    pub(super) async fn reschedule(
        &self,
        conn: &mut Conn,
        k: &Keys,
        id: &str,
        when: When,
    ) -> Result<Option<u64>, Error> {
        let (mode, value, score) = when_args(when);
        let mut call = self.reschedule.prepare_invoke();
        call.key(&k.meta).key(&k.due).key(&k.series);
        call.arg(id)
            .arg(mode)
            .arg(value)
            .arg(score)
            .arg(&k.wake)
            .arg(k.publish);
        let reply: Value = call.invoke_async(conn).await.map_err(redis_error)?;
        match reply {
            Value::Nil => Ok(None),
            other => Ok(Some(int(&other)?)),
        }
    }

    /// `get.lua`: a job's state, run_at, attempt, last error and payload.
    pub(super) async fn get(
        &self,
        conn: &mut Conn,
        k: &Keys,
        id: &str,
    ) -> Result<Option<JobInfo>, Error> {
        let mut call = self.get.prepare_invoke();
        call.key(&k.meta).key(&k.payload).key(&k.errors).arg(id);
        let reply: Value = call.invoke_async(conn).await.map_err(redis_error)?;
        if reply == Value::Nil {
            return Ok(None);
        }
        let mut parts = array(reply)?.into_iter();
        let mut next = || parts.next().unwrap_or(Value::Nil);
        let (meta, payload, error) = (next(), next(), next());
        job_info(id.to_owned(), meta, error, payload).map(Some)
    }

    /// `claim.lua`: applies `acks` (answered in the reply's last field), then leases up to
    /// `max` due jobs of one partition.
    pub(super) async fn claim(
        &self,
        conn: &mut Conn,
        k: &Keys,
        max: usize,
        lease_us: u64,
        max_attempts: u32,
        acks: &[(String, u64)],
    ) -> Result<PartClaim, Error> {
        let mut call = self.claim.prepare_invoke();
        call.key(&k.meta)
            .key(&k.payload)
            .key(&k.due)
            .key(&k.counts)
            .key(&k.seq)
            .key(&k.dead)
            .key(&k.series)
            .key(&k.series_payload)
            .key(&k.series_next)
            .key(&k.errors)
            .key(&k.running);
        call.arg(max).arg(lease_us).arg(max_attempts);
        for (id, token) in acks {
            call.arg(id).arg(token);
        }
        let reply: Value = call.invoke_async(conn).await.map_err(redis_error)?;
        let mut items = array(reply)?.into_iter();
        let now_us = int(&items.next().unwrap_or(Value::Nil))?;
        let next = text(items.next().unwrap_or(Value::Nil))?;
        let next_due = if next.is_empty() {
            None
        } else {
            Some(score_ns(&next)?)
        };
        let mut notes = Vec::new();
        for note in array(items.next().unwrap_or(Value::Array(Vec::new())))? {
            let fields = array(note)?;
            let [name, kind, version, head, runs, rule] = fields.as_slice() else {
                return Err(Error::storage("short series note in a claim reply"));
            };
            notes.push(SeriesNote {
                name: text(name.clone())?,
                dry: text(kind.clone())? == "dry",
                version: text(version.clone())?,
                head: opt_ns(&text(head.clone())?)?,
                runs: u32::try_from(int(runs)?).unwrap_or(u32::MAX),
                rule: text(rule.clone())?,
            });
        }
        let died = int(&items.next().unwrap_or(Value::Nil))?;
        let acked = array(items.next().unwrap_or(Value::Array(Vec::new())))?
            .iter()
            .map(|v| Ok(int(v)? == 1))
            .collect::<Result<Vec<bool>, Error>>()?;
        if acked.len() != acks.len() {
            return Err(Error::storage("short ack answers in a claim reply"));
        }
        let rest: Vec<Value> = items.collect();
        let mut jobs = Vec::with_capacity(rest.len() / 5);
        for chunk in rest.chunks(5) {
            let [id, payload, attempt, run_at, token] = chunk else {
                return Err(Error::storage("short claim reply"));
            };
            jobs.push(Claimed {
                id: text(id.clone())?,
                payload: bytes(payload.clone())?,
                attempt: u32::try_from(int(attempt)?).unwrap_or(u32::MAX),
                run_at: int(run_at)?,
                token: int(token)?,
            });
        }
        Ok((
            jobs,
            now_us.saturating_mul(1000),
            next_due,
            notes,
            died,
            acked,
        ))
    }

    /// `recurring_set.lua`: creates or replaces a series; `times` are its first occurrences
    /// after the server's time, the head first. The outcome, the head's time and the last
    /// delivered occurrence's (no head but a last: every time was at or before it).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn recurring_set(
        &self,
        conn: &mut Conn,
        k: &Keys,
        name: &str,
        rule: &str,
        runs: u32,
        payload: &[u8],
        times: &[u64],
    ) -> Result<(Recurring, Option<u64>, Option<u64>), Error> {
        let mut call = self.recurring_set.prepare_invoke();
        series_keys(&mut call, k).key(&k.seq);
        call.arg(name)
            .arg(rule)
            .arg(runs)
            .arg(payload)
            .arg(entries(times))
            .arg(&k.wake)
            .arg(k.publish);
        let reply: Value = call.invoke_async(conn).await.map_err(redis_error)?;
        let mut parts = array(reply)?.into_iter();
        let created = int(&parts.next().unwrap_or(Value::Nil))? == 1;
        let head = opt_ns(&text(parts.next().unwrap_or(Value::Nil))?)?;
        let last = opt_ns(&text(parts.next().unwrap_or(Value::Nil))?)?;
        let outcome = if created {
            Recurring::Created
        } else {
            Recurring::Updated
        };
        Ok((outcome, head, last))
    }

    /// `recurring_fill.lua`: the head at `times[0]` and its next occurrences, the first
    /// `go` of them to run without counting, if the series is still at `version` with the
    /// head `head`; whether it applied. No `times`: the series' recurrence no longer parses,
    /// and it lets go of its head (an ordinary job from then on).
    pub(super) async fn recurring_fill(
        &self,
        conn: &mut Conn,
        k: &Keys,
        note: &SeriesNote,
        times: Option<(&[u64], usize)>,
    ) -> Result<bool, Error> {
        let mut call = self.recurring_fill.prepare_invoke();
        series_keys(&mut call, k);
        let head = note.head.map(|h| h.to_string()).unwrap_or_default();
        call.arg(&note.name).arg(&note.version).arg(head);
        match times {
            Some((times, go)) => call.arg(entries(times)).arg(go),
            None => call.arg("").arg("detach"),
        };
        let applied: u64 = call.invoke_async(conn).await.map_err(redis_error)?;
        Ok(applied == 1)
    }

    /// `recurring_cancel.lua`: deletes a series and its pending occurrence.
    pub(super) async fn recurring_cancel(
        &self,
        conn: &mut Conn,
        k: &Keys,
        name: &str,
    ) -> Result<bool, Error> {
        let mut call = self.recurring_cancel.prepare_invoke();
        series_keys(&mut call, k).arg(name);
        let removed: u64 = call.invoke_async(conn).await.map_err(redis_error)?;
        Ok(removed == 1)
    }

    /// `retry.lua`: gives a running job back to run `after` from now, or kills it; with an
    /// `error` (a failure) that becomes the job's last error.
    #[allow(clippy::too_many_arguments)] // the script's own arguments, each named once here
    pub(super) async fn retry(
        &self,
        conn: &mut Conn,
        k: &Keys,
        id: &str,
        token: u64,
        after: Duration,
        max_attempts: u32,
        error: Option<&str>,
    ) -> Result<(Retry, u64), Error> {
        let mut call = self.retry.prepare_invoke();
        call.key(&k.meta)
            .key(&k.due)
            .key(&k.counts)
            .key(&k.dead)
            .key(&k.errors)
            .key(&k.running);
        call.arg(id)
            .arg(token)
            .arg(micros(after.min(MAX_AFTER)))
            .arg(max_attempts)
            .arg(&k.wake)
            .arg(k.publish);
        if let Some(error) = error {
            call.arg(error);
        }
        let reply: Value = call.invoke_async(conn).await.map_err(redis_error)?;
        let mut parts = array(reply)?.into_iter();
        let outcome = int(&parts.next().unwrap_or(Value::Nil))?;
        let run_at = text(parts.next().unwrap_or(Value::Nil))?;
        Ok(match outcome {
            1 => (
                Retry::Pending,
                run_at.parse().map_err(|_| Error::storage("bad run_at"))?,
            ),
            2 => (Retry::Died, 0),
            _ => (Retry::Stale, 0),
        })
    }

    /// `extend.lua`: moves a held lease's end to `by` from now.
    pub(super) async fn extend(
        &self,
        conn: &mut Conn,
        k: &Keys,
        id: &str,
        token: u64,
        by: Duration,
    ) -> Result<bool, Error> {
        let mut call = self.extend.prepare_invoke();
        call.key(&k.meta)
            .key(&k.running)
            .arg(id)
            .arg(token)
            .arg(micros(by.min(MAX_AFTER)));
        let done: u64 = call.invoke_async(conn).await.map_err(redis_error)?;
        Ok(done == 1)
    }

    /// `remove_dead.lua` by id: deletes a dead job.
    pub(super) async fn remove_dead(
        &self,
        conn: &mut Conn,
        k: &Keys,
        id: &str,
    ) -> Result<bool, Error> {
        Ok(self.remove_dead_call(conn, k, "id", id).await? == 1)
    }

    /// `remove_dead.lua` by limit: deletes up to `limit` dead jobs; how many.
    pub(super) async fn purge_dead(
        &self,
        conn: &mut Conn,
        k: &Keys,
        limit: usize,
    ) -> Result<u64, Error> {
        self.remove_dead_call(conn, k, "limit", &limit.to_string())
            .await
    }

    async fn remove_dead_call(
        &self,
        conn: &mut Conn,
        k: &Keys,
        mode: &str,
        arg: &str,
    ) -> Result<u64, Error> {
        let mut call = self.remove_dead.prepare_invoke();
        call.key(&k.meta)
            .key(&k.payload)
            .key(&k.dead)
            .key(&k.counts)
            .key(&k.errors)
            .arg(mode)
            .arg(arg);
        call.invoke_async(conn).await.map_err(redis_error)
    }
}

impl Scripts {
    /// `layout.lua`: the queue's recorded partition count and keyspace format, `partitions`
    /// and `format` if none were.
    pub(super) async fn layout(
        &self,
        conn: &mut Conn,
        layout: &str,
        partitions: usize,
        format: u32,
    ) -> Result<(usize, u32), Error> {
        let mut call = self.layout.prepare_invoke();
        call.key(layout).arg(partitions).arg(format);
        call.invoke_async(conn).await.map_err(redis_error)
    }

    /// `counts.lua`: one partition's counters, paused flag and next pending run_at.
    pub(super) async fn counts(&self, conn: &mut Conn, k: &Keys) -> Result<Counts, Error> {
        let mut call = self.counts.prepare_invoke();
        call.key(&k.meta).key(&k.due).key(&k.counts);
        let reply: Value = call.invoke_async(conn).await.map_err(redis_error)?;
        let items = array(reply)?;
        let [pending, running, dead, paused, next] = items.as_slice() else {
            return Err(Error::storage("short counts reply"));
        };
        let next = text(next.clone())?;
        let next_due = if next.is_empty() {
            None
        } else {
            Some(next.parse().map_err(|_| Error::storage("bad run_at"))?)
        };
        Ok(Counts::new(
            int(pending)?,
            int(running)?,
            int(dead)?,
            int(paused)? == 1,
            next_due,
        ))
    }

    /// `list.lua`: up to `limit` jobs of one partition in `state` after the position
    /// `after` (nanoseconds and id; the scores are microseconds), each with its position in
    /// nanoseconds (its score × 1000: converting back gives the score exactly).
    pub(super) async fn list(
        &self,
        conn: &mut Conn,
        k: &Keys,
        state: JobState,
        after: Option<(u64, &str)>,
        limit: usize,
        payloads: bool,
    ) -> Result<Vec<(u64, JobInfo)>, Error> {
        let (mode, index) = match state {
            JobState::Pending => ("pending", &k.due),
            JobState::Running => ("running", &k.running),
            JobState::Dead => ("dead", &k.dead),
        };
        let mut call = self.list.prepare_invoke();
        call.key(&k.meta).key(&k.payload).key(&k.errors).key(index);
        call.arg(mode).arg(limit);
        match after {
            Some((at, id)) => call.arg(at.div_ceil(1000)).arg(id),
            None => call.arg("").arg(""),
        };
        call.arg(if payloads { "1" } else { "0" });
        let reply: Value = call.invoke_async(conn).await.map_err(redis_error)?;
        let items = array(reply)?;
        let mut jobs = Vec::with_capacity(items.len() / 5);
        for chunk in items.chunks(5) {
            let [id, score, meta, error, payload] = chunk else {
                return Err(Error::storage("short list reply"));
            };
            let at = score_ns(&text(score.clone())?)?;
            let info = job_info(
                text(id.clone())?,
                meta.clone(),
                error.clone(),
                payload.clone(),
            )?;
            jobs.push((at, info));
        }
        Ok(jobs)
    }
}

impl Scripts {
    /// `revive.lua` by id: makes a dead job pending at `when`; its run_at if it was dead.
    pub(super) async fn revive(
        &self,
        conn: &mut Conn,
        k: &Keys,
        id: &str,
        when: When,
    ) -> Result<Option<u64>, Error> {
        let (n, run_at) = self.revive_call(conn, k, "id", id, when).await?;
        Ok((n == 1).then_some(run_at))
    }

    /// `revive.lua` by limit: up to `limit` (at most 512) dead jobs pending at `when`,
    /// oldest deaths first; how many, and their run_at.
    pub(super) async fn revive_dead(
        &self,
        conn: &mut Conn,
        k: &Keys,
        limit: usize,
        when: When,
    ) -> Result<(u64, u64), Error> {
        self.revive_call(conn, k, "limit", &limit.to_string(), when)
            .await
    }

    async fn revive_call(
        &self,
        conn: &mut Conn,
        k: &Keys,
        mode: &str,
        arg: &str,
        when: When,
    ) -> Result<(u64, u64), Error> {
        let (when_mode, value, score) = when_args(when);
        let mut call = self.revive.prepare_invoke();
        call.key(&k.meta).key(&k.due).key(&k.counts).key(&k.dead);
        call.arg(mode)
            .arg(arg)
            .arg(when_mode)
            .arg(value)
            .arg(score)
            .arg(&k.wake)
            .arg(k.publish);
        let reply: Value = call.invoke_async(conn).await.map_err(redis_error)?;
        let items = array(reply)?;
        let [n, run_at] = items.as_slice() else {
            return Err(Error::storage("short revive reply"));
        };
        let n = int(n)?;
        let run_at = if n == 0 { 0 } else { int(run_at)? };
        Ok((n, run_at))
    }
}

impl Scripts {
    /// `pause.lua`: stops (or lets again) one partition's claims; a resume publishes a wake.
    pub(super) async fn pause(&self, conn: &mut Conn, k: &Keys, paused: bool) -> Result<(), Error> {
        let mut call = self.pause.prepare_invoke();
        call.key(&k.counts)
            .arg(if paused { "1" } else { "0" })
            .arg(&k.wake)
            .arg(k.publish);
        let _changed: u64 = call.invoke_async(conn).await.map_err(redis_error)?;
        Ok(())
    }
}

/// A job from its `meta` string (`state:attempt:token:run_at_ns`), its last error (`Nil` if
/// none) and its payload, as the scripts return them.
fn job_info(id: String, meta: Value, error: Value, payload: Value) -> Result<JobInfo, Error> {
    let meta = text(meta)?;
    let corrupt = || Error::storage(format!("corrupt job record {meta:?}"));
    let fields: Vec<&str> = meta.split(':').collect();
    let [state, attempt, _, run_at] = fields.as_slice() else {
        return Err(corrupt());
    };
    let state = match *state {
        "p" => JobState::Pending,
        "r" => JobState::Running,
        "d" => JobState::Dead,
        _ => return Err(corrupt()),
    };
    let error = match error {
        Value::Nil => None,
        other => Some(text(other)?),
    };
    Ok(JobInfo::new(
        id,
        state,
        run_at.parse().map_err(|_| corrupt())?,
        attempt.parse().map_err(|_| corrupt())?,
        error,
        bytes(payload)?,
    ))
}
