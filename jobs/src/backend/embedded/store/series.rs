//! The embedded store's recurring series: the `series` table's record, and each series step
//! inside a batch's transaction (`crate::core::series` has the rules).
//!
//! # Ground rules
//!
//! - `series` maps a name to its record: the catch-up policy, the head's time, the last
//!   delivered occurrence's time, the recurrence's text form, the spec its occurrences are
//!   made with and the payload. The head is an ordinary job of that spec in `jobs`
//!   (`name@time`), written through `Tables::set` like any other: indexed under its kind
//!   and priority, claimed by the claims of its kind.
//! - A record of version 1 (written before series had a spec) has none: its occurrences
//!   are made with the plain spec of the queue that places them, as then, and it is
//!   rewritten in version 1 until the series is set again.
//! - Every step (set, cancel, the first claim of a head) runs inside the batch's one write
//!   transaction, and its series change goes into the same log record as its job changes:
//!   a crash keeps both or neither.
//! - A layout change bumps `VERSION` (and the store's `FORMAT` in `store/mod.rs` if an
//!   older binary opening that format would misread it); the decoder reads every earlier
//!   version. Version 2 came within format 6, unreleased: no released binary opens it.

use std::borrow::Cow;

use redb::ReadableTable;

use super::counts::Counters;
use super::tables::{storage, Stored, Tables};
use crate::backend::embedded::record;
use crate::core::error::Error;
use crate::core::kind::Spec;
use crate::core::recurrence::Recurrence;
use crate::core::series::{self, occurrence_id, CatchUp, Recurring, RecurringInfo, Rules, Step};
use crate::core::state::{Machine, Status};

/// The version written for a series with a spec: version 1's header and rule, the spec
/// (`record::push_spec`), the payload.
const VERSION: u8 = 2;
/// The version written before series had a spec (and still for a series without one).
const VERSION_1: u8 = 1;
const HEADER: usize = 1 + 4 + 1 + 8 + 1 + 8 + 4;

/// One series as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Record {
    /// [`CatchUp::runs`].
    pub(super) runs: u32,
    pub(super) head: Option<u64>,
    pub(super) last: Option<u64>,
    /// The recurrence's text form.
    pub(super) rule: String,
    /// What its occurrences are made with (no key, no hold-off); `None` for a series set
    /// by a version before series had a spec: the plain spec of the queue placing them.
    pub(super) spec: Option<Spec>,
    pub(super) payload: Vec<u8>,
}

fn corrupt() -> Error {
    Error::storage("a recurring series record is corrupt")
}

impl Record {
    /// A fixed little-endian header (version, runs, head, last, the rule's length), the
    /// rule, the spec (version 2; version 1, without a spec, for a series that has none),
    /// the payload.
    pub(super) fn encode(&self) -> Vec<u8> {
        let spec_len = self
            .spec
            .as_ref()
            .map_or(0, |spec| 2 + spec.kind.len() + 5 * 10); // five varints, 10 bytes at most
        let mut out = Vec::with_capacity(HEADER + self.rule.len() + spec_len + self.payload.len());
        out.push(match self.spec {
            Some(_) => VERSION,
            None => VERSION_1,
        });
        out.extend_from_slice(&self.runs.to_le_bytes());
        for time in [self.head, self.last] {
            out.push(u8::from(time.is_some()));
            out.extend_from_slice(&time.unwrap_or(0).to_le_bytes());
        }
        let rule_len = u32::try_from(self.rule.len()).expect("a recurrence's text is short");
        out.extend_from_slice(&rule_len.to_le_bytes());
        out.extend_from_slice(self.rule.as_bytes());
        if let Some(spec) = &self.spec {
            record::push_spec(&mut out, spec);
        }
        out.extend_from_slice(&self.payload);
        out
    }

    /// The spec its occurrences are made with: its own, else `plain`.
    fn spec_or<'s>(&'s self, plain: &'s Spec) -> &'s Spec {
        self.spec.as_ref().unwrap_or(plain)
    }

    pub(super) fn decode(bytes: &[u8]) -> Result<Record, Error> {
        if bytes.len() < HEADER || !matches!(bytes[0], VERSION | VERSION_1) {
            return Err(corrupt());
        }
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8"));
        let time_at = |at: usize| match bytes[at] {
            0 => Ok(None),
            1 => Ok(Some(u64_at(at + 1))),
            _ => Err(corrupt()),
        };
        let runs = u32::from_le_bytes(bytes[1..5].try_into().expect("4 bytes"));
        let (head, last) = (time_at(5)?, time_at(14)?);
        let rule_len = u32::from_le_bytes(bytes[23..27].try_into().expect("4 bytes"));
        let rule_end = HEADER
            .checked_add(usize::try_from(rule_len).map_err(|_| corrupt())?)
            .filter(|&end| end <= bytes.len())
            .ok_or_else(corrupt)?;
        let rule = std::str::from_utf8(&bytes[HEADER..rule_end]).map_err(|_| corrupt())?;
        let mut payload_at = rule_end;
        let spec = match bytes[0] {
            VERSION => Some(record::spec_at(bytes, &mut payload_at).map_err(|_| corrupt())?),
            _ => None,
        };
        Ok(Record {
            runs,
            head,
            last,
            rule: rule.to_owned(),
            spec,
            payload: bytes[payload_at..].to_vec(),
        })
    }
}

impl Tables<'_> {
    fn load_series(&self, name: &str) -> Result<Option<Record>, Error> {
        match self.series.get(name).map_err(storage)? {
            Some(bytes) => Ok(Some(Record::decode(bytes.value())?)),
            None => Ok(None),
        }
    }

    /// Every series, in name order.
    fn all_series(&self) -> Result<Vec<(String, Record)>, Error> {
        let mut out = Vec::new();
        for entry in self.series.iter().map_err(storage)? {
            let (name, bytes) = entry.map_err(storage)?;
            out.push((name.value().to_owned(), Record::decode(bytes.value())?));
        }
        Ok(out)
    }

    /// Stores (or for `None` deletes) a series' record, logged like a job's.
    fn set_series(&mut self, name: &str, record: Option<&Record>) -> Result<(), Error> {
        self.put_series(name, record.map(Record::encode).as_deref())
    }
}

/// Makes the occurrence at `at` (or the first after it whose id is free, and after `last`)
/// the head of `name`: creates its job with `spec` and `payload`, or adopts a
/// never-delivered pending job of that id (attempt 0) of that kind and priority, without a
/// key. Returns the head's time, `None` if the recurrence has none left.
#[allow(clippy::too_many_arguments)] // the series' parts, each named once here
fn place_head(
    t: &mut Tables<'_>,
    counts: &mut Counters,
    rule: &Recurrence,
    name: &str,
    mut at: Option<u64>,
    last: Option<u64>,
    spec: &Spec,
    payload: &[u8],
) -> Result<Option<u64>, Error> {
    while let Some(time) = at {
        if let Some(last) = last.filter(|&last| time <= last) {
            // At or before an occurrence delivered already (the clock stepped back, or a
            // claim moved the head while `at` was computed): its job may be acked and
            // gone, so its free id proves nothing. Times only grow.
            at = rule.next_after_nanos(last);
            continue;
        }
        let id = occurrence_id(name, time);
        match t.load(&id)? {
            None => {
                let job = record::Record {
                    job: Machine::new(time),
                    spec: Cow::Borrowed(spec),
                    error: None,
                    payload,
                    next: false,
                    waiting: false,
                };
                t.set(counts, &id, None, Some(job))?;
                return Ok(Some(time));
            }
            // Never delivered, and of the series' kind and priority without a key, as an
            // occurrence is: it becomes the head as it is (its first claim moves the series
            // on).
            Some(stored)
                if stored.job.status == Status::Pending
                    && stored.job.attempt == 0
                    && fits(&stored, spec) =>
            {
                return Ok(Some(time))
            }
            // Delivered already (a job of that id scheduled and run by hand, or retrying):
            // its claims are no first claims and could never move the series, and it is
            // never made twice. Or of another kind or priority, or with a key: a head is
            // claimed by the claimers of the series' kind at its priority, and a keyed job
            // may wait for its key's slot; adopted, it would move the series only when a
            // worker of its kind runs, or its key lets it.
            Some(_) => at = rule.next_after_nanos(time),
        }
    }
    Ok(None)
}

/// Whether `job` is of `spec`'s kind and priority and has no key, as the series'
/// occurrences are: only such a job may be adopted as its head (a keyed one may wait for
/// its key's slot, and a head is leased by the claim that moves the series). Its attempts,
/// backoff and lease stay its own.
fn fits(job: &Stored, spec: &Spec) -> bool {
    job.spec.kind == spec.kind && job.spec.priority == spec.priority && job.spec.key.is_none()
}

/// Deletes the head job of a series if it is still pending.
fn drop_head(
    t: &mut Tables<'_>,
    counts: &mut Counters,
    name: &str,
    head: Option<u64>,
) -> Result<(), Error> {
    let Some(head) = head else { return Ok(()) };
    let id = occurrence_id(name, head);
    if let Some(stored) = t.load(&id)? {
        if stored.job.status == Status::Pending {
            t.set(counts, &id, Some(&stored), None)?;
        }
    }
    Ok(())
}

/// Gives the series' head at `head`, if it is still a never-delivered pending job, the
/// spec `spec` and the payload `payload` (`Tables::set` moves it to its new kind's and
/// priority's indexes and counts); returns its time if so.
fn keep_head(
    t: &mut Tables<'_>,
    counts: &mut Counters,
    name: &str,
    head: Option<u64>,
    spec: &Spec,
    payload: &[u8],
) -> Result<Option<u64>, Error> {
    let Some(head) = head else { return Ok(None) };
    let id = occurrence_id(name, head);
    match t.load(&id)? {
        Some(stored) if stored.job.status == Status::Pending && stored.job.attempt == 0 => {
            let job = record::Record {
                job: stored.job,
                spec: Cow::Borrowed(spec),
                error: None,
                payload,
                next: stored.next,
                waiting: false,
            };
            t.set(counts, &id, Some(&stored), Some(job))?;
            Ok(Some(head))
        }
        _ => Ok(None),
    }
}

/// Whether the old series' head at `head`, due at `now`, runs before a new recurrence
/// replaces it, by [`series::keeps_due_head`] with the old rule (one that no longer parses
/// keeps it: nothing is dropped on a guess).
fn keeps_due_head(old: &Record, head: u64, now: u64) -> bool {
    match old.rule.parse::<Recurrence>() {
        Ok(rule) => series::keeps_due_head(&rule, CatchUp::from_runs(old.runs), head, now),
        Err(_) => true,
    }
}

/// `schedule_recurring`: creates or replaces the series, its occurrences made with `spec`
/// from now on. With the same recurrence its head stays (with the new payload and spec),
/// so a missed occurrence is still caught up at its claim;
/// with another, the head is the first occurrence after `now`, and an old head already due
/// stays pending, an ordinary job, if [`series::keeps_due_head`] says so.
#[allow(clippy::too_many_arguments)] // the op's fields, each named once here
pub(super) fn set(
    t: &mut Tables<'_>,
    counts: &mut Counters,
    now: u64,
    name: &str,
    rule: &Recurrence,
    payload: Vec<u8>,
    catch_up: CatchUp,
    spec: Spec,
) -> Result<(Recurring, Option<u64>), Error> {
    let old = t.load_series(name)?;
    let text = rule.to_string();
    let mut kept = None;
    let outcome = match &old {
        Some(old) if old.rule == text => {
            kept = keep_head(t, counts, name, old.head, &spec, &payload)?;
            Recurring::Updated
        }
        Some(old) => {
            match old.head {
                Some(head) if head <= now && keeps_due_head(old, head, now) => {}
                _ => drop_head(t, counts, name, old.head)?,
            }
            Recurring::Updated
        }
        None => Recurring::Created,
    };
    let last = old.and_then(|old| old.last);
    let head = match kept {
        Some(head) => Some(head),
        None => {
            let first = rule.next_after_nanos(now);
            place_head(t, counts, rule, name, first, last, &spec, &payload)?
        }
    };
    let record = Record {
        runs: catch_up.runs(),
        head,
        last,
        rule: text,
        spec: Some(spec),
        payload,
    };
    t.set_series(name, Some(&record))?;
    Ok((outcome, head))
}

/// `cancel_recurring`: deletes the series and its pending head.
pub(super) fn cancel(t: &mut Tables<'_>, counts: &mut Counters, name: &str) -> Result<bool, Error> {
    let Some(old) = t.load_series(name)? else {
        return Ok(false);
    };
    drop_head(t, counts, name, old.head)?;
    t.set_series(name, None)?;
    Ok(true)
}

/// `list_recurring`: every series with its spec (the plain one for a series without), in
/// name order, but those whose stored recurrence no longer parses (logged).
pub(super) fn list(t: &Tables<'_>, rules: &mut Rules) -> Result<Vec<RecurringInfo>, Error> {
    let mut out = Vec::new();
    for (name, record) in t.all_series()? {
        let rule = match rules.get(&record.rule) {
            Ok(rule) => rule.clone(),
            Err(err) => {
                series::unparsable(&name, &record.rule, &err);
                continue;
            }
        };
        let catch_up = CatchUp::from_runs(record.runs);
        let spec = record.spec.unwrap_or_else(|| t.plain.clone());
        out.push(RecurringInfo::new(
            name,
            rule,
            catch_up,
            spec,
            record.head,
            record.last,
        ));
    }
    Ok(out)
}

/// Whether `id` is the pending occurrence of its series (which `cancel` leaves alone: the
/// series would have none; and `reschedule`: its time is its id and the series').
pub(super) fn is_head(t: &Tables<'_>, id: &str) -> Result<bool, Error> {
    let Some(name) = series::series_of(id) else {
        return Ok(false);
    };
    let head = t.load_series(name)?.and_then(|record| record.head);
    Ok(head.is_some_and(|head| occurrence_id(name, head) == id))
}

/// What the first claim of a pending job does, from [`on_first_claim`].
#[derive(Debug, PartialEq, Eq)]
pub(super) enum FirstClaim {
    /// Deliver it.
    Deliver,
    /// It was a series' head, superseded (deleted) by a later occurrence that is due too:
    /// deliver that one, the job `0`, just made (or adopted) pending, instead.
    Instead(String),
    /// It was a series' head, superseded (deleted) by one not yet due: deliver nothing.
    Skip,
}

/// The first claim of the pending job `id` at `now`: if it is the head of its series,
/// moves the head by [`series::on_due`], in the claim's transaction. An occurrence the
/// catch-up picks instead of the head is run by this same claim when it is due already
/// (always under `Latest` and `All`): left pending for a later claim, it could be
/// superseded in turn whenever claims come further apart than the interval, forever.
pub(super) fn on_first_claim(
    t: &mut Tables<'_>,
    counts: &mut Counters,
    rules: &mut Rules,
    now: u64,
    id: &str,
    job: &Stored,
) -> Result<FirstClaim, Error> {
    let Some(name) = series::series_of(id) else {
        return Ok(FirstClaim::Deliver);
    };
    let Some(mut record) = t.load_series(name)? else {
        return Ok(FirstClaim::Deliver);
    };
    let Some(mut head) = record.head.filter(|&h| occurrence_id(name, h) == id) else {
        // Not this series' head: an ordinary job with an `@` in its id.
        return Ok(FirstClaim::Deliver);
    };
    let rule = match rules.get(&record.rule) {
        Ok(rule) => rule.clone(),
        Err(err) => {
            // Failing the claim would fail every claim that meets this head, for good.
            series::unparsable(name, &record.rule, &err);
            record.last = Some(head);
            record.head = None;
            t.set_series(name, Some(&record))?;
            return Ok(FirstClaim::Deliver);
        }
    };
    let catch_up = CatchUp::from_runs(record.runs);
    let spec = record.spec_or(&t.plain).clone();
    // The head's job: `job` until a skip moves the head to another.
    let (mut head_id, mut head_job) = (id.to_owned(), None::<Stored>);
    // At most twice round: an occurrence the catch-up picks is within the policy's count,
    // so its own step is `Deliver`; each round the head only grows.
    loop {
        match series::on_due(&rule, catch_up, head, now) {
            Step::Deliver { next } => {
                record.last = Some(head);
                record.head = place_head(
                    t,
                    counts,
                    &rule,
                    name,
                    next,
                    record.last,
                    &spec,
                    &record.payload,
                )?;
                t.set_series(name, Some(&record))?;
                return Ok(if head_id == id {
                    FirstClaim::Deliver
                } else {
                    FirstClaim::Instead(head_id)
                });
            }
            Step::Skip { to } => {
                t.set(
                    counts,
                    &head_id,
                    Some(head_job.as_ref().unwrap_or(job)),
                    None,
                )?;
                record.head = place_head(
                    t,
                    counts,
                    &rule,
                    name,
                    to,
                    record.last,
                    &spec,
                    &record.payload,
                )?;
                let due = record.head.filter(|&h| h <= now);
                let loaded = match due {
                    Some(h) => t.load(&occurrence_id(name, h))?.map(|s| (h, s)),
                    None => None,
                };
                let Some((h, next)) = loaded else {
                    t.set_series(name, Some(&record))?;
                    return Ok(FirstClaim::Skip);
                };
                (head, head_id, head_job) = (h, occurrence_id(name, h), Some(next));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn records_round_trip_and_garbage_is_corrupt() {
        let record = Record {
            runs: 3,
            head: Some(42),
            last: None,
            rule: "0 20 * * * in Asia/Shanghai".into(),
            spec: None,
            payload: b"digest".to_vec(),
        };
        assert_eq!(Record::decode(&record.encode()).unwrap(), record);
        let empty = Record {
            runs: 0,
            head: None,
            last: Some(7),
            rule: String::new(),
            spec: None,
            payload: Vec::new(),
        };
        assert_eq!(Record::decode(&empty.encode()).unwrap(), empty);
        assert!(Record::decode(&[]).unwrap_err().is_storage());
        let mut long_rule = record.encode();
        long_rule[23..27].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Record::decode(&long_rule).unwrap_err().is_storage());
        let mut bad_flag = record.encode();
        bad_flag[5] = 2;
        assert!(Record::decode(&bad_flag).unwrap_err().is_storage());
    }

    fn digest() -> Spec {
        Spec {
            kind: "digest".into(),
            priority: -3,
            max_attempts: 2,
            backoff: (Duration::from_millis(250), Duration::from_secs(9)),
            lease: Duration::from_nanos(1_500),
            hold_off: Duration::ZERO,
            key: None,
        }
    }

    /// A series without a spec is written as version 1 wrote it, byte for byte (what an
    /// older store holds, and what it reads back); one with a spec as version 2, the spec
    /// between the rule and the payload.
    #[test]
    fn a_spec_makes_version_2_and_version_1_stays_as_it_was() {
        let old = Record {
            runs: 1,
            head: Some(9),
            last: Some(8),
            rule: "every 1m".into(),
            spec: None,
            payload: b"p".to_vec(),
        };
        let mut v1 = vec![1];
        v1.extend_from_slice(&1u32.to_le_bytes());
        v1.extend_from_slice(&[1, 9, 0, 0, 0, 0, 0, 0, 0, 1, 8, 0, 0, 0, 0, 0, 0, 0]);
        v1.extend_from_slice(&8u32.to_le_bytes());
        v1.extend_from_slice(b"every 1mp");
        assert_eq!(old.encode(), v1);
        assert_eq!(Record::decode(&v1).unwrap(), old);

        let new = Record {
            spec: Some(digest()),
            ..old.clone()
        };
        let bytes = new.encode();
        assert_eq!(bytes[0], 2);
        assert_eq!(&bytes[1..HEADER + 8], &v1[1..HEADER + 8]);
        assert_eq!(&bytes[HEADER + 8..HEADER + 10], &[0xfd, 6]);
        assert_eq!(&bytes[HEADER + 10..HEADER + 16], b"digest");
        assert_eq!(bytes.last(), Some(&b'p'));
        assert_eq!(Record::decode(&bytes).unwrap(), new);
        let empty_payload = Record {
            payload: Vec::new(),
            ..new.clone()
        };
        assert_eq!(
            Record::decode(&empty_payload.encode()).unwrap(),
            empty_payload
        );
        // A spec cut short, or a version no one wrote, is corrupt.
        for cut in [HEADER + 8, HEADER + 9, HEADER + 12, HEADER + 17] {
            assert!(
                Record::decode(&bytes[..cut]).unwrap_err().is_storage(),
                "{cut}"
            );
        }
        let mut v3 = bytes.clone();
        v3[0] = 3;
        assert!(Record::decode(&v3).unwrap_err().is_storage());
    }
}
