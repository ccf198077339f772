//! The embedded store's data: the tables, and one write transaction per batch of operations.
//!
//! # Ground rules
//!
//! - Nineteen tables: `jobs` (id → record: the [`Machine`](crate::core::state::Machine) header,
//!   the job's spec, the last error and the payload, `record.rs`); the pending jobs' keys in
//!   `due` ((run_at, id) → (): the plain group, kind `""` and priority 0) and `due_by_kind`
//!   ((kind, level, run_at, id) → (): every other group, `level` being the priority
//!   reversed so a kind's levels read highest priority first, `tables::level`); the running
//!   jobs' keys, so the lease table, in `running` ((lease end, id) → (): kind `""`) and
//!   `running_by_kind` ((kind, lease end, id) → (): the other kinds); `died` ((death time,
//!   id) → (): the dead jobs, to list them newest first and purge them without a scan) and
//!   `died_by_kind` ((kind, death time, id) → (): every dead job again, `""` included, to
//!   list one kind's),
//!   `series` (name → a recurring series' record, `store/series.rs`), `kinds` (kind → its
//!   pending, running and dead counts, `store/counts.rs`), `meta` (format version, the
//!   per-state [`Tally`], the paused flag, the log's epoch and owner number), and the
//!   hold-off tombstones of `Dedup::HoldOff` in `held` (id → until) and `held_until`
//!   ((until, id) → ()), never counted, written only by `Tables::put_held`; and the
//!   successors of `Dedup::AllowWhileRunning` in `next` (id → the successor's record:
//!   pending, attempt 0), never counted, listed or indexed, written only by
//!   `Tables::put_next`; and the gates of keys with limits, in five tables of their own
//!   (`gates`, `gate_admitted`, `gate_waiting`, `waiting_by_kind`, `gate_timers`: a gated
//!   job waiting for its key's slot is pending but not in `due`, `store/gates.rs`), kept by
//!   `Tables::set` and settled at the end of every operation.
//! - A successor waits in `next` exactly while its job's record has the `next` bit
//!   (`record.rs`), set and cleared in the same batch as the row: an ack, retry, death or
//!   kill reads that bit from the record it loads anyway, so a job without a successor pays
//!   no lookup. A successor is attached only to a running job that is no series'
//!   occurrence; it survives the job's retries and redeliveries (every rewrite keeps the
//!   bit), and an ack or a death hands over to it in the same transaction
//!   (`jobs::hand_over`: the successor becomes the pending job, no tombstone, no dead job).
//!   A dead job never has one.
//! - A claim for kind k reads only k's keys: its expired leases (one range), then its
//!   levels highest first, each a range of due keys up to "now"; a claim of every kind
//!   finds the groups in use by skipping from one to the next (`index.rs`) and merges the
//!   kinds of one level by run_at. A job moving between states costs the one remove and
//!   one insert it did before kinds, and a plain job's keys are those it had then (the
//!   plain group keeps format 4's tables, so its keys compare no kind).
//! - Only the writer thread (`mod.rs`) calls [`Store::apply`]; a batch is one redb write
//!   transaction. With a write-ahead log (`wal.rs`, always on a file store) a batch that
//!   changed something is committed without fsync and its changes appended to the log,
//!   `fdatasync`'d if any of them must be durable before it is answered
//!   ([`Op::needs_fsync`]: all but extends and reads, so claims too). Every
//!   `CHECKPOINT_EVERY`, when the log would pass `WAL_LIMIT`, or for a batch whose record
//!   would pass `LOG_AT_MOST` (a bulk load), the batch is instead a
//!   checkpoint: committed with `Durability::Immediate` and quick repair unless the builder
//!   turned it off (the allocator state is saved, so reopening after `kill -9` is
//!   near-instant), bumping the epoch. Without a log (the model test) every such batch is
//!   a durable commit. A batch that changed nothing is aborted: reads and empty claims
//!   cost no fsync.
//! - Opening replays the log's records of the current epoch (bounded by `WAL_LIMIT`), then
//!   checkpoints. A store of format 5 has its gate rows rewritten without their counters
//!   after the replay (`upgrade.rs`). A store of format 4 (before kinds) is upgraded in
//!   that same transaction:
//!   its `due` and `running` are already the plain group's tables, its totals become kind
//!   `""`'s counts and its `died` keys are filed under `""` in `died_by_kind`
//!   (`upgrade.rs`); its records (and its log's) stay version 2 and read as
//!   jobs of the plain spec. A failure to write the log, or a commit failing after its record was
//!   written, leaves memory and disk disagreeing: the store is then [`broken`](Store::broken)
//!   and the writer thread stops.
//! - Every read of an index is a bounded range (`take(max)`, a first key, a page): no
//!   operation walks the whole queue, and opening reads only `meta` and `kinds` (and, once,
//!   a format 4 store's `died` or a format 5 store's `gates` to upgrade it); the first
//!   batch after it reads every running job's record once, to count each gate's, unless
//!   the store has no gate row (`store/gates.rs`, "Counters"). A list of one kind reads
//!   only that kind's keys, in every state.
//! - A transition always goes through [`Machine`](crate::core::state::Machine); the store only keeps the indexes and the
//!   counts in step with it (`Tables::set` in `store/tables.rs`, the one writer of `jobs`,
//!   the indexes and the counts).
//! - Each operation is one function (`store/jobs.rs`, `store/claim.rs`, `store/series.rs`),
//!   dispatched from its [`Op`] in `store/op.rs`; this file holds the transaction, the log
//!   and the checkpoints around them.

use std::time::{Duration, Instant, SystemTime};

use redb::{Database, Durability, ReadableTable, ReadableTableMetadata};

use super::record::Record;
use super::wal::Wal;
use crate::core::config::Config;
use crate::core::error::Error;
use crate::core::job::nanos;
use crate::core::kind::Spec;
use crate::core::state::{self, Tally};

mod claim;
mod counts;
mod gate;
mod gates;
mod index;
mod jobs;
mod op;
mod reply;
mod series;
mod tables;
mod upgrade;

use crate::core::series::Rules;
use counts::{Counters, KINDS};
pub(crate) use op::Op;
pub(crate) use reply::Reply;
use tables::{storage, Tables, META};

/// The layout of the tables, the job records (`record.rs`) and the log (`wal.rs`). A store
/// of format 4 (before kinds) or 5 (gate rows with their counters) is upgraded at open
/// (`upgrade.rs`); one of any other format is refused, naming the format found. (4 is the
/// first published format; the numbers before it were never released.)
const FORMAT: u64 = 6;

/// The longest the write-ahead log grows before a checkpoint: bounds replay at open. A
/// review measured 0.72–1.2 s for the first open of a 10M-job store after `kill -9` with
/// 8 MiB of log; a quarter of that keeps replay near 0.2 s (about 35k changes) at the cost
/// of a checkpoint every ~0.3 s under a 100k/s schedule load.
const WAL_LIMIT: u64 = 2 << 20;

/// The longest between checkpoints while changes come in. A checkpoint stalls the writer
/// for two fsyncs and the pages changed since the last one (4 to 21 ms each on this VM's
/// disk when its fsync took 4 ms), so fewer of them keep delivery lateness down; replay
/// at open stays bounded by `WAL_LIMIT`.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(5);

pub(crate) struct Store {
    db: Database,
    wal: Option<Wal>,
    /// Bumped by every checkpoint; log records of other epochs are stale.
    epoch: u64,
    last_checkpoint: Instant,
    /// `CHECKPOINT_EVERY`, but the model test checkpoints at will.
    checkpoint_every: Duration,
    broken: bool,
    counts: Counters,
    /// Whether claims are stopped (`meta.paused`), as of the last commit.
    paused: bool,
    /// The spec of a job scheduled without options.
    plain: Spec,
    quick_repair: bool,
    seed: u64,
    issued: u64,
    rules: Rules,
    /// The earliest run_at of the jobs the last batch's rebalances admitted, until
    /// [`take_promoted`](Self::take_promoted).
    promoted: Option<u64>,
    /// The `gates` rows as of the last commit, of the gates read since (`gate::Rows`).
    gate_rows: gate::Rows,
    /// The `running` counter of every gate with a running job, as of the last commit
    /// (`gates.rs`, "Counters"); `None`: counted from the leases by the next batch (after
    /// an open, or a batch that ended without a commit having settled a gate).
    gate_running: Option<gate::Names<u64>>,
}

fn now() -> u64 {
    nanos(SystemTime::now())
}

// ===== impl Store =====

impl Store {
    /// Creates the tables if missing (upgrading a format 4 store first), reads the counts,
    /// replays the log's records of the current epoch (then upgrades a format 5 store's
    /// gate rows) and checkpoints; reads no other job (the first batch reads the running
    /// ones if the store has a gate row, to count the gates').
    pub(crate) fn open(
        db: Database,
        config: &Config,
        mut wal: Option<Wal>,
    ) -> Result<Store, Error> {
        let plain = config.defaults().plain().clone();
        let mut txn = db.begin_write().map_err(storage)?;
        txn.set_quick_repair(config.quick_repair);
        let found = txn
            .open_table(META)
            .map_err(storage)?
            .get("format")
            .map_err(storage)?
            .map(|v| v.value());
        match found {
            Some(FORMAT) => {}
            Some(upgrade::FROM | upgrade::GATES_FROM) => {}
            None if txn
                .open_table(tables::JOBS)
                .map_err(storage)?
                .is_empty()
                .map_err(storage)? => {}
            Some(found) => {
                return Err(Error::storage(format!(
                    "the store is of format {found}; this version of wheel-jobs reads \
                     format {FORMAT} (and upgrades formats {} and {})",
                    upgrade::FROM,
                    upgrade::GATES_FROM
                )))
            }
            None => {
                return Err(Error::storage(
                    "not a wheel-jobs store: jobs but no format recorded",
                ))
            }
        }
        let (counts, epoch, paused) = {
            let mut meta = txn.open_table(META).map_err(storage)?;
            let mut kinds = txn.open_table(KINDS).map_err(storage)?;
            let mut t = Tables::open(&txn, &plain)?;
            let get = |key: &str| -> Result<u64, Error> {
                Ok(meta.get(key).map_err(storage)?.map_or(0, |v| v.value()))
            };
            let total = Tally {
                pending: get("pending")?,
                running: get("running")?,
                dead: get("dead")?,
            };
            let before = Counters::read_kinds(&kinds, total)?;
            let mut counts = if found == Some(upgrade::FROM) {
                upgrade::dead_by_kind(&mut t)?;
                upgrade::counts(total)
            } else {
                before.clone()
            };
            let epoch = get("epoch")?;
            let paused = get("paused")? == 1;
            let owner = match get("owner")? {
                0 => state::mix(now() ^ u64::from(std::process::id()).rotate_left(32)) | 1,
                owner => owner,
            };
            meta.insert("owner", owner).map_err(storage)?;
            t.replaying = true;
            if let Some(wal) = wal.as_mut() {
                wal.replay(owner, epoch, WAL_LIMIT, |changes| {
                    for &(name, value) in &changes.series {
                        t.put_series(name, value)?;
                    }
                    for &(id, until) in &changes.held {
                        t.put_held(id, until)?;
                    }
                    for &(id, value) in &changes.next {
                        t.put_next(id, value)?;
                    }
                    for &(id, value) in &changes.jobs {
                        let before = t.load(id)?;
                        let after = value
                            .map(|v| Record::decode(v, &plain))
                            .transpose()
                            .map_err(storage)?;
                        t.set_exact(&mut counts, id, before.as_ref(), after)?;
                    }
                    // Its gates' final values, over what its jobs counted.
                    for &(name, value) in &changes.gates {
                        t.replay_gate(name, value)?;
                    }
                    t.forget_gates();
                    Ok(())
                })?;
            }
            t.replaying = false;
            // Its log's gate rows too are of format 5: rewritten after the replay.
            if matches!(found, Some(upgrade::FROM | upgrade::GATES_FROM)) {
                upgrade::gate_rows(&mut t)?;
            }
            // Always a new epoch: the log restarts at offset 0, past any record replayed.
            let epoch = epoch + 1;
            meta.insert("format", FORMAT).map_err(storage)?;
            meta.insert("epoch", epoch).map_err(storage)?;
            meta.insert("pending", counts.total.pending)
                .map_err(storage)?;
            meta.insert("running", counts.total.running)
                .map_err(storage)?;
            meta.insert("dead", counts.total.dead).map_err(storage)?;
            counts.write_kinds(&before, &mut kinds)?;
            (counts, epoch, paused)
        };
        txn.commit().map_err(storage)?;
        if let Some(wal) = wal.as_mut() {
            wal.restart();
        }
        let seed = now() ^ (u64::from(std::process::id()) << 32);
        Ok(Store {
            db,
            wal,
            epoch,
            last_checkpoint: Instant::now(),
            checkpoint_every: CHECKPOINT_EVERY,
            broken: false,
            counts,
            paused,
            plain,
            quick_repair: config.quick_repair,
            seed: state::mix(seed),
            issued: 0,
            rules: Rules::default(),
            promoted: None,
            gate_rows: gate::Rows::default(),
            gate_running: None,
        })
    }

    /// The totals per state.
    pub(crate) fn counts(&self) -> Tally {
        self.counts.total
    }

    /// The earliest run_at of the jobs the batches applied since the last call admitted
    /// from their gate's queue: the writer thread wakes idle consumers for them, as for a
    /// schedule, once they are durable.
    pub(crate) fn take_promoted(&mut self) -> Option<u64> {
        self.promoted.take()
    }

    /// Whether memory and disk may disagree (the log could not be written, or a commit
    /// failed after its record was): nothing more may be answered from this store.
    pub(crate) fn broken(&self) -> bool {
        self.broken
    }

    /// Checkpoints if the log holds anything, so the next open replays nothing.
    pub(crate) fn close(mut self) -> Result<(), Error> {
        if self.broken || self.wal.as_ref().is_none_or(|w| w.len() == 0) {
            return Ok(());
        }
        let mut txn = self.db.begin_write().map_err(storage)?;
        txn.set_quick_repair(self.quick_repair);
        txn.open_table(META)
            .map_err(storage)?
            .insert("epoch", self.epoch + 1)
            .map_err(storage)?;
        txn.commit().map_err(storage)?;
        self.epoch += 1;
        Ok(())
    }

    fn token(&mut self) -> u64 {
        self.issued += 1;
        state::mix(self.seed.wrapping_add(self.issued))
    }

    /// Applies `ops` in order in one transaction. On error nothing of the batch is applied.
    pub(crate) fn apply(&mut self, ops: Vec<Op>) -> Result<Vec<Reply>, Error> {
        self.apply_at(ops, now())
    }

    /// [`apply`](Self::apply) with the clock reading handed in (for the model test).
    pub(crate) fn apply_at(&mut self, ops: Vec<Op>, now: u64) -> Result<Vec<Reply>, Error> {
        if self.broken {
            return Err(Error::storage("the store failed earlier"));
        }
        let mut txn = self.db.begin_write().map_err(storage)?;
        txn.set_quick_repair(self.quick_repair);
        let mut counts = self.counts.clone();
        let mut dirty = false;
        let mut durable = false;
        let mut replies = Vec::with_capacity(ops.len());
        let (log, paused, promoted, gate_rows, gate_running, gates_settled) = {
            let mut t = Tables::open(&txn, &self.plain)?;
            t.paused = self.paused;
            t.now = now;
            // Taken: an error below leaves the store none, and the next batch reads rows.
            t.gate_rows = std::mem::take(&mut self.gate_rows);
            if t.gate_rows.len() > gate::ROWS_AT_MOST {
                t.gate_rows.clear();
            }
            // Taken likewise: an error below leaves `None`, counted again next time.
            t.gate_running = match self.gate_running.take() {
                Some(running) => running,
                None => t.count_running()?,
            };
            for op in ops {
                let needs_fsync = op.needs_fsync();
                let (reply, changed) = self.op(&mut t, &mut counts, now, op)?;
                dirty |= changed;
                durable |= changed && needs_fsync;
                replies.push(reply);
            }
            if dirty {
                let mut meta = txn.open_table(META).map_err(storage)?;
                meta.insert("pending", counts.total.pending)
                    .map_err(storage)?;
                meta.insert("running", counts.total.running)
                    .map_err(storage)?;
                meta.insert("dead", counts.total.dead).map_err(storage)?;
                meta.insert("paused", u64::from(t.paused))
                    .map_err(storage)?;
                let mut kinds = txn.open_table(KINDS).map_err(storage)?;
                counts.write_kinds(&self.counts, &mut kinds)?;
            }
            (
                t.log,
                t.paused,
                t.promoted,
                t.gate_rows,
                t.gate_running,
                t.gates_settled,
            )
        };
        if !dirty {
            txn.abort().map_err(storage)?;
            if !gates_settled {
                self.gate_rows = gate_rows;
                self.gate_running = Some(gate_running);
            }
            return Ok(replies);
        }
        let checkpoint = match (&self.wal, &log) {
            (None, _) => durable,
            (Some(_), None) => true,
            (Some(wal), Some(log)) => {
                wal.len() + log.len() as u64 + 64 > WAL_LIMIT
                    || self.last_checkpoint.elapsed() >= self.checkpoint_every
            }
        };
        if checkpoint {
            if self.wal.is_some() {
                txn.open_table(META)
                    .map_err(storage)?
                    .insert("epoch", self.epoch + 1)
                    .map_err(storage)?;
            }
            if let Err(err) = txn.commit() {
                // The log's records stay the truth; memory may now be ahead of them.
                self.broken = self.wal.is_some();
                return Err(storage(err));
            }
            self.epoch += 1;
            self.last_checkpoint = Instant::now();
            if let Some(wal) = self.wal.as_mut() {
                wal.restart();
            }
        } else {
            txn.set_durability(Durability::None).map_err(storage)?;
            if let (Some(wal), Some(log)) = (self.wal.as_mut(), &log) {
                if let Err(err) = wal.append(self.epoch, log, durable) {
                    self.broken = true;
                    return Err(Error::storage(format!(
                        "cannot write the write-ahead log: {err}"
                    )));
                }
            }
            if let Err(err) = txn.commit() {
                self.broken = true;
                return Err(storage(err));
            }
        }
        self.counts = counts;
        self.paused = paused;
        self.gate_rows = gate_rows;
        self.gate_running = Some(gate_running);
        if let Some(at) = promoted {
            self.promoted = Some(self.promoted.map_or(at, |p| p.min(at)));
        }
        Ok(replies)
    }
}

#[cfg(test)]
mod tests;
