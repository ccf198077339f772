//! Fairness per key (`lua/gates.lua`) across processes: consumers in three processes take
//! jobs of a few keys limited to `LIMIT` running each, while the parent samples the store's
//! own running jobs per key; one consumer process is SIGKILLed holding slots. The behaviour
//! itself is the shared suite's (`suite/keys.rs`).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, SystemTime};

use wheel_jobs::{Dedup, JobOptions, JobQueue, JobState, ListOptions, Scheduled};

use crate::kill::{child_role, runtime, spawn_child, Killed};
use crate::support::redis::RedisServer;
use crate::support::{ms, next};

/// Every key's limit.
const LIMIT: usize = 2;

/// The keys, and each one's jobs.
const KEYS: [&str; 3] = ["k0", "k1", "k2"];
const PER_KEY: usize = 40;

/// Every process's lease: the slots a kill cut come back when it ends.
const LEASE: Duration = Duration::from_secs(1);

/// Child: takes every job it is given, each in its own task: prints `got <id> <attempt>`
/// at its delivery, works 30 ms (or, with `hang`, for ever: a worker that will be killed
/// mid-handler), acks, and prints `acked <id>` once the ack returned true.
async fn consume_forever(url: &str, hang: bool) {
    let q = JobQueue::builder()
        .lease(LEASE)
        .prefetch(8)
        .redis(url, "keyed")
        .await
        .unwrap();
    println!("\nready");
    let mut consumer = q.consume_kind("sync");
    loop {
        let d = next(&mut consumer).await;
        println!("got {} {}", d.id(), d.attempt());
        tokio::spawn(async move {
            if hang {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(ms(30)).await;
            if d.ack().await.unwrap() {
                println!("acked {}", d.id());
            }
        });
    }
}

/// What the children printed, read so far.
#[derive(Default)]
struct Seen {
    /// id -> the children it was delivered to, with its attempt.
    got: HashMap<String, Vec<(usize, u32)>>,
    acked: HashMap<String, u32>,
    /// Per child, the ids delivered and not (yet) printed acked.
    held: Vec<HashSet<String>>,
}

impl Seen {
    fn read(&mut self, c: usize, line: &str) {
        match line.split(' ').collect::<Vec<_>>().as_slice() {
            ["got", id, attempt] => {
                let attempt = attempt.parse().unwrap();
                self.got
                    .entry(id.to_string())
                    .or_default()
                    .push((c, attempt));
                self.held[c].insert(id.to_string());
            }
            ["acked", id] => {
                *self.acked.entry(id.to_string()).or_default() += 1;
                self.held[c].remove(*id);
            }
            _ => {}
        }
    }

    /// Reads what each live child printed, for at most `wait`.
    fn drain(&mut self, children: &[Option<(Killed, mpsc::Receiver<String>)>], wait: Duration) {
        for (c, child) in children.iter().enumerate() {
            let Some((_, rx)) = child else { continue };
            while let Ok(line) = rx.recv_timeout(wait / children.len() as u32) {
                self.read(c, &line);
            }
        }
    }
}

/// Three consumer processes take 120 jobs of 3 keys limited to 2 running each. The parent
/// samples `list(Running)` (the store's view, one moment per page) the whole time: no key
/// ever has more than 2 running, and some key reaches 2. The last process started hangs in
/// every handler, so it gathers slots as the others free them; it is SIGKILLed holding 3
/// (or after 200 ms holding some): its leases keep their keys' slots until they end, then
/// those jobs go to the other processes (attempt 2). Every job is acked exactly once; the
/// queue ends empty, gate state and all.
#[test]
fn keyed_consumer_processes_hold_limits_through_kill_9() {
    const TEST: &str = "redis::keys::keyed_consumer_processes_hold_limits_through_kill_9";
    if let Some((role, url)) = child_role() {
        runtime().block_on(consume_forever(url.to_str().unwrap(), role == "2"));
        return;
    }
    let server = RedisServer::start();
    let url = server.url();
    let rt = runtime();
    let q = rt.block_on(async {
        let q = JobQueue::builder()
            .lease(LEASE)
            .redis(&url, "keyed")
            .await
            .unwrap();
        let now = SystemTime::now();
        for key in KEYS {
            let jobs: Vec<_> = (0..PER_KEY)
                .map(|i| (format!("{key}-{i:02}"), now - ms(1000), "p"))
                .collect();
            let options = JobOptions::kind("sync").key(key).key_limit(LIMIT as u32);
            q.schedule_many_with(jobs, &options).await.unwrap();
        }
        q
    });
    // The sampler: the most running of each key at one moment, until stopped.
    let stop = Arc::new(AtomicBool::new(false));
    let most: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let sampler = {
        let (q, stop, most) = (q.clone(), stop.clone(), most.clone());
        std::thread::spawn(move || {
            runtime().block_on(async move {
                let mut samples = 0u64;
                while !stop.load(SeqCst) {
                    let page = q
                        .list(JobState::Running, ListOptions::new().limit(1000))
                        .await
                        .unwrap();
                    let mut now: HashMap<String, usize> = HashMap::new();
                    for job in page.jobs() {
                        *now.entry(job.key().unwrap().to_owned()).or_default() += 1;
                    }
                    {
                        let mut most = most.lock().unwrap();
                        for (key, n) in now {
                            let m = most.entry(key).or_default();
                            *m = (*m).max(n);
                        }
                    }
                    samples += 1;
                    tokio::time::sleep(ms(1)).await;
                }
                samples
            })
        })
    };
    let mut children: Vec<Option<(Killed, mpsc::Receiver<String>)>> = (0..3)
        .map(|c| Some(spawn_child(TEST, &c.to_string(), Path::new(&url))))
        .collect();
    let mut seen = Seen {
        held: vec![HashSet::new(); 3],
        ..Seen::default()
    };
    let within_limits = || {
        // A copy: a failed check must not poison the sampler's lock.
        let most = most.lock().unwrap().clone();
        assert!(
            most.values().all(|&n| n <= LIMIT),
            "a key ran more than {LIMIT} at once: {most:?}"
        );
    };
    // Kill the hanging one once it holds 3 jobs, or some after 200 ms.
    let started = std::time::Instant::now();
    while seen.held[2].is_empty() || (seen.held[2].len() < 3 && started.elapsed() < ms(200)) {
        within_limits();
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "child 2 took no job"
        );
        seen.drain(&children, ms(5));
    }
    let (mut hung, rx) = children[2].take().unwrap();
    hung.kill();
    for line in rx.iter() {
        seen.read(2, &line);
    }
    let cut = seen.held[2].clone();
    eprintln!("child 2 killed holding {cut:?}");
    // The others finish everything, the cut jobs once their leases end.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        within_limits();
        seen.drain(&children, ms(30));
        let counts = rt.block_on(q.counts()).unwrap();
        if counts.pending + counts.running == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "jobs left: {counts:?}"
        );
    }
    stop.store(true, SeqCst);
    let samples = sampler.join().unwrap();
    // What the last acks print, once they returned.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while seen.acked.len() < KEYS.len() * PER_KEY && std::time::Instant::now() < deadline {
        seen.drain(&children, ms(30));
    }
    for (c, child) in children.iter_mut().enumerate() {
        if let Some((child, rx)) = child.take() {
            drop(child);
            for line in rx.iter() {
                seen.read(c, &line);
            }
        }
    }
    within_limits();
    let most = most.lock().unwrap().clone();
    eprintln!("{samples} samples, most running per key {most:?}");
    assert!(
        most.values().any(|&n| n == LIMIT),
        "no key reached its limit: {most:?}"
    );
    for key in KEYS {
        for i in 0..PER_KEY {
            let id = format!("{key}-{i:02}");
            let acked = seen.acked.get(&id).copied().unwrap_or(0);
            assert_eq!(acked, 1, "{id} acked {acked}×");
        }
    }
    for id in &cut {
        assert!(
            seen.got[id]
                .iter()
                .any(|&(c, attempt)| c != 2 && attempt == 2),
            "{id}, cut by the kill, did not come back to another process: {:?}",
            seen.got[id]
        );
    }
    rt.block_on(async {
        let counts = q.counts().await.unwrap();
        assert_eq!((counts.pending, counts.running, counts.dead), (0, 0, 0));
        q.close().await.unwrap();
    });
    assert_eq!(
        server.cli(&["KEYS", "{keyed}:gate*"]),
        "",
        "gate state left"
    );
}

/// The ids of a gate's set (`lua/gates.lua`: members are the run_at padded to 20 digits,
/// then 127 - priority in 3 digits, then the id), in key order.
fn gate_ids(server: &RedisServer, set: &str) -> Vec<String> {
    let out = server.cli(&["ZRANGE", set, "0", "-1"]);
    out.lines()
        .filter(|m| !m.is_empty())
        .map(|m| m[23..].to_owned())
        .collect()
}

/// A gate's field, "" if none.
fn gate_field(server: &RedisServer, gate: &str, field: &str) -> String {
    server.cli(&["HGET", &format!("{{g}}:gate_h:{gate}"), field])
}

async fn gate_queue(server: &RedisServer) -> JobQueue {
    JobQueue::builder()
        .prefetch(1)
        .redis(&server.url(), "g")
        .await
        .unwrap()
}

/// A limit of 1: the key's first job in (run_at, priority desc, id) order is the admitted
/// one, whatever order the jobs came in (a job entering before the admitted one swaps with
/// it; a due job goes before a higher-priority one due later, which would otherwise hold
/// the key's slot until its time); a lease takes the slot, an ack gives it to the next, a
/// cancel of the admitted one admits the next; the gate's keys and the kind's waiting list
/// are gone with its last job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_admits_its_first_in_key_order_and_goes_with_its_last_job() {
    let server = RedisServer::start();
    let q = gate_queue(&server).await;
    let o = JobOptions::kind("sync").key("a").key_limit(1);
    let (admitted, waiting) = ("{g}:gate_a:sync\x1fa", "{g}:gate_w:sync\x1fa");
    let now = SystemTime::now();
    q.schedule_with("late", now - ms(1000), "p", &o)
        .await
        .unwrap();
    assert_eq!(gate_ids(&server, admitted), ["late"]);
    q.schedule_with("early", now - ms(2000), "p", &o)
        .await
        .unwrap();
    assert_eq!(gate_ids(&server, admitted), ["early"], "swapped");
    assert_eq!(gate_ids(&server, waiting), ["late"]);
    assert_eq!(
        server.cli(&["ZRANGE", "{g}:due:0:sync", "0", "-1"]),
        "early",
        "only the admitted job is claimable"
    );
    q.schedule_with(
        "tomorrow",
        now + 86_400 * ms(1000),
        "p",
        &o.clone().priority(9),
    )
    .await
    .unwrap();
    assert_eq!(
        gate_ids(&server, admitted),
        ["early"],
        "a due job before a higher-priority one due later"
    );
    q.schedule_with("urgent", now - ms(2000), "p", &o.clone().priority(5))
        .await
        .unwrap();
    assert_eq!(
        gate_ids(&server, admitted),
        ["urgent"],
        "priority first at one run_at"
    );
    assert_eq!(gate_ids(&server, waiting), ["early", "late", "tomorrow"]);
    assert_eq!(
        server.cli(&["ZRANGE", "{g}:gate_l:sync", "0", "-1"]),
        "early\nlate\ntomorrow",
        "the kind's waiting list, by run_at"
    );
    let mut consumer = q.consume();
    let d = next(&mut consumer).await;
    assert_eq!(d.id(), "urgent");
    assert_eq!(gate_field(&server, "sync\x1fa", "run"), "1");
    assert!(gate_ids(&server, admitted).is_empty(), "the slot is taken");
    assert!(d.ack().await.unwrap());
    assert_eq!(gate_field(&server, "sync\x1fa", "run"), "0");
    assert_eq!(gate_ids(&server, admitted), ["early"]);
    assert!(q.cancel("early").await.unwrap());
    assert_eq!(gate_ids(&server, admitted), ["late"]);
    assert_eq!(gate_ids(&server, waiting), ["tomorrow"]);
    assert!(q.cancel("tomorrow").await.unwrap());
    assert!(gate_ids(&server, waiting).is_empty());
    assert_eq!(server.cli(&["ZRANGE", "{g}:levels", "0", "-1"]), "d:0:sync");
    let d = next(&mut consumer).await;
    assert_eq!(d.id(), "late");
    assert!(d.ack().await.unwrap());
    assert_eq!(server.cli(&["KEYS", "{g}:gate*"]), "", "no gate state left");
    assert_eq!(server.cli(&["ZRANGE", "{g}:levels", "0", "-1"]), "");
    q.close().await.unwrap();
}

/// A rate of 1 per hour: the start opens a window and the key's next job waits with the
/// gate's timer at the window's end; once that time has come (moved here into the past by
/// hand), the next claim rebalances the gate first and takes the job. The gate without
/// jobs is kept while its window is open, its timer set; the claim that meets the timer
/// after the window deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_window_ends_at_its_timer_and_then_the_gate_goes() {
    const HOUR_US: u64 = 3_600_000_000;
    let server = RedisServer::start();
    let q = gate_queue(&server).await;
    let o = JobOptions::kind("mail")
        .key("m")
        .key_rate(1, Duration::from_secs(3600));
    let gate = "mail\x1fm";
    let timers = "{g}:gate_timers";
    let now = SystemTime::now();
    for (i, id) in ["m0", "m1"].into_iter().enumerate() {
        q.schedule_with(id, now - ms(100 - i as u64), "p", &o)
            .await
            .unwrap();
    }
    let mut consumer = q.consume_kind("mail");
    let m0 = next(&mut consumer).await;
    assert_eq!(m0.id(), "m0");
    let ws: u64 = gate_field(&server, gate, "ws").parse().unwrap();
    assert_eq!(gate_field(&server, gate, "st"), "1");
    assert_eq!(
        server.cli(&["ZSCORE", timers, gate]),
        (ws + HOUR_US).to_string(),
        "m1 waits for the window's end"
    );
    assert_eq!(gate_ids(&server, "{g}:gate_w:mail\x1fm"), ["m1"]);
    // The hour has passed: the window and its timer end in the past.
    let past = |ws: u64| {
        let ws = ws - HOUR_US - 1;
        server.cli(&[
            "HSET",
            &format!("{{g}}:gate_h:{gate}"),
            "ws",
            &ws.to_string(),
        ]);
        server.cli(&["ZADD", timers, &(ws + HOUR_US).to_string(), gate]);
    };
    past(ws);
    // A schedule of another kind bumps the consumer's epoch: its next claim asks the server.
    q.schedule("other", Duration::ZERO, "p").await.unwrap();
    let m1 = next(&mut consumer).await;
    assert_eq!(
        m1.id(),
        "m1",
        "the claim rebalanced the timed-out gate first"
    );
    assert_eq!(gate_field(&server, gate, "st"), "1", "a new window");
    assert!(m0.ack().await.unwrap());
    assert!(m1.ack().await.unwrap());
    assert_eq!(
        gate_field(&server, gate, "run"),
        "0",
        "kept: its window is open"
    );
    assert_ne!(server.cli(&["ZSCORE", timers, gate]), "");
    past(gate_field(&server, gate, "ws").parse().unwrap());
    q.schedule("other2", Duration::ZERO, "p").await.unwrap();
    let mut all = q.consume();
    for _ in 0..2 {
        assert!(next(&mut all).await.ack().await.unwrap());
    }
    assert_eq!(server.cli(&["KEYS", "{g}:gate*"]), "", "no gate state left");
    q.close().await.unwrap();
}

/// A queue of one partition on a cluster keeps key limits as on one server (its gates share
/// its hash tag, so every script still touches one slot): a key's second job waits for the
/// first's ack, and a key alone limits nothing. One of several partitions refuses them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_queue_of_one_partition_keeps_key_limits() {
    let cluster = crate::support::cluster::RedisCluster::start();
    let q = JobQueue::builder()
        .redis_cluster(&cluster.nodes, "keyed")
        .await
        .unwrap();
    let o = JobOptions::kind("sync").key("a").key_limit(1);
    let now = SystemTime::now();
    for (i, id) in ["a0", "a1"].into_iter().enumerate() {
        q.schedule_with(id, now - ms(100 - i as u64), "p", &o)
            .await
            .unwrap();
    }
    let mut consumer = q.consume();
    let a0 = next(&mut consumer).await;
    assert_eq!(a0.id(), "a0");
    let counts = q.counts().await.unwrap();
    assert_eq!((counts.pending, counts.running), (1, 1), "a1 waits");
    assert!(a0.ack().await.unwrap());
    let a1 = next(&mut consumer).await;
    assert_eq!(a1.id(), "a1", "a0's ack let a1 go");
    assert!(a1.ack().await.unwrap());
    q.close().await.unwrap();
    let partitioned = JobQueue::builder()
        .partitions(3)
        .redis_cluster(&cluster.nodes, "spread")
        .await
        .unwrap();
    let err = partitioned
        .schedule_with("x", Duration::ZERO, "p", &o)
        .await
        .unwrap_err();
    assert!(err.is_invalid_config(), "{err}");
    assert!(partitioned.get("x").await.unwrap().is_none());
    partitioned.close().await.unwrap();
}

/// Jobs enter their gates by every way in, each meeting the gate's order and limit: dead
/// jobs hold no gate, and revived they enter it; a successor handed over at its job's ack
/// enters behind the key's earlier job; a copy to another queue keeps each job's key and
/// limits and rebuilds its gates there; a copy of them to a queue of 3 partitions is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revived_handed_over_and_copied_jobs_enter_their_gates() {
    let server = RedisServer::start();
    let q = gate_queue(&server).await;
    let o = JobOptions::kind("sync")
        .key("a")
        .key_limit(1)
        .max_attempts(1);
    let (admitted, waiting) = ("{g}:gate_a:sync\x1fa", "{g}:gate_w:sync\x1fa");
    let now = SystemTime::now();
    for (i, id) in ["d0", "d1"].into_iter().enumerate() {
        q.schedule_with(id, now - ms(200 - 100 * i as u64), "p", &o)
            .await
            .unwrap();
    }
    let mut consumer = q.consume();
    for id in ["d0", "d1"] {
        let d = next(&mut consumer).await;
        assert_eq!(d.id(), id);
        assert!(d.fail(Duration::ZERO, "boom").await.unwrap());
    }
    assert_eq!(q.counts().await.unwrap().dead, 2);
    assert_eq!(
        server.cli(&["KEYS", "{g}:gate*"]),
        "",
        "dead jobs hold no gate"
    );
    assert_eq!(q.revive_all_dead(Duration::ZERO).await.unwrap(), 2);
    assert_eq!(gate_ids(&server, admitted), ["d0"], "one run_at: by id");
    assert_eq!(gate_ids(&server, waiting), ["d1"]);
    let d0 = next(&mut consumer).await;
    assert_eq!(d0.id(), "d0");
    let follow = o.clone().dedup(Dedup::AllowWhileRunning);
    assert_eq!(
        q.schedule_with("d0", Duration::ZERO, "s", &follow)
            .await
            .unwrap(),
        Scheduled::Successor
    );
    assert!(d0.ack().await.unwrap());
    assert_eq!(
        gate_ids(&server, admitted),
        ["d1"],
        "revived before the successor"
    );
    assert_eq!(gate_ids(&server, waiting), ["d0"]);
    drop(consumer);
    let copy = JobQueue::builder().redis(&server.url(), "h").await.unwrap();
    q.copy_to(&copy).await.unwrap();
    assert_eq!(gate_ids(&server, "{h}:gate_a:sync\x1fa"), ["d1"]);
    assert_eq!(gate_ids(&server, "{h}:gate_w:sync\x1fa"), ["d0"]);
    let copied = copy.get("d0").await.unwrap().unwrap();
    assert_eq!((copied.key(), copied.payload()), (Some("a"), &b"s"[..]));
    assert_eq!(copy.counts().await.unwrap().pending, 2);
    let spread = JobQueue::builder()
        .partitions(3)
        .redis(&server.url(), "spread")
        .await
        .unwrap();
    let err = q.copy_to(&spread).await.unwrap_err();
    assert!(err.is_invalid_config(), "{err}");
    assert_eq!(spread.counts().await.unwrap().pending, 0);
    for queue in [q, copy, spread] {
        queue.close().await.unwrap();
    }
}

/// A series never adopts a gated job under its next occurrence's id (`lua/series.lua`): the
/// series skips that time, and the job stays its own, admitted by its gate; cancelling the
/// series leaves it alone, and with it gone no gate state is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_series_never_adopts_a_gated_job() {
    let server = RedisServer::start();
    let q = gate_queue(&server).await;
    let hour = Duration::from_secs(3600);
    let every = wheel_jobs::Recurrence::every(hour).unwrap();
    let head = every.next_after(SystemTime::now()).unwrap();
    let id = format!("st@{}", jiff::Timestamp::try_from(head).unwrap());
    let o = JobOptions::new().key("a").key_limit(1);
    q.schedule_with(&id, Duration::ZERO, "hand", &o)
        .await
        .unwrap();
    q.schedule_recurring("st", every, "series").await.unwrap();
    assert_eq!(
        q.list_recurring().await.unwrap()[0].next_run(),
        Some(head + hour),
        "the gated job is not the series' head"
    );
    assert_eq!(gate_ids(&server, "{g}:gate_a:\x1fa"), [id.as_str()]);
    assert!(q.cancel_recurring("st").await.unwrap());
    let job = q.get(&id).await.unwrap().expect("the gated job is its own");
    assert_eq!((job.key(), job.payload()), (Some("a"), &b"hand"[..]));
    assert!(q.cancel(&id).await.unwrap());
    assert_eq!(server.cli(&["KEYS", "{g}:gate*"]), "", "no gate state left");
    q.close().await.unwrap();
}

/// A rate timer set outside a claim (here another process's schedule) is published: a
/// consumer idle since before it (no due job, its lease and safety wakeup an hour away)
/// wakes at the window's end and takes the job that waited for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_timer_set_by_a_schedule_wakes_an_idle_consumer() {
    let server = RedisServer::start();
    let hour = Duration::from_secs(3600);
    let q = JobQueue::builder()
        .lease(hour)
        .safety_wakeup(hour)
        .redis(&server.url(), "g")
        .await
        .unwrap();
    let other = gate_queue(&server).await;
    let o = JobOptions::kind("mail")
        .key("m")
        .key_rate(1, Duration::from_secs(1));
    let mut consumer = q.consume_kind("mail");
    other
        .schedule_with("m0", Duration::ZERO, "p", &o)
        .await
        .unwrap();
    let m0 = next(&mut consumer).await;
    assert_eq!(m0.id(), "m0");
    // The consumer's claim after m0 finds nothing due and no timer: it goes idle.
    let waiter = tokio::spawn(async move { next(&mut consumer).await });
    tokio::time::sleep(ms(300)).await;
    other
        .schedule_with("m1", Duration::ZERO, "p", &o)
        .await
        .unwrap();
    assert_ne!(
        server.cli(&["ZSCORE", "{g}:gate_timers", "mail\x1fm"]),
        "",
        "m1 waits for the window's end"
    );
    let m1 = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the idle consumer woke at the window's end")
        .unwrap();
    assert_eq!(m1.id(), "m1");
    assert!(m0.ack().await.unwrap());
    assert!(m1.ack().await.unwrap());
    other.close().await.unwrap();
    q.close().await.unwrap();
}

/// A rebalance makes at most 256 promotions (`lua/gates.lua`): a schedule raising a key's
/// limit over 600 waiting jobs admits 256 of them and leaves the gate's timer at now; the
/// next claim goes on from it and admits the rest, and the timer goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebalance_is_bounded_and_the_next_claim_goes_on() {
    let server = RedisServer::start();
    let q = gate_queue(&server).await;
    let (admitted, waiting) = ("{g}:gate_a:sync\x1fa", "{g}:gate_w:sync\x1fa");
    let one = JobOptions::kind("sync").key("a").key_limit(1);
    let at = SystemTime::now() - ms(1000);
    for i in 0..600 {
        q.schedule_with(&format!("j{i:03}"), at, "p", &one)
            .await
            .unwrap();
    }
    assert_eq!(server.cli(&["ZCARD", admitted]), "1");
    let many = one.clone().key_limit(1000);
    q.schedule_with("raise", Duration::ZERO, "p", &many)
        .await
        .unwrap();
    assert_eq!(
        server.cli(&["ZCARD", admitted]),
        "257",
        "1 + 256 promotions"
    );
    assert_eq!(server.cli(&["ZCARD", waiting]), "344");
    assert_ne!(
        server.cli(&["ZSCORE", "{g}:gate_timers", "sync\x1fa"]),
        "",
        "moves left: the gate's timer is set"
    );
    let mut consumer = q.consume();
    let d = next(&mut consumer).await;
    assert_eq!(d.id(), "j000");
    assert_eq!(server.cli(&["ZCARD", waiting]), "0", "the claim went on");
    assert_eq!(server.cli(&["ZCARD", admitted]), "600");
    assert_eq!(server.cli(&["ZCARD", "{g}:gate_timers"]), "0");
    assert_eq!(q.counts().await.unwrap().pending, 600);
    assert!(d.ack().await.unwrap());
    q.close().await.unwrap();
}

/// A claim reads the gate timers once (`lua/gates.lua`'s `gate_timers_due`), keeping what
/// it read for its next_due: on a queue that never used a gate, every claim seen by MONITOR
/// (its script's check of the pause) makes exactly one read of `gate_timers`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_reads_the_gate_timers_once() {
    use std::io::BufRead;
    let server = RedisServer::start();
    let q = gate_queue(&server).await;
    for id in ["a", "b", "c"] {
        q.schedule(id, Duration::ZERO, "p").await.unwrap();
    }
    let socket = server.url().replace("redis+unix://", "");
    let mut monitor = std::process::Command::new("redis-cli")
        .args(["-s", &socket, "monitor"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(monitor.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "OK");
    let mut consumer = q.consume();
    for _ in 0..3 {
        next(&mut consumer).await;
    }
    drop(consumer);
    server.cli(&["ECHO", "monitor-end"]);
    let (mut claims, mut reads) = (0, 0);
    for line in lines.by_ref() {
        let line = line.unwrap();
        if line.contains("monitor-end") {
            break;
        }
        if !line.contains(" lua]") {
            continue;
        }
        if line.contains("\"{g}:gate_timers\"") {
            reads += 1;
        } else if line.contains("\"HEXISTS\"") && line.contains("\"paused\"") {
            claims += 1;
        }
    }
    monitor.kill().unwrap();
    monitor.wait().unwrap();
    assert!(claims >= 3, "{claims} claims");
    assert_eq!(reads, claims, "one read of the gate timers per claim");
    q.close().await.unwrap();
}

/// A gate's hash counts its sets (`na`, `nw`: `lua/gates.lua` reads these instead of the
/// sets) and its timer (`tm`, 0: none in `gate_timers`) through entries, a swap, starts,
/// acks and a cancel; acks freeing the slots of several gates of one kind (maybe one
/// script: the promotions' due entries and waiting-list removals are written once per set)
/// admit each gate's next job into the kind's due set, and the last ones empty the kind's
/// waiting list and its `levels` entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gates_counters_follow_its_sets_and_acks_promote_every_gate() {
    let server = RedisServer::start();
    let q = JobQueue::builder()
        .prefetch(8)
        .redis(&server.url(), "g")
        .await
        .unwrap();
    let gates = ["sync\x1fa", "sync\x1fb", "sync\x1fc"];
    let counted = |why: &str| {
        for gate in gates {
            let set = |s: &str| server.cli(&["ZCARD", &format!("{{g}}:gate_{s}:{gate}")]);
            let field = |f: &str| match gate_field(&server, gate, f).as_str() {
                "" => "0".to_owned(),
                n => n.to_owned(),
            };
            assert_eq!(field("na"), set("a"), "{why}: {gate:?} admitted");
            assert_eq!(field("nw"), set("w"), "{why}: {gate:?} waiting");
            let timer = server.cli(&["ZSCORE", "{g}:gate_timers", gate]);
            let timer = if timer.is_empty() {
                "0".to_owned()
            } else {
                timer
            };
            assert_eq!(field("tm"), timer, "{why}: {gate:?} timer");
        }
    };
    let now = SystemTime::now();
    for key in ["a", "b", "c"] {
        let o = JobOptions::kind("sync").key(key).key_limit(1);
        for i in 0..3u64 {
            q.schedule_with(&format!("{key}{i}"), now - ms(1000 - 10 * i), "p", &o)
                .await
                .unwrap();
        }
    }
    counted("scheduled");
    let early = JobOptions::kind("sync").key("a").key_limit(1);
    q.schedule_with("a-early", now - ms(5000), "p", &early)
        .await
        .unwrap();
    assert_eq!(
        gate_ids(&server, "{g}:gate_a:sync\x1fa"),
        ["a-early"],
        "swapped"
    );
    counted("swapped");
    let mut due = server.cli(&["ZRANGE", "{g}:due:0:sync", "0", "-1"]);
    assert_eq!(due, "a-early\nb0\nc0");
    let mut consumer = q.consume();
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(next(&mut consumer).await);
    }
    let mut ids: Vec<_> = got.iter().map(|d| d.id().to_owned()).collect();
    ids.sort();
    assert_eq!(ids, ["a-early", "b0", "c0"]);
    counted("started");
    let (d0, d1, d2) = (got.remove(0), got.remove(0), got.remove(0));
    let (x, y, z) = tokio::join!(d0.ack(), d1.ack(), d2.ack());
    assert!(x.unwrap() && y.unwrap() && z.unwrap());
    counted("acked");
    due = server.cli(&["ZRANGE", "{g}:due:0:sync", "0", "-1"]);
    assert_eq!(due, "a0\nb1\nc1", "each gate's next job admitted");
    assert_eq!(
        server.cli(&["ZRANGE", "{g}:gate_l:sync", "0", "-1"]),
        "a1\na2\nb2\nc2",
        "the kind's waiting list, by run_at"
    );
    assert!(q.cancel("b2").await.unwrap());
    counted("cancelled");
    let mut left = 6;
    while left > 0 {
        let d = next(&mut consumer).await;
        assert!(d.ack().await.unwrap());
        left -= 1;
    }
    assert_eq!(q.counts().await.unwrap().pending, 0);
    assert_eq!(server.cli(&["KEYS", "{g}:gate*"]), "", "no gate state left");
    assert_eq!(server.cli(&["ZRANGE", "{g}:levels", "0", "-1"]), "");
    q.close().await.unwrap();
}

/// Every gate's admitted set is in its kind's due set and counted (`na`, its timer `tm`
/// as in `gate_timers`): the due set
/// `{g}:due:0:sync` holds exactly the members of the `n` gates `sync\x1fk<i>`' admitted sets.
fn admitted_all_due(server: &RedisServer, n: usize) -> usize {
    let mut admitted = 0;
    for k in 0..n {
        let gate = format!("sync\x1fk{k}");
        let set = server.cli(&["ZCARD", &format!("{{g}}:gate_a:{gate}")]);
        assert_eq!(gate_field(server, &gate, "na"), set, "{gate:?} counted");
        let timer = server.cli(&["ZSCORE", "{g}:gate_timers", &gate]);
        let tm = gate_field(server, &gate, "tm");
        assert_eq!(
            tm,
            if timer.is_empty() { "0" } else { &timer },
            "{gate:?} timer"
        );
        admitted += set.parse::<usize>().unwrap();
    }
    assert_eq!(
        server.cli(&["ZCARD", "{g}:due:0:sync"]),
        admitted.to_string(),
        "every admitted job claimable"
    );
    admitted
}

/// 20 keys of 600 waiting jobs each under a limit of 1, every job due.
async fn twenty_full_gates(q: &JobQueue, per_key: usize) {
    let at = SystemTime::now() - ms(1000);
    for k in 0..20 {
        let o = JobOptions::kind("sync").key(format!("k{k}")).key_limit(1);
        let jobs = (0..per_key).map(|i| (format!("k{k}-{i:03}"), at, "p"));
        q.schedule_many_with(jobs, &o).await.unwrap();
    }
}

/// A claim meeting 20 gates' timers at now promotes 256 jobs of each into one due set
/// (5,120 members: more than Lua's unpack takes at once, `lua/kinds.lua`'s `call_many`):
/// the claim succeeds, every promotion is in the due set, and the next claim admits the
/// rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_promoting_thousands_across_gates_writes_them_all() {
    let server = RedisServer::start();
    let q = gate_queue(&server).await;
    twenty_full_gates(&q, 600).await;
    for k in 0..20 {
        let many = JobOptions::kind("sync")
            .key(format!("k{k}"))
            .key_limit(1000);
        q.schedule_with(&format!("raise{k}"), Duration::ZERO, "p", &many)
            .await
            .unwrap();
    }
    assert_eq!(admitted_all_due(&server, 20), 20 * 257);
    assert_eq!(server.cli(&["ZCARD", "{g}:gate_timers"]), "20");
    let mut consumer = q.consume_kind("sync");
    let first = next(&mut consumer).await;
    let second = next(&mut consumer).await;
    assert_eq!(
        server.cli(&["ZCARD", "{g}:gate_timers"]),
        "0",
        "two claims admitted every job"
    );
    assert_eq!(admitted_all_due(&server, 20), 20 * 601 - 2);
    assert_eq!(server.cli(&["ZCARD", "{g}:gate_l:sync"]), "0");
    assert!(first.ack().await.unwrap() && second.ack().await.unwrap());
    q.close().await.unwrap();
}

/// One script raising the limits of 20 gates of 300 waiting jobs each (an import of 20
/// jobs) promotes 256 of each into one due set, 5,120 members, whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_script_raising_many_gates_writes_every_promotion() {
    let server = RedisServer::start();
    let q = gate_queue(&server).await;
    twenty_full_gates(&q, 300).await;
    let src = JobQueue::builder()
        .redis(&server.url(), "src")
        .await
        .unwrap();
    for k in 0..20 {
        let many = JobOptions::kind("sync")
            .key(format!("k{k}"))
            .key_limit(1000);
        src.schedule_with(&format!("raise{k}"), Duration::ZERO, "p", &many)
            .await
            .unwrap();
    }
    src.copy_to(&q).await.unwrap();
    assert_eq!(admitted_all_due(&server, 20), 20 * 257);
    assert_eq!(
        server.cli(&["ZCARD", "{g}:gate_l:sync"]),
        (20 * 44).to_string()
    );
    assert_eq!(q.counts().await.unwrap().pending, 20 * 301);
    src.close().await.unwrap();
    q.close().await.unwrap();
}

/// A rebalance out of moves mid-swap keeps its timer at now, and any touch of the gate
/// before a claim meets it goes on with the swaps: a cancel here (300 admitted jobs due
/// tomorrow, then 300 entering due now: 256 swaps, 44 left) finishes them, so every job due
/// now is admitted before any due tomorrow, and only then is the timer gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_touch_after_a_swap_out_of_moves_finishes_it() {
    let server = RedisServer::start();
    let q = gate_queue(&server).await;
    let gate = "sync\x1fa";
    let admitted = "{g}:gate_a:sync\x1fa";
    let o = JobOptions::kind("sync").key("a").key_limit(300);
    let now = SystemTime::now();
    let late = (0..300).map(|i| (format!("l{i:03}"), now + 86_400 * ms(1000), "p"));
    q.schedule_many_with(late, &o).await.unwrap();
    let early = (0..300).map(|i| (format!("e{i:03}"), now - ms(1000), "p"));
    q.schedule_many_with(early, &o).await.unwrap();
    let held = gate_ids(&server, admitted);
    assert_eq!(held.iter().filter(|id| id.starts_with('l')).count(), 44);
    assert_ne!(server.cli(&["ZSCORE", "{g}:gate_timers", gate]), "");
    assert!(q.cancel("l000").await.unwrap());
    let held = gate_ids(&server, admitted);
    assert_eq!(held.len(), 300);
    assert!(
        held.iter().all(|id| id.starts_with('e')),
        "every job due now admitted: {:?}",
        held.iter()
            .filter(|id| id.starts_with('l'))
            .collect::<Vec<_>>()
    );
    assert_eq!(server.cli(&["ZSCORE", "{g}:gate_timers", gate]), "");
    assert_eq!(gate_field(&server, gate, "tm"), "0");
    assert_eq!(gate_field(&server, gate, "nw"), "299");
    q.close().await.unwrap();
}

/// A gate's hash without `tm` (written before it was kept) whose gate has a timer: the
/// rebalance that keeps no timer removes it all the same (a cancel of the job that waited
/// for the window's end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_hash_without_its_timer_field_drops_the_timer() {
    let server = RedisServer::start();
    let q = gate_queue(&server).await;
    let gate = "mail\x1fm";
    let o = JobOptions::kind("mail")
        .key("m")
        .key_rate(1, Duration::from_secs(3600));
    q.schedule_with("m0", Duration::ZERO, "p", &o)
        .await
        .unwrap();
    let mut consumer = q.consume_kind("mail");
    let m0 = next(&mut consumer).await;
    q.schedule_with("m1", Duration::ZERO, "p", &o)
        .await
        .unwrap();
    let timer = server.cli(&["ZSCORE", "{g}:gate_timers", gate]);
    assert_ne!(timer, "", "m1 waits for the window's end");
    assert_eq!(gate_field(&server, gate, "tm"), timer);
    server.cli(&["HDEL", &format!("{{g}}:gate_h:{gate}"), "tm"]);
    assert!(q.cancel("m1").await.unwrap());
    assert_eq!(
        server.cli(&["ZSCORE", "{g}:gate_timers", gate]),
        "",
        "nothing waits: no timer"
    );
    assert_eq!(gate_field(&server, gate, "tm"), "0");
    drop(consumer);
    assert!(m0.ack().await.unwrap());
    q.close().await.unwrap();
}
