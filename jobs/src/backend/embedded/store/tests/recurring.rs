//! Recurring series of a kind (`store/series.rs`) on the tables: every head made, adopted,
//! kept and claimed with the series' stored spec, the claims that take it, a series
//! record written before series had a spec, and a crash's replay keeping the spec.

use super::*;
use redb::ReadableDatabase;

use crate::backend::Claimed;
use crate::core::series::occurrence_id;
use crate::JobOptions;

/// A series' spec, resolved as the front resolves `options` for it.
fn spec_for(options: &JobOptions) -> Spec {
    config()
        .defaults()
        .resolve_series(options)
        .expect("a series spec")
}

/// `every 10ms` from the series `name`, its occurrences made with `spec`.
fn set_every_10_as(name: &str, spec: Spec) -> Op {
    set_every_10_under(name, CatchUp::Latest, spec)
}

/// `every 10ms` from the series `name` under `catch_up`, its occurrences made with `spec`.
fn set_every_10_under(name: &str, catch_up: CatchUp, spec: Spec) -> Op {
    Op::SetRecurring {
        name: name.to_owned(),
        rule: Recurrence::every(Duration::from_millis(10)).unwrap(),
        payload: b"s".to_vec(),
        catch_up,
        spec,
    }
}

/// The ids, kinds and priorities a claim of `kinds` (each as many as it finds) hands out at
/// `now`, in the claim's order.
fn claim_of(store: &mut Store, kinds: &[&str], now: u64) -> Vec<(String, String, i8)> {
    let kinds = kinds.iter().map(|k| (k.to_string(), usize::MAX)).collect();
    let op = Op::Claim {
        max: 10,
        kind: ClaimKinds::Some(kinds),
    };
    let Reply::Claimed(batch, _) = one(store, op, now) else {
        panic!("a claim");
    };
    batch
        .jobs
        .into_iter()
        .map(|j| (j.id, j.spec.kind, j.spec.priority))
        .collect()
}

fn get(store: &mut Store, id: &str, now: u64) -> JobInfo {
    match one(store, Op::Get { id: id.to_owned() }, now) {
        Reply::Info(Some(info)) => info,
        other => panic!("{id}: {other:?}"),
    }
}

/// The stored bytes of the series `name`.
fn raw_series(store: &Store, name: &str) -> Vec<u8> {
    let txn = store.db.begin_read().unwrap();
    let table = txn.open_table(SERIES).unwrap();
    let value = table.get(name).unwrap().expect("the series");
    value.value().to_vec()
}

/// The occurrence of `s` at `t` ms.
fn s_at(t: u64) -> String {
    occurrence_id("s", t * MS)
}

/// A claim naming several kinds (what `worker()` sends) takes a head of one of them at its
/// priority, before the other kind's job of a lower one, and its first claim makes the next
/// head of the same kind and priority. A claim of the kind `""`, or of another kind, never
/// takes it.
#[test]
fn a_head_of_a_kind_goes_to_a_claim_of_several_kinds_at_its_priority() {
    let mut store = store();
    let digest = spec_for(&JobOptions::kind("d").priority(2));
    one(&mut store, set_every_10_as("s", digest), 100 * MS);
    let e = Op::Schedule(NewJob {
        id: "e:1".into(),
        when: at(101 * MS),
        payload: Vec::new(),
        spec: spec_of_kind("e"),
        dedup: Dedup::Keep,
    });
    one(&mut store, e, 100 * MS);
    one(&mut store, schedule("p", at(101 * MS), b"p"), 100 * MS);
    let info = get(&mut store, &s_at(110), 100 * MS);
    assert_eq!((info.kind(), info.priority()), ("d", 2));

    assert_eq!(
        claim_of(&mut store, &[""], 112 * MS),
        [("p".into(), "".into(), 0)]
    );
    assert_eq!(
        claim_of(&mut store, &["d", "e"], 112 * MS),
        [(s_at(110), "d".into(), 2), ("e:1".into(), "e".into(), 0)]
    );
    let next = get(&mut store, &s_at(120), 112 * MS);
    assert_eq!(
        (next.state(), next.kind(), next.priority()),
        (JobState::Pending, "d", 2)
    );
    // `p` again (its lease of 10ns ended), never the head.
    assert_eq!(
        claim_of(&mut store, &["", "e"], 125 * MS),
        [("p".into(), "".into(), 0)]
    );
    assert_eq!(
        claim_of(&mut store, &["d", "e"], 125 * MS),
        [(s_at(120), "d".into(), 2)]
    );
    let info = &list(&mut store, 125 * MS)[0];
    assert_eq!((info.kind(), info.priority()), ("d", 2));
    assert_eq!(
        info.next_run(),
        Some(UNIX_EPOCH + Duration::from_millis(130))
    );
}

/// Under `Latest` a claim of the series' kind that finds its head superseded runs the
/// occurrence that supersedes it, made of the series' kind (a plain one would be left to
/// the claims of `""`), and the series moves past it.
#[test]
fn a_claim_of_the_series_kind_runs_the_occurrence_that_supersedes_its_head() {
    let mut store = store();
    let digest = spec_for(&JobOptions::kind("d"));
    one(&mut store, set_every_10_as("s", digest), 100 * MS);
    assert_eq!(
        claim_of(&mut store, &["d"], 135 * MS),
        [(s_at(130), "d".into(), 0)]
    );
    assert_eq!(store.counts().pending, 1);
    assert_eq!(get(&mut store, &s_at(140), 135 * MS).kind(), "d");
    let info = &list(&mut store, 135 * MS)[0];
    assert_eq!(
        (info.last_run(), info.next_run()),
        (
            Some(UNIX_EPOCH + Duration::from_millis(130)),
            Some(UNIX_EPOCH + Duration::from_millis(140))
        )
    );
}

/// A never-delivered pending job at the id of the next occurrence is adopted as the head
/// when it is of the series' kind and priority (its attempts stay its own); one of the
/// series' kind at another priority is not: that time is skipped.
#[test]
fn a_pending_job_is_adopted_only_at_the_series_kind_and_priority() {
    let mut store = store();
    let digest = spec_for(&JobOptions::kind("d").priority(1));
    let put = |id: String, spec: Spec| {
        Op::Schedule(NewJob {
            id,
            when: at(110 * MS),
            payload: b"mine".to_vec(),
            spec,
            dedup: Dedup::Keep,
        })
    };
    let own = Spec {
        max_attempts: 9,
        ..digest.clone()
    };
    one(&mut store, put(s_at(110), own), 100 * MS);
    let low = spec_for(&JobOptions::kind("d"));
    let t_110 = occurrence_id("t", 110 * MS);
    one(&mut store, put(t_110.clone(), low), 100 * MS);
    assert_eq!(
        one(&mut store, set_every_10_as("s", digest.clone()), 100 * MS),
        Reply::Recurring(Recurring::Created, Some(110 * MS))
    );
    assert_eq!(
        one(&mut store, set_every_10_as("t", digest), 100 * MS),
        Reply::Recurring(Recurring::Created, Some(120 * MS))
    );
    let adopted = get(&mut store, &s_at(110), 100 * MS);
    assert_eq!(
        (adopted.payload(), adopted.max_attempts()),
        (&b"mine"[..], 9)
    );
    assert_eq!(
        claim_of(&mut store, &["d"], 112 * MS),
        [(s_at(110), "d".into(), 1), (t_110, "d".into(), 0)]
    );
    assert_eq!(get(&mut store, &s_at(120), 112 * MS).priority(), 1);
}

/// A config whose plain spec has `attempts` attempts.
fn config_of(attempts: u32) -> Config {
    let mut builder = crate::JobQueue::builder();
    builder.max_attempts(attempts);
    let mut config = builder.config();
    config.lease = Duration::from_nanos(LEASE);
    config
}

/// The series record as version 1 wrote it, byte for byte.
fn version_1(runs: u32, head: u64, last: Option<u64>, rule: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![1];
    out.extend_from_slice(&runs.to_le_bytes());
    out.push(1);
    out.extend_from_slice(&head.to_le_bytes());
    out.push(u8::from(last.is_some()));
    out.extend_from_slice(&last.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&u32::try_from(rule.len()).unwrap().to_le_bytes());
    out.extend_from_slice(rule.as_bytes());
    out.extend_from_slice(payload);
    out
}

/// A series stored before series had a spec (a version 1 record beside its plain head)
/// lists and runs with the plain spec of the process that opens the store, and keeps its
/// version 1 record as its claims move it; set again with a kind, it is stored as version
/// 2 and its pending head moves to that kind.
#[test]
fn a_series_stored_before_specs_lists_and_runs_with_the_plain_spec() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = file_store(dir.path(), 0);
    one(
        &mut store,
        schedule(&s_at(110), at(110 * MS), b"old"),
        100 * MS,
    );
    {
        let txn = store.db.begin_write().unwrap();
        {
            let mut table = txn.open_table(SERIES).unwrap();
            let old = version_1(CatchUp::Latest.runs(), 110 * MS, None, "every 10ms", b"old");
            table.insert("s", old.as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    drop(store);
    // Opened by a process whose plain spec has 7 attempts.
    let path = dir.path().join("s0.redb");
    let db = redb::Database::builder().create(&path).expect("redb");
    let wal = Wal::open(&dir.path().join("s0.redb.wal")).expect("wal");
    let mut store = Store::open(db, &config_of(7), Some(wal)).expect("open");

    let info = list(&mut store, 105 * MS).remove(0);
    assert_eq!(info.spec(), &store.plain);
    assert_eq!(
        (info.kind(), info.priority(), info.max_attempts()),
        ("", 0, 7)
    );
    assert_eq!(
        info.next_run(),
        Some(UNIX_EPOCH + Duration::from_millis(110))
    );
    assert_eq!(
        claim_of(&mut store, &[""], 112 * MS),
        [(s_at(110), "".into(), 0)]
    );
    let next = get(&mut store, &s_at(120), 112 * MS);
    assert_eq!(
        (next.kind(), next.max_attempts(), next.payload()),
        ("", 7, &b"old"[..])
    );
    // Still version 1, as the old code would have written it.
    assert_eq!(
        raw_series(&store, "s"),
        version_1(
            CatchUp::Latest.runs(),
            120 * MS,
            Some(110 * MS),
            "every 10ms",
            b"old"
        )
    );

    let digest = spec_for(&JobOptions::kind("d").priority(-1));
    let set = Op::SetRecurring {
        name: "s".into(),
        rule: "every 10ms".parse().unwrap(),
        payload: b"new".to_vec(),
        catch_up: CatchUp::Latest,
        spec: digest.clone(),
    };
    assert_eq!(
        one(&mut store, set, 113 * MS),
        Reply::Recurring(Recurring::Updated, Some(120 * MS))
    );
    assert_eq!(raw_series(&store, "s")[0], 2);
    let kept = get(&mut store, &s_at(120), 113 * MS);
    assert_eq!(
        (kept.kind(), kept.priority(), kept.payload()),
        ("d", -1, &b"new"[..])
    );
    let Reply::Counts(counts) = one(&mut store, Op::Counts, 113 * MS) else {
        panic!("counts");
    };
    assert_eq!(counts.kinds["d"].pending, 1);
    assert_eq!(counts.kinds.get("").map_or(0, |c| c.pending), 0);
    assert_eq!(list(&mut store, 113 * MS)[0].spec(), &digest);
}

/// The series' spec is in the log records of its batches: after a crash before any
/// checkpoint it is listed, its next head is of its kind, and that head's claim gives the
/// series' spec (one attempt) again.
#[test]
fn a_series_spec_survives_a_crash_by_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = file_store(dir.path(), 0);
    store.checkpoint_every = Duration::from_secs(3600);
    let digest = spec_for(&JobOptions::kind("d").priority(3).max_attempts(1));
    one(&mut store, set_every_10_as("s", digest.clone()), 100 * MS);
    assert_eq!(
        claim_of(&mut store, &["d"], 112 * MS),
        [(s_at(110), "d".into(), 3)]
    );
    let mut store = crash(store, dir.path(), 0);
    store.checkpoint_every = Duration::from_secs(3600);
    let info = list(&mut store, 112 * MS).remove(0);
    assert_eq!(info.spec(), &digest);
    let head = get(&mut store, &s_at(120), 112 * MS);
    assert_eq!(
        (head.kind(), head.priority(), head.max_attempts()),
        ("d", 3, 1)
    );
    let op = Op::Claim {
        max: 10,
        kind: ClaimKinds::one("d"),
    };
    let Reply::Claimed(batch, _) = one(&mut store, op, 122 * MS) else {
        panic!("a claim");
    };
    assert_eq!(batch.jobs.len(), 1);
    assert_eq!(batch.jobs[0].spec, digest);
    // Set back to the plain spec, and crashed again: stored as such.
    let plain = store.plain.clone();
    one(&mut store, set_every_10_as("s", plain.clone()), 123 * MS);
    let mut store = crash(store, dir.path(), 1);
    assert_eq!(list(&mut store, 123 * MS)[0].spec(), &plain);
    assert_eq!(get(&mut store, &s_at(130), 123 * MS).kind(), "");
}

/// A job made by hand, payload `mine`, at `id` due at `t` ms, with `spec`.
fn mine(id: String, t: u64, spec: Spec) -> Op {
    Op::Schedule(NewJob {
        id,
        when: at(t * MS),
        payload: b"mine".to_vec(),
        spec,
        dedup: Dedup::Keep,
    })
}

/// The jobs a claim of up to `max` of `kinds` hands out at `now`, each acked at once (so
/// no lease of theirs ends before a later claim); panics on an error.
fn claim_acked(store: &mut Store, max: usize, kinds: ClaimKinds, now: u64) -> Vec<Claimed> {
    let mut replies = store
        .apply_at(vec![Op::Claim { max, kind: kinds }], now)
        .unwrap_or_else(|err| panic!("the claim at {now} failed: {err}"));
    let Some(Reply::Claimed(batch, _)) = replies.pop() else {
        panic!("a claim");
    };
    for job in &batch.jobs {
        let ack = Op::Ack {
            id: job.id.clone(),
            token: job.token,
        };
        one(store, ack, now);
    }
    batch.jobs
}

/// The ids and payloads [`claim_acked`] hands out.
fn claim_payloads(
    store: &mut Store,
    max: usize,
    kinds: ClaimKinds,
    now: u64,
) -> Vec<(String, Vec<u8>)> {
    claim_acked(store, max, kinds, now)
        .into_iter()
        .map(|j| (j.id, j.payload))
        .collect()
}

/// A head superseded at its first claim under `Latest` or `All` moves to a job made by hand
/// under a later occurrence's id, due too, and the claim delivers that job in the head's
/// place; the same claim then meets that job's own due key, which it read before: it skips
/// it (it leased it already) and does not fail. Of a kind and of the plain group alike, and
/// every later claim of the kind goes on.
#[test]
fn a_claim_skips_the_adopted_occurrence_it_delivered_in_its_heads_place() {
    let plain = config().defaults().plain().clone();
    let digest = spec_for(&JobOptions::kind("d"));
    let all_2 = CatchUp::All { max: 2 };
    for (spec, catch_up, adopted, then) in [
        (digest.clone(), CatchUp::Latest, 130, vec![]),
        (plain.clone(), CatchUp::Latest, 130, vec![]),
        // `All { max: 2 }` at 135 runs 120 (the hand-made job) and 130, the head made at
        // 120's delivery.
        (digest.clone(), all_2, 120, vec![130]),
        (plain, all_2, 120, vec![130]),
    ] {
        let case = format!("{:?} {catch_up:?}", spec.kind);
        let mut store = store();
        one(
            &mut store,
            mine(s_at(adopted), adopted, spec.clone()),
            100 * MS,
        );
        one(
            &mut store,
            set_every_10_under("s", catch_up, spec.clone()),
            100 * MS,
        );
        let mut want = vec![(s_at(adopted), b"mine".to_vec())];
        want.extend(then.iter().map(|&t| (s_at(t), b"s".to_vec())));
        let kinds = || ClaimKinds::one(&spec.kind);
        assert_eq!(
            claim_payloads(&mut store, 10, kinds(), 135 * MS),
            want,
            "{case}"
        );
        let info = &list(&mut store, 135 * MS)[0];
        assert_eq!(
            info.next_run(),
            Some(UNIX_EPOCH + Duration::from_millis(140)),
            "{case}"
        );
        assert_eq!(
            claim_payloads(&mut store, 10, kinds(), 145 * MS),
            [(s_at(140), b"s".to_vec())],
            "{case}"
        );
        assert_eq!(
            get(&mut store, &s_at(150), 145 * MS).kind(),
            spec.kind,
            "{case}"
        );
    }
}

/// The key the claim skipped does not count in its `max`: it fills it from the due jobs
/// after it.
#[test]
fn a_claim_that_skips_an_adopted_occurrence_still_fills_its_max() {
    let mut store = store();
    let digest = spec_for(&JobOptions::kind("d"));
    one(&mut store, mine(s_at(130), 130, digest.clone()), 100 * MS);
    one(&mut store, mine("x".into(), 132, digest.clone()), 100 * MS);
    one(&mut store, mine("y".into(), 133, digest.clone()), 100 * MS);
    one(&mut store, set_every_10_as("s", digest), 100 * MS);
    assert_eq!(
        claim_payloads(&mut store, 2, ClaimKinds::one("d"), 135 * MS),
        [
            (s_at(130), b"mine".to_vec()),
            ("x".into(), b"mine".to_vec())
        ]
    );
    assert_eq!(
        claim_payloads(&mut store, 2, ClaimKinds::All, 135 * MS),
        [("y".into(), b"mine".to_vec())]
    );
}

/// An adopted job keeps what the docs say it keeps: only its kind and priority must be the
/// series'; it is delivered with its own payload, attempts, backoff and lease, and the next
/// occurrence the series makes has the series' own.
#[test]
fn an_adopted_job_is_delivered_with_its_own_attempts_backoff_and_lease() {
    let mut store = store();
    let digest = spec_for(&JobOptions::kind("d").priority(1));
    let own = Spec {
        max_attempts: 9,
        backoff: (Duration::from_millis(7), Duration::from_secs(70)),
        lease: Duration::from_nanos(25),
        ..digest.clone()
    };
    assert_ne!(
        (own.max_attempts, own.backoff, own.lease),
        (digest.max_attempts, digest.backoff, digest.lease)
    );
    one(&mut store, mine(s_at(110), 110, own.clone()), 100 * MS);
    one(&mut store, set_every_10_as("s", digest.clone()), 100 * MS);
    let op = Op::Claim {
        max: 10,
        kind: ClaimKinds::one("d"),
    };
    let Reply::Claimed(batch, _) = one(&mut store, op, 112 * MS) else {
        panic!("a claim");
    };
    let ids: Vec<_> = batch.jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, [s_at(110)]);
    assert_eq!(batch.jobs[0].spec, own);
    assert_eq!(batch.jobs[0].payload, b"mine");
    let op = Op::Claim {
        max: 10,
        kind: ClaimKinds::one("d"),
    };
    let Reply::Claimed(batch, _) = one(&mut store, op, 122 * MS) else {
        panic!("a claim");
    };
    let next = batch
        .jobs
        .iter()
        .find(|j| j.id == s_at(120))
        .expect("s@120");
    assert_eq!((&next.spec, &next.payload[..]), (&digest, &b"s"[..]));
}

/// A claim of every kind (`consume()`, `run`) takes a head of a kind at its priority, before
/// the earlier jobs of lower ones, and its first claim makes the next head of the same kind
/// and priority.
#[test]
fn a_claim_of_every_kind_takes_a_head_of_a_kind_and_the_next_keeps_it() {
    let mut store = store();
    let digest = spec_for(&JobOptions::kind("d").priority(2));
    one(&mut store, set_every_10_as("s", digest.clone()), 100 * MS);
    one(
        &mut store,
        mine("e:1".into(), 101, spec_of_kind("e")),
        100 * MS,
    );
    one(&mut store, schedule("p", at(101 * MS), b"p"), 100 * MS);
    let got: Vec<_> = claim_acked(&mut store, 10, ClaimKinds::All, 112 * MS)
        .into_iter()
        .map(|j| (j.id, j.spec.kind, j.spec.priority))
        .collect();
    assert_eq!(
        got,
        [
            (s_at(110), "d".into(), 2),
            ("e:1".into(), "e".into(), 0),
            ("p".into(), "".into(), 0)
        ]
    );
    let next = get(&mut store, &s_at(120), 112 * MS);
    assert_eq!(
        (next.state(), next.kind(), next.priority()),
        (JobState::Pending, "d", 2)
    );
    let again = claim_acked(&mut store, 10, ClaimKinds::All, 122 * MS);
    assert_eq!(again.len(), 1);
    assert_eq!((&again[0].id, &again[0].spec), (&s_at(120), &digest));
}

/// `CatchUp::None` skips with the series' spec: the occurrence it skips to is made of the
/// series' kind, priority and attempts, whether it is due at the claim (run by it) or
/// later (left pending).
#[test]
fn a_skip_under_none_makes_the_next_head_with_the_series_spec() {
    let mut store = store();
    let digest = spec_for(&JobOptions::kind("d").priority(2).max_attempts(3));
    one(
        &mut store,
        set_every_10_under("s", CatchUp::None, digest.clone()),
        100 * MS,
    );
    // At 130 the head (110) is superseded by 120 and 130: `None` skips to 130, due.
    let got = claim_acked(&mut store, 10, ClaimKinds::one("d"), 130 * MS);
    assert_eq!(got.len(), 1);
    assert_eq!((&got[0].id, &got[0].spec), (&s_at(130), &digest));
    // At 165 the head (140) is superseded: `None` skips to 170, not due.
    assert!(claim_acked(&mut store, 10, ClaimKinds::one("d"), 165 * MS).is_empty());
    assert_eq!(
        one(&mut store, Op::Get { id: s_at(140) }, 165 * MS),
        Reply::Info(None)
    );
    let head = get(&mut store, &s_at(170), 165 * MS);
    assert_eq!(
        (
            head.state(),
            head.kind(),
            head.priority(),
            head.max_attempts()
        ),
        (JobState::Pending, "d", 2, 3)
    );
    let got = claim_acked(&mut store, 10, ClaimKinds::one("d"), 171 * MS);
    assert_eq!(got.len(), 1);
    assert_eq!((&got[0].id, &got[0].spec), (&s_at(170), &digest));
}

/// Set again with the same recurrence and another priority of the same kind, the kept head
/// moves to its new level: claimed at it (before a job of the kind between the two
/// priorities), once, and the next head is made at it too.
#[test]
fn set_again_at_another_priority_of_the_kind_moves_the_kept_head() {
    let mut store = store();
    let low = spec_for(&JobOptions::kind("d").priority(1));
    let high = spec_for(&JobOptions::kind("d").priority(5));
    one(&mut store, set_every_10_as("s", low), 100 * MS);
    let middle = spec_for(&JobOptions::kind("d").priority(3));
    one(&mut store, mine("x".into(), 101, middle), 100 * MS);
    assert_eq!(
        one(&mut store, set_every_10_as("s", high.clone()), 105 * MS),
        Reply::Recurring(Recurring::Updated, Some(110 * MS))
    );
    assert_eq!(get(&mut store, &s_at(110), 105 * MS).priority(), 5);
    let Reply::Counts(counts) = one(&mut store, Op::Counts, 105 * MS) else {
        panic!("counts");
    };
    assert_eq!(counts.kinds["d"].pending, 2);
    let got: Vec<_> = claim_acked(&mut store, 10, ClaimKinds::one("d"), 112 * MS)
        .into_iter()
        .map(|j| (j.id, j.spec.priority))
        .collect();
    assert_eq!(got, [(s_at(110), 5), ("x".into(), 3)]);
    // No key left at its old level.
    assert!(claim_acked(&mut store, 10, ClaimKinds::one("d"), 112 * MS).is_empty());
    let next = get(&mut store, &s_at(120), 112 * MS);
    assert_eq!((next.kind(), next.priority()), ("d", 5));
    assert_eq!(list(&mut store, 112 * MS)[0].spec(), &high);
}
