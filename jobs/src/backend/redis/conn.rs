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
use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::ConnectionLike;
use ::redis::{Client, Value};

use super::primary::{Find, Primary};
use super::reply::redis_error;
use super::wake::{has_spublish, Wake};
use crate::core::config::Config;
use crate::core::error::Error;

/// The connection every call of a queue handle shares: one server or a cluster, each
/// request bounded by `redis_timeout`.
#[derive(Clone)]
pub(super) struct Conn {
    link: Link,
    timeout: Option<Duration>,
    /// `min_replicas`: replicas that must acknowledge a write, and how long to wait.
    min_replicas: Option<(u32, Duration)>,
    /// Whether each request is a write followed by `WAIT` (see [`Conn::writes`]).
    waits: bool,
}

impl Conn {
    /// This connection for calls whose change must survive a failover: with
    /// `min_replicas`, each request is
    /// sent in one pipeline with `WAIT n timeout` (so on the same connection, and `WAIT`
    /// counts this write), and a reply that fewer replicas acknowledged fails with
    /// `NOREPLICAS` (`is_unavailable`: the write is on the primary, maybe not on a replica).
    /// One request covers a whole batch, so group commit amortizes the wait too.
    pub(super) fn writes(&self) -> Conn {
        Conn {
            waits: self.min_replicas.is_some(),
            ..self.clone()
        }
    }

    /// Sends `cmd` then `WAIT`; `cmd`'s reply if enough replicas acknowledged it.
    async fn replicated(
        &mut self,
        cmd: &::redis::Cmd,
        replicas: u32,
        wait: Duration,
    ) -> ::redis::RedisResult<Value> {
        let mut pipeline = ::redis::pipe();
        pipeline.add_command(cmd.clone());
        let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
        pipeline.cmd("WAIT").arg(replicas).arg(wait_ms);
        let mut replies = self.send_pipeline(&pipeline, 0, 2).await?.into_iter();
        let (Some(reply), Some(acked)) = (replies.next(), replies.next()) else {
            return Err(::redis::make_extension_error(
                "NOREPLICAS".to_owned(),
                Some("no reply to WAIT".to_owned()),
            ));
        };
        // A failed write (NOSCRIPT, a refusal) has nothing to replicate: its error stands.
        if matches!(reply, Value::ServerError(_)) {
            return Ok(reply);
        }
        match acked {
            Value::Int(n) if n >= i64::from(replicas) => Ok(reply),
            Value::Int(n) => Err(::redis::make_extension_error(
                "NOREPLICAS".to_owned(),
                Some(format!(
                    "written on the primary, but {n} of the {replicas} replicas asked for \
                     acknowledged it within {wait:?} (min_replicas): it may be lost in a failover"
                )),
            )),
            other => Err(::redis::make_extension_error(
                "NOREPLICAS".to_owned(),
                Some(format!(
                    "written on the primary, but WAIT {replicas} {wait_ms} answered {other:?} \
                     (min_replicas): it may be lost in a failover"
                )),
            )),
        }
    }

    async fn send(&mut self, cmd: &::redis::Cmd) -> ::redis::RedisResult<Value> {
        let timeout = self.timeout;
        match &mut self.link {
            Link::Primary(p) => {
                let (mut manager, generation) = p.manager();
                let reply = bounded(timeout, manager.req_packed_command(cmd)).await;
                p.check(generation, reply.as_ref().map(std::iter::once));
                reply
            }
            Link::Cluster(c) => bounded(timeout, c.req_packed_command(cmd)).await,
        }
    }

    async fn send_pipeline(
        &mut self,
        pipeline: &::redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> ::redis::RedisResult<Vec<Value>> {
        let timeout = self.timeout;
        match &mut self.link {
            Link::Primary(p) => {
                let (mut manager, generation) = p.manager();
                let request = manager.req_packed_commands(pipeline, offset, count);
                let replies = bounded(timeout, request).await;
                p.check(generation, replies.as_ref());
                replies
            }
            Link::Cluster(c) => {
                bounded(timeout, c.req_packed_commands(pipeline, offset, count)).await
            }
        }
    }
}

/// A primary (one server, or the one Sentinel names: scripts go to it), or a cluster
/// (scripts are routed by their keys' slot).
#[derive(Clone)]
enum Link {
    Primary(Arc<Primary>),
    Cluster(::redis::cluster_async::ClusterConnection),
}

/// How long one request may take: `redis_timeout`, plus the `WAIT` timeout with
/// `min_replicas` (a write's request includes its `WAIT`, which the server answers only
/// when enough replicas acknowledged or its timeout ran out). `None`: unbounded.
pub(super) fn request_bound(config: &Config) -> Option<Duration> {
    config.redis_timeout.map(|t| match config.min_replicas {
        Some((_, wait)) => t.saturating_add(wait),
        None => t,
    })
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

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a ::redis::Cmd,
    ) -> ::redis::RedisFuture<'a, Value> {
        Box::pin(async move {
            match self.min_replicas {
                Some((replicas, wait)) if self.waits => self.replicated(cmd, replicas, wait).await,
                _ => self.send(cmd).await,
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a ::redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> ::redis::RedisFuture<'a, Vec<Value>> {
        Box::pin(self.send_pipeline(pipeline, offset, count))
    }

    fn get_db(&self) -> i64 {
        match &self.link {
            Link::Primary(p) => p.manager().0.get_db(),
            Link::Cluster(c) => c.get_db(),
        }
    }
}

/// Where the queue lives.
pub(crate) enum Target<'a> {
    Server(&'a str),
    /// The primary the sentinels (their URLs) name for the master `master`.
    Sentinel {
        sentinels: &'a [String],
        master: &'a str,
    },
    Cluster(&'a [String]),
}

fn bad_url(err: ::redis::RedisError) -> Error {
    Error::invalid_config_owned(format!("bad redis url: {err}"))
}

/// The CA certificates `rediss://` servers are checked against, if the builder gave some
/// (otherwise the system's trusted roots).
#[cfg(feature = "redis-tls")]
fn certificates(config: &Config) -> Option<::redis::TlsCertificates> {
    config.tls_ca.as_ref().map(|ca| ::redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(ca.to_vec()),
    })
}

/// A client for one server's URL.
fn client(url: &str, config: &Config) -> Result<Client, Error> {
    #[cfg(feature = "redis-tls")]
    if let Some(certificates) = certificates(config) {
        return Client::build_with_tls(url, certificates).map_err(bad_url);
    }
    let _ = config;
    Client::open(url).map_err(bad_url)
}

/// A Sentinel client for `master`: the sentinels' URLs also say how to reach the data
/// nodes (TLS if the first is `rediss://`, and its user and password).
fn sentinel(sentinels: &[String], master: &str, config: &Config) -> Result<Find, Error> {
    use ::redis::sentinel::{SentinelClientBuilder, SentinelServerType};
    use ::redis::IntoConnectionInfo;
    let infos = sentinels
        .iter()
        .map(|url| url.as_str().into_connection_info())
        .collect::<Result<Vec<_>, _>>()
        .map_err(bad_url)?;
    let Some(first) = infos.first() else {
        return Err(Error::invalid_config("no sentinel given"));
    };
    let settings = first.redis_settings();
    let tls = matches!(first.addr(), ::redis::ConnectionAddr::TcpTls { .. });
    let addrs = infos.iter().map(|info| info.addr().clone());
    let mut builder =
        SentinelClientBuilder::new(addrs, master, SentinelServerType::Master).map_err(bad_url)?;
    if let Some(user) = settings.username() {
        builder = builder
            .set_client_to_sentinel_username(user)
            .set_client_to_redis_username(user);
    }
    if let Some(password) = settings.password() {
        builder = builder
            .set_client_to_sentinel_password(password)
            .set_client_to_redis_password(password);
    }
    if tls {
        builder = builder.set_client_to_redis_tls_mode(::redis::TlsMode::Secure);
        #[cfg(feature = "redis-tls")]
        if let Some(certificates) = certificates(config) {
            builder = builder
                .set_client_to_sentinel_certificates(certificates.clone())
                .set_client_to_redis_certificates(certificates);
        }
    }
    let _ = config;
    let client = builder.build().map_err(bad_url)?;
    Ok(Find::Sentinel(tokio::sync::Mutex::new(client)))
}

/// Connects to `target`: the connection for calls, and what the wake subscriber uses.
///
/// # Errors
///
/// [`Error::is_invalid_config`] for a bad URL or no node given, [`Error::is_unavailable`]
/// if the server cannot be reached, [`Error::is_unauthorized`] if it refuses the
/// credentials or we refuse its certificate.
pub(super) async fn connect(target: Target<'_>, config: &Config) -> Result<(Conn, Wake), Error> {
    let (link, wake) = match target {
        Target::Server(_) | Target::Sentinel { .. } => {
            let find = match target {
                Target::Server(url) => Find::Fixed(client(url, config)?),
                Target::Sentinel { sentinels, master } => sentinel(sentinels, master, config)?,
                Target::Cluster(_) => unreachable!("matched above"),
            };
            // One connection attempt per reconnect, no backoff of its own: every call is
            // bounded by `redis_timeout` (`Conn`), and while the server is down each call
            // fails at once and starts the next attempt, so calls succeed again as soon as
            // it is back. (With the manager's default six retries, a call made during an
            // outage waited out the whole backoff, seconds past `redis_timeout`, and a
            // wrong password took as long to fail `open`.)
            // A write's request includes its `WAIT` (`min_replicas`): the manager must not
            // give up on it before the `WAIT` does, or the caller would hear of a timeout
            // instead of how many replicas acknowledged.
            let manager = ::redis::aio::ConnectionManagerConfig::new()
                .set_number_of_retries(0)
                .set_response_timeout(request_bound(config))
                .set_connection_timeout(config.redis_timeout);
            let open = bounded(config.redis_timeout, Primary::open(find, manager));
            let primary = Arc::new(open.await.map_err(redis_error)?);
            (Link::Primary(primary.clone()), Wake::Plain(primary))
        }
        Target::Cluster(urls) => {
            if urls.is_empty() {
                return Err(Error::invalid_config("no cluster node given"));
            }
            if config.min_replicas.is_some() {
                return Err(Error::invalid_config(
                    "min_replicas is for one primary (a server or Sentinel), not a cluster",
                ));
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
                #[cfg(feature = "redis-tls")]
                if let Some(certificates) = certificates(config) {
                    builder = builder.certs(certificates);
                }
                builder
            };
            let client = builder().build().map_err(bad_url)?;
            let connecting = bounded(config.redis_timeout, client.get_async_connection());
            let mut conn = connecting.await.map_err(redis_error)?;
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
        timeout: request_bound(config),
        min_replicas: config.min_replicas,
        waits: false,
    };
    Ok((conn, wake))
}
