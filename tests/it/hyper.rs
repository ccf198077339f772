//! The hyper adapter with a real hyper 1.x HTTP/1 server on 127.0.0.1 (feature `hyper`).

use std::convert::Infallible;
use std::pin::{pin, Pin};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::rt::Timer as _;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use wheel_timer::hyper::WheelTimer;
use wheel_timer::Timer;

use crate::support::{ms, poll_noop};

async fn hello(_: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"hello"))))
}

/// Serves one connection with `timer` and `header_read_timeout`; returns the listener's
/// address and a task that resolves, once the connection ends, to the instant it was
/// accepted and whether hyper reported an error.
async fn serve_one(
    timer: WheelTimer,
    header_timeout: Duration,
) -> (
    std::net::SocketAddr,
    tokio::task::JoinHandle<(Instant, bool)>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let accepted = Instant::now();
        let result = http1::Builder::new()
            .timer(timer)
            .header_read_timeout(header_timeout)
            .serve_connection(TokioIo::new(stream), service_fn(hello))
            .await;
        (accepted, result.is_err())
    });
    (addr, server)
}

/// Reads until the peer closes (or resets) the connection.
async fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0; 1024];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test]
async fn a_full_request_is_served() {
    let timer = Timer::new();
    let (addr, server) = serve_one(WheelTimer::new(&timer), Duration::from_secs(30)).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let response = String::from_utf8(read_to_close(&mut client).await).unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
    assert!(response.ends_with("hello"), "{response}");
    let (_, failed) = server.await.unwrap();
    assert!(!failed, "the connection ended cleanly");
    assert_eq!(timer.pending(), 0, "the header timer was released");
}

#[tokio::test]
async fn half_a_request_head_is_cut_off_after_the_timeout_never_before() {
    const TIMEOUT: Duration = Duration::from_millis(300);
    let timer = Timer::new();
    let (addr, server) = serve_one(WheelTimer::new(&timer), TIMEOUT).await;
    let connected = Instant::now();
    let mut client = TcpStream::connect(addr).await.unwrap();
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: te")
        .await
        .unwrap();
    // Hang guard only: the connection must end by itself long before this.
    let rest = tokio::time::timeout(Duration::from_secs(30), read_to_close(&mut client))
        .await
        .expect("the server cut the connection");
    let closed = Instant::now();
    assert!(
        !String::from_utf8_lossy(&rest).contains("200 OK"),
        "no response to half a head"
    );
    let (accepted, failed) = server.await.unwrap();
    assert!(failed, "hyper reports the header timeout as an error");
    // The header timer starts after the accept, which is after the client's connect began.
    assert!(
        closed - connected >= TIMEOUT,
        "cut after {:?}",
        closed - connected
    );
    assert!(
        closed - accepted >= TIMEOUT,
        "cut after {:?}",
        closed - accepted
    );
    assert_eq!(timer.pending(), 0);
}

#[tokio::test]
async fn the_header_timer_is_a_wheel_entry() {
    let timer = Timer::new();
    let (addr, server) = serve_one(WheelTimer::new(&timer), Duration::from_secs(30)).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    client.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
    // Wait (bounded) until hyper has armed its header timer in the wheel.
    let mut armed = false;
    for _ in 0..1000 {
        if timer.pending() == 1 {
            armed = true;
            break;
        }
        tokio::time::sleep(ms(5)).await;
    }
    assert!(armed, "hyper's header timer is in the wheel");
    drop(client);
    server.await.unwrap();
    assert_eq!(timer.pending(), 0);
}

#[tokio::test(start_paused = true)]
async fn sleeps_reset_in_place_and_follow_the_paused_clock() {
    let timer = Timer::new();
    let hyper_timer = WheelTimer::new(&timer);
    let start = Instant::now();
    assert_eq!(hyper_timer.now(), start.into_std());
    let mut sleep = hyper_timer.sleep(ms(100));
    assert!(poll_noop(pin!(&mut sleep)).is_pending());
    let address = format!("{:p}", &*sleep);
    hyper_timer.reset(&mut sleep, (start + ms(20)).into_std());
    assert_eq!(
        format!("{:p}", &*sleep),
        address,
        "moved in place, not replaced"
    );
    sleep.as_mut().await;
    assert_eq!(start.elapsed(), ms(20));
    hyper_timer.sleep_until((start + ms(30)).into_std()).await;
    assert_eq!(start.elapsed(), ms(30));

    // A sleep from another timer is replaced by one of ours.
    let mut foreign: Pin<Box<dyn hyper::rt::Sleep>> = Box::pin(Foreign);
    hyper_timer.reset(&mut foreign, (start + ms(40)).into_std());
    foreign.await;
    assert_eq!(start.elapsed(), ms(40));

    let forever = hyper_timer.sleep(Duration::MAX);
    let mut forever = std::pin::pin!(forever);
    assert!(
        poll_noop(forever.as_mut()).is_pending(),
        "saturates, no overflow"
    );
}

#[tokio::test(start_paused = true)]
async fn default_uses_the_runtimes_default_timer() {
    let hyper_timer = WheelTimer::default();
    let mut sleep = hyper_timer.sleep(ms(10));
    assert!(poll_noop(pin!(&mut sleep)).is_pending());
    assert_eq!(wheel_timer::default_timer().pending(), 1);
    sleep.await;
    assert_eq!(wheel_timer::default_timer().pending(), 0);
}

/// A sleep hyper could have got from another timer: never ready.
struct Foreign;

impl std::future::Future for Foreign {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        std::task::Poll::Pending
    }
}

impl hyper::rt::Sleep for Foreign {}
