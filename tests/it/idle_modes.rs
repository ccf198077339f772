//! `IdleStream`'s kinds (read, write, all idle) and modes (fail, event) on the paused clock;
//! `idle_tcp.rs` runs the modes over real loopback sockets.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{sleep, Instant};
use wheel_timer::{IdleKind, IdleMode, IdleStream, IdleTracker, Timer};

use crate::support::ms;

/// The kind an I/O error reports, failing the test for any other error.
#[track_caller]
fn kind(result: io::Result<impl std::fmt::Debug>) -> IdleKind {
    let err = result.expect_err("an idle event");
    assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
    IdleKind::of(&err).expect("an idle error")
}

/// Each kind is watched on its own clock and reported as itself; in event mode the stream
/// stays usable and reports a kind again after another whole timeout.
#[tokio::test(start_paused = true)]
async fn the_three_kinds_are_reported_distinctly_as_events() {
    let timer = Timer::new();
    let t0 = Instant::now();
    let (near, mut far) = tokio::io::duplex(1024);
    let mut near = IdleStream::builder(&timer)
        .read_idle(ms(100))
        .write_idle(ms(150))
        .all_idle(ms(250))
        .mode(IdleMode::Event)
        .build(near);
    // Writes keep write idle and all idle away; nothing is read.
    for _ in 0..3 {
        sleep(ms(60)).await;
        near.write_all(b"w").await.expect("a write goes through");
    }
    // Read idle at 100 ms, delivered to the next read (at 180 ms).
    assert_eq!(kind(near.read_u8().await), IdleKind::Read);
    assert!(t0.elapsed() >= ms(180));
    // The stream is still usable: a read gets data.
    far.write_all(b"r").await.expect("write");
    assert_eq!(near.read_u8().await.expect("still usable"), b'r');
    // Now silence from 180 ms (last read and last write): read idle at 280 ms, write idle
    // at 330 ms, read idle again at 380 ms (another whole timeout), all idle at 430 ms.
    let mut seen = Vec::new();
    while seen.len() < 4 {
        let err = near.read_u8().await;
        seen.push((kind(err), (Instant::now() - t0).as_millis()));
    }
    assert_eq!(
        seen,
        [
            (IdleKind::Read, 280),
            (IdleKind::Write, 330),
            (IdleKind::Read, 380),
            (IdleKind::All, 430),
        ]
    );
}

/// In fail mode the first idle kind fails every later read and write with that kind.
#[tokio::test(start_paused = true)]
async fn fail_mode_fails_for_good_with_the_first_kind() {
    let timer = Timer::new();
    let (near, mut far) = tokio::io::duplex(1024);
    let mut near = IdleStream::builder(&timer)
        .read_idle(ms(300))
        .write_idle(ms(100))
        .build(near);
    assert_eq!(kind(near.read_u8().await), IdleKind::Write);
    far.write_all(b"late").await.expect("write");
    assert_eq!(kind(near.read_u8().await), IdleKind::Write);
    assert_eq!(kind(near.write_all(b"x").await), IdleKind::Write);
    near.shutdown().await.expect("shutdown still works");
}

/// A tracked stream in event mode reports its key's expiry once, keeps working, and its
/// next read tracks the key again (which then expires again).
#[tokio::test(start_paused = true)]
async fn a_tracked_event_stream_reports_once_and_is_tracked_again_on_activity() {
    let timer = Timer::new();
    let (tracker, mut expirations) = IdleTracker::new(&timer, ms(100));
    let (near, mut far) = tokio::io::duplex(1024);
    let mut near = tracker.wrap_with(3u32, near, IdleKind::Read, IdleMode::Event);
    assert_eq!(kind(near.read_u8().await), IdleKind::Read);
    assert_eq!(expirations.next_batch().await, Some(vec![3]));
    assert!(!tracker.contains(&3));
    // Reported once: the next read waits for data, and writes work.
    near.write_all(b"please reconnect\n").await.expect("write");
    let mut line = [0u8; 17];
    far.read_exact(&mut line).await.expect("read");
    assert_eq!(&line, b"please reconnect\n");
    let reader = tokio::spawn(async move {
        let byte = near.read_u8().await;
        (near, byte)
    });
    sleep(ms(500)).await;
    far.write_all(b"k").await.expect("write");
    let (mut near, byte) = reader.await.expect("no panic");
    assert_eq!(byte.expect("data, not an event"), b'k');
    // The read tracked the key again.
    assert!(tracker.contains(&3));
    assert_eq!(kind(near.read_u8().await), IdleKind::Read);
    assert_eq!(expirations.next_batch().await, Some(vec![3]));
}

/// A tracked stream whose writes touch (`IdleKind::Write`) expires while it reads.
#[tokio::test(start_paused = true)]
async fn a_tracked_stream_can_count_writes_only() {
    let timer = Timer::new();
    let (tracker, mut expirations) = IdleTracker::new(&timer, ms(100));
    let (near, mut far) = tokio::io::duplex(1024);
    let mut near = tracker.wrap_with(4u32, near, IdleKind::Write, IdleMode::Fail);
    for _ in 0..2 {
        sleep(ms(40)).await;
        far.write_all(b"x").await.expect("write");
        assert_eq!(near.read_u8().await.expect("read"), b'x');
    }
    assert_eq!(expirations.next_batch().await, Some(vec![4]));
    assert_eq!(kind(near.read_u8().await), IdleKind::Write);
}

/// A stream with no timeout is never idle; a reached end of stream is not activity.
#[tokio::test(start_paused = true)]
async fn no_timeout_never_idles_and_eof_is_not_activity() {
    let timer = Timer::new();
    let mut never = IdleStream::builder(&timer).build(tokio::io::empty());
    sleep(Duration::from_secs(3600)).await;
    assert_eq!(
        never.read_u8().await.expect_err("eof").kind(),
        io::ErrorKind::UnexpectedEof
    );
    let mut eof = IdleStream::new(tokio::io::empty(), &timer, ms(100));
    let mut buf = [0u8; 8];
    for _ in 0..3 {
        sleep(ms(30)).await;
        assert_eq!(eof.read(&mut buf).await.expect("eof"), 0);
    }
    sleep(ms(30)).await;
    assert_eq!(kind(eof.read(&mut buf).await), IdleKind::Read);
}
