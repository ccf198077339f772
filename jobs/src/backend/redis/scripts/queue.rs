//! The scripts on a whole partition or queue: `layout.lua`, `counts.lua`, `list.lua`,
//! `pause.lua`.

use ::redis::{FromRedisValue, ParsingError, Value};

use super::{job_info, Scripts};
use crate::backend::redis::conn::Conn;
use crate::backend::redis::keys::Keys;
use crate::backend::redis::reply::{array, int, parsing, redis_error, score_ns, text};
use crate::core::error::Error;
use crate::core::job::{Counts, JobInfo, JobState};

/// `counts.lua`'s reply: `{pending, running, dead, paused (1|0), next run_at_ns or ""}`.
struct CountsReply(Counts);

impl FromRedisValue for CountsReply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let decode = || -> Result<CountsReply, Error> {
            let [pending, running, dead, paused, next] = <[Value; 5]>::try_from(array(v)?)
                .map_err(|_| Error::storage("short counts reply"))?;
            let next = text(next)?;
            let next_due = if next.is_empty() {
                None
            } else {
                Some(next.parse().map_err(|_| Error::storage("bad run_at"))?)
            };
            Ok(CountsReply(Counts::new(
                int(&pending)?,
                int(&running)?,
                int(&dead)?,
                int(&paused)? == 1,
                next_due,
            )))
        };
        decode().map_err(parsing)
    }
}

impl Scripts {
    /// `layout.lua`: the queue's recorded partition count and keyspace format, `partitions`
    /// and `format` if none were.
    pub(in crate::backend::redis) async fn layout(
        &self,
        conn: &mut Conn,
        layout: &str,
        partitions: usize,
        format: u32,
    ) -> Result<(usize, u32), Error> {
        let mut call = script!("layout.lua").prepare_invoke();
        call.key(layout).arg(partitions).arg(format);
        call.invoke_async(conn).await.map_err(redis_error)
    }

    /// `counts.lua`: one partition's counters, paused flag and next pending run_at.
    pub(in crate::backend::redis) async fn counts(
        &self,
        conn: &mut Conn,
        k: &Keys,
    ) -> Result<Counts, Error> {
        let mut call = script!("counts.lua").prepare_invoke();
        call.key(&k.meta).key(&k.due).key(&k.counts);
        let reply: CountsReply = call.invoke_async(conn).await.map_err(redis_error)?;
        Ok(reply.0)
    }

    /// `list.lua`: up to `limit` jobs of one partition in `state` after the position
    /// `after` (nanoseconds and id; the scores are microseconds), each with its position in
    /// nanoseconds (its score × 1000: converting back gives the score exactly).
    pub(in crate::backend::redis) async fn list(
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
        let mut call = script!("list.lua").prepare_invoke();
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
