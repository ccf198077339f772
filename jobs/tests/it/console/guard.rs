//! Who may use the console (token, host), what every response carries, and mounting under
//! a prefix. The guard does not depend on the backend: these run on the embedded store.

use std::time::Duration;

use axum::http::StatusCode;
use wheel_jobs::console::{self, Console};
use wheel_jobs::JobQueue;

use super::client::Client;
use crate::support::embedded::{self, EmbeddedHarness};

const TOKEN: &str = "s3cret-token";

/// base64("anyone:s3cret-token"): how a browser sends the token after asking for it.
const BASIC: &str = "Basic YW55b25lOnMzY3JldC10b2tlbg==";

/// An embedded queue with a pending job per id.
async fn pending(h: &EmbeddedHarness, ids: &[&str]) -> JobQueue {
    let queue = JobQueue::open(h.path()).await.unwrap();
    for id in ids {
        queue
            .schedule(id, Duration::from_secs(60), "")
            .await
            .unwrap();
    }
    queue
}

#[tokio::test]
async fn a_token_is_needed_on_every_route_from_every_host() {
    let h = embedded::harness();
    let queue = pending(&h, &["a", "b"]).await;
    let mut client = Client::new(Console::new(queue.clone()).token(TOKEN).router());
    client.host = "jobs.example.com";

    for authorization in [
        None,
        Some("Bearer wrong"),
        Some("Basic d3Jvbmc6d3Jvbmc="),
        Some(TOKEN),
    ] {
        client.authorization = authorization.map(str::to_owned);
        for uri in ["/", "/job?id=a", "/assets/console.css", "/no/such/page"] {
            let refused = client.get(uri).await;
            assert_eq!(
                refused.status,
                StatusCode::UNAUTHORIZED,
                "{uri} {authorization:?}"
            );
            assert_eq!(
                refused.headers["www-authenticate"],
                r#"Basic realm="wheel-jobs", charset="UTF-8""#
            );
        }
        let refused = client.post("/job/cancel", &[("id", "a")]).await;
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(queue.pending().await.unwrap(), 2);

    for (authorization, id) in [(format!("Bearer {TOKEN}"), "a"), (BASIC.to_owned(), "b")] {
        client.authorization = Some(authorization);
        let page = client.get("/").await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        let csrf = page.csrf();
        assert_eq!(
            client.get(&format!("/job?id={id}")).await.status,
            StatusCode::OK
        );
        assert_eq!(
            client.get("/assets/console.js").await.status,
            StatusCode::OK
        );
        let done = client
            .post("/job/cancel", &[("csrf", &csrf), ("id", id)])
            .await;
        assert_eq!(done.location(), format!("/job?id={id}&done=cancelled"));
    }
    assert_eq!(queue.pending().await.unwrap(), 0);
    queue.close().await.unwrap();
}

/// Replicas behind a load balancer (here two routers) share the console token, so a form
/// one rendered is accepted by the other; another token's forms are not.
#[tokio::test]
async fn routers_with_one_token_accept_each_others_forms() {
    let h = embedded::harness();
    let queue = pending(&h, &["a", "b"]).await;
    let client = |token: &str| {
        let mut client = Client::new(Console::new(queue.clone()).token(token).router());
        client.authorization = Some(format!("Bearer {token}"));
        client
    };
    let (one, two, other) = (client(TOKEN), client(TOKEN), client("another-token"));
    let csrf = one.get("/").await.csrf();
    assert_eq!(two.get("/").await.csrf(), csrf);
    assert!(!csrf.is_empty() && !csrf.contains(TOKEN));
    let done = two
        .post("/job/cancel", &[("csrf", &csrf), ("id", "a")])
        .await;
    assert_eq!(done.location(), "/job?id=a&done=cancelled");
    let refused = other
        .post("/job/cancel", &[("csrf", &csrf), ("id", "b")])
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(queue.pending().await.unwrap(), 1);

    // Without a token each router has its own random one.
    let (one, two) = (
        Client::new(console::router(queue.clone())),
        Client::new(console::router(queue.clone())),
    );
    assert_ne!(one.get("/").await.csrf(), two.get("/").await.csrf());
    queue.close().await.unwrap();
}

#[tokio::test]
async fn without_a_token_only_loopback_hosts_are_served() {
    let h = embedded::harness();
    let queue = JobQueue::open(h.path()).await.unwrap();
    let mut client = Client::new(console::router(queue.clone()));
    for host in [
        "127.0.0.1:8080",
        "localhost:3000",
        "[::1]:8080",
        "localhost",
    ] {
        client.host = host;
        assert_eq!(client.get("/").await.status, StatusCode::OK, "{host}");
    }
    // A page elsewhere that rebinds its own name to 127.0.0.1 still sends its name.
    for host in [
        "attacker.example",
        "attacker.example:8080",
        "192.168.1.5:8080",
    ] {
        client.host = host;
        let refused = client.get("/").await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{host}");
        assert!(
            refused.body.contains("only requests to a loopback host"),
            "{}",
            refused.body
        );
    }

    let mut client = Client::new(Console::new(queue.clone()).allow_any_host().router());
    client.host = "jobs.internal";
    assert_eq!(client.get("/").await.status, StatusCode::OK);
    queue.close().await.unwrap();
}

#[tokio::test]
async fn without_a_token_a_remote_peer_or_a_proxied_request_is_refused() {
    let h = embedded::harness();
    let queue = JobQueue::open(h.path()).await.unwrap();
    let mut client = Client::new(console::router(queue.clone()));
    for peer in ["127.0.0.1:50000", "[::1]:50000", "[::ffff:127.0.0.1]:50000"] {
        client.peer = Some(peer.parse().unwrap());
        assert_eq!(client.get("/").await.status, StatusCode::OK, "{peer}");
    }
    // Whatever `Host` it sends, a client elsewhere is not local.
    for peer in ["192.168.1.5:50000", "[2001:db8::1]:50000"] {
        client.peer = Some(peer.parse().unwrap());
        let refused = client.get("/").await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{peer}");
        assert!(
            refused.body.contains("from this machine"),
            "{}",
            refused.body
        );
        assert!(!refused.body.contains("csrf"), "{}", refused.body);
    }
    // A proxy on this machine connects from loopback on anyone's behalf.
    client.peer = Some("127.0.0.1:50000".parse().unwrap());
    for header in ["forwarded", "x-forwarded-for", "x-real-ip"] {
        client.headers = vec![(header, "for=203.0.113.7")];
        let refused = client.get("/").await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{header}");
        assert!(
            refused.body.contains("give the console a token"),
            "{}",
            refused.body
        );
        let refused = client.post("/pause", &[]).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{header}");
    }
    assert!(!queue.counts().await.unwrap().paused);

    // With a token, the token is what counts, proxied or not.
    let mut client = Client::new(Console::new(queue.clone()).token(TOKEN).router());
    client.peer = Some("192.168.1.5:50000".parse().unwrap());
    client.headers = vec![("x-forwarded-for", "203.0.113.7")];
    client.authorization = Some(format!("Bearer {TOKEN}"));
    assert_eq!(client.get("/").await.status, StatusCode::OK);
    queue.close().await.unwrap();
}

#[tokio::test]
async fn every_response_forbids_framing_inline_scripts_and_caching() {
    let h = embedded::harness();
    let queue = JobQueue::open(h.path()).await.unwrap();
    let client = Client::new(console::router(queue.clone()));
    for uri in ["/", "/job?id=nobody", "/job"] {
        let page = client.get(uri).await;
        let csp = page.headers["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("script-src 'self'"), "{csp}");
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert_eq!(page.headers["x-frame-options"], "DENY");
        assert_eq!(page.headers["x-content-type-options"], "nosniff");
        assert_eq!(page.headers["cache-control"], "no-store");
        assert!(!page.body.contains("<script>"), "no inline script: {uri}");
    }
    let css = client.get("/assets/console.css").await;
    assert_eq!(css.headers["content-type"], "text/css; charset=utf-8");
    assert!(css.body.contains(".count"));
    let js = client.get("/assets/console.js").await;
    assert_eq!(js.headers["content-type"], "text/javascript; charset=utf-8");
    queue.close().await.unwrap();
}

#[tokio::test]
async fn nested_under_a_prefix_links_and_redirects_keep_it() {
    let h = embedded::harness();
    let queue = pending(&h, &["a"]).await;
    let app = axum::Router::new().nest("/ops/jobs", console::router(queue.clone()));
    let client = Client::new(app);
    let page = client.get("/ops/jobs").await;
    assert_eq!(page.status, StatusCode::OK);
    for link in [
        r#"href="/ops/jobs" class="current">Overview"#,
        r#"href="/ops/jobs/jobs/dead">Dead"#,
        r#"href="/ops/jobs/assets/console.css""#,
        r#"action="/ops/jobs/job""#,
        r#"action="/ops/jobs/dead/purge""#,
    ] {
        assert!(page.body.contains(link), "{link} not in {}", page.body);
    }
    assert_eq!(
        client.get("/ops/jobs/assets/console.js").await.status,
        StatusCode::OK
    );
    let page = client.get("/ops/jobs/job?id=a").await;
    let csrf = page.csrf();
    let done = client
        .post("/ops/jobs/job/cancel", &[("csrf", &csrf), ("id", "a")])
        .await;
    assert_eq!(done.location(), "/ops/jobs/job?id=a&done=cancelled");
    let csrf = client.get("/ops/jobs").await.csrf();
    let done = client
        .post("/ops/jobs/dead/purge", &[("csrf", &csrf)])
        .await;
    assert_eq!(done.location(), "/ops/jobs?done=purged");
    // The note shows once: the page's auto-refresh loads the overview without it.
    client.get(done.location()).await.shows(
        StatusCode::OK,
        &[
            r#"id="notice">Purged the dead jobs."#,
            r#"<body data-refresh="5" data-refresh-to="/ops/jobs">"#,
        ],
    );
    let script = client.get("/ops/jobs/assets/console.js").await;
    assert!(
        script
            .body
            .contains("location.replace(document.body.dataset.refreshTo"),
        "{}",
        script.body
    );
    assert!(
        !script.body.contains("location.reload()"),
        "{}",
        script.body
    );
    queue.close().await.unwrap();
}

#[test]
#[should_panic(expected = "wheel-jobs console: the token is empty")]
fn an_empty_token_is_refused() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let h = embedded::harness();
    let queue = rt.block_on(JobQueue::open(h.path())).unwrap();
    Console::new(queue).token("");
}
