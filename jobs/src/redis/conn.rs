//! Connections: where a queue lives ([`Target`]) and the connection its calls share.
//!
//! # Ground rules
//!
//! - One multiplexed connection per queue handle (a `ConnectionManager` on a server, which
//!   reconnects by itself; a cluster connection, which follows slot moves), cloned into
//!   every call: calls pipeline on it instead of opening connections.
//! - `redis_timeout` bounds every request ([`Conn`] wraps each in a tokio timeout, on top
//!   of the client's own connection and response timeouts): a server that is down, stops
//!   answering or is being reconnected to fails the request with `is_unavailable` within
//!   `redis_timeout`, whatever the client's reconnect logic is doing.
//! - The wake subscription needs its own connection (`wake.rs`); this module builds what it
//!   subscribes with, so that every kind of target is set up in one place.

use std::future::Future;
use std::time::Duration;

use ::redis::aio::ConnectionManager;
use ::redis::{Client, Value};

use super::reply::redis_error;
use super::wake::{has_spublish, Wake};
use crate::config::Config;
use crate::error::Error;

/// The connection every call of a queue handle shares: one server or a cluster, each
/// request bounded by `redis_timeout`.
#[derive(Clone)]
pub(super) struct Conn {
    link: Link,
    timeout: Option<Duration>,
}

/// One server (scripts go to it), or a cluster (scripts are routed by their keys' slot).
#[derive(Clone)]
enum Link {
    Single(ConnectionManager),
    Cluster(::redis::cluster_async::ClusterConnection),
}

/// The error of a request that outlived `redis_timeout`: a timeout, so `is_unavailable`.
fn timed_out(timeout: Duration) -> ::redis::RedisError {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer from redis within {timeout:?} (redis_timeout)"),
    )
    .into()
}

/// `request` within `timeout`. Dropping a request in flight is safe: the multiplexed
/// connection discards its late reply.
async fn bounded<T>(
    timeout: Option<Duration>,
    request: impl Future<Output = ::redis::RedisResult<T>>,
) -> ::redis::RedisResult<T> {
    match timeout {
        Some(t) => tokio::time::timeout(t, request)
            .await
            .unwrap_or_else(|_| Err(timed_out(t))),
        None => request.await,
    }
}

impl ::redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a ::redis::Cmd,
    ) -> ::redis::RedisFuture<'a, Value> {
        let timeout = self.timeout;
        Box::pin(async move {
            match &mut self.link {
                Link::Single(c) => bounded(timeout, c.req_packed_command(cmd)).await,
                Link::Cluster(c) => bounded(timeout, c.req_packed_command(cmd)).await,
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a ::redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> ::redis::RedisFuture<'a, Vec<Value>> {
        let timeout = self.timeout;
        Box::pin(async move {
            match &mut self.link {
                Link::Single(c) => {
                    bounded(timeout, c.req_packed_commands(pipeline, offset, count)).await
                }
                Link::Cluster(c) => {
                    bounded(timeout, c.req_packed_commands(pipeline, offset, count)).await
                }
            }
        })
    }

    fn get_db(&self) -> i64 {
        match &self.link {
            Link::Single(c) => c.get_db(),
            Link::Cluster(c) => c.get_db(),
        }
    }
}

/// Where the queue lives.
pub(crate) enum Target<'a> {
    Server(&'a str),
    Cluster(&'a [String]),
}

/// Connects to `target`: the connection for calls, and what the wake subscriber uses.
///
/// # Errors
///
/// [`Error::is_invalid_config`] for a bad URL or no cluster node,
/// [`Error::is_unavailable`] if the server cannot be reached.
pub(super) async fn connect(target: Target<'_>, config: &Config) -> Result<(Conn, Wake), Error> {
    let bad_url =
        |e: ::redis::RedisError| Error::invalid_config_owned(format!("bad redis url: {e}"));
    let (link, wake) = match target {
        Target::Server(url) => {
            let client = Client::open(url).map_err(bad_url)?;
            // One connection attempt per reconnect, no backoff of its own: every call is
            // bounded by `redis_timeout` (`Conn`), and while the server is down each call
            // fails at once and starts the next attempt, so calls succeed again as soon as
            // it is back. (With the manager's default six retries, a call made during an
            // outage waited out the whole backoff, seconds past `redis_timeout`.)
            let manager = ::redis::aio::ConnectionManagerConfig::new()
                .set_number_of_retries(0)
                .set_response_timeout(config.redis_timeout)
                .set_connection_timeout(config.redis_timeout);
            let conn = ConnectionManager::new_with_config(client.clone(), manager)
                .await
                .map_err(redis_error)?;
            (Link::Single(conn), Wake::Plain(client))
        }
        Target::Cluster(urls) => {
            if urls.is_empty() {
                return Err(Error::invalid_config("no cluster node given"));
            }
            let builder = || {
                let mut builder = ::redis::cluster::ClusterClient::builder(
                    urls.iter().map(String::as_str).collect::<Vec<_>>(),
                );
                if let Some(timeout) = config.redis_timeout {
                    // A node that stops answering fails the call (`is_unavailable`)
                    // instead of hanging it.
                    builder = builder
                        .response_timeout(timeout)
                        .connection_timeout(timeout);
                }
                builder
            };
            let client = builder().build().map_err(bad_url)?;
            let mut conn = client.get_async_connection().await.map_err(redis_error)?;
            // Subscriptions need RESP3 pushes; the client routes each sharded channel
            // to the node owning its slot and moves it when the slot moves.
            let sharded = has_spublish(&mut conn).await?;
            let (push, pushes) = tokio::sync::mpsc::unbounded_channel();
            let subscriber = builder()
                .use_protocol(::redis::ProtocolVersion::RESP3)
                .push_sender(push)
                .build()
                .map_err(bad_url)?;
            let wake = Wake::Cluster {
                client: Box::new(subscriber),
                pushes,
                sharded,
            };
            (Link::Cluster(conn), wake)
        }
    };
    let conn = Conn {
        link,
        timeout: config.redis_timeout,
    };
    Ok((conn, wake))
}
