//! The tower adapter inside a `ServiceBuilder` (feature `tower`).

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use wheel_timer::tower::{BoxError, Timeout, TimeoutLayer};
use wheel_timer::{Elapsed, Timer};

use crate::support::{ms, poll_noop};

/// A service that answers after `delay` (on tokio's own timer, so only the wheel times out).
fn slow(delay: Duration) -> impl Service<u32, Response = u32, Error = Infallible> + Clone {
    service_fn(move |n: u32| async move {
        tokio::time::sleep(delay).await;
        Ok::<_, Infallible>(n)
    })
}

#[tokio::test(start_paused = true)]
async fn a_fast_request_gets_its_response() {
    let svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(ms(100)))
        .service(slow(ms(10)));
    assert_eq!(svc.oneshot(7).await.unwrap(), 7);
}

#[tokio::test(start_paused = true)]
async fn a_slow_request_fails_with_elapsed_at_the_limit_not_before() {
    let svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(ms(100)))
        .service(slow(ms(1000)));
    let start = Instant::now();
    let err = svc.oneshot(7).await.unwrap_err();
    assert!(err.is::<Elapsed>(), "{err}");
    assert!(err.downcast_ref::<Elapsed>().is_some());
    let took = start.elapsed();
    assert!(took >= ms(100), "never before the limit: {took:?}");
    assert!(took <= ms(101), "at the limit's tick: {took:?}");
}

#[tokio::test(start_paused = true)]
async fn inner_errors_pass_through() {
    #[derive(Debug)]
    struct Refused;
    impl std::fmt::Display for Refused {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("refused")
        }
    }
    impl std::error::Error for Refused {}

    let svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(ms(100)))
        .service(service_fn(|_: ()| async { Err::<(), _>(Refused) }));
    let err: BoxError = svc.oneshot(()).await.unwrap_err();
    assert!(err.is::<Refused>(), "{err}");
    assert!(!err.is::<Elapsed>());
}

/// Not ready until `open` is set; counts nothing else.
#[derive(Clone)]
struct Gate {
    open: Arc<AtomicBool>,
}

impl Service<()> for Gate {
    type Response = &'static str;
    type Error = Infallible;
    type Future = std::future::Ready<Result<&'static str, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        if self.open.load(Ordering::SeqCst) {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    }

    fn call(&mut self, (): ()) -> Self::Future {
        std::future::ready(Ok("through"))
    }
}

#[tokio::test(start_paused = true)]
async fn poll_ready_is_the_inner_services() {
    let open = Arc::new(AtomicBool::new(false));
    let mut svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(ms(10)))
        .service(Gate { open: open.clone() });
    let mut cx = Context::from_waker(std::task::Waker::noop());
    assert!(svc.poll_ready(&mut cx).is_pending());
    tokio::time::sleep(ms(50)).await;
    assert!(
        svc.poll_ready(&mut cx).is_pending(),
        "readiness is not timed out"
    );
    open.store(true, Ordering::SeqCst);
    assert!(matches!(svc.poll_ready(&mut cx), Poll::Ready(Ok(()))));
    assert_eq!(svc.call(()).await.unwrap(), "through");
}

#[tokio::test(start_paused = true)]
async fn with_timer_times_requests_on_that_timer() {
    let timer = Timer::builder().tick(ms(10)).build().unwrap();
    let mut svc = Timeout::with_timer(&timer, slow(ms(1000)), ms(25));
    let call = svc.ready().await.unwrap().call(1);
    assert_eq!(
        timer.pending(),
        0,
        "the timeout registers on its first poll"
    );
    let start = Instant::now();
    let err = call.await.unwrap_err();
    assert!(err.is::<Elapsed>());
    assert!(start.elapsed() >= ms(25));
    assert_eq!(timer.pending(), 0);
    let layered = ServiceBuilder::new()
        .layer(TimeoutLayer::with_timer(&timer, ms(25)))
        .service(slow(ms(1)));
    assert_eq!(layered.oneshot(2).await.unwrap(), 2);
    assert_eq!(svc.get_ref().clone().oneshot(3).await.unwrap(), 3);
}

/// A request waiting on a timer that is shut down used to panic its task (the wheel
/// `Timeout` under it panics there); it fails with the timer's shutdown error instead.
#[tokio::test(start_paused = true)]
async fn a_request_fails_with_a_shutdown_error_when_its_timer_stops() {
    let timer = Timer::new();
    let svc = Timeout::with_timer(&timer, slow(ms(1000)), ms(500));
    let mut waiting = std::pin::pin!(svc.clone().oneshot(1));
    assert!(poll_noop(waiting.as_mut()).is_pending());
    assert_eq!(timer.pending(), 1, "the request is waiting on the wheel");
    timer.shutdown();
    let err = waiting.await.unwrap_err();
    let err = err.downcast_ref::<wheel_timer::Error>().expect("{err}");
    assert!(err.is_shutdown());
    let err = svc.oneshot(2).await.unwrap_err();
    assert!(err
        .downcast_ref::<wheel_timer::Error>()
        .unwrap()
        .is_shutdown());
}
