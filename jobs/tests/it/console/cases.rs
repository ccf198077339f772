//! The console's routes and actions, written once and run on every backend by
//! `console_suite!` (each test on a fresh harness).

use std::time::Duration;

use axum::http::StatusCode;
use wheel_jobs::{console, JobQueue, JobState};

use super::client::{encode, Client};
use crate::support::{busy_and_failed, ms, next, Harness};

macro_rules! console_suite {
    ($harness:expr) => {
        console_suite!($harness;
            overview_shows_the_counts,
            job_page_shows_state_run_at_attempt_and_payload,
            job_page_answers_unknown_missing_and_invalid_ids,
            ids_payloads_and_messages_are_escaped,
            cancel_removes_a_pending_job,
            actions_need_the_csrf_token,
            a_get_to_an_action_changes_nothing,
            refused_actions_say_why_and_change_nothing,
            remove_and_purge_dead_jobs,
        );
    };
    ($harness:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                crate::console::cases::$name($harness).await
            }
        )*
    };
}

const HOUR: Duration = Duration::from_secs(3600);

/// A queue of one attempt per job with "later" pending, "busy" running and "failed" dead.
pub(super) async fn every_state(h: &impl Harness) -> JobQueue {
    let queue = h
        .open(JobQueue::builder().max_attempts(1).lease(HOUR))
        .await
        .expect("open");
    queue.schedule("later", HOUR, "in an hour").await.unwrap();
    busy_and_failed(&queue).await;
    assert_eq!(state(&queue, "failed").await, Some(JobState::Dead));
    assert_eq!(state(&queue, "busy").await, Some(JobState::Running));
    queue
}

async fn state(queue: &JobQueue, id: &str) -> Option<JobState> {
    queue.get(id).await.unwrap().map(|job| job.state())
}

fn job_uri(id: &str) -> String {
    format!("/job?id={}", encode(id))
}

pub async fn overview_shows_the_counts(h: impl Harness) {
    let queue = every_state(&h).await;
    let client = Client::new(console::router(queue.clone()));
    let page = client.get("/").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body
            .contains(r#"<span class="n" id="pending">1</span>"#),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains(r#"<span class="n" id="running">1</span>"#),
        "{}",
        page.body
    );
    assert!(
        page.body.contains(r#"data-refresh="5""#),
        "the overview refreshes itself"
    );
    assert!(
        page.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html"),
        "{:?}",
        page.headers
    );
    queue.close().await.unwrap();
}

pub async fn job_page_shows_state_run_at_attempt_and_payload(h: impl Harness) {
    let queue = every_state(&h).await;
    let binary = [0xffu8, 0x00, 0x7f];
    queue.schedule("bytes", HOUR, binary).await.unwrap();
    let client = Client::new(console::router(queue.clone()));

    let page = client.get("/job?id=later").await;
    assert_eq!(page.status, StatusCode::OK);
    for part in [
        r#"<code id="job-id">later</code>"#,
        r#"id="state">pending</span>"#,
        r#"<td id="attempt">0</td>"#,
        r#"<pre class="payload" id="payload">in an hour</pre>"#,
        "(in 59m", // relative to now; the page is read within the minute
        r#"action="/job/cancel""#,
    ] {
        assert!(page.body.contains(part), "{part} not in {}", page.body);
    }

    let page = client.get("/job?id=failed").await;
    assert!(
        page.body.contains(r#"id="state">dead</span>"#),
        "{}",
        page.body
    );
    assert!(
        page.body.contains(r#"<td id="attempt">1</td>"#),
        "{}",
        page.body
    );
    assert!(
        page.body.contains(r#"action="/job/remove""#),
        "{}",
        page.body
    );
    assert!(
        !page.body.contains(r#"action="/job/cancel""#),
        "a dead job cannot be cancelled"
    );

    let page = client.get("/job?id=busy").await;
    assert!(
        page.body.contains(r#"id="state">running</span>"#),
        "{}",
        page.body
    );
    assert!(
        !page.body.contains("<form method=\"post\""),
        "no action on a running job"
    );

    let page = client.get("/job?id=bytes").await;
    assert!(page.body.contains("3 bytes, shown in hex"), "{}", page.body);
    assert!(
        page.body.contains(r#"id="payload">ff007f</pre>"#),
        "{}",
        page.body
    );
    queue.close().await.unwrap();
}

pub async fn job_page_answers_unknown_missing_and_invalid_ids(h: impl Harness) {
    let queue = h.open(&JobQueue::builder()).await.unwrap();
    let client = Client::new(console::router(queue.clone()));
    let page = client.get("/job?id=nobody").await;
    assert_eq!(page.status, StatusCode::NOT_FOUND);
    assert!(
        page.body.contains(r#"<p id="missing">No such job"#),
        "{}",
        page.body
    );

    let page = client.get("/job").await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST);
    assert!(page.body.contains("which job?"), "{}", page.body);

    let long = "x".repeat(wheel_jobs::MAX_ID_LEN + 1);
    let page = client.get(&job_uri(&long)).await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST);
    assert!(
        page.body.contains("invalid job id: 257 bytes"),
        "{}",
        page.body
    );
    queue.close().await.unwrap();
}

pub async fn ids_payloads_and_messages_are_escaped(h: impl Harness) {
    let queue = h.open(&JobQueue::builder()).await.unwrap();
    let id = "<script>alert(1)</script>";
    let payload = r#""><img src=x onerror=alert(2)>"#;
    queue.schedule(id, HOUR, payload).await.unwrap();
    let client = Client::new(console::router(queue.clone()));

    let page = client.get(&job_uri(id)).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(!page.body.contains("<script>alert"), "{}", page.body);
    assert!(!page.body.contains("<img src=x"), "{}", page.body);
    assert!(
        page.body
            .contains("&#60;script&#62;alert(1)&#60;/script&#62;"),
        "the id is shown as text: {}",
        page.body
    );
    // In the hidden form field too: an attribute value cannot be closed by the id.
    assert!(
        page.body.contains(r#"name="id" value="&#60;script&#62;"#),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("&#34;&#62;&#60;img src=x"),
        "{}",
        page.body
    );

    // A refused action echoes the id in its message: escaped as well.
    let csrf = page.csrf();
    assert_eq!(
        client
            .post("/job/cancel", &[("csrf", &csrf), ("id", id)])
            .await
            .location(),
        "/job?id=%3Cscript%3Ealert%281%29%3C%2Fscript%3E&done=cancelled"
    );
    let refused = client
        .post("/job/cancel", &[("csrf", &csrf), ("id", id)])
        .await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    assert!(!refused.body.contains("<script>alert"), "{}", refused.body);
    queue.close().await.unwrap();
}

pub async fn cancel_removes_a_pending_job(h: impl Harness) {
    let queue = every_state(&h).await;
    let client = Client::new(console::router(queue.clone()));
    let csrf = client.get("/job?id=later").await.csrf();
    let done = client
        .post("/job/cancel", &[("csrf", &csrf), ("id", "later")])
        .await;
    assert_eq!(done.location(), "/job?id=later&done=cancelled");
    assert_eq!(state(&queue, "later").await, None);
    assert_eq!(queue.pending().await.unwrap(), 0);

    let page = client.get(done.location()).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body
            .contains(r#"<p class="notice" id="notice">Cancelled"#),
        "{}",
        page.body
    );
    queue.close().await.unwrap();
}

pub async fn actions_need_the_csrf_token(h: impl Harness) {
    let queue = every_state(&h).await;
    let client = Client::new(console::router(queue.clone()));
    // Another router's (or an earlier run's) token is refused too.
    let stale = Client::new(console::router(queue.clone()))
        .get("/")
        .await
        .csrf();
    assert_ne!(stale, client.get("/").await.csrf());
    for fields in [
        vec![("id", "later")],
        vec![("csrf", ""), ("id", "later")],
        vec![
            ("csrf", "0123456789abcdef0123456789abcdef"),
            ("id", "later"),
        ],
        vec![("csrf", stale.as_str()), ("id", "later")],
    ] {
        let refused = client.post("/job/cancel", &fields).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{fields:?}");
        assert!(
            refused.body.contains("CSRF token is missing or stale"),
            "{}",
            refused.body
        );
    }
    let refused = client.post("/dead/purge", &[("csrf", &stale)]).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    let refused = client
        .post("/job/remove", &[("csrf", &stale), ("id", "failed")])
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(state(&queue, "later").await, Some(JobState::Pending));
    assert_eq!(state(&queue, "failed").await, Some(JobState::Dead));
    queue.close().await.unwrap();
}

pub async fn a_get_to_an_action_changes_nothing(h: impl Harness) {
    let queue = every_state(&h).await;
    let client = Client::new(console::router(queue.clone()));
    let csrf = client.get("/").await.csrf();
    for uri in [
        format!("/job/cancel?id=later&csrf={csrf}"),
        format!("/job/remove?id=failed&csrf={csrf}"),
        format!("/dead/purge?csrf={csrf}"),
    ] {
        let answer = client.get(&uri).await;
        assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED, "{uri}");
    }
    assert_eq!(state(&queue, "later").await, Some(JobState::Pending));
    assert_eq!(state(&queue, "failed").await, Some(JobState::Dead));
    queue.close().await.unwrap();
}

pub async fn refused_actions_say_why_and_change_nothing(h: impl Harness) {
    let queue = every_state(&h).await;
    let client = Client::new(console::router(queue.clone()));
    let csrf = client.get("/").await.csrf();
    for (uri, id, why) in [
        ("/job/cancel", "busy", "is not pending"),
        ("/job/cancel", "failed", "is not pending"),
        ("/job/cancel", "nobody", "is not pending"),
        ("/job/remove", "later", "is not dead"),
        ("/job/remove", "busy", "is not dead"),
    ] {
        let refused = client.post(uri, &[("csrf", &csrf), ("id", id)]).await;
        assert_eq!(refused.status, StatusCode::CONFLICT, "{uri} {id}");
        assert!(refused.body.contains(why), "{}", refused.body);
    }
    let refused = client
        .post("/job/cancel", &[("csrf", &csrf), ("id", "")])
        .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert!(
        refused.body.contains("invalid job id: empty"),
        "{}",
        refused.body
    );
    assert_eq!(state(&queue, "later").await, Some(JobState::Pending));
    assert_eq!(state(&queue, "busy").await, Some(JobState::Running));
    assert_eq!(state(&queue, "failed").await, Some(JobState::Dead));
    queue.close().await.unwrap();
}

pub async fn remove_and_purge_dead_jobs(h: impl Harness) {
    let queue = every_state(&h).await;
    let client = Client::new(console::router(queue.clone()));
    let csrf = client.get("/").await.csrf();
    let done = client
        .post("/job/remove", &[("csrf", &csrf), ("id", "failed")])
        .await;
    assert_eq!(done.location(), "/job?id=failed&done=removed");
    assert_eq!(state(&queue, "failed").await, None);

    // Two more dead jobs, then purge them.
    queue.schedule("f1", Duration::ZERO, "").await.unwrap();
    queue.schedule("f2", Duration::ZERO, "").await.unwrap();
    let mut consumer = queue.consume();
    for _ in 0..2 {
        assert!(next(&mut consumer).await.retry(ms(0)).await.unwrap());
    }
    let done = client.post("/dead/purge", &[("csrf", &csrf)]).await;
    assert_eq!(done.location(), "/?done=purged&n=2");
    assert_eq!(
        (state(&queue, "f1").await, state(&queue, "f2").await),
        (None, None)
    );
    let page = client.get(done.location()).await;
    assert!(page.body.contains("Purged 2 dead jobs."), "{}", page.body);
    assert_eq!(state(&queue, "later").await, Some(JobState::Pending));
    queue.close().await.unwrap();
}
