//! How fast the console's pages answer on a big queue.
//!
//! ```text
//! cargo run --release -p wheel-bench --bin console -- --jobs 10000000 --store /tmp/big.redb
//! cargo run --release -p wheel-bench --bin console -- --jobs 1000000 --redis redis+unix:///tmp/rb/redis.sock
//! ```
//!
//! Fills the queue up to `--jobs` pending jobs (ids `job-00000000`…, due over the next 30
//! days, loaded with `schedule_many`; a store given with `--store` is kept and reused by
//! the next run) plus 1,000 dead ones with an error, serves the console on 127.0.0.1, and
//! asks for each page `--rounds` times in a row over one keep-alive HTTP connection: the
//! overview, the first and a later page of the pending list, the dead and running lists, a
//! job, `/metrics`. Prints p50, p99 and max per page, in milliseconds, time from sending
//! the request to the whole answer read.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use clap::Parser;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use wheel_jobs::console::Console;
use wheel_jobs::JobQueue;

/// Time the console's pages on a big queue (see the module docs).
#[derive(Parser, Debug)]
#[command(name = "console")]
struct Args {
    /// Pending jobs to have in the queue.
    #[arg(long, default_value_t = 1_000_000)]
    jobs: u64,
    /// The embedded store (kept; default: a temporary one).
    #[arg(long)]
    store: Option<PathBuf>,
    /// A Redis server instead (queue `console-bench`; flushed of it by nothing: reused).
    #[arg(long)]
    redis: Option<String>,
    /// Requests per page.
    #[arg(long, default_value_t = 500)]
    rounds: usize,
}

const DEAD: u64 = 1_000;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let temp = tempfile_dir()?;
    let mut builder = JobQueue::builder();
    builder.max_attempts(1).lease(Duration::from_secs(3600));
    let queue = match &args.redis {
        Some(url) => builder.redis(url, "console-bench").await?,
        None => {
            let path = args.store.clone().unwrap_or(temp.join("bench.redb"));
            builder.open(path).await?
        }
    };
    fill(&queue, args.jobs).await?;
    let counts = queue.counts().await?;
    println!(
        "queue: {} pending, {} running, {} dead ({})",
        counts.pending,
        counts.running,
        counts.dead,
        if args.redis.is_some() {
            "redis"
        } else {
            "embedded"
        }
    );

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = Console::new(queue.clone()).router();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let mut client = Client::connect(&addr.to_string()).await?;
    let first = client.get("/jobs/pending").await?;
    let cursor = first
        .split_once("?after=")
        .and_then(|(_, rest)| rest.split('"').next())
        .ok_or("the pending list has no next page")?
        .replace("&#38;", "&");
    let middle = format!("/job?id=job-{:08}", args.jobs / 2);
    let pages = [
        ("overview", "/".to_owned()),
        ("pending, first page", "/jobs/pending".to_owned()),
        (
            "pending, a later page",
            format!("/jobs/pending?after={cursor}"),
        ),
        ("dead, first page", "/jobs/dead".to_owned()),
        ("running", "/jobs/running".to_owned()),
        ("a job", middle),
        ("/metrics", "/metrics".to_owned()),
    ];
    println!("{} requests per page, one connection, ms:", args.rounds);
    for (name, path) in pages {
        let mut took = Vec::with_capacity(args.rounds);
        for _ in 0..args.rounds {
            let start = Instant::now();
            client.get(&path).await?;
            took.push(start.elapsed());
        }
        took.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "  {name:<22} p50 {:>7.2}  p99 {:>7.2}  max {:>7.2}",
            ms(took[took.len() / 2]),
            ms(took[(took.len() * 99).div_ceil(100) - 1]),
            ms(took[took.len() - 1])
        );
    }
    server.abort();
    queue.close().await?;
    if args.store.is_none() {
        let _ = std::fs::remove_dir_all(&temp);
    }
    Ok(())
}

fn tempfile_dir() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("wheel-jobs-console-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Tops the queue up to `jobs` pending and [`DEAD`] dead jobs.
async fn fill(queue: &JobQueue, jobs: u64) -> Result<(), wheel_jobs::Error> {
    const BATCH: u64 = 10_000;
    let counts = queue.counts().await?;
    let now = SystemTime::now();
    let started = Instant::now();
    // Ids continue after the ones a reused store already holds.
    let mut n = counts.pending;
    while n < jobs {
        let end = (n + BATCH).min(jobs);
        let batch = (n..end).map(|i| {
            // Spread over 30 days by a multiplicative hash of the number.
            let due = now + Duration::from_secs(60 + (i * 2_654_435_761) % (30 * 86_400));
            (format!("job-{i:08}"), due, "payload")
        });
        queue.schedule_many(batch).await?;
        n = end;
    }
    if n > counts.pending {
        println!(
            "loaded {} pending jobs in {:.0} s",
            n - counts.pending,
            started.elapsed().as_secs_f64()
        );
    }
    if counts.dead < DEAD {
        let dead = (counts.dead..DEAD).map(|i| (format!("dead-{i:04}"), Duration::ZERO, "x"));
        queue.schedule_many(dead).await?;
        let mut consumer = queue.consume();
        let mut left = DEAD - counts.dead;
        while left > 0 {
            let Some(delivery) = consumer.next().await else {
                break;
            };
            delivery?
                .fail(Duration::ZERO, "declined: the issuer said no")
                .await?;
            left -= 1;
        }
    }
    Ok(())
}

/// HTTP/1.1 GETs over one keep-alive connection.
struct Client {
    stream: BufReader<TcpStream>,
}

impl Client {
    async fn connect(addr: &str) -> std::io::Result<Client> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Client {
            stream: BufReader::new(stream),
        })
    }

    /// The body of `GET path`, which must answer 200.
    async fn get(&mut self, path: &str) -> Result<String, Box<dyn std::error::Error>> {
        let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        self.stream.get_mut().write_all(request.as_bytes()).await?;
        let mut status = String::new();
        self.stream.read_line(&mut status).await?;
        if !status.starts_with("HTTP/1.1 200") {
            return Err(format!("{path}: {status}").into());
        }
        let mut length = 0;
        loop {
            let mut line = String::new();
            self.stream.read_line(&mut line).await?;
            if line == "\r\n" {
                break;
            }
            if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = value.trim().parse()?;
            }
        }
        let mut body = vec![0; length];
        self.stream.read_exact(&mut body).await?;
        Ok(String::from_utf8(body)?)
    }
}
