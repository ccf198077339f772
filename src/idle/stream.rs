//! [`IdleStream`]: an I/O object that fails with `TimedOut` once it has been idle too long.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::io::{AsyncBufRead, AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::waiters::Waiter;
use super::IdleHandle;
use crate::{Error, Sleep, Timer};

const READ: usize = 0;
const WRITE: usize = 1;

pin_project! {
    /// Wraps an `AsyncRead + AsyncWrite` (a `TcpStream`…) so that every successful read or
    /// write resets an idle clock, and once the stream has been idle for its timeout, pending
    /// and later reads and writes fail with [`io::ErrorKind::TimedOut`]. Flush and shutdown
    /// pass through untouched, so a timed-out stream can still be shut down.
    ///
    /// Two flavours, both without a tokio timer per stream:
    /// - [`IdleTracker::wrap`](crate::IdleTracker::wrap): the stream's key in an
    ///   [`IdleTracker`](crate::IdleTracker) (lock-free touch, batch expiry, reported on the
    ///   tracker's [`Expirations`](crate::Expirations)). For many connections.
    /// - [`IdleStream::new`]: standalone, on a wheel [`Timer`]: each read or write stores the
    ///   time, and the stream's sleep is only moved when it fires, at most once per timeout.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::io::{AsyncReadExt, AsyncWriteExt};
    /// use wheel_timer::{IdleStream, Timer};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> std::io::Result<()> {
    /// let timer = Timer::new();
    /// let (near, mut far) = tokio::io::duplex(64);
    /// let mut near = IdleStream::new(near, &timer, Duration::from_secs(5));
    /// far.write_all(b"hi").await?;
    /// assert_eq!(near.read_u16().await?, u16::from_be_bytes(*b"hi"));
    /// let err = near.read_u8().await.unwrap_err(); // silence for 5 s
    /// assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    /// # Ok(())
    /// # }
    /// ```
    pub struct IdleStream<S> {
        #[pin]
        io: S,
        idle: Idleness,
    }
}

enum Idleness {
    Tracked {
        handle: Box<dyn TrackedKey>,
        /// Each direction's entry among the key's waiters, and the waker it stored there (to
        /// skip the lock when it has not changed).
        waiters: [(Option<Waiter>, Option<Waker>); 2],
    },
    Standalone {
        timeout: Duration,
        last: Instant,
        /// One sleep per direction, so split read and write tasks are both woken.
        sleeps: [Sleep; 2],
        timed_out: bool,
        /// The timer stopped: the timeout can never fire.
        stopped: bool,
    },
}

/// Whether a stream may still do I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Live,
    TimedOut,
    /// Its timer (or tracker) stopped: the idle timeout can no longer fire.
    Stopped,
}

/// The key-type-erased side of an `IdleHandle` that a stream needs.
trait TrackedKey: Send + Sync {
    fn touch_alive(&self) -> bool;
    fn is_expired(&self) -> bool;
    fn is_stopped(&self) -> bool;
    fn poll_idle(&self, cx: &mut Context<'_>, waiter: &mut Option<Waiter>) -> Poll<()>;
    fn forget(&self, waiter: Waiter);
}

impl<K: Send + Sync + 'static, S: Send + Sync + 'static> TrackedKey for IdleHandle<K, S> {
    fn touch_alive(&self) -> bool {
        IdleHandle::touch_alive(self)
    }

    fn is_expired(&self) -> bool {
        IdleHandle::is_expired(self)
    }

    fn is_stopped(&self) -> bool {
        IdleHandle::is_stopped(self)
    }

    fn poll_idle(&self, cx: &mut Context<'_>, waiter: &mut Option<Waiter>) -> Poll<()> {
        IdleHandle::poll_idle(self, cx, waiter)
    }

    fn forget(&self, waiter: Waiter) {
        IdleHandle::forget(self, waiter);
    }
}

fn timed_out() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "wheel-timer: idle timeout elapsed without a read or write",
    )
}

/// The error of a stream whose timer stopped: an [`Error`] for which
/// [`is_shutdown`](Error::is_shutdown) is true, inside an `io::Error` of kind `Other`.
fn stopped() -> io::Error {
    io::Error::other(Error::shutdown())
}

impl Status {
    fn error(self) -> Option<io::Error> {
        match self {
            Status::Live => None,
            Status::TimedOut => Some(timed_out()),
            Status::Stopped => Some(stopped()),
        }
    }
}

// ===== impl Idleness =====

impl Idleness {
    /// The stream's status; the standalone flavour also registers `cx` for the timeout
    /// here.
    fn status(&mut self, dir: usize, cx: &mut Context<'_>) -> Status {
        match self {
            Idleness::Tracked { handle, .. } => tracked_status(&**handle),
            Idleness::Standalone {
                timeout,
                last,
                sleeps,
                timed_out,
                stopped,
            } => {
                if *timed_out {
                    return Status::TimedOut;
                }
                if *stopped {
                    return Status::Stopped;
                }
                let Some(deadline) = last.checked_add(*timeout) else {
                    return Status::Live;
                };
                let sleep = &mut sleeps[dir];
                loop {
                    match sleep.poll_unless_closed(cx) {
                        Poll::Pending => return Status::Live,
                        Poll::Ready(Err(_)) => {
                            *stopped = true;
                            return Status::Stopped;
                        }
                        Poll::Ready(Ok(())) => {}
                    }
                    if sleep.deadline() >= deadline {
                        *timed_out = true;
                        return Status::TimedOut;
                    }
                    // Touched since this sleep was set: move it, once per timeout at most.
                    Pin::new(&mut *sleep).reset(deadline);
                }
            }
        }
    }

    /// Registers `cx` to be woken on timeout (after the I/O returned `Pending`); returns the
    /// status, which may have changed meanwhile.
    fn arm(&mut self, dir: usize, cx: &mut Context<'_>) -> Status {
        match self {
            Idleness::Tracked { handle, waiters } => {
                let (waiter, stored) = &mut waiters[dir];
                if stored.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    return tracked_status(&**handle);
                }
                // This direction's own entry is replaced: a stream moved between tasks
                // leaves no stale waiters.
                let _ = handle.poll_idle(cx, waiter);
                *stored = Some(cx.waker().clone());
                tracked_status(&**handle)
            }
            Idleness::Standalone { .. } => Status::Live,
        }
    }

    /// After the I/O returned `Pending`: arms the timeout, and fails if the stream timed out
    /// or stopped meanwhile.
    fn pending<T>(&mut self, dir: usize, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match self.arm(dir, cx).error() {
            Some(err) => Poll::Ready(Err(err)),
            None => Poll::Pending,
        }
    }

    /// Removes the stream's waiters from its tracker (it is dropped or unwrapped).
    fn forget(&mut self) {
        if let Idleness::Tracked { handle, waiters } = self {
            for (waiter, stored) in waiters.iter_mut() {
                if let Some(waiter) = waiter.take() {
                    handle.forget(waiter);
                }
                *stored = None;
            }
        }
    }

    fn touch(&mut self) {
        match self {
            Idleness::Tracked { handle, .. } => {
                handle.touch_alive();
            }
            Idleness::Standalone { last, .. } => *last = Instant::now(),
        }
    }
}

fn tracked_status(handle: &dyn TrackedKey) -> Status {
    if handle.is_expired() {
        Status::TimedOut
    } else if handle.is_stopped() {
        Status::Stopped
    } else {
        Status::Live
    }
}

impl Drop for Idleness {
    fn drop(&mut self) {
        self.forget();
    }
}

// ===== impl IdleStream =====

impl<S> IdleStream<S> {
    /// A standalone idle stream: times out when `idle_timeout` passes (rounded up to
    /// `timer`'s tick) without a successful read or write. A timeout too large to represent
    /// never fires.
    ///
    /// Costs two wheel sleeps and one clock read per successful read or write; the sleeps are
    /// moved only when they fire, never per I/O. For many connections,
    /// [`IdleTracker::wrap`](crate::IdleTracker::wrap) avoids the clock reads too.
    ///
    /// # Errors
    ///
    /// Once `timer` is shut down (or its runtime ends), reads and writes fail with an
    /// `io::Error` of kind `Other` wrapping an [`Error`] whose
    /// [`is_shutdown`](Error::is_shutdown) is true: the timeout could never fire. A tracked
    /// stream does the same once its tracker's timer stops.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use wheel_timer::{IdleStream, Timer};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// let client = tokio::net::TcpStream::connect(listener.local_addr()?).await?;
    /// let timer = Timer::new();
    /// let client = IdleStream::new(client, &timer, Duration::from_secs(30));
    /// assert!(client.get_ref().peer_addr().is_ok());
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(io: S, timer: &Timer, idle_timeout: Duration) -> IdleStream<S> {
        let last = Instant::now();
        let deadline = last.checked_add(idle_timeout);
        let sleep = || match deadline {
            Some(deadline) => timer.sleep_until(deadline),
            None => timer.sleep(Duration::MAX),
        };
        IdleStream {
            io,
            idle: Idleness::Standalone {
                timeout: idle_timeout,
                last,
                sleeps: [sleep(), sleep()],
                timed_out: false,
                stopped: false,
            },
        }
    }

    pub(crate) fn tracked<K, H>(io: S, handle: IdleHandle<K, H>) -> Self
    where
        K: Send + Sync + 'static,
        H: Send + Sync + 'static,
    {
        IdleStream {
            io,
            idle: Idleness::Tracked {
                handle: Box::new(handle),
                waiters: [(None, None), (None, None)],
            },
        }
    }

    /// The wrapped I/O object.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let timer = wheel_timer::Timer::new();
    /// let stream = wheel_timer::IdleStream::new(tokio::io::empty(), &timer, Duration::from_secs(1));
    /// let _empty: &tokio::io::Empty = stream.get_ref();
    /// # }
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.io
    }

    /// The wrapped I/O object, mutably. Reading or writing through it does not touch.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let timer = wheel_timer::Timer::new();
    /// let mut stream = wheel_timer::IdleStream::new(tokio::io::empty(), &timer, Duration::from_secs(1));
    /// let _empty: &mut tokio::io::Empty = stream.get_mut();
    /// # }
    /// ```
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.io
    }

    /// The wrapped I/O object, pinned.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let timer = wheel_timer::Timer::new();
    /// let mut stream = std::pin::pin!(wheel_timer::IdleStream::new(tokio::io::empty(), &timer, Duration::from_secs(1)));
    /// let _empty: std::pin::Pin<&mut tokio::io::Empty> = stream.as_mut().get_pin_mut();
    /// # }
    /// ```
    pub fn get_pin_mut(self: Pin<&mut Self>) -> Pin<&mut S> {
        self.project().io
    }

    /// Unwraps the I/O object; a tracked key is dropped from its tracker.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let timer = wheel_timer::Timer::new();
    /// let stream = wheel_timer::IdleStream::new(tokio::io::empty(), &timer, Duration::from_secs(1));
    /// let _empty: tokio::io::Empty = stream.into_inner();
    /// # }
    /// ```
    pub fn into_inner(self) -> S {
        self.io
    }
}

impl<S: AsyncRead> AsyncRead for IdleStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        if let Some(err) = this.idle.status(READ, cx).error() {
            return Poll::Ready(Err(err));
        }
        match this.io.poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                this.idle.touch();
                Poll::Ready(Ok(()))
            }
            Poll::Pending => this.idle.pending(READ, cx),
            other => other,
        }
    }
}

/// Buffered reads touch too, so `IdleStream<BufReader<TcpStream>>` works with `read_line`.
impl<S: AsyncBufRead> AsyncBufRead for IdleStream<S> {
    fn poll_fill_buf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<&[u8]>> {
        let this = self.project();
        if let Some(err) = this.idle.status(READ, cx).error() {
            return Poll::Ready(Err(err));
        }
        match this.io.poll_fill_buf(cx) {
            Poll::Ready(Ok(buf)) => {
                this.idle.touch();
                Poll::Ready(Ok(buf))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => this.idle.pending(READ, cx),
        }
    }

    fn consume(self: Pin<&mut Self>, amt: usize) {
        self.project().io.consume(amt);
    }
}

impl<S: AsyncWrite> AsyncWrite for IdleStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        if let Some(err) = this.idle.status(WRITE, cx).error() {
            return Poll::Ready(Err(err));
        }
        match this.io.poll_write(cx, buf) {
            Poll::Ready(Ok(n)) => {
                this.idle.touch();
                Poll::Ready(Ok(n))
            }
            Poll::Pending => this.idle.pending(WRITE, cx),
            other => other,
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        if let Some(err) = this.idle.status(WRITE, cx).error() {
            return Poll::Ready(Err(err));
        }
        match this.io.poll_write_vectored(cx, bufs) {
            Poll::Ready(Ok(n)) => {
                this.idle.touch();
                Poll::Ready(Ok(n))
            }
            Poll::Pending => this.idle.pending(WRITE, cx),
            other => other,
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_shutdown(cx)
    }
}

impl<S: fmt::Debug> fmt::Debug for IdleStream<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (mode, timed_out) = match &self.idle {
            Idleness::Tracked { handle, .. } => ("tracked", handle.is_expired()),
            Idleness::Standalone { timed_out, .. } => ("standalone", *timed_out),
        };
        f.debug_struct("IdleStream")
            .field("io", &self.io)
            .field("mode", &mode)
            .field("timed_out", &timed_out)
            .finish()
    }
}
