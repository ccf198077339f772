//! Wake messages: how a schedule in one process wakes idle consumers in the others.
//!
//! # Ground rules
//!
//! - The scripts publish a job's score on its partition's `{tag}:wake` channel when it
//!   becomes the first due (`Keys::publish`: `SPUBLISH` on a cluster that has it, else
//!   `PUBLISH`). Each `JobQueue` runs one subscriber task, which bumps the backend's
//!   `epoch` (voiding its `Idle` note) and then tells `wakeup.rs`, as a local schedule would.
//! - On a cluster, one RESP3 cluster connection `SSUBSCRIBE`s each partition's channel on
//!   the node owning its slot; redis-rs resubscribes after reconnects and slot moves.
//! - Every (re)subscription counts as "maybe anything is due": whatever was published while
//!   it was down is lost, so the idle consumers look again. Any other lost message only
//!   delays a consumer until its safety wakeup.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use ::redis::Value;

use super::primary::Primary;
use super::reply::{redis_error, score_ns};
use crate::core::error::Error;
use crate::core::wakeup::Wakeup;

/// Where the wake messages come from.
pub(super) enum Wake {
    /// A single server or Sentinel's primary: one subscription, (re)made by `subscribe`
    /// on the primary as found at each attempt.
    Plain(Arc<Primary>),
    /// A cluster: a RESP3 client whose pushes arrive on `pushes`; it subscribes each
    /// partition's channel on the node owning its slot and resubscribes by itself.
    Cluster {
        client: Box<::redis::cluster::ClusterClient>,
        pushes: tokio::sync::mpsc::UnboundedReceiver<::redis::PushInfo>,
        sharded: bool,
    },
}

/// Whether the cluster knows `SPUBLISH` (Redis ≥ 7). Without it, plain `PUBLISH`, which a
/// cluster broadcasts to every node, so any node's subscription hears every partition.
pub(super) async fn has_spublish(
    conn: &mut ::redis::cluster_async::ClusterConnection,
) -> Result<bool, Error> {
    let info: Value = ::redis::cmd("COMMAND")
        .arg("INFO")
        .arg("SPUBLISH")
        .query_async(conn)
        .await
        .map_err(redis_error)?;
    Ok(matches!(info, Value::Array(items) if items.first().is_some_and(|i| *i != Value::Nil)))
}

/// A wake message's payload (the new first due score) as ns; 0 (wake everyone) if garbled.
fn wake_due(payload: &Value) -> u64 {
    match payload {
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| score_ns(s).ok())
            .unwrap_or(0),
        _ => 0,
    }
}

/// Where a subscriber reports what it heard: the consumers to wake, the epoch to bump.
pub(super) struct Heard {
    pub(super) wakeup: std::sync::Weak<Wakeup>,
    pub(super) epoch: Arc<AtomicU64>,
}

impl Heard {
    /// A job may be due at `due` (0: maybe anything); false once the queue is gone.
    fn due_at(&self, due: u64) -> bool {
        let Some(wakeup) = self.wakeup.upgrade() else {
            return false;
        };
        self.epoch.fetch_add(1, SeqCst);
        wakeup.due_at(due);
        true
    }

    fn gone(&self) -> bool {
        self.wakeup.strong_count() == 0
    }
}

/// Keeps a cluster's wake subscriptions and wakes this process's idle consumers.
pub(super) async fn subscribe_cluster(
    client: Box<::redis::cluster::ClusterClient>,
    mut pushes: tokio::sync::mpsc::UnboundedReceiver<::redis::PushInfo>,
    sharded: bool,
    channels: Vec<String>,
    heard: Heard,
) {
    use ::redis::PushKind;
    let mut backoff = Duration::from_millis(50);
    // Held for as long as the task runs: dropping it would end the subscriptions.
    let _conn = loop {
        let subscribed = async {
            let mut conn = client.get_async_connection().await?;
            for channel in &channels {
                // One call per channel: the partitions' channels hash to different slots.
                if sharded {
                    conn.ssubscribe(channel).await?;
                } else {
                    conn.subscribe(channel).await?;
                }
            }
            Ok::<_, ::redis::RedisError>(conn)
        };
        match subscribed.await {
            Ok(conn) => break conn,
            Err(err) => {
                tracing::debug!(error = %err, "wheel-jobs: wake subscription failed; retrying");
                if heard.gone() {
                    return;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    };
    while let Some(push) = pushes.recv().await {
        let alive = match push.kind {
            PushKind::SMessage | PushKind::Message => {
                heard.due_at(push.data.get(1).map_or(0, wake_due))
            }
            // A (re)subscription, say after a reconnect, a failover or a slot move:
            // whatever was published meanwhile is lost, so sleeping consumers look again.
            PushKind::SSubscribe | PushKind::Subscribe => heard.due_at(0),
            _ => !heard.gone(),
        };
        if !alive {
            return;
        }
    }
}

/// Listens on the queue's wake channel and wakes this process's idle consumers.
pub(super) async fn subscribe(primary: Arc<Primary>, channels: Vec<String>, heard: Heard) {
    use futures_core::Stream;
    let mut backoff = Duration::from_millis(50);
    loop {
        let pubsub = match primary.client().await {
            Ok(client) => client.get_async_pubsub().await,
            Err(err) => Err(err),
        };
        if let Ok(mut pubsub) = pubsub {
            if pubsub.subscribe(&channels).await.is_ok() {
                backoff = Duration::from_millis(50);
                // Whatever was published while unsubscribed is lost: sleeping consumers
                // look again rather than wait for their safety wakeup.
                if !heard.due_at(0) {
                    return;
                }
                let mut messages = pubsub.on_message();
                while let Some(msg) =
                    std::future::poll_fn(|cx| std::pin::Pin::new(&mut messages).poll_next(cx)).await
                {
                    let due = msg
                        .get_payload::<String>()
                        .ok()
                        .and_then(|s| score_ns(&s).ok());
                    if !heard.due_at(due.unwrap_or(0)) {
                        return;
                    }
                }
            }
        }
        if heard.gone() {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}
