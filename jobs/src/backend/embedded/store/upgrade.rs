//! The one-way upgrade of a store of format 4 (written before kinds) to the current
//! format, run by `Store::open` in its first transaction, before the log's replay.
//!
//! # Ground rules
//!
//! - Every job of a format 4 store is of kind `""` and priority 0 (its version 2 record has
//!   no spec and reads as the plain spec, `record.rs`). So its pending keys `(run_at, id)`
//!   of `due` become `("", level(0), run_at, id)`, its running keys `(lease end, id)` of
//!   `running` become `("", lease end, id)`, the two old tables are deleted, and the totals
//!   are kind `""`'s counts. Records are not rewritten: each is, when its job next changes.
//! - The upgrade is in the open's transaction, with the new format: a crash before its
//!   commit leaves the format 4 store as it was, to be upgraded by the next open.
//! - It is the one step that reads a whole index (once, at the first open by this version);
//!   a store's log, of format 4 too, replays after it onto the new indexes.

use std::collections::BTreeMap;

use redb::{ReadableTable, TableDefinition, WriteTransaction};

use super::counts::Counters;
use super::tables::{level, storage, DUE, RUNNING};
use crate::core::error::Error;
use crate::core::state::Tally;

/// The format this version upgrades.
pub(super) const FROM: u64 = 4;

/// Format 4's pending keys `(run_at, id)`.
const OLD_DUE: TableDefinition<'_, (u64, &str), ()> = TableDefinition::new("due");
/// Format 4's running keys `(lease end, id)`.
const OLD_RUNNING: TableDefinition<'_, (u64, &str), ()> = TableDefinition::new("running");

/// Rewrites format 4's `due` and `running` as the per-kind indexes, under kind `""`.
pub(super) fn indexes(txn: &WriteTransaction) -> Result<(), Error> {
    let plain = level(0);
    {
        let old = txn.open_table(OLD_DUE).map_err(storage)?;
        let mut due = txn.open_table(DUE).map_err(storage)?;
        for entry in old.iter().map_err(storage)? {
            let (key, _) = entry.map_err(storage)?;
            let (at, id) = key.value();
            due.insert(("", plain, at, id), ()).map_err(storage)?;
        }
    }
    {
        let old = txn.open_table(OLD_RUNNING).map_err(storage)?;
        let mut running = txn.open_table(RUNNING).map_err(storage)?;
        for entry in old.iter().map_err(storage)? {
            let (key, _) = entry.map_err(storage)?;
            let (until, id) = key.value();
            running.insert(("", until, id), ()).map_err(storage)?;
        }
    }
    txn.delete_table(OLD_DUE).map_err(storage)?;
    txn.delete_table(OLD_RUNNING).map_err(storage)?;
    Ok(())
}

/// The counts of a format 4 store: its totals, all of kind `""`.
pub(super) fn counts(total: Tally) -> Counters {
    let mut kinds = BTreeMap::new();
    if total != Tally::default() {
        kinds.insert(String::new(), total);
    }
    Counters { total, kinds }
}
