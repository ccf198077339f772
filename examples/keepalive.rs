//! # keepalive: declare idle connections offline with `IdleTracker`
//!
//! A server declares a connection offline when no packet came from it for a while (30 s in
//! the case the tracker was written for; 5 s here, so the demo ends in about 12 s). A real
//! TCP server on 127.0.0.1 wraps every accepted socket with `IdleTracker::wrap_with` (read
//! idle, event mode: each line read touches the tracker without a lock) and N clients in the
//! same process talk to it. Talkers send a keepalive line at a random interval below the
//! timeout; silent clients stop after their first line. The server also pushes a line to
//! every client three times per timeout: writes are not activity, so pushing does not keep a
//! silent client alive. On the idle event the server sends `bye` and closes.
//!
//! ```text
//! cargo run --release --example keepalive
//! cargo run --release --example keepalive -- --connections 8000 --idle-secs 3 --silent-percent 30
//! ```
//!
//! It checks itself and exits non-zero if a check fails: exactly the silent connections
//! expire, never before their timeout, each gets its goodbye, and no talker is cut. What the
//! tracker costs (CPU, memory, 100k connections, touch cost beside tokio) is measured by
//! `cargo run --release -p wheel-bench --bin keepalive_bench -- --help` (bench/README.md).

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use wheel_timer::{IdleKind, IdleMode, IdleTracker, Timer};

/// Declare idle connections offline with wheel-timer's IdleTracker.
#[derive(Debug, Parser)]
#[command(name = "keepalive")]
struct Args {
    /// Client connections (capped by the open-file limit: two sockets each)
    #[arg(long, default_value_t = 4000, value_parser = clap::value_parser!(u32).range(1..))]
    connections: u32,
    /// Idle timeout in seconds (0.05 to 3600)
    #[arg(long, default_value_t = 5.0)]
    idle_secs: f64,
    /// Share of clients that go quiet after their first line
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(0..=100))]
    silent_percent: u32,
}

/// What the server and the clients count.
#[derive(Default)]
struct Stats {
    silent: Vec<bool>,
    /// When the server last read a line from each client, ns since `START`.
    last_rx: Vec<AtomicU64>,
    expired: Vec<AtomicBool>,
    /// Expiry minus due time (ns; negative: early), the smallest and the largest.
    lateness: [AtomicI64; 2],
    /// Connect attempts that ended (in a connection or an error).
    dialed: AtomicUsize,
    connected: AtomicUsize,
    idle_events: AtomicUsize,
    byes_silent: AtomicUsize,
    byes_talkers: AtomicUsize,
    talkers_cut: AtomicUsize,
    first_error: Mutex<Option<String>>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let idle = Duration::from_secs_f64(args.idle_secs.clamp(0.05, 3600.0));
    // Two sockets per connection in this process, plus slack for the runtime.
    let n = (args.connections as usize).min(open_file_limit().saturating_sub(64) / 2);
    if n < args.connections as usize {
        println!("keepalive: the open-file limit (ulimit -n) leaves room for {n} connections");
    }
    let mut rng = 0xA5A5;
    let stats = Arc::new(Stats {
        silent: (0..n)
            .map(|_| rand(&mut rng) % 100 < args.silent_percent.into())
            .collect(),
        last_rx: (0..n).map(|_| AtomicU64::new(0)).collect(),
        expired: (0..n).map(|_| AtomicBool::new(false)).collect(),
        lateness: [AtomicI64::new(i64::MAX), AtomicI64::new(i64::MIN)],
        ..Stats::default()
    });
    let silent = stats.silent.iter().filter(|&&s| s).count();
    println!("keepalive: {n} TCP connections, idle timeout {idle:?}, {silent} go silent");
    // A deep accept backlog, so thousands of simultaneous connects are not dropped.
    let listener = tokio::net::TcpSocket::new_v4().and_then(|socket| {
        socket.bind(([127, 0, 0, 1], 0).into())?;
        socket.listen(8192)
    });
    let (listener, addr) = match listener.and_then(|l| Ok((l.local_addr()?, l))) {
        Ok((addr, listener)) => (listener, addr),
        Err(e) => {
            println!("keepalive: cannot listen on 127.0.0.1: {e}\nFAIL");
            return ExitCode::FAILURE;
        }
    };
    let stop = CancellationToken::new();
    let server = tokio::spawn(server(listener, stats.clone(), stop.clone(), idle));
    let mut clients = tokio::task::JoinSet::new();
    for id in 0..n {
        clients.spawn(client(id, addr, stats.clone(), stop.clone(), idle));
    }
    // Until every client connected, then two timeouts more: each silent client had its
    // chance to expire and every talker had to survive twice.
    let (t0, hard_stop) = (Instant::now(), idle * 10 + Duration::from_secs(60));
    let mut end = hard_stop;
    while t0.elapsed() < end {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if end == hard_stop && stats.dialed.load(Relaxed) == n {
            end = (t0.elapsed() + idle * 2 + Duration::from_millis(500)).min(hard_stop);
        }
        let [connected, expired] = [&stats.connected, &stats.idle_events].map(|c| c.load(Relaxed));
        let at = t0.elapsed().as_secs_f64();
        eprint!("\r  [{at:5.1} s] connected {connected:>6}/{n}  expired {expired:>6}/{silent}  ");
    }
    eprintln!();
    stop.cancel();
    let mut tasks_ok = server.await.is_ok();
    while let Some(joined) = clients.join_next().await {
        tasks_ok &= joined.is_ok();
    }

    let expired = (0..n).filter(|&id| stats.expired[id].load(Relaxed));
    let talkers_expired = expired.clone().filter(|&id| !stats.silent[id]).count();
    let silent_expired = expired.count() - talkers_expired;
    let [min, max] = stats
        .lateness
        .each_ref()
        .map(|ns| ns.load(Relaxed) as f64 / 1e6);
    let error = stats.first_error.lock().unwrap().take();
    let error = error.map_or(String::new(), |e| format!(" (first error: {e})"));
    let counts = [&stats.connected, &stats.idle_events, &stats.byes_silent];
    let [connected, events, byes] = counts.map(|count| count.load(Relaxed));
    let [wrong_byes, cut] = [&stats.byes_talkers, &stats.talkers_cut].map(|c| c.load(Relaxed));
    println!("report:");
    let mut ok = true;
    let mut check = |pass: bool, line: String| {
        println!("  {line:<68} {}", if pass { "ok" } else { "FAILED" });
        ok &= pass;
    };
    check(tasks_ok, "server and client tasks ran to the end".into());
    check(
        n > 0 && connected == n,
        format!("connected {connected}/{n}{error}"),
    );
    let line = format!("expired {silent_expired} of {silent} silent connections");
    check(silent_expired == silent && talkers_expired == 0, line);
    check(
        talkers_expired == 0,
        format!("talkers expired: {talkers_expired}"),
    );
    check(
        events == silent,
        format!("server idle events (bye, close): {events}"),
    );
    check(
        byes == silent,
        format!("goodbyes received by silent clients: {byes}"),
    );
    check(
        wrong_byes == 0,
        format!("goodbyes received by talkers: {wrong_byes}"),
    );
    check(
        cut == 0,
        format!("talkers whose socket was closed under them: {cut}"),
    );
    let line = match silent_expired {
        0 => "no expiries, no lateness".into(),
        _ => format!("expired after their timeout by {min:.1} to {max:.1} ms"),
    };
    check(silent == 0 || min >= 0.0, line);
    println!("{}", if ok { "PASS" } else { "FAIL" });
    ExitCode::from(u8::from(!ok))
}

/// The server: an `IdleTracker` on a `Timer`, a task per connection, one for expired ids.
async fn server(listener: TcpListener, stats: Arc<Stats>, stop: CancellationToken, idle: Duration) {
    let timer = Timer::new();
    let (tracker, mut expirations) = IdleTracker::<u32>::new(&timer, idle);
    let consumer = tokio::spawn({
        let stats = stats.clone();
        async move {
            while let Some(batch) = expirations.next_batch().await {
                for id in batch.into_iter().map(|id| id as usize) {
                    stats.expired[id].store(true, Relaxed);
                    let due = stats.last_rx[id].load(Relaxed) + idle.as_nanos() as u64;
                    let late = now() as i64 - due as i64;
                    stats.lateness[0].fetch_min(late, Relaxed);
                    stats.lateness[1].fetch_max(late, Relaxed);
                }
            }
        }
    });
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((sock, _)) => {
                let (tracker, timer, stats) = (tracker.clone(), timer.clone(), stats.clone());
                conns.spawn(serve(sock, tracker, timer, stats, idle));
            }
            Err(e) => stats.error(format!("accept: {e}")),
        }
    }
    // Clients close their sockets on stop; give them a moment, then drop the rest.
    let join_all = async { while conns.join_next().await.is_some() {} };
    let _ = tokio::time::timeout(Duration::from_secs(5), join_all).await;
    conns.shutdown().await;
    drop(tracker);
    let _ = tokio::time::timeout(idle * 2, consumer).await;
}

/// One connection: the client's `hello <id>` line, then its lines through the tracked stream,
/// and a line pushed to the client three times per timeout.
async fn serve(
    sock: TcpStream,
    tracker: IdleTracker<u32>,
    timer: Timer,
    stats: Arc<Stats>,
    idle: Duration,
) {
    let mut reader = BufReader::new(sock);
    let mut line = String::new();
    let _ = reader.read_line(&mut line).await;
    let hello = line
        .trim()
        .strip_prefix("hello ")
        .and_then(|id| id.parse().ok());
    let Some(id) = hello.filter(|&id: &u32| (id as usize) < stats.silent.len()) else {
        return stats.error(format!("bad hello line {line:?}"));
    };
    let seen = || stats.last_rx[id as usize].store(now(), Relaxed);
    seen();
    stats.connected.fetch_add(1, Relaxed);
    let stream = tracker.wrap_with(id, reader, IdleKind::Read, IdleMode::Event);
    drop(tracker);
    let (rd, mut wr) = tokio::io::split(stream);
    let (mut lines, mut push) = (BufReader::new(rd).lines(), timer.interval(idle / 3));
    loop {
        tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(_)) => seen(),
                Ok(None) => return,
                // Event mode: the stream still works, so say goodbye before closing.
                Err(e) if IdleKind::of(&e) == Some(IdleKind::Read) => {
                    stats.idle_events.fetch_add(1, Relaxed);
                    let _ = wr.write_all(b"bye\n").await;
                    let _ = wr.shutdown().await;
                    return;
                }
                Err(e) => return stats.error(format!("server read: {e}")),
            },
            _ = push.tick() => if wr.write_all(b"news\n").await.is_err() { return },
        }
    }
}

/// One client: says hello, then reads what the server pushes, counting a goodbye; a talker
/// also sends `ping` at random intervals of 20–80% of the timeout (room for a loaded machine).
async fn client(
    id: usize,
    addr: std::net::SocketAddr,
    stats: Arc<Stats>,
    stop: CancellationToken,
    idle: Duration,
) {
    let sock = TcpStream::connect(addr).await;
    stats.dialed.fetch_add(1, Relaxed);
    let mut sock = match sock {
        Ok(sock) => sock,
        Err(e) => return stats.error(format!("connect: {e}")),
    };
    let _ = sock.set_nodelay(true);
    if sock
        .write_all(format!("hello {id}\n").as_bytes())
        .await
        .is_err()
    {
        return;
    }
    let (rd, mut wr) = sock.into_split();
    let silent = stats.silent[id];
    let byes = if silent {
        &stats.byes_silent
    } else {
        &stats.byes_talkers
    };
    let (mut lines, mut reading, mut rng) = (BufReader::new(rd).lines(), true, id as u64);
    let mut wait = || idle.mul_f64(0.2 + 0.6 * (rand(&mut rng) % 1000) as f64 / 1000.0);
    let mut ping = tokio::time::Instant::now() + wait();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            line = lines.next_line(), if reading => match line {
                Ok(Some(line)) => if line == "bye" {
                    byes.fetch_add(1, Relaxed);
                },
                // The server closed: a silent client is done, a talker keeps pinging.
                _ if silent => return,
                _ => reading = false,
            },
            _ = tokio::time::sleep_until(ping), if !silent => {
                if wr.write_all(b"ping\n").await.is_err() {
                    if !stop.is_cancelled() {
                        stats.talkers_cut.fetch_add(1, Relaxed);
                    }
                    return;
                }
                ping = tokio::time::Instant::now() + wait();
            }
        }
    }
}

impl Stats {
    fn error(&self, what: String) {
        self.first_error.lock().unwrap().get_or_insert(what);
    }
}

static START: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Nanoseconds since `START`.
fn now() -> u64 {
    START.elapsed().as_nanos() as u64
}

/// splitmix64: a tiny deterministic PRNG, enough to pick silent clients and intervals.
fn rand(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let z = (*state ^ (*state >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The soft limit on open files (`ulimit -n`), from /proc/self/limits.
fn open_file_limit() -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let soft = limits.lines().find(|l| l.starts_with("Max open files"));
    soft.and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
        .unwrap_or(usize::MAX)
}
