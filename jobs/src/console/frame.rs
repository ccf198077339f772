//! What every page shares: where the console is mounted ([`Base`]), the frame around each
//! page ([`Frame`], `base.html`), the notes actions leave ([`Done`]), rendering, and the
//! error page.

use askama::Template;
use axum::extract::{FromRequestParts, OriginalUri, Query};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::AppState;
use crate::core::error::Error;

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
    pub(super) base: String,
    /// The overview's path.
    pub(super) home: String,
    pub(super) csrf: String,
    /// Seconds between reloads by `console.js`; 0: none.
    pub(super) refresh: u32,
    pub(super) notice: Option<String>,
    /// The navigation entry of this page: `overview`, `pending`, `running`, `dead`.
    pub(super) current: &'static str,
}

impl Frame {
    pub(super) fn new(app: &AppState, base: Base) -> Frame {
        Frame {
            home: base.home().to_owned(),
            base: base.0,
            csrf: app.guard.csrf().to_owned(),
            refresh: 0,
            notice: None,
            current: "",
        }
    }
}

/// What an action reports on the page it redirects to (`?done=`): a fixed set of notes
/// without numbers, so a link cannot make the console say something else (a count in the
/// address would be whatever the link says; the page shows the counts the store keeps).
#[derive(Deserialize, Default)]
pub(super) struct Done {
    done: Option<String>,
}

impl Done {
    pub(super) fn notice(&self) -> Option<String> {
        Some(
            match self.done.as_deref()? {
                "cancelled" => "Cancelled: it will not run.",
                "removed" => "Removed.",
                "revived" => "Revived: pending again, due now, attempts from zero.",
                "revived-all" => "Revived the dead jobs: pending again, due now.",
                "purged" => "Purged the dead jobs.",
                "paused" => "Paused: no consumer claims a job until the queue is resumed.",
                "resumed" => "Resumed: consumers claim due jobs again.",
                _ => return None,
            }
            .to_owned(),
        )
    }
}

/// A page's query string, read with axum's `Query`; one the page cannot read (`?limit=abc`)
/// gets the console's error page (400), not axum's plain-text rejection.
pub(super) struct PageQuery<T>(pub(super) T);

impl<T: DeserializeOwned + Send> FromRequestParts<AppState> for PageQuery<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, Response> {
        match Query::<T>::from_request_parts(parts, app).await {
            Ok(Query(query)) => Ok(PageQuery(query)),
            Err(rejected) => {
                let Ok(base) = Base::from_request_parts(parts, app).await;
                let why = format!(
                    "this page cannot read its address: {}",
                    rejected.body_text()
                );
                Err(error_page(
                    Frame::new(app, base),
                    StatusCode::BAD_REQUEST,
                    why,
                ))
            }
        }
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
pub(super) fn refuse(app: &AppState, base: Base, status: StatusCode, message: String) -> Response {
    error_page(Frame::new(app, base), status, message)
}

/// The HTTP status for a queue error: the client's fault, the store's absence, or ours.
pub(super) fn status_of(err: &Error) -> StatusCode {
    if err.is_invalid_id() || err.is_invalid_input() {
        StatusCode::BAD_REQUEST
    } else if err.is_unavailable() || err.is_closed() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}

pub(super) fn page(status: StatusCode, template: &impl Template) -> Response {
    match template.render() {
        Ok(html) => (status, Html(html)).into_response(),
        Err(err) => (StatusCode::INTERNAL_SERVER_ERROR, err.to_string()).into_response(),
    }
}
