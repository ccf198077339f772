//! The behavioural suite on the embedded store, and what only a file can do: persist across
//! reopen, lock, be corrupt.

use std::time::{Duration, SystemTime};

use wheel_jobs::{JobQueue, JobState, Scheduled};

use crate::support::{embedded, ms, next};

run_shared_suite!(crate::support::embedded::harness());

/// The store and its log are created readable and writable by their owner only.
#[tokio::test]
async fn the_store_and_its_log_are_created_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let h = embedded::harness();
    let queue = JobQueue::open(h.path()).await.unwrap();
    queue.schedule("job", Duration::ZERO, "p").await.unwrap();
    let mut log = h.path().into_os_string();
    log.push(".wal");
    for file in [h.path(), log.into()] {
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{}: mode {mode:o}", file.display());
    }
    queue.close().await.unwrap();
}

#[tokio::test]
async fn jobs_survive_a_reopen_and_past_due_ones_come_at_once() {
    let h = embedded::harness();
    let queue = JobQueue::open(h.path()).await.unwrap();
    let soon = SystemTime::now() + ms(30);
    queue.schedule("soon", soon, "a").await.unwrap();
    queue
        .schedule("later", Duration::from_secs(3600), "b")
        .await
        .unwrap();
    queue.close().await.unwrap();

    tokio::time::sleep(ms(40)).await; // "soon" falls due while nobody has the store open
    let queue = JobQueue::open(h.path()).await.unwrap();
    assert_eq!(queue.pending().await.unwrap(), 2);
    assert_eq!(
        queue.schedule("soon", ms(0), "x").await.unwrap(),
        Scheduled::Exists
    );
    let mut consumer = queue.consume();
    let d = next(&mut consumer).await;
    assert_eq!((d.id(), d.payload(), d.run_at()), ("soon", &b"a"[..], soon));
    assert!(d.ack().await.unwrap());
    let later = queue.get("later").await.unwrap().unwrap();
    assert_eq!(
        (later.state(), later.payload()),
        (JobState::Pending, &b"b"[..])
    );
    queue.close().await.unwrap();
}

#[tokio::test]
async fn a_second_open_is_locked() {
    let h = embedded::harness();
    let queue = JobQueue::open(h.path()).await.unwrap();
    let err = JobQueue::open(h.path()).await.unwrap_err();
    assert!(err.is_locked(), "{err}");
    assert!(!err.is_storage());
    queue.close().await.unwrap();
    JobQueue::open(h.path())
        .await
        .expect("released by close")
        .close()
        .await
        .unwrap();
}

#[tokio::test]
async fn dropping_every_handle_releases_the_store() {
    let h = embedded::harness();
    let queue = JobQueue::open(h.path()).await.unwrap();
    queue
        .schedule("kept", Duration::from_secs(60), "p")
        .await
        .unwrap();
    drop(queue);
    // The store thread releases the file in the background: retry until it has.
    let reopened = loop {
        match JobQueue::open(h.path()).await {
            Ok(queue) => break queue,
            Err(err) if err.is_locked() => tokio::time::sleep(ms(1)).await,
            Err(err) => panic!("{err}"),
        }
    };
    assert!(reopened.get("kept").await.unwrap().is_some());
    reopened.close().await.unwrap();
}

#[tokio::test]
async fn a_corrupt_file_is_a_storage_error() {
    let h = embedded::harness();
    let garbage: Vec<u8> = (0..64 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(h.path(), &garbage).unwrap();
    let err = JobQueue::open(h.path()).await.unwrap_err();
    assert!(err.is_storage(), "{err}");
    assert!(!err.is_locked());

    // A file that starts like a store but whose pages are garbage.
    let h = embedded::harness();
    let queue = JobQueue::open(h.path()).await.unwrap();
    queue.schedule("a", ms(0), "p").await.unwrap();
    queue.close().await.unwrap();
    let mut bytes = std::fs::read(h.path()).unwrap();
    let len = bytes.len();
    for (i, b) in bytes[64..len].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31) ^ 0x5a;
    }
    std::fs::write(h.path(), &bytes).unwrap();
    match JobQueue::open(h.path()).await {
        Err(err) => assert!(err.is_storage(), "{err}"),
        // redb may fall back to the other commit slot and find nothing readable.
        Ok(queue) => {
            let err = queue.get("a").await.unwrap_err();
            assert!(err.is_storage() || err.is_closed(), "{err}");
        }
    }
}

#[tokio::test]
async fn an_unusable_path_is_a_storage_error() {
    let h = embedded::harness();
    let err = JobQueue::open(h.dir.path().join("missing-dir").join("jobs.redb"))
        .await
        .unwrap_err();
    assert!(err.is_storage(), "{err}");
    let err = JobQueue::open(h.dir.path()).await.unwrap_err();
    assert!(err.is_storage(), "a directory: {err}");
}

#[test]
fn handles_are_send_sync_and_the_stream_is_unpin() {
    fn stream<
        S: futures::Stream<Item = Result<wheel_jobs::Delivery, wheel_jobs::Error>> + Unpin + Send,
    >() {
    }
    fn send_sync<T: Send + Sync + Clone + std::fmt::Debug>() {}
    fn send<T: Send + std::fmt::Debug>() {}
    stream::<wheel_jobs::Consumer>();
    send_sync::<JobQueue>();
    send_sync::<wheel_jobs::Error>();
    send::<wheel_jobs::Delivery>();
}

/// Documented: dropping a consumer whose claim is in flight leaves the claimed job leased to
/// nobody until its lease ends (its attempt spent), then it is delivered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_dropped_mid_claim_leaves_its_jobs_leased_until_the_lease_ends() {
    let h = embedded::harness();
    let q = JobQueue::builder()
        .lease(ms(100))
        .open(h.path())
        .await
        .unwrap();
    q.schedule("job", Duration::ZERO, "p").await.unwrap();
    let mut c = q.consume();
    {
        let next = c.next();
        tokio::pin!(next);
        assert!(
            futures::poll!(next.as_mut()).is_pending(),
            "the claim is sent"
        );
    }
    drop(c);
    while q.running().await.unwrap() == 0 {
        tokio::time::sleep(ms(1)).await;
    }
    let info = q.get("job").await.unwrap().unwrap();
    assert_eq!((info.state(), info.attempt()), (JobState::Running, 1));
    let d = next(&mut q.consume()).await;
    assert_eq!((d.id(), d.attempt()), ("job", 2), "after the lease");
    assert!(d.ack().await.unwrap());
    q.close().await.unwrap();
}

/// A log that cannot be written (here `/dev/full`: every write fails with "no space left on
/// device") stops the store. That used to look like a clean close: later calls failed with
/// `is_closed`, `run` returned `Ok(())` and `close` too. Now every later call, `run` and
/// `close` report the storage failure, and nothing hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_that_cannot_be_written_fails_every_later_call() {
    let h = embedded::harness();
    std::os::unix::fs::symlink("/dev/full", h.dir.path().join("jobs.redb.wal")).unwrap();
    let queue = JobQueue::open(h.path()).await.expect("nothing to replay");
    let worker = queue.clone();
    let running =
        tokio::spawn(async move { worker.run(2, |_d| async { Ok::<(), String>(()) }).await });
    let mut calls = Vec::new();
    for i in 0..20 {
        let queue = queue.clone();
        calls.push(tokio::spawn(async move {
            queue.schedule(&format!("j{i}"), Duration::ZERO, "p").await
        }));
    }
    for call in calls {
        let err = call
            .await
            .unwrap()
            .expect_err("nothing could be made durable");
        assert!(err.is_storage(), "{err}");
    }
    let err = running.await.unwrap().expect_err("run reports the failure");
    assert!(err.is_storage(), "{err}");
    assert!(queue.pending().await.unwrap_err().is_storage());
    assert!(queue.close().await.unwrap_err().is_storage());
    // The failed store released the file before saying so: it reopens at once.
    let again = JobQueue::open(h.path()).await.expect("reopens");
    again.close().await.unwrap();
}

/// A series of a kind runs under one `worker()` of two kinds, through its kind's handler,
/// beside the other kind's job; after a reopen it is still of its kind, and runs on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_series_of_a_kind_runs_under_a_worker_of_two_kinds_across_a_reopen() {
    use wheel_jobs::{JobOptions, Recurrence, RecurringOptions};

    let h = embedded::harness();
    let run = |queue: JobQueue, digests: usize, mails: usize| async move {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let handler = |name: &'static str| {
            let tx = tx.clone();
            move |d: wheel_jobs::Delivery| {
                let seen = (name, d.kind().to_owned(), d.priority(), d.id().to_owned());
                tx.send(seen).unwrap();
                std::future::ready(Ok::<(), String>(()))
            }
        };
        let worker = queue
            .worker()
            .kind("digest", handler("digest"))
            .kind("mail", handler("mail"));
        let running = tokio::spawn(worker.run(2));
        let (mut d, mut m) = (0, 0);
        while d < digests || m < mails {
            let (name, kind, priority, id) =
                tokio::time::timeout(Duration::from_secs(30), rx.recv())
                    .await
                    .expect("the worker ran them")
                    .unwrap();
            assert_eq!(name, kind, "{id} went to the {name} handler");
            match kind.as_str() {
                "digest" => {
                    assert!(id.starts_with("digest@"), "{id}");
                    assert_eq!(priority, 4);
                    d += 1;
                }
                _ => {
                    assert_eq!(id, "mail:1");
                    m += 1;
                }
            }
        }
        queue.close().await.unwrap();
        running.await.unwrap().unwrap();
    };

    let queue = JobQueue::open(h.path()).await.unwrap();
    let options = RecurringOptions::new().options(JobOptions::kind("digest").priority(4));
    let every = Recurrence::every(ms(40)).unwrap();
    queue
        .schedule_recurring_with("digest", every, "d", options)
        .await
        .unwrap();
    queue
        .schedule_with("mail:1", Duration::ZERO, "m", &JobOptions::kind("mail"))
        .await
        .unwrap();
    run(queue, 2, 1).await;

    let queue = JobQueue::open(h.path()).await.unwrap();
    let info = queue.list_recurring().await.unwrap().remove(0);
    assert_eq!((info.kind(), info.priority()), ("digest", 4));
    let head = queue.counts().await.unwrap().kinds["digest"].pending;
    assert_eq!(head, 1, "its pending occurrence, of its kind");
    run(queue, 1, 0).await;
}
