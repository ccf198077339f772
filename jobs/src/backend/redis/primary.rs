//! [`Primary`]: the connection to the one server that takes writes, moved to the new
//! primary after a failover.
//!
//! # Ground rules
//!
//! - A queue on one server or behind Sentinel talks to its primary through one
//!   `ConnectionManager` (multiplexed, reconnecting by itself to the same address). Where
//!   the primary is comes from a [`Find`]: a fixed URL, or the sentinels, asked again
//!   whenever the current primary may have moved.
//! - A request that meets `READONLY` (a primary demoted to replica: the address is alive
//!   but takes no writes) or, behind Sentinel, a connection failure or timeout (the primary
//!   died or is cut off) starts one lookup in the background ([`Primary::check`]); the
//!   request itself fails at once with `is_unavailable`, so no call waits for a failover.
//!   The lookup swaps in a manager for the address it finds when that address differs, or
//!   after `READONLY` (a fixed URL whose name now points elsewhere). One lookup runs at a
//!   time; a failure that a newer manager already answered starts none.
//! - Every swap bumps the generation, so a failure reported against a manager already
//!   replaced is ignored: an old request's failure never replaces a fresh manager.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::sentinel::SentinelClient;
use ::redis::{Client, RedisError, RedisResult, Value};

/// Where the primary is.
pub(super) enum Find {
    /// Always this server (its name may resolve elsewhere after a failover).
    Fixed(Client),
    /// Whichever server the sentinels name, checked to be a primary.
    Sentinel(tokio::sync::Mutex<SentinelClient>),
}

impl Find {
    /// A client for the primary as of now.
    pub(super) async fn client(&self) -> RedisResult<Client> {
        match self {
            Find::Fixed(client) => Ok(client.clone()),
            Find::Sentinel(sentinel) => sentinel.lock().await.async_get_client().await,
        }
    }
}

/// The primary's connection, replaced when a failover moved it (see the ground rules).
pub(super) struct Primary {
    find: Find,
    config: ConnectionManagerConfig,
    current: Mutex<Current>,
    looking: AtomicBool,
}

struct Current {
    manager: ConnectionManager,
    /// The address it connects to, to tell a moved primary from the same one.
    addr: String,
    generation: u64,
}

impl Primary {
    /// Finds the primary and connects to it (failing at once if it cannot: a wrong
    /// password or an unreachable server is reported by `open`, not by the first call).
    pub(super) async fn open(find: Find, config: ConnectionManagerConfig) -> RedisResult<Primary> {
        let client = find.client().await?;
        let addr = client.get_connection_info().addr().to_string();
        let manager = ConnectionManager::new_with_config(client, config.clone()).await?;
        Ok(Primary {
            find,
            config,
            current: Mutex::new(Current {
                manager,
                addr,
                generation: 0,
            }),
            looking: AtomicBool::new(false),
        })
    }

    /// The manager to send a request on, and its generation for [`check`](Self::check).
    pub(super) fn manager(&self) -> (ConnectionManager, u64) {
        let current = self.current.lock().expect("primary connection");
        (current.manager.clone(), current.generation)
    }

    /// A client for the primary as of now, for a connection of its own (the wake
    /// subscription): behind Sentinel, asks the sentinels.
    pub(super) async fn client(&self) -> RedisResult<Client> {
        self.find.client().await
    }

    /// Looks at the outcome of requests sent on generation `generation`; if it shows the
    /// primary may have moved, looks for it in the background.
    pub(super) fn check<'v>(
        self: &Arc<Self>,
        generation: u64,
        outcome: Result<impl IntoIterator<Item = &'v Value>, &RedisError>,
    ) {
        let (demoted, gone) = match outcome {
            Ok(values) => {
                let readonly =
                    |v: &Value| matches!(v, Value::ServerError(e) if e.code() == "READONLY");
                (values.into_iter().any(readonly), false)
            }
            Err(err) => (
                err.code() == Some("READONLY"),
                err.is_io_error()
                    || err.is_connection_dropped()
                    || err.is_connection_refusal()
                    || err.is_timeout(),
            ),
        };
        let gone = gone && matches!(self.find, Find::Sentinel(_));
        if !(demoted || gone) || self.looking.swap(true, SeqCst) {
            return;
        }
        let primary = Arc::clone(self);
        tokio::spawn(async move {
            if let Err(err) = primary.look(generation, demoted).await {
                tracing::debug!(error = %err, "wheel-jobs: looking for the redis primary failed");
            }
            primary.looking.store(false, SeqCst);
        });
    }

    async fn look(&self, generation: u64, demoted: bool) -> RedisResult<()> {
        if self.current.lock().expect("primary connection").generation != generation {
            return Ok(());
        }
        let client = self.find.client().await?;
        let addr = client.get_connection_info().addr().to_string();
        let mut current = self.current.lock().expect("primary connection");
        if current.generation != generation || (current.addr == addr && !demoted) {
            return Ok(());
        }
        tracing::info!(primary = %addr, "wheel-jobs: the redis primary moved; reconnecting");
        // Connects on its first request: the lookup already checked the address is a primary.
        current.manager = ConnectionManager::new_lazy_with_config(client, self.config.clone())?;
        current.addr = addr;
        current.generation += 1;
        Ok(())
    }
}
