//! A PostgreSQL server of the tests' own (Debian's `postgresql`), and the PostgreSQL
//! backend's harness on it.
//!
//! Ground rules:
//!
//! - The server lives in a temporary directory: its data directory `data/`, its log `log`
//!   and its unix socket (`.s.PGSQL.<port>`) at the top; it also listens on a free TCP port
//!   of 127.0.0.1. `fsync` and `synchronous_commit` keep their defaults (on): a commit the
//!   server acknowledged survives a kill -9 of the server. Authentication is `trust` for the
//!   superuser `postgres`. [`PgServer::start_tls`] adds `ssl=on` with a certificate from
//!   `tls.rs`'s test CA, copied into the data directory (the server wants its key file
//!   owned by it and private), and takes TCP connections only over TLS, other roles
//!   only with their password.
//! - `initdb` refuses to run as root: as root, the directory belongs to the `postgres` user
//!   and `initdb` and `postgres` run through `runuser -u postgres --`; otherwise they run as
//!   the current user. Our child is then `runuser`, not the postmaster: signals go to the
//!   postmaster's pid as `postmaster.pid` records it.
//! - The wait for the server is bounded ([`START_TIMEOUT`]): one that does not come up fails
//!   the test with the tail of its log. (`initdb --no-sync` skips only initdb's own final
//!   fsync of the new cluster; the server fsyncs as usual.)
//! - A watchdog (`sh`) holds the read end of a pipe from this process. Dropping a server
//!   SIGKILLs it (as `redis.rs` does) and closes the pipe, and the watchdog removes the
//!   directory; when the test binary exits, which never drops a `static`, the pipe closes
//!   too and the watchdog stops the server (immediate shutdown, then SIGKILL) first.
//!
//! Unlike `redis.rs` (a server per test), `initdb` costs seconds, so the suite's tests share
//! one server per test binary ([`shared`]), each on a queue of its own ([`harness`]); a test
//! that kills, stops or reconfigures the server starts its own ([`PgServer::start`],
//! [`harness_on`]).

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use wheel_jobs::{Builder, Error, JobQueue};

use super::tls::TestCa;
use super::{free_port, BoxFuture, Harness};

/// How long a start (`initdb`, then the server accepting connections, crash recovery
/// included) may take before the test fails.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Connections the server accepts: the shared server serves every test of the binary at
/// once, each with a pool of its own.
const MAX_CONNECTIONS: &str = "max_connections=500";

/// [`PgServer::start_tls`]'s `pg_hba.conf`: the unix socket (`psql`) trusted; TCP only
/// over TLS (`hostssl`; no line takes a connection without it), `postgres` trusted, every
/// other role by password (SCRAM).
const TLS_HBA: &str = "\
local all all trust
hostssl all postgres 127.0.0.1/32 trust
hostssl all all 127.0.0.1/32 scram-sha-256
";

/// A PostgreSQL server of our own in a temporary directory, stopped (and the directory
/// removed) on drop.
pub struct PgServer {
    dir: PathBuf,
    port: u16,
    /// `postgres -c` settings beyond ours, kept across restarts.
    settings: Vec<String>,
    /// The process we started (`postgres`, or `runuser` running it).
    child: Option<Child>,
    /// Its read end is the watchdog's stdin: dropping this stops the server.
    watchdog_pipe: Option<ChildStdin>,
    watchdog: Option<Child>,
}

impl PgServer {
    /// A new server with the default settings.
    pub fn start() -> PgServer {
        PgServer::start_with(&[])
    }

    /// A new server with `settings` (`name=value`, as `postgres -c` takes them).
    pub fn start_with(settings: &[&str]) -> PgServer {
        let mut server = PgServer::init(settings);
        server.restart();
        server
    }

    /// A new server that serves TLS (`ssl=on`) with the server certificate `ca` signed
    /// (for `localhost` and 127.0.0.1), and on its TCP port only over TLS ([`TLS_HBA`]):
    /// `postgres` without a password, any other role with its password.
    pub fn start_tls(ca: &TestCa) -> PgServer {
        let mut server = PgServer::init(&[
            "ssl=on",
            // Relative to the data directory, where they are copied.
            "ssl_cert_file=server.crt",
            "ssl_key_file=server.key",
        ]);
        let data = server.data();
        let key = data.join("server.key");
        std::fs::copy(ca.dir.path().join("server.crt"), data.join("server.crt"))
            .expect("copy the certificate");
        std::fs::copy(ca.dir.path().join("server.key"), &key).expect("copy the key");
        // The server refuses a key file others may read.
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        // Replaces initdb's file (whose owner it keeps).
        std::fs::write(data.join("pg_hba.conf"), TLS_HBA).expect("pg_hba.conf");
        if as_root() {
            let status = Command::new("chown")
                .arg("postgres:")
                .arg(data.join("server.crt"))
                .arg(&key)
                .status()
                .expect("chown");
            assert!(status.success(), "chown postgres: the certificate and key");
        }
        server.restart();
        server
    }

    /// A new data directory (initdb), its server not started yet.
    fn init(settings: &[&str]) -> PgServer {
        let dir = super::temp_dir().keep();
        let watch = r#"cat >/dev/null
            pm=$(head -n 1 "$1/data/postmaster.pid" 2>/dev/null)
            if [ -n "$pm" ] && [ "$(cat "/proc/$pm/comm" 2>/dev/null)" = postgres ] &&
                kill -QUIT "$pm" 2>/dev/null; then
                i=0
                while kill -0 "$pm" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
                kill -KILL "$pm" 2>/dev/null
            fi
            rm -rf "$1""#;
        let mut watchdog = Command::new("sh")
            .args(["-c", watch, "pg-watchdog"])
            .arg(&dir)
            .stdin(Stdio::piped())
            .spawn()
            .expect("sh (the server's watchdog)");
        let server = PgServer {
            dir,
            port: free_port(),
            settings: settings.iter().map(|s| s.to_string()).collect(),
            child: None,
            watchdog_pipe: watchdog.stdin.take(),
            watchdog: Some(watchdog),
        };
        if as_root() {
            let status = Command::new("chown")
                .arg("postgres:")
                .arg(&server.dir)
                .status()
                .expect("chown");
            assert!(status.success(), "chown postgres: {}", server.dir.display());
        }
        let out = server
            .command("initdb")
            .args(["--username=postgres", "--auth=trust", "--encoding=UTF8"])
            .args(["--locale=C", "--no-sync", "--pgdata"])
            .arg(server.data())
            .output()
            .expect("initdb");
        assert!(
            out.status.success(),
            "initdb failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        server
    }

    /// The temporary directory: `data/`, `log` and the unix socket.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log(&self) -> PathBuf {
        self.dir.join("log")
    }

    /// The TCP port of 127.0.0.1 it listens on (also the number in its socket's name).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of its unix socket, as sqlx and `psql` take it.
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@localhost:{}/postgres?host={}",
            self.port,
            self.dir.display()
        )
    }

    /// The URL of its TCP port on 127.0.0.1.
    pub fn tcp_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// `program` of the server's version, run as the user that owns the directory.
    fn command(&self, program: &str) -> Command {
        let path = bin_dir().join(program);
        if as_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(path);
            command
        } else {
            Command::new(path)
        }
    }

    /// Starts the server (again, on the same data directory, socket and port: after a kill,
    /// this is crash recovery) and waits until it accepts connections.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "the server is running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log())
            .expect("the server's log");
        let log_start = log.metadata().map_or(0, |m| m.len());
        let mut command = self.command("postgres");
        command
            .arg("-D")
            .arg(self.data())
            .arg("-k")
            .arg(&self.dir)
            .args(["-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1", "-c", MAX_CONNECTIONS]);
        for setting in &self.settings {
            command.args(["-c", setting]);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the server's log"))
            .stderr(log)
            .spawn()
            .expect("postgres");
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            // `pg_isready` answers 0 once the server accepts connections (1 while it starts
            // or recovers).
            let ready = Command::new(bin_dir().join("pg_isready"))
                .arg("-q")
                .arg("-h")
                .arg(&self.dir)
                .args(["-p", &self.port.to_string(), "-t", "1"])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return;
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() >= deadline {
                let why = match exited {
                    Some(status) => format!("exited ({status})"),
                    None => format!("did not accept connections within {START_TIMEOUT:?}"),
                };
                self.kill();
                panic!(
                    "postgres in {} {why}; the end of its log:\n{}",
                    self.dir.display(),
                    tail(&self.log(), log_start, 4096)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The postmaster's pid as it records it, if that process runs `postgres`.
    fn postmaster(&self) -> Option<String> {
        let text = std::fs::read_to_string(self.data().join("postmaster.pid")).ok()?;
        let pid = text.lines().next()?.trim().to_owned();
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        (comm.trim() == "postgres" && alive(&pid)).then_some(pid)
    }

    /// SIGKILL of the postmaster and of every process it started, at once, as a crash of the
    /// machine would stop them: nothing is flushed, no checkpoint. [`restart`](Self::restart)
    /// recovers from the write-ahead log.
    pub fn kill(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let mut pids = Vec::new();
        if let Some(pm) = self.postmaster() {
            // Stopped, it forks no new backend between the listing and the kill.
            kill(&["-STOP", &pm]);
            let children = std::fs::read_to_string(format!("/proc/{pm}/task/{pm}/children"))
                .unwrap_or_default();
            pids.extend(children.split_whitespace().map(str::to_owned));
            pids.push(pm);
            let mut args = vec!["-KILL".to_owned()];
            args.extend(pids.iter().cloned());
            kill(&args.iter().map(String::as_str).collect::<Vec<_>>());
        } else {
            // It has not written its pid yet, or has exited.
            let _ = child.kill();
        }
        // Our child is the postmaster, or `runuser`, which exits once it has reaped the
        // postmaster: after this the postmaster's pid names no process, so the next start
        // takes over its lock files. `runuser` stops itself when its child stops, as a
        // shell's job would: it reaps nothing until continued.
        kill(&["-CONT", &child.id().to_string()]);
        let _ = child.wait();
        // Nor does the next start begin while a backend still holds the old shared memory.
        let deadline = Instant::now() + START_TIMEOUT;
        while pids.iter().any(|p| alive(p)) {
            assert!(Instant::now() < deadline, "postgres survived SIGKILL");
            std::thread::sleep(Duration::from_millis(5));
        }
        // A stale pid could name someone else's process by the time the watchdog reads it.
        let _ = std::fs::remove_file(self.data().join("postmaster.pid"));
    }

    /// [`kill`](Self::kill), then [`restart`](Self::restart) on the same data directory.
    pub fn kill_and_restart(&mut self) {
        self.kill();
        self.restart();
    }

    /// Sends `signal` (`-STOP`, `-CONT`) to the postmaster and every process it started: a
    /// server that hangs without closing its connections.
    pub fn signal(&self, signal: &str) {
        let pm = self.postmaster().expect("a running server");
        let children =
            std::fs::read_to_string(format!("/proc/{pm}/task/{pm}/children")).unwrap_or_default();
        // `runuser`, if it runs the postmaster, stops and continues with it.
        let ours = self
            .child
            .as_ref()
            .expect("a running server")
            .id()
            .to_string();
        let mut args = vec![signal, pm.as_str(), ours.as_str()];
        args.extend(children.split_whitespace());
        kill(&args);
    }

    /// `psql` on the unix socket running `sql`; its output (unaligned, tuples only), trimmed.
    pub fn psql(&self, sql: &str) -> String {
        let out = Command::new(bin_dir().join("psql"))
            .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d"])
            .arg(self.url())
            .args(["-c", sql])
            .output()
            .expect("psql");
        assert!(
            out.status.success(),
            "psql -c {sql:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.kill();
        // Closing the pipe lets the watchdog remove the directory.
        drop(self.watchdog_pipe.take());
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.wait();
        }
    }
}

/// `kill <args>`; processes already gone are not an error.
fn kill(args: &[&str]) {
    let _ = Command::new("kill")
        .args(args)
        .stderr(Stdio::null())
        .status()
        .expect("kill");
}

/// Whether `pid` names a process that has not exited (a zombie has).
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()
                .map(|r| !r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// The last `max` bytes written to `path` from `from` on.
fn tail(path: &Path, from: u64, max: u64) -> String {
    let Ok(mut file) = std::fs::File::open(path) else {
        return format!("({} cannot be read)", path.display());
    };
    let len = file.metadata().map_or(0, |m| m.len());
    let start = from.max(len.saturating_sub(max));
    let mut text = String::new();
    let _ = file.seek(SeekFrom::Start(start));
    let _ = file.read_to_string(&mut text);
    text
}

fn as_root() -> bool {
    static ROOT: OnceLock<bool> = OnceLock::new();
    *ROOT.get_or_init(|| {
        let out = Command::new("id").arg("-u").output().expect("id -u");
        String::from_utf8_lossy(&out.stdout).trim() == "0"
    })
}

/// `/usr/lib/postgresql/<version>/bin`, the newest version installed.
fn bin_dir() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let versions = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let version: u32 = e.file_name().to_str()?.parse().ok()?;
                e.path().join("bin/initdb").exists().then_some(version)
            })
            .max();
        match versions {
            Some(v) => PathBuf::from(format!("/usr/lib/postgresql/{v}/bin")),
            None => panic!(
                "no /usr/lib/postgresql/<version>/bin/initdb: the postgres tests start their \
                 own server; install it with `apt-get install postgresql` (Debian/Ubuntu)"
            ),
        }
    })
}

/// The server every test of this binary shares (started by the first caller); tests keep
/// apart by queue names.
pub fn shared() -> &'static PgServer {
    static SERVER: OnceLock<PgServer> = OnceLock::new();
    SERVER.get_or_init(PgServer::start)
}

/// A queue name no other test of this binary uses.
pub fn fresh_queue() -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!("test{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The PostgreSQL backend: a queue of its own on a server.
pub struct PgHarness {
    url: String,
    queue: String,
}

impl PgHarness {
    /// The URL its queues open.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The queue it opens.
    pub fn queue(&self) -> &str {
        &self.queue
    }
}

/// A fresh queue on the shared server (its unix socket).
pub fn harness() -> PgHarness {
    PgHarness {
        url: shared().url(),
        queue: fresh_queue(),
    }
}

/// A fresh queue on `server` (a test's own, to kill or stop), on its unix socket.
pub fn harness_on(server: &PgServer) -> PgHarness {
    PgHarness {
        url: server.url(),
        queue: fresh_queue(),
    }
}

impl Harness for PgHarness {
    fn open<'a>(&'a self, builder: &'a Builder) -> BoxFuture<'a, Result<JobQueue, Error>> {
        Box::pin(async move { builder.postgres(&self.url, &self.queue).await })
    }
}
