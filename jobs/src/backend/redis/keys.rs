//! Key names: every key and channel of a queue partition, computed once at open, and which
//! partition an id belongs to.
//!
//! # Ground rules
//!
//! - A partition's keys share the hash tag `{tag}` (`{name}`, or `{name:i}` with
//!   partitions), so every script touches one cluster slot.
//! - Every process routes an id to the same partition ([`partition_of`], a stable hash):
//!   a queue must be opened with the same number of partitions everywhere. The first
//!   open records the count ([`layout`]); an open with another count is refused, and so is
//!   a queue whose recorded keyspace [`FORMAT`] is another (but [`UPGRADES`], recorded
//!   anew as [`FORMAT`] at open).
//! - Besides the keys below, the scripts name one due set per (priority, kind) in use, one
//!   running set and one dead set per kind in use after `due`, `running` and `dead`
//!   (`lua/kinds.lua`), listed in `levels`: they carry the same tag, but are not passed in
//!   `KEYS` (a server that enforces declared keys, such as Dragonfly by default, refuses
//!   these scripts). The hold-off tombstones `held` and `held_until` are declared keys of
//!   every script that touches them (`lua/held.lua`), and so are the successors `next` and
//!   `next_payload` (`lua/next.lua`). The gates of keys with limits (`lua/gates.lua`) are
//!   named after `gate_timers`, declared: `gate_h:`, `gate_a:`, `gate_w:` and a kind's
//!   `gate_l:` sets carry the same tag, undeclared as the level sets are.

/// The layout of a queue's keys and of the values the scripts store in them, recorded in
/// its layout hash by the first open ([`layout`]); a queue of another format is refused at
/// open, naming the format found. 1 is the first published format; 2 stores each job's
/// spec in its meta string and adds the per-(priority, kind) due sets, per-kind running
/// and dead sets (`dead` keeps kind `""`'s), `levels` and per-kind counters
/// (`lua/kinds.lua`), and the hold-off tombstones `held` and `held_until` (`lua/held.lua`)
/// with a job's hold-off in its spec tail (a tail without it holds nothing off), and the
/// successors of running jobs `next` and `next_payload` (`lua/next.lua`; a queue without
/// them has none), and a job's key and its limits in its spec tail with the gates of keys
/// with limits (`lua/gates.lua`; a tail without a key has none, a queue without gates has
/// no gated job), and a series' spec in its record, its occurrences stored with it
/// (`series/record.rs`; a record without one makes them of the plain spec).
pub(super) const FORMAT: u32 = 2;

/// The older format this version reads as it is, and records as [`FORMAT`] at open (a
/// one-way upgrade: format 1's jobs have no spec, and read as the queue's plain spec; its
/// `due` and `running` are the plain level's and kind's; its counters are the totals, all
/// of kind "").
pub(super) const UPGRADES: u32 = 1;

/// One partition's keys and wake channel.
pub(super) struct Keys {
    pub(super) meta: String,
    pub(super) payload: String,
    pub(super) due: String,
    pub(super) counts: String,
    pub(super) seq: String,
    pub(super) dead: String,
    /// Recurring series (`lua/series.lua`): name → record, name → payload, name → the
    /// upcoming occurrences after the head.
    pub(super) series: String,
    pub(super) series_payload: String,
    pub(super) series_next: String,
    pub(super) errors: String,
    pub(super) running: String,
    /// The due sets and running sets in use besides `due` and `running` (`lua/kinds.lua`).
    pub(super) levels: String,
    /// The hold-off tombstones (`lua/held.lua`): id → until ns, and the same ids scored by
    /// until in microseconds.
    pub(super) held: String,
    pub(super) held_until: String,
    /// The successors (`lua/next.lua`): id → run_at ns and spec tail, id → payload.
    pub(super) next: String,
    pub(super) next_payload: String,
    /// The gates of keys with a limit or a rate (`lua/gates.lua`): their rate windows'
    /// timers; every other gate key is named after it (`{tag}:gate_*`).
    pub(super) gate_timers: String,
    pub(super) wake: String,
    /// `PUBLISH`, or `SPUBLISH` on a cluster that has it: how the scripts send on `wake`.
    pub(super) publish: &'static str,
}

impl Keys {
    pub(super) fn new(tag: &str, publish: &'static str) -> Keys {
        Keys {
            meta: format!("{{{tag}}}:meta"),
            payload: format!("{{{tag}}}:payload"),
            due: format!("{{{tag}}}:due"),
            counts: format!("{{{tag}}}:counts"),
            seq: format!("{{{tag}}}:seq"),
            dead: format!("{{{tag}}}:dead"),
            series: format!("{{{tag}}}:series"),
            series_payload: format!("{{{tag}}}:series_payload"),
            series_next: format!("{{{tag}}}:series_next"),
            errors: format!("{{{tag}}}:errors"),
            running: format!("{{{tag}}}:running"),
            levels: format!("{{{tag}}}:levels"),
            held: format!("{{{tag}}}:held"),
            held_until: format!("{{{tag}}}:held_until"),
            next: format!("{{{tag}}}:next"),
            next_payload: format!("{{{tag}}}:next_payload"),
            gate_timers: format!("{{{tag}}}:gate_timers"),
            wake: format!("{{{tag}}}:wake"),
            publish,
        }
    }
}

/// The queue's layout hash (its partition count, `lua/layout.lua`): one key for the whole
/// queue, under the queue's own tag, so `~{name}:*` in an ACL covers it.
pub(super) fn layout(name: &str) -> String {
    format!("{{{name}}}:layout")
}

/// The hash tag of partition `i` of `n` of the queue `name`.
pub(super) fn tag(name: &str, i: usize, n: usize) -> String {
    if n == 1 {
        name.to_owned()
    } else {
        format!("{name}:{i}")
    }
}

/// The partition (of `n`) that holds the job `id`. An occurrence of a recurring series
/// (`name@<RFC 3339 UTC time>`) lives with its series, on the partition of `name`: the
/// claim that takes it creates the next one in the same script.
pub(super) fn partition_of(id: &str, n: usize) -> usize {
    let key = crate::core::series::occurrence_series(id).unwrap_or(id);
    (fnv(key) % n as u64) as usize
}

/// A stable hash (FNV-1a): every process must route an id to the same partition.
fn fnv(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
