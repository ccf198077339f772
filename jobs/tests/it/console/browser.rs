//! One real browser: headless Chromium (Debian package `chromium`; `.ci/run` installs it)
//! loads the overview, a job and the dead list of a queue served on 127.0.0.1, and the test
//! reads the DOM it rendered. Then the browser submits forms it rendered (revive, cancel): a page of the test's own,
//! same-origin, holds that form verbatim and a one-line script that submits it; Chromium
//! follows the POST and its redirect, and the DOM dumped is the page the console answered.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::response::Html;
use axum::routing::get;
use wheel_jobs::{console, JobState};

use super::cases::every_state;
use crate::support::embedded;

/// The browser: `$WHEEL_JOBS_CHROMIUM`, else `chromium` or `chromium-browser` on PATH.
fn chromium() -> PathBuf {
    if let Some(path) = std::env::var_os("WHEEL_JOBS_CHROMIUM") {
        return path.into();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser"] {
            if dir.join(name).is_file() {
                return dir.join(name);
            }
        }
    }
    panic!(
        "the console's browser test needs headless Chromium: install it with \
         `apt-get install chromium` (Debian/Ubuntu), or point WHEEL_JOBS_CHROMIUM at one"
    )
}

/// The DOM of `url` once Chromium loaded it (and followed what its scripts started).
async fn dump_dom(url: &str) -> String {
    let profile = tempfile::tempdir().expect("temporary directory");
    let run = tokio::process::Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(["--dump-dom", url])
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    // Generous: a first start of Chromium on a loaded machine takes seconds.
    let output = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("chromium did not finish in 120 s")
        .expect("chromium runs");
    assert!(
        output.status.success(),
        "chromium failed: {:?}",
        output.status
    );
    String::from_utf8(output.stdout).expect("a UTF-8 DOM")
}

/// The first `<form …>…</form>` in `dom` whose opening tag contains `marker`.
#[track_caller]
fn form(dom: &str, marker: &str) -> String {
    let start = dom
        .match_indices("<form")
        .map(|(i, _)| i)
        .find(|&i| dom[i..].split('>').next().unwrap().contains(marker))
        .unwrap_or_else(|| panic!("no form with {marker} in {dom}"));
    let end = start + dom[start..].find("</form>").unwrap() + "</form>".len();
    dom[start..end].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_renders_the_console_and_submits_its_forms() {
    let h = embedded::harness();
    let queue = every_state(&h).await;
    let script_id = "<script>alert(1)</script>";
    queue
        .schedule(script_id, Duration::from_secs(3600), "<b>x</b>")
        .await
        .unwrap();

    // The console, and beside it the test's page that submits a form.
    let replay = Arc::new(Mutex::new(String::new()));
    let page = replay.clone();
    let app = console::router(queue.clone()).route(
        "/test/submit",
        get(move || async move {
            let form = page.lock().unwrap().clone();
            Html(format!(
                "<!doctype html><body>{form}<script>document.forms[0].submit()</script></body>"
            ))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let root = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let overview = dump_dom(&format!("{root}/")).await;
    for part in [
        r#"<span class="n" id="pending">2</span>"#,
        r#"<span class="n" id="running">1</span>"#,
        r#"<span class="n" id="dead">1</span>"#,
        "<title>Overview · wheel-jobs</title>",
    ] {
        assert!(overview.contains(part), "{part} not in {overview}");
    }

    // The browser shows the id as text: in its DOM, a text node (`&lt;`), not an element.
    let job = dump_dom(&format!(
        "{root}/job?id=%3Cscript%3Ealert%281%29%3C%2Fscript%3E"
    ))
    .await;
    assert!(
        job.contains(r#"<code id="job-id">&lt;script&gt;alert(1)&lt;/script&gt;</code>"#),
        "{job}"
    );
    assert!(
        job.contains(r#"id="payload">&lt;b&gt;x&lt;/b&gt;</pre>"#),
        "{job}"
    );
    assert!(!job.contains("<script>alert"), "{job}");

    // The dead list, and its revive button pressed.
    let dead = dump_dom(&format!("{root}/jobs/dead")).await;
    assert!(
        dead.contains(r#"<a href="/job?id=failed">failed</a>"#),
        "{dead}"
    );
    assert!(
        dead.contains(r#"<td class="err">card declined &lt;b&gt;05&lt;/b&gt; …</td>"#),
        "{dead}"
    );
    *replay.lock().unwrap() = form(&dead, r#"action="/job/revive""#);
    let after = dump_dom(&format!("{root}/test/submit")).await;
    assert!(
        after.contains(r#"<p class="notice" id="notice">Revived"#),
        "{after}"
    );
    assert!(
        after.contains(r#"<p id="empty">No dead jobs.</p>"#),
        "{after}"
    );
    let revived = queue.get("failed").await.unwrap().unwrap();
    assert_eq!((revived.state(), revived.attempt()), (JobState::Pending, 0));

    // A pending job's page, and its cancel button pressed.
    let job = dump_dom(&format!("{root}/job?id=later")).await;
    assert!(job.contains(r#"id="state">pending</span>"#), "{job}");
    *replay.lock().unwrap() = form(&job, r#"action="/job/cancel""#);
    let after = dump_dom(&format!("{root}/test/submit")).await;
    assert!(
        after.contains(r#"<p class="notice" id="notice">Cancelled"#),
        "{after}"
    );
    assert!(after.contains(r#"<p id="missing">No such job"#), "{after}");
    assert_eq!(queue.get("later").await.unwrap(), None);

    server.abort();
    queue.close().await.unwrap();
}
