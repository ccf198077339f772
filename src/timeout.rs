//! [`Timeout`], the wheel's drop-in for `tokio::time::Timeout`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::error::Elapsed;
use crate::sleep::Closed;
use crate::sleep::Sleep;

pin_project! {
    /// Future returned by [`timeout_wheel`](crate::timeout_wheel),
    /// [`timeout_wheel_at`](crate::timeout_wheel_at) and
    /// [`Timer::timeout`](crate::Timer::timeout): the inner future's output, or [`Elapsed`]
    /// once the deadline has passed.
    ///
    /// The inner future is polled first, so a future that is ready wins even against a past
    /// deadline. The deadline ignores tokio's cooperative budget, so an inner future that
    /// exhausts it cannot starve the timeout.
    ///
    /// # Cancellation
    ///
    /// Dropping the `Timeout` drops the inner future and cancels the deadline.
    ///
    /// # Panics
    ///
    /// As [`Sleep`]: polling after the timer was shut down or lost its driver panics, except
    /// from a task of the runtime whose shutdown took the driver (it stays pending).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use wheel_timer::timeout_wheel;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
    /// drop(tx);
    /// if let Err(_) = timeout_wheel(Duration::from_millis(10), rx).await {
    ///     println!("did not receive value within 10 ms");
    /// }
    /// # }
    /// ```
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Timeout<F> {
        #[pin]
        future: F,
        delay: Sleep,
    }
}

impl<F> Timeout<F> {
    pub(crate) fn new(future: F, delay: Sleep) -> Self {
        Timeout { future, delay }
    }

    /// The inner future.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let t = wheel_timer::timeout_wheel(std::time::Duration::from_secs(1), std::future::ready(3));
    /// let _inner: &std::future::Ready<i32> = t.get_ref();
    /// # }
    /// ```
    pub fn get_ref(&self) -> &F {
        &self.future
    }

    /// The inner future, mutably.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut t = wheel_timer::timeout_wheel(std::time::Duration::from_secs(1), std::future::ready(3));
    /// let _inner: &mut std::future::Ready<i32> = t.get_mut();
    /// # }
    /// ```
    pub fn get_mut(&mut self) -> &mut F {
        &mut self.future
    }

    /// Drops the deadline and returns the inner future.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let t = wheel_timer::timeout_wheel(std::time::Duration::from_secs(1), async { 5 });
    /// assert_eq!(t.into_inner().await, 5);
    /// # }
    /// ```
    pub fn into_inner(self) -> F {
        self.future
    }
}

impl<F: Future> Timeout<F> {
    /// [`poll`](Future::poll), but a timer shut down under the deadline is `Err(Closed)`
    /// rather than a panic (for adapters that have an error to return, such as tower's).
    pub(crate) fn poll_unless_closed(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Result<F::Output, Elapsed>, Closed>> {
        let this = self.project();
        let had_budget = tokio::task::coop::has_budget_remaining();
        if let Poll::Ready(v) = this.future.poll(cx) {
            return Poll::Ready(Ok(Ok(v)));
        }
        // As tokio's `Timeout`: if the inner future spent the last of the coop budget, the
        // deadline is still checked (unbudgeted), so a busy future cannot outlive it.
        let delay = if had_budget && !tokio::task::coop::has_budget_remaining() {
            this.delay.poll_unless_closed(cx)
        } else {
            this.delay.poll_budgeted(cx)
        };
        delay.map(|closed| closed.map(|()| Err(Elapsed::new())))
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.as_mut().poll_unless_closed(cx) {
            Poll::Ready(Ok(output)) => Poll::Ready(output),
            Poll::Ready(Err(Closed)) => self.project().delay.closed(),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<F: fmt::Debug> fmt::Debug for Timeout<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timeout")
            .field("future", &self.future)
            .field("delay", &self.delay)
            .finish()
    }
}
