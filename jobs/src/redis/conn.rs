//! Connections: where a queue lives ([`Target`]) and the connection its calls share.
//!
//! # Ground rules
//!
//! - One multiplexed connection per queue handle (a `ConnectionManager` on a server, which
//!   reconnects by itself; a cluster connection, which follows slot moves), cloned into
//!   every call: calls pipeline on it instead of opening connections.
//! - `redis_timeout` bounds connecting and every call on a server and on each cluster node:
//!   a server that stops answering fails calls with `is_unavailable` instead of hanging them.
//! - The wake subscription needs its own connection (`wake.rs`); this module builds what it
//!   subscribes with, so that every kind of target is set up in one place.

use ::redis::aio::ConnectionManager;
use ::redis::{Client, Value};

use super::reply::redis_error;
use super::wake::{has_spublish, Wake};
use crate::config::Config;
use crate::error::Error;

/// One server, or a cluster (scripts are routed by their keys' slot).
#[derive(Clone)]
pub(super) enum Conn {
    Single(ConnectionManager),
    Cluster(::redis::cluster_async::ClusterConnection),
}

impl ::redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a ::redis::Cmd,
    ) -> ::redis::RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a ::redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> ::redis::RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
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
    Ok(match target {
        Target::Server(url) => {
            let client = Client::open(url).map_err(bad_url)?;
            let manager = ::redis::aio::ConnectionManagerConfig::new()
                .set_response_timeout(config.redis_timeout)
                .set_connection_timeout(config.redis_timeout);
            let conn = ConnectionManager::new_with_config(client.clone(), manager)
                .await
                .map_err(redis_error)?;
            (Conn::Single(conn), Wake::Plain(client))
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
            (Conn::Cluster(conn), wake)
        }
    })
}
