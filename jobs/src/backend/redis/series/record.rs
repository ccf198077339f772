//! What `lua/series.lua` stores and reports, decoded: a series' record in `{tag}:series`
//! ([`SeriesRecord`]), a claim's note about a series ([`SeriesNote`]), and the occurrence
//! lists the series scripts take ([`entries`]).
//!
//! # Ground rules
//!
//! - A record is `version|runs|head_ns|head_text|last_ns|tail\x1f|rule` (the rule last,
//!   since it may hold `|`); an empty time field is none; `tail` is the spec tail its
//!   occurrences are stored with (`scripts::spec_tail`: it starts with `:` and ends with
//!   0x1f and the kind, which may hold `|` but no control character, so the next 0x1f
//!   closes it). A record without `tail\x1f|` (no rule text starts with `:`) was written
//!   before series had a spec: of the queue's plain spec. Written only by the scripts; a
//!   change of its layout changes the keyspace `FORMAT` (`keys.rs`).

use ::redis::{FromRedisValue, ParsingError, Value};

use super::super::reply::{array, int, opt_ns, parsing, text};
use super::super::scripts::tail_spec;
use crate::core::error::Error;
use crate::core::kind::Spec;
use crate::core::recurrence::utc_text;

/// One series as `series.lua` stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::backend::redis) struct SeriesRecord {
    /// [`CatchUp::runs`](crate::core::series::CatchUp::runs).
    pub(in crate::backend::redis) runs: u32,
    pub(in crate::backend::redis) head: Option<u64>,
    pub(in crate::backend::redis) last: Option<u64>,
    /// The recurrence's text form.
    pub(in crate::backend::redis) rule: String,
    /// What its occurrences are made with; `None` for a record written before series had a
    /// spec (the queue's plain spec).
    pub(in crate::backend::redis) spec: Option<Spec>,
}

impl SeriesRecord {
    /// Decodes a record of `{tag}:series`.
    pub(in crate::backend::redis) fn decode(text: &str) -> Result<SeriesRecord, Error> {
        let corrupt = || Error::storage(format!("corrupt series record {text:?}"));
        let mut fields = text.splitn(6, '|');
        let mut field = || fields.next().ok_or_else(corrupt);
        let _version = field()?;
        let runs = field()?.parse().map_err(|_| corrupt())?;
        let head = opt_ns(field()?)?;
        let _head_text = field()?;
        let last = opt_ns(field()?)?;
        let rest = field()?;
        let (spec, rule) = match rest.strip_prefix(':') {
            None => (None, rest),
            Some(_) => {
                // The kind starts after the tail's first 0x1f and ends at the next.
                let kind = rest.find('\x1f').ok_or_else(corrupt)? + 1;
                let end = kind + rest[kind..].find('\x1f').ok_or_else(corrupt)?;
                let rule = rest[end + 1..].strip_prefix('|').ok_or_else(corrupt)?;
                (tail_spec(&rest[..end])?, rule)
            }
        };
        Ok(SeriesRecord {
            runs,
            head,
            last,
            rule: rule.to_owned(),
            spec,
        })
    }
}

/// A claim's note about a recurring series: its list of upcoming occurrences runs low, or
/// ran out before the claim's time (`dry`: the head waits for Rust to decide the catch-up).
/// `series.lua` reports it as `{name, 'low' | 'dry', version, head_ns, runs, rule}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::backend::redis) struct SeriesNote {
    pub(in crate::backend::redis) name: String,
    pub(in crate::backend::redis) dry: bool,
    pub(in crate::backend::redis) version: String,
    pub(in crate::backend::redis) head: Option<u64>,
    pub(in crate::backend::redis) runs: u32,
    pub(in crate::backend::redis) rule: String,
}

impl FromRedisValue for SeriesNote {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let fields = array(v).map_err(parsing)?;
        let [name, kind, version, head, runs, rule] = <[Value; 6]>::try_from(fields)
            .map_err(|_| parsing(Error::storage("short series note in a claim reply")))?;
        let note = || -> Result<SeriesNote, Error> {
            Ok(SeriesNote {
                name: text(name)?,
                dry: text(kind)? == "dry",
                version: text(version)?,
                head: opt_ns(&text(head)?)?,
                runs: u32::try_from(int(&runs)?).unwrap_or(u32::MAX),
                rule: text(rule)?,
            })
        };
        note().map_err(parsing)
    }
}

/// Occurrences as the series scripts take them: `ns=text,...`.
pub(in crate::backend::redis) fn entries(times: &[u64]) -> String {
    let mut out = String::new();
    for (i, at) in times.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!("{at}={}", utc_text(*at)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::redis::scripts::spec_tail;
    use std::time::Duration;

    #[test]
    fn a_record_decodes_with_its_spec_or_without_one_as_before() {
        let old = SeriesRecord::decode("7|1|1000|t||every 1s").unwrap();
        assert_eq!((old.rule.as_str(), old.spec), ("every 1s", None));
        assert_eq!((old.runs, old.head, old.last), (1, Some(1000), None));
        // A kind may hold `|` (and `:`): the tail ends at the 0x1f after its kind.
        let spec = Spec {
            kind: "a|b:c".to_owned(),
            priority: -2,
            max_attempts: 4,
            backoff: (Duration::from_secs(1), Duration::from_secs(60)),
            lease: Duration::from_millis(1500),
            hold_off: Duration::ZERO,
            key: None,
        };
        let record = format!("7|0||||{}\x1f|0 * * * * in UTC", spec_tail(&spec));
        let new = SeriesRecord::decode(&record).unwrap();
        assert_eq!(new.rule, "0 * * * * in UTC");
        assert_eq!(new.spec, Some(spec));
        assert_eq!((new.head, new.last), (None, None));
        for corrupt in [
            "7|0||||:0:1:1:1:1\x1fk|every 1s",
            "7|0||||:0:1:1:1:1\x1fk\x1fevery 1s",
        ] {
            assert!(SeriesRecord::decode(corrupt).is_err(), "{corrupt:?}");
        }
    }
}
