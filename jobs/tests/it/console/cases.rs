//! The console's routes and actions, written once and run on every backend by
//! `console_suite!` (each test on a fresh harness).

use std::time::{Duration, SystemTime};

use axum::http::StatusCode;
use wheel_jobs::{console, JobOptions, JobQueue, JobState};

use super::client::{encode, Client};
use crate::support::{busy_and_failed, ms, next, Harness};

macro_rules! console_suite {
    ($harness:expr) => {
        console_suite!($harness;
            overview_shows_counts_pause_and_next_due,
            lists_show_a_page_of_each_state_and_resume_with_a_cursor,
            lists_refuse_bad_cursors_limits_and_states,
            job_page_shows_state_run_at_attempt_error_and_payload,
            job_page_answers_unknown_missing_and_invalid_ids,
            job_page_shows_a_waiting_successor,
            ids_payloads_and_messages_are_escaped,
            cancel_removes_a_pending_job,
            a_series_occurrence_is_not_cancelled_alone,
            revive_sends_dead_jobs_back,
            pause_and_resume,
            actions_need_the_csrf_token,
            a_get_to_an_action_changes_nothing,
            refused_actions_say_why_and_change_nothing,
            remove_and_purge_dead_jobs,
            metrics_without_a_recorder_are_the_counts,
            kinds_show_on_the_overview_lists_and_the_job_page,
            hostile_kinds_are_escaped_in_every_page,
            bad_kind_filters_are_refused,
            a_revive_from_a_kinds_dead_list_goes_back_to_it,
            keys_show_on_lists_and_the_job_page_escaped,
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
const OK: StatusCode = StatusCode::OK;

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

/// The ids of a list page's rows, in order.
fn row_ids(body: &str) -> Vec<String> {
    body.split(r#"<td class="id"><a href=""#)
        .skip(1)
        .map(|row| {
            let text = row.split_once("\">").unwrap().1;
            text.split("</a>").next().unwrap().to_owned()
        })
        .collect()
}

/// The query of a list page's "next page" link.
fn next_query(body: &str) -> Option<String> {
    let (_, after) = body.split_once("?after=")?;
    let query = after.split('"').next().unwrap();
    Some(format!("after={}", query.replace("&#38;", "&")))
}

pub async fn overview_shows_counts_pause_and_next_due(h: impl Harness) {
    let queue = every_state(&h).await;
    let client = Client::new(console::router(queue.clone()));
    let page = client.get("/").await;
    page.shows(
        OK,
        &[
            r#"<span class="n" id="pending">1</span>"#,
            r#"<span class="n" id="running">1</span>"#,
            r#"<span class="n" id="dead">1</span>"#,
            r#"id="paused">claiming</span>"#,
            r#"<span class="n small" id="next-due">in 59m"#,
            r#"data-refresh="5""#,
            // Without a recorder there are no rates to show, and the page says why.
            r#"<p class="muted" id="no-rates">"#,
            r#"href="/jobs/dead""#,
            r#"action="/pause""#,
            r#"action="/dead/revive""#,
            r#"action="/dead/purge""#,
        ],
    );
    let content_type = page.headers["content-type"].to_str().unwrap();
    assert!(content_type.starts_with("text/html"), "{content_type}");
    queue.close().await.unwrap();
}

pub async fn lists_show_a_page_of_each_state_and_resume_with_a_cursor(h: impl Harness) {
    let queue = every_state(&h).await;
    // Five more pending, due one minute apart after "later" (due in an hour).
    let start = SystemTime::now() + HOUR * 2;
    for i in 0..5u32 {
        let at = start + Duration::from_secs(60) * i;
        queue.schedule(&format!("p{i}"), at, "").await.unwrap();
    }
    let client = Client::new(console::router(queue.clone()));

    let mut seen = Vec::new();
    let mut uri = "/jobs/pending?limit=2".to_owned();
    loop {
        let page = client.get(&uri).await;
        page.shows(OK, &[r#"<span class="muted" id="total">6</span>"#]);
        seen.extend(row_ids(&page.body));
        match next_query(&page.body) {
            Some(query) => {
                assert!(query.ends_with("&limit=2"), "{query}");
                uri = format!("/jobs/pending?{query}");
                page.shows(OK, &[r#"id="next">Next page"#]);
            }
            None => break,
        }
    }
    assert_eq!(
        seen,
        ["later", "p0", "p1", "p2", "p3", "p4"],
        "oldest due first, once each"
    );

    let running = client.get("/jobs/running").await;
    running.shows(OK, &[r#"<span class="muted" id="total">1</span>"#]);
    assert_eq!(row_ids(&running.body), ["busy"]);

    let dead = client.get("/jobs/dead").await;
    dead.shows(
        OK,
        &[
            // The error's first line only, escaped; the page shows it whole.
            r#"<td class="err">card declined &#60;b&#62;05&#60;/b&#62; …</td>"#,
            r#"action="/job/revive""#,
            r#"<input type="hidden" name="back" value="dead">"#,
        ],
    )
    .lacks(&["billing.rs", r#"id="next""#]);
    assert_eq!(row_ids(&dead.body), ["failed"]);
    queue.close().await.unwrap();
}

pub async fn lists_refuse_bad_cursors_limits_and_states(h: impl Harness) {
    let queue = every_state(&h).await;
    queue.schedule("later-2", HOUR * 2, "").await.unwrap();
    let client = Client::new(console::router(queue.clone()));
    let page = client.get("/jobs/pending?limit=1").await;
    let query = next_query(&page.body).expect("a second page");

    for (uri, status, why) in [
        (
            "/jobs/pending?after=zz".to_owned(),
            400,
            "not a job list cursor",
        ),
        (
            format!("/jobs/dead?{query}"),
            400,
            "cannot continue the Dead list",
        ),
        (
            "/jobs/pending?limit=0".to_owned(),
            400,
            "a page holds 1 to 1000 jobs, not 0",
        ),
        (
            "/jobs/pending?limit=1001".to_owned(),
            400,
            "a page holds 1 to 1000 jobs",
        ),
        ("/jobs/done".to_owned(), 404, "no such list"),
        (
            "/jobs/pending?limit=abc".to_owned(),
            400,
            "this page cannot read its address",
        ),
        (
            "/jobs/dead?limit=-1&done=purged".to_owned(),
            400,
            "this page cannot read its address",
        ),
    ] {
        let status = StatusCode::from_u16(status).unwrap();
        // The console's own page (its frame, its styles), not a plain-text rejection.
        client
            .get(&uri)
            .await
            .shows(status, &[why, r#"href="/assets/console.css""#]);
    }
    // An empty `after` (a form left blank) is the first page.
    let first = client.get("/jobs/pending?after=").await;
    assert_eq!(row_ids(&first.body), ["later", "later-2"]);
    queue.close().await.unwrap();
}

pub async fn job_page_shows_state_run_at_attempt_error_and_payload(h: impl Harness) {
    let queue = every_state(&h).await;
    let binary = [0xffu8, 0x00, 0x7f];
    queue.schedule("bytes", HOUR, binary).await.unwrap();
    let client = Client::new(console::router(queue.clone()));

    client.get("/job?id=later").await.shows(
        OK,
        &[
            r#"<code id="job-id">later</code>"#,
            r#"id="state">pending</span>"#,
            r#"<td id="attempt">0</td>"#,
            // Headed even without a last error above it.
            "<h2>Payload</h2>\n<pre class=\"payload\" id=\"payload\">in an hour</pre>",
            "(in 59m", // relative to now; the page is read within the minute
            r#"action="/job/cancel""#,
        ],
    );
    client
        .get("/job?id=failed")
        .await
        .shows(
            OK,
            &[
                r#"id="state">dead</span>"#,
                r#"<td id="attempt">1</td>"#,
                // The whole error, escaped, its second line too.
                "<pre class=\"error-text\" id=\"last-error\">card declined &#60;b&#62;05&#60;/b&#62;\n  at charge (billing.rs:42)</pre>",
                r#"action="/job/revive""#,
                r#"action="/job/remove""#,
            ],
        )
        .lacks(&[r#"action="/job/cancel""#]);
    client
        .get("/job?id=busy")
        .await
        .shows(OK, &[r#"id="state">running</span>"#])
        .lacks(&["<form method=\"post\"", r#"id="last-error""#]);
    client.get("/job?id=bytes").await.shows(
        OK,
        &["3 bytes, shown in hex", r#"id="payload">ff007f</pre>"#],
    );
    queue.close().await.unwrap();
}

/// A running job's successor (`Dedup::AllowWhileRunning`) shows with its due time; a job
/// without one shows no such row.
pub async fn job_page_shows_a_waiting_successor(h: impl Harness) {
    let queue = every_state(&h).await;
    let due = SystemTime::UNIX_EPOCH + Duration::from_secs(4_102_444_800); // 2100-01-01
    let allow = JobOptions::new().dedup(wheel_jobs::Dedup::AllowWhileRunning);
    let outcome = queue.schedule_with("busy", due, "next", &allow).await;
    assert_eq!(outcome.unwrap(), wheel_jobs::Scheduled::Successor);
    let client = Client::new(console::router(queue.clone()));
    client.get("/job?id=busy").await.shows(
        OK,
        &[
            r#"id="state">running</span>"#,
            r#"<td id="successor">due at <time>2100-01-01T00:00:00Z</time>"#,
        ],
    );
    client
        .get("/job?id=later")
        .await
        .shows(OK, &[r#"id="state">pending</span>"#])
        .lacks(&[r#"id="successor""#]);
    queue.close().await.unwrap();
}

pub async fn job_page_answers_unknown_missing_and_invalid_ids(h: impl Harness) {
    let queue = h.open(&JobQueue::builder()).await.unwrap();
    let client = Client::new(console::router(queue.clone()));
    client
        .get("/job?id=nobody")
        .await
        .shows(StatusCode::NOT_FOUND, &[r#"<p id="missing">No such job"#]);
    client
        .get("/job")
        .await
        .shows(StatusCode::BAD_REQUEST, &["which job?"]);
    let long = "x".repeat(wheel_jobs::MAX_ID_LEN + 1);
    client
        .get(&job_uri(&long))
        .await
        .shows(StatusCode::BAD_REQUEST, &["invalid job id: 257 bytes"]);
    queue.close().await.unwrap();
}

pub async fn ids_payloads_and_messages_are_escaped(h: impl Harness) {
    let queue = h
        .open(JobQueue::builder().max_attempts(1).lease(HOUR))
        .await
        .unwrap();
    let id = "<script>alert(1)</script>";
    let payload = r#""><img src=x onerror=alert(2)>"#;
    queue.schedule(id, Duration::ZERO, payload).await.unwrap();
    let mut consumer = queue.consume();
    let delivery = next(&mut consumer).await;
    assert!(delivery
        .fail(ms(0), "<script>alert(3)</script>")
        .await
        .unwrap());
    let client = Client::new(console::router(queue.clone()));

    let never = ["<script>alert", "<img src=x"];
    let page = client.get(&job_uri(id)).await;
    page.shows(
        OK,
        &[
            // The id as text, in the page and in the hidden form field (an attribute
            // value the id cannot close).
            "&#60;script&#62;alert(1)&#60;/script&#62;",
            r#"name="id" value="&#60;script&#62;"#,
            "&#34;&#62;&#60;img src=x",
            "&#60;script&#62;alert(3)&#60;/script&#62;",
        ],
    )
    .lacks(&never);
    // In the dead list: the id, its link, its error.
    let list = client.get("/jobs/dead").await;
    list.shows(
        OK,
        &[
            r#"href="/job?id=%3Cscript%3Ealert%281%29%3C%2Fscript%3E""#,
            "&#60;script&#62;alert(3)",
        ],
    )
    .lacks(&never);

    // A refused action echoes the id in its message: escaped as well.
    let csrf = page.csrf();
    let refused = client
        .post("/job/cancel", &[("csrf", &csrf), ("id", id)])
        .await;
    refused
        .shows(StatusCode::CONFLICT, &["&#60;script&#62;"])
        .lacks(&never);
    let done = client
        .post("/job/revive", &[("csrf", &csrf), ("id", id)])
        .await;
    assert_eq!(
        done.location(),
        "/job?id=%3Cscript%3Ealert%281%29%3C%2Fscript%3E&done=revived"
    );
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
    client
        .get(done.location())
        .await
        .shows(OK, &[r#"<p class="notice" id="notice">Cancelled"#]);
    queue.close().await.unwrap();
}

/// The id of the pending occurrence of the only series of `queue`.
async fn occurrence(queue: &JobQueue) -> String {
    let next = queue.list_recurring().await.unwrap()[0].next_run().unwrap();
    format!("digest@{}", jiff::Timestamp::try_from(next).unwrap())
}

pub async fn a_series_occurrence_is_not_cancelled_alone(h: impl Harness) {
    let queue = every_state(&h).await;
    let every_hour = wheel_jobs::Recurrence::every(HOUR).unwrap();
    queue
        .schedule_recurring("digest", every_hour, "")
        .await
        .unwrap();
    let id = occurrence(&queue).await;
    let client = Client::new(console::router(queue.clone()));
    let page = client.get(&job_uri(&id)).await;
    page.shows(
        OK,
        &[
            r#"id="state">pending</span>"#,
            "The next occurrence of the recurring series <code>digest</code>",
        ],
    )
    .lacks(&[r#"action="/job/cancel""#]);
    // An ordinary pending job keeps its button.
    client
        .get("/job?id=later")
        .await
        .shows(OK, &[r#"action="/job/cancel""#])
        .lacks(&["recurring series"]);

    let refused = client
        .post(
            "/job/cancel",
            &[("csrf", &client.get("/").await.csrf()), ("id", &id)],
        )
        .await;
    refused
        .shows(
            StatusCode::CONFLICT,
            &["the next occurrence of the recurring series &#34;digest&#34;"],
        )
        .lacks(&["is not pending"]);
    assert_eq!(state(&queue, &id).await, Some(JobState::Pending));
    queue.close().await.unwrap();
}

pub async fn revive_sends_dead_jobs_back(h: impl Harness) {
    let queue = every_state(&h).await;
    let client = Client::new(console::router(queue.clone()));
    let csrf = client.get("/").await.csrf();

    let done = client
        .post("/job/revive", &[("csrf", &csrf), ("id", "failed")])
        .await;
    assert_eq!(done.location(), "/job?id=failed&done=revived");
    let job = queue.get("failed").await.unwrap().unwrap();
    assert_eq!((job.state(), job.attempt()), (JobState::Pending, 0));
    client.get(done.location()).await.shows(
        OK,
        &["Revived: pending again", r#"id="state">pending</span>"#],
    );

    // Dead again, revived from the dead list: back to the list.
    let mut consumer = queue.consume();
    assert!(next(&mut consumer)
        .await
        .fail(ms(0), "again")
        .await
        .unwrap());
    let fields = [("csrf", csrf.as_str()), ("id", "failed"), ("back", "dead")];
    let done = client.post("/job/revive", &fields).await;
    assert_eq!(done.location(), "/jobs/dead?done=revived");
    client
        .get(done.location())
        .await
        .shows(OK, &["Revived: pending again", "No dead jobs."]);

    // Every dead job at once.
    assert!(next(&mut consumer)
        .await
        .fail(ms(0), "again")
        .await
        .unwrap());
    queue.schedule("f2", Duration::ZERO, "").await.unwrap();
    assert!(next(&mut consumer).await.fail(ms(0), "too").await.unwrap());
    drop(consumer);
    assert_eq!(queue.counts().await.unwrap().dead, 2);
    let done = client.post("/dead/revive", &[("csrf", &csrf)]).await;
    assert_eq!(done.location(), "/?done=revived-all");
    assert_eq!(queue.counts().await.unwrap().dead, 0);
    client
        .get(done.location())
        .await
        .shows(OK, &["Revived the dead jobs: pending again, due now."]);
    // A count in the address would be the link's word, not the store's.
    client
        .get("/?done=purged&n=999999999")
        .await
        .shows(OK, &["Purged the dead jobs."])
        // The whole number: its digits alone may be in a time or a rate on the page.
        .lacks(&["999999999"]);
    queue.close().await.unwrap();
}

pub async fn pause_and_resume(h: impl Harness) {
    let queue = every_state(&h).await;
    let client = Client::new(console::router(queue.clone()));
    let csrf = client.get("/").await.csrf();
    let done = client.post("/pause", &[("csrf", &csrf)]).await;
    assert_eq!(done.location(), "/?done=paused");
    assert!(queue.counts().await.unwrap().paused);
    client
        .get(done.location())
        .await
        .shows(
            OK,
            &[
                r#"id="paused">paused</span>"#,
                "Paused: no consumer claims",
                r#"action="/resume""#,
            ],
        )
        .lacks(&[r#"action="/pause""#]);
    let done = client.post("/resume", &[("csrf", &csrf)]).await;
    assert_eq!(done.location(), "/?done=resumed");
    assert!(!queue.counts().await.unwrap().paused);
    client
        .get(done.location())
        .await
        .shows(OK, &[r#"id="paused">claiming</span>"#, "Resumed"]);
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
    let forged = "0123456789abcdef0123456789abcdef";
    for fields in [
        vec![("id", "later")],
        vec![("csrf", ""), ("id", "later")],
        vec![("csrf", forged), ("id", "later")],
        vec![("csrf", stale.as_str()), ("id", "later")],
    ] {
        let refused = client.post("/job/cancel", &fields).await;
        refused.shows(StatusCode::FORBIDDEN, &["CSRF token is missing or stale"]);
    }
    for uri in [
        "/dead/purge",
        "/dead/revive",
        "/pause",
        "/resume",
        "/job/remove",
        "/job/revive",
    ] {
        let refused = client
            .post(uri, &[("csrf", &stale), ("id", "failed")])
            .await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{uri}");
    }
    assert_eq!(state(&queue, "later").await, Some(JobState::Pending));
    assert_eq!(state(&queue, "failed").await, Some(JobState::Dead));
    assert!(!queue.counts().await.unwrap().paused);
    queue.close().await.unwrap();
}

pub async fn a_get_to_an_action_changes_nothing(h: impl Harness) {
    let queue = every_state(&h).await;
    let client = Client::new(console::router(queue.clone()));
    let csrf = client.get("/").await.csrf();
    for uri in [
        format!("/job/cancel?id=later&csrf={csrf}"),
        format!("/job/remove?id=failed&csrf={csrf}"),
        format!("/job/revive?id=failed&csrf={csrf}"),
        format!("/dead/revive?csrf={csrf}"),
        format!("/dead/purge?csrf={csrf}"),
        format!("/pause?csrf={csrf}"),
        format!("/resume?csrf={csrf}"),
    ] {
        let answer = client.get(&uri).await;
        assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED, "{uri}");
    }
    assert_eq!(state(&queue, "later").await, Some(JobState::Pending));
    assert_eq!(state(&queue, "failed").await, Some(JobState::Dead));
    assert!(!queue.counts().await.unwrap().paused);
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
        ("/job/revive", "later", "is not dead"),
        ("/job/revive", "nobody", "is not dead"),
    ] {
        let refused = client.post(uri, &[("csrf", &csrf), ("id", id)]).await;
        refused.shows(StatusCode::CONFLICT, &[why]);
    }
    let refused = client
        .post("/job/cancel", &[("csrf", &csrf), ("id", "")])
        .await;
    refused.shows(StatusCode::BAD_REQUEST, &["invalid job id: empty"]);
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
    assert_eq!(done.location(), "/?done=purged");
    assert_eq!(
        (state(&queue, "f1").await, state(&queue, "f2").await),
        (None, None)
    );
    client
        .get(done.location())
        .await
        .shows(OK, &["Purged the dead jobs."]);
    assert_eq!(state(&queue, "later").await, Some(JobState::Pending));
    queue.close().await.unwrap();
}

pub async fn metrics_without_a_recorder_are_the_counts(h: impl Harness) {
    let queue = every_state(&h).await;
    queue.pause().await.unwrap();
    let client = Client::new(console::router(queue.clone()));
    let metrics = client.get("/metrics").await;
    assert_eq!(
        metrics.headers["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    assert_eq!(
        metrics.body,
        "# TYPE wheel_jobs_pending gauge\nwheel_jobs_pending 1\n\
         # TYPE wheel_jobs_running gauge\nwheel_jobs_running 1\n\
         # TYPE wheel_jobs_dead gauge\nwheel_jobs_dead 1\n\
         # TYPE wheel_jobs_paused gauge\nwheel_jobs_paused 1\n"
    );
    queue.close().await.unwrap();
}

pub async fn kinds_show_on_the_overview_lists_and_the_job_page(h: impl Harness) {
    let queue = h.open(JobQueue::builder().max_attempts(4)).await.unwrap();
    let rate = JobOptions::kind("rate").priority(5).max_attempts(2);
    for (i, id) in ["rate:1", "rate:2", "rate:3"].into_iter().enumerate() {
        let at = HOUR + Duration::from_secs(60 * i as u64);
        queue.schedule_with(id, at, "r", &rate).await.unwrap();
    }
    let remind = JobOptions::kind("remind").priority(-2);
    queue
        .schedule_with("remind:1", HOUR * 2, "m", &remind)
        .await
        .unwrap();
    queue.schedule("plain", HOUR * 3, "p").await.unwrap();
    let client = Client::new(console::router(queue.clone()));

    client.get("/").await.shows(
        OK,
        &[
            r#"<table class="list" id="kinds">"#,
            r#"<td class="kind"><span class="muted">(none)</span></td>"#,
            r#"<td><a href="/jobs/pending?kind=">1</a></td>"#,
            r#"<td class="kind">rate</td>"#,
            r#"<td><a href="/jobs/pending?kind=rate">3</a></td>"#,
            r#"<td><a href="/jobs/dead?kind=rate">0</a></td>"#,
            r#"<td class="kind">remind</td>"#,
        ],
    );

    let all = client.get("/jobs/pending").await;
    all.shows(
        OK,
        &[
            "<th>kind</th><th>priority</th>",
            r#"<td class="kind"><a href="/jobs/pending?kind=rate">rate</a></td>"#,
            r#"<td class="priority">5</td>"#,
            r#"<td class="priority">-2</td>"#,
            r#"<a href="/jobs/pending?kind="><span class="muted">(none)</span></a>"#,
            r#"<span class="muted" id="total">5</span>"#,
        ],
    )
    .lacks(&[r#"id="all-kinds""#]);
    assert_eq!(
        row_ids(&all.body),
        ["rate:1", "rate:2", "rate:3", "remind:1", "plain"]
    );

    // Filtered, a page at a time: the cursor keeps the kind.
    let first = client.get("/jobs/pending?kind=rate&limit=2").await;
    first.shows(
        OK,
        &[
            r#"of kind <code id="kind">rate</code>"#,
            r#"<span class="muted" id="total">3</span>"#,
            r#"<a href="/jobs/pending" id="all-kinds">Every kind</a>"#,
        ],
    );
    assert_eq!(row_ids(&first.body), ["rate:1", "rate:2"]);
    let next = next_query(&first.body).expect("a next page");
    assert!(next.ends_with("&limit=2&kind=rate"), "{next}");
    let second = client.get(&format!("/jobs/pending?{next}")).await;
    second.shows(OK, &[r#"href="/jobs/pending?kind=rate">First page</a>"#]);
    assert_eq!(row_ids(&second.body), ["rate:3"]);
    assert_eq!(next_query(&second.body), None);
    let plain = client.get("/jobs/pending?kind=").await;
    plain.shows(
        OK,
        &[r#"of kind <span class="muted" id="kind">(none)</span>"#],
    );
    assert_eq!(row_ids(&plain.body), ["plain"]);
    let nobody = client.get("/jobs/dead?kind=nobody").await;
    nobody.shows(
        OK,
        &[
            r#"<span class="muted" id="total">0</span>"#,
            "No dead jobs.",
        ],
    );

    client.get(&job_uri("rate:2")).await.shows(
        OK,
        &[
            r#"<td id="kind"><a href="/jobs/pending?kind=rate">rate</a></td>"#,
            r#"<td id="priority">5</td>"#,
            r#"<td id="attempt">0</td>"#,
            r#"<td id="max-attempts">2</td>"#,
        ],
    );
    client.get(&job_uri("plain")).await.shows(
        OK,
        &[
            r#"<td id="kind"><span class="muted">(none)</span></td>"#,
            r#"<td id="priority">0</td>"#,
            r#"<td id="max-attempts">4</td>"#,
        ],
    );
    queue.close().await.unwrap();
}

pub async fn hostile_kinds_are_escaped_in_every_page(h: impl Harness) {
    let queue = h.open(&JobQueue::builder()).await.unwrap();
    let kind = "<script>alert(4)</script>";
    let quote = r#""><img src=x onerror=alert(5)>"#;
    for (id, kind) in [("k1", kind), ("k2", quote)] {
        queue
            .schedule_with(id, HOUR, "p", &JobOptions::kind(kind))
            .await
            .unwrap();
    }
    let client = Client::new(console::router(queue.clone()));
    let never = ["<script>alert", "<img src=x"];
    let escaped = "&#60;script&#62;alert(4)&#60;/script&#62;";
    let in_link = "?kind=%3Cscript%3Ealert%284%29%3C%2Fscript%3E";
    let quote_escaped = "&#34;&#62;&#60;img src=x onerror=alert(5)&#62;";
    let quote_link = "?kind=%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert%285%29%3E";
    for uri in ["/", "/jobs/pending"] {
        client
            .get(uri)
            .await
            .shows(OK, &[escaped, in_link, quote_escaped, quote_link])
            .lacks(&never);
    }
    let filtered = client.get(&format!("/jobs/pending{in_link}&limit=1")).await;
    filtered
        .shows(
            OK,
            &[&format!(r#"of kind <code id="kind">{escaped}</code>"#)],
        )
        .lacks(&never);
    assert_eq!(row_ids(&filtered.body), ["k1"]);
    let filtered = client
        .get(&format!("/jobs/pending?kind={}", encode(quote)))
        .await;
    filtered.shows(OK, &[quote_escaped]).lacks(&never);
    assert_eq!(row_ids(&filtered.body), ["k2"]);
    client
        .get(&job_uri("k1"))
        .await
        .shows(OK, &[escaped, in_link])
        .lacks(&never);
    queue.close().await.unwrap();
}

pub async fn bad_kind_filters_are_refused(h: impl Harness) {
    let queue = h.open(&JobQueue::builder()).await.unwrap();
    let client = Client::new(console::router(queue.clone()));
    // A kind no job could have is refused, not echoed into the page.
    let long = "k".repeat(wheel_jobs::MAX_KIND_LEN + 1);
    for bad in [long.as_str(), "a\u{1b}[2Jb", "line\nbreak"] {
        let answer = client
            .get(&format!("/jobs/pending?kind={}", encode(bad)))
            .await;
        answer.shows(StatusCode::BAD_REQUEST, &["invalid input: a kind"]);
        assert!(!answer.body.contains(bad), "{bad:?} echoed");
    }
    queue.close().await.unwrap();
}

pub async fn a_revive_from_a_kinds_dead_list_goes_back_to_it(h: impl Harness) {
    let queue = h
        .open(JobQueue::builder().max_attempts(1).lease(HOUR))
        .await
        .unwrap();
    let hostile = r#"r&b "<x>"#;
    for (id, kind) in [("h1", hostile), ("p1", ""), ("p2", "")] {
        let options = JobOptions::kind(kind);
        queue
            .schedule_with(id, Duration::ZERO, "p", &options)
            .await
            .unwrap();
        let mut consumer = queue.consume_kind(kind);
        let delivery = next(&mut consumer).await;
        assert_eq!(delivery.id(), id);
        assert!(delivery.fail(ms(0), "no").await.unwrap());
        assert_eq!(state(&queue, id).await, Some(JobState::Dead));
    }
    let client = Client::new(console::router(queue.clone()));
    let csrf = client.get("/").await.csrf();
    let in_link = "kind=r%26b%20%22%3Cx%3E";

    // The revive form of a filtered dead list carries the kind, escaped.
    client
        .get(&format!("/jobs/dead?{in_link}"))
        .await
        .shows(
            OK,
            &[r#"<input type="hidden" name="kind" value="r&#38;b &#34;&#60;x&#62;">"#],
        )
        .lacks(&["<x>"]);
    client
        .get("/jobs/dead")
        .await
        .shows(OK, &[r#"name="back" value="dead"><button"#])
        .lacks(&[r#"name="kind""#]);

    // Posted back, the revive returns to the list of that kind.
    let fields = [
        ("csrf", csrf.as_str()),
        ("id", "h1"),
        ("back", "dead"),
        ("kind", hostile),
    ];
    let done = client.post("/job/revive", &fields).await;
    assert_eq!(
        done.location(),
        format!("/jobs/dead?done=revived&{in_link}")
    );
    client
        .get(done.location())
        .await
        .shows(
            OK,
            &[
                "Revived: pending again",
                r#"of kind <code id="kind">r&#38;b &#34;&#60;x&#62;</code>"#,
            ],
        )
        .lacks(&["<x>"]);
    assert_eq!(state(&queue, "h1").await, Some(JobState::Pending));

    // The kind "" (jobs without one) is kept too; a kind no job can have is dropped.
    let fields = [
        ("csrf", csrf.as_str()),
        ("id", "p1"),
        ("back", "dead"),
        ("kind", ""),
    ];
    let done = client.post("/job/revive", &fields).await;
    assert_eq!(done.location(), "/jobs/dead?done=revived&kind=");
    let fields = [
        ("csrf", csrf.as_str()),
        ("id", "p2"),
        ("back", "dead"),
        ("kind", "line\nbreak"),
    ];
    let done = client.post("/job/revive", &fields).await;
    assert_eq!(done.location(), "/jobs/dead?done=revived");
    queue.close().await.unwrap();
}

/// A job's key is shown on lists and its page, with its key's limits; a hostile key is
/// escaped like any text.
pub async fn keys_show_on_lists_and_the_job_page_escaped(h: impl Harness) {
    let queue = h.open(&JobQueue::builder()).await.unwrap();
    let hostile = "<script>alert(6)</script>";
    queue
        .schedule_with("t", HOUR, "p", &JobOptions::new().key("tenant-7"))
        .await
        .unwrap();
    queue
        .schedule_with("h", HOUR * 2, "p", &JobOptions::new().key(hostile))
        .await
        .unwrap();
    queue.schedule("plain", HOUR * 3, "p").await.unwrap();
    let client = Client::new(console::router(queue.clone()));
    let escaped = "&#60;script&#62;alert(6)&#60;/script&#62;";
    client
        .get("/jobs/pending")
        .await
        .shows(
            OK,
            &[
                "<th>priority</th><th>key</th>",
                r#"<td class="key">tenant-7</td>"#,
                &format!(r#"<td class="key">{escaped}</td>"#),
                r#"<td class="key"></td>"#,
            ],
        )
        .lacks(&["<script>alert"]);
    client
        .get(&job_uri("h"))
        .await
        .shows(OK, &[&format!(r#"<code id="key">{escaped}</code>"#)])
        .lacks(&["<script>alert", r#"id="key-limits""#]);
    client
        .get(&job_uri("plain"))
        .await
        .shows(OK, &[r#"<td id="priority">0</td>"#])
        .lacks(&[r#"id="key""#]);
    if h.limits_keys() {
        let limited = JobOptions::new()
            .key("tenant-7")
            .key_limit(2)
            .key_rate(10, Duration::from_secs(60));
        queue.schedule_with("l", HOUR, "p", &limited).await.unwrap();
        client.get(&job_uri("l")).await.shows(
            OK,
            &[
                r#"<code id="key">tenant-7</code>"#,
                r#"<span class="muted" id="key-limits">(at most 2 running, 10 starts per 1m)</span>"#,
            ],
        );
    }
    queue.close().await.unwrap();
}
