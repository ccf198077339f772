//! `IdleTracker` over real loopback TCP: 200 connections, a quarter of them silent after
//! their first line. Real clock (the point is real sockets), generous bounds, every wait
//! bounded, everything stops by itself: talkers talk until the test has seen every silent
//! connection expire and then one more idle period pass without a talker expiring.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{timeout, Instant};
use wheel_timer::{IdleTracker, Timer};

const CONNECTIONS: u32 = 200;
const IDLE: Duration = Duration::from_millis(400);
const PING: Duration = Duration::from_millis(100);
/// Bound on every wait: far above anything a loaded 2-core machine needs.
const PATIENCE: Duration = Duration::from_secs(20);

fn silent(id: u32) -> bool {
    id % 4 == 0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_loopback_connections_expire_and_talkers_stay() -> std::io::Result<()> {
    let timer = Timer::builder()
        .tick(Duration::from_millis(10))
        .build()
        .expect("valid config");
    let (tracker, mut expirations) = IdleTracker::new(&timer, IDLE);
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;

    let server = tokio::spawn({
        let tracker = tracker.clone();
        async move {
            let mut conns = Vec::new();
            for _ in 0..CONNECTIONS {
                let (sock, _) = listener.accept().await?;
                let tracker = tracker.clone();
                conns.push(tokio::spawn(async move {
                    let mut reader = BufReader::new(sock);
                    let mut line = String::new();
                    reader.read_line(&mut line).await?;
                    let id: u32 = line
                        .trim()
                        .strip_prefix("hello ")
                        .and_then(|id| id.parse().ok())
                        .ok_or_else(|| std::io::Error::other("bad hello"))?;
                    let mut stream = tracker.wrap(id, reader);
                    loop {
                        line.clear();
                        match stream.read_line(&mut line).await {
                            Ok(0) => return Ok::<_, std::io::Error>((id, false)),
                            Ok(_) => {}
                            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                                return Ok((id, true))
                            }
                            Err(e) => return Err(e),
                        }
                    }
                }));
            }
            Ok::<_, std::io::Error>(conns)
        }
    });

    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CONNECTIONS)
        .map(|id| {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut sock = TcpStream::connect(addr).await?;
                sock.write_all(format!("hello {id}\n").as_bytes()).await?;
                if silent(id) {
                    // Wait for the server to drop us (EOF or reset).
                    let mut buf = [0u8; 16];
                    let _ = timeout(PATIENCE, sock.read(&mut buf)).await;
                    return Ok::<_, std::io::Error>(());
                }
                let start = Instant::now();
                while !stop.load(Ordering::Relaxed) && start.elapsed() < PATIENCE {
                    tokio::time::sleep(PING).await;
                    sock.write_all(b"ping\n").await?;
                }
                Ok(())
            })
        })
        .collect();

    // Every silent connection expires, and no talker does, even one idle period later.
    let expected: BTreeSet<u32> = (0..CONNECTIONS).filter(|&id| silent(id)).collect();
    let mut expired = BTreeSet::new();
    let give_up = Instant::now() + PATIENCE;
    while expired.len() < expected.len() {
        match tokio::time::timeout_at(give_up, expirations.next_batch()).await {
            Ok(Some(batch)) => expired.extend(batch),
            _ => break,
        }
    }
    let quiet_until = Instant::now() + IDLE + IDLE / 2;
    while let Ok(Some(batch)) = tokio::time::timeout_at(quiet_until, expirations.next_batch()).await
    {
        expired.extend(batch);
    }
    assert_eq!(expired, expected, "exactly the silent connections expire");
    stop.store(true, Ordering::Relaxed);

    for client in clients {
        client.await.expect("client task")?;
    }
    let conns = timeout(PATIENCE, server)
        .await
        .expect("server accepted everyone")
        .expect("server task")?;
    let mut timed_out = BTreeSet::new();
    for conn in conns {
        let (id, idle) = timeout(PATIENCE, conn)
            .await
            .expect("connection ends")
            .expect("connection task")?;
        if idle {
            timed_out.insert(id);
        }
    }
    assert_eq!(timed_out, expected, "exactly the silent sockets time out");
    // Talkers closed and were removed on drop: nothing is left, and the stream ends.
    assert!(tracker.is_empty());
    drop(tracker);
    let rest = timeout(PATIENCE, expirations.next_batch()).await;
    assert_eq!(rest.expect("stream ends"), None);
    Ok(())
}
