//! The subcommands, each a few `JobQueue` calls, printing text or one JSON object.

use std::time::SystemTime;

use serde_json::{json, Value};
use wheel_jobs::console::Console;
use wheel_jobs::{JobQueue, Scheduled, When};

use crate::format::{self, job_json, job_text};
use crate::{Cli, Command};

/// Runs the command line's command, then closes the queue (on the embedded store, that
/// releases the file for the app).
pub async fn run(cli: Cli) -> Result<(), String> {
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
        Command::Get { id } => get(&queue, &id, out).await,
        Command::Schedule { id, delay, at, .. } => {
            let when = match (delay, at) {
                (Some(delay), _) => When::After(delay),
                (None, Some(at)) => When::At(at),
                (None, None) => unreachable!("clap requires --in or --at"),
            };
            schedule(&queue, &id, when, payload, out).await
        }
        Command::Cancel { id } => cancel(&queue, &id, out).await,
        Command::PurgeDead => purge_dead(&queue, out).await,
        Command::Serve { listen, token } => serve(&queue, listen, token, out).await,
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
    let pending = queue.pending().await.map_err(|e| e.to_string())?;
    let running = queue.running().await.map_err(|e| e.to_string())?;
    out.print(
        || format!("pending  {pending}\nrunning  {running}"),
        json!({ "pending": pending, "running": running }),
    );
    Ok(())
}

async fn get(queue: &JobQueue, id: &str, out: Out) -> Result<(), String> {
    match queue.get(id).await.map_err(|e| e.to_string())? {
        Some(job) => {
            out.print(|| job_text(id, &job, SystemTime::now()), job_json(id, &job));
            Ok(())
        }
        None => Err(no_job(id)),
    }
}

fn no_job(id: &str) -> String {
    format!("no job {id:?} (never scheduled, or cancelled, acked or removed)")
}

async fn schedule(
    queue: &JobQueue,
    id: &str,
    when: When,
    payload: Vec<u8>,
    out: Out,
) -> Result<(), String> {
    let outcome = queue
        .schedule(id, when, payload)
        .await
        .map_err(|e| e.to_string())?;
    let (word, text) = match outcome {
        Scheduled::Created => ("created", format!("created {id}")),
        Scheduled::Exists => ("exists", format!("exists {id} (left unchanged)")),
    };
    out.print(|| text, json!({ "id": id, "outcome": word }));
    Ok(())
}

async fn cancel(queue: &JobQueue, id: &str, out: Out) -> Result<(), String> {
    if queue.cancel(id).await.map_err(|e| e.to_string())? {
        out.print(
            || format!("cancelled {id}"),
            json!({ "id": id, "cancelled": true }),
        );
        return Ok(());
    }
    // Only to say why: the state may have moved on since the cancel.
    match queue.get(id).await.map_err(|e| e.to_string())? {
        Some(job) => Err(format!(
            "{id:?} is {}, not pending: nothing was cancelled",
            format::state(job.state())
        )),
        None => Err(no_job(id)),
    }
}

async fn purge_dead(queue: &JobQueue, out: Out) -> Result<(), String> {
    let purged = queue.purge_dead().await.map_err(|e| e.to_string())?;
    out.print(
        || format!("purged {purged} dead jobs"),
        json!({ "purged": purged }),
    );
    Ok(())
}

async fn serve(
    queue: &JobQueue,
    listen: std::net::SocketAddr,
    token: Option<String>,
    out: Out,
) -> Result<(), String> {
    let mut console = Console::new(queue.clone());
    match token {
        Some(token) if token.is_empty() => return Err("the token is empty".to_owned()),
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
    axum::serve(listener, console.router())
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
