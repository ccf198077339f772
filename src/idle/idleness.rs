//! The idle clocks of one [`IdleStream`](crate::IdleStream): which activity counts, when
//! each kind of idleness is due, and how it is reported ([`IdleKind`], [`IdleMode`]).
//!
//! # Ground rules
//! - A stream polls its idleness before each read or write and again after the I/O returned
//!   `Pending` (which arms the wake-up). In fail mode both directions fail; in event mode an
//!   event is delivered as the `TimedOut` error of a *read* (the read in progress or the
//!   next one: a server's read loop is where it waits), and writes always go through.
//!   Flush and shutdown never look at it.
//! - Standalone streams keep the instant of the last read and last write, and one wheel
//!   sleep per direction (so split read and write tasks are both woken), moved only when it
//!   fires, to the earliest deadline of the kinds configured.
//! - Tracked streams have one kind, the one whose activity touches their key; the key's
//!   expiry is that idleness. In event mode the expiry is reported once, and the next
//!   activity tracks the key again.
//! - Waker entries in the tracker are one per direction, replaced when re-polled and
//!   removed when the stream is dropped (`waiters.rs`).

use std::fmt;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Instant;

use super::waiters::Waiter;
use crate::error::Error;
use crate::sleep::Sleep;

pub(super) const READ: usize = 0;
pub(super) const WRITE: usize = 1;

/// A kind of idleness, after Netty's `IdleStateHandler`: no read, no write, or neither.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tokio::io::AsyncReadExt;
/// use wheel_timer::{IdleKind, IdleStream, Timer};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let timer = Timer::new();
/// let (near, _far) = tokio::io::duplex(64);
/// let mut near = IdleStream::new(near, &timer, Duration::from_secs(5));
/// let err = near.read_u8().await.unwrap_err();
/// assert_eq!(IdleKind::of(&err), Some(IdleKind::Read));
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdleKind {
    /// Nothing was read (no bytes received) for the read-idle timeout.
    Read,
    /// Nothing was written (no bytes accepted) for the write-idle timeout.
    Write,
    /// Nothing was read or written for the all-idle timeout.
    All,
}

/// What an [`IdleStream`](crate::IdleStream) does once idle.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tokio::io::{AsyncReadExt, AsyncWriteExt};
/// use wheel_timer::{IdleKind, IdleMode, IdleStream, Timer};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> std::io::Result<()> {
/// let timer = Timer::new();
/// let (near, mut far) = tokio::io::duplex(64);
/// let mut near = IdleStream::builder(&timer)
///     .read_idle(Duration::from_secs(30))
///     .mode(IdleMode::Event)
///     .build(near);
/// let err = near.read_u8().await.unwrap_err(); // 30 s without a byte
/// assert_eq!(IdleKind::of(&err), Some(IdleKind::Read));
/// near.write_all(b"please reconnect\n").await?; // the stream still works
/// let mut line = [0u8; 17];
/// far.read_exact(&mut line).await?;
/// assert_eq!(&line, b"please reconnect\n");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum IdleMode {
    /// Once idle, the pending and every later read and write fail with
    /// [`TimedOut`](io::ErrorKind::TimedOut) (flush and shutdown still work, so the stream
    /// can be shut down). The default.
    #[default]
    Fail,
    /// Each idle event (of any kind) fails the one read in progress (or the next one) with
    /// [`TimedOut`](io::ErrorKind::TimedOut), then I/O goes on as before — writes are never
    /// failed — so the program decides whether to send a last message, close, or keep the
    /// connection. A standalone
    /// stream reports a kind again each time another timeout passes without its activity;
    /// a tracked stream reports its key's expiry once, and its next activity tracks the key
    /// again.
    Event,
}

/// The payload of an idle stream's `TimedOut` error (see [`IdleKind::of`]).
#[derive(Debug)]
struct IdleError(IdleKind);

impl fmt::Display for IdleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            IdleKind::Read => "wheel-timer: read idle: nothing received for the idle timeout",
            IdleKind::Write => "wheel-timer: write idle: nothing sent for the idle timeout",
            IdleKind::All => "wheel-timer: all idle: nothing received or sent for the idle timeout",
        })
    }
}

impl std::error::Error for IdleError {}

impl IdleKind {
    /// The kind of idleness an [`IdleStream`](crate::IdleStream)'s error reports, or `None`
    /// for any other error.
    pub fn of(err: &io::Error) -> Option<IdleKind> {
        let idle = err.get_ref()?.downcast_ref::<IdleError>()?;
        Some(idle.0)
    }

    fn index(self) -> usize {
        self as usize
    }

    /// Whether activity in direction `dir` counts for this kind.
    fn counts(self, dir: usize) -> bool {
        match self {
            IdleKind::Read => dir == READ,
            IdleKind::Write => dir == WRITE,
            IdleKind::All => true,
        }
    }

    const ALL: [IdleKind; 3] = [IdleKind::Read, IdleKind::Write, IdleKind::All];
}

/// Whether a stream may do I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Status {
    Live,
    /// Idle: a failed stream, or an event to deliver.
    Idle(IdleKind),
    /// Its timer (or tracker) stopped: the idle timeout can no longer fire.
    Stopped,
}

impl Status {
    pub(super) fn error(self) -> Option<io::Error> {
        match self {
            Status::Live => None,
            Status::Idle(kind) => Some(io::Error::new(io::ErrorKind::TimedOut, IdleError(kind))),
            Status::Stopped => Some(io::Error::other(Error::shutdown())),
        }
    }
}

/// The key-type-erased side of an `IdleHandle` that a stream needs.
pub(super) trait TrackedKey: Send + Sync {
    fn touch_alive(&self) -> bool;
    fn is_expired(&self) -> bool;
    fn is_stopped(&self) -> bool;
    fn poll_idle(&self, cx: &mut Context<'_>, waiter: &mut Option<Waiter>) -> Poll<()>;
    fn forget(&self, waiter: Waiter);
    /// Tracks the key again under a new handle (after its expiry was reported).
    fn renew(&mut self);
}

/// A stream's idle clocks.
pub(super) enum Idleness {
    Tracked {
        handle: Box<dyn TrackedKey>,
        /// Each direction's entry among the key's waiters, and the waker it stored there (to
        /// skip the lock when it has not changed).
        waiters: [(Option<Waiter>, Option<Waker>); 2],
        kind: IdleKind,
        mode: IdleMode,
        /// Event mode: the key's expiry has been reported.
        reported: bool,
    },
    Standalone(Box<Standalone>),
}

pub(super) struct Standalone {
    /// Timeouts by kind (`IdleKind as usize`).
    timeouts: [Option<Duration>; 3],
    /// By kind: the last activity it counts, or its last event if later.
    since: [Instant; 3],
    /// One sleep per direction, so split read and write tasks are both woken.
    sleeps: [Sleep; 2],
    mode: IdleMode,
    /// Fail mode: the kind the stream failed with.
    failed: Option<IdleKind>,
    /// Event mode: events due and not yet delivered, one bit per kind.
    due: u8,
    stopped: bool,
}

// ===== impl Idleness =====

impl Idleness {
    pub(super) fn tracked(handle: Box<dyn TrackedKey>, kind: IdleKind, mode: IdleMode) -> Self {
        Idleness::Tracked {
            handle,
            waiters: [(None, None), (None, None)],
            kind,
            mode,
            reported: false,
        }
    }

    pub(super) fn standalone(
        timeouts: [Option<Duration>; 3],
        mode: IdleMode,
        sleep: impl Fn(Option<Instant>) -> Sleep,
    ) -> Self {
        let now = Instant::now();
        let first = timeouts
            .iter()
            .filter_map(|timeout| now.checked_add((*timeout)?))
            .min();
        Idleness::Standalone(Box::new(Standalone {
            timeouts,
            since: [now; 3],
            sleeps: [sleep(first), sleep(first)],
            mode,
            failed: None,
            due: 0,
            stopped: false,
        }))
    }

    /// The stream's status; the standalone flavour also registers `cx` for its next
    /// deadline here. An event returned is delivered (it is not returned again).
    pub(super) fn status(&mut self, dir: usize, cx: &mut Context<'_>) -> Status {
        match self {
            Idleness::Tracked {
                handle,
                kind,
                mode,
                reported,
                ..
            } => tracked_status(&**handle, dir, *kind, *mode, reported),
            Idleness::Standalone(standalone) => standalone.status(dir, cx),
        }
    }

    /// Registers `cx` to be woken when idle (after the I/O returned `Pending`); returns the
    /// status, which may have changed meanwhile.
    fn arm(&mut self, dir: usize, cx: &mut Context<'_>) -> Status {
        match self {
            Idleness::Tracked {
                handle,
                waiters,
                kind,
                mode,
                reported,
            } => {
                if *reported || (*mode == IdleMode::Event && dir == WRITE) {
                    // Expired and reported (nothing to wait for until activity renews the
                    // key), or a write in event mode (never failed by an event).
                    return tracked_status(&**handle, dir, *kind, *mode, reported);
                }
                let (waiter, stored) = &mut waiters[dir];
                if !stored.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    // This direction's own entry is replaced: a stream moved between tasks
                    // leaves no stale waiters.
                    let _ = handle.poll_idle(cx, waiter);
                    *stored = Some(cx.waker().clone());
                }
                tracked_status(&**handle, dir, *kind, *mode, reported)
            }
            Idleness::Standalone(standalone) => standalone.status(dir, cx),
        }
    }

    /// After the I/O returned `Pending`: arms the wake-up, and fails if the stream went
    /// idle or stopped meanwhile.
    pub(super) fn pending<T>(&mut self, dir: usize, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match self.arm(dir, cx).error() {
            Some(err) => Poll::Ready(Err(err)),
            None => Poll::Pending,
        }
    }

    /// Bytes went through in direction `dir`.
    pub(super) fn activity(&mut self, dir: usize) {
        match self {
            Idleness::Tracked {
                handle,
                waiters,
                kind,
                reported,
                ..
            } => {
                if kind.counts(dir) && !handle.touch_alive() && *reported {
                    // Event mode, expiry reported: the connection is active again.
                    handle.renew();
                    *waiters = [(None, None), (None, None)];
                    *reported = false;
                }
            }
            Idleness::Standalone(standalone) => {
                let now = Instant::now();
                for kind in IdleKind::ALL {
                    if kind.counts(dir) {
                        standalone.since[kind.index()] = now;
                    }
                }
            }
        }
    }

    /// Removes the stream's waiters from its tracker (it is dropped or unwrapped).
    fn forget(&mut self) {
        if let Idleness::Tracked {
            handle, waiters, ..
        } = self
        {
            for (waiter, stored) in waiters.iter_mut() {
                if let Some(waiter) = waiter.take() {
                    handle.forget(waiter);
                }
                *stored = None;
            }
        }
    }

    /// For `Debug`: the flavour and whether the stream failed or stopped.
    pub(super) fn describe(&self) -> (&'static str, Option<Status>) {
        match self {
            Idleness::Tracked {
                handle, kind, mode, ..
            } => {
                let status = if handle.is_expired() && *mode == IdleMode::Fail {
                    Some(Status::Idle(*kind))
                } else if handle.is_stopped() {
                    Some(Status::Stopped)
                } else {
                    None
                };
                ("tracked", status)
            }
            Idleness::Standalone(standalone) => {
                let status = match (standalone.failed, standalone.stopped) {
                    (Some(kind), _) => Some(Status::Idle(kind)),
                    (None, true) => Some(Status::Stopped),
                    (None, false) => None,
                };
                ("standalone", status)
            }
        }
    }
}

fn tracked_status(
    handle: &dyn TrackedKey,
    dir: usize,
    kind: IdleKind,
    mode: IdleMode,
    reported: &mut bool,
) -> Status {
    if handle.is_expired() {
        match mode {
            IdleMode::Fail => return Status::Idle(kind),
            IdleMode::Event if !*reported && dir == READ => {
                *reported = true;
                return Status::Idle(kind);
            }
            IdleMode::Event => {}
        }
    }
    if handle.is_stopped() {
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

// ===== impl Standalone =====

impl Standalone {
    fn deadline(&self, kind: IdleKind) -> Option<Instant> {
        let timeout = self.timeouts[kind.index()]?;
        self.since[kind.index()].checked_add(timeout)
    }

    /// The earliest deadline of the kinds configured (`None`: never idle).
    fn next_deadline(&self) -> Option<Instant> {
        IdleKind::ALL
            .into_iter()
            .filter_map(|k| self.deadline(k))
            .min()
    }

    fn status(&mut self, dir: usize, cx: &mut Context<'_>) -> Status {
        if let Some(kind) = self.failed {
            return Status::Idle(kind);
        }
        if self.stopped {
            return Status::Stopped;
        }
        if self.mode == IdleMode::Event && dir == WRITE {
            // Events go to reads; a write never waits on the idle clocks.
            return Status::Live;
        }
        loop {
            if let Some(kind) = self.take_due() {
                return Status::Idle(kind);
            }
            let sleep = &mut self.sleeps[dir];
            match sleep.poll_unless_closed(cx) {
                Poll::Pending => return Status::Live,
                Poll::Ready(Err(_)) => {
                    self.stopped = true;
                    return Status::Stopped;
                }
                Poll::Ready(Ok(())) => {}
            }
            let now = Instant::now();
            for kind in IdleKind::ALL {
                if self.deadline(kind).is_some_and(|at| at <= now) {
                    match self.mode {
                        IdleMode::Fail => {
                            self.failed = Some(kind);
                            return Status::Idle(kind);
                        }
                        IdleMode::Event => {
                            self.due |= 1 << kind.index();
                            // The next event of this kind after another whole timeout.
                            self.since[kind.index()] = now;
                        }
                    }
                }
            }
            // Touched since this sleep was set, or an event was queued: move it to the next
            // deadline, once per timeout at most. With none (a timeout too large to
            // represent), it stays fired and polls ready, and nothing is ever due.
            let Some(next) = self.next_deadline() else {
                return Status::Live;
            };
            Pin::new(&mut self.sleeps[dir]).reset(next);
        }
    }

    fn take_due(&mut self) -> Option<IdleKind> {
        let kind = IdleKind::ALL
            .into_iter()
            .find(|k| self.due & (1 << k.index()) != 0)?;
        self.due &= !(1 << kind.index());
        Some(kind)
    }
}
