//! Recurring series on Redis: the Rust half of `lua/series.lua`.
//!
//! # Ground rules
//!
//! - The scripts move a series' head atomically with the claim that first takes it
//!   (`claim.lua`), reading its next occurrences from a list computed here: Lua knows no
//!   cron and no time zones, Rust knows both. A list holds the occurrences after the head,
//!   at least `LIST` of them and enough to pass the server's time when it was computed.
//! - A claim notes a list running low (the head stays; a fill gives it a new list) or run
//!   out before the claim's time (`dry`: after a downtime longer than the list; the head is
//!   left pending and Rust decides its catch-up with `series::on_due` and the claim's
//!   server time, then a fill moves the head). A fill applies only if the series is still
//!   at the version and head its note saw: two claimers computing the same fill, or a fill
//!   racing a `schedule_recurring`, change nothing twice. A fill that fails or is lost (a
//!   kill) is noted again by the next claim; nothing depends on it but how soon a dry head
//!   runs.
//! - A list is bounded (`upcoming`): after a backlog it holds `4 * LIST` occurrences, all
//!   due; the claim that runs through it notes it dry, and the fill that decides the
//!   catch-up also tells how many of the new list's due occurrences the claims run without
//!   counting again (`go`, stored before the list), so a backlog costs each script the
//!   list's length, never the backlog's.
//! - Times are the server's: the first occurrence follows the server's `TIME`.
//! - A series stores the spec its occurrences are made with (`record.rs`): the scripts
//!   create each head with it, in its level's due set, so a head is an ordinary job of its
//!   kind and priority, claimed by the claims of its kind. A record from before series had
//!   a spec makes its occurrences with the queue's plain spec, and is listed with it.

use ::redis::cmd;

mod record;

pub(super) use record::{entries, SeriesNote, SeriesRecord};

use super::reply::redis_error;
use super::scripts::spec_tail;
use super::{Partition, Redis};
use crate::core::error::Error;
use crate::core::kind::Spec;
use crate::core::recurrence::Recurrence;
use crate::core::series::{self, on_due, CatchUp, Recurring, RecurringInfo, Step};

/// Occurrences a list holds after its head, at least; a claim notes it low below 8.
const LIST: usize = 16;

/// The series rules' parse cache ([`series::Rules`]) behind a lock, shared by this queue's
/// calls: a rule is cloned out, so the lock is never held across an await.
#[derive(Debug, Default)]
pub(super) struct Rules(std::sync::Mutex<series::Rules>);

impl Rules {
    fn get(&self, text: &str) -> Result<Recurrence, Error> {
        self.0.lock().expect("rules").get(text).cloned()
    }
}

/// `head` and the occurrences after it: `LIST` past `now`, or after a backlog (a head far
/// behind `now`) `4 * LIST` in all, so that a script reads and writes a bounded list
/// whatever the backlog; a claim that runs through it notes it dry, and Rust decides the
/// rest.
fn upcoming(rule: &Recurrence, head: Option<u64>, now: u64) -> Vec<u64> {
    let mut times: Vec<u64> = head.into_iter().collect();
    let mut past_now = 0;
    while let Some(&last) = times.last() {
        if past_now >= LIST || times.len() > 4 * LIST {
            break;
        }
        match rule.next_after_nanos(last) {
            Some(next) => {
                past_now += usize::from(next > now);
                times.push(next);
            }
            None => break,
        }
    }
    times
}

impl Redis {
    /// The server's clock, nanoseconds since the epoch.
    async fn server_now(&self) -> Result<u64, Error> {
        let mut conn = self.conn()?;
        let (secs, micros): (u64, u64) = cmd("TIME")
            .query_async(&mut conn)
            .await
            .map_err(redis_error)?;
        Ok(secs
            .saturating_mul(1_000_000_000)
            .saturating_add(micros * 1000))
    }

    pub(super) async fn set_series(
        &self,
        name: &str,
        rule: &Recurrence,
        payload: &[u8],
        catch_up: CatchUp,
        spec: &Spec,
    ) -> Result<(Recurring, Option<u64>), Error> {
        let now = self.server_now().await?;
        let mut times = upcoming(rule, rule.next_after_nanos(now), now);
        let mut conn = self.writer()?;
        let keys = &self.part(name).keys;
        let text = rule.to_string();
        let tail = spec_tail(spec);
        let mut outcome = None;
        loop {
            let set = (self.scripts)
                .recurring_set(
                    &mut conn,
                    keys,
                    name,
                    &text,
                    catch_up.runs(),
                    payload,
                    &times,
                    &tail,
                )
                .await;
            self.changed();
            let (this, head, last) = set?;
            // The first call's outcome: a second one only replaces what it stored.
            let outcome = *outcome.get_or_insert(this);
            match last.and_then(|last| rule.next_after_nanos(last)) {
                // Every time sent was at or before the last delivery (the server's clock
                // went back): the times after it, once.
                Some(after) if head.is_none() && times.first().is_some_and(|&t| t < after) => {
                    times = upcoming(rule, Some(after), now);
                }
                _ => return Ok((outcome, head)),
            }
        }
    }

    pub(super) async fn cancel_series(&self, name: &str) -> Result<bool, Error> {
        let mut conn = self.writer()?;
        let keys = &self.part(name).keys;
        self.scripts.recurring_cancel(&mut conn, keys, name).await
    }

    pub(super) async fn list_series(&self) -> Result<Vec<RecurringInfo>, Error> {
        let mut out = Vec::new();
        for part in &self.parts {
            let mut conn = self.conn()?;
            let all: Vec<(String, String)> = cmd("HGETALL")
                .arg(&part.keys.series)
                .query_async(&mut conn)
                .await
                .map_err(redis_error)?;
            for (name, record) in all {
                let SeriesRecord {
                    runs,
                    head,
                    last,
                    rule: text,
                    spec,
                } = SeriesRecord::decode(&record)?;
                let rule = match self.rules.get(&text) {
                    Ok(rule) => rule,
                    Err(err) => {
                        series::unparsable(&name, &text, &err);
                        continue;
                    }
                };
                let catch_up = CatchUp::from_runs(runs);
                out.push(RecurringInfo::new(
                    name,
                    rule,
                    catch_up,
                    spec.unwrap_or_else(|| self.plain.clone()),
                    head,
                    last,
                ));
            }
        }
        out.sort_by(|a, b| a.name().cmp(b.name()));
        Ok(out)
    }

    /// Acts on a claim's notes (`now`: the claim's server time); returns (a dry head was
    /// given its list: it may be due at once, a dry head's fill failed). Failures are
    /// logged, not returned: the claim's jobs are leased already, and the next claim notes
    /// it again.
    pub(super) async fn fill_series(
        &self,
        part: &Partition,
        now: u64,
        notes: Vec<SeriesNote>,
    ) -> (bool, bool) {
        let (mut moved, mut failed) = (false, false);
        for note in notes {
            match self.fill_one(part, now, &note).await {
                Ok(()) => moved |= note.dry,
                Err(err) => {
                    failed |= note.dry;
                    tracing::warn!(series = %note.name, error = %err, "wheel-jobs: could not give a recurring series its next occurrences; the next claim tries again")
                }
            }
        }
        (moved, failed)
    }

    /// Gives a noted series its next occurrences; for a dry note, with the catch-up decided
    /// here: the head to run, and how many of the list's occurrences from it, all due now
    /// and within the policy's count, the claims run without counting again (`go`): after
    /// a backlog longer than the list, counting in the list cannot tell.
    async fn fill_one(&self, part: &Partition, now: u64, note: &SeriesNote) -> Result<(), Error> {
        let rule = match self.rules.get(&note.rule) {
            Ok(rule) => rule,
            Err(err) => {
                // Retrying would keep a dry head pending, first in line, for good.
                series::unparsable(&note.name, &note.rule, &err);
                let mut conn = self.conn()?;
                (self.scripts)
                    .recurring_fill(&mut conn, &part.keys, note, None)
                    .await?;
                self.changed();
                return Ok(());
            }
        };
        let head = if note.dry {
            let catch_up = CatchUp::from_runs(note.runs);
            match note.head.map(|head| on_due(&rule, catch_up, head, now)) {
                Some(Step::Deliver { .. }) => note.head,
                Some(Step::Skip { to }) => to,
                None => rule.next_after_nanos(now),
            }
        } else {
            note.head
        };
        let times = upcoming(&rule, head, now);
        // A dry head that runs (or its due successor): every occurrence due now from it is
        // within the policy's count, else `on_due` would have moved the head further.
        let go = if note.dry {
            times.iter().take_while(|&&t| t <= now).count()
        } else {
            0
        };
        let mut conn = self.conn()?;
        (self.scripts)
            .recurring_fill(&mut conn, &part.keys, note, Some((&times, go)))
            .await?;
        // A moved head may be due at once.
        self.changed();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_list_reaches_past_now_and_holds_enough() {
        let second = 1_000_000_000;
        let rule = Recurrence::every(Duration::from_secs(1)).unwrap();
        let list = upcoming(&rule, Some(10 * second), 10 * second);
        assert_eq!(list.len(), LIST + 1);
        assert_eq!(list[0], 10 * second);
        assert_eq!(list[LIST], (10 + LIST as u64) * second);
        // After a short downtime the list runs `LIST` past the server's time.
        let list = upcoming(&rule, Some(10 * second), 20 * second);
        assert_eq!(*list.last().unwrap(), (20 + LIST as u64) * second);
        // After a long one it stops at `4 * LIST` after the head: bounded by the list, not
        // the backlog.
        let list = upcoming(&rule, Some(10 * second), 1000 * second);
        assert_eq!(list.len(), 4 * LIST + 1);
        assert_eq!(*list.last().unwrap(), (10 + 4 * LIST as u64) * second);
        assert!(upcoming(&rule, None, 0).is_empty());
    }
}
