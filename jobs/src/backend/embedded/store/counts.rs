//! The store's counters: jobs per state in all and per kind ([`Counters`]), kept by
//! [`Tables::set`](super::tables::Tables::set) on every transition and written to `meta`
//! and `kinds` by each batch that changed them, so `counts` never scans.
//!
//! # Ground rules
//!
//! - A kind with no job in any state has no entry (in memory or in `kinds`): the map holds
//!   the kinds in use, and its size is theirs.
//! - Only the entries a batch changed are written (one row per kind touched, beside the
//!   three totals in `meta`), so the plain path (every job of kind `""`) writes one row more
//!   per batch than before kinds, not one per job.

use std::collections::BTreeMap;

use redb::{ReadableTable, Table, TableDefinition};

use crate::core::error::Error;
use crate::core::job::{self, KindCounts};
use crate::core::state::{Status, Tally};

/// Kind → (pending, running, dead).
pub(super) const KINDS: TableDefinition<'_, &str, (u64, u64, u64)> = TableDefinition::new("kinds");

/// Jobs per state, in all and per kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    pub(crate) total: Tally,
    /// Kind `""`'s, apart: the plain path touches no map (a lookup per transition was 1 %
    /// of a schedule-and-run profile).
    pub(crate) plain: Tally,
    /// Every other kind with a job.
    pub(crate) kinds: BTreeMap<String, Tally>,
}

impl Counters {
    /// One job of `kind` moved from `before` to `after` (`None`: no job).
    pub(super) fn transition(
        &mut self,
        before: Option<(&str, Status)>,
        after: Option<(&str, Status)>,
    ) {
        self.total
            .transition(before.map(|(_, s)| s), after.map(|(_, s)| s));
        match (before, after) {
            (Some((b, bs)), Some((a, as_))) if a == b => {
                self.of(a, |t| t.transition(Some(bs), Some(as_)))
            }
            _ => {
                if let Some((kind, status)) = before {
                    self.of(kind, |t| t.transition(Some(status), None));
                }
                if let Some((kind, status)) = after {
                    self.of(kind, |t| t.transition(None, Some(status)));
                }
            }
        }
    }

    /// Applies `change` to `kind`'s tally, dropping the entry once it is all zero.
    fn of(&mut self, kind: &str, change: impl FnOnce(&mut Tally)) {
        if kind.is_empty() {
            return change(&mut self.plain);
        }
        let tally = match self.kinds.get_mut(kind) {
            Some(tally) => tally,
            None => self.kinds.entry(kind.to_owned()).or_default(),
        };
        change(tally);
        if *tally == Tally::default() {
            self.kinds.remove(kind);
        }
    }

    /// The public snapshot.
    pub(super) fn snapshot(&self, paused: bool, next_due: Option<u64>) -> job::Counts {
        let Tally {
            pending,
            running,
            dead,
        } = self.total;
        job::Counts::new(pending, running, dead, paused, next_due).with_kinds(self.rows().map(
            |(kind, t)| {
                (
                    kind.to_owned(),
                    KindCounts::new(t.pending, t.running, t.dead),
                )
            },
        ))
    }

    /// Every kind with a job and its tally, in kind order.
    fn rows(&self) -> impl Iterator<Item = (&str, &Tally)> {
        let plain = (self.plain != Tally::default()).then_some(("", &self.plain));
        plain
            .into_iter()
            .chain(self.kinds.iter().map(|(k, t)| (k.as_str(), t)))
    }

    /// Reads every kind's row (the kinds in use: a small table).
    pub(super) fn read_kinds(
        table: &Table<'_, &'static str, (u64, u64, u64)>,
        total: Tally,
    ) -> Result<Counters, Error> {
        let mut counters = Counters {
            total,
            ..Counters::default()
        };
        for entry in table.iter().map_err(Error::storage)? {
            let (kind, row) = entry.map_err(Error::storage)?;
            let (pending, running, dead) = row.value();
            let tally = Tally {
                pending,
                running,
                dead,
            };
            match kind.value() {
                "" => counters.plain = tally,
                kind => drop(counters.kinds.insert(kind.to_owned(), tally)),
            }
        }
        Ok(counters)
    }

    /// Writes to `table` each kind whose tally differs from `before`'s (deleting those
    /// gone).
    pub(super) fn write_kinds(
        &self,
        before: &Counters,
        table: &mut Table<'_, &'static str, (u64, u64, u64)>,
    ) -> Result<(), Error> {
        let row = |t: &Tally| (t.pending, t.running, t.dead);
        if self.plain != before.plain {
            match self.plain == Tally::default() {
                true => drop(table.remove("").map_err(Error::storage)?),
                false => drop(table.insert("", row(&self.plain)).map_err(Error::storage)?),
            }
        }
        for (kind, tally) in &self.kinds {
            if before.kinds.get(kind) != Some(tally) {
                table
                    .insert(kind.as_str(), row(tally))
                    .map_err(Error::storage)?;
            }
        }
        for kind in before.kinds.keys() {
            if !self.kinds.contains_key(kind) {
                table.remove(kind.as_str()).map_err(Error::storage)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_their_jobs_and_leave_when_empty() {
        let mut c = Counters::default();
        let running = Status::Running { token: 1, until: 2 };
        c.transition(None, Some(("a", Status::Pending)));
        c.transition(None, Some(("", Status::Pending)));
        c.transition(Some(("a", Status::Pending)), Some(("a", running)));
        assert_eq!(
            c.total,
            Tally {
                pending: 1,
                running: 1,
                dead: 0
            }
        );
        assert_eq!(
            c.kinds["a"],
            Tally {
                pending: 0,
                running: 1,
                dead: 0
            }
        );
        c.transition(Some(("a", running)), None);
        assert!(!c.kinds.contains_key("a"));
        assert!(!c.kinds.contains_key(""), "kind \"\" is kept apart");
        assert_eq!(c.plain.pending, 1);
        let snapshot = c.snapshot(false, Some(3));
        assert_eq!(snapshot.kinds.keys().collect::<Vec<_>>(), [""]);
        assert_eq!(snapshot.kinds[""], KindCounts::new(1, 0, 0));
    }
}
