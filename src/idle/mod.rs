//! Idle-connection tracking: [`IdleTracker`], [`IdleHandle`], [`Expirations`] and
//! [`IdleStream`].
//!
//! # Ground rules
//! - The tracker is sharded by key hash; each shard is a `Mutex` around a sans-IO
//!   `ring::Ring`: a key → slot table, a slab of slots (key, stamp, links) and a ring of
//!   one-tick buckets (the timeout in ticks plus two, rounded up to a power of two). The
//!   tracker's tick is its own (by default the timeout / 64), a whole number of its timer's
//!   ticks.
//! - Touch time is never read from the clock on the touch path. The driver task publishes
//!   an *epoch* (`TrackerState::epoch`) at most once per tick, every tick while anything is
//!   tracked, and records for each epoch it replaces the instant of the replacement: the
//!   clock is read *after* the new epoch is stored (`SeqCst`), so every touch that recorded
//!   the old epoch happened before that reading. A key whose stamp says epoch `e` is due at
//!   `replacement(e) + idle_timeout`, rounded up to a tick: an upper bound of its real
//!   deadline, so a key never expires early. On the paused clock (a driver waking exactly on
//!   tick boundaries) it expires within one tick of its real deadline; on a real clock the
//!   wake-up's delay past the boundary rounds up to one more tick. The current epoch's end is unknown, so a slot stamped with
//!   it is never expired, only re-filed (at a lower bound of its due tick).
//! - A keyed touch writes the slot's stamp under the shard lock. A key with an
//!   [`IdleHandle`] keeps its stamp in a fixed chunk of atomics instead (the handle holds the
//!   chunk), written without any lock. Those stamps only grow (`ring::raise`: load, then
//!   `fetch_max` if lower), so concurrent touches never lose the newest one; `EXPIRED` and
//!   `REMOVED` are sticky markers above every epoch, which is how the handle and its
//!   [`IdleStream`] learn about expiry without a lock. A handle's stamp is freed only by the
//!   handle's drop, so a stale handle never writes into another key's stamp.
//! - The driver's ring of dues is indexed by epoch modulo the bucket count; an overwritten
//!   entry holds a later epoch's due (later still), so even a stale lookup can only make an
//!   expiry late, never early.
//! - A slot sits in the bucket of a tick at or before its due tick; touching never moves
//!   it. When its bucket comes round the driver re-files it at its due tick or expires it.
//!   New keys are filed in the next bucket to process and placed properly there.
//! - Parking: with nothing tracked the driver stops publishing and parks. An insert that
//!   finds it parked publishes itself (under the publisher lock, reading the clock: the slow
//!   path) and notifies it; `TrackerState::park` and `TrackerState::inserted` pair their `SeqCst`
//!   store/load so that one of them always sees the other.
//! - Stopping: when the timer stops, the driver marks the tracker `DONE`, then empties every
//!   shard under its lock; touches and registrations check `DONE` under the shard lock, so
//!   a stopped tracker holds nothing (see `driver.rs`). A runtime's shutdown that stopped
//!   it (dropping its driver task, or its timer's) is recorded with the `DONE` mark, so that
//!   idle waits polled by that runtime's tasks stay pending instead of completing.
//! - Waiters (`waiters.rs`): each waiting future or stream direction owns one entry, which
//!   it replaces when re-polled and removes when dropped.
//! - Lock order: publisher lock, then one shard lock. Wakers are cloned before a lock is
//!   taken and woken or dropped after it is released, and expired or removed keys are
//!   dropped with no lock held; expired batches go to the stream through the output lock,
//!   which nests in nothing.
//!
//! # Files
//! - `state.rs`: [`TrackerState`], the state the tracker's handles, driver and stream share,
//!   with its configuration and the epoch publisher;
//! - `driver.rs`: the driver task (turns, parking, yielding, stopping);
//! - `tracker.rs`, `builder.rs`: the [`IdleTracker`] API and its [`IdleTrackerBuilder`];
//! - `expirations.rs`, `output.rs`: the [`Expirations`] stream and the queue of expired
//!   keys behind it;
//! - `handle.rs`, `waiters.rs`, `stream.rs`: per-connection handles, their waiters, sockets;
//! - `ring.rs`: the sans-IO shard core.

mod builder;
mod driver;
mod expirations;
mod handle;
mod idleness;
mod output;
mod ring;
mod state;
mod stream;
mod tracker;
mod waiters;

pub use builder::IdleTrackerBuilder;
#[cfg(all(test, wheel_loom))]
pub(crate) use driver::{Next, Scratch};
pub use expirations::Expirations;
pub use handle::{Idle, IdleHandle};
pub use idleness::{IdleKind, IdleMode};
#[cfg(all(test, wheel_loom))]
pub(crate) use state::TrackerState;
pub use stream::{IdleStream, IdleStreamBuilder};
pub use tracker::IdleTracker;
