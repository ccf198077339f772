//! The claim, for a set of kinds or all: the expired leases of the claimed kinds, then their
//! due pending jobs by priority (highest first), run_at, then id, up to `max` in all and up
//! to each kind's own most (`ClaimKinds`); each job
//! leased for its own lease by [`Machine::claim`](crate::core::state::Machine::claim) (or
//! killed, out of its own attempts), a series' head moving its series on its first claim
//! (`series.rs`).
//!
//! # Ground rules
//!
//! - A claim reads only keys of the claimed kinds (`index.rs`): one range of running keys
//!   per kind with leases, then the pending levels highest first, the kinds of one level
//!   merged by run_at, until `max` keys are taken; per claim O(groups + taken). Jobs of
//!   other kinds are not read, leased, killed or counted in `next_due`. A kind's range is
//!   cut at what that kind may still take, so a kind at its most stops being read while
//!   the others' go on.
//! - Expired leases come first, in (kind, lease end, id) order; the contract leaves their
//!   order among themselves open.
//! - A claim hands out only jobs of its kind, even the occurrence a series' head gives in
//!   its place (`FirstClaim::Instead`): one of another kind is left pending.
//! - A claim leases each job at most once. The occurrence a head gives in its place may be a
//!   job made by hand under that occurrence's id (adopted), due too: its own key may be
//!   among those the claim read before, and meeting it leased is no error (it would fail
//!   every claim of its kind for good). That key takes no room: the claim reads the due
//!   keys again, past every one it met, for as many as it skipped; those may include a
//!   head its own first claims made due.
//! - A job killed with a successor waiting (`Dedup::AllowWhileRunning`) is replaced by it
//!   in the same transaction (`jobs::hand_over`): still counted in `died`, but no dead job
//!   is kept; the successor is due for the next claim, not this one. The claim answers
//!   the earliest run_at of the successors it handed over: they may be of kinds it does
//!   not claim (not in its `next_due`), so the caller wakes the idle consumers for them.
//! - A gated job waiting for its key's slot is not in `due`, so no claim reads it
//!   (`gates.rs`). A claim first rebalances the gates of its kinds whose rate window ended
//!   (their timers, a bounded number), so the jobs they admit are claimable by it; it
//!   settles the gates its leases and kills touched before reading its `next_due`, which is
//!   no later than the earliest gate timer of its kinds.

use std::collections::{HashMap, HashSet};

use super::counts::Counters;
use super::index::{self, Position};
use super::series::{self, FirstClaim};
use super::tables::Tables;
use super::Store;
use crate::backend::{ClaimBatch, ClaimKinds, Claimed};
use crate::core::error::Error;
use crate::core::job::add;
use crate::core::state::{Claim, Status};

impl Store {
    /// Leases up to `max` due jobs of the kinds `kinds` names; the earliest run_at of the
    /// successors made pending by its kills; whether anything changed (a job delivered or
    /// killed).
    pub(super) fn claim(
        &mut self,
        t: &mut Tables<'_>,
        counts: &mut Counters,
        now: u64,
        max: usize,
        kinds: &ClaimKinds,
    ) -> Result<(ClaimBatch, Option<u64>, bool), Error> {
        if t.paused {
            // Nothing is due until a resume, which wakes the consumers itself.
            let batch = ClaimBatch {
                jobs: Vec::new(),
                next_due: None,
                now,
                died: 0,
            };
            return Ok((batch, None, false));
        }
        // Expired hold-offs go a bounded number per claim; a schedule meeting one deletes
        // it too.
        let expired = t.expire_held(now)?;
        // Gates whose rate window ended admit their next jobs before the walk.
        let woken = t.wake_gates(kinds, now)?;
        if woken > 0 {
            t.settle(counts)?;
        }
        let mut room = Room {
            kinds,
            max,
            taken: HashMap::new(),
        };
        let (mut due, walked) = due_keys(t, now, max, &mut room, &HashSet::new())?;
        let changed = !due.is_empty() || expired > 0 || woken > 0;
        let mut taken = Taken {
            jobs: Vec::with_capacity(due.len()),
            ..Taken::default()
        };
        // The keys met so far, once one was skipped: what the next read passes over.
        let mut met = HashSet::new();
        loop {
            let mut skipped = 0;
            for (at, id) in &due {
                if let Some(i) = taken.instead.iter().position(|(leased, _)| leased == id) {
                    let (_, kind) = taken.instead.swap_remove(i);
                    room.give_back(&kind);
                    skipped += 1;
                    continue;
                }
                self.claim_key(t, counts, now, kinds, *at, id.clone(), &mut taken)?;
            }
            if skipped == 0 {
                break;
            }
            met.extend(due.into_iter().map(|(_, id)| id));
            met.extend(taken.instead.drain(..).map(|(id, _)| id));
            due = due_keys(t, now, skipped, &mut room, &met)?.0;
            if due.is_empty() {
                break;
            }
        }
        // The slots its leases took and its kills freed: settled before `next_due` reads
        // what they admitted.
        t.settle(counts)?;
        // A claim that took nothing changed nothing: the walk's first keys are still the
        // first ones (no second walk for an empty claim).
        let next_due = match walked {
            Some(first) if !changed => first,
            _ => next_due(t, kinds)?,
        };
        let next_due = match (next_due, t.next_timer(kinds)?) {
            (Some(due), Some(timer)) => Some(due.min(timer)),
            (due, timer) => due.or(timer),
        };
        Ok((
            ClaimBatch {
                jobs: taken.jobs,
                next_due,
                now,
                died: taken.died,
            },
            taken.handed,
            changed,
        ))
    }

    /// Claims the job at the due key `(at, id)` into `taken`: leases it (or kills it), or
    /// for a series' head on its first claim moves the series and leases the occurrence it
    /// gives in its place, if any.
    #[allow(clippy::too_many_arguments)] // the claim's parts, each named once here
    fn claim_key(
        &mut self,
        t: &mut Tables<'_>,
        counts: &mut Counters,
        now: u64,
        kinds: &ClaimKinds,
        at: u64,
        mut id: String,
        taken: &mut Taken,
    ) -> Result<(), Error> {
        let Some(mut stored) = t.load(&id)? else {
            return Err(Error::storage(format!(
                "due index names a missing job {id:?} at {at}"
            )));
        };
        // The first claim of a series' head moves the series in this transaction.
        let before = stored.job;
        let first = before.attempt == 0 && before.status == Status::Pending;
        if first && id.contains('@') {
            match series::on_first_claim(t, counts, &mut self.rules, now, &id, &stored)? {
                FirstClaim::Deliver => {}
                FirstClaim::Skip => return Ok(()),
                FirstClaim::Instead(instead) => {
                    stored = t.load(&instead)?.ok_or_else(|| {
                        Error::storage(format!("series occurrence {instead:?} is missing"))
                    })?;
                    if !kinds.takes(&stored.spec.kind) || stored.waiting {
                        // Not this claim's kind (a head of another kind, adopted by an
                        // earlier version), or waiting for its key's slot (a keyed head
                        // no version adopts): it stays pending for its own claimers or
                        // its gate; the series has moved past it, so a claim just runs
                        // it once it is due and admitted.
                        return Ok(());
                    }
                    // Its own key may come later in this claim (a job made by hand
                    // under that id, due too, and adopted).
                    let kind = stored.spec.kind.to_string();
                    taken.instead.push((instead.clone(), kind));
                    id = instead;
                }
            }
        }
        let mut job = stored.job;
        let token = self.token();
        let until = add(now, stored.spec.lease);
        let outcome = job.claim(now, until, token, stored.spec.max_attempts);
        if outcome == Claim::NotDue {
            return Err(Error::storage(format!(
                "due index disagrees with job {id:?}"
            )));
        }
        let mut record = stored.with(job);
        if let Some(error) = stored.job.claim_error() {
            record.error = Some(error);
        }
        if outcome == Claim::Died && stored.next {
            // Its successor takes its place, due for a later claim.
            let error = record.error;
            let at = super::jobs::hand_over(t, counts, &id, &stored, 0, error)?;
            taken.handed = Some(taken.handed.map_or(at, |h| h.min(at)));
        } else {
            t.set(counts, &id, Some(&stored), Some(record))?;
        }
        taken.died += u64::from(outcome == Claim::Died);
        if outcome == Claim::Deliver {
            taken.jobs.push(Claimed {
                id,
                payload: stored.payload,
                attempt: job.attempt,
                run_at: job.run_at,
                token,
                spec: stored.spec,
            });
        }
        Ok(())
    }
}

/// What a claim has taken so far.
#[derive(Default)]
struct Taken {
    jobs: Vec<Claimed>,
    /// Jobs it killed.
    died: u64,
    /// The earliest run_at of the successors its kills made pending.
    handed: Option<u64>,
    /// The jobs it leased in a series' head's place whose own keys it has not met yet,
    /// with their kinds.
    instead: Vec<(String, String)>,
}

/// The kinds `kinds` names with running jobs, each with its first lease end, in kind order.
fn lease_kinds(t: &Tables<'_>, kinds: &ClaimKinds) -> Result<Vec<(String, u64)>, Error> {
    match kinds {
        ClaimKinds::All => index::lease_kinds(t, None),
        ClaimKinds::Some(kinds) => {
            let mut out = Vec::new();
            for (kind, _) in kinds {
                out.extend(index::lease_kinds(t, Some(kind))?);
            }
            Ok(out)
        }
    }
}

/// The (kind, level) groups of the kinds `kinds` names with pending jobs.
fn levels(t: &Tables<'_>, kinds: &ClaimKinds) -> Result<Vec<index::Level>, Error> {
    match kinds {
        ClaimKinds::All => index::levels(t, None),
        ClaimKinds::Some(kinds) => {
            let mut out = Vec::new();
            for (kind, _) in kinds {
                out.extend(index::levels(t, Some(kind))?);
            }
            Ok(out)
        }
    }
}

/// What each kind may still take, for a claim of `max` in all.
struct Room<'k> {
    kinds: &'k ClaimKinds,
    max: usize,
    taken: HashMap<String, usize>,
}

impl Room<'_> {
    fn left(&self, kind: &str) -> usize {
        let taken = self.taken.get(kind).copied().unwrap_or(0);
        self.kinds.most(kind, self.max).saturating_sub(taken)
    }

    fn take(&mut self, kind: &str, n: usize) {
        if n > 0 && matches!(self.kinds, ClaimKinds::Some(_)) {
            *self.taken.entry(kind.to_owned()).or_default() += n;
        }
    }

    /// Frees one key of `kind` taken but not claimed (skipped).
    fn give_back(&mut self, kind: &str) {
        if let Some(taken) = self.taken.get_mut(kind) {
            *taken = taken.saturating_sub(1);
        }
    }
}

/// The keys a claim takes at `now`: up to `max` expired leases and due pending jobs of the
/// kinds `room` names (each kind up to what `room` leaves it), but those of `skip`, in the
/// order they are claimed; and, when it read every group's first key, the earliest of them
/// (what [`next_due`] reads while nothing changed).
fn due_keys(
    t: &Tables<'_>,
    now: u64,
    max: usize,
    room: &mut Room<'_>,
    skip: &HashSet<String>,
) -> Result<(Vec<Position>, Option<Option<u64>>), Error> {
    let kinds = room.kinds;
    let mut due = Vec::new();
    let leases = lease_kinds(t, kinds)?;
    let earliest_lease = leases.iter().map(|(_, first)| *first).min();
    for (k, first) in leases {
        if due.len() == max {
            return Ok((due, None));
        }
        if first <= now {
            let stream = unmet(index::lease_range(t, &k, None, now)?, skip);
            let got = index::merge(vec![stream], (max - due.len()).min(room.left(&k)))?;
            room.take(&k, got.len());
            due.extend(got);
        }
    }
    // Levels in key order are (kind, level); a claim reads them level first, each level's
    // kinds merged by run_at, each kind's range cut at what it may still take (one range
    // per kind at a level).
    let mut levels = levels(t, kinds)?;
    let first = earliest_lease
        .into_iter()
        .chain(levels.iter().map(|l| l.first))
        .min();
    levels.retain(|l| l.first <= now);
    levels.sort_by_key(|l| l.level);
    for group in levels.chunk_by(|a, b| a.level == b.level) {
        if due.len() == max {
            break;
        }
        let mut streams: Vec<index::Stream<'_>> = Vec::with_capacity(group.len());
        let mut tags: Vec<&str> = Vec::with_capacity(group.len());
        for l in group {
            let left = room.left(&l.kind);
            if left > 0 {
                let range = unmet(index::due_range(t, &l.kind, l.level, None, now)?, skip);
                streams.push(Box::new(range.take(left)));
                tags.push(&l.kind);
            }
        }
        if streams.is_empty() {
            continue;
        }
        let got = index::merge_from(streams, max - due.len())?;
        due.reserve(got.len());
        for (position, i) in got {
            room.take(tags[i], 1);
            due.push(position);
        }
    }
    Ok((due, Some(first)))
}

/// `stream` without the keys of `skip` (as it is for none).
fn unmet<'a>(stream: index::Stream<'a>, skip: &'a HashSet<String>) -> index::Stream<'a> {
    if skip.is_empty() {
        return stream;
    }
    Box::new(stream.filter(move |key| !matches!(key, Ok((_, id)) if skip.contains(id))))
}

/// The first due key (pending run_at or lease end) of the kinds `kinds` names.
fn next_due(t: &Tables<'_>, kinds: &ClaimKinds) -> Result<Option<u64>, Error> {
    let leases = lease_kinds(t, kinds)?;
    let levels = levels(t, kinds)?;
    Ok(leases
        .iter()
        .map(|(_, first)| *first)
        .chain(levels.iter().map(|l| l.first))
        .min())
}
