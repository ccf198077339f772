//! Many kinds of jobs in one queue: each kind with its own workers, cap and options, and
//! priorities among the jobs of a kind.
//!
//! ```text
//! cargo run -p wheel-jobs --example kinds
//! ```
//!
//! A shop's queue holds three kinds of jobs: `rate` (auto-rate an order; the kind's
//! defaults say 3 attempts), `remind` (a reminder mail; 2 attempts, a short backoff) and
//! `report` (nobody in this process handles it). Six ratings of three priorities and three
//! reminders are scheduled, all due at once, before any worker starts; then one worker per
//! kind (`run_kind`), each with its own cap. The rating worker takes one job at a time, so
//! the output shows the strict order: priority first, then due time. One reminder fails
//! once and is retried after its kind's backoff. The report stays pending, counted under
//! its kind. A recurring series of the kind `digest` (every second) is run by that kind's
//! worker: each occurrence is a job of the series' kind and priority. The store lives in a
//! temporary directory; the example exits by itself once the ratings, the reminders and a
//! digest are done.

use std::time::{Duration, SystemTime};

use wheel_jobs::{JobOptions, JobQueue, Recurrence};

const RATINGS: [(&str, i8); 6] = [
    ("rate:order-1", 0),
    ("rate:order-2", -5),
    ("rate:order-3", 7),
    ("rate:order-4", 0),
    ("rate:order-5", 7),
    ("rate:order-6", -5),
];
const REMINDERS: [&str; 3] = ["remind:ann", "remind:bob", "remind:cid"];

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let queue = JobQueue::builder()
        .max_attempts(10)
        .kind("rate", JobOptions::new().max_attempts(3))
        .kind(
            "remind",
            JobOptions::new()
                .max_attempts(2)
                .backoff(Duration::from_millis(200), Duration::from_secs(1)),
        )
        .open(dir.path().join("jobs.redb"))
        .await?;

    // Due at once, in this order; a second apart in the past, so that "then due time"
    // shows among equal priorities.
    let start = SystemTime::now() - Duration::from_secs(60);
    for (i, (id, priority)) in RATINGS.iter().enumerate() {
        let at = start + Duration::from_secs(i as u64);
        let options = JobOptions::kind("rate").priority(*priority);
        queue.schedule_with(id, at, "5 stars", &options).await?;
    }
    queue
        .schedule_many_with(
            REMINDERS.map(|id| (id, Duration::ZERO, "your order has arrived")),
            &JobOptions::kind("remind"),
        )
        .await?;
    queue
        .schedule_with(
            "report:daily",
            Duration::ZERO,
            "",
            &JobOptions::kind("report"),
        )
        .await?;
    // Each occurrence is a job of the kind "digest" at priority 1, the series' options.
    let every_second = Recurrence::every(Duration::from_secs(1))?;
    let digest = JobOptions::kind("digest").priority(1);
    queue
        .schedule_recurring_with("digest", every_second, "the day's orders", digest)
        .await?;
    print_kinds(&queue, "scheduled").await?;

    let (ran, mut done) = tokio::sync::mpsc::unbounded_channel();
    let rating = {
        let (queue, ran) = (queue.clone(), ran.clone());
        tokio::spawn(async move {
            // One at a time: the order of the ratings is the claim order.
            let work = queue.run_kind("rate", 1, move |job| {
                let ran = ran.clone();
                async move {
                    println!(
                        "rated    {:<13} priority {:>2}, attempt {}",
                        job.id(),
                        job.priority(),
                        job.attempt()
                    );
                    ran.send(()).ok();
                    Ok::<(), String>(())
                }
            });
            work.await
        })
    };
    let reminding = {
        let queue = queue.clone();
        tokio::spawn(async move {
            let work = queue.run_kind("remind", 2, move |job| {
                let ran = ran.clone();
                async move {
                    if job.id() == "remind:bob" && job.attempt() == 1 {
                        println!(
                            "failed   {:<13} attempt 1: the mail server said 451",
                            job.id()
                        );
                        return Err("451 try again later".to_owned());
                    }
                    println!("reminded {:<13} attempt {}", job.id(), job.attempt());
                    ran.send(()).ok();
                    Ok(())
                }
            });
            work.await
        })
    };
    let (digested, mut digests) = tokio::sync::mpsc::unbounded_channel();
    let digesting = {
        let queue = queue.clone();
        let work = queue.run_kind("digest", 1, move |job| {
            let (kind, priority) = (job.kind().to_owned(), job.priority());
            println!("digest   {} kind {kind}, priority {priority}", job.id());
            digested.send(()).ok();
            async { Ok::<(), String>(()) }
        });
        tokio::spawn(work)
    };

    for _ in 0..RATINGS.len() + REMINDERS.len() {
        done.recv().await.ok_or("a worker stopped early")?;
    }
    digests
        .recv()
        .await
        .ok_or("the digest worker stopped early")?;
    // Every handler has returned; `close` waits for their acks to commit.
    queue.close().await?;
    rating.await??;
    reminding.await??;
    digesting.await??;

    let queue = JobQueue::open(dir.path().join("jobs.redb")).await?;
    print_kinds(&queue, "at the end").await?;
    queue.close().await?;
    Ok(())
}

/// One line per kind with a job: pending, running, dead.
async fn print_kinds(queue: &JobQueue, when: &str) -> Result<(), wheel_jobs::Error> {
    let counts = queue.counts().await?;
    println!("{when}:");
    for (kind, c) in &counts.kinds {
        println!(
            "  {kind:<8} {} pending, {} running, {} dead",
            c.pending, c.running, c.dead
        );
    }
    Ok(())
}
