//! The scripts on recurring series: `recurring_set.lua`, `recurring_fill.lua`,
//! `recurring_cancel.lua` (each with `lua/series.lua` prepended).

use ::redis::{FromRedisValue, ParsingError, ScriptInvocation, Value};

use super::Scripts;
use crate::backend::redis::conn::Conn;
use crate::backend::redis::keys::Keys;
use crate::backend::redis::reply::{array, int, opt_ns, parsing, redis_error, text};
use crate::backend::redis::series::{entries, SeriesNote};
use crate::core::error::Error;
use crate::core::series::Recurring;

/// `recurring_set.lua`'s reply: `{1 | 0 (created | updated), head_ns or "", last_ns or ""}`.
struct SetReply {
    created: bool,
    head: Option<u64>,
    last: Option<u64>,
}

impl FromRedisValue for SetReply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let decode = || -> Result<SetReply, Error> {
            let [created, head, last] = <[Value; 3]>::try_from(array(v)?)
                .map_err(|_| Error::storage("short recurring_set reply"))?;
            Ok(SetReply {
                created: int(&created)? == 1,
                head: opt_ns(&text(head)?)?,
                last: opt_ns(&text(last)?)?,
            })
        };
        decode().map_err(parsing)
    }
}

/// The keys every script that changes a series takes first, in `series.lua`'s order:
/// meta, payload, due, counts, series, series_payload, series_next, levels.
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
        .key(&k.levels)
}

impl Scripts {
    /// `recurring_set.lua`: creates or replaces a series; `times` are its first occurrences
    /// after the server's time, the head first; `tail` the spec tail of its occurrences
    /// (`spec_tail`). The outcome, the head's time and the last
    /// delivered occurrence's (no head but a last: every time was at or before it).
    #[allow(clippy::too_many_arguments)] // the script's own arguments, each named once here
    pub(in crate::backend::redis) async fn recurring_set(
        &self,
        conn: &mut Conn,
        k: &Keys,
        name: &str,
        rule: &str,
        runs: u32,
        payload: &[u8],
        times: &[u64],
        tail: &str,
    ) -> Result<(Recurring, Option<u64>, Option<u64>), Error> {
        let mut call = script!("kinds.lua", "series.lua", "recurring_set.lua").prepare_invoke();
        series_keys(&mut call, k).key(&k.seq);
        call.arg(name)
            .arg(rule)
            .arg(runs)
            .arg(payload)
            .arg(entries(times))
            .arg(&k.wake)
            .arg(k.publish)
            .arg(tail);
        let reply: SetReply = call.invoke_async(conn).await.map_err(redis_error)?;
        let outcome = if reply.created {
            Recurring::Created
        } else {
            Recurring::Updated
        };
        Ok((outcome, reply.head, reply.last))
    }

    /// `recurring_fill.lua`: the head at `times[0]` and its next occurrences, the first
    /// `go` of them to run without counting, if the series is still at `version` with the
    /// head `head`; whether it applied. No `times`: the series' recurrence no longer parses,
    /// and it lets go of its head (an ordinary job from then on).
    pub(in crate::backend::redis) async fn recurring_fill(
        &self,
        conn: &mut Conn,
        k: &Keys,
        note: &SeriesNote,
        times: Option<(&[u64], usize)>,
    ) -> Result<bool, Error> {
        let mut call = script!("kinds.lua", "series.lua", "recurring_fill.lua").prepare_invoke();
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
    pub(in crate::backend::redis) async fn recurring_cancel(
        &self,
        conn: &mut Conn,
        k: &Keys,
        name: &str,
    ) -> Result<bool, Error> {
        let mut call = script!("kinds.lua", "series.lua", "recurring_cancel.lua").prepare_invoke();
        series_keys(&mut call, k).arg(name);
        let removed: u64 = call.invoke_async(conn).await.map_err(redis_error)?;
        Ok(removed == 1)
    }
}
