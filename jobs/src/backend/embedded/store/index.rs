//! Reads of the per-kind indexes `due` ((kind, level, run_at, id)) and `running` ((kind,
//! lease end, id)): the levels and kinds present, found by skipping from one to the next,
//! and a merge of sorted ranges.
//!
//! # Ground rules
//!
//! - Finding what is present costs one bounded read per (kind, level) of `due` and per
//!   kind of `running` ([`levels`], [`lease_kinds`]), each giving that group's first key;
//!   nothing walks a group to find the next. The number of groups in use is small (kinds
//!   × priorities actually used).
//! - A read across groups ([`merge`]) holds one range per group and reads each key it
//!   returns once, plus one key per group: O(groups + taken).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::Bound::{self, Excluded, Included, Unbounded};

use redb::{ReadableTable, Table};

use super::tables::{storage, DueKey, LeaseKey};
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

/// Every (kind, level) with a key in `due`, of the kind `only` if given, in key order (kind,
/// then level: priority highest first); each with its first run_at.
pub(super) fn levels(due: &Table<'_, DueKey, ()>, only: Option<&str>) -> Result<Vec<Level>, Error> {
    let mut out = Vec::new();
    let mut from = (only.unwrap_or_default().to_owned(), 0u8);
    loop {
        let found = {
            let mut range = due
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
    Ok(out)
}

/// Every kind with a key in `running` (the kind `only` if given), in kind order, each with
/// its first lease end.
pub(super) fn lease_kinds(
    running: &Table<'_, LeaseKey, ()>,
    only: Option<&str>,
) -> Result<Vec<(String, u64)>, Error> {
    let mut out: Vec<(String, u64)> = Vec::new();
    let mut from = only.unwrap_or_default().to_owned();
    loop {
        let found = {
            let mut range = running.range((from.as_str(), 0, "")..).map_err(storage)?;
            match range.next().transpose().map_err(storage)? {
                Some((key, _)) => {
                    let (kind, until, _) = key.value();
                    Some((kind.to_owned(), until))
                }
                None => None,
            }
        };
        let Some((kind, first)) = found else { break };
        if only.is_some_and(|only| only != kind) {
            break;
        }
        from = format!("{kind}\0");
        out.push((kind, first));
        if only.is_some() {
            break;
        }
    }
    Ok(out)
}

/// The keys of one level of `due` after `after` (all of them for `None`) with a run_at at
/// most `upto`, in order.
pub(super) fn due_range<'a>(
    due: &'a Table<'_, DueKey, ()>,
    kind: &'a str,
    level: u8,
    after: Option<(u64, &str)>,
    upto: u64,
) -> Result<Stream<'a>, Error> {
    let start: Bound<(&str, u8, u64, &str)> = match after {
        Some((at, id)) => Excluded((kind, level, at, id)),
        None => Included((kind, level, 0, "")),
    };
    let range = due.range((start, Unbounded)).map_err(storage)?;
    Ok(Box::new(range.map_while(move |entry| match entry {
        Err(err) => Some(Err(storage(err))),
        Ok((key, _)) => {
            let (k, l, at, id) = key.value();
            (k == kind && l == level && at <= upto).then(|| Ok((at, id.to_owned())))
        }
    })))
}

/// The keys of one kind in `running` after `after` (all for `None`) with a lease end at
/// most `upto`, in order.
pub(super) fn lease_range<'a>(
    running: &'a Table<'_, LeaseKey, ()>,
    kind: &'a str,
    after: Option<(u64, &str)>,
    upto: u64,
) -> Result<Stream<'a>, Error> {
    let start: Bound<(&str, u64, &str)> = match after {
        Some((at, id)) => Excluded((kind, at, id)),
        None => Included((kind, 0, "")),
    };
    let range = running.range((start, Unbounded)).map_err(storage)?;
    Ok(Box::new(range.map_while(move |entry| match entry {
        Err(err) => Some(Err(storage(err))),
        Ok((key, _)) => {
            let (k, at, id) = key.value();
            (k == kind && at <= upto).then(|| Ok((at, id.to_owned())))
        }
    })))
}

/// The first `limit` positions of sorted `streams` together, in order.
pub(super) fn merge(mut streams: Vec<Stream<'_>>, limit: usize) -> Result<Vec<Position>, Error> {
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
        out.push(position);
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
    use crate::backend::embedded::store::tables::{DUE, RUNNING};

    fn db() -> redb::Database {
        redb::Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .expect("in-memory redb")
    }

    #[test]
    fn levels_and_kinds_are_found_by_skipping() {
        let db = db();
        let txn = db.begin_write().unwrap();
        {
            let mut due = txn.open_table(DUE).unwrap();
            for (kind, level, at, id) in [
                ("", 127, 5, "a"),
                ("", 127, 3, "b"),
                ("", 255, 1, "c"),
                ("", 0, 9, "d"),
                ("x", 127, 2, "e"),
                ("x\u{1}", 127, 2, "f"),
                ("xy", 3, 4, "g"),
            ] {
                due.insert((kind, level, at, id), ()).unwrap();
            }
            let found: Vec<_> = levels(&due, None)
                .unwrap()
                .into_iter()
                .map(|l| (l.kind, l.level, l.first))
                .collect();
            let expect = [
                ("", 0, 9),
                ("", 127, 3),
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
            let of_x: Vec<_> = levels(&due, Some("x"))
                .unwrap()
                .into_iter()
                .map(|l| l.level)
                .collect();
            assert_eq!(of_x, [127]);
            assert!(levels(&due, Some("w")).unwrap().is_empty());
            assert_eq!(levels(&due, Some("")).unwrap().len(), 3);

            let found = levels(&due, None).unwrap();
            let streams = found
                .iter()
                .filter(|l| l.level == 127)
                .map(|l| due_range(&due, &l.kind, 127, None, 4).unwrap())
                .collect::<Vec<_>>();
            let merged = merge(streams, 10).unwrap();
            assert_eq!(
                merged,
                [(2, "e".into()), (2, "f".into()), (3, "b".into())],
                "run_at at most 4, across kinds of one level"
            );
            let after = due_range(&due, "", 127, Some((3, "b")), u64::MAX).unwrap();
            assert_eq!(merge(vec![after], 1).unwrap(), [(5, "a".into())]);
        }
        {
            let mut running = txn.open_table(RUNNING).unwrap();
            for (kind, until, id) in [("b", 4, "p"), ("a", 9, "q"), ("a", 1, "r")] {
                running.insert((kind, until, id), ()).unwrap();
            }
            assert_eq!(
                lease_kinds(&running, None).unwrap(),
                [("a".to_string(), 1), ("b".to_string(), 4)]
            );
            assert_eq!(
                lease_kinds(&running, Some("b")).unwrap(),
                [("b".to_string(), 4)]
            );
            assert!(lease_kinds(&running, Some("c")).unwrap().is_empty());
            let streams = vec![
                lease_range(&running, "a", None, u64::MAX).unwrap(),
                lease_range(&running, "b", None, u64::MAX).unwrap(),
            ];
            assert_eq!(
                merge(streams, 2).unwrap(),
                [(1, "r".into()), (4, "p".into())]
            );
        }
        txn.commit().unwrap();
    }
}
