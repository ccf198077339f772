//! The one-way upgrades of a store of format 4 (written before kinds) or 5 (gate rows
//! holding their counters) to the current format, run by `Store::open` in its first
//! transaction: format 4's before the log's replay, format 5's after it.
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
//! - Format 5's gate rows (version 1) also stored a gate's `running` and `admitted`
//!   counters, which format 6 derives from the jobs instead and never writes
//!   (`store/gates.rs`, "Counters"): its rows (the table's and those its log replayed)
//!   are rewritten without them (version 2), one walk of `gates` (bounded by the gates,
//!   once per store). A version 1 row still reads, its counters ignored, so the walk can
//!   come after the replay. Nothing else of format 5 changes. After it a binary of
//!   format 5 refuses the store (its counters would be stale, not absent).

use std::collections::BTreeMap;

use redb::ReadableTable;

use super::counts::Counters;
use super::gate::Gate;
use super::tables::{storage, Tables};
use crate::core::error::Error;
use crate::core::state::Tally;

/// The format before kinds, which this version upgrades.
pub(super) const FROM: u64 = 4;
/// The format whose gate rows held their counters, which this version upgrades.
pub(super) const GATES_FROM: u64 = 5;

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

/// Rewrites every gate row of a format 5 store (version 1, with counters) as version 2,
/// after the log's replay wrote its own.
pub(super) fn gate_rows(t: &mut Tables<'_>) -> Result<(), Error> {
    let mut old = Vec::new();
    for entry in t.gates.iter().map_err(storage)? {
        let (key, value) = entry.map_err(storage)?;
        if Gate::is_old_row(value.value()) {
            let (kind, gate_key) = key.value();
            old.push((
                kind.to_owned(),
                gate_key.to_owned(),
                Gate::decode(value.value())?,
            ));
        }
    }
    for (kind, key, gate) in old {
        t.gates
            .insert((kind.as_str(), key.as_str()), gate.encode().as_slice())
            .map_err(storage)?;
    }
    Ok(())
}
