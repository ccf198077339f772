//! The gates of keys with limits (`store/gates.rs`), step by step on the tables: which jobs
//! are admitted and which wait after each operation (rebalance: promote, demote, swap), the
//! slots a lease keeps and a death frees, the rate windows' timers, the deletion of a gate
//! left with nothing, and a crash's replay giving back the same gate tables.

use super::*;
use redb::{ReadableDatabase, TableHandle};

use super::super::gate::{
    Gate, GateKey, GATES, GATE_ADMITTED, GATE_TIMERS, GATE_WAITING, WAITING_BY_KIND,
};
use crate::core::kind::Keyed;

/// A spec of kind "g" with key `key`, its limit (0: none) and rate (starts per nanoseconds).
fn gated(key: &str, limit: u32, rate: Option<(u32, u64)>) -> Spec {
    Spec {
        key: Some(Keyed {
            key: key.to_owned(),
            limit,
            rate: rate.map(|(starts, per)| (starts, Duration::from_nanos(per))),
        }),
        ..spec_of_kind("g")
    }
}

fn put(id: &str, run_at: u64, spec: &Spec, dedup: Dedup) -> Op {
    Op::Schedule(NewJob {
        id: id.to_owned(),
        when: at(run_at),
        payload: Vec::new(),
        spec: spec.clone(),
        dedup,
    })
}

/// A claim of kind "g" at `now`: the ids (with their tokens) and the batch's `next_due`.
fn claim_g(store: &mut Store, now: u64) -> (Vec<(String, u64)>, Option<u64>, u64) {
    let op = Op::Claim {
        max: 10,
        kind: Some("g".to_owned()).into(),
    };
    let Reply::Claimed(batch, _) = one(store, op, now) else {
        panic!("a claim");
    };
    let ids = batch.jobs.into_iter().map(|j| (j.id, j.token)).collect();
    (ids, batch.next_due, batch.died)
}

fn ids(claimed: &[(String, u64)]) -> Vec<&str> {
    claimed.iter().map(|(id, _)| id.as_str()).collect()
}

/// Gate `("g", key)` as the store counts it, if it has a row: see [`gate_of`].
fn gate(store: &Store, key: &str) -> Option<Gate> {
    gate_of(store, "g", key)
}

/// Gate `(kind, key)` as the store counts it, if it has a row: its row's fields, the
/// `running` counter the store keeps in memory (counted from the records when it keeps
/// none, as its next batch would), and `admitted` as the store derives it (the size of its
/// range of `gate_admitted`).
fn gate_of(store: &Store, kind: &str, key: &str) -> Option<Gate> {
    let txn = store.db.begin_read().expect("read");
    let table = txn.open_table(GATES).expect("gates");
    let value = table.get((kind, key)).expect("get");
    let mut gate = value.map(|v| Gate::decode(v.value()).expect("a gate"))?;
    let name = format!("{kind}\0{key}");
    gate.running = match &store.gate_running {
        Some(running) => running.get(&name).copied().unwrap_or(0),
        None => {
            let jobs = txn.open_table(super::super::tables::JOBS).expect("jobs");
            let mut n = 0;
            for entry in jobs.iter().expect("iter") {
                let (_, bytes) = entry.expect("entry");
                let record = Record::decode(bytes.value(), &store.plain).expect("a record");
                let running = matches!(
                    record.job.status,
                    crate::core::state::Status::Running { .. }
                );
                if running
                    && record.spec.kind == kind
                    && record.spec.gate().is_some_and(|g| g.key == key)
                {
                    n += 1;
                }
            }
            n
        }
    };
    let admitted = txn.open_table(GATE_ADMITTED).expect("admitted");
    for entry in admitted.iter().expect("iter") {
        let (k, _) = entry.expect("entry");
        let (k_kind, k_key, _, _, _) = k.value();
        if (k_kind, k_key) == (kind, key) {
            gate.admitted += 1;
        }
    }
    Some(gate)
}

/// Gate `("g", key)`'s admitted and waiting jobs, each in key order.
fn parts(store: &Store, key: &str) -> (Vec<String>, Vec<String>) {
    let txn = store.db.begin_read().expect("read");
    let read = |def: redb::TableDefinition<'_, GateKey, ()>| -> Vec<String> {
        let table = txn.open_table(def).expect("table");
        let mut out = Vec::new();
        for entry in table.iter().expect("iter") {
            let (k, _) = entry.expect("entry");
            let (kind, gate_key, _, _, id) = k.value();
            if (kind, gate_key) == ("g", key) {
                out.push(id.to_owned());
            }
        }
        out
    };
    (read(GATE_ADMITTED), read(GATE_WAITING))
}

/// Every row of the five gate tables, for comparing two stores.
fn dump(store: &Store) -> Vec<String> {
    let txn = store.db.begin_read().expect("read");
    let mut out = Vec::new();
    for entry in txn.open_table(GATES).expect("gates").iter().expect("iter") {
        let (k, v) = entry.expect("entry");
        out.push(format!(
            "gate {:?} {:?}",
            k.value(),
            Gate::decode(v.value())
        ));
    }
    for def in [GATE_ADMITTED, GATE_WAITING] {
        for entry in txn.open_table(def).expect("table").iter().expect("iter") {
            out.push(format!(
                "{} {:?}",
                def.name(),
                entry.expect("entry").0.value()
            ));
        }
    }
    for def in [WAITING_BY_KIND, GATE_TIMERS] {
        for entry in txn.open_table(def).expect("table").iter().expect("iter") {
            out.push(format!(
                "{} {:?}",
                def.name(),
                entry.expect("entry").0.value()
            ));
        }
    }
    out
}

/// `(kind, at, key)` of every gate timer.
fn timers(store: &Store) -> Vec<(String, u64, String)> {
    let txn = store.db.begin_read().expect("read");
    let table = txn.open_table(GATE_TIMERS).expect("timers");
    let mut out = Vec::new();
    for entry in table.iter().expect("iter") {
        let (k, _) = entry.expect("entry");
        let (kind, at, key) = k.value();
        out.push((kind.to_owned(), at, key.to_owned()));
    }
    out
}

fn v(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|id| id.to_string()).collect()
}

/// The admitted jobs are always the first `cap` in key order (run_at, priority highest
/// first, id): a move, a higher priority at the same run_at, a cancel and an ack each
/// rebalance, and each promotion is reported
/// for the wakeup.
#[test]
fn the_admitted_jobs_are_the_first_in_key_order() {
    let mut store = store();
    let k = gated("k", 2, None);
    for (id, run_at) in [("k1", 10), ("k2", 20), ("k3", 30), ("k4", 40)] {
        one(&mut store, put(id, run_at, &k, Dedup::Keep), 0);
    }
    assert_eq!(parts(&store, "k"), (v(&["k1", "k2"]), v(&["k3", "k4"])));
    let g = gate(&store, "k").expect("a gate");
    assert_eq!((g.admitted, g.waiting, g.running, g.limit), (2, 2, 0, 2));
    assert_eq!(
        store.take_promoted(),
        None,
        "placed on entry, nothing moved"
    );
    let counts = store.counts();
    assert_eq!(counts.pending, 4, "waiting jobs are pending");

    // Moved before the first: swapped with the last admitted.
    one(
        &mut store,
        Op::Reschedule {
            id: "k4".into(),
            when: at(5),
        },
        0,
    );
    assert_eq!(parts(&store, "k"), (v(&["k4", "k1"]), v(&["k2", "k3"])));
    assert_eq!(store.take_promoted(), Some(5));

    // At the same run_at a higher priority goes first.
    let urgent = Spec {
        priority: 3,
        ..k.clone()
    };
    one(&mut store, put("k5", 10, &urgent, Dedup::Keep), 0);
    assert_eq!(
        parts(&store, "k"),
        (v(&["k4", "k5"]), v(&["k1", "k2", "k3"]))
    );

    // Later, a higher priority waits behind due jobs.
    one(&mut store, put("k6", 45, &urgent, Dedup::Keep), 0);
    assert_eq!(
        parts(&store, "k"),
        (v(&["k4", "k5"]), v(&["k1", "k2", "k3", "k6"]))
    );
    one(&mut store, Op::Cancel { id: "k6".into() }, 0);

    // An admitted job cancelled: the first waiting one takes its place.
    one(&mut store, Op::Cancel { id: "k4".into() }, 0);
    assert_eq!(parts(&store, "k"), (v(&["k5", "k1"]), v(&["k2", "k3"])));
    assert_eq!(store.take_promoted(), Some(10));

    // A waiting job replaced into another key leaves this gate for its own.
    let other = gated("other", 1, None);
    one(&mut store, put("k3", 30, &other, Dedup::Replace), 0);
    assert_eq!(parts(&store, "k"), (v(&["k5", "k1"]), v(&["k2"])));
    assert_eq!(parts(&store, "other"), (v(&["k3"]), v(&[])));

    let (claimed, _, _) = claim_g(&mut store, 100);
    assert_eq!(ids(&claimed), ["k5", "k1", "k3"], "priority first");
    let g = gate(&store, "k").expect("a gate");
    assert_eq!((g.admitted, g.waiting, g.running), (0, 1, 2));
    let (k5, token) = &claimed[0];
    let ack = Op::Ack {
        id: k5.clone(),
        token: *token,
    };
    assert_eq!(one(&mut store, ack, 101), Reply::Acked(true, None));
    assert_eq!(parts(&store, "k"), (v(&["k2"]), v(&[])));
    assert_eq!(store.take_promoted(), Some(20), "the ack let k2 in");
}

/// A settle skips the rebalance of a gate whose counters show it cannot move (nothing
/// waits within the cap, or jobs wait with a cap of 0 and none admitted), and still
/// rebalances one that can: the ack freeing a slot promotes the waiting job, and the gate's
/// row, read by the first operation and kept between batches, stays the table's.
#[test]
fn a_gate_that_cannot_move_skips_its_rebalance_and_one_that_can_still_moves() {
    let mut store = store();
    let k = gated("k", 2, None);
    for (id, run_at) in [("k1", 10), ("k2", 20), ("k3", 30)] {
        one(&mut store, put(id, run_at, &k, Dedup::Keep), 0);
    }
    assert_eq!(parts(&store, "k"), (v(&["k1", "k2"]), v(&["k3"])));
    let (claimed, _, _) = claim_g(&mut store, 100);
    assert_eq!(ids(&claimed), ["k1", "k2"]);
    let g = gate(&store, "k").expect("a gate");
    assert_eq!((g.admitted, g.waiting, g.running), (0, 1, 2));
    assert!(
        g.balanced(100, false),
        "a cap of 0 and none admitted: nothing can move"
    );
    assert_eq!(store.gate_rows.get("g\0k"), Some(&Some(g)), "the row kept");
    let ack = |(id, token): &(String, u64)| Op::Ack {
        id: id.clone(),
        token: *token,
    };
    assert_eq!(
        one(&mut store, ack(&claimed[0]), 101),
        Reply::Acked(true, None)
    );
    assert_eq!(
        parts(&store, "k"),
        (v(&["k3"]), v(&[])),
        "the ack let k3 in"
    );
    assert_eq!(store.take_promoted(), Some(30));
    let g = gate(&store, "k").expect("a gate");
    assert_eq!((g.admitted, g.waiting, g.running), (1, 0, 1));
    assert!(g.balanced(101, false), "nothing waits, within the cap");
    assert_eq!(store.gate_rows.get("g\0k"), Some(&Some(g)));
    assert_eq!(
        one(&mut store, ack(&claimed[1]), 102),
        Reply::Acked(true, None)
    );
    let g = gate(&store, "k").expect("a gate");
    assert_eq!((g.admitted, g.waiting, g.running), (1, 0, 0));
    assert_eq!(store.take_promoted(), None, "nothing waited");
    one(&mut store, Op::Cancel { id: "k3".into() }, 103);
    assert_eq!(gate(&store, "k"), None, "deleted with its last job");
    assert_eq!(store.gate_rows.get("g\0k"), Some(&None), "kept as no row");
}

/// A job due later never holds its key's slot from a due one, whatever its priority: with
/// a limit of 1, a priority-5 job due in an hour leaves the slot to a priority-0 job due now.
#[test]
fn a_later_job_of_a_higher_priority_leaves_the_slot_to_a_due_one() {
    let mut store = store();
    let k = gated("k", 1, None);
    let later = Spec {
        priority: 5,
        ..k.clone()
    };
    let hour = 3600 * 1_000_000_000;
    one(&mut store, put("later", hour, &later, Dedup::Keep), 0);
    one(&mut store, put("due", 0, &k, Dedup::Keep), 0);
    assert_eq!(parts(&store, "k"), (v(&["due"]), v(&["later"])));
    let (claimed, _, _) = claim_g(&mut store, 1);
    assert_eq!(ids(&claimed), ["due"], "the due one runs now");
    let (id, token) = claimed[0].clone();
    one(&mut store, Op::Ack { id, token }, 2);
    assert_eq!(parts(&store, "k"), (v(&["later"]), v(&[])));
    let (claimed, next_due, _) = claim_g(&mut store, 3);
    assert!(claimed.is_empty());
    assert_eq!(next_due, Some(hour), "then the later one, at its time");
}

/// At the same run_at the higher priority holds the key's slot, whichever came first.
#[test]
fn at_the_same_run_at_the_higher_priority_goes_first() {
    let mut store = store();
    let k = gated("k", 1, None);
    let high = Spec {
        priority: 2,
        ..k.clone()
    };
    one(&mut store, put("low", 10, &k, Dedup::Keep), 0);
    one(&mut store, put("high", 10, &high, Dedup::Keep), 0);
    assert_eq!(parts(&store, "k"), (v(&["high"]), v(&["low"])));
    let (claimed, _, _) = claim_g(&mut store, 10);
    assert_eq!(ids(&claimed), ["high"]);
}

/// A replace that changes only the key's limits (same kind, key, priority and run_at)
/// rebalances the gate: a lower limit demotes the admitted jobs over it (a claim never
/// exceeds it), a higher one admits the waiting jobs it makes room for.
#[test]
fn a_replace_changing_only_the_limits_rebalances_the_gate() {
    let mut store = store();
    let two = gated("k", 2, None);
    let one_ = gated("k", 1, None);
    one(&mut store, put("a", 0, &two, Dedup::Keep), 0);
    one(&mut store, put("b", 1, &two, Dedup::Keep), 0);
    assert_eq!(parts(&store, "k"), (v(&["a", "b"]), v(&[])));
    one(&mut store, put("b", 1, &one_, Dedup::Replace), 0);
    assert_eq!(gate(&store, "k").expect("a gate").limit, 1);
    assert_eq!(parts(&store, "k"), (v(&["a"]), v(&["b"])), "b demoted");
    let (claimed, _, _) = claim_g(&mut store, 5);
    assert_eq!(ids(&claimed), ["a"], "one running at most");
    assert_eq!(gate(&store, "k").expect("a gate").running, 1);

    // Raised again by a replace of the waiting job: it is admitted beside the running one.
    one(&mut store, put("b", 1, &two, Dedup::Replace), 6);
    assert_eq!(parts(&store, "k"), (v(&["b"]), v(&[])), "b promoted");
    assert_eq!(store.take_promoted(), Some(1));
    let (claimed, _, _) = claim_g(&mut store, 7);
    assert_eq!(ids(&claimed), ["b"]);
}

/// An ended lease keeps its slot for the redelivery; the death at the last attempt frees
/// it, and the claim's `next_due` shows the job it admitted.
#[test]
fn a_redelivery_keeps_its_slot_and_a_death_frees_it() {
    let mut store = store();
    let k = gated("k", 1, None);
    let lease = nanos_of(k.lease);
    one(&mut store, put("a", 0, &k, Dedup::Keep), 0);
    one(&mut store, put("b", 1, &k, Dedup::Keep), 0);
    let (claimed, _, _) = claim_g(&mut store, 5);
    assert_eq!(ids(&claimed), ["a"]);
    // Its lease ended: redelivered, b still waits.
    let (claimed, next_due, died) = claim_g(&mut store, 5 + lease);
    assert_eq!((ids(&claimed), died), (vec!["a"], 0));
    assert_eq!(
        next_due,
        Some(5 + 2 * lease),
        "the new lease's end; b is not due"
    );
    assert_eq!(parts(&store, "k"), (v(&[]), v(&["b"])));
    assert_eq!(gate(&store, "k").expect("a gate").running, 1);
    // Out of attempts (MAX_ATTEMPTS): dead, and b admitted in the same claim.
    let (claimed, next_due, died) = claim_g(&mut store, 5 + 2 * lease);
    assert_eq!((claimed.len(), died), (0, 1));
    assert_eq!(next_due, Some(1), "b, admitted by the death");
    assert_eq!(store.take_promoted(), Some(1));
    let (claimed, _, _) = claim_g(&mut store, 5 + 2 * lease);
    assert_eq!(ids(&claimed), ["b"]);
}

/// A rate's window holds the starts; its timer is in the claim's `next_due`, and the first
/// claim at or after it admits the next jobs.
#[test]
fn a_rate_window_ends_at_its_timer() {
    let mut store = store();
    let k = gated("k", 0, Some((2, 100)));
    for (id, run_at) in [("r1", 0), ("r2", 1), ("r3", 2)] {
        one(&mut store, put(id, run_at, &k, Dedup::Keep), 0);
    }
    assert_eq!(parts(&store, "k"), (v(&["r1", "r2"]), v(&["r3"])));
    let (claimed, _, _) = claim_g(&mut store, 10);
    assert_eq!(ids(&claimed), ["r1", "r2"]);
    let g = gate(&store, "k").expect("a gate");
    assert_eq!((g.window_start, g.started, g.timer), (10, 2, Some(110)));
    assert_eq!(timers(&store), [("g".to_owned(), 110, "k".to_owned())]);
    for (id, token) in claimed {
        assert_eq!(
            one(&mut store, Op::Ack { id, token }, 11),
            Reply::Acked(true, None)
        );
    }
    let (claimed, next_due, _) = claim_g(&mut store, 50);
    assert!(claimed.is_empty());
    assert_eq!(next_due, Some(110), "the window's end");
    let (claimed, _, _) = claim_g(&mut store, 110);
    assert_eq!(ids(&claimed), ["r3"], "a new window");
    assert_eq!(timers(&store), [], "no job waits");
    let g = gate(&store, "k").expect("a gate");
    assert_eq!((g.window_start, g.started, g.timer), (110, 1, None));
}

/// A gate with no job is deleted, unless its rate window is open: then it is kept, with
/// a timer at the window's end, and the first claim after that deletes it.
#[test]
fn an_empty_gate_is_deleted_once_its_window_ends() {
    let mut store = store();
    let limited = gated("l", 1, None);
    one(&mut store, put("a", 0, &limited, Dedup::Keep), 0);
    let (claimed, _, _) = claim_g(&mut store, 1);
    let (id, token) = claimed.into_iter().next().expect("a");
    assert_eq!(
        one(&mut store, Op::Ack { id, token }, 2),
        Reply::Acked(true, None)
    );
    assert_eq!(gate(&store, "l"), None, "no job, no window");

    one(&mut store, put("b", 0, &limited, Dedup::Keep), 0);
    one(&mut store, Op::Cancel { id: "b".into() }, 0);
    assert_eq!(gate(&store, "l"), None, "cancelled before any claim");

    let rated = gated("r", 0, Some((1, 100)));
    one(&mut store, put("c", 0, &rated, Dedup::Keep), 0);
    let (claimed, _, _) = claim_g(&mut store, 10);
    let (id, token) = claimed.into_iter().next().expect("c");
    assert_eq!(
        one(&mut store, Op::Ack { id, token }, 20),
        Reply::Acked(true, None)
    );
    let g = gate(&store, "r").expect("kept: its window is open");
    assert!(g.is_empty());
    assert_eq!(timers(&store), [("g".to_owned(), 110, "r".to_owned())]);
    let (_, next_due, _) = claim_g(&mut store, 50);
    assert_eq!(next_due, Some(110));
    // A job of the key now still counts the window's start.
    one(&mut store, put("d", 0, &rated, Dedup::Keep), 60);
    assert_eq!(parts(&store, "r"), (v(&[]), v(&["d"])));
    one(&mut store, Op::Cancel { id: "d".into() }, 60);
    let (claimed, next_due, _) = claim_g(&mut store, 110);
    assert!(claimed.is_empty());
    assert_eq!((gate(&store, "r"), timers(&store)), (None, vec![]));
    assert_eq!(next_due, None);
}

/// The gate tables are what the log's replay makes them: a crash mid-run leaves the same
/// rows as the live store had, and the limits hold after it.
#[test]
fn gates_survive_a_crash_by_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = file_store(dir.path(), 0);
    store.checkpoint_every = Duration::from_secs(3600);
    let k = gated("k", 2, None);
    let r = gated("r", 0, Some((1, 1000)));
    for (id, run_at) in [("k1", 10), ("k2", 20), ("k3", 30), ("k4", 40)] {
        one(&mut store, put(id, run_at, &k, Dedup::Keep), 0);
    }
    one(&mut store, put("r1", 0, &r, Dedup::Keep), 0);
    one(&mut store, put("r2", 0, &r, Dedup::Keep), 0);
    let (claimed, _, _) = claim_g(&mut store, 50);
    assert_eq!(ids(&claimed), ["r1", "k1", "k2"]);
    one(
        &mut store,
        Op::Reschedule {
            id: "k4".into(),
            when: at(5),
        },
        51,
    );
    let (id, token) = claimed[1].clone();
    one(&mut store, Op::Ack { id, token }, 52);
    let live = dump(&store);
    assert!(
        live.iter().any(|row| row.starts_with("gate_timers")),
        "{live:?}"
    );
    let mut store = crash(store, dir.path(), 0);
    assert_eq!(dump(&store), live);
    let (claimed, _, _) = claim_g(&mut store, 53);
    assert_eq!(
        ids(&claimed),
        ["k4"],
        "k2 runs: one slot; r's window holds r2"
    );
    let (claimed, _, _) = claim_g(&mut store, 1050);
    assert_eq!(ids(&claimed), ["r2"], "the window ended");
}

/// A store of format 5, whose gate rows (version 1) held `running` and `admitted`, and a
/// log record of its epoch holding a version 1 row: opening replays the log, rewrites
/// every row as version 2, and the counters come from the jobs, not from the old rows
/// (made wrong here on purpose: a limit of 2 with 5 "running" would admit nothing).
#[test]
fn a_format_5_store_and_its_log_are_upgraded_at_open() {
    use crate::backend::embedded::wal;
    use redb::ReadableTable;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = file_store(dir.path(), 0);
    let spec = gated("k", 2, None);
    for id in ["a", "b", "c"] {
        one(&mut store, put(id, 0, &spec, Dedup::Keep), 0);
    }
    let (claimed, _, _) = claim_g(&mut store, 1);
    assert_eq!(ids(&claimed[..1]), ["a"]);
    let token = claimed[0].1;
    // Leave one running ("b" claimed again would be a second): ack "b" back to the pair.
    one(
        &mut store,
        Op::Ack {
            id: "b".into(),
            token: claimed[1].1,
        },
        1,
    );
    one(&mut store, put("b", 0, &spec, Dedup::Keep), 1);
    let g = gate(&store, "k").expect("a gate");
    assert_eq!((g.running, g.admitted, g.waiting), (1, 1, 1));
    store.close().expect("close");
    let v1 = |fields: [u64; 9]| {
        let mut row = vec![1u8];
        for field in fields {
            row.extend_from_slice(&field.to_le_bytes());
        }
        row
    };
    let (epoch, owner) = {
        let db = redb::Database::builder()
            .create(dir.path().join("s0.redb"))
            .unwrap();
        let txn = db.begin_write().unwrap();
        let got = {
            let mut meta = txn.open_table(META).unwrap();
            meta.insert("format", 5).unwrap();
            let get = |key: &str| meta.get(key).unwrap().unwrap().value();
            let got = (get("epoch"), get("owner"));
            let mut gates = txn.open_table(GATES).unwrap();
            // running 5, admitted 5, waiting 1, no window, limit 2, no rate, no timer.
            let row = v1([5, 5, 1, 0, 0, 2, 0, 0, 0]);
            gates.insert(("g", "k"), row.as_slice()).unwrap();
            got
        };
        txn.commit().unwrap();
        got
    };
    {
        // A gate of the log alone: an open rate window and no job.
        let mut log = Wal::open(&dir.path().join("s0.redb.wal")).unwrap();
        log.replay(owner, epoch, u64::MAX, |_| Ok(())).unwrap();
        let mut body = Vec::new();
        let row = v1([3, 3, 0, 1, 1, 0, 1, u64::MAX / 2, 0]);
        wal::push_gate_change(&mut body, "g\0w", Some(&row));
        log.append(epoch, &body, true).unwrap();
    }
    let mut store = file_store(dir.path(), 0);
    {
        let txn = store.db.begin_read().unwrap();
        let format = txn.open_table(META).unwrap().get("format").unwrap();
        assert_eq!(format.map(|v| v.value()), Some(FORMAT));
        let gates = txn.open_table(GATES).unwrap();
        let mut names = Vec::new();
        for entry in gates.iter().unwrap() {
            let (k, v) = entry.unwrap();
            assert!(!Gate::is_old_row(v.value()), "{:?} rewritten", k.value());
            names.push(k.value().1.to_owned());
        }
        assert_eq!(names, ["k", "w"]);
    }
    let w = gate(&store, "w").expect("the log's gate");
    assert_eq!(
        (w.running, w.admitted, w.window_start, w.started),
        (0, 0, 1, 1)
    );
    one(&mut store, Op::Counts, 2);
    let g = gate(&store, "k").expect("a gate");
    assert_eq!((g.running, g.admitted, g.waiting), (1, 1, 1));
    // Its ack frees a slot: the waiting job is admitted beside the admitted one.
    one(
        &mut store,
        Op::Ack {
            id: "a".into(),
            token,
        },
        2,
    );
    assert_eq!(parts(&store, "k"), (v(&["b", "c"]), v(&[])));
    let g = gate(&store, "k").expect("a gate");
    assert_eq!((g.running, g.admitted, g.waiting), (0, 2, 0));
}

/// A gated job of the plain group (kind `""`, priority 0) is admitted into the plain
/// group's own `due` table and waits like any other: listed pending, claimed in turn.
#[test]
fn a_gated_job_of_the_plain_group_waits_and_is_listed() {
    let mut store = store();
    let plain = Spec {
        key: Some(Keyed {
            key: "k".into(),
            limit: 1,
            rate: None,
        }),
        ..store.plain.clone()
    };
    one(&mut store, put("p1", 1, &plain, Dedup::Keep), 0);
    one(&mut store, put("p2", 2, &plain, Dedup::Keep), 0);
    let list = Op::List {
        state: JobState::Pending,
        after: None,
        limit: 10,
        payloads: false,
        kind: Some(String::new()),
    };
    let Reply::Listed(listed) = one(&mut store, list, 0) else {
        panic!("a list");
    };
    let listed: Vec<_> = listed
        .iter()
        .map(|(at, j)| (*at, j.id(), j.key()))
        .collect();
    assert_eq!(listed, [(1, "p1", Some("k")), (2, "p2", Some("k"))]);
    let claim = |store: &mut Store, now| {
        let op = Op::Claim {
            max: 10,
            kind: None::<String>.into(),
        };
        let Reply::Claimed(batch, _) = one(store, op, now) else {
            panic!("a claim");
        };
        batch.jobs
    };
    let claimed = claim(&mut store, 5);
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, "p1");
    assert!(claim(&mut store, 6).is_empty(), "p2 waits for p1's slot");
    let ack = Op::Ack {
        id: "p1".into(),
        token: claimed[0].token,
    };
    one(&mut store, ack, 7);
    let claimed = claim(&mut store, 8);
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, "p2");
}

// ===== random operations against the gates' invariants =====

/// The keys of the random runs, each with a fixed rate (so that its starts can be checked)
/// and one of two limits (`variant`): a limit, a rate, both, and no key at all (a job of
/// the same kind outside every gate).
fn key_spec(key: u8, priority: u8, variant: u8) -> Spec {
    let v = usize::from(variant % 2);
    let (key, limit, rate) = match key {
        0 => ("a", [2, 1][v], None),
        1 => ("b", [0, 1][v], Some((2, 50))),
        2 => ("c", [1, 2][v], Some((1, 30))),
        _ => ("", 0, None),
    };
    let spec = if key.is_empty() {
        spec_of_kind("g")
    } else {
        gated(key, limit, rate)
    };
    Spec {
        priority: [0, 3][usize::from(priority)],
        // Leases that end within a run (a spec made by hand: `check_spec` would raise it).
        lease: Duration::from_nanos(25),
        ..spec
    }
}

#[derive(Debug, Clone)]
enum GStep {
    Advance(u64),
    /// Job, key, run_at, priority, limits (`key_spec`), whether a `Dedup::Replace`.
    Schedule(u8, u8, u64, u8, u8, bool),
    /// A `Dedup::Replace` of a pending gated job by itself with the limits `key_spec` gives
    /// the variant: only its gate's limits change.
    Relimit(u8, u8),
    Cancel(u8),
    Reschedule(u8, u64),
    /// At most this many, of kind "g" or of every kind.
    Claim(usize, bool),
    Ack(u8),
    /// A retry after a delay, or a failure.
    Retry(u8, u64, bool),
    Revive(u8),
    Crash,
}

fn gstep() -> impl Strategy<Value = GStep> {
    let id = 0..8u8;
    prop_oneof![
        (0..40u64).prop_map(GStep::Advance),
        (id.clone(), 0..4u8, 0..80u64, 0..2u8, 0..2u8, any::<bool>())
            .prop_map(|(i, k, at, p, l, r)| GStep::Schedule(i, k, at, p, l, r)),
        (id.clone(), 0..4u8, 0..80u64, 0..2u8, 0..2u8, any::<bool>())
            .prop_map(|(i, k, at, p, l, r)| GStep::Schedule(i, k, at, p, l, r)),
        (id.clone(), 0..2u8).prop_map(|(i, l)| GStep::Relimit(i, l)),
        id.clone().prop_map(GStep::Cancel),
        (id.clone(), 0..80u64).prop_map(|(i, at)| GStep::Reschedule(i, at)),
        (1..4usize, any::<bool>()).prop_map(|(n, all)| GStep::Claim(n, all)),
        (1..4usize, any::<bool>()).prop_map(|(n, all)| GStep::Claim(n, all)),
        id.clone().prop_map(GStep::Ack),
        (id.clone(), 0..30u64, any::<bool>()).prop_map(|(i, a, f)| GStep::Retry(i, a, f)),
        id.clone().prop_map(GStep::Revive),
        Just(GStep::Crash),
    ]
}

/// The key, run_at and priority (as `key_spec` numbers them) of the pending gated job
/// `id`, if it is one.
fn pending_gated(store: &Store, id: &str) -> Option<(u8, u64, u8)> {
    let txn = store.db.begin_read().expect("read");
    let jobs = txn.open_table(super::super::tables::JOBS).expect("jobs");
    let bytes = jobs.get(id).expect("get")?;
    let record = Record::decode(bytes.value(), &store.plain).expect("a record");
    if record.job.status != crate::core::state::Status::Pending {
        return None;
    }
    let key = ["a", "b", "c"]
        .iter()
        .position(|k| record.spec.gate().is_some_and(|g| g.key == *k))?;
    let priority = u8::from(record.spec.priority != 0);
    Some((key as u8, record.job.run_at, priority))
}

/// A gated job as the records show it: `(key, (run_at, level), id, waiting)` while pending.
type Pending = (String, (u64, u8), String, bool);

/// Checks every gate against the records at `now` (the last operation's time): its
/// counters, its indexes and `due`, its order and its size (`admitted = min(admitted +
/// waiting, cap)` unless its timer is due, when only `admitted <= cap`), its limit (no
/// step raises its running jobs over it: `before`, the running jobs' keys before the step,
/// may be over a limit lowered since); and that every gated job has its gate. The running
/// jobs' ids, with their keys.
fn check_gates(
    store: &Store,
    now: u64,
    before: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, TestCaseError> {
    let txn = store.db.begin_read().expect("read");
    let jobs = txn.open_table(super::super::tables::JOBS).expect("jobs");
    let due = txn.open_table(super::super::tables::DUE).expect("due");
    let mut pending: Vec<Pending> = Vec::new();
    let mut running: BTreeMap<String, String> = BTreeMap::new();
    for entry in jobs.iter().expect("iter") {
        let (id, bytes) = entry.expect("entry");
        let record = Record::decode(bytes.value(), &store.plain).expect("a record");
        let id = id.value().to_owned();
        let Some(keyed) = record.spec.gate() else {
            prop_assert!(!record.waiting, "{id} waits outside any gate");
            continue;
        };
        match record.job.status {
            crate::core::state::Status::Pending => {
                let level = super::super::tables::level(record.spec.priority);
                let place = (record.job.run_at, level);
                let in_due = due
                    .get(("g", level, record.job.run_at, id.as_str()))
                    .expect("get")
                    .is_some();
                prop_assert_eq!(in_due, !record.waiting, "{} in due", id);
                pending.push((keyed.key.clone(), place, id, record.waiting));
            }
            crate::core::state::Status::Running { .. } => {
                running.insert(id, keyed.key.clone());
            }
            crate::core::state::Status::Dead { .. } => {
                prop_assert!(!record.waiting, "{id} dead and waiting");
            }
        }
    }
    let mut keys: std::collections::BTreeSet<String> =
        pending.iter().map(|p| p.0.clone()).collect();
    keys.extend(running.values().cloned());
    for key in ["a", "b", "c"] {
        let Some(g) = gate(store, key) else {
            prop_assert!(!keys.contains(key), "gate {key} missing");
            continue;
        };
        let mut admitted: Vec<_> = pending
            .iter()
            .filter(|p| p.0 == key && !p.3)
            .map(|p| (p.1, p.2.clone()))
            .collect();
        let mut waiting: Vec<_> = pending
            .iter()
            .filter(|p| p.0 == key && p.3)
            .map(|p| (p.1, p.2.clone()))
            .collect();
        admitted.sort();
        waiting.sort();
        let runs = running.values().filter(|k| *k == key).count() as u64;
        prop_assert_eq!(
            (g.running, g.admitted, g.waiting),
            (runs, admitted.len() as u64, waiting.len() as u64),
            "gate {}",
            key
        );
        let ids = |part: &[((u64, u8), String)]| -> Vec<String> {
            part.iter().map(|(_, id)| id.clone()).collect()
        };
        prop_assert_eq!(parts(store, key), (ids(&admitted), ids(&waiting)));
        if let (Some(last), Some(first)) = (admitted.last(), waiting.first()) {
            prop_assert!(
                last < first,
                "gate {key}: {last:?} admitted after {first:?}"
            );
        }
        let cap = g.cap(now, 0);
        prop_assert!(g.admitted <= cap, "gate {key} over its cap: {g:?}");
        if g.timer.is_none_or(|at| at > now) {
            prop_assert_eq!(g.admitted, (g.admitted + g.waiting).min(cap), "{:?}", g);
        }
        if g.limit > 0 {
            let ran = before.values().filter(|k| *k == key).count() as u64;
            prop_assert!(
                g.running <= u64::from(g.limit).max(ran),
                "gate {key} over its limit: {g:?}, {ran} running before"
            );
        }
    }
    // The rows the store keeps between batches are the committed rows, exactly, with the
    // counters the records give.
    let gates = txn.open_table(GATES).expect("gates");
    for (name, row) in &store.gate_rows {
        let (kind, key) = name.split_once('\0').expect("a gate's name");
        let stored = gates.get((kind, key)).expect("get");
        let stored = stored.map(|v| Gate::decode(v.value()).expect("a gate").encode());
        prop_assert_eq!(
            stored,
            row.map(|g| g.encode()),
            "the kept row of gate {:?}",
            name
        );
        prop_assert_eq!(
            row.map(|g| (g.running, g.admitted)),
            gate_of(store, kind, key).map(|g| (g.running, g.admitted)),
            "the kept counters of gate {:?}",
            name
        );
    }
    // The running counters the store keeps are those of the records, for every gate.
    if let Some(kept) = &store.gate_running {
        let mut counted: BTreeMap<String, u64> = BTreeMap::new();
        for key in running.values() {
            *counted.entry(format!("g\0{key}")).or_default() += 1;
        }
        let kept: BTreeMap<String, u64> = kept.iter().map(|(k, n)| (k.clone(), *n)).collect();
        prop_assert_eq!(kept, counted, "the running counters kept");
    }
    Ok(running)
}

/// Random operations on gated jobs (and ungated ones of the same kind) on a file store
/// crashed at random: after every step the gates agree with the records
/// (`check_gates`); a crash leaves the same gate tables; a claim's `next_due` is no later
/// than its kind's earliest gate timer; and each key's starts keep its rate (fixed windows
/// opened at a start, as `Gate::start` counts them).
fn run_gates(steps: Vec<GStep>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = file_store(dir.path(), 0);
    let mut crashes = 0;
    let mut now = 0;
    let mut tokens: BTreeMap<String, u64> = BTreeMap::new();
    let mut running = BTreeMap::new();
    // Per key: the current window's start and its starts.
    let mut windows: BTreeMap<String, (u64, u32)> = BTreeMap::new();
    for step in steps {
        let id = |i: u8| format!("j{i}");
        match step {
            GStep::Advance(by) => now += by,
            GStep::Schedule(i, key, run_at, priority, variant, replace) => {
                let dedup = if replace { Dedup::Replace } else { Dedup::Keep };
                let spec = key_spec(key, priority, variant);
                one(&mut store, put(&id(i), run_at, &spec, dedup), now);
            }
            GStep::Relimit(i, variant) => {
                if let Some((key, run_at, priority)) = pending_gated(&store, &id(i)) {
                    let spec = key_spec(key, priority, variant);
                    one(&mut store, put(&id(i), run_at, &spec, Dedup::Replace), now);
                }
            }
            GStep::Cancel(i) => drop(one(&mut store, Op::Cancel { id: id(i) }, now)),
            GStep::Reschedule(i, run_at) => {
                let op = Op::Reschedule {
                    id: id(i),
                    when: at(run_at),
                };
                one(&mut store, op, now);
            }
            GStep::Claim(max, all) => {
                let kind = if all { None } else { Some("g".to_owned()) };
                let op = Op::Claim {
                    max,
                    kind: kind.into(),
                };
                let Reply::Claimed(batch, _) = one(&mut store, op, now) else {
                    panic!("a claim");
                };
                for job in &batch.jobs {
                    tokens.insert(job.id.clone(), job.token);
                    let Some(keyed) = job.spec.gate() else {
                        continue;
                    };
                    if running.contains_key(&job.id) {
                        continue; // a redelivery is no start
                    }
                    if let Some((starts, per)) = keyed.rate {
                        let per = nanos_of(per);
                        let window = windows.entry(keyed.key.clone()).or_insert((now, 0));
                        if now >= window.0 + per {
                            *window = (now, 0);
                        }
                        window.1 += 1;
                        prop_assert!(window.1 <= starts, "key {} over its rate", keyed.key);
                    }
                }
                let first_timer = timers(&store).iter().map(|(_, at, _)| *at).min();
                if let Some(timer) = first_timer {
                    prop_assert!(
                        batch.next_due.is_some_and(|due| due <= timer),
                        "next_due {:?} after the timer {}",
                        batch.next_due,
                        timer
                    );
                }
            }
            GStep::Ack(i) => {
                let token = tokens.get(&id(i)).copied().unwrap_or(0);
                one(&mut store, Op::Ack { id: id(i), token }, now);
            }
            GStep::Retry(i, after, fail) => {
                let token = tokens.get(&id(i)).copied().unwrap_or(0);
                let op = Op::Retry {
                    id: id(i),
                    token,
                    after: Duration::from_nanos(after),
                    error: fail.then(|| "boom".to_owned()),
                };
                one(&mut store, op, now);
            }
            GStep::Revive(i) => drop(one(
                &mut store,
                Op::Revive {
                    id: id(i),
                    when: at(now),
                },
                now,
            )),
            GStep::Crash => {
                let live = dump(&store);
                store = crash(store, dir.path(), crashes);
                crashes += 1;
                prop_assert_eq!(dump(&store), live, "the gates after a crash");
            }
        }
        running = check_gates(&store, now, &running)?;
    }
    Ok(())
}

proptest! {
    // Each step is an fsync here.
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn gates_keep_their_invariants_through_random_operations_and_crashes(
        steps in proptest::collection::vec(gstep(), 1..80)
    ) {
        run_gates(steps)?;
    }
}

/// A keyed job at an occurrence's id is never adopted as a series' head: a claim that moves
/// the series leases the occurrence it gives without asking its gate, so a waiting one would
/// run over its key's limit. The series makes its own occurrence instead, and the keyed job
/// runs in its turn.
#[test]
fn a_keyed_job_is_never_adopted_as_a_series_head() {
    let mut store = store();
    one(&mut store, set_every_10("s"), 100 * MS);
    let plain = Spec {
        key: Some(Keyed {
            key: "k".into(),
            limit: 1,
            rate: None,
        }),
        ..store.plain.clone()
    };
    let keyed = crate::core::series::occurrence_id("s", 120 * MS);
    one(&mut store, put("x", 0, &plain, Dedup::Keep), 100 * MS);
    one(
        &mut store,
        put(&keyed, 120 * MS, &plain, Dedup::Keep),
        100 * MS,
    );
    assert_eq!(parts(&store, "k"), (v(&[]), v(&[])), "not of kind g");
    // At 125 the head (110) is superseded by the occurrence at 120 under `Latest`.
    let claimed = claim_kinds(&mut store, None, 125 * MS);
    assert_eq!(claimed, [("x".to_owned(), String::new())], "one slot");
    let g = gate_of(&store, "", "k");
    assert_eq!(g.map(|g| (g.running, g.waiting)).expect("a gate"), (1, 1));
    assert_eq!(
        list(&mut store, 125 * MS)[0].next_run(),
        Some(UNIX_EPOCH + Duration::from_millis(130)),
        "the series made its own occurrence"
    );
}

/// The counters a replay computes are thrown away (`forget_gates`): the replay of a log
/// whose records each log a gate with many admitted jobs counts that range at most once,
/// not once per record.
#[test]
fn a_replay_does_not_count_a_gates_admitted_jobs_per_record() {
    use super::super::gates::ADMITTED_COUNTED;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = file_store(dir.path(), 0);
    store.checkpoint_every = Duration::from_secs(3600);
    let limit = 2000;
    let spec = gated("k", limit, None);
    let ops: Vec<Op> = (0..limit + 200)
        .map(|i| put(&format!("j{i:05}"), 0, &spec, Dedup::Keep))
        .collect();
    store.apply_at(ops, 0).expect("schedule");
    store.close().expect("close");
    let mut store = file_store(dir.path(), 0);
    store.checkpoint_every = Duration::from_secs(3600);
    // Each ack promotes a waiting job (its gate's row changes, logged); each claim then
    // touches the gate again.
    for c in 0..150 {
        let op = Op::Claim {
            max: 1,
            kind: Some("g".to_owned()).into(),
        };
        let Reply::Claimed(batch, _) = one(&mut store, op, 1 + c) else {
            panic!("a claim");
        };
        let (id, token) = (batch.jobs[0].id.clone(), batch.jobs[0].token);
        one(&mut store, Op::Ack { id, token }, 1 + c);
    }
    ADMITTED_COUNTED.with(|c| c.set(0));
    let store = crash(store, dir.path(), 0);
    let counted = ADMITTED_COUNTED.with(|c| c.get());
    assert!(
        counted <= u64::from(limit),
        "the replay counted {counted} admitted entries"
    );
    let g = gate(&store, "k").expect("a gate");
    assert_eq!((g.running, g.admitted, g.waiting), (0, 2000, 50));
}

/// A store with no gate has no running gated job (a gate with a running job keeps its
/// row): the first batch after an open reads none of its running jobs.
#[test]
fn the_first_batch_of_a_store_without_gates_reads_no_running_job() {
    use super::super::gates::RUNNING_READ;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = file_store(dir.path(), 0);
    let ops: Vec<Op> = (0..1000)
        .map(|i| schedule(&format!("p{i:04}"), at(0), b""))
        .collect();
    store.apply_at(ops, 0).expect("schedule");
    let op = Op::Claim {
        max: 1000,
        kind: ClaimKinds::All,
    };
    store.apply_at(vec![op], 1).expect("claim");
    store.close().expect("close");
    let mut store = file_store(dir.path(), 0);
    RUNNING_READ.with(|c| c.set(0));
    let Reply::Counts(counts) = one(&mut store, Op::Counts, 2) else {
        panic!("counts");
    };
    assert_eq!(counts.running, 1000);
    assert_eq!(RUNNING_READ.with(|c| c.get()), 0, "running records read");
}

/// Random steps applied several to a batch (`per`, and a batch at least every 7 steps),
/// the gates checked after each batch: the counters the store keeps in memory stay those
/// of the records across the operations of one transaction, and across crashes.
fn run_gates_batched(steps: Vec<GStep>, per: usize) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = file_store(dir.path(), 0);
    let mut crashes = 0;
    let mut now = 0;
    let mut tokens: BTreeMap<String, u64> = BTreeMap::new();
    let mut ops = Vec::new();
    let id = |i: u8| format!("j{i}");
    for (n, step) in steps.into_iter().enumerate() {
        match step {
            GStep::Advance(by) => now += by,
            GStep::Schedule(i, key, run_at, priority, variant, replace) => {
                let dedup = if replace { Dedup::Replace } else { Dedup::Keep };
                ops.push(put(
                    &id(i),
                    run_at,
                    &key_spec(key, priority, variant),
                    dedup,
                ));
            }
            GStep::Relimit(..) | GStep::Revive(_) => {}
            GStep::Cancel(i) => ops.push(Op::Cancel { id: id(i) }),
            GStep::Reschedule(i, run_at) => ops.push(Op::Reschedule {
                id: id(i),
                when: at(run_at),
            }),
            GStep::Claim(max, all) => {
                let kind = if all { None } else { Some("g".to_owned()) };
                ops.push(Op::Claim {
                    max,
                    kind: kind.into(),
                });
            }
            GStep::Ack(i) => {
                let token = tokens.get(&id(i)).copied().unwrap_or(0);
                ops.push(Op::Ack { id: id(i), token });
            }
            GStep::Retry(i, after, fail) => {
                let token = tokens.get(&id(i)).copied().unwrap_or(0);
                ops.push(Op::Retry {
                    id: id(i),
                    token,
                    after: Duration::from_nanos(after),
                    error: fail.then(|| "boom".to_owned()),
                });
            }
            GStep::Crash => {
                let live = dump(&store);
                store = crash(store, dir.path(), crashes);
                crashes += 1;
                prop_assert_eq!(dump(&store), live, "the gates after a crash");
            }
        }
        if ops.len() >= per || n % 7 == 6 {
            for reply in store
                .apply_at(std::mem::take(&mut ops), now)
                .expect("apply")
            {
                if let Reply::Claimed(batch, _) = reply {
                    for job in batch.jobs {
                        tokens.insert(job.id, job.token);
                    }
                }
            }
            // A later op of the batch may lower a limit under what an earlier one started:
            // the limit clause is for single steps (given every running job as "running
            // before", it holds trivially); every other check holds per batch.
            check_gates(&store, now, &running_records(&store))?;
        }
    }
    Ok(())
}

/// The gated running jobs' keys, by id, read from the records.
fn running_records(store: &Store) -> BTreeMap<String, String> {
    let txn = store.db.begin_read().expect("read");
    let jobs = txn.open_table(super::super::tables::JOBS).expect("jobs");
    let mut out = BTreeMap::new();
    for entry in jobs.iter().expect("iter") {
        let (k, bytes) = entry.expect("entry");
        let record = Record::decode(bytes.value(), &store.plain).expect("a record");
        if matches!(
            record.job.status,
            crate::core::state::Status::Running { .. }
        ) {
            if let Some(g) = record.spec.gate() {
                out.insert(k.value().to_owned(), g.key.clone());
            }
        }
    }
    out
}

proptest! {
    // Each batch is an fsync here: a few seconds in a debug build.
    #![proptest_config(ProptestConfig::with_cases(16))]
    #[test]
    fn gates_keep_their_invariants_with_several_operations_per_batch(
        steps in proptest::collection::vec(gstep(), 1..120), per in 2..6usize
    ) {
        run_gates_batched(steps, per)?;
    }
}
