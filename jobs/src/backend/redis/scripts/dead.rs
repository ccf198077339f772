//! The scripts on dead jobs: `remove_dead.lua` (one by id, or the oldest up to a limit) and
//! `revive.lua` (the same two modes).

use ::redis::{FromRedisValue, ParsingError, Value};

use super::{when_args, Scripts};
use crate::backend::redis::conn::Conn;
use crate::backend::redis::keys::Keys;
use crate::backend::redis::reply::{array, int, parsing, redis_error};
use crate::core::error::Error;
use crate::core::job::When;

/// `revive.lua`'s reply: `{how many revived, their run_at_ns}`.
struct ReviveReply {
    revived: u64,
    run_at: u64,
}

impl FromRedisValue for ReviveReply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let decode = || -> Result<ReviveReply, Error> {
            let [revived, run_at] = <[Value; 2]>::try_from(array(v)?)
                .map_err(|_| Error::storage("short revive reply"))?;
            let revived = int(&revived)?;
            let run_at = if revived == 0 { 0 } else { int(&run_at)? };
            Ok(ReviveReply { revived, run_at })
        };
        decode().map_err(parsing)
    }
}

impl Scripts {
    /// `remove_dead.lua` by id: deletes a dead job.
    pub(in crate::backend::redis) async fn remove_dead(
        &self,
        conn: &mut Conn,
        k: &Keys,
        id: &str,
    ) -> Result<bool, Error> {
        Ok(self.remove_dead_call(conn, k, "id", id).await? == 1)
    }

    /// `remove_dead.lua` by limit: deletes up to `limit` dead jobs; how many.
    pub(in crate::backend::redis) async fn purge_dead(
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
        let mut call = script!("kinds.lua", "remove_dead.lua").prepare_invoke();
        call.key(&k.meta)
            .key(&k.payload)
            .key(&k.dead)
            .key(&k.counts)
            .key(&k.errors)
            .key(&k.levels)
            .arg(mode)
            .arg(arg);
        call.invoke_async(conn).await.map_err(redis_error)
    }

    /// `revive.lua` by id: makes a dead job pending at `when`; its run_at if it was dead.
    pub(in crate::backend::redis) async fn revive(
        &self,
        conn: &mut Conn,
        k: &Keys,
        id: &str,
        when: When,
    ) -> Result<Option<u64>, Error> {
        let reply = self.revive_call(conn, k, "id", id, when).await?;
        Ok((reply.revived == 1).then_some(reply.run_at))
    }

    /// `revive.lua` by limit: up to `limit` (at most 512) dead jobs pending at `when`,
    /// oldest deaths first; how many, and their run_at.
    pub(in crate::backend::redis) async fn revive_dead(
        &self,
        conn: &mut Conn,
        k: &Keys,
        limit: usize,
        when: When,
    ) -> Result<(u64, u64), Error> {
        let reply = (self.revive_call(conn, k, "limit", &limit.to_string(), when)).await?;
        Ok((reply.revived, reply.run_at))
    }

    async fn revive_call(
        &self,
        conn: &mut Conn,
        k: &Keys,
        mode: &str,
        arg: &str,
        when: When,
    ) -> Result<ReviveReply, Error> {
        let (when_mode, value, score) = when_args(when);
        let mut call = script!("kinds.lua", "gates.lua", "revive.lua").prepare_invoke();
        call.key(&k.meta)
            .key(&k.due)
            .key(&k.counts)
            .key(&k.dead)
            .key(&k.levels)
            .key(&k.gate_timers);
        call.arg(mode)
            .arg(arg)
            .arg(when_mode)
            .arg(value)
            .arg(score)
            .arg(&k.wake)
            .arg(k.publish);
        call.invoke_async(conn).await.map_err(redis_error)
    }
}
