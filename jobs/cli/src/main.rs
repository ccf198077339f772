//! `wheel-jobs`: look into and act on a wheel-jobs queue from a terminal or a script, and
//! serve its web console.
//!
//! ```text
//! cargo install --path jobs/cli
//! wheel-jobs --store jobs.redb stats
//! wheel-jobs --redis redis://127.0.0.1/ --queue orders get rate:order-42 --json
//! wheel-jobs --store jobs.redb serve --listen 127.0.0.1:8080
//! wheel-jobs copy --from jobs.redb --to postgres://app@db/app --to-queue orders
//! ```
//!
//! # Ground rules
//!
//! - Everything goes through `JobQueue`'s public calls, like an app's own code.
//! - Each error is one line on stderr (`wheel-jobs: …`) and a non-zero exit: 2 for a bad
//!   command line, 1 for anything else (a locked store, an unreachable server, an unknown
//!   id, an action that changed nothing).
//! - `--json` prints one JSON object on stdout per command, for scripts; without it the
//!   output is for people.

// The command's futures nest deep (a Redis open now retries through Sentinel and TLS), and
// rustc's default query depth overflows while laying out the test build's types.
#![recursion_limit = "256"]

mod commands;
mod format;
mod target;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::{Parser, Subcommand, ValueEnum};
use wheel_jobs::{Cursor, JobState};

/// Look into and act on a wheel-jobs queue; serve its web console.
#[derive(Parser, Debug)]
#[command(name = "wheel-jobs", version, group(clap::ArgGroup::new("place").required(true)))]
struct Cli {
    #[command(flatten)]
    target: target::Target,

    /// Print one JSON object instead of text.
    #[arg(long, global = true)]
    json: bool,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Counts per state and per kind, whether the queue is paused, and when the next job
    /// is due.
    Stats,
    /// A page of one state's jobs: pending and running oldest due first, dead most
    /// recently dead first.
    List {
        /// Which jobs.
        state: State,
        /// At most this many (1 to 1,000).
        #[arg(long, default_value_t = 50, value_parser = limit)]
        limit: usize,
        /// The page after the one that printed this cursor.
        #[arg(long, value_name = "CURSOR", value_parser = parse_cursor)]
        after: Option<Cursor>,
        /// Only jobs of this kind (`""`: jobs scheduled without one); a cursor continues
        /// the list of the same kind.
        #[arg(long, value_name = "KIND", value_parser = parse_kind)]
        kind: Option<String>,
    },
    /// One job: state, kind, priority, run_at, attempts, last error, payload (UTF-8, else
    /// hex).
    Get {
        /// The job's id.
        id: String,
    },
    /// Schedule a job; an existing id is left unchanged (unless `--dedup` says otherwise).
    Schedule {
        /// The job's id.
        id: String,
        /// Due after this long: `48h`, `2d 3h`, `90s`, `1.5h`, `500ms`.
        #[arg(long = "in", value_name = "DURATION", value_parser = format::parse_delay,
              required_unless_present = "at", conflicts_with = "at")]
        delay: Option<Duration>,
        /// Due at this time, RFC 3339 with an offset: `2026-12-01T20:00:00+08:00`, `…Z`.
        #[arg(long, value_name = "TIME", value_parser = format::parse_time)]
        at: Option<SystemTime>,
        /// The payload, as text.
        #[arg(long, conflicts_with = "payload_file")]
        payload: Option<String>,
        /// The payload, the bytes of a file (`-`: standard input).
        #[arg(long, value_name = "FILE")]
        payload_file: Option<PathBuf>,
        /// The job's kind: the workers that run it (`run_kind`) and its kind's defaults
        /// (default: none, the kind `""`).
        #[arg(long, value_name = "KIND", value_parser = parse_kind)]
        kind: Option<String>,
        /// Among due jobs, higher priorities are claimed first, -128 to 127 (default: the
        /// kind's, else 0).
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        priority: Option<i8>,
        /// Deliveries before the job is dead, at least 1 (default: the kind's, else the
        /// queue's).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        max_attempts: Option<u32>,
        /// What happens if the id is taken: `keep` (leave it), `replace` (a pending job's
        /// time, payload and options), `allow-while-running` (store a successor beside a
        /// running job), `hold-off=DURATION` (refuse the id that long after an ack)
        /// (default: the kind's, else keep).
        #[arg(long, value_name = "MODE", value_parser = parse_dedup)]
        dedup: Option<wheel_jobs::Dedup>,
        /// The job's key (a tenant, a user): jobs of one kind and key share the limits
        /// `--key-limit` and `--key-rate` set (default: none).
        #[arg(long, value_name = "KEY", value_parser = parse_key)]
        key: Option<String>,
        /// At most N jobs of this kind and key running at once, at least 1 (default: the
        /// kind's, else none). Needs --key.
        #[arg(long, value_name = "N", requires = "key",
              value_parser = clap::value_parser!(u32).range(1..))]
        key_limit: Option<u32>,
        /// At most STARTS starts of this kind and key per DURATION, like `10/1m` (default:
        /// the kind's, else none). Needs --key.
        #[arg(long, value_name = "STARTS/DURATION", requires = "key",
              value_parser = format::parse_key_rate)]
        key_rate: Option<(u32, std::time::Duration)>,
    },
    /// Cancel a pending job.
    Cancel {
        /// The job's id.
        id: String,
    },
    /// Send a dead job back (or every dead job): pending again, attempts from zero.
    Revive {
        /// The job's id.
        #[arg(required_unless_present = "all_dead", conflicts_with = "all_dead")]
        id: Option<String>,
        /// Every dead job.
        #[arg(long)]
        all_dead: bool,
        /// Due after this long (default: now).
        #[arg(long = "in", value_name = "DURATION", value_parser = format::parse_delay,
              conflicts_with = "at")]
        delay: Option<Duration>,
        /// Due at this time, RFC 3339 with an offset.
        #[arg(long, value_name = "TIME", value_parser = format::parse_time)]
        at: Option<SystemTime>,
    },
    /// Delete every dead job.
    PurgeDead,
    /// Stop every consumer of the queue from claiming (schedules and acks go on).
    Pause,
    /// Let consumers claim again.
    Resume,
    /// Counts and their rates, refreshed: one line redrawn on a terminal, a line per
    /// sample otherwise (with --json, a JSON object per line).
    Watch {
        /// Between samples.
        #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = format::parse_delay)]
        every: Duration,
        /// Stop after this many samples (default: until Ctrl-C).
        #[arg(long, value_name = "N")]
        count: Option<u64>,
    },
    /// Copy a queue's jobs and recurring series into another queue, on any backends.
    ///
    /// --from and --to name the two queues (not --store, --redis or --postgres). Only what
    /// the destination lacks is written: run it again after an interruption. Pause the
    /// source and stop its workers first.
    #[command(override_usage = "wheel-jobs copy [OPTIONS] --from <PLACE> --to <PLACE>")]
    Copy {
        /// The queue to copy: an embedded store's path, or a `redis://`, `rediss://`,
        /// `redis+unix://`, `postgres://` or `postgresql://` URL (with --from-queue).
        #[arg(long, value_name = "PLACE")]
        from: String,
        /// Where to copy it, written as --from (a store's path is created if missing).
        #[arg(long, value_name = "PLACE")]
        to: String,
        /// The source queue's name on Redis or PostgreSQL.
        #[arg(long, value_name = "NAME")]
        from_queue: Option<String>,
        /// The destination queue's name on Redis or PostgreSQL.
        #[arg(long, value_name = "NAME")]
        to_queue: Option<String>,
        /// The source's partitions on Redis: the number every process of its app uses.
        #[cfg(feature = "redis")]
        #[arg(long, value_name = "N", default_value_t = 1)]
        from_partitions: usize,
        /// The destination's partitions on Redis: the number its app will use.
        #[cfg(feature = "redis")]
        #[arg(long, value_name = "N", default_value_t = 1)]
        to_partitions: usize,
    },
    /// Serve the web console (and, on the embedded store, hold it until stopped).
    Serve {
        /// Where to listen, IP:PORT. Other than a loopback address, a token is required.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Require this token on every request (HTTP Basic password, or `Authorization:
        /// Bearer`); at least 16 characters.
        #[arg(long, env = "WHEEL_JOBS_TOKEN", hide_env_values = true)]
        token: Option<String>,
    },
}

/// A job state, as the command line names it.
#[derive(ValueEnum, Clone, Copy, Debug)]
enum State {
    Pending,
    Running,
    Dead,
}

impl From<State> for JobState {
    fn from(state: State) -> JobState {
        match state {
            State::Pending => JobState::Pending,
            State::Running => JobState::Running,
            State::Dead => JobState::Dead,
        }
    }
}

/// `list --limit`: 1 to [`ListOptions::MAX_LIMIT`](wheel_jobs::ListOptions::MAX_LIMIT).
fn limit(s: &str) -> Result<usize, String> {
    let max = wheel_jobs::ListOptions::MAX_LIMIT;
    match s.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("a page holds 1 to {max} jobs")),
    }
}

/// `--kind`: at most [`MAX_KIND_LEN`](wheel_jobs::MAX_KIND_LEN) bytes, no control
/// character (checked before a store is opened, or created by `schedule`).
fn parse_kind(s: &str) -> Result<String, String> {
    let max = wheel_jobs::MAX_KIND_LEN;
    if s.len() > max {
        return Err(format!("a kind is at most {max} bytes"));
    }
    if s.chars().any(char::is_control) {
        return Err("a kind must not contain control characters".to_owned());
    }
    Ok(s.to_owned())
}

fn parse_key(s: &str) -> Result<String, String> {
    let max = wheel_jobs::MAX_KEY_LEN;
    if s.is_empty() || s.len() > max {
        return Err(format!("a key is 1 to {max} bytes"));
    }
    if s.chars().any(char::is_control) {
        return Err("a key must not contain control characters".to_owned());
    }
    Ok(s.to_owned())
}

fn parse_dedup(s: &str) -> Result<wheel_jobs::Dedup, String> {
    use wheel_jobs::Dedup;
    match s {
        "keep" => Ok(Dedup::Keep),
        "replace" => Ok(Dedup::Replace),
        "allow-while-running" => Ok(Dedup::AllowWhileRunning),
        _ => match s.strip_prefix("hold-off=") {
            Some(d) => format::parse_hold_off(d).map(Dedup::HoldOff),
            None => Err("one of keep, replace, allow-while-running, hold-off=DURATION".to_owned()),
        },
    }
}

fn parse_cursor(s: &str) -> Result<Cursor, String> {
    s.parse().map_err(|err: wheel_jobs::Error| err.to_string())
}

/// Why `copy` refuses the global options of a place: each of its ends has its own.
#[cfg(feature = "redis")]
const COPY_OPTIONS: &str = "copy names its queues' options --from-queue, --to-queue, \
                            --from-partitions and --to-partitions: --queue, --partitions and \
                            --cluster are for the other commands";
#[cfg(not(feature = "redis"))]
const COPY_OPTIONS: &str = "copy names its queues' options --from-queue and --to-queue: \
                            --queue is for the other commands";

impl Cli {
    /// What clap cannot say: the place's rules (`Target::check`), or for `copy` that its
    /// two places parse and no global place, nor any option of one, is given. An error is
    /// a bad command line.
    fn check(&self) -> Result<(), String> {
        if let Command::Copy { .. } = self.command {
            if self.target.given() {
                return Err("copy names its queues with --from and --to, not --store, \
                            --redis or --postgres"
                    .to_owned());
            }
            if self.target.options_given() {
                return Err(COPY_OPTIONS.to_owned());
            }
            let (from, to) = commands::copy_places(&self.command)?;
            if from == to {
                return Err("--from and --to name the same queue".to_owned());
            }
            return Ok(());
        }
        self.target.check()
    }
}

/// The command line, parsed. `copy` names its two queues itself (`--from`, `--to`), so the
/// global place is required of every command but it: `copy` is parsed with the place
/// group optional, any other command as declared (so its errors are clap's own).
fn parse() -> Result<Cli, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    // Relaxed: no place required, and `--queue` not tied to `--redis`, so that `check`
    // answers a global option given to `copy` with its own message.
    let relaxed = || {
        let command = Cli::command().mut_group("place", |group| group.required(false));
        #[cfg(any(feature = "redis", feature = "postgres"))]
        let command = command.mut_arg("queue", |arg| {
            arg.requires(clap::builder::Resettable::Reset)
        });
        command
    };
    let copy = relaxed()
        .ignore_errors(true)
        .try_get_matches()
        .is_ok_and(|matches| matches.subcommand_name() == Some("copy"));
    if !copy {
        return Cli::try_parse();
    }
    Cli::from_arg_matches(&relaxed().try_get_matches()?)
}

fn main() -> ExitCode {
    let cli = match parse() {
        Ok(cli) => match cli.check() {
            Ok(()) => cli,
            Err(message) => {
                eprintln!("wheel-jobs: {message}");
                return ExitCode::from(2);
            }
        },
        Err(err) if err.use_stderr() => {
            // clap's own message on one line, without the usage lines after it.
            let rendered = err.render().to_string();
            let message: Vec<&str> = rendered
                .lines()
                .take_while(|line| !line.trim().is_empty())
                .map(str::trim)
                .collect();
            let message = message.join(" ");
            // clap quotes the value it refused (a `--kind` may hold terminal controls).
            let message = format::escape(message.trim_start_matches("error: "));
            eprintln!("wheel-jobs: {message}");
            return ExitCode::from(2);
        }
        Err(help) => {
            let _ = help.print();
            return ExitCode::SUCCESS;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return fail(&format!("cannot start the runtime: {err}")),
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => fail(&message),
    }
}

fn fail(message: &str) -> ExitCode {
    // Messages quote ids and what servers said: one line, no terminal controls.
    eprintln!("wheel-jobs: {}", format::escape(message));
    ExitCode::FAILURE
}
