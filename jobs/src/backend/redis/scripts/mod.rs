//! The Lua scripts (`lua/*.lua`, each headed by its keys, arguments, return value and why it
//! is atomic) and one typed function per script, grouped by what they act on: `jobs.rs`
//! (one job by id), `dead.rs` (dead jobs), `claim.rs`, `queue.rs` (the whole partition:
//! counts, pages, pause, layout), `series.rs` (recurring series).
//!
//! # Ground rules
//!
//! - Each function owns its script (`script!`, built once per process), its KEYS and ARGV
//!   order, and decodes its reply (into a named
//!   struct through redis-rs's `FromRedisValue` where the reply has more than one part):
//!   call sites never build a key list by hand, so a script and its caller change together.
//! - Times cross the boundary as the scripts want them: delays in microseconds, due scores
//!   in microseconds rounded up (never early), run_at in nanoseconds. Delays past
//!   [`MAX_AFTER`] are stored as the saturation point (Lua's doubles are exact only below
//!   2^53 microseconds).
//! - A job's spec crosses as its meta string's tail (`lua/kinds.lua`; a hold-off only when
//!   there is one, so a tail without it reads as none): [`spec_tail`] writes it,
//!   [`job_info`] and the claim's reply read it back; a meta without one is a job of the
//!   queue's plain spec (an occurrence of a series stored before series had a spec, or a
//!   job of format 1).

/// The script made of `lua/` files concatenated (shared functions first, then the body),
/// built once per process: `script!("kinds.lua", "acks.lua", "ack.lua")`.
macro_rules! script {
    ($($file:literal),+) => {{
        static SCRIPT: std::sync::LazyLock<::redis::Script> = std::sync::LazyLock::new(|| {
            ::redis::Script::new(concat!($(include_str!(concat!("../lua/", $file))),+))
        });
        &*SCRIPT
    }};
}

mod claim;
mod dead;
mod jobs;
mod queue;
mod series;

use std::time::Duration;

use ::redis::Value;

use super::reply::{bytes, text};
use crate::backend::KindFilter;
use crate::core::error::Error;
use crate::core::job::{nanos, JobInfo, JobState, When};
use crate::core::kind::{Keyed, Spec};

pub(super) use claim::ClaimReply;

/// Jobs one script call takes at most (schedules, acks, claims, purges, revivals): a script
/// blocks the whole server while it runs, so one huge call would stall every other client
/// (and could outlast `redis_timeout`, failing a call that did commit). The scripts' headers
/// say "at most 512".
pub(super) const MAX_JOBS_PER_SCRIPT: usize = 512;

/// Delays past this are stored as `When::At` the saturation point: Lua's doubles hold
/// microseconds exactly only below 2^53 (year 2255).
const MAX_AFTER: Duration = Duration::from_secs(100 * 365 * 86_400);

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

/// A list's kind argument: `*` for every kind, `=` and the kind for one.
fn filter_arg(kind: &KindFilter) -> String {
    match kind {
        None => "*".to_owned(),
        Some(kind) => format!("={kind}"),
    }
}

/// The typed script calls: a unit value, each call's script being built (its SHA1 taken)
/// once per process inside the function that owns it (`script!`).
#[derive(Clone)]
pub(super) struct Scripts;

/// The tail of a job's meta string that stores its spec (`lua/kinds.lua`):
/// `:priority:max_attempts:lease_ns:backoff_first_ns:backoff_max_ns`, then `:hold_off_ns`
/// if the job has a hold-off (`lua/held.lua`; none is written for zero, so a job without
/// one has the tail every version of format 2 wrote), then for a job with a key the byte
/// 0x1e and `limit:rate_starts:rate_per_ns:key` (0 for no limit, no rate; the key last: it
/// may hold `:`, never a control character; `lua/gates.lua`), the byte 0x1f (no kind holds
/// a control character), then the kind, last (it may hold `:`); durations in nanoseconds
/// (exact; the scripts floor the lease to microseconds for its score).
pub(super) fn spec_tail(spec: &Spec) -> String {
    let hold_off = if spec.hold_off.is_zero() {
        String::new()
    } else {
        format!(":{}", spec.hold_off.as_nanos())
    };
    let key = match &spec.key {
        None => String::new(),
        Some(k) => {
            let (starts, per) = k.rate.unwrap_or((0, Duration::ZERO));
            format!("\x1e{}:{starts}:{}:{}", k.limit, per.as_nanos(), k.key)
        }
    };
    format!(
        ":{}:{}:{}:{}:{}{hold_off}{key}\x1f{}",
        spec.priority,
        spec.max_attempts,
        spec.lease.as_nanos(),
        spec.backoff.0.as_nanos(),
        spec.backoff.1.as_nanos(),
        spec.kind
    )
}

/// The spec a meta tail stores (`spec_tail`; one without a hold-off holds none); `None`
/// for an empty one (a job of the plain spec).
pub(super) fn tail_spec(tail: &str) -> Result<Option<Spec>, Error> {
    if tail.is_empty() {
        return Ok(None);
    }
    let corrupt = || Error::storage(format!("corrupt job spec {tail:?}"));
    let (numbers, kind) = tail.split_once('\x1f').ok_or_else(corrupt)?;
    let (numbers, key) = match numbers.split_once('\x1e') {
        Some((numbers, key)) => (numbers, Some(key)),
        None => (numbers, None),
    };
    let mut fields = numbers.strip_prefix(':').ok_or_else(corrupt)?.split(':');
    let mut field = || fields.next().ok_or_else(corrupt);
    let priority = field()?.parse().map_err(|_| corrupt())?;
    let max_attempts = field()?.parse().map_err(|_| corrupt())?;
    let duration = |field: &str| -> Result<Duration, Error> {
        let ns: u128 = field.parse().map_err(|_| corrupt())?;
        let secs = u64::try_from(ns / 1_000_000_000).map_err(|_| corrupt())?;
        Ok(Duration::new(secs, (ns % 1_000_000_000) as u32))
    };
    let lease = duration(field()?)?;
    let backoff = (duration(field()?)?, duration(field()?)?);
    let hold_off = match fields.next() {
        Some(ns) => duration(ns)?,
        None => Duration::ZERO,
    };
    if fields.next().is_some() {
        return Err(corrupt());
    }
    let key = match key {
        None => None,
        Some(key) => {
            let mut fields = key.splitn(4, ':');
            let mut field = || fields.next().ok_or_else(corrupt);
            let limit = field()?.parse().map_err(|_| corrupt())?;
            let starts: u32 = field()?.parse().map_err(|_| corrupt())?;
            let per = duration(field()?)?;
            let key = field()?.to_owned();
            Some(Keyed {
                key,
                limit,
                rate: (starts > 0).then_some((starts, per)),
            })
        }
    };
    let kind = kind.to_owned();
    Ok(Some(Spec {
        kind,
        priority,
        max_attempts,
        backoff,
        lease,
        hold_off,
        key,
    }))
}

/// A job from its `meta` string (`state:attempt:token:run_at_ns` and its spec's tail), its
/// last error (`Nil` if none) and its payload, as the scripts return them; a job stored
/// without its spec has `plain`.
fn job_info(
    id: String,
    meta: Value,
    error: Value,
    payload: Value,
    plain: &Spec,
) -> Result<JobInfo, Error> {
    let meta = text(meta)?;
    let corrupt = || Error::storage(format!("corrupt job record {meta:?}"));
    let fields: Vec<&str> = meta.splitn(5, ':').collect();
    let (state, attempt, run_at, tail) = match fields.as_slice() {
        [state, attempt, _, run_at] => (state, attempt, run_at, ""),
        [state, attempt, _, run_at, rest] => (state, attempt, run_at, *rest),
        _ => return Err(corrupt()),
    };
    // The tail without its leading ':' was split off: put it back for `tail_spec`.
    let tail = if tail.is_empty() {
        String::new()
    } else {
        format!(":{tail}")
    };
    let spec = tail_spec(&tail)?.unwrap_or_else(|| plain.clone());
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
        spec,
    ))
}
