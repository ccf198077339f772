//! Where the queue is (`--store`, or `--redis` or `--postgres` and `--queue`), and opening it
//! with errors an operator can act on.

use std::path::PathBuf;

use wheel_jobs::{Error, JobQueue};

/// Where the queue is: one of `--store`, `--redis` and `--postgres` (the group `place`,
/// required by `Cli`), and `--queue` with `--redis` or `--postgres`, so a command line
/// without them exits 2 like any bad one.
#[derive(clap::Args, Debug)]
pub struct Target {
    /// The embedded store: the file the app opens (`jobs.redb`).
    #[arg(long, value_name = "PATH", group = "place")]
    store: Option<PathBuf>,

    /// A Redis server: `redis://host:port/`, `redis+unix:///path/redis.sock`; with
    /// `--cluster`, a node of the cluster (repeat for more).
    #[cfg(feature = "redis")]
    #[arg(long, value_name = "URL", group = "place", requires = "queue")]
    redis: Vec<String>,

    /// A PostgreSQL server: `postgres://user:password@host:port/database` (the queue's
    /// tables are in the schema `wheel_jobs`).
    #[cfg(feature = "postgres")]
    #[arg(long, value_name = "URL", group = "place", requires = "queue")]
    postgres: Option<String>,

    /// The queue's name on Redis or PostgreSQL.
    #[cfg(any(feature = "redis", feature = "postgres"))]
    #[cfg_attr(
        not(feature = "postgres"),
        arg(long, value_name = "NAME", requires = "redis")
    )]
    #[cfg_attr(feature = "postgres", arg(long, value_name = "NAME"))]
    queue: Option<String>,

    /// The queue's partitions on Redis: the number every process of the app uses.
    #[cfg(feature = "redis")]
    #[arg(long, value_name = "N", default_value_t = 1)]
    partitions: usize,

    /// `--redis` names nodes of a Redis Cluster.
    #[cfg(feature = "redis")]
    #[arg(long)]
    cluster: bool,
}

impl Target {
    /// What clap cannot say about the place: several `--redis` URLs are the nodes of a
    /// cluster. An error here is a bad command line (exit 2).
    pub fn check(&self) -> Result<(), String> {
        #[cfg(feature = "redis")]
        if self.redis.len() > 1 && !self.cluster {
            return Err("several --redis URLs need --cluster".to_owned());
        }
        Ok(())
    }

    /// Opens the queue. An embedded store must exist unless `create`: a mistyped path
    /// would otherwise leave a new, empty store behind and report it empty.
    pub async fn open(&self, create: bool) -> Result<JobQueue, String> {
        if let Some(path) = &self.store {
            return open_store(path, create).await;
        }
        #[cfg(feature = "redis")]
        if !self.redis.is_empty() {
            return self.open_redis().await;
        }
        #[cfg(feature = "postgres")]
        if let Some(url) = &self.postgres {
            return self.open_postgres(url).await;
        }
        unreachable!("clap requires --store, --redis or --postgres")
    }

    #[cfg(feature = "postgres")]
    async fn open_postgres(&self, url: &str) -> Result<JobQueue, String> {
        let Some(name) = &self.queue else {
            unreachable!("clap requires --queue with --postgres")
        };
        JobQueue::builder()
            .postgres(url, name)
            .await
            .map_err(|err| {
                let at = without_password(url);
                if err.is_unavailable() {
                    format!("cannot reach PostgreSQL at {at}: {err}")
                } else {
                    format!("cannot open the queue {name:?} on {at}: {err}")
                }
            })
    }

    #[cfg(feature = "redis")]
    async fn open_redis(&self) -> Result<JobQueue, String> {
        let Some(name) = &self.queue else {
            unreachable!("clap requires --queue with --redis")
        };
        let mut builder = JobQueue::builder();
        builder.partitions(self.partitions);
        let opened = if self.cluster {
            builder.redis_cluster(&self.redis, name).await
        } else if let [url] = self.redis.as_slice() {
            builder.redis(url, name).await
        } else {
            unreachable!("Target::check refuses several --redis URLs without --cluster")
        };
        opened.map_err(|err| {
            let at = self
                .redis
                .iter()
                .map(|url| without_password(url))
                .collect::<Vec<_>>()
                .join(", ");
            if err.is_unavailable() {
                format!("cannot reach Redis at {at}: {err}")
            } else {
                format!("cannot open the queue {name:?} on {at}: {err}")
            }
        })
    }
}

async fn open_store(path: &std::path::Path, create: bool) -> Result<JobQueue, String> {
    if !create && !path.exists() {
        return Err(format!(
            "no store at {} (only `schedule` creates one)",
            path.display()
        ));
    }
    JobQueue::open(path)
        .await
        .map_err(|err| store_error(path, &err))
}

fn store_error(path: &std::path::Path, err: &Error) -> String {
    if err.is_locked() {
        format!(
            "the store {} is open in another process (one process at a time): while the app \
             that holds it runs, look through the console mounted in it \
             (wheel_jobs::console::router), or stop the app first",
            path.display()
        )
    } else {
        format!("cannot open the store {}: {err}", path.display())
    }
}

/// `url` with its password, if any, replaced by `***`, in the userinfo and in a
/// `pass`/`password` query pair (`redis+unix://` URLs carry it there): errors end up in
/// logs. Parsed as the client parses it (the `url` crate, which redis uses), so a password
/// holding `@` or `/` is masked whole; a URL that does not parse is shown as its scheme only.
#[cfg(any(feature = "redis", feature = "postgres"))]
fn without_password(url: &str) -> String {
    let Ok(mut parsed) = url::Url::parse(url) else {
        let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
        return format!("{scheme}://<unparseable URL>");
    };
    if parsed.password().is_some() {
        // Fails only for URLs that cannot have a password, which then has none to hide.
        let _ = parsed.set_password(Some("***"));
    }
    let secret = |key: &str| key == "pass" || key == "password";
    if parsed.query_pairs().any(|(key, _)| secret(&key)) {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(key, value)| {
                let value = if secret(&key) { "***".into() } else { value };
                (key.into_owned(), value.into_owned())
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
    }
    parsed.into()
}

#[cfg(all(test, feature = "redis"))]
mod tests {
    use super::without_password;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(without_password("redis://127.0.0.1/"), "redis://127.0.0.1/");
        assert_eq!(
            without_password("redis://:s3cret@10.0.0.1:6379/0"),
            "redis://:***@10.0.0.1:6379/0"
        );
        assert_eq!(
            without_password("rediss://app:s3cret@host/"),
            "rediss://app:***@host/"
        );
        assert_eq!(
            without_password("redis+unix:///run/redis.sock"),
            "redis+unix:///run/redis.sock"
        );
        assert_eq!(
            without_password("redis+unix:///x.sock?db=2&pass=hunter2"),
            "redis+unix:///x.sock?db=2&pass=***"
        );
        // The client splits at the last `@`: all of `p@ss` is the password.
        assert_eq!(
            without_password("redis://:p@ss@127.0.0.1:1/"),
            "redis://:***@127.0.0.1:1/"
        );
        assert_eq!(
            without_password("redis://:pa/ss@127.0.0.1:1/"),
            "redis://<unparseable URL>"
        );
        assert_eq!(
            without_password("redis://app:s3cret@[::1"),
            "redis://<unparseable URL>"
        );
    }
}
