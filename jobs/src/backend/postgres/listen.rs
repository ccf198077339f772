//! Wake-ups: how a commit in one process wakes idle consumers in the others, over
//! `LISTEN`.
//!
//! # Ground rules
//!
//! - The schema's triggers send `pg_notify('<schema>:wake', '<run_at> <queue>')` inside the
//!   transaction that makes a job pending (a schedule, retry, reschedule, revive, an
//!   application's `schedule_in`), so it is delivered at commit and never for a rollback;
//!   an unpause sends `0 <queue>`.
//! - One listener per process and server (host, port, database, user) and schema, shared by
//!   every queue opened there: one connection of its own, outside the queues' pools (made
//!   with the first pool's connect options), on a thread of its own with a one-thread
//!   runtime, so it outlives no queue's runtime and depends on none. It tells each queue's
//!   `core/wakeup.rs` about that queue's messages, as a local schedule would, and ends
//!   (within [`ALIVE_CHECK`]) once no queue uses it.
//! - Every (re)connection counts as "maybe anything is due" for every queue: whatever was
//!   sent while it was down is lost, so idle consumers look again. A message lost any other
//!   way only delays a consumer until its safety wakeup (`Builder::safety_wakeup`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::PgPool;

use crate::core::wakeup::Wakeup;

/// How often an idle listener checks that some queue still uses it.
const ALIVE_CHECK: Duration = Duration::from_secs(5);

/// The queues one listener serves.
#[derive(Debug, Default)]
struct Shared {
    queues: Mutex<Vec<(String, Weak<Wakeup>)>>,
}

impl Shared {
    /// Tells the queues a message is for (`None`: every queue, after a reconnection) that a
    /// job may be due at `due`; drops the queues that are gone.
    fn due_at(&self, queue: Option<&str>, due: u64) {
        let mut queues = self.queues.lock().expect("listener queues");
        queues.retain(|(name, wakeup)| {
            let Some(wakeup) = wakeup.upgrade() else {
                return false;
            };
            if queue.is_none_or(|q| q == name) {
                wakeup.due_at(due);
            }
            true
        });
    }
}

/// The listeners of this process, by server and channel.
fn listeners() -> &'static Mutex<HashMap<String, Weak<Shared>>> {
    static LISTENERS: OnceLock<Mutex<HashMap<String, Weak<Shared>>>> = OnceLock::new();
    LISTENERS.get_or_init(Mutex::default)
}

/// A queue's place in its listener; leaves it on drop.
#[derive(Debug)]
pub(super) struct Listening {
    shared: Arc<Shared>,
    wakeup: Weak<Wakeup>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        let mut queues = self.shared.queues.lock().expect("listener queues");
        queues.retain(|(_, w)| !w.ptr_eq(&self.wakeup));
    }
}

/// The run_at a wake message for `queue` carries, and its queue (run_at 0 if garbled).
fn wake_due(payload: &str) -> Option<(&str, u64)> {
    let (due, queue) = payload.split_once(' ')?;
    Some((queue, due.parse::<i64>().map_or(0, super::sql::dec)))
}

/// Joins `queue` to the listener of `pool`'s server on `channel`, starting it if needed.
pub(super) fn spawn(
    pool: &PgPool,
    channel: String,
    queue: String,
    wakeup: &Arc<Wakeup>,
) -> Listening {
    let options = pool.connect_options();
    let key = format!(
        "{}:{}/{} as {} on {channel}",
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or_default(),
        options.get_username(),
    );
    let mut all = listeners().lock().expect("listeners");
    let shared = match all.get(&key).and_then(Weak::upgrade) {
        Some(shared) => shared,
        None => {
            let shared = Arc::new(Shared::default());
            all.retain(|_, s| s.strong_count() > 0);
            all.insert(key, Arc::downgrade(&shared));
            let (options, weak) = ((*options).clone(), Arc::downgrade(&shared));
            let started = std::thread::Builder::new()
                .name("wheel-jobs-listen".into())
                .spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build();
                    match runtime {
                        Ok(runtime) => runtime.block_on(listen(options, channel, weak)),
                        Err(err) => tracing::warn!(error = %err, "wheel-jobs: no runtime for the postgres listener; consumers fall back to their safety wakeup"),
                    }
                });
            if let Err(err) = started {
                tracing::warn!(error = %err, "wheel-jobs: no thread for the postgres listener; consumers fall back to their safety wakeup");
            }
            shared
        }
    };
    drop(all);
    shared
        .queues
        .lock()
        .expect("listener queues")
        .push((queue, Arc::downgrade(wakeup)));
    Listening {
        shared,
        wakeup: Arc::downgrade(wakeup),
    }
}

/// Listens on `channel` until no queue uses `shared`.
async fn listen(options: PgConnectOptions, channel: String, shared: Weak<Shared>) {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .connect_lazy_with(options);
    let mut backoff = Duration::from_millis(50);
    loop {
        let listener = async {
            let mut listener = PgListener::connect_with(&pool).await?;
            listener.listen(&channel).await?;
            Ok::<_, sqlx::Error>(listener)
        };
        match listener.await {
            Ok(mut listener) => {
                backoff = Duration::from_millis(50);
                // Whatever was sent while not listening is lost: look again.
                let Some(s) = shared.upgrade() else { return };
                s.due_at(None, 0);
                drop(s);
                loop {
                    let heard = tokio::time::timeout(ALIVE_CHECK, listener.try_recv()).await;
                    let Some(s) = shared.upgrade() else { return };
                    match heard {
                        // Quiet: only the check that someone still listens.
                        Err(_) => {}
                        Ok(Ok(Some(note))) => {
                            if let Some((queue, due)) = wake_due(note.payload()) {
                                s.due_at(Some(queue), due);
                            }
                        }
                        // The connection was lost and made again (sqlx re-listens).
                        Ok(Ok(None)) => s.due_at(None, 0),
                        Ok(Err(err)) => {
                            tracing::debug!(error = %err, "wheel-jobs: postgres listener failed; reconnecting");
                            break;
                        }
                    }
                }
            }
            Err(err) => {
                tracing::debug!(error = %err, "wheel-jobs: postgres listener could not connect; retrying");
            }
        }
        if shared.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(ALIVE_CHECK);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_messages_name_their_queue() {
        assert_eq!(wake_due("42 orders"), Some(("orders", 42)));
        assert_eq!(wake_due("42 orders x"), Some(("orders x", 42)));
        assert_eq!(wake_due("garbled orders"), Some(("orders", 0)));
        assert_eq!(wake_due("9223372036854775807 q"), Some(("q", u64::MAX)));
        assert_eq!(wake_due("nothing"), None);
    }

    #[test]
    fn a_message_wakes_its_queue_and_a_reconnection_every_queue() {
        let shared = Shared::default();
        let (a, b) = (Arc::new(Wakeup::default()), Arc::new(Wakeup::default()));
        let (slot_a, slot_b) = (a.register(), b.register());
        slot_a.set(100);
        slot_b.set(100);
        shared.queues.lock().unwrap().extend([
            ("a".to_owned(), Arc::downgrade(&a)),
            ("b".to_owned(), Arc::downgrade(&b)),
        ]);
        let (wait_a, wait_b) = (a.notify().notified(), b.notify().notified());
        tokio::pin!(wait_a, wait_b);
        wait_a.as_mut().enable();
        wait_b.as_mut().enable();
        shared.due_at(Some("a"), 50);
        let waker = futures_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(
            wait_a.as_mut().poll(&mut cx).is_ready(),
            "a's message wakes a"
        );
        assert!(wait_b.as_mut().poll(&mut cx).is_pending(), "not b");
        shared.due_at(None, 0);
        assert!(
            wait_b.as_mut().poll(&mut cx).is_ready(),
            "a reconnection wakes b"
        );
        let gone = Arc::new(Wakeup::default());
        shared
            .queues
            .lock()
            .unwrap()
            .push(("gone".to_owned(), Arc::downgrade(&gone)));
        drop(gone);
        shared.due_at(None, 0);
        assert_eq!(
            shared.queues.lock().unwrap().len(),
            2,
            "a gone queue is dropped"
        );
        drop((slot_a, slot_b));
    }

    fn futures_waker() -> std::task::Waker {
        std::task::Waker::noop().clone()
    }

    use std::future::Future;
}
