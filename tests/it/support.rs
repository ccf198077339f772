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

/// Records the fields of every event at or above a level, on the threads where it is the
/// default subscriber (`tracing::subscriber::set_default`).
#[derive(Clone)]
pub struct Events {
    level: tracing::Level,
    seen: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Events {
    pub fn at(level: tracing::Level) -> Self {
        Events {
            level,
            seen: Arc::default(),
        }
    }

    /// Each event as `name=value ` pairs.
    pub fn messages(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl tracing::Subscriber for Events {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= self.level
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={value:?} ", field.name()));
            }
        }
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        self.seen.lock().unwrap().push(fields.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
