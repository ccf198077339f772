//! # hyper_server: an HTTP/1 server whose timeouts all live in the wheel
//!
//! A hyper 1.x server on 127.0.0.1 with two wheel-backed timeouts:
//! - **header timeout**: hyper's `header_read_timeout`, timed by
//!   [`wheel_timer::hyper::WheelTimer`] (a client that dribbles its request head is cut off);
//! - **idle timeout**: every connection is wrapped by [`IdleTracker::wrap`], so each read or
//!   write touches its key; a connection silent for the idle timeout fails its I/O, hyper
//!   closes it, and its key comes out of the tracker's [`Expirations`](wheel_timer::Expirations).
//!
//! The same process generates a bounded load on loopback: *active* clients send a few
//! keep-alive requests and close; *idle* clients send one request and then fall silent;
//! *dribbling* clients send one header line at a time, more often than the idle timeout (so
//! they are never idle) but never finish the head. It prints how many connections each
//! timeout closed and exits non-zero unless the idle timeout closed exactly the idle clients
//! and the header timeout exactly the dribbling ones.
//!
//! ```text
//! cargo run --release --example hyper_server --features hyper
//! cargo run --release --example hyper_server --features hyper -- --idle 300 --dribbling 50
//! cargo run --example hyper_server --features hyper -- --help
//! ```

use std::collections::HashSet;
use std::convert::Infallible;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;
use wheel_timer::hyper::WheelTimer;
use wheel_timer::{IdleTracker, Timer};

/// HTTP/1 server with wheel-backed header and idle timeouts, under a self-made loopback load.
#[derive(Parser, Debug)]
#[command(name = "hyper_server")]
struct Args {
    /// Clients that send `--requests` keep-alive requests and close.
    #[arg(long, default_value_t = 200)]
    active: usize,
    /// Requests per active client.
    #[arg(long, default_value_t = 5)]
    requests: usize,
    /// Clients that send one request and then fall silent.
    #[arg(long, default_value_t = 100)]
    idle: usize,
    /// Clients that send one header line every `--dribble-ms` and never finish the head.
    #[arg(long, default_value_t = 20)]
    dribbling: usize,
    /// Idle timeout, in milliseconds.
    #[arg(long, default_value_t = 500)]
    idle_ms: u64,
    /// Header read timeout, in milliseconds (longer than the idle timeout, so that only the
    /// dribbling clients, which are never idle, meet it).
    #[arg(long, default_value_t = 1500)]
    header_ms: u64,
    /// Interval between a dribbling client's header lines, in milliseconds.
    #[arg(long, default_value_t = 100)]
    dribble_ms: u64,
}

/// What the server saw, counted by its connection tasks.
#[derive(Default)]
struct Counts {
    requests: AtomicUsize,
    header_cut: AtomicUsize,
    other_errors: AtomicUsize,
    open: AtomicUsize,
}

async fn hello(_: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"hello"))))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    if args.dribble_ms >= args.idle_ms || args.idle_ms >= args.header_ms {
        eprintln!("need --dribble-ms < --idle-ms < --header-ms");
        return ExitCode::FAILURE;
    }
    let idle_timeout = Duration::from_millis(args.idle_ms);
    let header_timeout = Duration::from_millis(args.header_ms);
    let timer = Timer::new();
    // Keyed by the client's port, so the expired keys say which clients were cut.
    let (tracker, mut expirations) = IdleTracker::<u16>::new(&timer, idle_timeout);
    let counts = Arc::new(Counts::default());

    // Keys the tracker reports: the connections the idle timeout closed (hyper ends an idle
    // keep-alive connection whose read fails without an error, so this is where they show).
    let expired = Arc::new(Mutex::new(HashSet::new()));
    let expired_in = expired.clone();
    let reporter = tokio::spawn(async move {
        while let Some(batch) = expirations.next_batch().await {
            expired_in.lock().unwrap().extend(batch);
        }
    });

    // A backlog for the whole burst of connects: a full one drops SYNs, which the clients
    // retry a second later, and that second would show up as a timeout's doing.
    let socket = TcpSocket::new_v4().expect("socket");
    socket.bind(([127, 0, 0, 1], 0).into()).expect("bind");
    let listener = socket.listen(4096).expect("listen");
    let addr = listener.local_addr().expect("local address");
    let server = {
        let (timer, tracker, counts) = (timer.clone(), tracker.clone(), counts.clone());
        tokio::spawn(async move {
            let mut builder = http1::Builder::new();
            builder
                .timer(WheelTimer::new(&timer))
                .header_read_timeout(header_timeout)
                .keep_alive(true);
            loop {
                let Ok((stream, peer)) = listener.accept().await else {
                    continue;
                };
                let io = TokioIo::new(tracker.wrap(peer.port(), stream));
                let (builder, counts) = (builder.clone(), counts.clone());
                counts.open.fetch_add(1, Relaxed);
                tokio::spawn(async move {
                    let counted = counts.clone();
                    let service = service_fn(move |req| {
                        counted.requests.fetch_add(1, Relaxed);
                        hello(req)
                    });
                    if let Err(err) = builder.serve_connection(io, service).await {
                        classify(&err, &counts);
                    }
                    counts.open.fetch_sub(1, Relaxed);
                });
            }
        })
    };

    let started = Instant::now();
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..args.active {
        clients.spawn(active_client(addr, args.requests));
    }
    let idle_ports = Arc::new(Mutex::new(HashSet::new()));
    for _ in 0..args.idle {
        clients.spawn(idle_client(addr, idle_ports.clone()));
    }
    let dribble = Duration::from_millis(args.dribble_ms);
    for _ in 0..args.dribbling {
        clients.spawn(dribbling_client(addr, dribble));
    }
    // Every client ends by itself: the active ones after their requests, the others when the
    // server cuts them. The bound only turns a bug into a failure instead of a hang.
    let bound = header_timeout * 4 + Duration::from_secs(10);
    let mut client_errors = 0;
    let all_done = tokio::time::timeout(bound, async {
        while let Some(result) = clients.join_next().await {
            if !matches!(result, Ok(Ok(()))) {
                client_errors += 1;
            }
        }
    })
    .await;
    let wall = started.elapsed();
    // Connections close right after their clients see it; the last expiry batch is reported
    // by the tracker's driver within a tick or two.
    let settle = Instant::now();
    while (counts.open.load(Relaxed) > 0 || expired.lock().unwrap().len() < args.idle)
        && settle.elapsed() < Duration::from_secs(5)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.abort();
    reporter.abort();

    let requests = counts.requests.load(Relaxed);
    let header_cut = counts.header_cut.load(Relaxed);
    let expired = std::mem::take(&mut *expired.lock().unwrap());
    let idle_ports = std::mem::take(&mut *idle_ports.lock().unwrap());
    println!(
        "clients: {} active x {} requests, {} idle, {} dribbling",
        args.active, args.requests, args.idle, args.dribbling
    );
    println!(
        "idle timeout {:?}, header timeout {:?}: ran {wall:.2?}",
        idle_timeout, header_timeout
    );
    println!("requests served:                      {requests}");
    println!("closed by the idle tracker (expired): {}", expired.len());
    println!("closed by the header timeout:         {header_cut}");
    println!(
        "other connection errors:              {}",
        counts.other_errors.load(Relaxed)
    );

    let mut failures = Vec::new();
    if all_done.is_err() {
        failures.push(format!("clients still running after {bound:?}"));
    }
    if client_errors > 0 {
        failures.push(format!("{client_errors} clients failed"));
    }
    if requests != args.active * args.requests + args.idle {
        failures.push(format!(
            "served {requests} requests, expected {}",
            args.active * args.requests + args.idle
        ));
    }
    if expired != idle_ports {
        failures.push(format!(
            "idle tracker closed {} connections, {} of them idle clients; expected the {} idle clients",
            expired.len(),
            expired.intersection(&idle_ports).count(),
            idle_ports.len()
        ));
    }
    if header_cut != args.dribbling {
        failures.push(format!(
            "header timeout closed {header_cut}, expected {}",
            args.dribbling
        ));
    }
    if failures.is_empty() {
        println!("ok");
        ExitCode::SUCCESS
    } else {
        for failure in failures {
            eprintln!("FAILED: {failure}");
        }
        ExitCode::FAILURE
    }
}

/// Sorts a connection's error: hyper's header timeout or anything else. (A connection the
/// idle tracker cuts while it waits for the next request ends without an error: hyper treats
/// a failed read between requests as the end of the connection. The tracker reports it.)
fn classify(err: &hyper::Error, counts: &Counts) {
    let counter = if err.is_timeout() {
        &counts.header_cut
    } else {
        &counts.other_errors
    };
    counter.fetch_add(1, Relaxed);
}

type ClientResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// `requests` keep-alive requests on one connection, then a clean close.
async fn active_client(addr: std::net::SocketAddr, requests: usize) -> ClientResult {
    let stream = TcpStream::connect(addr).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let conn = tokio::spawn(conn);
    for _ in 0..requests {
        let response = sender
            .send_request(Request::get("/").body(Empty::<Bytes>::new())?)
            .await?;
        let body = response.into_body().collect().await?.to_bytes();
        assert_eq!(&body[..], b"hello");
    }
    drop(sender);
    conn.await??;
    Ok(())
}

/// One request, then silence until the server closes the connection.
async fn idle_client(addr: std::net::SocketAddr, ports: Arc<Mutex<HashSet<u16>>>) -> ClientResult {
    let stream = TcpStream::connect(addr).await?;
    ports.lock().unwrap().insert(stream.local_addr()?.port());
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let conn = tokio::spawn(conn);
    let response = sender
        .send_request(Request::get("/").body(Empty::<Bytes>::new())?)
        .await?;
    response.into_body().collect().await?;
    // Kept open (the sender is alive) until the server cuts the connection; how the cut
    // reads on this side (clean end or reset) does not matter.
    let _cut = conn.await?;
    drop(sender);
    Ok(())
}

/// A request head sent one header line at a time, never finished: never idle, always late.
async fn dribbling_client(addr: std::net::SocketAddr, every: Duration) -> ClientResult {
    let mut stream = TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: dribble\r\n")
        .await?;
    let mut buf = [0u8; 256];
    loop {
        tokio::select! {
            read = stream.read(&mut buf) => {
                // The server closed (or answered with an error status and closed): done.
                if matches!(read, Ok(0) | Err(_)) {
                    return Ok(());
                }
            }
            () = tokio::time::sleep(every) => {
                if stream.write_all(b"X-Dribble: 1\r\n").await.is_err() {
                    return Ok(());
                }
            }
        }
    }
}
