//! The scripts on one job by id: `schedule.lua`, `import.lua`, `ack.lua`, `cancel.lua`,
//! `reschedule.lua`, `get.lua`, `retry.lua`, `extend.lua`.

use std::time::Duration;

use ::redis::{FromRedisValue, ParsingError, Value};

use super::{job_info, micros, spec_tail, when_args, Scripts, MAX_AFTER};
use crate::backend::redis::conn::Conn;
use crate::backend::redis::keys::Keys;
use crate::backend::redis::reply::{array, int, parsing, redis_error, text};
use crate::backend::{Import, NewJob};
use crate::core::error::Error;
use crate::core::job::{system_time, JobInfo, Scheduled, When};
use crate::core::kind::{Dedup, Spec};
use crate::core::series::occurrence_series;
use crate::core::state::Retry;

/// One job's answer in `schedule.lua`'s reply: `{1 | 0 | 2 | 4 (created | existed | replaced
/// | successor stored), run_at_ns}` or `{3 (held off), until_ns}`.
struct ScheduleAnswer {
    outcome: u64,
    ns: u64,
}

impl FromRedisValue for ScheduleAnswer {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let decode = || -> Result<ScheduleAnswer, Error> {
            let [created, run_at] = <[Value; 2]>::try_from(array(v)?)
                .map_err(|_| Error::storage("short schedule reply"))?;
            Ok(ScheduleAnswer {
                outcome: int(&created)?,
                ns: int(&run_at)?,
            })
        };
        decode().map_err(parsing)
    }
}

/// `retry.lua`'s reply: `{0 (stale) | 1 (pending again) | 2 (dead), run_at_ns or ""}`.
struct RetryReply {
    outcome: u64,
    run_at: String,
}

impl FromRedisValue for RetryReply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let decode = || -> Result<RetryReply, Error> {
            let [outcome, run_at] = <[Value; 2]>::try_from(array(v)?)
                .map_err(|_| Error::storage("short retry reply"))?;
            Ok(RetryReply {
                outcome: int(&outcome)?,
                run_at: text(run_at)?,
            })
        };
        decode().map_err(parsing)
    }
}

impl Scripts {
    /// `schedule.lua`: creates each job unless its id exists (or replaces a pending one,
    /// [`Dedup::Replace`], or follows a running one, [`Dedup::AllowWhileRunning`]) or is
    /// held off; the outcomes and run_ats (a hold-off's end) in order.
    pub(in crate::backend::redis) async fn schedule(
        &self,
        conn: &mut Conn,
        k: &Keys,
        jobs: &[NewJob],
    ) -> Result<Vec<(Scheduled, u64)>, Error> {
        let mut call = script!(
            "kinds.lua",
            "gates.lua",
            "series.lua",
            "held.lua",
            "next.lua",
            "schedule.lua"
        )
        .prepare_invoke();
        call.key(&k.meta)
            .key(&k.payload)
            .key(&k.due)
            .key(&k.counts)
            .key(&k.levels)
            .key(&k.held)
            .key(&k.held_until)
            .key(&k.series)
            .key(&k.next)
            .key(&k.next_payload)
            .key(&k.gate_timers);
        call.arg(&k.wake).arg(k.publish);
        // A spec is sent once for a run of jobs that share it ("": the one before's).
        let mut last: Option<&Spec> = None;
        for job in jobs {
            let (mode, value, score) = when_args(job.when);
            let tail = if last == Some(&job.spec) {
                String::new()
            } else {
                spec_tail(&job.spec)
            };
            last = Some(&job.spec);
            call.arg(&job.id)
                .arg(mode)
                .arg(value)
                .arg(score)
                .arg(job.payload.as_slice())
                .arg(tail)
                .arg(match job.dedup {
                    Dedup::Replace => "r",
                    // A series' occurrence (by its id's shape, as on every backend) never
                    // gets a successor: kept as it is.
                    Dedup::AllowWhileRunning if occurrence_series(&job.id).is_none() => "w",
                    _ => "k",
                });
        }
        let answers: Vec<ScheduleAnswer> = call.invoke_async(conn).await.map_err(redis_error)?;
        answers
            .into_iter()
            .map(|a| {
                let outcome = match a.outcome {
                    0 => Scheduled::Exists,
                    1 => Scheduled::Created,
                    2 => Scheduled::Replaced,
                    3 => Scheduled::HeldOff {
                        until: system_time(a.ns),
                    },
                    4 => Scheduled::Successor,
                    other => {
                        return Err(Error::storage(format!("bad schedule outcome {other}")));
                    }
                };
                Ok((outcome, a.ns))
            })
            .collect()
    }

    /// `import.lua`: writes each job as given unless its id exists or is held off; whether
    /// it wrote, in order.
    pub(in crate::backend::redis) async fn import(
        &self,
        conn: &mut Conn,
        k: &Keys,
        jobs: &[Import],
    ) -> Result<Vec<bool>, Error> {
        let mut call = script!("kinds.lua", "gates.lua", "held.lua", "import.lua").prepare_invoke();
        call.key(&k.meta)
            .key(&k.payload)
            .key(&k.due)
            .key(&k.counts)
            .key(&k.dead)
            .key(&k.errors)
            .key(&k.levels)
            .key(&k.held)
            .key(&k.held_until)
            .key(&k.gate_timers);
        call.arg(&k.wake).arg(k.publish);
        for job in jobs {
            // Due scores round up (never early); the dead index is in microseconds.
            let (state, score) = match job.died_at {
                Some(at) => ("d", at / 1000),
                None => ("p", job.run_at.div_ceil(1000)),
            };
            call.arg(&job.id)
                .arg(state)
                .arg(job.attempt)
                .arg(job.run_at)
                .arg(score)
                .arg(if job.last_error.is_some() { "1" } else { "0" })
                .arg(job.last_error.as_deref().unwrap_or(""))
                .arg(job.payload.as_slice())
                .arg(spec_tail(&job.spec));
        }
        let answers: Vec<u64> = call.invoke_async(conn).await.map_err(redis_error)?;
        Ok(answers.into_iter().map(|a| a == 1).collect())
    }

    /// `ack.lua`: deletes each job whose lease is held with its token (leaving the tombstone
    /// of one with a hold-off), or hands it over to its successor; one answer each.
    pub(in crate::backend::redis) async fn ack(
        &self,
        conn: &mut Conn,
        k: &Keys,
        acks: &[(String, u64)],
    ) -> Result<Vec<bool>, Error> {
        let mut call = script!(
            "kinds.lua",
            "gates.lua",
            "held.lua",
            "next.lua",
            "acks.lua",
            "ack.lua"
        )
        .prepare_invoke();
        call.key(&k.meta)
            .key(&k.payload)
            .key(&k.counts)
            .key(&k.errors)
            .key(&k.running)
            .key(&k.levels)
            .key(&k.held)
            .key(&k.held_until)
            .key(&k.due)
            .key(&k.next)
            .key(&k.next_payload)
            .key(&k.gate_timers);
        call.arg(&k.wake).arg(k.publish);
        for (id, token) in acks {
            call.arg(id).arg(token);
        }
        let answers: Vec<u64> = call.invoke_async(conn).await.map_err(redis_error)?;
        Ok(answers.into_iter().map(|a| a == 1).collect())
    }

    /// `cancel.lua`: removes a pending job (and its successor), or a running job's
    /// successor.
    pub(in crate::backend::redis) async fn cancel(
        &self,
        conn: &mut Conn,
        k: &Keys,
        id: &str,
    ) -> Result<bool, Error> {
        let mut call = script!(
            "kinds.lua",
            "gates.lua",
            "series.lua",
            "held.lua",
            "next.lua",
            "cancel.lua"
        )
        .prepare_invoke();
        call.key(&k.meta)
            .key(&k.payload)
            .key(&k.due)
            .key(&k.counts)
            .key(&k.series)
            .key(&k.errors)
            .key(&k.levels)
            .key(&k.next)
            .key(&k.next_payload)
            .key(&k.gate_timers)
            .arg(id)
            .arg(&k.wake)
            .arg(k.publish);
        let removed: u64 = call.invoke_async(conn).await.map_err(redis_error)?;
        Ok(removed == 1)
    }

    /// `reschedule.lua`: moves a pending job; its new run_at if it moved.
    pub(in crate::backend::redis) async fn reschedule(
        &self,
        conn: &mut Conn,
        k: &Keys,
        id: &str,
        when: When,
    ) -> Result<Option<u64>, Error> {
        let (mode, value, score) = when_args(when);
        let mut call =
            script!("kinds.lua", "gates.lua", "series.lua", "reschedule.lua").prepare_invoke();
        call.key(&k.meta)
            .key(&k.due)
            .key(&k.series)
            .key(&k.gate_timers)
            .key(&k.levels);
        call.arg(id)
            .arg(mode)
            .arg(value)
            .arg(score)
            .arg(&k.wake)
            .arg(k.publish);
        call.invoke_async(conn).await.map_err(redis_error)
    }

    /// `get.lua`: a job's state, run_at, attempt, last error, payload and spec (`plain` for
    /// a job stored without one), and its successor's run_at.
    pub(in crate::backend::redis) async fn get(
        &self,
        conn: &mut Conn,
        k: &Keys,
        id: &str,
        plain: &Spec,
    ) -> Result<Option<JobInfo>, Error> {
        let mut call = script!("get.lua").prepare_invoke();
        call.key(&k.meta)
            .key(&k.payload)
            .key(&k.errors)
            .key(&k.next)
            .arg(id);
        let reply: Value = call.invoke_async(conn).await.map_err(redis_error)?;
        if reply == Value::Nil {
            return Ok(None);
        }
        let [meta, payload, error, next] =
            <[Value; 4]>::try_from(array(reply)?).map_err(|_| Error::storage("short get reply"))?;
        let successor = match next {
            Value::Nil => None,
            next => Some(successor_run_at(&text(next)?)?),
        };
        job_info(id.to_owned(), meta, error, payload, plain)
            .map(|j| Some(j.with_successor(successor)))
    }

    /// `retry.lua`: gives a running job back to run `after` from now, or kills it if it is
    /// out of its own attempts (`max_attempts` for a job stored without its spec; its
    /// successor, if one waits, becomes the pending job); with an `error` (a failure) that
    /// becomes the job's last error.
    #[allow(clippy::too_many_arguments)] // the script's own arguments, each named once here
    pub(in crate::backend::redis) async fn retry(
        &self,
        conn: &mut Conn,
        k: &Keys,
        id: &str,
        token: u64,
        after: Duration,
        max_attempts: u32,
        error: Option<&str>,
    ) -> Result<(Retry, u64), Error> {
        let mut call = script!(
            "kinds.lua",
            "gates.lua",
            "held.lua",
            "next.lua",
            "retry.lua"
        )
        .prepare_invoke();
        call.key(&k.meta)
            .key(&k.due)
            .key(&k.counts)
            .key(&k.dead)
            .key(&k.errors)
            .key(&k.running)
            .key(&k.levels)
            .key(&k.payload)
            .key(&k.next)
            .key(&k.next_payload)
            .key(&k.gate_timers);
        call.arg(id)
            .arg(token)
            .arg(micros(after.min(MAX_AFTER)))
            .arg(max_attempts)
            .arg(&k.wake)
            .arg(k.publish);
        if let Some(error) = error {
            call.arg(error);
        }
        let reply: RetryReply = call.invoke_async(conn).await.map_err(redis_error)?;
        Ok(match reply.outcome {
            1 => (
                Retry::Pending,
                reply
                    .run_at
                    .parse()
                    .map_err(|_| Error::storage("bad run_at"))?,
            ),
            2 => (Retry::Died, 0),
            _ => (Retry::Stale, 0),
        })
    }

    /// `extend.lua`: moves a held lease's end to `by` from now.
    pub(in crate::backend::redis) async fn extend(
        &self,
        conn: &mut Conn,
        k: &Keys,
        id: &str,
        token: u64,
        by: Duration,
    ) -> Result<bool, Error> {
        let mut call = script!("kinds.lua", "extend.lua").prepare_invoke();
        call.key(&k.meta)
            .key(&k.running)
            .arg(id)
            .arg(token)
            .arg(micros(by.min(MAX_AFTER)));
        let done: u64 = call.invoke_async(conn).await.map_err(redis_error)?;
        Ok(done == 1)
    }
}

/// The run_at (ns) of a successor's `next` value (`lua/next.lua`: run_at_ns then its spec
/// tail).
fn successor_run_at(next: &str) -> Result<u64, Error> {
    let end = next
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(next.len());
    next[..end]
        .parse()
        .map_err(|_| Error::storage(format!("corrupt successor {next:?}")))
}
