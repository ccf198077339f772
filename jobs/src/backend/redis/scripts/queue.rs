//! The scripts on a whole partition or queue: `layout.lua`, `counts.lua`, `list.lua`,
//! `pause.lua`.

use std::collections::BTreeMap;

use ::redis::{FromRedisValue, ParsingError, Value};

use super::{filter_arg, job_info, Scripts};
use crate::backend::redis::conn::Conn;
use crate::backend::redis::keys::Keys;
use crate::backend::redis::reply::{array, int, parsing, redis_error, score_ns, text};
use crate::backend::KindFilter;
use crate::core::error::Error;
use crate::core::job::{Counts, JobInfo, JobState, KindCounts};
use crate::core::kind::Spec;

/// `counts.lua`'s reply: `{pending, running, dead, paused (1|0), next run_at_ns or "",
/// then pairs "<state>:<kind>", count}`: the partition's counts, and each kind's, that of
/// kind `""` being the totals less the others' (`lua/kinds.lua`).
pub(in crate::backend::redis) struct PartCounts {
    pub(in crate::backend::redis) counts: Counts,
    pub(in crate::backend::redis) kinds: BTreeMap<String, KindCounts>,
}

impl FromRedisValue for PartCounts {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let decode = || -> Result<PartCounts, Error> {
            let mut items = array(v)?.into_iter();
            let mut next = || {
                items
                    .next()
                    .ok_or_else(|| Error::storage("short counts reply"))
            };
            let (pending, running, dead) = (int(&next()?)?, int(&next()?)?, int(&next()?)?);
            let paused = int(&next()?)? == 1;
            let next_run = text(next()?)?;
            let next_due = if next_run.is_empty() {
                None
            } else {
                Some(next_run.parse().map_err(|_| Error::storage("bad run_at"))?)
            };
            let rest: Vec<Value> = items.collect();
            let mut kinds: BTreeMap<String, KindCounts> = BTreeMap::new();
            let mut plain = KindCounts::new(pending, running, dead);
            for pair in rest.chunks(2) {
                let [field, count] = pair else {
                    return Err(Error::storage("short counts reply"));
                };
                let field = text(field.clone())?;
                let Some((state, kind)) = field.split_once(':') else {
                    return Err(Error::storage(format!("bad counter {field:?}")));
                };
                // A counter below zero (keys edited by hand) counts as none.
                let n = text(count.clone())?
                    .parse::<i64>()
                    .map_err(|_| Error::storage(format!("bad counter {field:?}")))?
                    .max(0) as u64;
                let c = kinds.entry(kind.to_owned()).or_default();
                let (of_kind, of_plain) = match state {
                    "pending" => (&mut c.pending, &mut plain.pending),
                    "running" => (&mut c.running, &mut plain.running),
                    "dead" => (&mut c.dead, &mut plain.dead),
                    _ => return Err(Error::storage(format!("bad counter {field:?}"))),
                };
                *of_kind = n;
                *of_plain = of_plain.saturating_sub(n);
            }
            kinds.insert(String::new(), plain);
            Ok(PartCounts {
                counts: Counts::new(pending, running, dead, paused, next_due),
                kinds,
            })
        };
        decode().map_err(parsing)
    }
}

impl Scripts {
    /// `layout.lua`: the queue's recorded partition count and keyspace format, `partitions`
    /// and `format` if none were, or if `upgrades` was (then recorded as `format`).
    pub(in crate::backend::redis) async fn layout(
        &self,
        conn: &mut Conn,
        layout: &str,
        partitions: usize,
        format: u32,
        upgrades: u32,
    ) -> Result<(usize, u32), Error> {
        let mut call = script!("layout.lua").prepare_invoke();
        call.key(layout).arg(partitions).arg(format).arg(upgrades);
        call.invoke_async(conn).await.map_err(redis_error)
    }

    /// `counts.lua`: one partition's counters (in all and per kind), paused flag and next
    /// pending run_at.
    pub(in crate::backend::redis) async fn counts(
        &self,
        conn: &mut Conn,
        k: &Keys,
    ) -> Result<PartCounts, Error> {
        let mut call = script!("counts.lua").prepare_invoke();
        call.key(&k.meta).key(&k.due).key(&k.counts).key(&k.levels);
        call.invoke_async(conn).await.map_err(redis_error)
    }

    /// `list.lua`: up to `limit` jobs of one partition in `state` after the position
    /// `after` (nanoseconds and id; the scores are microseconds), each with its position in
    /// nanoseconds (its score × 1000: converting back gives the score exactly). With
    /// `kind`, jobs of that kind only; `plain` is the spec of a job stored without one.
    #[allow(clippy::too_many_arguments)] // the script's own arguments, each named once here
    pub(in crate::backend::redis) async fn list(
        &self,
        conn: &mut Conn,
        k: &Keys,
        state: JobState,
        after: Option<(u64, &str)>,
        limit: usize,
        payloads: bool,
        kind: &KindFilter,
        plain: &Spec,
    ) -> Result<Vec<(u64, JobInfo)>, Error> {
        let (mode, index) = match state {
            JobState::Pending => ("pending", &k.due),
            JobState::Running => ("running", &k.running),
            JobState::Dead => ("dead", &k.dead),
        };
        let mut call = script!("kinds.lua", "list.lua").prepare_invoke();
        call.key(&k.meta)
            .key(&k.payload)
            .key(&k.errors)
            .key(index)
            .key(&k.levels)
            .key(&k.gate_timers);
        call.arg(mode).arg(limit);
        match after {
            Some((at, id)) => call.arg(at.div_ceil(1000)).arg(id),
            None => call.arg("").arg(""),
        };
        call.arg(if payloads { "1" } else { "0" });
        call.arg(filter_arg(kind));
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
                plain,
            )?;
            jobs.push((at, info));
        }
        Ok(jobs)
    }

    /// `pause.lua`: stops (or lets again) one partition's claims; a resume publishes a wake.
    pub(in crate::backend::redis) async fn pause(
        &self,
        conn: &mut Conn,
        k: &Keys,
        paused: bool,
    ) -> Result<(), Error> {
        let mut call = script!("pause.lua").prepare_invoke();
        call.key(&k.counts)
            .arg(if paused { "1" } else { "0" })
            .arg(&k.wake)
            .arg(k.publish);
        let _changed: u64 = call.invoke_async(conn).await.map_err(redis_error)?;
        Ok(())
    }
}
