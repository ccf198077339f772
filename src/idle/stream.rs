//! [`IdleStream`]: an I/O object that fails with `TimedOut` once it has been idle too long.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::io::{AsyncBufRead, AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::IdleHandle;
use crate::{Sleep, Timer};

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
        /// The waker last registered with the tracker per direction, to skip the lock when
        /// it has not changed.
        wakers: [Option<Waker>; 2],
    },
    Standalone {
        timeout: Duration,
        last: Instant,
        /// One sleep per direction, so split read and write tasks are both woken.
        sleeps: [Sleep; 2],
        timed_out: bool,
    },
}

/// The key-type-erased side of an `IdleHandle` that a stream needs.
trait TrackedKey: Send + Sync {
    fn touch_alive(&self) -> bool;
    fn is_expired(&self) -> bool;
    fn poll_idle(&self, cx: &mut Context<'_>, replaced: Option<&Waker>) -> Poll<()>;
}

impl<K: Send + Sync + 'static> TrackedKey for IdleHandle<K> {
    fn touch_alive(&self) -> bool {
        IdleHandle::touch_alive(self)
    }

    fn is_expired(&self) -> bool {
        IdleHandle::is_expired(self)
    }

    fn poll_idle(&self, cx: &mut Context<'_>, replaced: Option<&Waker>) -> Poll<()> {
        IdleHandle::poll_idle(self, cx, replaced)
    }
}

fn timed_out() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "wheel-timer: idle timeout elapsed without a read or write",
    )
}

// ===== impl Idleness =====

impl Idleness {
    /// Whether the stream has timed out; the standalone flavour also registers `cx` for the
    /// timeout here.
    fn expired(&mut self, dir: usize, cx: &mut Context<'_>) -> bool {
        match self {
            Idleness::Tracked { handle, .. } => handle.is_expired(),
            Idleness::Standalone {
                timeout,
                last,
                sleeps,
                timed_out,
            } => {
                if *timed_out {
                    return true;
                }
                let Some(deadline) = last.checked_add(*timeout) else {
                    return false;
                };
                let sleep = &mut sleeps[dir];
                loop {
                    if Pin::new(&mut *sleep).poll(cx).is_pending() {
                        return false;
                    }
                    if sleep.deadline() >= deadline {
                        *timed_out = true;
                        return true;
                    }
                    // Touched since this sleep was set: move it, once per timeout at most.
                    Pin::new(&mut *sleep).reset(deadline);
                }
            }
        }
    }

    /// Registers `cx` to be woken on timeout (after the I/O returned `Pending`); `true` if
    /// the stream has timed out meanwhile.
    fn arm(&mut self, dir: usize, cx: &mut Context<'_>) -> bool {
        match self {
            Idleness::Tracked { handle, wakers } => {
                if wakers[dir]
                    .as_ref()
                    .is_some_and(|w| w.will_wake(cx.waker()))
                {
                    return handle.is_expired();
                }
                // The waker this direction registered before goes, unless the other direction
                // still waits with it: a stream moved between tasks leaves no stale waiters.
                let other = wakers[1 - dir].as_ref();
                let replaced = wakers[dir]
                    .as_ref()
                    .filter(|old| !other.is_some_and(|o| o.will_wake(old)));
                let ready = handle.poll_idle(cx, replaced).is_ready();
                wakers[dir] = Some(cx.waker().clone());
                ready && handle.is_expired()
            }
            Idleness::Standalone { .. } => false,
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
    /// # Panics
    ///
    /// Reads and writes panic, as a [`Sleep`] does, once `timer`'s driver has stopped (its
    /// runtime shut down): the timeout could never fire.
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
            },
        }
    }

    pub(crate) fn tracked<K: Send + Sync + 'static>(io: S, handle: IdleHandle<K>) -> Self {
        IdleStream {
            io,
            idle: Idleness::Tracked {
                handle: Box::new(handle),
                wakers: [None, None],
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
        if this.idle.expired(READ, cx) {
            return Poll::Ready(Err(timed_out()));
        }
        match this.io.poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                this.idle.touch();
                Poll::Ready(Ok(()))
            }
            Poll::Pending if this.idle.arm(READ, cx) => Poll::Ready(Err(timed_out())),
            other => other,
        }
    }
}

/// Buffered reads touch too, so `IdleStream<BufReader<TcpStream>>` works with `read_line`.
impl<S: AsyncBufRead> AsyncBufRead for IdleStream<S> {
    fn poll_fill_buf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<&[u8]>> {
        let this = self.project();
        if this.idle.expired(READ, cx) {
            return Poll::Ready(Err(timed_out()));
        }
        match this.io.poll_fill_buf(cx) {
            Poll::Ready(Ok(buf)) => {
                this.idle.touch();
                Poll::Ready(Ok(buf))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending if this.idle.arm(READ, cx) => Poll::Ready(Err(timed_out())),
            Poll::Pending => Poll::Pending,
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
        if this.idle.expired(WRITE, cx) {
            return Poll::Ready(Err(timed_out()));
        }
        match this.io.poll_write(cx, buf) {
            Poll::Ready(Ok(n)) => {
                this.idle.touch();
                Poll::Ready(Ok(n))
            }
            Poll::Pending if this.idle.arm(WRITE, cx) => Poll::Ready(Err(timed_out())),
            other => other,
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        if this.idle.expired(WRITE, cx) {
            return Poll::Ready(Err(timed_out()));
        }
        match this.io.poll_write_vectored(cx, bufs) {
            Poll::Ready(Ok(n)) => {
                this.idle.touch();
                Poll::Ready(Ok(n))
            }
            Poll::Pending if this.idle.arm(WRITE, cx) => Poll::Ready(Err(timed_out())),
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
