//! The console's pages (GETs: they read and never change the queue): the overview, a page
//! of each state's list, a job, `/metrics`, and the static assets. Each page is an askama
//! template in `jobs/templates/console/`; each reads O(1) or O(page) from the store.

use std::time::SystemTime;

use askama::Template;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::frame::{error_page, page, status_of, Base, Done, Frame, PageQuery};
use super::recorder::render_counts;
use super::view::{self, Chart, Payload, Time};
use super::AppState;
use crate::core::job::JobState;
use crate::core::kind::check_kind;
use crate::core::list::{Cursor, ListOptions};

// ===== the overview =====

#[derive(Template)]
#[template(path = "console/overview.html")]
struct Overview {
    frame: Frame,
    pending: String,
    running: String,
    dead: String,
    paused: bool,
    next_due: Option<Time>,
    /// The kinds with a job, in kind order.
    kinds: Vec<KindRow>,
    rates: Option<Rates>,
}

/// One kind's counts on the overview.
struct KindRow {
    /// The kind as stored: `""` for jobs scheduled without one (the template shows it as
    /// "(none)" and links to `?kind=`).
    kind: String,
    pending: String,
    running: String,
    dead: String,
}

/// What the recorder saw in the last hour.
struct Rates {
    delivered_per_minute: String,
    failed_per_minute: String,
    delivered: String,
    failed: String,
    lateness_p99: String,
    chart: Chart,
}

pub(super) async fn overview(
    State(app): State<AppState>,
    base: Base,
    PageQuery(done): PageQuery<Done>,
) -> Response {
    let mut frame = Frame::new(&app, base);
    frame.refresh = 5;
    frame.notice = done.notice();
    frame.current = "overview";
    let counts = match app.queue.counts().await {
        Ok(counts) => counts,
        Err(err) => return error_page(frame, status_of(&err), err.to_string()),
    };
    let now = SystemTime::now();
    let rates = app.recorder.as_ref().map(|recorder| {
        let rates = recorder.rates(app.queue.name(), now);
        Rates {
            delivered_per_minute: view::per_minute(rates.delivered_total(), rates.minutes),
            failed_per_minute: view::per_minute(rates.failed_total(), rates.minutes),
            delivered: view::count(rates.delivered_total()),
            failed: view::count(rates.failed_total()),
            lateness_p99: rates
                .lateness_p99()
                .map_or_else(|| "no deliveries".to_owned(), view::at_most),
            chart: view::chart(&rates.delivered, &rates.failed, now),
        }
    });
    let overview = Overview {
        frame,
        pending: view::count(counts.pending),
        running: view::count(counts.running),
        dead: view::count(counts.dead),
        paused: counts.paused,
        next_due: counts.next_due.map(|at| view::time(at, now)),
        kinds: counts
            .kinds
            .iter()
            .map(|(kind, c)| KindRow {
                kind: kind.clone(),
                pending: view::count(c.pending),
                running: view::count(c.running),
                dead: view::count(c.dead),
            })
            .collect(),
        rates,
    };
    page(StatusCode::OK, &overview)
}

// ===== a page of a state's list =====

/// The most jobs a list page shows unless asked for more (`?limit=`, up to
/// [`ListOptions::MAX_LIMIT`]).
const PAGE: usize = 50;

/// One row of a list.
struct Row {
    id: String,
    kind: String,
    priority: i8,
    key: Option<String>,
    run_at: Time,
    attempt: u32,
    error: Option<String>,
}

#[derive(Template)]
#[template(path = "console/list.html")]
struct ListPage {
    frame: Frame,
    /// `pending`, `running` or `dead`.
    state: &'static str,
    /// `Pending`, `Running` or `Dead`.
    title: &'static str,
    total: String,
    rows: Vec<Row>,
    /// The next page's query (`after=…&limit=…`), if a job follows this page.
    next: Option<String>,
    /// Whether this is a later page (a link back to the first).
    later: bool,
    /// The kind the list is limited to (`?kind=`), kept in its links.
    kind: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct ListQuery {
    after: Option<String>,
    limit: Option<usize>,
    /// Only jobs of this kind; `?kind=` (empty) is the kind `""` of jobs scheduled without
    /// one, no `kind` at all is every kind.
    kind: Option<String>,
}

pub(super) async fn list(
    State(app): State<AppState>,
    base: Base,
    Path(state): Path<String>,
    PageQuery(query): PageQuery<ListQuery>,
    PageQuery(done): PageQuery<Done>,
) -> Response {
    let mut frame = Frame::new(&app, base);
    frame.notice = done.notice();
    let state = match state.as_str() {
        "pending" => JobState::Pending,
        "running" => JobState::Running,
        "dead" => JobState::Dead,
        _ => {
            let why = "no such list: the lists are pending, running and dead".to_owned();
            return error_page(frame, StatusCode::NOT_FOUND, why);
        }
    };
    frame.current = view::state(state);
    let limit = query.limit.unwrap_or(PAGE);
    let mut options = ListOptions::new();
    // A list shows no payload: a page of big payloads is not read for it.
    options.limit(limit).payloads(false);
    if let Some(after) = query.after.as_deref().filter(|a| !a.is_empty()) {
        match after.parse::<Cursor>() {
            Ok(cursor) => options.after(&cursor),
            Err(err) => return error_page(frame, status_of(&err), err.to_string()),
        };
    }
    if let Some(kind) = &query.kind {
        // No kind that could not be stored: an address cannot put control characters or
        // a page of text into the page's title and links.
        if let Err(err) = check_kind(kind) {
            return error_page(frame, status_of(&err), err.to_string());
        }
        options.kind(kind);
    }
    let (page_read, counts) =
        match tokio::try_join!(app.queue.list(state, &options), app.queue.counts()) {
            Ok(read) => read,
            Err(err) => return error_page(frame, status_of(&err), err.to_string()),
        };
    let (title, mut total) = match state {
        JobState::Pending => ("Pending", counts.pending),
        JobState::Running => ("Running", counts.running),
        JobState::Dead => ("Dead", counts.dead),
    };
    if let Some(kind) = &query.kind {
        let of_kind = counts.kinds.get(kind).copied().unwrap_or_default();
        total = match state {
            JobState::Pending => of_kind.pending,
            JobState::Running => of_kind.running,
            JobState::Dead => of_kind.dead,
        };
    }
    let now = SystemTime::now();
    let rows = page_read
        .jobs()
        .iter()
        .map(|job| Row {
            id: job.id().to_owned(),
            kind: job.kind().to_owned(),
            priority: job.priority(),
            key: job.key().map(str::to_owned),
            run_at: view::time(job.run_at(), now),
            attempt: job.attempt(),
            error: job.last_error().map(view::first_line),
        })
        .collect();
    let next = page_read.cursor().map(|cursor| match limit {
        PAGE => format!("after={cursor}"),
        limit => format!("after={cursor}&limit={limit}"),
    });
    let list = ListPage {
        state: view::state(state),
        title,
        frame,
        total: view::count(total),
        rows,
        next,
        later: query.after.is_some(),
        kind: query.kind,
    };
    page(StatusCode::OK, &list)
}

// ===== a job =====

struct JobView {
    state: &'static str,
    kind: String,
    priority: i8,
    /// The job's key and the limits of its key, if it has one.
    key: Option<(String, Option<String>)>,
    run_at: Time,
    attempt: u32,
    max_attempts: u32,
    last_error: Option<String>,
    payload: Payload,
    /// When the successor waiting for this job is due (`Dedup::AllowWhileRunning`).
    successor: Option<Time>,
    /// The recurring series this job is the pending occurrence of: it has no Cancel of its
    /// own (the queue refuses it), the series is cancelled instead.
    series: Option<String>,
}

#[derive(Template)]
#[template(path = "console/job.html")]
struct JobPage {
    frame: Frame,
    id: String,
    job: Option<JobView>,
}

#[derive(Deserialize)]
pub(super) struct JobQuery {
    id: Option<String>,
}

pub(super) async fn job(
    State(app): State<AppState>,
    base: Base,
    PageQuery(query): PageQuery<JobQuery>,
    PageQuery(done): PageQuery<Done>,
) -> Response {
    let mut frame = Frame::new(&app, base);
    frame.notice = done.notice();
    let Some(id) = query.id else {
        let why = "which job? add ?id=…".to_owned();
        return error_page(frame, StatusCode::BAD_REQUEST, why);
    };
    let read = async {
        let info = app.queue.get(&id).await?;
        let series = match &info {
            Some(info) if info.state() == JobState::Pending => app.queue.recurring_of(&id).await?,
            _ => None,
        };
        Ok::<_, crate::core::error::Error>((info, series.map(|s| s.name().to_owned())))
    };
    match read.await {
        Ok((info, series)) => {
            let now = SystemTime::now();
            let status = if info.is_some() || frame.notice.is_some() {
                StatusCode::OK
            } else {
                StatusCode::NOT_FOUND
            };
            let job = info.map(|info| JobView {
                state: view::state(info.state()),
                kind: info.kind().to_owned(),
                priority: info.priority(),
                key: info
                    .key()
                    .map(|key| (key.to_owned(), view::key_limits(&info))),
                run_at: view::time(info.run_at(), now),
                attempt: info.attempt(),
                max_attempts: info.max_attempts(),
                last_error: info.last_error().map(str::to_owned),
                payload: view::payload(info.payload()),
                successor: info.successor().map(|at| view::time(at, now)),
                series,
            });
            page(status, &JobPage { frame, id, job })
        }
        Err(err) => error_page(frame, status_of(&err), err.to_string()),
    }
}

// ===== /metrics and the assets =====

/// The recorder's series in the Prometheus text format; without a recorder (or before it
/// saw the queue open), the counts as gauges. Reading the counts also refreshes the
/// recorder's gauges (the queue sets them on every `counts`).
pub(super) async fn metrics(State(app): State<AppState>) -> Response {
    let counts = match app.queue.counts().await {
        Ok(counts) => counts,
        Err(err) => return (status_of(&err), format!("{err}\n")).into_response(),
    };
    let mut text = String::new();
    if let Some(recorder) = &app.recorder {
        recorder.render(&mut text);
    }
    if text.is_empty() {
        render_counts(&counts, &mut text);
    }
    let content_type = "text/plain; version=0.0.4; charset=utf-8";
    ([(header::CONTENT_TYPE, content_type)], text).into_response()
}

pub(super) async fn stylesheet() -> Response {
    asset(
        "text/css; charset=utf-8",
        include_str!("assets/console.css"),
    )
}

pub(super) async fn script() -> Response {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("assets/console.js"),
    )
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        body,
    )
        .into_response()
}
