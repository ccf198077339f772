//! Where the queue is (`--store`, or `--redis` or `--postgres` and `--queue`; or for `copy`,
//! each of `--from` and `--to`), and opening it with errors an operator can act on.

use std::path::PathBuf;

use wheel_jobs::{Builder, Error, JobQueue};

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

    /// The queue's partitions on Redis: the number every process of the app uses
    /// (default 1).
    #[cfg(feature = "redis")]
    #[arg(long, value_name = "N")]
    partitions: Option<usize>,

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

    /// Whether the command line names a place (`copy` names two of its own instead).
    pub fn given(&self) -> bool {
        let given = self.store.is_some();
        #[cfg(feature = "redis")]
        let given = given || !self.redis.is_empty();
        #[cfg(feature = "postgres")]
        let given = given || self.postgres.is_some();
        given
    }

    /// Whether the command line gives an option of the place other than the place itself
    /// (`--queue`, `--partitions`, `--cluster`): `copy` has its own for each end.
    pub fn options_given(&self) -> bool {
        #[cfg(any(feature = "redis", feature = "postgres"))]
        let given = self.queue.is_some();
        #[cfg(not(any(feature = "redis", feature = "postgres")))]
        let given = false;
        #[cfg(feature = "redis")]
        let given = given || self.partitions.is_some() || self.cluster;
        given
    }

    /// Opens the queue. An embedded store must exist unless `create`: a mistyped path
    /// would otherwise leave a new, empty store behind and report it empty.
    pub async fn open(&self, create: bool) -> Result<JobQueue, String> {
        self.place().open(create, &JobQueue::builder()).await
    }

    fn place(&self) -> Place {
        if let Some(path) = &self.store {
            return Place::Store(path.clone());
        }
        #[cfg(feature = "redis")]
        if !self.redis.is_empty() {
            let Some(queue) = self.queue.clone() else {
                unreachable!("clap requires --queue with --redis")
            };
            return Place::Redis {
                urls: self.redis.clone(),
                cluster: self.cluster,
                partitions: self.partitions.unwrap_or(1),
                queue,
            };
        }
        #[cfg(feature = "postgres")]
        if let Some(url) = &self.postgres {
            let Some(queue) = self.queue.clone() else {
                unreachable!("clap requires --queue with --postgres")
            };
            return Place::Postgres {
                url: url.clone(),
                queue,
            };
        }
        unreachable!("clap requires --store, --redis or --postgres")
    }
}

/// Where a queue is, however the command line named it: the global options (`Target`) or
/// one end of `copy` ([`Place::parse`]). Opened one way for both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// The embedded store's file.
    Store(PathBuf),
    /// A queue on a Redis server, or on a cluster (`urls` its nodes).
    #[cfg(feature = "redis")]
    Redis {
        urls: Vec<String>,
        cluster: bool,
        partitions: usize,
        queue: String,
    },
    /// A queue on a PostgreSQL server.
    #[cfg(feature = "postgres")]
    Postgres { url: String, queue: String },
}

impl Place {
    /// A place written as one word (`copy --from`, `--to`): a URL by its scheme
    /// (`redis://`, `rediss://`, `redis+unix://`, `postgres://`, `postgresql://`), which
    /// needs `queue`; anything else the path of an embedded store. `option` names the
    /// option in errors, which are bad command lines (exit 2).
    pub fn parse(
        option: &str,
        text: &str,
        queue: Option<&str>,
        #[cfg_attr(not(feature = "redis"), allow(unused_variables))] partitions: usize,
    ) -> Result<Place, String> {
        let scheme = text
            .split_once("://")
            .map(|(scheme, _)| scheme.to_ascii_lowercase());
        let Some(scheme) = scheme else {
            return match queue {
                Some(_) => Err(format!(
                    "--{option}-queue names a queue on Redis or PostgreSQL; --{option} {text} \
                     is a store's path"
                )),
                None => Ok(Place::Store(PathBuf::from(text))),
            };
        };
        let (kind, feature) = match scheme.as_str() {
            "redis" | "rediss" | "redis+unix" => ("Redis", "redis"),
            "postgres" | "postgresql" => ("PostgreSQL", "postgres"),
            _ => {
                return Err(format!(
                    "--{option}: {scheme}:// is no kind of place: give a store's path, a \
                     redis://, rediss://, redis+unix://, postgres:// or postgresql:// URL"
                ))
            }
        };
        let Some(queue) = queue else {
            return Err(format!(
                "--{option} names a queue on {kind}: give its name with --{option}-queue NAME"
            ));
        };
        match kind {
            #[cfg(feature = "redis")]
            "Redis" => Ok(Place::Redis {
                urls: vec![text.to_owned()],
                cluster: false,
                partitions,
                queue: queue.to_owned(),
            }),
            #[cfg(feature = "postgres")]
            "PostgreSQL" => Ok(Place::Postgres {
                url: text.to_owned(),
                queue: queue.to_owned(),
            }),
            _ => Err(format!(
                "--{option}: this wheel-jobs was built without {kind} (cargo feature \
                 `{feature}`), so it cannot open the queue {queue:?}"
            )),
        }
    }

    /// Whether this is an embedded store: its file lock keeps any app off it while the
    /// command holds it.
    pub fn is_store(&self) -> bool {
        matches!(self, Place::Store(_))
    }

    /// Opens the queue, configured by `builder` (the place's own settings, such as Redis
    /// partitions, set on top). An embedded store must exist unless `create`.
    pub async fn open(&self, create: bool, builder: &Builder) -> Result<JobQueue, String> {
        match self {
            Place::Store(path) => open_store(path, create, builder).await,
            #[cfg(feature = "redis")]
            Place::Redis {
                urls,
                cluster,
                partitions,
                queue,
            } => open_redis(builder, urls, *cluster, *partitions, queue).await,
            #[cfg(feature = "postgres")]
            Place::Postgres { url, queue } => open_postgres(builder, url, queue).await,
        }
    }
}

#[cfg(feature = "postgres")]
async fn open_postgres(builder: &Builder, url: &str, name: &str) -> Result<JobQueue, String> {
    builder.postgres(url, name).await.map_err(|err| {
        let at = without_password(url);
        if err.is_unavailable() {
            format!("cannot reach PostgreSQL at {at}: {err}")
        } else {
            format!("cannot open the queue {name:?} on {at}: {err}")
        }
    })
}

#[cfg(feature = "redis")]
async fn open_redis(
    builder: &Builder,
    urls: &[String],
    cluster: bool,
    partitions: usize,
    name: &str,
) -> Result<JobQueue, String> {
    let mut builder = builder.clone();
    builder.partitions(partitions);
    let opened = if cluster {
        builder.redis_cluster(urls, name).await
    } else if let [url] = urls {
        builder.redis(url, name).await
    } else {
        unreachable!("Target::check refuses several --redis URLs without --cluster")
    };
    opened.map_err(|err| {
        let at = urls
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

async fn open_store(
    path: &std::path::Path,
    create: bool,
    builder: &Builder,
) -> Result<JobQueue, String> {
    if !create && !path.exists() {
        return Err(format!(
            "no store at {} (only `schedule` creates one)",
            path.display()
        ));
    }
    builder
        .open(path)
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
    use super::{without_password, Place};

    #[test]
    fn a_copy_end_is_a_store_path_or_a_url_by_its_scheme() {
        assert_eq!(
            Place::parse("from", "data/jobs.redb", None, 1),
            Ok(Place::Store("data/jobs.redb".into()))
        );
        for url in [
            "redis://h/",
            "rediss://:pw@h:6380/2",
            "REDIS+unix:///run/r.sock",
        ] {
            assert_eq!(
                Place::parse("to", url, Some("orders"), 3),
                Ok(Place::Redis {
                    urls: vec![url.to_owned()],
                    cluster: false,
                    partitions: 3,
                    queue: "orders".to_owned(),
                }),
                "{url}"
            );
        }
        for url in ["postgres://app@db/shop", "postgresql://db/shop"] {
            let parsed = Place::parse("to", url, Some("orders"), 1);
            #[cfg(feature = "postgres")]
            assert_eq!(
                parsed,
                Ok(Place::Postgres {
                    url: url.to_owned(),
                    queue: "orders".to_owned(),
                }),
                "{url}"
            );
            #[cfg(not(feature = "postgres"))]
            assert_eq!(
                parsed,
                Err(
                    "--to: this wheel-jobs was built without PostgreSQL (cargo feature \
                     `postgres`), so it cannot open the queue \"orders\""
                        .to_owned()
                )
            );
        }
        assert!(Place::parse("from", "http://h/", Some("q"), 1)
            .unwrap_err()
            .starts_with("--from: http:// is no kind of place"));
    }

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
