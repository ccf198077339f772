//! Recurring series: what a series is ([`RecurringInfo`], [`CatchUp`], [`Recurring`]), the
//! names of its occurrences, and the one rule a store applies when an occurrence falls due.
//! Pure: no I/O, time handed in.
//!
//! # Ground rules
//!
//! - A series `name` has at most one **head**: its one pending occurrence, an ordinary job
//!   whose id is [`occurrence_id`]`(name, time)` (`digest@2026-12-01T12:00:00Z`), due at
//!   its own time. Times only grow along a series, so the series makes no occurrence id
//!   twice. A job already under the id it places next is adopted only if never delivered
//!   (pending, attempt 0: its first claim is the one that moves the series); any other
//!   (delivered, retrying, dead) is left alone and that time is skipped, or its claims,
//!   being no first claims, would stop the series.
//! - The head moves only in the atomic step that claims it for the first time (the same
//!   store transaction embedded, the same script on Redis), by [`on_due`]: that step
//!   creates the next head, so a live series always has exactly one pending occurrence
//!   and no kill can lose or duplicate one. A redelivery (attempt 2 and on) of an
//!   occurrence moves nothing: its successor already exists. Cancelling the series
//!   removes the head; an occurrence already delivered runs on. Setting it again with the
//!   same recurrence keeps the head (new payload), so the claim still decides catch-up;
//!   with another recurrence the head is replaced by the first new occurrence after now,
//!   and an old head already due is left pending as an ordinary job ([`keeps_due_head`]):
//!   setting a series never drops a missed occurrence that its policy would run.
//! - Catch-up is decided at that claim from the occurrences `M` in `[head, now]`: one of
//!   them runs as usual; when later ones have come due too (the queue was not consumed
//!   across several), the policy picks which run (module [`CatchUp`]).
//! - Names are valid ids without `@`, short enough for the longest suffix
//!   ([`MAX_NAME_LEN`]), so an occurrence id always names its series before its first `@`.

use std::collections::HashMap;
use std::time::SystemTime;

use crate::core::error::Error;
use crate::core::job::{system_time, MAX_ID_LEN};
use crate::core::kind::{JobOptions, Spec};
use crate::core::recurrence::{utc_text, Recurrence};

/// The longest series name, in bytes: an occurrence id (`name@` and an RFC 3339 UTC time
/// with nanoseconds, 30 bytes) must fit [`MAX_ID_LEN`].
pub(crate) const MAX_NAME_LEN: usize = MAX_ID_LEN - 31;

/// What to do about occurrences that fell due while nothing consumed the queue (every
/// process down, or the queue closed), decided when the oldest of them is claimed.
///
/// An occurrence claimed late while its successor is still in the future always runs,
/// whatever the policy: it is the current one, just late. The policies differ once later
/// occurrences have come due too, whatever the reason: every process down, or consumers a
/// whole period behind (a backlog), so `Latest` and `None` also shed load; `All` runs every
/// occurrence up to `max` behind. Each occurrence that runs has its own time as
/// [`run_at`](crate::Delivery::run_at), so a handler can tell a late run from an on-time one.
///
/// # Examples
///
/// ```
/// use wheel_jobs::CatchUp;
///
/// assert_eq!(CatchUp::default(), CatchUp::Latest);
/// assert_eq!(CatchUp::All { max: 1 }.normalized(), CatchUp::Latest);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CatchUp {
    /// Run once, for the most recent missed occurrence, then go on on schedule.
    #[default]
    Latest,
    /// Run none of them: skip to the first occurrence at or after the claim.
    None,
    /// Run each missed occurrence, the `max` most recent if more were missed, oldest first.
    /// `All { max: 0 }` is [`None`](CatchUp::None) and `All { max: 1 }` is
    /// [`Latest`](CatchUp::Latest).
    All {
        /// The most missed occurrences to run.
        max: u32,
    },
}

impl CatchUp {
    /// How many of the missed occurrences run: `None` 0, `Latest` 1, `All` its `max`.
    pub(crate) fn runs(self) -> u32 {
        match self {
            CatchUp::None => 0,
            CatchUp::Latest => 1,
            CatchUp::All { max } => max,
        }
    }

    /// The policy that runs `runs` missed occurrences.
    pub(crate) fn from_runs(runs: u32) -> CatchUp {
        match runs {
            0 => CatchUp::None,
            1 => CatchUp::Latest,
            max => CatchUp::All { max },
        }
    }

    /// The same policy in its simplest spelling (`All { max: 0 }` is `None`,
    /// `All { max: 1 }` is `Latest`), as [`RecurringInfo::catch_up`] reports it.
    pub fn normalized(self) -> CatchUp {
        CatchUp::from_runs(self.runs())
    }
}

/// How a series' occurrences are made, for
/// [`JobQueue::schedule_recurring_with`](crate::JobQueue::schedule_recurring_with): the
/// [`JobOptions`] each occurrence is scheduled with (its kind, priority, attempts, backoff
/// and lease) and the [`CatchUp`] policy. A [`CatchUp`] or a [`JobOptions`] converts into
/// one, the other part left at its default.
///
/// The options resolve as a job's do (the series' own, else its kind's defaults, else the
/// queue's) when the series is set, and are stored with the series: every occurrence is
/// made with them, whichever process claims the one before it. Setting the series again
/// sets them again, on its pending occurrence too. An occurrence is claimed by the workers
/// of its kind ([`run_kind`](crate::JobQueue::run_kind), [`worker`](crate::JobQueue::worker));
/// the first claim of each moves the series on, as for the kind `""`. A key
/// ([`JobOptions::key`], `key_limit`, `key_rate`) and a [`Dedup`](crate::Dedup) mode are
/// refused ([`Error::is_invalid_input`]): a series makes its occurrences one at a time
/// under ids of its own, and a head left waiting for a key's slot would stall the series.
///
/// # Examples
///
/// ```
/// use wheel_jobs::{CatchUp, JobOptions, RecurringOptions};
///
/// let digest = RecurringOptions::new()
///     .options(JobOptions::kind("digest").priority(1).max_attempts(3))
///     .catch_up(CatchUp::None);
/// assert_eq!(digest.kind_name(), Some("digest"));
/// assert_eq!(RecurringOptions::from(CatchUp::None).kind_name(), None);
/// ```
#[derive(Debug, Clone, Default)]
pub struct RecurringOptions {
    pub(crate) options: JobOptions,
    pub(crate) catch_up: CatchUp,
}

impl RecurringOptions {
    /// The queue's defaults for the kind `""`, under [`CatchUp::Latest`].
    pub fn new() -> RecurringOptions {
        RecurringOptions::default()
    }

    /// Occurrences of `kind`, with its defaults: `RecurringOptions::new().options(JobOptions::kind(kind))`.
    pub fn kind(kind: impl Into<String>) -> RecurringOptions {
        RecurringOptions::new().options(JobOptions::kind(kind))
    }

    /// The options every occurrence is scheduled with, replacing those set before (a kind
    /// given to [`RecurringOptions::kind`] too: name it in `options`).
    pub fn options(mut self, options: JobOptions) -> RecurringOptions {
        self.options = options;
        self
    }

    /// The catch-up policy.
    pub fn catch_up(mut self, catch_up: CatchUp) -> RecurringOptions {
        self.catch_up = catch_up;
        self
    }

    /// The kind the occurrences are of, if one was set.
    pub fn kind_name(&self) -> Option<&str> {
        self.options.kind_name()
    }
}

impl From<CatchUp> for RecurringOptions {
    fn from(catch_up: CatchUp) -> RecurringOptions {
        RecurringOptions::new().catch_up(catch_up)
    }
}

impl From<JobOptions> for RecurringOptions {
    fn from(options: JobOptions) -> RecurringOptions {
        RecurringOptions::new().options(options)
    }
}

/// What [`JobQueue::schedule_recurring`](crate::JobQueue::schedule_recurring) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recurring {
    /// A new series was stored, with its first occurrence.
    Created,
    /// A series of that name existed: its recurrence, payload and catch-up policy were
    /// replaced. With the same recurrence its pending occurrence stays (with the new
    /// payload), so occurrences missed while nothing consumed are still caught up; with
    /// another, the pending occurrence is replaced by the first of the new recurrence after
    /// now, unless it is due already: then it stays, and runs once as an ordinary job with
    /// its old payload (not under [`CatchUp::None`] if a later occurrence was due too).
    Updated,
}

/// A snapshot of one series, from [`JobQueue::list_recurring`](crate::JobQueue::list_recurring).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecurringInfo {
    name: String,
    recurrence: Recurrence,
    catch_up: CatchUp,
    spec: Spec,
    next_run: Option<u64>,
    last_run: Option<u64>,
}

impl RecurringInfo {
    /// A snapshot as a backend read it, times in wall-clock nanoseconds; `spec` is what its
    /// occurrences are made with.
    pub(crate) fn new(
        name: String,
        recurrence: Recurrence,
        catch_up: CatchUp,
        spec: Spec,
        next_run: Option<u64>,
        last_run: Option<u64>,
    ) -> RecurringInfo {
        RecurringInfo {
            name,
            recurrence,
            catch_up: catch_up.normalized(),
            spec,
            next_run,
            last_run,
        }
    }

    /// The kind its occurrences are of (`""` unless set by
    /// [`RecurringOptions`]).
    pub fn kind(&self) -> &str {
        &self.spec.kind
    }

    /// The priority its occurrences are claimed at.
    pub fn priority(&self) -> i8 {
        self.spec.priority
    }

    /// How many times each occurrence is delivered at most.
    pub fn max_attempts(&self) -> u32 {
        self.spec.max_attempts
    }

    /// What its occurrences are made with, resolved.
    pub(crate) fn spec(&self) -> &Spec {
        &self.spec
    }

    /// The series' name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// When its occurrences fall; its text form is [`Display`](std::fmt::Display)ed.
    pub fn recurrence(&self) -> &Recurrence {
        &self.recurrence
    }

    /// The zone a cron recurrence is read in (see [`Recurrence::tz`]).
    pub fn tz(&self) -> Option<&str> {
        self.recurrence.tz()
    }

    /// The catch-up policy, [`normalized`](CatchUp::normalized).
    pub fn catch_up(&self) -> CatchUp {
        self.catch_up
    }

    /// The time of the pending occurrence (its job id is `name@` that time), or `None` if
    /// the recurrence has no occurrence left in the stores' range. It may be in the past: an occurrence due and not yet claimed (nothing consuming, or
    /// after a downtime, until its claim applies the catch-up policy).
    pub fn next_run(&self) -> Option<SystemTime> {
        self.next_run.map(system_time)
    }

    /// [`next_run`](Self::next_run) in wall-clock nanoseconds, as occurrence ids spell it.
    pub(crate) fn next_run_nanos(&self) -> Option<u64> {
        self.next_run
    }

    /// The time of the last occurrence delivered (first delivery; a retry does not move
    /// it), or `None` before the first.
    pub fn last_run(&self) -> Option<SystemTime> {
        self.last_run.map(system_time)
    }
}

/// `Ok` if `name` can name a series: a valid id of at most [`MAX_NAME_LEN`] bytes, without
/// `@`.
pub(crate) fn check_name(name: &str) -> Result<(), Error> {
    if name.is_empty() || name.len() > MAX_NAME_LEN || name.contains('@') {
        return Err(Error::invalid_series_name(name.len(), MAX_NAME_LEN));
    }
    Ok(())
}

/// The job id of the occurrence of series `name` at `at` (nanoseconds since the epoch).
pub(crate) fn occurrence_id(name: &str, at: u64) -> String {
    format!("{name}@{}", utc_text(at))
}

/// The series an occurrence id names (the text before its first `@`), if it has one.
pub(crate) fn series_of(id: &str) -> Option<&str> {
    id.split_once('@').map(|(name, _)| name)
}

/// The series an occurrence id names, if `id` has exactly an occurrence id's form:
/// `name@` and a time as [`occurrence_id`] writes it. Redis routes such ids by `name`.
pub(crate) fn occurrence_series(id: &str) -> Option<&str> {
    let (name, time) = id.split_once('@')?;
    let at = crate::core::recurrence::parse_utc_text(time)?;
    (utc_text(at) == time).then_some(name)
}

/// What the first claim of a head occurrence does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Deliver it; the next head is at `next` (`None`: the recurrence has no more).
    Deliver { next: Option<u64> },
    /// Do not deliver it (a later occurrence superseded it): delete it, and the head is at
    /// `to` instead. A `to` already due (always under `Latest` and `All`) is run by the
    /// same claim, its own step being `Deliver`: left pending, it could be superseded in
    /// turn by every claim that comes more than an interval after it.
    Skip { to: Option<u64> },
}

/// The rule of the ground rules: the head at `head` is claimed for the first time at
/// `now`, under `catch_up`.
pub(crate) fn on_due(rule: &Recurrence, catch_up: CatchUp, head: u64, now: u64) -> Step {
    let next = rule.next_after_nanos(head);
    let Some(second) = next.filter(|&n| n <= now) else {
        // Only the head is due: it runs, late or not.
        return Step::Deliver { next };
    };
    let runs = catch_up.runs();
    if runs == 0 {
        // The first occurrence at or after `now`: one falling due this instant is on time.
        return Step::Skip {
            to: rule.next_after_nanos(now.saturating_sub(1)),
        };
    }
    // Count the due occurrences `[head, now]`, up to `runs + 1`.
    let (mut due, mut at) = (2u64, second);
    while due <= u64::from(runs) {
        match rule.next_after_nanos(at) {
            Some(later) if later <= now => (due, at) = (due + 1, later),
            _ => return Step::Deliver { next },
        }
    }
    // More than `runs` are due: the head moves to the oldest of the `runs` most recent.
    let mut to = rule.last_at_or_before_nanos(now);
    for _ in 1..runs {
        to = to.and_then(|t| rule.last_at_or_before_nanos(t.checked_sub(1)?));
    }
    Step::Skip { to }
}

/// Logs a series whose stored recurrence no longer parses (a later version refuses what an
/// earlier one stored, or a zone left the time-zone database). Such a series is never
/// listed, and its pending occurrence, when claimed, runs as an ordinary job and leaves the
/// series without one: failing the claim instead would fail every claim that meets it.
/// [`schedule_recurring`](crate::JobQueue::schedule_recurring) sets it anew,
/// [`cancel_recurring`](crate::JobQueue::cancel_recurring) removes it.
pub(crate) fn unparsable(name: &str, rule: &str, err: &Error) {
    tracing::warn!(
        series = name,
        recurrence = rule,
        error = %err,
        "wheel-jobs: a recurring series' stored recurrence no longer parses; it is not listed \
         and its pending occurrence runs once as an ordinary job; set it again with \
         schedule_recurring or remove it with cancel_recurring"
    );
}

/// Whether the head at `head`, due at `now`, still runs when the series is given another
/// recurrence (it stays pending, an ordinary job, and the new recurrence's head follows):
/// unless `catch_up` is [`CatchUp::None`] and its successor is due too, which `None` would
/// skip. Under `Latest` or `All` it is the one missed occurrence that runs: no occurrence
/// missed under the old recurrence is dropped silently by the change.
pub(crate) fn keeps_due_head(rule: &Recurrence, catch_up: CatchUp, head: u64, now: u64) -> bool {
    catch_up.runs() > 0 || rule.next_after_nanos(head).is_none_or(|next| next > now)
}

// ===== impl Rules =====

/// Parsed recurrences by their text form, so a store does not parse a series' stored rule
/// at every claim of its head. Both backends keep one: the embedded store inside its
/// single-threaded store (`&mut`), Redis behind a `Mutex` (cloning the rule out).
#[derive(Debug, Default)]
pub(crate) struct Rules(HashMap<String, Recurrence>);

impl Rules {
    /// The most texts kept: past it the cache starts over, so the texts of replaced
    /// series do not pile up.
    const MAX: usize = 1024;

    /// The recurrence whose text form is `text`, parsed on first use;
    /// [`Error::is_storage`] if it does not parse (what a store holds must).
    pub(crate) fn get(&mut self, text: &str) -> Result<&Recurrence, Error> {
        if !self.0.contains_key(text) {
            let rule = text.parse().map_err(|err| {
                Error::storage(format!("a stored recurrence does not parse: {err}"))
            })?;
            if self.0.len() >= Self::MAX {
                self.0.clear();
            }
            self.0.insert(text.to_owned(), rule);
        }
        Ok(&self.0[text])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const S: u64 = 1_000_000_000;

    #[track_caller]
    fn check(catch_up: CatchUp, head: u64, now: u64, expect: Step) {
        let every_10s = Recurrence::every(Duration::from_secs(10)).unwrap();
        assert_eq!(
            on_due(&every_10s, catch_up, head * S, now * S),
            expect,
            "{catch_up:?}, head {head} s, now {now} s"
        );
    }

    fn deliver(next: u64) -> Step {
        Step::Deliver {
            next: Some(next * S),
        }
    }

    fn skip(to: u64) -> Step {
        Step::Skip { to: Some(to * S) }
    }

    #[test]
    fn catch_up_table() {
        for policy in [
            CatchUp::None,
            CatchUp::Latest,
            CatchUp::All { max: 3 },
            CatchUp::All { max: 0 },
        ] {
            // On time, or late while the next is still ahead: it runs.
            check(policy, 100, 100, deliver(110));
            check(policy, 100, 109, deliver(110));
        }
        // 100, 110, 120, 130 due at 135.
        check(CatchUp::None, 100, 135, skip(140));
        check(CatchUp::All { max: 0 }, 100, 135, skip(140));
        check(CatchUp::Latest, 100, 135, skip(130));
        check(CatchUp::All { max: 1 }, 100, 135, skip(130));
        check(CatchUp::All { max: 2 }, 100, 135, skip(120));
        check(CatchUp::All { max: 3 }, 100, 135, skip(110));
        check(CatchUp::All { max: 4 }, 100, 135, deliver(110));
        check(CatchUp::All { max: 99 }, 100, 135, deliver(110));
        // The claim of the new head after a skip: it is the only one due, or within `max`.
        check(CatchUp::Latest, 130, 135, deliver(140));
        check(CatchUp::All { max: 2 }, 120, 135, deliver(130));
        check(CatchUp::All { max: 2 }, 130, 135, deliver(140));
        // Exactly at the next occurrence's time, it is due too.
        check(CatchUp::None, 100, 110, skip(110));
        check(CatchUp::Latest, 100, 110, skip(110));
    }

    #[test]
    fn a_due_head_is_kept_unless_none_would_skip_it() {
        let every_10s = Recurrence::every(Duration::from_secs(10)).unwrap();
        for (catch_up, head, now, keep) in [
            (CatchUp::Latest, 100, 135, true),
            (CatchUp::All { max: 2 }, 100, 135, true),
            (CatchUp::None, 100, 105, true),
            (CatchUp::None, 100, 110, false),
            (CatchUp::None, 100, 135, false),
        ] {
            assert_eq!(
                keeps_due_head(&every_10s, catch_up, head * S, now * S),
                keep,
                "{catch_up:?} {head} {now}"
            );
        }
    }

    #[test]
    fn the_end_of_the_range_ends_the_series() {
        let every_10s = Recurrence::every(Duration::from_secs(10)).unwrap();
        let last = u64::MAX / (10 * S) * (10 * S);
        assert_eq!(
            on_due(&every_10s, CatchUp::Latest, last, u64::MAX),
            Step::Deliver { next: None }
        );
        assert_eq!(
            on_due(&every_10s, CatchUp::None, last - 10 * S, u64::MAX),
            Step::Skip { to: None }
        );
    }

    #[test]
    fn names_and_ids() {
        assert!(check_name("digest").is_ok());
        assert!(check_name(&"n".repeat(MAX_NAME_LEN)).is_ok());
        for bad in ["", "a@b", &"n".repeat(MAX_NAME_LEN + 1)] {
            let err = check_name(bad).unwrap_err();
            assert!(err.is_invalid_id(), "{bad:?}: {err}");
        }
        let at = 1_796_126_400 * S; // 2026-12-01T12:00:00Z
        assert_eq!(occurrence_id("digest", at), "digest@2026-12-01T12:00:00Z");
        assert_eq!(
            occurrence_id("digest", at + 5 * S / 10),
            "digest@2026-12-01T12:00:00.5Z"
        );
        // The fixed form, at the ends of the range too, and read back exactly.
        for (at, text) in [
            (0, "d@1970-01-01T00:00:00Z"),
            (1, "d@1970-01-01T00:00:00.000000001Z"),
            (5_020_000_000, "d@1970-01-01T00:00:05.02Z"),
            (u64::MAX, "d@2554-07-21T23:34:33.709551615Z"),
        ] {
            assert_eq!(occurrence_id("d", at), text);
            assert_eq!(occurrence_series(text), Some("d"), "{text}");
        }
        let longest = occurrence_id(&"n".repeat(MAX_NAME_LEN), u64::MAX - 1);
        assert_eq!(longest.len(), MAX_ID_LEN, "{longest}");
        assert_eq!(series_of("digest@2026-12-01T12:00:00Z"), Some("digest"));
        assert_eq!(series_of("plain"), None);
        assert_eq!(
            occurrence_series("digest@2026-12-01T12:00:00Z"),
            Some("digest")
        );
        assert_eq!(
            occurrence_series("digest@2026-12-01T12:00:00.5Z"),
            Some("digest")
        );
        for other in [
            "user@example.com",
            "digest@2026-12-01T12:00:00+00:00",
            "digest@2026-12-01T12:00:00.500Z",
            "digest@2026-12-01",
        ] {
            assert_eq!(occurrence_series(other), None, "{other}");
        }
    }

    #[test]
    fn rules_parse_each_text_once_and_refuse_garbage() {
        let mut rules = Rules::default();
        let every = rules.get("every 5m").unwrap().clone();
        assert_eq!(every, Recurrence::every(Duration::from_secs(300)).unwrap());
        assert_eq!(rules.get("every 5m").unwrap(), &every);
        assert_eq!(rules.0.len(), 1);
        assert!(rules.get("every now and then").unwrap_err().is_storage());
        assert_eq!(rules.0.len(), 1, "a text that does not parse is not kept");
        for n in 1..=Rules::MAX as u64 {
            rules.get(&format!("every {n}s")).unwrap();
        }
        assert!(rules.0.len() <= Rules::MAX, "bounded: {}", rules.0.len());
        assert_eq!(rules.get("every 5m").unwrap(), &every);
    }
}
