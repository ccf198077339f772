//! Wake-ups: how a commit in one process wakes idle consumers in the others, over
//! `LISTEN`.
//!
//! # Ground rules
//!
//! - The schema's triggers send `pg_notify('<schema>:wake', '<run_at> <queue>')` inside the
//!   transaction that makes a job pending (a schedule, retry, reschedule, revive, an
//!   application's `schedule_in`), so it is delivered at commit and never for a rollback;
//!   an unpause sends `0 <queue>`. This task holds one listener connection of its own,
//!   outside the queue's pool (made with the pool's connect options, so it never takes a
//!   connection the application's pool needs), and tells `core/wakeup.rs` about its queue's messages, as a
//!   local schedule would.
//! - Every (re)connection counts as "maybe anything is due": whatever was sent while it was
//!   down is lost, so idle consumers look again. A message lost any other way only delays a
//!   consumer until its safety wakeup (`Builder::safety_wakeup`).

use std::sync::{Arc, Weak};
use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::PgPool;

use crate::core::wakeup::Wakeup;

/// The run_at a wake message for `queue` carries, if it is for `queue` (0 if garbled).
fn wake_due(payload: &str, queue: &str) -> Option<u64> {
    let (due, to) = payload.split_once(' ')?;
    (to == queue).then(|| due.parse::<i64>().map_or(0, super::sql::dec))
}

/// Listens on `channel` for `queue`'s wake messages until the queue is gone.
pub(super) async fn listen(pool: PgPool, channel: String, queue: String, wakeup: Weak<Wakeup>) {
    let due_at = |due: u64| -> bool {
        let Some(wakeup) = wakeup.upgrade() else {
            return false;
        };
        wakeup.due_at(due);
        true
    };
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
                if !due_at(0) {
                    return;
                }
                loop {
                    match listener.try_recv().await {
                        Ok(Some(note)) => {
                            if let Some(due) = wake_due(note.payload(), &queue) {
                                if !due_at(due) {
                                    return;
                                }
                            } else if wakeup.strong_count() == 0 {
                                return;
                            }
                        }
                        // The connection was lost and made again (sqlx re-listens).
                        Ok(None) => {
                            if !due_at(0) {
                                return;
                            }
                        }
                        Err(err) => {
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
        if wakeup.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// A handle that stops the listener task when the backend goes.
#[derive(Debug)]
pub(super) struct Listening(pub(super) tokio::task::JoinHandle<()>);

impl Drop for Listening {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the listener of `queue`, on a connection of its own made with `pool`'s options.
pub(super) fn spawn(
    pool: &PgPool,
    channel: String,
    queue: String,
    wakeup: &Arc<Wakeup>,
) -> Listening {
    let own = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .connect_lazy_with((*pool.connect_options()).clone());
    Listening(tokio::spawn(listen(
        own,
        channel,
        queue,
        Arc::downgrade(wakeup),
    )))
}

#[cfg(test)]
mod tests {
    #[test]
    fn wake_messages_name_their_queue() {
        assert_eq!(super::wake_due("42 orders", "orders"), Some(42));
        assert_eq!(super::wake_due("42 orders x", "orders x"), Some(42));
        assert_eq!(super::wake_due("42 other", "orders"), None);
        assert_eq!(super::wake_due("garbled orders", "orders"), Some(0));
        assert_eq!(
            super::wake_due("9223372036854775807 q", "q"),
            Some(u64::MAX)
        );
        assert_eq!(super::wake_due("nothing", "q"), None);
    }
}
