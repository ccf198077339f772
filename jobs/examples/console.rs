//! The web console on a busy queue.
//!
//! ```text
//! cargo run --release -p wheel-jobs --example console --features console
//! ```
//!
//! Opens a queue in a temporary directory (or `--store PATH`), fills it with jobs in every
//! state, runs a worker on it, and serves the console for it on 127.0.0.1 (the address is
//! printed; `--listen` to change it). The worker acks `rate:` jobs, fails `charge:` jobs
//! (a declined card, so they retry and die after three attempts with the error kept) and
//! holds `export:` jobs for a long time (they stay running). New jobs keep arriving, so the
//! counts and the rates move: a [`Recorder`] installed before the queue opens sees the
//! worker's deliveries. It stops by itself after `--seconds` (default 600) or on Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use wheel_jobs::console::{Console, Recorder};
use wheel_jobs::JobQueue;

/// Serve the console of a demo queue (see the module docs).
#[derive(Parser, Debug)]
#[command(name = "console")]
struct Args {
    /// Where to serve the console.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// The store (default: a fresh one in a temporary directory).
    #[arg(long)]
    store: Option<PathBuf>,
    /// Stop after this many seconds.
    #[arg(long, default_value_t = 600)]
    seconds: u64,
}

#[derive(Debug)]
struct Declined(u32);

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "card declined by the issuer (code 05) on attempt {}",
            self.0
        )
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let dir = std::env::temp_dir().join(format!("wheel-jobs-console-{}", std::process::id()));
    let path = match &args.store {
        Some(path) => path.clone(),
        None => {
            std::fs::create_dir_all(&dir)?;
            dir.join("jobs.redb")
        }
    };
    // Before the queue opens: the queue registers its metrics when it opens.
    let recorder = Recorder::new();
    metrics::set_global_recorder(recorder.clone())?;
    let queue = JobQueue::builder()
        .max_attempts(3)
        .backoff(Duration::from_millis(200), Duration::from_secs(1))
        .lease(Duration::from_secs(30))
        .open(&path)
        .await?;
    fill(&queue).await?;

    let worker = tokio::spawn({
        let queue = queue.clone();
        async move {
            queue
                .run(8, |job| async move {
                    if job.id().starts_with("charge:") {
                        return Err(Declined(job.attempt()));
                    }
                    if job.id().starts_with("export:") {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                    }
                    Ok(())
                })
                .await
        }
    });
    let arrivals = tokio::spawn(arrivals(queue.clone()));

    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!("console: http://{}/", listener.local_addr()?);
    println!("store: {}", path.display());
    let seconds = args.seconds;
    let stop = async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => println!("stopping: Ctrl-C"),
            _ = tokio::time::sleep(Duration::from_secs(seconds)) => {
                println!("stopping after {seconds} s")
            }
        }
    };
    let console = Console::new(queue.clone()).recorder(recorder).router();
    axum::serve(listener, console)
        .with_graceful_shutdown(stop)
        .await?;

    // The held `export:` handlers would keep `close` waiting: drop them (their jobs stay
    // leased in the store, as after a crash).
    arrivals.abort();
    worker.abort();
    let _ = worker.await;
    queue.close().await?;
    if args.store.is_none() {
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(())
}

/// Jobs in every state: pending over the next days, some due now to fail, some to hold,
/// one binary payload, one id that needs escaping.
async fn fill(queue: &JobQueue) -> Result<(), wheel_jobs::Error> {
    let hour = Duration::from_secs(3600);
    let rates = (0..1_200).map(|i| {
        (
            format!("rate:order-{:05}", 40_000 + i),
            hour * (1 + i % 48),
            format!(r#"{{"order":{},"stars":5}}"#, 40_000 + i),
        )
    });
    queue.schedule_many(rates).await?;
    let charges = (0..6).map(|i| {
        (
            format!("charge:invoice-{}", 9_100 + i),
            Duration::ZERO,
            format!(
                r#"{{"invoice":{},"amount_cents":{}}}"#,
                9_100 + i,
                1_999 + i * 500
            ),
        )
    });
    queue.schedule_many(charges).await?;
    let exports = (0..3).map(|i| (format!("export:report-{i}"), Duration::ZERO, "monthly"));
    queue.schedule_many(exports).await?;
    queue
        .schedule(
            "thumbnail:7f3a",
            hour * 2,
            vec![0x89, b'P', b'N', b'G', 0, 1, 2, 3],
        )
        .await?;
    queue
        .schedule("<script>alert('id')</script>", hour * 3, "<b>not bold</b>")
        .await?;
    Ok(())
}

/// A trickle of new work: a rating due in a few seconds every 200 ms, a failing charge
/// every 10 s.
async fn arrivals(queue: JobQueue) -> Result<(), wheel_jobs::Error> {
    for i in 0u64.. {
        let id = format!("rate:order-{}", 90_000 + i);
        queue
            .schedule(&id, Duration::from_secs(3), "5 stars")
            .await?;
        if i % 50 == 0 {
            let id = format!("charge:invoice-{}", 20_000 + i / 50);
            queue.schedule(&id, Duration::from_secs(1), "{}").await?;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}
