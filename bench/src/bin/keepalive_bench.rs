//! # keepalive_bench: what `IdleTracker` costs
//!
//! The measurements behind the idle tracker's figures, one mode per run (the demo of the
//! tracker itself, real TCP connections expiring, is `cargo run --release --example
//! keepalive`):
//!
//! ```text
//! cargo run --release -p wheel-bench --bin keepalive_bench -- --simulate          # 100k connections, 3000 packets/s, 30 s idle, no sockets
//! cargo run --release -p wheel-bench --bin keepalive_bench -- --idle-cpu          # 100k idle keys: tracker CPU and wakeups/s
//! cargo run --release -p wheel-bench --bin keepalive_bench -- --burst 1000000     # 1M keys expiring in one tick vs a 1 ms ticker
//! cargo run --release -p wheel-bench --bin keepalive_bench -- --memory 10000000   # bytes per tracked key
//! cargo run --release -p wheel-bench --bin keepalive_bench -- --touch-cost 100000 # ns per touch vs tokio Sleep::reset
//! ```
//!
//! Each prints a report and exits non-zero if a check fails (`--help` lists every flag).
//! Every mode runs on current-thread tokio runtimes, so it behaves the same on 2 cores as
//! on 64; `--simulate` and `--idle-cpu` run the tracker on a thread of its own and measure
//! that thread's CPU time apart from the load generator's.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use wheel_bench::cpu::{rss, thread_cpu};
use wheel_timer::{Expirations, IdleHandle, IdleTracker, Timer};

// ===== arguments =====

/// What wheel-timer's IdleTracker costs: one mode per run.
#[derive(Debug, Clone, Parser)]
#[command(name = "keepalive_bench", after_help = MODES)]
#[command(group(clap::ArgGroup::new("mode").required(true)
    .args(["simulate", "idle_cpu", "burst", "memory", "touch_cost"])))]
struct Args {
    /// Connections or keys, with --simulate and --idle-cpu (default 100000)
    #[arg(long, value_parser = parse_count)]
    connections: Option<usize>,
    /// Idle timeout in seconds, 0.05 to 3600 (default 30 with --simulate and --idle-cpu;
    /// 2 with --memory)
    #[arg(long, value_parser = parse_idle_secs)]
    idle_secs: Option<f64>,
    /// With --simulate: share of connections that go quiet after registering
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(0..=100))]
    silent_percent: u32,
    /// No sockets: N in-process connections touching IdleHandles; the tracker's CPU is
    /// measured on a thread of its own, apart from the load generator's
    #[arg(long)]
    simulate: bool,
    /// With --simulate: target keepalive packets per second
    #[arg(long, default_value_t = 3000.0, value_parser = parse_rate)]
    rate: f64,
    /// Track N keys, report bytes per key and time for all to expire
    #[arg(long, value_parser = parse_count)]
    memory: Option<usize>,
    /// Time IdleHandle::touch, IdleTracker::touch and tokio Sleep::reset over N keys
    #[arg(long, value_parser = parse_count)]
    touch_cost: Option<usize>,
    /// Idle CPU: N keys (default 100000) tracked with no traffic, the tracker's CPU and
    /// wakeups per second with its default tick beside a tick of the timer's 1 ms
    #[arg(long)]
    idle_cpu: bool,
    /// Seconds each --idle-cpu configuration is measured
    #[arg(long, default_value_t = 10.0, value_parser = parse_measure_secs)]
    measure_secs: f64,
    /// N keys expiring in one tick beside a 1 ms ticker task on the same runtime: the
    /// ticker's longest delay
    #[arg(long, value_parser = parse_count)]
    burst: Option<usize>,
}

const MODES: &str = "\
Examples:
  cargo run --release -p wheel-bench --bin keepalive_bench -- --simulate
  cargo run --release -p wheel-bench --bin keepalive_bench -- --idle-cpu
  cargo run --release -p wheel-bench --bin keepalive_bench -- --burst 1000000
  cargo run --release -p wheel-bench --bin keepalive_bench -- --memory 10000000
  cargo run --release -p wheel-bench --bin keepalive_bench -- --touch-cost 100000";

fn parse_num<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    s.replace('_', "")
        .parse()
        .map_err(|_| format!("not a number: {s:?}"))
}

fn parse_count(s: &str) -> Result<usize, String> {
    match parse_num(s)? {
        0 => Err("must be at least 1".into()),
        n => Ok(n),
    }
}

fn parse_idle_secs(s: &str) -> Result<f64, String> {
    let secs: f64 = parse_num(s)?;
    if !(0.05..=3600.0).contains(&secs) {
        return Err("must be between 0.05 and 3600".into());
    }
    Ok(secs)
}

fn parse_rate(s: &str) -> Result<f64, String> {
    let rate: f64 = parse_num(s)?;
    if !(rate > 0.0 && rate.is_finite()) {
        return Err("must be positive".into());
    }
    Ok(rate)
}

fn parse_measure_secs(s: &str) -> Result<f64, String> {
    let secs: f64 = parse_num(s)?;
    if !(0.5..=600.0).contains(&secs) {
        return Err("must be between 0.5 and 600".into());
    }
    Ok(secs)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let ok = if let Some(keys) = args.touch_cost {
        match current_thread() {
            Ok(rt) => {
                rt.block_on(touch_costs(keys));
                true
            }
            Err(_) => false,
        }
    } else if let Some(keys) = args.memory {
        memory(keys, args.idle_secs.unwrap_or(2.0))
    } else if args.idle_cpu {
        idle_cpu(&args)
    } else if let Some(keys) = args.burst {
        burst(keys)
    } else {
        simulate(&args)
    };
    if ok {
        println!("PASS");
        ExitCode::SUCCESS
    } else {
        println!("FAIL");
        ExitCode::FAILURE
    }
}

// ===== small helpers =====

/// xorshift64*: a tiny deterministic PRNG, enough to spread keepalive intervals.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[lo, hi)`.
    fn between(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn silent(id: usize, percent: u32) -> bool {
    Rng::new(id as u64 ^ 0xA5A5).next() % 100 < u64::from(percent)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn ms(d: f64) -> String {
    format!("{:.2} ms", d / 1e6)
}

/// min / median / p99 / max of lateness samples in ns (which may be negative: early).
fn percentiles(samples: &mut [i64]) -> Option<[i64; 4]> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    Some([samples[0], at(0.5), at(0.99), samples[samples.len() - 1]])
}

fn check(ok: bool, line: String) -> bool {
    println!("  {line:<68} {}", if ok { "ok" } else { "FAILED" });
    ok
}

fn report_lateness(samples: &mut [i64], idle: Duration) -> bool {
    match percentiles(samples) {
        Some([min, med, p99, max]) => check(
            min >= 0,
            format!(
                "lateness vs idle {idle:?}: min {} median {} p99 {} max {}",
                ms(min as f64),
                ms(med as f64),
                ms(p99 as f64),
                ms(max as f64)
            ),
        ),
        None => check(samples.is_empty(), "lateness: no expiries".into()),
    }
}

// ===== what a --simulate run records =====

/// What the load generator and the expirations consumer record, shared between tasks.
struct Stats {
    t0: Instant,
    silent: Vec<bool>,
    /// Nanoseconds since `t0` of the last touch of each connection.
    last_rx: Vec<AtomicU64>,
    /// Nanoseconds since `t0` at which each connection expired (0: not expired).
    expired_at: Vec<AtomicU64>,
    packets: AtomicU64,
    expired: AtomicUsize,
    lateness: Mutex<Vec<i64>>,
}

impl Stats {
    fn new(n: usize, silent_percent: u32) -> Stats {
        Stats {
            t0: Instant::now(),
            silent: (0..n).map(|id| silent(id, silent_percent)).collect(),
            last_rx: (0..n).map(|_| AtomicU64::new(0)).collect(),
            expired_at: (0..n).map(|_| AtomicU64::new(0)).collect(),
            packets: AtomicU64::new(0),
            expired: AtomicUsize::new(0),
            lateness: Mutex::new(Vec::new()),
        }
    }

    fn now(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    /// Records a batch of expired ids at the current instant.
    fn expire(&self, batch: &[u32], idle: Duration) {
        let now = self.now();
        let mut lateness = self.lateness.lock().unwrap_or_else(|p| p.into_inner());
        for &id in batch {
            let id = id as usize;
            self.expired_at[id].store(now, Relaxed);
            let due = self.last_rx[id].load(Relaxed) + idle.as_nanos() as u64;
            lateness.push(now as i64 - due as i64);
        }
        self.expired.fetch_add(batch.len(), Relaxed);
    }
}

/// A current-thread runtime, or `None` after saying why there is none.
fn runtime_or_report() -> Option<tokio::runtime::Runtime> {
    current_thread()
        .map_err(|e| println!("keepalive_bench: cannot build a runtime: {e}"))
        .ok()
}

/// The single-threaded runtime every mode runs on.
fn current_thread() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

// ===== a tracker on a thread of its own =====

/// CPU time and voluntary context switches (wake-ups after blocking) of one thread.
#[derive(Debug, Clone, Copy, Default)]
struct Usage {
    cpu: Duration,
    wakeups: u64,
}

impl Usage {
    /// The calling thread's.
    fn of_this_thread() -> Usage {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap_or_default();
        let wakeups = status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        Usage {
            cpu: thread_cpu(),
            wakeups,
        }
    }

    fn since(self, before: Usage) -> Usage {
        Usage {
            cpu: self.cpu.saturating_sub(before.cpu),
            wakeups: self.wakeups.saturating_sub(before.wakeups),
        }
    }

    /// `"0.012% of a core, 4.3 wakeups/s"` over `elapsed`.
    fn describe(self, elapsed: Duration) -> String {
        format!(
            "{:.3}% of a core, {:.1} wakeups/s",
            self.percent(elapsed),
            self.wakeups as f64 / elapsed.as_secs_f64()
        )
    }

    fn percent(self, elapsed: Duration) -> f64 {
        100.0 * self.cpu.as_secs_f64() / elapsed.as_secs_f64()
    }
}

enum Command {
    Usage(std::sync::mpsc::Sender<Usage>),
    Stop,
}

/// A `Timer` and an `IdleTracker` whose driver tasks run alone on a thread of their own (a
/// current-thread runtime), so that thread's CPU time is the tracker's and nobody else's.
struct TrackerThread {
    commands: tokio::sync::mpsc::UnboundedSender<Command>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TrackerThread {
    fn start(
        idle: Duration,
        tick: Option<Duration>,
    ) -> std::io::Result<(TrackerThread, IdleTracker<u32>, Expirations<u32>)> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (commands, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let thread = std::thread::Builder::new()
            .name("tracker".into())
            .spawn(move || {
                let rt = match current_thread() {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                rt.block_on(async move {
                    let timer = Timer::new();
                    let mut builder = IdleTracker::<u32>::builder(idle);
                    if let Some(tick) = tick {
                        builder.tick(tick);
                    }
                    let _ = ready_tx.send(Ok(builder.build(&timer)));
                    while let Some(command) = rx.recv().await {
                        match command {
                            Command::Usage(reply) => {
                                let _ = reply.send(Usage::of_this_thread());
                            }
                            Command::Stop => break,
                        }
                    }
                });
            })?;
        let (tracker, expirations) = ready_rx
            .recv()
            .map_err(|_| std::io::Error::other("the tracker thread died"))??;
        let thread = TrackerThread {
            commands,
            thread: Some(thread),
        };
        Ok((thread, tracker, expirations))
    }

    /// The tracker thread's usage so far.
    fn usage(&self) -> Usage {
        let (tx, rx) = std::sync::mpsc::channel();
        let _ = self.commands.send(Command::Usage(tx));
        rx.recv().unwrap_or_default()
    }
}

impl Drop for TrackerThread {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

// ===== --idle-cpu: what idle keys cost =====

fn idle_cpu(args: &Args) -> bool {
    let n = args.connections.unwrap_or(100_000);
    let idle = Duration::from_secs_f64(args.idle_secs.unwrap_or(30.0));
    // Measured while no key can expire.
    let window = Duration::from_secs_f64(args.measure_secs).min(idle.mul_f64(0.8));
    println!(
        "keepalive_bench --idle-cpu: {n} keys tracked, idle timeout {idle:?}, no traffic; the tracker's \
         thread (timer and tracker drivers alone) measured for {window:?} per configuration"
    );
    let mut rows = Vec::new();
    for (name, tick) in [
        ("default tick", None),
        (
            "tick = the timer's 1 ms (the old default)",
            Some(Duration::from_millis(1)),
        ),
    ] {
        let (thread, tracker, expirations) = match TrackerThread::start(idle, tick) {
            Ok(started) => started,
            Err(e) => {
                println!("keepalive_bench: cannot start the tracker thread: {e}");
                return false;
            }
        };
        for key in 0..n as u32 {
            tracker.touch(key);
        }
        // The driver's first turns file the new keys; the measurement starts after them.
        std::thread::sleep(Duration::from_millis(500));
        let before = thread.usage();
        let started = Instant::now();
        std::thread::sleep(window);
        let usage = thread.usage().since(before);
        let elapsed = started.elapsed();
        let tracked = tracker.len();
        let tick = tracker.tick();
        drop((tracker, expirations, thread));
        rows.push((name, tick, usage, elapsed, tracked));
    }
    println!("report:");
    let mut ok = true;
    for &(name, tick, usage, elapsed, tracked) in &rows {
        ok &= check(
            tracked == n,
            format!("{name} ({tick:?}): {}", usage.describe(elapsed)),
        );
    }
    let (_, _, default, d_elapsed, _) = rows[0];
    let (_, _, fine, f_elapsed, _) = rows[1];
    println!(
        "  {:<68}",
        format!(
            "default vs 1 ms tick: {:.0}x less CPU, {:.0}x fewer wakeups",
            fine.percent(f_elapsed) / default.percent(d_elapsed).max(1e-6),
            (fine.wakeups as f64 / f_elapsed.as_secs_f64())
                / (default.wakeups as f64 / d_elapsed.as_secs_f64()).max(1e-6)
        )
    );
    ok &= check(
        default.percent(d_elapsed) <= 0.05,
        format!(
            "default configuration within 0.05% of a core: {:.3}%",
            default.percent(d_elapsed)
        ),
    );
    ok
}

// ===== --burst: a million keys expiring in one tick =====

fn burst(n: usize) -> bool {
    let Some(rt) = runtime_or_report() else {
        return false;
    };
    rt.block_on(async move {
        let idle = Duration::from_secs(1);
        let timer = Timer::new();
        let (tracker, mut expirations) = IdleTracker::<u64>::new(&timer, idle);
        println!(
            "keepalive_bench --burst: {n} keys touched at once (idle timeout {idle:?}, tick {:?}), \
             a 1 ms ticker task on the same current-thread runtime",
            tracker.tick()
        );
        for key in 0..n as u64 {
            tracker.touch(key);
        }
        let touched = Instant::now();
        let consumer = tokio::spawn(async move {
            let (mut got, mut first, mut last) = (0, None, None);
            while let Some(batch) = expirations.next_batch().await {
                got += batch.len();
                first.get_or_insert_with(Instant::now);
                last = Some(Instant::now());
                if got >= n {
                    break;
                }
            }
            (got, first, last)
        });
        let ticker = tokio::spawn(async move {
            let period = Duration::from_millis(1);
            let end = Instant::now() + idle * 2;
            let mut delays = Vec::new();
            let mut next = tokio::time::Instant::now() + period;
            while Instant::now() < end {
                tokio::time::sleep_until(next).await;
                let now = tokio::time::Instant::now();
                delays.push(now - next);
                next = now + period;
            }
            delays
        });
        let Ok(mut delays) = ticker.await else {
            return check(false, "the ticker task panicked".into());
        };
        let Ok((got, first, last)) = consumer.await else {
            return check(false, "the consumer task panicked".into());
        };
        delays.sort_unstable();
        let worst = delays.last().copied().unwrap_or_default();
        let p99 = delays[(delays.len() - 1) * 99 / 100];
        let median = delays[delays.len() / 2];
        println!("report:");
        let mut ok = check(got == n, format!("expired {got} of {n} keys"));
        if let (Some(first), Some(last)) = (first, last) {
            println!(
                "  {:<68}",
                format!(
                    "batch delivered {:.0} ms after the touches (due at {:.0} ms)",
                    last.duration_since(touched).as_secs_f64() * 1e3,
                    idle.as_secs_f64() * 1e3
                )
            );
            let _ = first;
        }
        ok &= check(
            worst <= Duration::from_millis(10),
            format!(
                "1 ms ticker's delay: median {median:?}, p99 {p99:?}, longest {worst:?} (goal <= 10 ms)"
            ),
        );
        drop(tracker);
        ok
    })
}

// ===== --simulate: the full-scale scenario without sockets =====

fn simulate(args: &Args) -> bool {
    let n = args.connections.unwrap_or(100_000);
    let idle = Duration::from_secs_f64(args.idle_secs.unwrap_or(30.0));
    let Some(rt) = runtime_or_report() else {
        return false;
    };
    rt.block_on(simulate_run(n, idle, args.silent_percent, args.rate))
}

async fn simulate_run(n: usize, idle: Duration, silent_percent: u32, rate: f64) -> bool {
    let stats = Arc::new(Stats::new(n, silent_percent));
    let silent_count = stats.silent.iter().filter(|&&s| s).count();
    let talkers = n - silent_count;
    // Keepalive intervals uniform in [lo, hi], hi = 90% of the idle timeout, mean set by the
    // target rate where it can be (a rate too low for the timeout is raised to what fits).
    let hi = 0.9 * idle.as_secs_f64();
    let mean = (talkers as f64 / rate).clamp(0.3 * hi, hi);
    let lo = (2.0 * mean - hi).max(0.05 * hi);
    println!(
        "keepalive_bench --simulate: {n} in-process connections (no sockets), idle timeout {idle:?}, \
         {silent_count} silent, {talkers} sending keepalives every {lo:.1}-{hi:.1} s (~{:.0}/s)",
        talkers as f64 / ((lo + hi) / 2.0)
    );
    let (rss0, _) = rss();
    // The tracker's timer and driver run on a thread of their own, so their CPU is measured
    // apart from this thread's (the load generator and the expirations consumer).
    let (thread, tracker, mut expirations) = match TrackerThread::start(idle, None) {
        Ok(started) => started,
        Err(e) => {
            println!("keepalive_bench: cannot start the tracker thread: {e}");
            return false;
        }
    };
    let tracker_usage0 = thread.usage();
    let generator_usage0 = Usage::of_this_thread();
    let started = Instant::now();
    let handles: Vec<IdleHandle<u32>> = (0..n as u32).map(|id| tracker.register(id)).collect();
    let register_time = started.elapsed();
    let t_reg = stats.now();
    for last in &stats.last_rx {
        last.store(t_reg, Relaxed);
    }
    let (rss1, _) = rss();

    let consumer = tokio::spawn({
        let stats = stats.clone();
        async move {
            while let Some(batch) = expirations.next_batch().await {
                stats.expire(&batch, idle);
            }
        }
    });
    // Each talker's first keepalive is uniform over one mean interval, so the rate is steady.
    let mut rng = Rng::new(7);
    let mut queue: BinaryHeap<Reverse<(u64, u32)>> = (0..n)
        .filter(|&id| !stats.silent[id])
        .map(|id| Reverse((t_reg + (rng.between(0.0, mean) * 1e9) as u64, id as u32)))
        .collect();
    let run_for = idle + Duration::from_secs(3);
    let end = stats.t0 + Duration::from_nanos(t_reg) + run_for;
    let mut next_progress = Instant::now();
    let mut last_packets = 0;
    let mut peak_rate = 0;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        if now >= next_progress {
            let packets = stats.packets.load(Relaxed);
            let rate = packets - last_packets;
            peak_rate = peak_rate.max(rate);
            last_packets = packets;
            eprint!(
                "\r  [{:5.1} s] connections {n}  packets/s {rate:>7}  expired {:>6}/{silent_count}   ",
                stats.t0.elapsed().as_secs_f64(),
                stats.expired.load(Relaxed)
            );
            let _ = std::io::stderr().flush();
            next_progress += Duration::from_secs(1);
        }
        let now_ns = stats.now();
        let mut count = 0;
        while let Some(&Reverse((due, id))) = queue.peek() {
            if due > now_ns {
                break;
            }
            queue.pop();
            handles[id as usize].touch();
            stats.last_rx[id as usize].store(now_ns, Relaxed);
            count += 1;
            let next = due + (rng.between(lo, hi) * 1e9) as u64;
            queue.push(Reverse((next, id)));
        }
        stats.packets.fetch_add(count, Relaxed);
        let wake = queue
            .peek()
            .map(|&Reverse((due, _))| stats.t0 + Duration::from_nanos(due))
            .unwrap_or(end)
            .min(next_progress)
            .min(end);
        tokio::time::sleep_until(tokio::time::Instant::from_std(wake)).await;
    }
    eprintln!();
    let elapsed = started.elapsed();
    let tracker_usage = thread.usage().since(tracker_usage0);
    let generator_usage = Usage::of_this_thread().since(generator_usage0);
    let packets = stats.packets.load(Relaxed);
    let expired_ids: Vec<usize> = (0..n)
        .filter(|&id| stats.expired_at[id].load(Relaxed) != 0)
        .collect();
    let talkers_expired = expired_ids.iter().filter(|&&id| !stats.silent[id]).count();
    let mut lateness =
        std::mem::take(&mut *stats.lateness.lock().unwrap_or_else(|p| p.into_inner()));
    let (rss2, peak) = rss();
    drop(handles);
    drop(tracker);
    drop(thread);
    let _ = tokio::time::timeout(Duration::from_secs(5), consumer).await;

    println!("report:");
    let mut ok = true;
    println!(
        "  {:<68}",
        format!(
            "registered {n} connections in {:.1} ms ({:.0} ns each)",
            register_time.as_secs_f64() * 1e3,
            register_time.as_nanos() as f64 / n as f64
        )
    );
    println!(
        "  {:<68}",
        format!(
            "packets {packets} over {:.1} s (avg {:.0}/s, peak {peak_rate}/s)",
            elapsed.as_secs_f64(),
            packets as f64 / run_for.as_secs_f64(),
        )
    );
    ok &= check(
        expired_ids.len() == silent_count && talkers_expired == 0,
        format!(
            "expired {} of {silent_count} expected silent connections",
            expired_ids.len()
        ),
    );
    ok &= check(
        talkers_expired == 0,
        format!("connections expired that kept talking: {talkers_expired}"),
    );
    ok &= report_lateness(&mut lateness, idle);
    ok &= check(
        tracker_usage.percent(elapsed) <= 0.3,
        format!(
            "tracker (timer + driver thread): {} (goal <= 0.3%)",
            tracker_usage.describe(elapsed)
        ),
    );
    println!(
        "  {:<68}",
        format!(
            "load generator + consumer thread: {} over {:.1} s",
            generator_usage.describe(elapsed),
            elapsed.as_secs_f64()
        )
    );
    println!(
        "  {:<68}",
        format!(
            "RSS {} (peak {}); {:.0} bytes per connection for tracker + handle",
            mib(rss2),
            mib(peak),
            rss1.saturating_sub(rss0) as f64 / n as f64
        )
    );
    touch_costs(n).await;
    ok
}

/// Per-touch cost over `n` keys, side by side in one run: `IdleHandle::touch`,
/// `IdleTracker::touch` (keyed) and tokio's `Sleep::reset(now + timeout)` (what a tokio
/// server does per packet with one `Sleep` per connection). Connections are touched in a
/// random order, as packets arrive; every key is tracked before timing starts.
async fn touch_costs(n: usize) {
    const TOUCHES: usize = 2_000_000;
    let rounds = TOUCHES.div_ceil(n);
    let idle = Duration::from_secs(30);
    let mut rng = Rng::new(n as u64);
    let mut order: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        order.swap(i, (rng.next() % (i as u64 + 1)) as usize);
    }
    // Wall time and this thread's CPU time per touch: on a shared machine the wall figure
    // includes time the thread was preempted, the CPU figure (what the criterion bench
    // reports with WHEEL_BENCH_CPU=1) does not.
    let time = |f: &mut dyn FnMut()| {
        let (start, cpu) = (Instant::now(), thread_cpu());
        f();
        let per = |d: Duration| d.as_nanos() as f64 / (rounds * n) as f64;
        (per(start.elapsed()), per(thread_cpu() - cpu))
    };

    let timer = Timer::new();
    let (tracker, _expirations) = IdleTracker::<u32>::new(&timer, idle);
    let handles: Vec<_> = (0..n as u32).map(|id| tracker.register(id)).collect();
    let handle_ns = time(&mut || {
        for _ in 0..rounds {
            order.iter().for_each(|&id| handles[id as usize].touch());
        }
    });
    drop(handles);
    (0..n as u32).for_each(|id| tracker.touch(id));
    let keyed_ns = time(&mut || {
        for _ in 0..rounds {
            order.iter().for_each(|&id| tracker.touch(id));
        }
    });
    drop(tracker);

    let mut sleeps: Vec<_> = (0..n).map(|_| Box::pin(tokio::time::sleep(idle))).collect();
    let mut cx = std::task::Context::from_waker(futures::task::noop_waker_ref());
    for sleep in &mut sleeps {
        let _ = std::future::Future::poll(sleep.as_mut(), &mut cx);
    }
    let tokio_ns = time(&mut || {
        for _ in 0..rounds {
            for &id in &order {
                sleeps[id as usize]
                    .as_mut()
                    .reset(tokio::time::Instant::now() + idle);
            }
        }
    });
    for (what, pick) in [("wall", 0), ("thread CPU", 1)] {
        let at = |t: (f64, f64)| if pick == 0 { t.0 } else { t.1 };
        let (handle, keyed, tokio) = (at(handle_ns), at(keyed_ns), at(tokio_ns));
        println!(
            "  {:<68}",
            format!(
                "touch cost over {n} keys (random order, {what}): handle {handle:.1} ns, \
                 keyed {keyed:.1} ns, tokio Sleep::reset {tokio:.1} ns ({:.0}x / {:.1}x faster)",
                tokio / handle,
                tokio / keyed
            )
        );
    }
}

// ===== --memory: bytes per key =====

fn memory(keys: usize, idle_secs: f64) -> bool {
    let idle = Duration::from_secs_f64(idle_secs);
    let Some(rt) = runtime_or_report() else {
        return false;
    };
    rt.block_on(async move {
        let timer = Timer::new();
        let (tracker, mut expirations) = IdleTracker::<u64>::new(&timer, idle);
        let (rss0, _) = rss();
        let started = Instant::now();
        for key in 0..keys as u64 {
            tracker.touch(key);
        }
        let insert = started.elapsed();
        let (rss1, _) = rss();
        let per_key = rss1.saturating_sub(rss0) as f64 / keys as f64;
        println!(
            "keepalive_bench --memory: {keys} u64 keys tracked in {:.2} s ({:.0} ns each); RSS {} -> {}: {per_key:.1} bytes per key ({:.1} beyond the 8-byte key)",
            insert.as_secs_f64(),
            insert.as_nanos() as f64 / keys as f64,
            mib(rss0),
            mib(rss1),
            per_key - 8.0
        );
        let mut expired = 0;
        let deadline = tokio::time::Instant::now() + idle * 3 + Duration::from_secs(60);
        while expired < keys {
            match tokio::time::timeout_at(deadline, expirations.next_batch()).await {
                Ok(Some(batch)) => expired += batch.len(),
                _ => break,
            }
        }
        let took = started.elapsed();
        println!("report:");
        let mut ok = check(
            expired == keys && tracker.is_empty(),
            format!(
                "expired {expired} of {keys} keys, all by {:.2} s after the first insert (idle {idle:?})",
                took.as_secs_f64()
            ),
        );
        ok &= check(
            per_key - 8.0 <= 40.0,
            format!("memory: {:.1} bytes per key beyond the key (budget 40)", per_key - 8.0),
        );
        ok
    })
}
