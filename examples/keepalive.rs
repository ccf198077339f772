//! # keepalive: declare idle connections offline with `IdleTracker`
//!
//! A real TCP server on 127.0.0.1 tracks every connection with an [`IdleTracker`]
//! (each socket wrapped by `IdleTracker::wrap_with`, so every line read touches it without a
//! lock), and N real client connections from the same process talk to it. Most clients send
//! a keepalive line at a random interval below the idle timeout; the silent ones stop after
//! their first line. The server pushes a line to every client a few times per idle period
//! (as a comet server does): writes do not count as activity (read idle), so pushing to a
//! silent client does not keep it alive. The stream is in event mode: on its idle event
//! the server pushes a `bye` line (what the original server sends before closing) and then
//! closes. The server must expire exactly the silent ones, about one idle timeout after
//! their last line, every one of them must receive its goodbye, and no talker may.
//!
//! ```text
//! cargo run --release --example keepalive
//! cargo run --release --example keepalive -- --connections 8000 --idle-secs 3 --silent-percent 30
//! cargo run --release --example keepalive -- --simulate          # 100k connections, 3000 packets/s, 30 s idle, no sockets
//! cargo run --release --example keepalive -- --idle-cpu          # 100k idle keys: tracker CPU and wakeups/s
//! cargo run --release --example keepalive -- --burst 1000000     # 1M keys expiring in one tick vs a 1 ms ticker
//! cargo run --release --example keepalive -- --memory 10000000   # bytes per tracked key
//! cargo run --release --example keepalive -- --touch-cost 100000  # ns per touch vs tokio Sleep::reset
//! ```
//!
//! It shows a live progress line, then a report (expired vs expected, goodbyes, lateness,
//! server CPU, RSS) and exits non-zero if a check fails (`--help` lists every flag). Two OS threads (server, clients), each a
//! current-thread tokio runtime, so it behaves the same on 2 cores as on 64. The connection
//! count is capped by the open-file limit (each connection is two sockets in this process).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use wheel_timer::{Expirations, IdleHandle, IdleKind, IdleMode, IdleTracker, Timer};

#[path = "support/cpu.rs"]
mod cpu;
use cpu::{process_cpu, rss, thread_cpu};

// ===== arguments =====

/// Declare idle connections offline with wheel-timer's IdleTracker.
#[derive(Debug, Clone, Parser)]
#[command(name = "keepalive", after_help = MODES)]
struct Args {
    /// Client connections (default 4000; 100000 with --simulate and --idle-cpu)
    #[arg(long, value_parser = parse_count)]
    connections: Option<usize>,
    /// Idle timeout in seconds, 0.05 to 3600 (default 5; 30 with --simulate and --idle-cpu;
    /// 2 with --memory)
    #[arg(long, value_parser = parse_idle_secs)]
    idle_secs: Option<f64>,
    /// Share of clients that go quiet after their first line
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
  cargo run --release --example keepalive
  cargo run --release --example keepalive -- --connections 8000 --idle-secs 3 --silent-percent 30
  cargo run --release --example keepalive -- --simulate
  cargo run --release --example keepalive -- --idle-cpu
  cargo run --release --example keepalive -- --burst 1000000
  cargo run --release --example keepalive -- --memory 10000000
  cargo run --release --example keepalive -- --touch-cost 100000";

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
    } else if args.simulate {
        simulate(&args)
    } else {
        sockets(&args)
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

/// The soft limit on open files, from /proc/self/limits.
fn open_file_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line.split_whitespace().nth(3)?;
    if soft == "unlimited" {
        return Some(usize::MAX);
    }
    soft.parse().ok()
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

// ===== the socket demo =====

/// What the server and clients record, shared between threads.
struct Stats {
    t0: Instant,
    silent: Vec<bool>,
    /// Nanoseconds since `t0` of the last line the server read from each client.
    last_rx: Vec<AtomicU64>,
    /// Nanoseconds since `t0` at which each client expired (0: not expired).
    expired_at: Vec<AtomicU64>,
    connected: AtomicUsize,
    connect_errors: AtomicUsize,
    packets: AtomicU64,
    /// Lines the server pushed to clients.
    pushed: AtomicU64,
    expired: AtomicUsize,
    /// Idle events the server's streams reported.
    server_timeouts: AtomicUsize,
    /// Goodbye lines received by silent clients, and by talkers (must stay 0).
    byes_silent: AtomicUsize,
    byes_talkers: AtomicUsize,
    /// Talkers whose socket was closed under them before the end.
    talkers_cut: AtomicUsize,
    lateness: Mutex<Vec<i64>>,
    first_error: Mutex<Option<String>>,
}

impl Stats {
    fn new(n: usize, silent_percent: u32) -> Stats {
        Stats {
            t0: Instant::now(),
            silent: (0..n).map(|id| silent(id, silent_percent)).collect(),
            last_rx: (0..n).map(|_| AtomicU64::new(0)).collect(),
            expired_at: (0..n).map(|_| AtomicU64::new(0)).collect(),
            connected: AtomicUsize::new(0),
            connect_errors: AtomicUsize::new(0),
            packets: AtomicU64::new(0),
            pushed: AtomicU64::new(0),
            expired: AtomicUsize::new(0),
            server_timeouts: AtomicUsize::new(0),
            byes_silent: AtomicUsize::new(0),
            byes_talkers: AtomicUsize::new(0),
            talkers_cut: AtomicUsize::new(0),
            lateness: Mutex::new(Vec::new()),
            first_error: Mutex::new(None),
        }
    }

    fn now(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    fn error(&self, what: String) {
        self.first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(what);
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

fn sockets(args: &Args) -> bool {
    let idle = Duration::from_secs_f64(args.idle_secs.unwrap_or(5.0));
    let mut n = args.connections.unwrap_or(4000);
    // Two sockets per connection in this process, plus some slack for the runtime.
    if let Some(limit) = open_file_limit() {
        let max = limit.saturating_sub(64) / 2;
        if n > max {
            println!(
                "keepalive: {n} connections need {} open files but the limit (ulimit -n) is {limit}; \
                 running {max} connections. Raise `ulimit -n` for more, or use --simulate.",
                2 * n + 64
            );
            n = max;
        }
    }
    if n == 0 {
        println!("keepalive: the open-file limit leaves no room for a connection");
        return false;
    }
    let stats = Arc::new(Stats::new(n, args.silent_percent));
    let expected_silent = stats.silent.iter().filter(|&&s| s).count();
    println!(
        "keepalive: {n} TCP connections on 127.0.0.1, idle timeout {idle:?}, {} silent after their first line",
        expected_silent
    );
    let stop = CancellationToken::new();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();

    let server = std::thread::spawn({
        let (stats, stop) = (stats.clone(), stop.clone());
        move || server(stats, stop, idle, addr_tx)
    });
    let addr = match addr_rx.recv() {
        Ok(Ok(addr)) => addr,
        Ok(Err(e)) => {
            println!("keepalive: cannot listen on 127.0.0.1: {e}");
            return false;
        }
        Err(_) => {
            println!("keepalive: the server thread died");
            return false;
        }
    };
    let clients = std::thread::spawn({
        let (stats, stop) = (stats.clone(), stop.clone());
        move || clients(stats, stop, addr, n, idle)
    });

    // Progress, until every client connected and then two idle periods passed (so each
    // silent client had its chance to expire and every talker had to survive twice).
    let hard_stop = idle * 10 + Duration::from_secs(60);
    let mut connected_at = None;
    let mut last_packets = 0;
    let mut peak_rate = 0;
    let mut next = Instant::now();
    loop {
        next += Duration::from_millis(500);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        let elapsed = stats.t0.elapsed();
        let connected = stats.connected.load(Relaxed);
        let errors = stats.connect_errors.load(Relaxed);
        if connected_at.is_none() && connected + errors >= n {
            connected_at = Some(elapsed);
        }
        let packets = stats.packets.load(Relaxed);
        let rate = (packets - last_packets) * 2;
        last_packets = packets;
        peak_rate = peak_rate.max(rate);
        eprint!(
            "\r  [{:5.1} s] connected {connected:>6}/{n}  packets/s {rate:>7}  expired {:>6}/{expected_silent}   ",
            elapsed.as_secs_f64(),
            stats.expired.load(Relaxed),
        );
        let _ = std::io::stderr().flush();
        let done =
            connected_at.is_some_and(|at| elapsed >= at + idle * 2 + Duration::from_millis(500));
        if done || elapsed >= hard_stop {
            break;
        }
    }
    eprintln!();
    let elapsed = stats.t0.elapsed();
    stop.cancel();
    let clients_ok = clients.join().is_ok();
    let server_report = server.join().ok().flatten();

    let connected = stats.connected.load(Relaxed);
    let expired_ids: Vec<usize> = (0..n)
        .filter(|&id| stats.expired_at[id].load(Relaxed) != 0)
        .collect();
    let talkers_expired = expired_ids.iter().filter(|&&id| !stats.silent[id]).count();
    let silent_expired = expired_ids.len() - talkers_expired;
    let packets = stats.packets.load(Relaxed);
    let mut lateness =
        std::mem::take(&mut *stats.lateness.lock().unwrap_or_else(|p| p.into_inner()));
    let (rss, peak) = rss();

    println!("report:");
    let mut ok = clients_ok;
    ok &= check(
        connected == n,
        format!(
            "connected {connected}/{n} in {:.2} s{}",
            connected_at.unwrap_or(elapsed).as_secs_f64(),
            stats
                .first_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .map(|e| format!(" (first error: {e})"))
                .unwrap_or_default()
        ),
    );
    println!(
        "  {:<68}",
        format!(
            "packets received {packets} over {:.1} s (avg {:.0}/s, peak {peak_rate}/s)",
            elapsed.as_secs_f64(),
            packets as f64 / elapsed.as_secs_f64()
        )
    );
    ok &= check(
        expired_ids.len() == expected_silent && silent_expired == expected_silent,
        format!(
            "expired {} of {expected_silent} expected silent connections",
            expired_ids.len()
        ),
    );
    ok &= check(
        talkers_expired == 0,
        format!("connections expired that kept talking: {talkers_expired}"),
    );
    let timeouts = stats.server_timeouts.load(Relaxed);
    ok &= check(
        timeouts == expected_silent,
        format!("server read-idle events (bye pushed, socket closed): {timeouts}"),
    );
    let byes = stats.byes_silent.load(Relaxed);
    ok &= check(
        byes == expected_silent,
        format!("goodbye lines received by silent clients: {byes}/{expected_silent}"),
    );
    let wrong_byes = stats.byes_talkers.load(Relaxed);
    ok &= check(
        wrong_byes == 0,
        format!("goodbye lines received by talkers: {wrong_byes}"),
    );
    println!(
        "  {:<68}",
        format!(
            "lines pushed by the server: {} (writes do not keep a client alive)",
            stats.pushed.load(Relaxed)
        )
    );
    let cut = stats.talkers_cut.load(Relaxed);
    ok &= check(
        cut == 0,
        format!("talkers whose socket was closed under them: {cut}"),
    );
    ok &= report_lateness(&mut lateness, idle);
    match server_report {
        Some(cpu) => println!(
            "  {:<68}",
            format!(
                "server CPU {:.3} s over {:.1} s ({:.1}% of a core); whole process {:.2} s",
                cpu.as_secs_f64(),
                elapsed.as_secs_f64(),
                100.0 * cpu.as_secs_f64() / elapsed.as_secs_f64(),
                process_cpu().as_secs_f64()
            )
        ),
        None => ok &= check(false, "server thread failed".into()),
    }
    println!(
        "  {:<68}",
        format!(
            "RSS {} (peak {}), whole process incl. client sockets",
            mib(rss),
            mib(peak)
        )
    );
    ok
}

/// The server thread: a current-thread runtime with the timer, the tracker, the accept loop,
/// one task per connection and the expiration consumer. Returns its thread's CPU time.
fn server(
    stats: Arc<Stats>,
    stop: CancellationToken,
    idle: Duration,
    addr_tx: std::sync::mpsc::Sender<std::io::Result<std::net::SocketAddr>>,
) -> Option<Duration> {
    let rt = current_thread().ok()?;
    rt.block_on(async {
        let timer = Timer::new();
        let (tracker, mut expirations) = IdleTracker::<u32>::new(&timer, idle);
        // A deep accept backlog, so thousands of simultaneous connects are not dropped and
        // retried a second later.
        let listen = || {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind(([127, 0, 0, 1], 0).into())?;
            socket.listen(8192)
        };
        let listener: std::io::Result<TcpListener> = listen();
        let listener = match listener {
            Ok(listener) => listener,
            Err(e) => {
                let _ = addr_tx.send(Err(e));
                return;
            }
        };
        let _ = addr_tx.send(listener.local_addr());
        let consumer = tokio::spawn({
            let stats = stats.clone();
            async move {
                while let Some(batch) = expirations.next_batch().await {
                    stats.expire(&batch, idle);
                }
            }
        });
        let mut conns = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                accepted = listener.accept() => match accepted {
                    Ok((sock, _)) => {
                        conns.spawn(serve(sock, tracker.clone(), timer.clone(), idle, stats.clone()));
                    }
                    Err(e) => stats.error(format!("accept: {e}")),
                },
            }
        }
        drop(listener);
        // Clients close their sockets on stop; give them a moment, then drop the rest.
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            while conns.join_next().await.is_some() {}
        })
        .await;
        conns.shutdown().await;
        drop(tracker);
        let _ = tokio::time::timeout(idle * 2, consumer).await;
    });
    Some(thread_cpu())
}

/// One server connection: reads the client's `hello <id>` line, then its keepalive lines
/// through an `IdleStream` that touches the tracker on every line received (read idle, event
/// mode), while pushing a line to the client three times per idle period. On the idle event
/// it pushes `bye` and closes.
async fn serve(
    sock: TcpStream,
    tracker: IdleTracker<u32>,
    timer: Timer,
    idle: Duration,
    stats: Arc<Stats>,
) {
    let mut reader = BufReader::new(sock);
    let mut line = String::new();
    if !matches!(reader.read_line(&mut line).await, Ok(n) if n > 0) {
        return;
    }
    let Some(id) = line
        .trim()
        .strip_prefix("hello ")
        .and_then(|id| id.parse::<u32>().ok())
        .filter(|&id| (id as usize) < stats.silent.len())
    else {
        stats.error(format!("bad hello line {line:?}"));
        return;
    };
    stats.last_rx[id as usize].store(stats.now(), Relaxed);
    stats.connected.fetch_add(1, Relaxed);
    stats.packets.fetch_add(1, Relaxed);
    let stream = tracker.wrap_with(id, reader, IdleKind::Read, IdleMode::Event);
    drop(tracker);
    let (rd, mut wr) = tokio::io::split(stream);
    let mut lines = BufReader::new(rd).lines();
    let mut push = timer.interval(idle / 3);
    loop {
        tokio::select! {
            line = lines.next_line() => match line {
                Ok(None) => return,
                Ok(Some(_)) => {
                    stats.last_rx[id as usize].store(stats.now(), Relaxed);
                    stats.packets.fetch_add(1, Relaxed);
                }
                Err(e) if IdleKind::of(&e) == Some(IdleKind::Read) => {
                    // Event mode: the stream still works, so say goodbye before closing.
                    stats.server_timeouts.fetch_add(1, Relaxed);
                    let _ = wr.write_all(b"bye\n").await;
                    let _ = wr.shutdown().await;
                    return;
                }
                Err(e) => {
                    stats.error(format!("server read: {e}"));
                    return;
                }
            },
            _ = push.tick() => {
                if wr.write_all(b"news\n").await.is_err() {
                    return;
                }
                stats.pushed.fetch_add(1, Relaxed);
            }
        }
    }
}

/// The clients thread: a current-thread runtime with one task per client connection.
fn clients(
    stats: Arc<Stats>,
    stop: CancellationToken,
    addr: std::net::SocketAddr,
    n: usize,
    idle: Duration,
) {
    let Ok(rt) = current_thread() else {
        stats.error("cannot build the clients' runtime".into());
        return;
    };
    rt.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for id in 0..n {
            tasks.spawn(client(id, addr, stats.clone(), stop.clone(), idle));
        }
        while tasks.join_next().await.is_some() {}
    });
}

async fn client(
    id: usize,
    addr: std::net::SocketAddr,
    stats: Arc<Stats>,
    stop: CancellationToken,
    idle: Duration,
) {
    let mut sock = match TcpStream::connect(addr).await {
        Ok(sock) => sock,
        Err(e) => {
            stats.connect_errors.fetch_add(1, Relaxed);
            stats.error(format!("connect: {e}"));
            return;
        }
    };
    let _ = sock.set_nodelay(true);
    if sock
        .write_all(format!("hello {id}\n").as_bytes())
        .await
        .is_err()
    {
        return;
    }
    let (rd, mut sock) = sock.into_split();
    // Reads what the server pushes; counts a goodbye.
    let reader = {
        let stats = stats.clone();
        let silent = stats.silent[id];
        async move {
            let mut lines = BufReader::new(rd).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if line == "bye" {
                    let byes = if silent {
                        &stats.byes_silent
                    } else {
                        &stats.byes_talkers
                    };
                    byes.fetch_add(1, Relaxed);
                }
            }
        }
    };
    if stats.silent[id] {
        // Wait for the server's goodbye and close (or the end of the run).
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = reader => {}
        }
        return;
    }
    tokio::spawn(reader);
    // A keepalive at a random interval below the idle timeout (at most 80% of it, leaving
    // room for scheduling delays on a loaded machine).
    let mut rng = Rng::new(id as u64);
    loop {
        let wait = idle.mul_f64(rng.between(0.2, 0.8));
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        if sock.write_all(b"ping\n").await.is_err() {
            if !stop.is_cancelled() {
                stats.talkers_cut.fetch_add(1, Relaxed);
            }
            return;
        }
    }
}

/// A current-thread runtime, or `None` after saying why there is none.
fn runtime_or_report() -> Option<tokio::runtime::Runtime> {
    current_thread()
        .map_err(|e| println!("keepalive: cannot build a runtime: {e}"))
        .ok()
}

/// The single-threaded runtime every part of the demo runs on (server, clients, modes).
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
        "keepalive --idle-cpu: {n} keys tracked, idle timeout {idle:?}, no traffic; the tracker's \
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
                println!("keepalive: cannot start the tracker thread: {e}");
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
            "keepalive --burst: {n} keys touched at once (idle timeout {idle:?}, tick {:?}), \
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
        "keepalive --simulate: {n} in-process connections (no sockets), idle timeout {idle:?}, \
         {silent_count} silent, {talkers} sending keepalives every {lo:.1}-{hi:.1} s (~{:.0}/s)",
        talkers as f64 / ((lo + hi) / 2.0)
    );
    let (rss0, _) = rss();
    // The tracker's timer and driver run on a thread of their own, so their CPU is measured
    // apart from this thread's (the load generator and the expirations consumer).
    let (thread, tracker, mut expirations) = match TrackerThread::start(idle, None) {
        Ok(started) => started,
        Err(e) => {
            println!("keepalive: cannot start the tracker thread: {e}");
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
    stats.connected.store(n, Relaxed);

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
            "keepalive --memory: {keys} u64 keys tracked in {:.2} s ({:.0} ns each); RSS {} -> {}: {per_key:.1} bytes per key ({:.1} beyond the 8-byte key)",
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
