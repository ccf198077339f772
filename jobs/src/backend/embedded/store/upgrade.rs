//! The one-way upgrade of a store of format 4 (written before kinds) to the current
//! format, run by `Store::open` in its first transaction, before the log's replay.
//!
//! # Ground rules
//!
//! - Every job of a format 4 store is of kind `""` and priority 0 (its version 2 record has
//!   no spec and reads as the plain spec, `record.rs`), and format 4's `due` and `running`
//!   are the current format's tables of that plain group, key for key. So the upgrade
//!   makes the totals kind `""`'s counts and files every key of `died` under kind `""` in
//!   `died_by_kind` (the one walk of an open, bounded by the dead jobs, and once per store);
//!   the open records the new format. Records are not rewritten: each is, when its job
//!   next changes.
//! - The upgrade is in the open's transaction: a crash before its commit leaves the
//!   format 4 store as it was, to be upgraded by the next open. A store's log, of format 4
//!   too, replays after it.

use std::collections::BTreeMap;

use redb::ReadableTable;

use super::counts::Counters;
use super::tables::{storage, Tables};
use crate::core::error::Error;
use crate::core::state::Tally;

/// The format this version upgrades.
pub(super) const FROM: u64 = 4;

/// The counts of a format 4 store: its totals, all of kind `""`.
pub(super) fn counts(total: Tally) -> Counters {
    Counters {
        total,
        plain: total,
        kinds: BTreeMap::new(),
    }
}

/// Files every dead job of a format 4 store (all of kind `""`) in `died_by_kind`, before
/// the log's replay moves any of them.
pub(super) fn dead_by_kind(t: &mut Tables<'_>) -> Result<(), Error> {
    for entry in t.died.iter().map_err(storage)? {
        let (key, _) = entry.map_err(storage)?;
        let (at, id) = key.value();
        t.died_by_kind.insert(("", at, id), ()).map_err(storage)?;
    }
    Ok(())
}
