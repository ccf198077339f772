//! [`Recurrence`]: when the occurrences of a recurring series fall, as a pure function of
//! time.
//!
//! # Ground rules
//!
//! - Pure: nothing here reads a clock or does I/O. [`Recurrence::next_after`] is a function
//!   of its argument alone, so every process computes the same occurrences, an occurrence's
//!   time can name it, and two processes creating "the next occurrence" create the same job.
//! - `next_after(t) > t`, always; and `next_after` from one occurrence gives the following
//!   one, so a series walked with it never skips or repeats an occurrence.
//! - An interval counts from the Unix epoch: [`Recurrence::every`]`(d)` falls on the
//!   multiples of `d` since 1970-01-01T00:00:00Z, whatever the moment it was scheduled.
//! - A cron expression is read on the wall clock of its zone (UTC unless
//!   [`in_tz`](Recurrence::in_tz)). Each wall-clock time it names runs once:
//!   - at the instant that wall-clock time names, when it names exactly one;
//!   - in a repeated hour (clocks set back), at the first of the two instants;
//!   - in a skipped hour (clocks set forward), at the first instant after the gap, the
//!     moment of the change. Times that land on the same instant are one occurrence.
//!
//!   So a daily job at 02:30 runs every day exactly once, at 03:00 on the night the clocks
//!   skip 02:00–03:00 and at the first 02:30 on the night they repeat it. A wall-clock pace
//!   (`*/15 * * * *`) therefore pauses for the repeated hour; [`Recurrence::every`] or a
//!   cron in UTC keeps a pace in real time.
//! - Inside the crate time is `u64` nanoseconds since the Unix epoch, the stores' unit: an
//!   occurrence after `u64::MAX` nanoseconds (year 2554) does not exist.
//! - The time-zone rules are the IANA database bundled into the binary (`jiff`'s
//!   `tzdb-bundle-always`): no file or network is read at run time, every process of one
//!   build computes the same times, and new rules arrive with a dependency update.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use croner::parser::{CronParser, Year};
use croner::Cron;
use jiff::civil::DateTime;
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::Timestamp;

use crate::core::error::Error;
use crate::core::job::{nanos, system_time};

/// When the occurrences of a recurring series fall: a cron expression on a zone's wall
/// clock, or a fixed interval.
///
/// A cron expression has 5 fields (`minute hour day-of-month month day-of-week`) or 6 with a
/// leading seconds field; names (`MON`, `JAN`), ranges, steps, lists, `L`, `W`, `#` and the
/// nicknames `@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly` are accepted (parsed by
/// [croner](https://docs.rs/croner)). As in Vixie cron, a day-of-month and a day-of-week
/// that are both restricted match when either does (`+MON` asks for both).
///
/// Its text form ([`Display`](fmt::Display), read back by [`FromStr`]) is
/// `0 20 * * * in Asia/Shanghai` for a cron expression and `every 5m` for an interval.
///
/// # Daylight saving
///
/// Each wall-clock time the expression names runs once: in a repeated hour at the first of
/// the two instants, in a skipped hour at the first instant after the gap (the moment the
/// clocks change). In `America/New_York` a daily `30 2 * * *` runs at 03:00 EDT on
/// 8 March 2026 (02:00–03:00 is skipped), and a daily `30 1 * * *` runs once, at 01:30 EDT,
/// on 1 November 2026 (01:00–02:00 is repeated).
///
/// # Examples
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use wheel_jobs::Recurrence;
///
/// # fn main() -> Result<(), wheel_jobs::Error> {
/// let evening = Recurrence::cron("0 20 * * *")?.in_tz("Asia/Shanghai")?;
/// assert_eq!(evening.to_string(), "0 20 * * * in Asia/Shanghai");
///
/// // 2026-12-01T00:00:00Z; 20:00 in Shanghai is 12:00 UTC.
/// let midnight_utc = UNIX_EPOCH + Duration::from_secs(1_796_083_200);
/// let next = evening.next_after(midnight_utc).expect("a daily time always comes");
/// assert_eq!(next, midnight_utc + Duration::from_secs(12 * 3600));
///
/// let five_minutes = Recurrence::every(Duration::from_secs(300))?;
/// assert_eq!(five_minutes.to_string(), "every 5m");
/// assert_eq!("every 5m".parse::<Recurrence>()?, five_minutes);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Recurrence {
    rule: Rule,
}

#[derive(Clone)]
enum Rule {
    Cron {
        /// The expression as given, its fields separated by single spaces.
        expr: Box<str>,
        cron: Box<Cron>,
        zone: TimeZone,
        /// The zone's IANA name as the database spells it.
        zone_name: Box<str>,
    },
    Every {
        /// Never zero.
        nanos: u64,
    },
}

// ===== impl Recurrence =====

impl Recurrence {
    /// A cron expression, read on the UTC wall clock until [`in_tz`](Self::in_tz) names a
    /// zone.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheel_jobs::Recurrence;
    ///
    /// # fn main() -> Result<(), wheel_jobs::Error> {
    /// let nightly = Recurrence::cron("30 2 * * *")?;
    /// assert_eq!(nightly.tz(), Some("UTC"));
    /// assert!(Recurrence::cron("61 * * * *").unwrap_err().is_invalid_recurrence());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_recurrence`] if the expression does not parse, or names no date
    /// that exists (`0 0 30 2 *`, the 30th of February).
    pub fn cron(expr: &str) -> Result<Recurrence, Error> {
        let expr = expr.split_whitespace().collect::<Vec<_>>().join(" ");
        // A year field would let a series end; a series ends by `cancel_recurring`.
        let parser = CronParser::builder().year(Year::Disallowed).build();
        let cron = parser
            .parse(&expr)
            .map_err(|e| Error::invalid_recurrence(format!("cron expression {expr:?}: {e}")))?;
        // Without a year field a pattern that matches at all matches in every 400 years
        // (the Gregorian calendar's cycle; not 28, which 2100, no leap year, breaks), so
        // one search from the epoch tells whether it ever does.
        if cron
            .find_next_occurrence(&DateTime::constant(1970, 1, 1, 0, 0, 0, 0), true)
            .is_err()
        {
            return Err(Error::invalid_recurrence(format!(
                "cron expression {expr:?} names no date that exists"
            )));
        }
        Ok(Recurrence {
            rule: Rule::Cron {
                expr: expr.into(),
                cron: Box::new(cron),
                zone: TimeZone::UTC,
                zone_name: "UTC".into(),
            },
        })
    }

    /// The shortest interval [`every`](Recurrence::every) takes: each occurrence is a job
    /// created, claimed and run in turn, and on Redis a series keeps a list of 16 upcoming
    /// occurrences that must outlast a claim's round trips.
    pub const MIN_INTERVAL: Duration = Duration::from_millis(1);

    /// A fixed interval: the occurrences are the multiples of `interval` since the Unix
    /// epoch (1970-01-01T00:00:00Z), so `every(1 h)` falls on the hour, UTC.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use wheel_jobs::Recurrence;
    ///
    /// # fn main() -> Result<(), wheel_jobs::Error> {
    /// let cleanup = Recurrence::every(Duration::from_secs(300))?;
    /// assert_eq!(cleanup.tz(), None);
    /// assert!(Recurrence::every(Duration::ZERO).unwrap_err().is_invalid_recurrence());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_recurrence`] if `interval` is zero, shorter than
    /// [`MIN_INTERVAL`](Recurrence::MIN_INTERVAL) (1 ms), or longer than `u64::MAX`
    /// nanoseconds (about 584 years).
    pub fn every(interval: Duration) -> Result<Recurrence, Error> {
        match u64::try_from(interval.as_nanos()) {
            Ok(0) => Err(Error::invalid_recurrence("the interval is zero")),
            Ok(_) if interval < Recurrence::MIN_INTERVAL => {
                Err(Error::invalid_recurrence(format!(
                    "the interval {interval:?} is under 1 ms: occurrences that close could not \
                 each be created, claimed and run"
                )))
            }
            Ok(nanos) => Ok(Recurrence {
                rule: Rule::Every { nanos },
            }),
            Err(_) => Err(Error::invalid_recurrence(format!(
                "the interval {interval:?} is longer than u64::MAX nanoseconds"
            ))),
        }
    }

    /// Reads the cron expression on the wall clock of `zone`, an IANA name such as
    /// `Asia/Shanghai` or `America/New_York` (matched without regard to case).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheel_jobs::Recurrence;
    ///
    /// # fn main() -> Result<(), wheel_jobs::Error> {
    /// let digest = Recurrence::cron("0 20 * * *")?.in_tz("europe/berlin")?;
    /// assert_eq!(digest.tz(), Some("Europe/Berlin"));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_recurrence`] if the bundled time-zone database has no zone of
    /// that name, or if `self` is an [`every`](Self::every) interval (which has no wall
    /// clock).
    pub fn in_tz(self, zone: &str) -> Result<Recurrence, Error> {
        let Rule::Cron { expr, cron, .. } = self.rule else {
            return Err(Error::invalid_recurrence(format!(
                "{self} is a fixed interval: it has no time zone"
            )));
        };
        let found = TimeZone::get(zone)
            .map_err(|_| Error::invalid_recurrence(format!("unknown time zone {zone:?}")))?;
        let zone_name = found.iana_name().unwrap_or(zone).into();
        Ok(Recurrence {
            rule: Rule::Cron {
                expr,
                cron,
                zone: found,
                zone_name,
            },
        })
    }

    /// The zone whose wall clock a cron expression is read on (`"UTC"` unless
    /// [`in_tz`](Self::in_tz) named one); `None` for an [`every`](Self::every) interval.
    pub fn tz(&self) -> Option<&str> {
        match &self.rule {
            Rule::Cron { zone_name, .. } => Some(zone_name),
            Rule::Every { .. } => None,
        }
    }

    /// The first occurrence strictly after `after`, or `None` if there is none before the
    /// end of the stores' range (year 2554).
    ///
    /// Times before the Unix epoch count as the epoch.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use wheel_jobs::Recurrence;
    ///
    /// # fn main() -> Result<(), wheel_jobs::Error> {
    /// let hourly = Recurrence::every(Duration::from_secs(3600))?;
    /// let at = UNIX_EPOCH + Duration::from_secs(3600);
    /// assert_eq!(hourly.next_after(at), Some(at + Duration::from_secs(3600)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn next_after(&self, after: SystemTime) -> Option<SystemTime> {
        self.next_after_nanos(nanos(after)).map(system_time)
    }

    /// [`next_after`](Self::next_after) in the stores' unit.
    pub(crate) fn next_after_nanos(&self, after: u64) -> Option<u64> {
        match &self.rule {
            Rule::Every { nanos } => (after / nanos).checked_add(1)?.checked_mul(*nanos),
            Rule::Cron { cron, zone, .. } => {
                let after = timestamp(after);
                let civil = match fold_end(zone, after) {
                    // Every wall-clock time of the repeated hour runs in its first pass,
                    // which `after` is already past: search from the end of the hour.
                    Some(end) => cron.find_next_occurrence(&end, true),
                    None => cron.find_next_occurrence(&zone.to_datetime(after), false),
                };
                civil.ok().and_then(|civil| instant(zone, civil))
            }
        }
    }

    /// The last occurrence at or before `at`, if any is at or after the epoch.
    pub(crate) fn last_at_or_before_nanos(&self, at: u64) -> Option<u64> {
        match &self.rule {
            Rule::Every { nanos } => Some(at / nanos * nanos),
            Rule::Cron { cron, zone, .. } => {
                let at = timestamp(at);
                let civil = match fold_end(zone, at) {
                    // Every wall-clock time of the repeated hour ran in its first pass,
                    // before `at`: the last of them is the latest.
                    Some(end) => cron.find_previous_occurrence(&end, false),
                    None => cron.find_previous_occurrence(&zone.to_datetime(at), true),
                };
                // The search truncates `at` to its wall-clock second, and no whole second
                // lies between the two.
                civil.ok().and_then(|civil| instant(zone, civil))
            }
        }
    }
}

/// The instant a wall-clock time of `zone` names, by the rules of the module docs, in
/// nanoseconds since the epoch; `None` outside `0..=u64::MAX`.
fn instant(zone: &TimeZone, civil: DateTime) -> Option<u64> {
    let ambiguous = zone.to_ambiguous_timestamp(civil);
    let at = match ambiguous.offset() {
        AmbiguousOffset::Unambiguous { offset } => offset.to_timestamp(civil).ok()?,
        AmbiguousOffset::Fold { before, .. } => before.to_timestamp(civil).ok()?,
        // Read with the offset after the change, `civil` is an instant before it (the
        // clocks had not moved yet); the change that follows it is the gap's end.
        AmbiguousOffset::Gap { after, .. } => {
            let early = after.to_timestamp(civil).ok()?;
            zone.following(early).next()?.timestamp()
        }
    };
    nanos_of(at)
}

/// If `at` lies in the second pass of a repeated hour, the wall-clock time that ends it.
fn fold_end(zone: &TimeZone, at: Timestamp) -> Option<DateTime> {
    let civil = zone.to_datetime(at);
    let AmbiguousOffset::Fold { before, after } = zone.to_ambiguous_timestamp(civil).offset()
    else {
        return None;
    };
    if zone.to_offset(at) != after {
        return None;
    }
    // The change is at or before `at`; on the old offset's clock it reads the end of the
    // repeated hour.
    let change = zone
        .preceding(at.checked_add(jiff::SignedDuration::from_nanos(1)).ok()?)
        .next()?
        .timestamp();
    Some(before.to_datetime(change))
}

/// `nanos` as an RFC 3339 UTC time, with as many fraction digits as it needs
/// (`2026-12-01T12:00:00Z`, `2026-12-01T12:00:00.5Z`): the suffix of an occurrence's id.
/// Written out here, not by a library's `Display`, whose choices may change between
/// versions: occurrence ids are stored, and on Redis they route a job to its partition.
pub(crate) fn utc_text(nanos: u64) -> String {
    let at = TimeZone::UTC.to_datetime(timestamp(nanos));
    let mut text = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        at.year(),
        at.month(),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    );
    let fraction = nanos % 1_000_000_000;
    if fraction != 0 {
        text.push('.');
        text.push_str(format!("{fraction:09}").trim_end_matches('0'));
    }
    text.push('Z');
    text
}

/// The nanoseconds of an RFC 3339 time, if it is one within the stores' range.
pub(crate) fn parse_utc_text(text: &str) -> Option<u64> {
    nanos_of(text.parse::<Timestamp>().ok()?)
}

fn timestamp(nanos: u64) -> Timestamp {
    // u64 nanoseconds end in 2554, well inside jiff's range.
    Timestamp::from_nanosecond(i128::from(nanos)).expect("u64 nanoseconds fit a Timestamp")
}

fn nanos_of(at: Timestamp) -> Option<u64> {
    u64::try_from(at.as_nanosecond()).ok()
}

// ===== impl Display, FromStr, Debug, PartialEq =====

/// Interval units of the text form, largest first.
const UNITS: [(&str, u64); 7] = [
    ("d", 86_400_000_000_000),
    ("h", 3_600_000_000_000),
    ("m", 60_000_000_000),
    ("s", 1_000_000_000),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
];

impl fmt::Display for Recurrence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.rule {
            Rule::Cron {
                expr, zone_name, ..
            } => write!(f, "{expr} in {zone_name}"),
            Rule::Every { nanos } => {
                let (unit, size) = UNITS
                    .iter()
                    .find(|(_, size)| nanos % size == 0)
                    .expect("every interval is a whole number of nanoseconds");
                write!(f, "every {}{unit}", nanos / size)
            }
        }
    }
}

/// Reads the text form that [`Display`](fmt::Display) writes: `every <n><unit>` (units
/// `d`, `h`, `m`, `s`, `ms`, `us`, `ns`), or a cron expression with an optional
/// ` in <zone>` (UTC without one).
///
/// # Errors
///
/// [`Error::is_invalid_recurrence`] for anything [`Recurrence::cron`],
/// [`Recurrence::every`] or [`Recurrence::in_tz`] would refuse, or an interval that is not
/// a whole number followed by one of those units.
impl FromStr for Recurrence {
    type Err = Error;

    fn from_str(text: &str) -> Result<Recurrence, Error> {
        let text = text.trim();
        if let Some(interval) = text.strip_prefix("every ") {
            let interval = interval.trim();
            let split = interval
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(interval.len());
            let (count, unit) = interval.split_at(split);
            let size = UNITS.iter().find(|(name, _)| *name == unit).map(|u| u.1);
            let nanos = count
                .parse::<u64>()
                .ok()
                .zip(size)
                .and_then(|(count, size)| count.checked_mul(size))
                .ok_or_else(|| {
                    Error::invalid_recurrence(format!("{interval:?} is not an interval"))
                })?;
            return Recurrence::every(Duration::from_nanos(nanos));
        }
        match text.rsplit_once(" in ") {
            Some((expr, zone)) => Recurrence::cron(expr)?.in_tz(zone.trim()),
            None => Recurrence::cron(text),
        }
    }
}

impl fmt::Debug for Recurrence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Recurrence({self})")
    }
}

/// Equal when the text forms are: the same expression (as written, spacing aside) in the
/// same zone, or the same interval.
impl PartialEq for Recurrence {
    fn eq(&self, other: &Recurrence) -> bool {
        match (&self.rule, &other.rule) {
            (
                Rule::Cron {
                    expr, zone_name, ..
                },
                Rule::Cron {
                    expr: other_expr,
                    zone_name: other_zone,
                    ..
                },
            ) => expr == other_expr && zone_name == other_zone,
            (Rule::Every { nanos }, Rule::Every { nanos: other }) => nanos == other,
            _ => false,
        }
    }
}

impl Eq for Recurrence {}

#[cfg(test)]
mod tests;
