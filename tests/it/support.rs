//! Helpers shared by the test modules.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Polls once with a waker that does nothing.
pub fn poll_noop<F: Future>(mut f: Pin<&mut F>) -> Poll<F::Output> {
    f.as_mut().poll(&mut Context::from_waker(Waker::noop()))
}

/// A waker that counts its wakes.
#[derive(Clone, Default)]
pub struct WakeCounter(Arc<Count>);

#[derive(Default)]
pub struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl WakeCounter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn waker(&self) -> Waker {
        Waker::from(self.0.clone())
    }

    pub fn count(&self) -> usize {
        self.0 .0.load(Ordering::SeqCst)
    }

    pub fn poll<F: Future>(&self, f: Pin<&mut F>) -> Poll<F::Output> {
        let waker = self.waker();
        let mut f = f;
        f.as_mut().poll(&mut Context::from_waker(&waker))
    }
}
