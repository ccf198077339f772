//! [`IdleStream`]: an I/O object that reports or fails once it has been idle too long, and
//! its builder. The idle clocks themselves live in `idleness.rs`.

use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::io::{AsyncBufRead, AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::handle::IdleHandle;
use super::idleness::{IdleKind, IdleMode};
use super::idleness::{Idleness, Status, TrackedKey, READ, WRITE};
use super::waiters::Waiter;
use crate::timer::Timer;

pin_project! {
    /// Wraps an `AsyncRead + AsyncWrite` (a `TcpStream`…) and watches it for idleness: by
    /// default, once nothing has been **read** for its timeout, the pending and every later
    /// read and write fail with [`io::ErrorKind::TimedOut`] ([`IdleKind::of`] tells the
    /// kind). Flush and shutdown pass through untouched, so an idle stream can still be shut
    /// down.
    ///
    /// What counts as activity, and what happens, are choices:
    /// - **Kinds** (Netty's three): read idle (no bytes received: the default, so a server
    ///   writing to a dead client does not keep it alive), write idle (no bytes sent) and all
    ///   idle (neither). A standalone stream may watch any of the three at once, each with its
    ///   own timeout and reported as its own [`IdleKind`]; a tracked stream watches one.
    /// - **Modes**: [`IdleMode::Fail`] (the default) fails the stream for good;
    ///   [`IdleMode::Event`] reports each idle event once, as the error of the read or write
    ///   in progress, and keeps the stream usable — to push a last line before closing.
    ///
    /// Two flavours, both without a tokio timer per stream:
    /// - [`IdleTracker::wrap`](crate::IdleTracker::wrap) and
    ///   [`wrap_with`](crate::IdleTracker::wrap_with): the stream's key in an
    ///   [`IdleTracker`](crate::IdleTracker) (lock-free touch, batch expiry, reported on the
    ///   tracker's [`Expirations`](crate::Expirations)). For many connections.
    /// - [`IdleStream::new`] and [`IdleStream::builder`]: standalone, on a wheel [`Timer`]:
    ///   each read or write stores the time, and the stream's sleeps are only moved when they
    ///   fire, at most once per timeout.
    ///
    /// # Errors
    ///
    /// Reads and writes fail with `TimedOut` when idle (see above), and with an error of kind
    /// `Other` wrapping an [`Error`](crate::Error) whose
    /// [`is_shutdown`](crate::Error::is_shutdown) is true once the stream's timer has been
    /// shut down (or its runtime ended): its timeout could never fire any more.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::io::{AsyncReadExt, AsyncWriteExt};
    /// use wheel_timer::{IdleKind, IdleStream, Timer};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> std::io::Result<()> {
    /// let timer = Timer::new();
    /// let (near, mut far) = tokio::io::duplex(64);
    /// let mut near = IdleStream::new(near, &timer, Duration::from_secs(5));
    /// far.write_all(b"hi").await?;
    /// assert_eq!(near.read_u16().await?, u16::from_be_bytes(*b"hi"));
    /// let err = near.read_u8().await.unwrap_err(); // nothing received for 5 s
    /// assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    /// assert_eq!(IdleKind::of(&err), Some(IdleKind::Read));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use = "dropping an IdleStream closes its I/O and stops tracking its key"]
    pub struct IdleStream<S> {
        #[pin]
        io: S,
        idle: Idleness,
    }
}

/// Configures a standalone [`IdleStream`]: its read-, write- and all-idle timeouts and its
/// mode. From [`IdleStream::builder`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tokio::io::AsyncReadExt;
/// use wheel_timer::{IdleKind, IdleMode, IdleStream, Timer};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let timer = Timer::new();
/// let (near, _far) = tokio::io::duplex(64);
/// let mut near = IdleStream::builder(&timer)
///     .read_idle(Duration::from_secs(60))
///     .all_idle(Duration::from_secs(10))
///     .mode(IdleMode::Event)
///     .build(near);
/// let err = near.read_u8().await.unwrap_err();
/// assert_eq!(IdleKind::of(&err), Some(IdleKind::All)); // the shorter one first
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct IdleStreamBuilder<'a> {
    timer: &'a Timer,
    timeouts: [Option<Duration>; 3],
    mode: IdleMode,
}

// ===== impl IdleStreamBuilder =====

impl IdleStreamBuilder<'_> {
    /// Idle once nothing was received for `timeout` (rounded up to the timer's tick). A zero
    /// timeout makes the stream idle at once.
    pub fn read_idle(&mut self, timeout: Duration) -> &mut Self {
        self.timeouts[IdleKind::Read as usize] = Some(timeout);
        self
    }

    /// Idle once nothing was sent for `timeout`.
    pub fn write_idle(&mut self, timeout: Duration) -> &mut Self {
        self.timeouts[IdleKind::Write as usize] = Some(timeout);
        self
    }

    /// Idle once nothing was received or sent for `timeout`.
    pub fn all_idle(&mut self, timeout: Duration) -> &mut Self {
        self.timeouts[IdleKind::All as usize] = Some(timeout);
        self
    }

    /// What the stream does once idle (default: [`IdleMode::Fail`]).
    pub fn mode(&mut self, mode: IdleMode) -> &mut Self {
        self.mode = mode;
        self
    }

    /// Wraps `io`. With no timeout set the stream is never idle.
    pub fn build<S>(&self, io: S) -> IdleStream<S> {
        let timer = self.timer;
        IdleStream {
            io,
            idle: Idleness::standalone(self.timeouts, self.mode, |deadline: Option<Instant>| {
                match deadline {
                    Some(deadline) => timer.sleep_until(deadline),
                    None => timer.sleep(Duration::MAX),
                }
            }),
        }
    }
}

impl<K, H> TrackedKey for IdleHandle<K, H>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    H: BuildHasher + Send + Sync + 'static,
{
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

    fn renew(&mut self) {
        IdleHandle::renew(self);
    }
}

// ===== impl IdleStream =====

impl IdleStream<()> {
    /// A builder for a standalone stream with read-, write- and all-idle timeouts and a
    /// mode (see [`IdleStreamBuilder`]); the stream's I/O type comes with `build`.
    pub fn builder(timer: &Timer) -> IdleStreamBuilder<'_> {
        IdleStreamBuilder {
            timer,
            timeouts: [None; 3],
            mode: IdleMode::Fail,
        }
    }
}

impl<S> IdleStream<S> {
    /// A standalone stream, read idle after `idle_timeout` (rounded up to `timer`'s tick)
    /// without a byte received, failing once idle: `IdleStream::builder(timer)
    /// .read_idle(idle_timeout).build(io)`. A timeout too large to represent never fires; a
    /// zero timeout makes the stream idle at once (an [`IdleTracker`]'s counts as one tick).
    ///
    /// [`IdleTracker`]: crate::IdleTracker
    ///
    /// Costs two wheel sleeps and one clock read per successful read or write; the sleeps are
    /// moved only when they fire, never per I/O. For many connections,
    /// [`IdleTracker::wrap`](crate::IdleTracker::wrap) avoids the clock reads too.
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
        IdleStream::builder(timer).read_idle(idle_timeout).build(io)
    }

    /// A stream whose `kind` of activity touches `handle`'s key.
    pub(crate) fn tracked<K, H>(
        io: S,
        handle: IdleHandle<K, H>,
        kind: IdleKind,
        mode: IdleMode,
    ) -> Self
    where
        K: Hash + Eq + Clone + Send + Sync + 'static,
        H: BuildHasher + Send + Sync + 'static,
    {
        IdleStream {
            io,
            idle: Idleness::tracked(Box::new(handle), kind, mode),
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

/// Polls `io` in direction `dir` once the stream is known live, then records activity (bytes
/// moved, as `moved` tells) or arms the idle wake-up.
fn poll_io<T>(
    idle: &mut Idleness,
    dir: usize,
    cx: &mut Context<'_>,
    io: impl FnOnce(&mut Context<'_>) -> Poll<io::Result<T>>,
    moved: impl FnOnce(&T) -> bool,
) -> Poll<io::Result<T>> {
    if let Some(err) = idle.status(dir, cx).error() {
        return Poll::Ready(Err(err));
    }
    match io(cx) {
        Poll::Ready(Ok(value)) => {
            if moved(&value) {
                idle.activity(dir);
            }
            Poll::Ready(Ok(value))
        }
        Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        Poll::Pending => idle.pending(dir, cx),
    }
}

impl<S: AsyncWrite> IdleStream<S> {
    /// A write through `write`, counted as activity when bytes went out.
    fn poll_written(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        write: impl FnOnce(Pin<&mut S>, &mut Context<'_>) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        let io = this.io;
        poll_io(this.idle, WRITE, cx, |cx| write(io, cx), |&n| n > 0)
    }
}

impl<S: AsyncRead> AsyncRead for IdleStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        let before = buf.filled().len();
        let io = this.io;
        let polled = poll_io(
            this.idle,
            READ,
            cx,
            |cx| io.poll_read(cx, &mut *buf),
            |_| false,
        );
        // Only bytes received count, not an end of stream.
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.idle.activity(READ);
        }
        polled
    }
}

/// Buffered reads count too, so `IdleStream<BufReader<TcpStream>>` works with `read_line`.
impl<S: AsyncBufRead> AsyncBufRead for IdleStream<S> {
    fn poll_fill_buf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<&[u8]>> {
        let this = self.project();
        let io = this.io;
        poll_io(
            this.idle,
            READ,
            cx,
            |cx| io.poll_fill_buf(cx),
            |buf| !buf.is_empty(),
        )
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
        self.poll_written(cx, |io, cx| io.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_written(cx, |io, cx| io.poll_write_vectored(cx, bufs))
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
        let (flavour, status) = self.idle.describe();
        f.debug_struct("IdleStream")
            .field("io", &self.io)
            .field("flavour", &flavour)
            .field("idle", &matches!(status, Some(Status::Idle(_))))
            .field("stopped", &matches!(status, Some(Status::Stopped)))
            .finish()
    }
}
