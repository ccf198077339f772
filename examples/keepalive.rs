//! # keepalive: declare idle connections offline with `IdleTracker`
//!
//! A server declares a connection offline when no packet came from it for a while (30 s in
//! the case the tracker was written for; 5 s here, so the demo ends in about 12 s). A TCP
//! server on 127.0.0.1 wraps each accepted socket with `IdleTracker::wrap_with` (read idle,
//! event mode: each line read touches the tracker, lock-free) for N clients in the same
//! process. Talkers send a line at random intervals below the timeout; silent clients stop
//! after their first. The server pushes a line to every client three times per timeout
//! (writes are not activity), and on the idle event it sends `bye` and closes.
//!
//! ```text
//! cargo run --release --example keepalive
//! cargo run --release --example keepalive -- --connections 8000 --idle-secs 3 --silent-percent 30
//! ```
//!
//! It exits non-zero unless exactly the silent connections expire, none early, each gets its
//! goodbye and no talker is cut. What the tracker costs (CPU, memory, touch cost beside tokio)
//! is measured by `cargo run --release -p wheel-bench --bin keepalive_bench -- --help`.

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

/// What the server and the clients share: the settings, the stop signal and the counts.
#[derive(Default)]
struct Demo {
    idle: Duration,
    stop: CancellationToken,
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
    /// Goodbye lines received by talkers (`[0]`) and by silent clients (`[1]`).
    byes: [AtomicUsize; 2],
    talkers_cut: AtomicUsize,
    first_error: Mutex<Option<String>>,
}

#[tokio::main]
async fn main() -> std::io::Result<ExitCode> {
    let args = Args::parse();
    // Two sockets per connection in this process, plus slack for the runtime.
    let n = (args.connections as usize).min(open_file_limit().saturating_sub(64) / 2);
    if n < args.connections as usize {
        println!("keepalive: the open-file limit (ulimit -n) leaves room for {n} connections");
    }
    let mut rng = 0xA5A5;
    let demo = Arc::new(Demo {
        idle: Duration::from_secs_f64(args.idle_secs.clamp(0.05, 3600.0)),
        silent: (0..n)
            .map(|_| rand(&mut rng) % 100 < args.silent_percent.into())
            .collect(),
        last_rx: (0..n).map(|_| AtomicU64::new(0)).collect(),
        expired: (0..n).map(|_| AtomicBool::new(false)).collect(),
        lateness: [AtomicI64::new(i64::MAX), AtomicI64::new(i64::MIN)],
        ..Demo::default()
    });
    let (idle, silent) = (demo.idle, demo.silent.iter().filter(|&&s| s).count());
    println!("keepalive: {n} TCP connections, idle timeout {idle:?}, {silent} go silent");
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(([127, 0, 0, 1], 0).into())?;
    // A deep accept backlog, so thousands of simultaneous connects are not dropped.
    let listener = socket.listen(8192)?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(server(listener, demo.clone()));
    let mut clients = tokio::task::JoinSet::new();
    for id in 0..n {
        clients.spawn(client(id, addr, demo.clone()));
    }
    // Until every client connected, then two timeouts more: each silent client had its
    // chance to expire and every talker had to survive twice.
    let (t0, hard_stop) = (Instant::now(), idle * 10 + Duration::from_secs(60));
    let mut end = hard_stop;
    while t0.elapsed() < end {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if end == hard_stop && demo.dialed.load(Relaxed) == n {
            end = (t0.elapsed() + idle * 2 + Duration::from_millis(500)).min(hard_stop);
        }
        let (at, connected) = (t0.elapsed().as_secs_f64(), demo.connected.load(Relaxed));
        let expired = demo.idle_events.load(Relaxed);
        eprint!("\r  [{at:5.1} s] connected {connected:>6}/{n}  expired {expired:>6}/{silent}  ");
    }
    eprintln!();
    demo.stop.cancel();
    let mut tasks_ok = server.await.is_ok();
    while let Some(joined) = clients.join_next().await {
        tasks_ok &= joined.is_ok();
    }

    let expired = (0..n).filter(|&id| demo.expired[id].load(Relaxed));
    let talkers_expired = expired.clone().filter(|&id| !demo.silent[id]).count();
    let silent_expired = expired.count() - talkers_expired;
    let [min, max] = demo
        .lateness
        .each_ref()
        .map(|ns| ns.load(Relaxed) as f64 / 1e6);
    let error = demo.first_error.lock().unwrap().take();
    let error = error.map_or(String::new(), |e| format!(" (first error: {e})"));
    let counts = [&demo.connected, &demo.idle_events, &demo.talkers_cut];
    let [connected, events, cut] = counts.map(|count| count.load(Relaxed));
    let [wrong_byes, byes] = demo.byes.each_ref().map(|count| count.load(Relaxed));
    println!("report:");
    let mut ok = true;
    let mut check = |pass: bool, line: String| {
        println!("  {line:<68} {}", if pass { "ok" } else { "FAILED" });
        ok &= pass;
    };
    check(tasks_ok, "server and client tasks ran to the end".into());
    let all = n > 0 && connected == n;
    check(all, format!("connected {connected}/{n}{error}"));
    let line = format!("expired {silent_expired} of {silent} silent connections");
    check(silent_expired == silent && talkers_expired == 0, line);
    let line = format!("connections expired that kept talking: {talkers_expired}");
    check(talkers_expired == 0, line);
    let line = format!("server read-idle events (bye pushed, socket closed): {events}");
    check(events == silent, line);
    let line = format!("goodbye lines received by silent clients: {byes}/{silent}");
    check(byes == silent, line);
    let line = format!("goodbye lines received by talkers: {wrong_byes}");
    check(wrong_byes == 0, line);
    let line = format!("talkers whose socket was closed under them: {cut}");
    check(cut == 0, line);
    let line = match silent_expired {
        0 => "no expiries, no lateness".into(),
        _ => format!("expired after their timeout by {min:.1} to {max:.1} ms"),
    };
    check(silent == 0 || min >= 0.0, line);
    println!("{}", if ok { "PASS" } else { "FAIL" });
    Ok(ExitCode::from(u8::from(!ok)))
}

/// The server: an `IdleTracker` on a `Timer`, a task per connection, one for expired ids.
async fn server(listener: TcpListener, demo: Arc<Demo>) {
    let timer = Timer::new();
    let (tracker, mut expirations) = IdleTracker::<u32>::new(&timer, demo.idle);
    let consumer = tokio::spawn({
        let demo = demo.clone();
        async move {
            while let Some(batch) = expirations.next_batch().await {
                for id in batch.into_iter().map(|id| id as usize) {
                    demo.expired[id].store(true, Relaxed);
                    let due = demo.last_rx[id].load(Relaxed) + demo.idle.as_nanos() as u64;
                    let late = now() as i64 - due as i64;
                    demo.lateness[0].fetch_min(late, Relaxed);
                    demo.lateness[1].fetch_max(late, Relaxed);
                }
            }
        }
    });
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = demo.stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((sock, _)) => {
                drop(conns.spawn(serve(sock, tracker.clone(), timer.clone(), demo.clone())))
            }
            Err(e) => demo.error(format!("accept: {e}")),
        }
    }
    // Clients close their sockets on stop; give them a moment, then drop the rest.
    let join_all = async { while conns.join_next().await.is_some() {} };
    let _ = tokio::time::timeout(Duration::from_secs(5), join_all).await;
    conns.shutdown().await;
    drop(tracker);
    let _ = tokio::time::timeout(demo.idle * 2, consumer).await;
}

/// One connection: the client's `hello <id>` line, then its lines through the tracked stream,
/// and a line pushed to the client three times per timeout.
async fn serve(sock: TcpStream, tracker: IdleTracker<u32>, timer: Timer, demo: Arc<Demo>) {
    let (mut reader, mut line) = (BufReader::new(sock), String::new());
    let _ = reader.read_line(&mut line).await;
    let hello = line.trim().strip_prefix("hello ").map(str::parse::<u32>);
    let Some(id) = hello
        .and_then(Result::ok)
        .filter(|&id| (id as usize) < demo.silent.len())
    else {
        return demo.error(format!("bad hello line {line:?}"));
    };
    let seen = || demo.last_rx[id as usize].store(now(), Relaxed);
    seen();
    demo.connected.fetch_add(1, Relaxed);
    let stream = tracker.wrap_with(id, reader, IdleKind::Read, IdleMode::Event);
    drop(tracker);
    let (rd, mut wr) = tokio::io::split(stream);
    let (mut lines, mut push) = (BufReader::new(rd).lines(), timer.interval(demo.idle / 3));
    loop {
        tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(_)) => seen(),
                Ok(None) => return,
                // Event mode: the stream still works, so say goodbye before closing.
                Err(e) if IdleKind::of(&e) == Some(IdleKind::Read) => {
                    demo.idle_events.fetch_add(1, Relaxed);
                    let _ = wr.write_all(b"bye\n").await;
                    let _ = wr.shutdown().await;
                    return;
                }
                Err(e) => return demo.error(format!("server read: {e}")),
            },
            _ = push.tick() => if wr.write_all(b"news\n").await.is_err() { return },
        }
    }
}

/// One client: says hello, then reads what the server pushes, counting a goodbye; a talker
/// also sends `ping` at random intervals of 20–80% of the timeout (room for a loaded machine).
async fn client(id: usize, addr: std::net::SocketAddr, demo: Arc<Demo>) {
    let sock = TcpStream::connect(addr).await;
    demo.dialed.fetch_add(1, Relaxed);
    let mut sock = match sock {
        Ok(sock) => sock,
        Err(e) => return demo.error(format!("connect: {e}")),
    };
    let (_, hello) = (sock.set_nodelay(true), format!("hello {id}\n"));
    if sock.write_all(hello.as_bytes()).await.is_err() {
        return;
    }
    let (rd, mut wr) = sock.into_split();
    let silent = demo.silent[id];
    let (mut lines, mut reading, mut rng) = (BufReader::new(rd).lines(), true, id as u64);
    let mut wait = || {
        demo.idle
            .mul_f64(0.2 + 0.6 * (rand(&mut rng) % 1000) as f64 / 1000.0)
    };
    let mut ping = tokio::time::Instant::now() + wait();
    loop {
        tokio::select! {
            _ = demo.stop.cancelled() => return,
            line = lines.next_line(), if reading => match line {
                Ok(Some(line)) => if line == "bye" {
                    demo.byes[usize::from(silent)].fetch_add(1, Relaxed);
                },
                // The server closed: a silent client is done, a talker keeps pinging.
                _ if silent => return,
                _ => reading = false,
            },
            _ = tokio::time::sleep_until(ping), if !silent => {
                if wr.write_all(b"ping\n").await.is_err() {
                    if !demo.stop.is_cancelled() {
                        demo.talkers_cut.fetch_add(1, Relaxed);
                    }
                    return;
                }
                ping = tokio::time::Instant::now() + wait();
            }
        }
    }
}

impl Demo {
    fn error(&self, what: String) {
        self.first_error.lock().unwrap().get_or_insert(what);
    }
}

static START: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Nanoseconds since `START`.
fn now() -> u64 {
    START.elapsed().as_nanos() as u64
}

/// A 64-bit LCG (Knuth's MMIX constants): enough to pick silent clients and intervals.
fn rand(state: &mut u64) -> u64 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *state >> 33
}

/// The soft limit on open files (`ulimit -n`), from /proc/self/limits.
fn open_file_limit() -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let soft = limits.lines().find(|l| l.starts_with("Max open files"));
    let soft = soft.and_then(|l| l.split_whitespace().nth(3)?.parse().ok());
    soft.unwrap_or(usize::MAX)
}
