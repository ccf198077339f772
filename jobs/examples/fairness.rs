//! Fairness per key: one tenant's backlog does not delay another tenant's few jobs.
//!
//! ```text
//! cargo run -p wheel-jobs --example fairness
//! ```
//!
//! Tenant `big` schedules 2,000 `sync` jobs, then tenant `small` schedules 20, all due at
//! once. One worker of 8 slots runs them, each job taking about a millisecond. The drain runs
//! twice, on two stores: first without limits, where `small` waits behind all of `big`'s
//! backlog; then with the kind's defaults saying `key_limit(4)` (at most 4 jobs of one
//! tenant running), where `small`'s jobs start at once, beside `big`'s 4. The example prints
//! how many of `big`'s jobs had started when `small`'s last one did, and then shows a key
//! rate: at most 5 starts of one key per 200 ms. The stores live in a temporary directory.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wheel_jobs::{JobOptions, JobQueue};

const BIG: usize = 2_000;
const SMALL: usize = 20;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    for (store, (name, sync)) in [
        ("no limits", JobOptions::new()),
        ("key_limit(4)", JobOptions::new().key_limit(4)),
    ]
    .into_iter()
    .enumerate()
    {
        let queue = JobQueue::builder()
            .kind("sync", sync)
            .open(dir.path().join(format!("{store}.redb")))
            .await?;
        let big: Vec<_> = (0..BIG)
            .map(|i| (format!("big:{i:04}"), Duration::ZERO, "sync"))
            .collect();
        queue
            .schedule_many_with(big, &JobOptions::kind("sync").key("big"))
            .await?;
        let small: Vec<_> = (0..SMALL)
            .map(|i| (format!("small:{i:02}"), Duration::ZERO, "sync"))
            .collect();
        queue
            .schedule_many_with(small, &JobOptions::kind("sync").key("small"))
            .await?;

        // Counts, in start order: (big's starts so far, small's starts so far).
        let seen = Arc::new(Mutex::new((0usize, 0usize, None::<usize>)));
        let started = Instant::now();
        let worker = {
            let seen = seen.clone();
            queue.run(8, move |job| {
                let seen = seen.clone();
                async move {
                    {
                        let mut s = seen.lock().unwrap();
                        match job.key() {
                            Some("big") => s.0 += 1,
                            _ => s.1 += 1,
                        }
                        if s.1 == SMALL && s.2.is_none() {
                            s.2 = Some(s.0);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    Ok::<(), String>(())
                }
            })
        };
        let running = tokio::spawn(worker);
        while seen.lock().unwrap().2.is_none() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let big_before = seen.lock().unwrap().2.unwrap_or_default();
        println!(
            "{name:<13} small's {SMALL} jobs all started after {big_before} of big's {BIG} \
             ({:.0?} in)",
            started.elapsed()
        );
        queue.close().await?;
        running.await??;
    }

    // A rate: at most 5 starts of one key per 200 ms, across every process.
    let queue = JobQueue::builder()
        .kind(
            "mail",
            JobOptions::new().key_rate(5, Duration::from_millis(200)),
        )
        .open(dir.path().join("rate.redb"))
        .await?;
    let mails: Vec<_> = (0..15)
        .map(|i| (format!("mail:{i:02}"), Duration::ZERO, "hello"))
        .collect();
    queue
        .schedule_many_with(mails, &JobOptions::kind("mail").key("tenant-7"))
        .await?;
    let (sent, mut done) = tokio::sync::mpsc::unbounded_channel();
    let started = Instant::now();
    let running = tokio::spawn(queue.run(8, move |job| {
        let sent = sent.clone();
        async move {
            sent.send((job.id().to_owned(), started.elapsed())).ok();
            Ok::<(), String>(())
        }
    }));
    for _ in 0..15 {
        let (id, at) = done.recv().await.ok_or("the worker stopped early")?;
        println!("rate 5/200ms  {id} started at {:>4} ms", at.as_millis());
    }
    queue.close().await?;
    running.await??;
    Ok(())
}
