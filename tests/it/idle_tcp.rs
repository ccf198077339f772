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
use wheel_timer::{IdleKind, IdleMode, IdleTracker, Timer};

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

/// Event mode over real loopback TCP, with read-idle semantics: the server pushes a line to
/// every client every 50 ms (writes do not count), and a client that sends nothing gets a
/// `bye` line pushed by the server on its idle event, then the server closes it. Talkers
/// never get one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_mode_pushes_a_goodbye_to_silent_clients_only() -> std::io::Result<()> {
    const CLIENTS: u32 = 20;
    const PUSH: Duration = Duration::from_millis(50);
    let timer = Timer::builder()
        .tick(Duration::from_millis(10))
        .build()
        .expect("valid config");
    let (tracker, _expirations) = IdleTracker::new(&timer, IDLE);
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;

    let server = tokio::spawn(async move {
        let mut conns = Vec::new();
        for _ in 0..CLIENTS {
            let (sock, _) = listener.accept().await?;
            let tracker = tracker.clone();
            conns.push(tokio::spawn(async move {
                let mut reader = BufReader::new(sock);
                let mut hello = String::new();
                reader.read_line(&mut hello).await?;
                let id: u32 = hello
                    .trim()
                    .strip_prefix("hello ")
                    .and_then(|id| id.parse().ok())
                    .ok_or_else(|| std::io::Error::other("bad hello"))?;
                let stream = tracker.wrap_with(id, reader, IdleKind::Read, IdleMode::Event);
                let (rd, mut wr) = tokio::io::split(stream);
                let mut lines = BufReader::new(rd).lines();
                let mut push = tokio::time::interval(PUSH);
                loop {
                    tokio::select! {
                        line = lines.next_line() => match line {
                            Ok(Some(_)) => {}
                            Ok(None) => return Ok::<_, std::io::Error>((id, false)),
                            Err(e) if IdleKind::of(&e) == Some(IdleKind::Read) => {
                                // The stream still works: a last line, then close.
                                wr.write_all(b"bye\n").await?;
                                wr.shutdown().await?;
                                return Ok((id, true));
                            }
                            Err(e) => return Err(e),
                        },
                        _ = push.tick() => wr.write_all(b"tick\n").await?,
                    }
                }
            }));
        }
        Ok::<_, std::io::Error>(conns)
    });

    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| {
            let stop = stop.clone();
            tokio::spawn(async move {
                let sock = TcpStream::connect(addr).await?;
                let (rd, mut wr) = sock.into_split();
                wr.write_all(format!("hello {id}\n").as_bytes()).await?;
                // Reads every pushed line; `(ticks, got bye)` once the server closes.
                let reader = tokio::spawn(async move {
                    let mut lines = BufReader::new(rd).lines();
                    let (mut ticks, mut bye) = (0u32, false);
                    while let Ok(Ok(Some(line))) = timeout(PATIENCE, lines.next_line()).await {
                        match line.as_str() {
                            "tick" => ticks += 1,
                            "bye" => bye = true,
                            other => panic!("unexpected line {other:?}"),
                        }
                    }
                    (ticks, bye)
                });
                if !silent(id) {
                    let start = Instant::now();
                    while !stop.load(Ordering::Relaxed) && start.elapsed() < PATIENCE {
                        tokio::time::sleep(PING).await;
                        wr.write_all(b"ping\n").await?;
                    }
                    wr.shutdown().await?;
                }
                let (ticks, bye) = reader.await.expect("reader task");
                Ok::<_, std::io::Error>((id, ticks, bye))
            })
        })
        .collect();

    // Every silent client is said goodbye to (a pushed line, then EOF); talkers are not,
    // even well past the idle timeout, until they stop.
    let mut got_bye = BTreeSet::new();
    tokio::time::sleep(IDLE * 3).await;
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        let (id, ticks, bye) = timeout(PATIENCE, client)
            .await
            .expect("client ends")
            .expect("client task")?;
        assert!(ticks > 0, "client {id} got no pushed line");
        if bye {
            got_bye.insert(id);
        }
    }
    let expected: BTreeSet<u32> = (0..CLIENTS).filter(|&id| silent(id)).collect();
    assert_eq!(
        got_bye, expected,
        "exactly the silent clients get a goodbye"
    );
    let conns = timeout(PATIENCE, server)
        .await
        .expect("server accepted everyone")
        .expect("server task")?;
    let mut idle = BTreeSet::new();
    for conn in conns {
        let (id, was_idle) = timeout(PATIENCE, conn)
            .await
            .expect("connection ends")
            .expect("connection task")?;
        if was_idle {
            idle.insert(id);
        }
    }
    assert_eq!(
        idle, expected,
        "the server saw exactly the silent ones go idle"
    );
    Ok(())
}
