//! Reads of the pending and running indexes by kind: the plain group's tables `due`
//! ((run_at, id): kind `""`, priority 0) and `running` ((lease end, id): kind `""`), and for
//! every other group `due_by_kind` ((kind, level, run_at, id)) and `running_by_kind`
//! ((kind, lease end, id)), and the other `(kind, u64, id)` indexes alike (`gates.rs`'s
//! waiting jobs and timers: [`kinds_of`], [`kind_range`]); the groups present, found by
//! skipping from one to the next, and a merge of sorted ranges.
//!
//! # Ground rules
//!
//! - Finding what is present costs one bounded read per (kind, level) with pending jobs
//!   and per kind with running ones ([`levels`], [`lease_kinds`]), plus one that finds
//!   nothing, each giving that group's first key; nothing walks a group to find the next. The number of groups in use is small (kinds
//!   × priorities actually used).
//! - A read across groups ([`merge`]) holds one range per group and reads each key it
//!   returns once, plus one key per group: O(groups + taken).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::Bound::{self, Excluded, Included, Unbounded};

use redb::{ReadableTable, Table};

use super::tables::{storage, LeaseKey, Tables, PLAIN_LEVEL};
use crate::core::error::Error;

/// A level of one kind in `due`: its pending jobs of one priority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Level {
    pub(super) kind: String,
    pub(super) level: u8,
    /// Its first key's run_at.
    pub(super) first: u64,
}

/// A key's position in a list: `(run_at or lease end, id)`.
pub(super) type Position = (u64, String);

/// A sorted stream of positions.
pub(super) type Stream<'a> = Box<dyn Iterator<Item = Result<Position, Error>> + 'a>;

/// The first key of a `(u64, id)` table, the plain group's.
fn plain_first(table: &Table<'_, (u64, &'static str), ()>) -> Result<Option<u64>, Error> {
    Ok(table
        .first()
        .map_err(storage)?
        .map(|(key, _)| key.value().0))
}

/// Every (kind, level) with a pending job (of the kind `only` if given), in key order (kind,
/// then level: priority highest first); each with its first run_at. The plain group (kind
/// `""`, level [`PLAIN_LEVEL`]) is `plain_due`'s; the others are found in `due`.
pub(super) fn levels(t: &Tables<'_>, only: Option<&str>) -> Result<Vec<Level>, Error> {
    let mut out = Vec::new();
    if only.is_none_or(str::is_empty) {
        if let Some(first) = plain_first(&t.plain_due)? {
            out.push(Level {
                kind: String::new(),
                level: PLAIN_LEVEL,
                first,
            });
        }
    }
    let mut from = (only.unwrap_or_default().to_owned(), 0u8);
    loop {
        let found = {
            let mut range = t
                .due
                .range((from.0.as_str(), from.1, 0, "")..)
                .map_err(storage)?;
            match range.next().transpose().map_err(storage)? {
                Some((key, _)) => {
                    let (kind, level, at, _) = key.value();
                    Some((kind.to_owned(), level, at))
                }
                None => None,
            }
        };
        let Some((kind, level, first)) = found else {
            break;
        };
        if only.is_some_and(|only| only != kind) {
            break;
        }
        from = match level.checked_add(1) {
            Some(next) => (kind.clone(), next),
            None if only.is_some() => {
                out.push(Level { kind, level, first });
                break;
            }
            // No kind holds a NUL (`check_kind`), and every kind after this one sorts at
            // or after this one followed by NUL.
            None => (format!("{kind}\0"), 0),
        };
        out.push(Level { kind, level, first });
    }
    out.sort_by(|a, b| (a.kind.as_str(), a.level).cmp(&(b.kind.as_str(), b.level)));
    Ok(out)
}

/// Every kind with a running job (the kind `only` if given), in kind order, each with its
/// first lease end: kind `""` from `plain_running`, the others found in `running`.
pub(super) fn lease_kinds(t: &Tables<'_>, only: Option<&str>) -> Result<Vec<(String, u64)>, Error> {
    let mut out: Vec<(String, u64)> = Vec::new();
    if only.is_none_or(str::is_empty) {
        if let Some(first) = plain_first(&t.plain_running)? {
            out.push((String::new(), first));
        }
        if only.is_some() {
            return Ok(out);
        }
    }
    out.extend(kinds_of(&t.running, only)?);
    Ok(out)
}

/// Every kind with a key in `table` (`(kind, u64, id)` keys; the kind `only` if given), in
/// kind order, each with its first key's `u64`.
pub(super) fn kinds_of(
    table: &Table<'_, LeaseKey, ()>,
    only: Option<&str>,
) -> Result<Vec<(String, u64)>, Error> {
    let mut out = Vec::new();
    let mut from = only.unwrap_or_default().to_owned();
    loop {
        let found = {
            let mut range = table.range((from.as_str(), 0, "")..).map_err(storage)?;
            match range.next().transpose().map_err(storage)? {
                Some((key, _)) => {
                    let (kind, first, _) = key.value();
                    Some((kind.to_owned(), first))
                }
                None => None,
            }
        };
        let Some((kind, first)) = found else { break };
        if only.is_some_and(|only| only != kind) {
            break;
        }
        // No kind holds a NUL (`check_kind`): every later kind sorts at or after this one
        // followed by NUL.
        from = format!("{kind}\0");
        out.push((kind, first));
        if only.is_some() {
            break;
        }
    }
    Ok(out)
}

/// The keys of a `(u64, id)` table after `after` (all for `None`) up to `upto`, in order.
fn plain_range<'a>(
    table: &'a Table<'_, (u64, &'static str), ()>,
    after: Option<(u64, &str)>,
    upto: u64,
) -> Result<Stream<'a>, Error> {
    let start: Bound<(u64, &str)> = match after {
        Some(after) => Excluded(after),
        None => Unbounded,
    };
    let range = table.range((start, Unbounded)).map_err(storage)?;
    Ok(Box::new(range.map_while(move |entry| match entry {
        Err(err) => Some(Err(storage(err))),
        Ok((key, _)) => {
            let (at, id) = key.value();
            (at <= upto).then(|| Ok((at, id.to_owned())))
        }
    })))
}

/// The keys of one level of pending jobs after `after` (all of them for `None`) with a
/// run_at at most `upto`, in order.
pub(super) fn due_range<'a>(
    t: &'a Tables<'_>,
    kind: &'a str,
    level: u8,
    after: Option<(u64, &str)>,
    upto: u64,
) -> Result<Stream<'a>, Error> {
    if kind.is_empty() && level == PLAIN_LEVEL {
        return plain_range(&t.plain_due, after, upto);
    }
    let start: Bound<(&str, u8, u64, &str)> = match after {
        Some((at, id)) => Excluded((kind, level, at, id)),
        None => Included((kind, level, 0, "")),
    };
    let range = t.due.range((start, Unbounded)).map_err(storage)?;
    Ok(Box::new(range.map_while(move |entry| match entry {
        Err(err) => Some(Err(storage(err))),
        Ok((key, _)) => {
            let (k, l, at, id) = key.value();
            (k == kind && l == level && at <= upto).then(|| Ok((at, id.to_owned())))
        }
    })))
}

/// The keys of one kind's running jobs after `after` (all for `None`) with a lease end at
/// most `upto`, in order.
pub(super) fn lease_range<'a>(
    t: &'a Tables<'_>,
    kind: &'a str,
    after: Option<(u64, &str)>,
    upto: u64,
) -> Result<Stream<'a>, Error> {
    if kind.is_empty() {
        return plain_range(&t.plain_running, after, upto);
    }
    kind_range(&t.running, kind, after, upto)
}

/// The keys of one kind in `table` (`(kind, u64, id)` keys) after `after` (all for `None`)
/// up to `upto`, as positions, in order.
pub(super) fn kind_range<'a>(
    table: &'a Table<'_, LeaseKey, ()>,
    kind: &'a str,
    after: Option<(u64, &str)>,
    upto: u64,
) -> Result<Stream<'a>, Error> {
    let start: Bound<(&str, u64, &str)> = match after {
        Some((at, id)) => Excluded((kind, at, id)),
        None => Included((kind, 0, "")),
    };
    let range = table.range((start, Unbounded)).map_err(storage)?;
    Ok(Box::new(range.map_while(move |entry| match entry {
        Err(err) => Some(Err(storage(err))),
        Ok((key, _)) => {
            let (k, at, id) = key.value();
            (k == kind && at <= upto).then(|| Ok((at, id.to_owned())))
        }
    })))
}

/// The first `limit` positions of sorted `streams` together, in order.
pub(super) fn merge(streams: Vec<Stream<'_>>, limit: usize) -> Result<Vec<Position>, Error> {
    Ok(merge_from(streams, limit)?
        .into_iter()
        .map(|(position, _)| position)
        .collect())
}

/// [`merge`], each position with the index of the stream it came from.
pub(super) fn merge_from(
    mut streams: Vec<Stream<'_>>,
    limit: usize,
) -> Result<Vec<(Position, usize)>, Error> {
    let mut out = Vec::with_capacity(limit.min(1024));
    if limit == 0 {
        return Ok(out);
    }
    let mut heads = BinaryHeap::with_capacity(streams.len());
    for (i, stream) in streams.iter_mut().enumerate() {
        if let Some(first) = stream.next().transpose()? {
            heads.push(Reverse((first, i)));
        }
    }
    while let Some(Reverse((position, i))) = heads.pop() {
        out.push((position, i));
        if out.len() == limit {
            break;
        }
        if let Some(next) = streams[i].next().transpose()? {
            heads.push(Reverse((next, i)));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::embedded::record::tests::plain;

    #[test]
    fn levels_and_kinds_are_found_by_skipping() {
        let db = redb::Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .expect("in-memory redb");
        let txn = db.begin_write().unwrap();
        {
            let mut t = Tables::open(&txn, &plain()).unwrap();
            t.plain_due.insert((6, "z"), ()).unwrap();
            for (kind, level, at, id) in [
                ("", 126, 5, "a"),
                ("", 126, 3, "b"),
                ("", 255, 1, "c"),
                ("", 0, 9, "d"),
                ("x", 127, 2, "e"),
                ("x\u{1}", 127, 2, "f"),
                ("xy", 3, 4, "g"),
            ] {
                t.due.insert((kind, level, at, id), ()).unwrap();
            }
            let found: Vec<_> = levels(&t, None)
                .unwrap()
                .into_iter()
                .map(|l| (l.kind, l.level, l.first))
                .collect();
            let expect = [
                ("", 0, 9),
                ("", 126, 3),
                ("", 127, 6),
                ("", 255, 1),
                ("x", 127, 2),
                ("x\u{1}", 127, 2),
                ("xy", 3, 4),
            ];
            let expect: Vec<_> = expect
                .iter()
                .map(|(k, l, f)| (k.to_string(), *l, *f))
                .collect();
            assert_eq!(found, expect);
            let of = |kind| -> Vec<u8> {
                levels(&t, Some(kind))
                    .unwrap()
                    .into_iter()
                    .map(|l| l.level)
                    .collect()
            };
            assert_eq!(of("x"), [127]);
            assert_eq!(of(""), [0, 126, 127, 255]);
            assert!(of("w").is_empty());

            let found = levels(&t, None).unwrap();
            let streams = found
                .iter()
                .filter(|l| l.level == 127)
                .map(|l| due_range(&t, &l.kind, 127, None, 6).unwrap())
                .collect::<Vec<_>>();
            assert_eq!(
                merge(streams, 10).unwrap(),
                [(2, "e".into()), (2, "f".into()), (6, "z".into())],
                "run_at at most 6, across kinds of one level, the plain group's table too"
            );
            let after = due_range(&t, "", 126, Some((3, "b")), u64::MAX).unwrap();
            assert_eq!(merge(vec![after], 1).unwrap(), [(5, "a".into())]);
        }
        {
            let mut t = Tables::open(&txn, &plain()).unwrap();
            for (kind, until, id) in [("b", 4, "p"), ("a", 9, "q"), ("a", 1, "r")] {
                t.running.insert((kind, until, id), ()).unwrap();
            }
            t.plain_running.insert((7, "s"), ()).unwrap();
            assert_eq!(
                lease_kinds(&t, None).unwrap(),
                [
                    (String::new(), 7),
                    ("a".to_string(), 1),
                    ("b".to_string(), 4)
                ]
            );
            assert_eq!(lease_kinds(&t, Some("b")).unwrap(), [("b".to_string(), 4)]);
            assert_eq!(lease_kinds(&t, Some("")).unwrap(), [(String::new(), 7)]);
            assert!(lease_kinds(&t, Some("c")).unwrap().is_empty());
            let streams = vec![
                lease_range(&t, "a", None, u64::MAX).unwrap(),
                lease_range(&t, "b", None, u64::MAX).unwrap(),
                lease_range(&t, "", None, u64::MAX).unwrap(),
            ];
            assert_eq!(
                merge(streams, 3).unwrap(),
                [(1, "r".into()), (4, "p".into()), (7, "s".into())]
            );
        }
        txn.commit().unwrap();
    }
}
