//! tower's `timeout` middleware on the wheel (cargo feature `tower`).
//!
//! [`TimeoutLayer`] wraps a service in [`Timeout`]: each request's response future races a
//! wheel [`Timeout`](crate::Timeout), so a service holding a million requests in flight holds
//! a million 40-byte wheel entries instead of tokio timer entries. The API is
//! `tower::timeout`'s: a late request fails with a boxed error that downcasts to
//! [`Elapsed`](crate::Elapsed) (where tower's downcasts to
//! `tower::timeout::error::Elapsed`), the inner service's errors pass through boxed, and
//! `poll_ready` is the inner service's. A request still waiting when its timer is shut
//! down fails with a boxed [`Error`] whose
//! [`is_shutdown`](crate::Error::is_shutdown) is true (a bare wheel `Timeout` panics there
//! instead, having no error to return).
//!
//! ```
//! use std::time::Duration;
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//! use wheel_timer::tower::TimeoutLayer;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let svc = ServiceBuilder::new()
//!     .layer(TimeoutLayer::new(Duration::from_millis(10)))
//!     .service(service_fn(|()| async {
//!         tokio::time::sleep(Duration::from_secs(1)).await;
//!         Ok::<_, std::convert::Infallible>("too late")
//!     }));
//! let err = svc.oneshot(()).await.unwrap_err();
//! assert!(err.is::<wheel_timer::Elapsed>());
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tower_layer::Layer;
use tower_service::Service;

use crate::error::Error;
use crate::sleep::Closed;
use crate::timer::Timer;

/// The error type of [`Timeout`]: tower's `BoxError`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Applies [`Timeout`] to a service: `tower::timeout::TimeoutLayer` on the wheel.
#[derive(Clone)]
pub struct TimeoutLayer {
    timeout: Duration,
    timer: Option<Timer>,
}

impl TimeoutLayer {
    /// Requests that take longer than `timeout` fail with [`Elapsed`](crate::Elapsed), timed on the runtime's
    /// default timer (looked up per request, on the runtime that calls the service).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let layer = wheel_timer::tower::TimeoutLayer::new(Duration::from_secs(30));
    /// ```
    pub fn new(timeout: Duration) -> Self {
        TimeoutLayer {
            timeout,
            timer: None,
        }
    }

    /// Like [`TimeoutLayer::new`], timed on `timer`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let timer = wheel_timer::Timer::new();
    /// let layer = wheel_timer::tower::TimeoutLayer::with_timer(&timer, Duration::from_secs(30));
    /// # }
    /// ```
    pub fn with_timer(timer: &Timer, timeout: Duration) -> Self {
        TimeoutLayer {
            timeout,
            timer: Some(timer.clone()),
        }
    }
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = Timeout<S>;

    fn layer(&self, inner: S) -> Timeout<S> {
        Timeout {
            inner,
            timeout: self.timeout,
            timer: self.timer.clone(),
        }
    }
}

impl fmt::Debug for TimeoutLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimeoutLayer")
            .field("timeout", &self.timeout)
            .field("own_timer", &self.timer.is_some())
            .finish()
    }
}

/// A service whose requests fail with [`Elapsed`](crate::Elapsed) after a timeout:
/// `tower::timeout::Timeout` on the wheel.
#[derive(Clone)]
pub struct Timeout<S> {
    inner: S,
    timeout: Duration,
    timer: Option<Timer>,
}

impl<S> Timeout<S> {
    /// Wraps `inner`, timing requests on the runtime's default timer.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower::{service_fn, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_timer::tower::BoxError> {
    /// let echo = service_fn(|n: u32| async move { Ok::<_, std::io::Error>(n) });
    /// let svc = wheel_timer::tower::Timeout::new(echo, Duration::from_secs(1));
    /// assert_eq!(svc.oneshot(7).await?, 7);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(inner: S, timeout: Duration) -> Self {
        Timeout {
            inner,
            timeout,
            timer: None,
        }
    }

    /// Wraps `inner`, timing requests on `timer`.
    pub fn with_timer(timer: &Timer, inner: S, timeout: Duration) -> Self {
        Timeout {
            inner,
            timeout,
            timer: Some(timer.clone()),
        }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, Request> Service<Request> for Timeout<S>
where
    S: Service<Request>,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    /// # Panics
    ///
    /// On the default timer, outside a tokio runtime context.
    #[track_caller]
    fn call(&mut self, request: Request) -> Self::Future {
        let response = self.inner.call(request);
        let inner = match &self.timer {
            Some(timer) => timer.timeout(self.timeout, response),
            None => crate::timeout_wheel(self.timeout, response),
        };
        ResponseFuture { inner }
    }
}

impl<S: fmt::Debug> fmt::Debug for Timeout<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timeout")
            .field("inner", &self.inner)
            .field("timeout", &self.timeout)
            .field("own_timer", &self.timer.is_some())
            .finish()
    }
}

pin_project_lite::pin_project! {
    /// The response future of [`Timeout`].
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct ResponseFuture<F> {
        #[pin]
        inner: crate::timeout::Timeout<F>,
    }
}

impl<F, T, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().inner.poll_unless_closed(cx) {
            Poll::Ready(Ok(Ok(Ok(response)))) => Poll::Ready(Ok(response)),
            Poll::Ready(Ok(Ok(Err(error)))) => Poll::Ready(Err(error.into())),
            Poll::Ready(Ok(Err(elapsed))) => Poll::Ready(Err(Box::new(elapsed) as BoxError)),
            Poll::Ready(Err(Closed)) => Poll::Ready(Err(Box::new(Error::shutdown()) as BoxError)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
