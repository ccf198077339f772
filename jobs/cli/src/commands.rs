//! The subcommands, each a few `JobQueue` calls, printing text or one JSON object.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};
use wheel_jobs::console::Console;
use wheel_jobs::{Cursor, Dedup, JobOptions, JobQueue, JobState, ListOptions, Scheduled, When};

use crate::format::{self, counts_json, counts_text, job_json, job_text, row_text};
use crate::target::Place;
use crate::{Cli, Command};

/// Runs the command line's command, then closes the queue (on the embedded store, that
/// releases the file for the app).
pub async fn run(cli: Cli) -> Result<(), String> {
    if let Command::Copy { .. } = &cli.command {
        let (from, to) = copy_places(&cli.command)?;
        return copy(&from, &to, Out { json: cli.json }).await;
    }
    // Read what the command needs before opening: a missing payload file must not leave a
    // store created or touched.
    let payload = match &cli.command {
        Command::Schedule {
            payload,
            payload_file,
            ..
        } => read_payload(payload.as_deref(), payload_file.as_deref())?,
        _ => Vec::new(),
    };
    let create = matches!(cli.command, Command::Schedule { .. });
    let queue = cli.target.open(create).await?;
    let out = Out { json: cli.json };
    let result = match cli.command {
        Command::Stats => stats(&queue, out).await,
        Command::List {
            state,
            limit,
            after,
            kind,
        } => list(&queue, state.into(), limit, after, kind.as_deref(), out).await,
        Command::Get { id } => get(&queue, &id, out).await,
        Command::Schedule {
            id,
            delay,
            at,
            kind,
            priority,
            max_attempts,
            dedup,
            key,
            key_limit,
            key_rate,
            ..
        } => {
            let when = match (delay, at) {
                (Some(delay), _) => When::After(delay),
                (None, Some(at)) => When::At(at),
                (None, None) => unreachable!("clap requires --in or --at"),
            };
            let options = job_options(
                kind,
                priority,
                max_attempts,
                dedup,
                Keys {
                    key,
                    limit: key_limit,
                    rate: key_rate,
                },
            );
            schedule(&queue, &id, when, payload, options.as_ref(), out).await
        }
        Command::Cancel { id } => cancel(&queue, &id, out).await,
        Command::Revive {
            id,
            all_dead: _,
            delay,
            at,
        } => {
            let when = match (delay, at) {
                (Some(delay), _) => When::After(delay),
                (None, Some(at)) => When::At(at),
                (None, None) => When::After(Duration::ZERO),
            };
            match id {
                Some(id) => revive(&queue, &id, when, out).await,
                None => revive_all_dead(&queue, when, out).await,
            }
        }
        Command::PurgeDead => purge_dead(&queue, out).await,
        Command::Pause => pause(&queue, true, out).await,
        Command::Resume => pause(&queue, false, out).await,
        Command::Watch { every, count } => watch(&queue, every, count, out).await,
        Command::Serve { listen, token } => serve(&queue, listen, token, out).await,
        Command::Copy { .. } => unreachable!("copy opens its own two queues"),
    };
    let closed = queue.close().await;
    result?;
    closed.map_err(|err| format!("closing the queue: {err}"))
}

/// How to print: for people, or one JSON object.
#[derive(Clone, Copy)]
struct Out {
    json: bool,
}

impl Out {
    fn print(self, text: impl FnOnce() -> String, json: Value) {
        if self.json {
            println!("{json}");
        } else {
            println!("{}", text());
        }
    }
}

fn read_payload(text: Option<&str>, file: Option<&std::path::Path>) -> Result<Vec<u8>, String> {
    match (text, file) {
        (Some(text), _) => Ok(text.as_bytes().to_vec()),
        (None, Some(path)) if path.as_os_str() == "-" => {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)
                .map_err(|err| format!("cannot read the payload from standard input: {err}"))?;
            Ok(bytes)
        }
        (None, Some(path)) => std::fs::read(path)
            .map_err(|err| format!("cannot read the payload file {}: {err}", path.display())),
        (None, None) => Ok(Vec::new()),
    }
}

async fn stats(queue: &JobQueue, out: Out) -> Result<(), String> {
    let counts = queue.counts().await.map_err(|e| e.to_string())?;
    out.print(
        || counts_text(&counts, SystemTime::now()),
        counts_json(&counts),
    );
    Ok(())
}

async fn list(
    queue: &JobQueue,
    state: JobState,
    limit: usize,
    after: Option<Cursor>,
    kind: Option<&str>,
    out: Out,
) -> Result<(), String> {
    let mut options = ListOptions::new();
    // The text rows show no payload; `--json` gives each job whole.
    options.limit(limit).payloads(out.json);
    if let Some(after) = &after {
        options.after(after);
    }
    if let Some(kind) = kind {
        options.kind(kind);
    }
    let page = queue
        .list(state, &options)
        .await
        .map_err(|e| e.to_string())?;
    let next = page.cursor().map(ToString::to_string);
    out.print(
        || {
            let now = SystemTime::now();
            let mut lines: Vec<String> = page.jobs().iter().map(|j| row_text(j, now)).collect();
            if lines.is_empty() {
                match kind {
                    Some(kind) => lines.push(format!(
                        "no {} jobs of kind {}",
                        format::state(state),
                        format::kind(kind)
                    )),
                    None => lines.push(format!("no {} jobs", format::state(state))),
                }
            }
            if let Some(next) = &next {
                lines.push(format!("next page: --after {next}"));
            }
            lines.join("\n")
        },
        json!({
            "state": format::state(state),
            "kind": kind,
            "jobs": page.jobs().iter().map(job_json).collect::<Vec<_>>(),
            "next": next,
        }),
    );
    Ok(())
}

async fn get(queue: &JobQueue, id: &str, out: Out) -> Result<(), String> {
    match queue.get(id).await.map_err(|e| e.to_string())? {
        Some(job) => {
            out.print(|| job_text(&job, SystemTime::now()), job_json(&job));
            Ok(())
        }
        None => Err(no_job(id)),
    }
}

fn no_job(id: &str) -> String {
    format!("no job {id:?} (never scheduled, or cancelled, acked or removed)")
}

/// `schedule`'s `--key`, `--key-limit` and `--key-rate`.
struct Keys {
    key: Option<String>,
    limit: Option<u32>,
    rate: Option<(u32, std::time::Duration)>,
}

/// `schedule`'s options, if any is given: without one, the job is scheduled as a plain
/// `JobQueue::schedule` does.
fn job_options(
    kind: Option<String>,
    priority: Option<i8>,
    max_attempts: Option<u32>,
    dedup: Option<Dedup>,
    keys: Keys,
) -> Option<JobOptions> {
    if kind.is_none()
        && priority.is_none()
        && max_attempts.is_none()
        && dedup.is_none()
        && keys.key.is_none()
    {
        return None;
    }
    let mut options = JobOptions::new();
    if let Some(kind) = kind {
        options = options.of_kind(kind);
    }
    if let Some(priority) = priority {
        options = options.priority(priority);
    }
    if let Some(attempts) = max_attempts {
        options = options.max_attempts(attempts);
    }
    if let Some(dedup) = dedup {
        options = options.dedup(dedup);
    }
    if let Some(key) = keys.key {
        options = options.key(key);
    }
    if let Some(limit) = keys.limit {
        options = options.key_limit(limit);
    }
    if let Some((starts, per)) = keys.rate {
        options = options.key_rate(starts, per);
    }
    Some(options)
}

async fn schedule(
    queue: &JobQueue,
    id: &str,
    when: When,
    payload: Vec<u8>,
    options: Option<&JobOptions>,
    out: Out,
) -> Result<(), String> {
    let scheduled = match options {
        Some(options) => queue.schedule_with(id, when, payload, options).await,
        None => queue.schedule(id, when, payload).await,
    };
    let outcome = scheduled.map_err(|e| e.to_string())?;
    let mut until = None;
    let (word, text) = match outcome {
        Scheduled::Created => ("created", format!("created {}", format::escape(id))),
        Scheduled::Exists => (
            "exists",
            format!("exists {} (left unchanged)", format::escape(id)),
        ),
        Scheduled::Replaced => ("replaced", format!("replaced {}", format::escape(id))),
        Scheduled::HeldOff { until: end } => {
            until = Some(format::time(end));
            (
                "held_off",
                format!(
                    "held off {} until {} (nothing stored)",
                    format::escape(id),
                    format::time_text(end)
                ),
            )
        }
        Scheduled::Successor => (
            "successor",
            format!(
                "successor {} stored: it runs once the running job is acked or dies",
                format::escape(id)
            ),
        ),
        // `Scheduled` is non-exhaustive: an outcome this command does not know yet.
        other => ("other", format!("{other:?} {}", format::escape(id))),
    };
    let mut json = json!({ "id": id, "outcome": word });
    if let Some(until) = until {
        json["until"] = json!(until);
    }
    out.print(|| text, json);
    Ok(())
}

async fn cancel(queue: &JobQueue, id: &str, out: Out) -> Result<(), String> {
    // A cancel that succeeds on a running job removed only its successor
    // (`Dedup::AllowWhileRunning`): the job runs on.
    let before = queue.get(id).await.map_err(|e| e.to_string())?;
    let running = before.is_some_and(|job| job.state() == JobState::Running);
    if queue.cancel(id).await.map_err(|e| e.to_string())? {
        if running {
            out.print(
                || {
                    format!(
                        "cancelled the successor of {} (the running job goes on)",
                        format::escape(id)
                    )
                },
                json!({ "id": id, "cancelled": true, "successor_only": true }),
            );
        } else {
            out.print(
                || format!("cancelled {}", format::escape(id)),
                json!({ "id": id, "cancelled": true }),
            );
        }
        return Ok(());
    }
    if let Ok(Some(series)) = queue.recurring_of(id).await {
        return Err(format!(
            "{id:?} is the next occurrence of the recurring series {:?}: cancel the series \
             (JobQueue::cancel_recurring), not the occurrence",
            series.name()
        ));
    }
    Err(why_unchanged(queue, id, "pending", "cancelled").await)
}

/// Why a call on `id` that needs a job `needed` (pending, dead) changed nothing: the state
/// it is in, or that there is no such job. Read after the call, only to say why.
async fn why_unchanged(queue: &JobQueue, id: &str, needed: &str, verb: &str) -> String {
    match queue.get(id).await {
        Ok(Some(job)) => format!(
            "{id:?} is {}, not {needed}: nothing was {verb}",
            format::state(job.state())
        ),
        Ok(None) => no_job(id),
        Err(err) => err.to_string(),
    }
}

async fn revive(queue: &JobQueue, id: &str, when: When, out: Out) -> Result<(), String> {
    if queue.revive(id, when).await.map_err(|e| e.to_string())? {
        out.print(
            || format!("revived {}", format::escape(id)),
            json!({ "id": id, "revived": true }),
        );
        return Ok(());
    }
    Err(why_unchanged(queue, id, "dead", "revived").await)
}

async fn revive_all_dead(queue: &JobQueue, when: When, out: Out) -> Result<(), String> {
    let revived = queue
        .revive_all_dead(when)
        .await
        .map_err(|e| e.to_string())?;
    out.print(
        || format!("revived {revived} dead jobs"),
        json!({ "revived": revived }),
    );
    Ok(())
}

async fn pause(queue: &JobQueue, paused: bool, out: Out) -> Result<(), String> {
    let done = if paused {
        queue.pause().await
    } else {
        queue.resume().await
    };
    done.map_err(|e| e.to_string())?;
    out.print(
        || match paused {
            true => "paused: no consumer claims a job until `wheel-jobs resume`".to_owned(),
            false => "resumed: consumers claim due jobs again".to_owned(),
        },
        json!({ "paused": paused }),
    );
    Ok(())
}

/// Samples the counts every `every`: on a terminal one line redrawn in place, otherwise a
/// line (or a JSON object) per sample, until `count` samples or Ctrl-C.
async fn watch(
    queue: &JobQueue,
    every: Duration,
    count: Option<u64>,
    out: Out,
) -> Result<(), String> {
    let redraw = !out.json && std::io::stdout().is_terminal();
    let mut previous: Option<(Instant, wheel_jobs::Counts)> = None;
    let mut taken = 0;
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    loop {
        let counts = queue.counts().await.map_err(|e| e.to_string())?;
        let now = Instant::now();
        if out.json {
            let mut sample = counts_json(&counts);
            sample["at"] = format::time(SystemTime::now()).into();
            println!("{sample}");
        } else {
            let rate = |f: fn(&wheel_jobs::Counts) -> u64| match &previous {
                Some((then, before)) => format::rate(
                    f(before),
                    f(&counts),
                    now.duration_since(*then).as_secs_f64(),
                ),
                None => "…".to_owned(),
            };
            let next = counts.next_due.map_or("none".to_owned(), format::time_text);
            let line = format!(
                "pending {} ({})  running {}  dead {} ({})  {}  next due {next}",
                counts.pending,
                rate(|c| c.pending),
                counts.running,
                counts.dead,
                rate(|c| c.dead),
                if counts.paused { "PAUSED" } else { "claiming" },
            );
            if redraw {
                // Back to the line's start, clear it, write the new one.
                print!("\r\x1b[2K{line}");
                let _ = std::io::stdout().flush();
            } else {
                println!("{line}");
            }
        }
        previous = Some((now, counts));
        taken += 1;
        if count.is_some_and(|count| taken >= count) {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = &mut stop => break,
        }
    }
    if redraw {
        println!();
    }
    Ok(())
}

async fn purge_dead(queue: &JobQueue, out: Out) -> Result<(), String> {
    let purged = queue.purge_dead().await.map_err(|e| e.to_string())?;
    out.print(
        || format!("purged {purged} dead jobs"),
        json!({ "purged": purged }),
    );
    Ok(())
}

/// `copy`'s two places, parsed (a bad one is a bad command line).
pub fn copy_places(command: &Command) -> Result<(Place, Place), String> {
    let Command::Copy {
        from,
        to,
        from_queue,
        to_queue,
        #[cfg(feature = "redis")]
        from_partitions,
        #[cfg(feature = "redis")]
        to_partitions,
    } = command
    else {
        unreachable!("copy_places is asked about copy only")
    };
    #[cfg(not(feature = "redis"))]
    let (from_partitions, to_partitions) = (&1, &1);
    let from = Place::parse("from", from, from_queue.as_deref(), *from_partitions)?;
    let to = Place::parse("to", to, to_queue.as_deref(), *to_partitions)?;
    Ok((from, to))
}

/// How `copy` opens both ends: with the largest `max_payload` there is, so that any job
/// an app could store (whatever limit it raised its own queue to) is copied. The limit
/// only checks what is written; it reserves nothing.
fn copy_builder() -> wheel_jobs::Builder {
    let mut builder = JobQueue::builder();
    builder.max_payload(wheel_jobs::MAX_PAYLOAD);
    builder
}

/// Copies `from` into `to` (`JobQueue::copy_to`), then closes both. A source on a server
/// must be paused: jobs that move while it is read could be missed. An embedded source
/// needs no pause: while this command holds its file, no app runs on it.
async fn copy(from: &Place, to: &Place, out: Out) -> Result<(), String> {
    let source = from
        .open(false, &copy_builder())
        .await
        .map_err(|err| format!("--from: {err}"))?;
    let copied = copy_from(&source, to, from.is_store(), out).await;
    let closed = source.close().await;
    copied?;
    closed.map_err(|err| format!("closing the source: {err}"))
}

async fn copy_from(source: &JobQueue, to: &Place, still: bool, out: Out) -> Result<(), String> {
    if !still
        && !source
            .counts()
            .await
            .map_err(|e| format!("--from: {e}"))?
            .paused
    {
        return Err(
            "the source queue is not paused: pause it (`wheel-jobs … pause`) and stop its \
             workers first, so that no job moves while it is copied"
                .to_owned(),
        );
    }
    let dest = to
        .open(true, &copy_builder())
        .await
        .map_err(|err| format!("--to: {err}"))?;
    let copied = source.copy_to(&dest).await;
    let closed = dest.close().await;
    let copied = copied.map_err(|err| {
        // A lost connection or a failed write passes; a job the destination refuses comes
        // back at every run, so running it again is no advice then.
        if err.is_unavailable() || err.is_storage() {
            format!("copying: {err} (what was copied stays: run the copy again to finish it)")
        } else {
            format!("copying: {err} (what was copied before it stays)")
        }
    })?;
    closed.map_err(|err| format!("closing the destination: {err}"))?;
    out.print(
        || {
            let mut text = format!(
                "copied {} jobs ({} already there)",
                copied.jobs, copied.existing
            );
            if copied.running > 0 {
                text.push_str(&format!(
                    ", {} of them running in the source: pending at their lease's end",
                    copied.running
                ));
            }
            text.push_str(&format!(
                "\ncopied {} recurring series ({} already there)",
                copied.series, copied.existing_series
            ));
            if copied.ended_series > 0 {
                text.push_str(&format!(
                    ", {} ended (no occurrence left) not copied",
                    copied.ended_series
                ));
            }
            text
        },
        json!({
            "jobs": copied.jobs,
            "existing": copied.existing,
            "running": copied.running,
            "series": copied.series,
            "existing_series": copied.existing_series,
            "ended_series": copied.ended_series,
        }),
    );
    Ok(())
}

/// The shortest token `serve` accepts: 16 random hex characters are 64 bits, beyond guessing
/// over HTTP.
const MIN_TOKEN_CHARS: usize = 16;

async fn serve(
    queue: &JobQueue,
    listen: std::net::SocketAddr,
    token: Option<String>,
    out: Out,
) -> Result<(), String> {
    let mut console = Console::new(queue.clone());
    match token {
        Some(token) if token.is_empty() => return Err("the token is empty".to_owned()),
        Some(token) if token.chars().count() < MIN_TOKEN_CHARS => {
            return Err(format!(
                "the token is {} characters, too short to resist guessing: give at least \
                 {MIN_TOKEN_CHARS} (for example `openssl rand -hex 16`)",
                token.chars().count()
            ))
        }
        Some(token) => {
            console.token(token);
        }
        None if listen.ip().is_loopback() => {}
        None => {
            return Err(format!(
                "{listen} is not a loopback address: anyone who reaches it could act on the \
                 queue; give --token (or WHEEL_JOBS_TOKEN)"
            ))
        }
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|err| format!("cannot listen on {listen}: {err}"))?;
    let url = format!(
        "http://{}/",
        listener.local_addr().map_err(|e| e.to_string())?
    );
    out.print(
        || format!("console: {url} (Ctrl-C to stop)"),
        json!({ "console": url }),
    );
    // The peer's address lets the console refuse token-less requests from elsewhere even
    // when they name a loopback `Host`.
    let app = console
        .router()
        .into_make_service_with_connect_info::<std::net::SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(stop_signal())
        .await
        .map_err(|err| format!("serving the console: {err}"))
}

/// Ctrl-C, or SIGTERM on Unix (a service manager's stop).
async fn stop_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}
