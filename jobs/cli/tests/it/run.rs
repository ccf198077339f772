//! Running the binary against a harness's queue, and reading what it printed.

use std::process::Stdio;

use tokio::io::AsyncWriteExt;

use crate::support::embedded::EmbeddedHarness;
use crate::support::Harness;

/// A harness the binary can be pointed at.
pub trait Place: Harness {
    /// The options that name the harness's queue.
    fn args(&self) -> Vec<String>;

    /// The options that name, as the end `end` (`from`, `to`) of a `copy`, the harness's
    /// queue, or with `other` an empty queue beside it on the same backend.
    fn copy_end(&self, end: &str, other: bool) -> Vec<String>;

    /// Whether it is an embedded store.
    fn is_store(&self) -> bool {
        false
    }
}

impl Place for EmbeddedHarness {
    fn args(&self) -> Vec<String> {
        vec!["--store".into(), self.path().display().to_string()]
    }

    fn copy_end(&self, end: &str, other: bool) -> Vec<String> {
        let path = match other {
            true => self.dir.path().join("other.redb"),
            false => self.path(),
        };
        vec![format!("--{end}"), path.display().to_string()]
    }

    fn is_store(&self) -> bool {
        true
    }
}

/// A copy end on a server: its URL and queue.
#[cfg(any(feature = "redis", feature = "postgres"))]
fn server_end(end: &str, url: &str, queue: &str, other: bool) -> Vec<String> {
    let queue = match other {
        true => format!("{queue}_other"),
        false => queue.to_owned(),
    };
    vec![
        format!("--{end}"),
        url.to_owned(),
        format!("--{end}-queue"),
        queue,
    ]
}

#[cfg(feature = "redis")]
impl Place for crate::support::redis::RedisHarness {
    fn args(&self) -> Vec<String> {
        // The harness's queue: one partition, named "test".
        ["--redis", self.url(), "--queue", "test"]
            .map(str::to_owned)
            .to_vec()
    }

    fn copy_end(&self, end: &str, other: bool) -> Vec<String> {
        server_end(end, self.url(), "test", other)
    }
}

#[cfg(feature = "postgres")]
impl Place for crate::support::postgres::PgHarness {
    fn args(&self) -> Vec<String> {
        ["--postgres", self.url(), "--queue", self.queue()]
            .map(str::to_owned)
            .to_vec()
    }

    fn copy_end(&self, end: &str, other: bool) -> Vec<String> {
        server_end(end, self.url(), self.queue(), other)
    }
}

/// What one run of the binary did.
#[derive(Debug)]
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// The run succeeded: its standard output.
    #[track_caller]
    pub fn ok(&self) -> &str {
        assert_eq!(self.code, Some(0), "{self:?}");
        &self.stdout
    }

    /// The run succeeded and printed one JSON object.
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.ok()).unwrap_or_else(|err| panic!("{err}: {self:?}"))
    }

    /// The run failed with `code` and one line on stderr: that line.
    #[track_caller]
    pub fn failed(&self, code: i32) -> &str {
        assert_eq!(self.code, Some(code), "{self:?}");
        assert_eq!(self.stdout, "", "{self:?}");
        assert_eq!(self.stderr.lines().count(), 1, "one line: {self:?}");
        let line = self.stderr.trim_end();
        assert!(line.starts_with("wheel-jobs: "), "{line}");
        line
    }
}

pub fn binary() -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_wheel-jobs"));
    command.env_remove("WHEEL_JOBS_TOKEN").kill_on_drop(true);
    command
}

/// Runs `wheel-jobs <args>`.
pub async fn run(args: &[&str]) -> Ran {
    run_with_input(args, b"").await
}

/// Runs `wheel-jobs <args>` with `input` on its standard input.
pub async fn run_with_input(args: &[&str], input: &[u8]) -> Ran {
    let mut child = binary()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the wheel-jobs binary runs");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).await.unwrap();
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    Ran {
        code: output.status.code(),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

/// Runs `wheel-jobs <the place's options> <args>`.
pub async fn on(place: &impl Place, args: &[&str]) -> Ran {
    let mut all = place.args();
    all.extend(args.iter().map(|a| a.to_string()));
    run(&all.iter().map(String::as_str).collect::<Vec<_>>()).await
}
