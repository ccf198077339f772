//! `serve`: the console over real HTTP on 127.0.0.1, its token, its refusals, and a clean
//! stop that releases the store.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::run::{binary, on, Place};
use crate::support::embedded;

/// A `wheel-jobs serve` child on 127.0.0.1 and the address it printed.
pub struct Served {
    child: tokio::process::Child,
    addr: String,
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Served {
    /// Starts `serve --listen 127.0.0.1:0 --json <extra>` on `place`, with `env` set.
    pub async fn start_with(place: &impl Place, extra: &[&str], env: &[(&str, &str)]) -> Served {
        let mut child = binary()
            .args(place.args())
            .args(["serve", "--listen", "127.0.0.1:0", "--json"])
            .args(extra)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .await
            .unwrap();
        let printed: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|err| panic!("serve printed {line:?}: {err}"));
        let url = printed["console"].as_str().unwrap();
        let addr = url
            .strip_prefix("http://")
            .and_then(|rest| rest.strip_suffix('/'))
            .unwrap()
            .to_owned();
        Served { child, addr }
    }

    pub async fn start(place: &impl Place, extra: &[&str]) -> Served {
        Served::start_with(place, extra, &[]).await
    }

    /// `GET path` with an optional `Authorization` value, over a connection of its own.
    pub async fn get(&self, path: &str, authorization: Option<&str>) -> Answer {
        let auth = authorization.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
        self.get_with(path, &auth).await
    }

    /// `GET path` with `head` (whole `Name: value\r\n` lines) among its headers.
    pub async fn get_with(&self, path: &str, head: &str) -> Answer {
        let mut stream = tokio::net::TcpStream::connect(&self.addr).await.unwrap();
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\n{head}Connection: close\r\n\r\n",
            self.addr
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        Answer {
            status,
            head: head.to_owned(),
            body: body.to_owned(),
        }
    }

    /// SIGTERM, as a service manager stops it: it must exit 0 having closed the queue.
    pub async fn stop(mut self) {
        let pid = self.child.id().unwrap().to_string();
        let killed = tokio::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .await
            .unwrap();
        assert!(killed.success());
        let status = self.child.wait().await.unwrap();
        assert!(status.success(), "serve exited with {status:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_is_held_while_serving() {
    let place = embedded::harness();
    on(&place, &["schedule", "a", "--in", "1h"]).await.ok();
    let server = Served::start(&place, &[]).await;
    let refused = on(&place, &["stats"]).await;
    let line = refused.failed(1);
    assert!(line.contains("is open in another process"), "{line}");
    assert!(line.contains("wheel_jobs::console::router"), "{line}");
    server.stop().await;
    assert_eq!(on(&place, &["stats", "--json"]).await.json()["pending"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_guards_every_request() {
    let place = embedded::harness();
    on(&place, &["schedule", "a", "--in", "1h"]).await.ok();
    for (extra, env) in [
        (vec!["--token", "s3cret-s3cret-s3cret"], vec![]),
        (vec![], vec![("WHEEL_JOBS_TOKEN", "s3cret-s3cret-s3cret")]),
    ] {
        let server = Served::start_with(&place, &extra, &env).await;
        for auth in [None, Some("Bearer wrong")] {
            let refused = server.get("/", auth).await;
            assert_eq!(refused.status, 401, "{refused:?}");
            assert!(
                refused.head.contains("www-authenticate: Basic"),
                "{refused:?}"
            );
        }
        assert_eq!(
            server
                .get("/", Some("Bearer s3cret-s3cret-s3cret"))
                .await
                .status,
            200
        );
        // base64("ops:s3cret-s3cret-s3cret")
        assert_eq!(
            server
                .get("/job?id=a", Some("Basic b3BzOnMzY3JldC1zM2NyZXQtczNjcmV0"))
                .await
                .status,
            200
        );
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_a_proxied_request_is_refused() {
    let place = embedded::harness();
    on(&place, &["schedule", "a", "--in", "1h"]).await.ok();
    let server = Served::start(&place, &[]).await;
    assert_eq!(server.get("/", None).await.status, 200);
    // A proxy on this machine connects from 127.0.0.1 with the console's own `Host`.
    let proxied = server
        .get_with("/", "X-Forwarded-For: 203.0.113.7\r\n")
        .await;
    assert_eq!(proxied.status, 403, "{proxied:?}");
    assert!(!proxied.body.contains("csrf"), "{proxied:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_an_open_address_without_a_token() {
    let place = embedded::harness();
    on(&place, &["schedule", "a", "--in", "1h"]).await.ok();
    // 192.0.2.1 is TEST-NET-1: refused before any bind, and with a token the bind fails
    // (not an address of this host), so nothing is ever exposed.
    assert_eq!(
        on(&place, &["serve", "--listen", "192.0.2.1:8080"])
            .await
            .failed(1),
        "wheel-jobs: 192.0.2.1:8080 is not a loopback address: anyone who reaches it could \
         act on the queue; give --token (or WHEEL_JOBS_TOKEN)"
    );
    let line = on(
        &place,
        &[
            "serve",
            "--listen",
            "192.0.2.1:8080",
            "--token",
            "a-long-enough-token",
        ],
    )
    .await;
    assert!(
        line.failed(1)
            .starts_with("wheel-jobs: cannot listen on 192.0.2.1:8080: "),
        "{line:?}"
    );
    assert_eq!(
        on(&place, &["serve", "--token", ""]).await.failed(1),
        "wheel-jobs: the token is empty"
    );
    // A short token is refused on any address, before any bind.
    for listen in ["192.0.2.1:8080", "127.0.0.1:0"] {
        assert_eq!(
            on(&place, &["serve", "--listen", listen, "--token", "short"])
                .await
                .failed(1),
            "wheel-jobs: the token is 5 characters, too short to resist guessing: give at \
             least 16 (for example `openssl rand -hex 16`)"
        );
    }
}
