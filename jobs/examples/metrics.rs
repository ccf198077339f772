//! A queue's metrics, and its timer's, served to Prometheus.
//!
//! ```text
//! cargo run -p wheel-jobs --features metrics --example metrics            # a short run that checks itself
//! cargo run -p wheel-jobs --features metrics --example metrics -- --serve # then keeps serving 127.0.0.1:9464
//! ```
//!
//! Installs [`metrics-exporter-prometheus`](https://docs.rs/metrics-exporter-prometheus) as
//! the `metrics` recorder, listening on 127.0.0.1, opens an embedded queue (its metrics'
//! `queue` label is the file name without its extension: `orders`), and runs a worker over
//! a few jobs of which some fail and one dies. Meanwhile `export_timer_stats` copies the
//! wheel timer's [`Stats`](wheel_timer::Stats) into the same recorder every second: the
//! timer has no metrics dependency of its own, and this is all it takes.
//!
//! It then scrapes its own `/metrics` endpoint, prints the `wheel_jobs_*` and
//! `wheel_timer_*` lines, and exits non-zero if an expected metric is missing. With
//! `--serve` it keeps serving (and scheduling a job a second) until Ctrl-C, for a real
//! Prometheus to scrape.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use clap::Parser;
use metrics::{counter, gauge};
use metrics_exporter_prometheus::PrometheusBuilder;
use wheel_jobs::JobQueue;

/// Serve a queue's and its timer's metrics to Prometheus (see the module docs).
#[derive(Parser, Debug)]
#[command(name = "metrics")]
struct Args {
    /// Keep serving after the checks, until Ctrl-C.
    #[arg(long)]
    serve: bool,
    /// Where the exporter listens.
    #[arg(long, default_value = "127.0.0.1:9464")]
    listen: SocketAddr,
}

/// Copies `timer`'s counters into the installed recorder every second, forever: totals as
/// counters (set to the timer's own absolute values), the rest as gauges.
async fn export_timer_stats(timer: wheel_timer::Timer) {
    let label = [("timer", "default")];
    loop {
        let stats = timer.stats();
        gauge!("wheel_timer_pending", &label).set(stats.pending as f64);
        counter!("wheel_timer_scheduled_total", &label).absolute(stats.scheduled);
        counter!("wheel_timer_fired_total", &label).absolute(stats.fired);
        counter!("wheel_timer_cancelled_total", &label).absolute(stats.cancelled);
        counter!("wheel_timer_panicked_total", &label).absolute(stats.panicked);
        counter!("wheel_timer_driver_wakeups_total", &label).absolute(stats.driver_wakeups);
        gauge!("wheel_timer_max_lateness_ticks", &label).set(stats.max_lateness_ticks as f64);
        timer.sleep(Duration::from_secs(1)).await;
    }
}

/// `GET /metrics` from the exporter: the text Prometheus would scrape.
fn scrape(addr: SocketAddr) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr)?;
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    PrometheusBuilder::new()
        .with_http_listener(args.listen)
        .install()?;
    // The queue's consumers sleep on the runtime's default timer: export that one.
    tokio::spawn(export_timer_stats(wheel_timer::default_timer()));

    let dir = tempfile::tempdir()?;
    let queue = JobQueue::builder()
        .max_attempts(2)
        .backoff(Duration::from_millis(10), Duration::from_millis(10))
        .open(dir.path().join("orders.redb"))
        .await?;
    for i in 0..20 {
        queue
            .schedule(&format!("order-{i}"), Duration::from_millis(20 * i), "")
            .await?;
    }
    let worker = queue.clone();
    tokio::spawn(async move {
        worker
            .run(4, |job| async move {
                // order-5 and order-15 fail their first attempt; order-7 fails both and dies.
                match job.id() {
                    "order-7" => Err("the card was declined"),
                    id if id.ends_with('5') && job.attempt() == 1 => Err("timed out"),
                    _ => Ok(()),
                }
            })
            .await
    });
    loop {
        let counts = queue.counts().await?;
        if counts.pending + counts.running == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Let the gauges and the timer's figures be refreshed once more.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    queue.counts().await?;

    let text = scrape(args.listen)?;
    let mut missing = Vec::new();
    for name in [
        "wheel_jobs_scheduled_total",
        "wheel_jobs_delivered_total",
        "wheel_jobs_acked_total",
        "wheel_jobs_failed_total",
        "wheel_jobs_dead_total",
        "wheel_jobs_pending",
        "wheel_jobs_dead",
        "wheel_jobs_lateness_seconds",
        "wheel_jobs_handler_seconds",
        "wheel_timer_fired_total",
        "wheel_timer_driver_wakeups_total",
    ] {
        if !text.contains(name) {
            missing.push(name);
        }
    }
    for line in text.lines() {
        let ours = line.starts_with("wheel_jobs_") || line.starts_with("wheel_timer_");
        let summary = line.contains("quantile=") && !line.contains("quantile=\"0.99\"");
        if ours && !summary {
            println!("{line}");
        }
    }
    if !missing.is_empty() {
        return Err(format!("missing from /metrics: {missing:?}").into());
    }
    if args.serve {
        println!("serving http://{}/metrics until Ctrl-C", args.listen);
        let mut n = 0u64;
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => break,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {
                    n += 1;
                    queue.schedule(&format!("tick-{n}"), Duration::ZERO, "").await?;
                }
            }
        }
    }
    queue.close().await?;
    Ok(())
}
