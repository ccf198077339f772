//! `claim.lua`: the acks folded into a claim, then up to `max` due jobs of one partition
//! leased, decoded into a [`ClaimReply`].

use ::redis::{FromRedisValue, ParsingError, Value};

use super::{tail_spec, Scripts};
use crate::backend::redis::conn::Conn;
use crate::backend::redis::keys::Keys;
use crate::backend::redis::reply::{array, bytes, int, parsing, redis_error, score_ns, text};
use crate::backend::redis::series::SeriesNote;
use crate::backend::{ClaimKinds, Claimed};
use crate::core::error::Error;
use crate::core::kind::Spec;

/// What one partition's claim returned.
pub(in crate::backend::redis) struct ClaimReply {
    /// The jobs leased, in due order.
    pub(in crate::backend::redis) jobs: Vec<Claimed>,
    /// The server's time, in its nanoseconds.
    pub(in crate::backend::redis) now: u64,
    /// The first due time left (a pending job's or a lease end), in the server's
    /// nanoseconds.
    pub(in crate::backend::redis) next_due: Option<u64>,
    /// The series whose lists need Rust (`series.rs`).
    pub(in crate::backend::redis) notes: Vec<SeriesNote>,
    /// How many jobs it killed (out of attempts).
    pub(in crate::backend::redis) died: u64,
    /// The answers to the acks folded into it, in their order.
    pub(in crate::backend::redis) acked: Vec<bool>,
}

impl FromRedisValue for ClaimReply {
    /// `{now_us, next_due_us or "", notes, died, acks' answers, then per job: id, payload,
    /// attempt, run_at_ns, token, spec tail}` (see `claim.lua`: the plain tail for a job
    /// stored without; "" for the same as the job before's; an integer i for the ith
    /// distinct tail the reply sent).
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let decode = || -> Result<ClaimReply, Error> {
            let mut items = array(v)?.into_iter();
            let mut next = || {
                items
                    .next()
                    .ok_or_else(|| Error::storage("short claim reply"))
            };
            let now_us = int(&next()?)?;
            let next_due = text(next()?)?;
            let next_due = if next_due.is_empty() {
                None
            } else {
                Some(score_ns(&next_due)?)
            };
            let notes = Vec::<SeriesNote>::from_redis_value(next()?).map_err(Error::storage)?;
            let died = int(&next()?)?;
            let acked = array(next()?)?
                .iter()
                .map(|v| Ok(int(v)? == 1))
                .collect::<Result<Vec<bool>, Error>>()?;
            let rest: Vec<Value> = items.collect();
            let mut jobs: Vec<Claimed> = Vec::with_capacity(rest.len() / 6);
            // The distinct specs the reply sent, in the order it sent them.
            let mut specs: Vec<Spec> = Vec::new();
            for chunk in rest.chunks(6) {
                let [id, payload, attempt, run_at, token, tail] = chunk else {
                    return Err(Error::storage("short claim reply"));
                };
                let spec = if let Value::Int(i) = tail {
                    usize::try_from(*i)
                        .ok()
                        .and_then(|i| i.checked_sub(1))
                        .and_then(|i| specs.get(i))
                        .cloned()
                        .ok_or_else(|| Error::storage("a claimed job's spec refers to none sent"))?
                } else {
                    match tail_spec(&text(tail.clone())?)? {
                        Some(spec) => {
                            specs.push(spec.clone());
                            spec
                        }
                        None => jobs
                            .last()
                            .map(|job| job.spec.clone())
                            .ok_or_else(|| Error::storage("a claimed job without its spec"))?,
                    }
                };
                jobs.push(Claimed {
                    id: text(id.clone())?,
                    payload: bytes(payload.clone())?,
                    attempt: u32::try_from(int(attempt)?).unwrap_or(u32::MAX),
                    run_at: int(run_at)?,
                    token: int(token)?,
                    spec,
                });
            }
            Ok(ClaimReply {
                jobs,
                now: now_us.saturating_mul(1000),
                next_due,
                notes,
                died,
                acked,
            })
        };
        decode().map_err(parsing)
    }
}

impl Scripts {
    /// `claim.lua`: applies `acks` (answered in [`ClaimReply::acked`]), then leases up to
    /// `max` due jobs of one partition of the kinds `kinds` names (each at most its own
    /// most); `plain_tail` is the
    /// queue's plain spec (`spec_tail`), the lease and attempts of a job stored without.
    #[allow(clippy::too_many_arguments)] // the script's own arguments, each named once here
    pub(in crate::backend::redis) async fn claim(
        &self,
        conn: &mut Conn,
        k: &Keys,
        max: usize,
        plain_tail: &str,
        kinds: &ClaimKinds,
        acks: &[(String, u64)],
    ) -> Result<ClaimReply, Error> {
        let mut call = script!(
            "kinds.lua",
            "gates.lua",
            "held.lua",
            "next.lua",
            "acks.lua",
            "series.lua",
            "claim.lua"
        )
        .prepare_invoke();
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
            .key(&k.running)
            .key(&k.levels)
            .key(&k.held)
            .key(&k.held_until)
            .key(&k.next)
            .key(&k.next_payload)
            .key(&k.gate_timers);
        call.arg(max).arg(plain_tail);
        match kinds {
            ClaimKinds::All => {
                call.arg("*").arg(&k.wake).arg(k.publish);
            }
            ClaimKinds::Some(kinds) => {
                call.arg(kinds.len()).arg(&k.wake).arg(k.publish);
                for (kind, most) in kinds {
                    call.arg(kind).arg((*most).min(max));
                }
            }
        }
        for (id, token) in acks {
            call.arg(id).arg(token);
        }
        let reply: ClaimReply = call.invoke_async(conn).await.map_err(redis_error)?;
        if reply.acked.len() != acks.len() {
            return Err(Error::storage("short ack answers in a claim reply"));
        }
        Ok(reply)
    }
}
