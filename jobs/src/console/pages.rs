//! The console's pages (GETs: they read and never change the queue), the error page, and
//! the static assets. Each page is an askama template in `jobs/templates/console/`.

use std::time::SystemTime;

use askama::Template;
use axum::extract::{FromRequestParts, OriginalUri, Query, State};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;

use super::view::{self, Payload, Time};
use super::Shared;
use crate::error::Error;

/// Where the console is mounted: `""` at the root, `/jobs` under `Router::nest("/jobs", …)`.
/// Every link and redirect starts with it.
pub(super) struct Base(String);

impl Base {
    /// The overview's path: `/`, or the mount path itself (a router nested at `/jobs`
    /// answers `/jobs`, not `/jobs/`).
    pub(super) fn home(&self) -> &str {
        if self.0.is_empty() {
            "/"
        } else {
            &self.0
        }
    }

    /// The path of the route `route` (which starts with `/`).
    pub(super) fn to(&self, route: &str) -> String {
        format!("{}{route}", self.0)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Base {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let inner = parts.uri.path();
        let original = parts
            .extensions
            .get::<OriginalUri>()
            .map_or(inner, |o| o.0.path());
        // `nest("/jobs")` routes `/jobs` (no slash) to the inner `/`.
        let prefix = original
            .strip_suffix(inner)
            .or_else(|| original.strip_suffix(inner.trim_end_matches('/')))
            .unwrap_or("");
        Ok(Base(prefix.to_owned()))
    }
}

/// What every page's frame (`base.html`) shows.
pub(super) struct Frame {
    /// The mount path (`base.html` builds links as `{{ base }}/route`).
    base: String,
    /// The overview's path.
    home: String,
    csrf: String,
    /// Seconds between reloads by `console.js`; 0: none.
    refresh: u32,
    notice: Option<String>,
}

impl Frame {
    fn new(app: &Shared, base: Base) -> Frame {
        Frame {
            home: base.home().to_owned(),
            base: base.0,
            csrf: app.guard.csrf().to_owned(),
            refresh: 0,
            notice: None,
        }
    }
}

/// What an action reports on the page it redirects to (`?done=`): a fixed set, so a link
/// cannot make the console say something else.
#[derive(Deserialize, Default)]
pub(super) struct Done {
    done: Option<String>,
    n: Option<u64>,
}

impl Done {
    fn notice(&self) -> Option<String> {
        let n = self.n.unwrap_or(0);
        Some(match self.done.as_deref()? {
            "cancelled" => "Cancelled: it will not run.".to_owned(),
            "removed" => "Removed.".to_owned(),
            "purged" if n == 1 => "Purged 1 dead job.".to_owned(),
            "purged" => format!("Purged {} dead jobs.", view::count(n)),
            _ => return None,
        })
    }
}

#[derive(Template)]
#[template(path = "console/overview.html")]
struct Overview {
    frame: Frame,
    pending: String,
    running: String,
}

pub(super) async fn overview(
    State(app): State<Shared>,
    base: Base,
    Query(done): Query<Done>,
) -> Response {
    let mut frame = Frame::new(&app, base);
    frame.refresh = 5;
    frame.notice = done.notice();
    let counts = async { Ok::<_, Error>((app.queue.pending().await?, app.queue.running().await?)) };
    match counts.await {
        Ok((pending, running)) => page(
            StatusCode::OK,
            &Overview {
                frame,
                pending: view::count(pending),
                running: view::count(running),
            },
        ),
        Err(err) => error_page(frame, status_of(&err), err.to_string()),
    }
}

struct JobView {
    state: &'static str,
    run_at: Time,
    attempt: u32,
    payload: Payload,
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
    State(app): State<Shared>,
    base: Base,
    Query(query): Query<JobQuery>,
    Query(done): Query<Done>,
) -> Response {
    let mut frame = Frame::new(&app, base);
    frame.notice = done.notice();
    let Some(id) = query.id else {
        return error_page(
            frame,
            StatusCode::BAD_REQUEST,
            "which job? add ?id=…".into(),
        );
    };
    match app.queue.get(&id).await {
        Ok(info) => {
            let now = SystemTime::now();
            let status = if info.is_some() || frame.notice.is_some() {
                StatusCode::OK
            } else {
                StatusCode::NOT_FOUND
            };
            let job = info.map(|info| JobView {
                state: view::state(info.state()),
                run_at: view::time(info.run_at(), now),
                attempt: info.attempt(),
                payload: view::payload(info.payload()),
            });
            page(status, &JobPage { frame, id, job })
        }
        Err(err) => error_page(frame, status_of(&err), err.to_string()),
    }
}

#[derive(Template)]
#[template(path = "console/error.html")]
struct ErrorPage {
    frame: Frame,
    status: StatusCode,
    message: String,
}

pub(super) fn error_page(frame: Frame, status: StatusCode, message: String) -> Response {
    page(
        status,
        &ErrorPage {
            frame,
            status,
            message,
        },
    )
}

/// An error page for an action, which has a [`Base`] but no frame yet.
pub(super) fn refuse(app: &Shared, base: Base, status: StatusCode, message: String) -> Response {
    error_page(Frame::new(app, base), status, message)
}

/// The HTTP status for a queue error: the client's fault, the store's absence, or ours.
pub(super) fn status_of(err: &Error) -> StatusCode {
    if err.is_invalid_id() {
        StatusCode::BAD_REQUEST
    } else if err.is_unavailable() || err.is_closed() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}

fn page(status: StatusCode, template: &impl Template) -> Response {
    match template.render() {
        Ok(html) => (status, Html(html)).into_response(),
        Err(err) => (StatusCode::INTERNAL_SERVER_ERROR, err.to_string()).into_response(),
    }
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
