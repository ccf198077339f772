//! The console's actions: POSTs of a form carrying the CSRF token, each one `JobQueue`
//! call, answered with a redirect to the page that shows the outcome (303 See Other, so a
//! reload does not post again).

use std::time::Duration;

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::frame::{refuse, status_of, Base};
use super::AppState;
use crate::core::kind::check_kind;

/// An action's form. Every field may be missing: what is missing is refused with a page
/// that says so, not with the extractor's plain-text rejection.
#[derive(Deserialize)]
pub(super) struct ActionForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    id: String,
    /// `dead`: go back to the dead list (a revive from it), not to the job.
    #[serde(default)]
    back: String,
    /// The kind the dead list was limited to (`?kind=`), kept when going back to it.
    #[serde(default)]
    kind: Option<String>,
}

type Posted = Result<Form<ActionForm>, FormRejection>;

/// The action form, once its CSRF token is checked; else the status and message to refuse
/// it with.
fn admitted(app: &AppState, form: Posted) -> Result<ActionForm, (StatusCode, String)> {
    match form {
        Ok(Form(form)) if app.guard.csrf_ok(&form.csrf) => Ok(form),
        Ok(_) => Err((
            StatusCode::FORBIDDEN,
            "this form's CSRF token is missing or stale (the console restarted?): reload the \
             page and try again"
                .into(),
        )),
        Err(rejected) => Err((StatusCode::BAD_REQUEST, rejected.body_text())),
    }
}

/// A call on one job, by id.
enum OnJob {
    Cancel,
    RemoveDead,
    Revive,
}

impl OnJob {
    /// The `done` note of the page redirected to, and why a `false` changed nothing.
    fn words(&self) -> (&'static str, &'static str) {
        match self {
            OnJob::Cancel => (
                "cancelled",
                "is not pending (running, dead or gone): nothing was cancelled",
            ),
            OnJob::RemoveDead => ("removed", "is not dead: nothing was removed"),
            OnJob::Revive => ("revived", "is not dead: nothing was revived"),
        }
    }
}

async fn on_job(app: AppState, base: Base, form: Posted, action: OnJob) -> Response {
    let form = match admitted(&app, form) {
        Ok(form) => form,
        Err((status, why)) => return refuse(&app, base, status, why),
    };
    let queue = &app.queue;
    let result = match action {
        OnJob::Cancel => queue.cancel(&form.id).await,
        OnJob::RemoveDead => queue.remove_dead(&form.id).await,
        OnJob::Revive => queue.revive(&form.id, Duration::ZERO).await,
    };
    let (done, unchanged) = action.words();
    match result {
        Ok(true) if form.back == "dead" => {
            // Back to the list as it was filtered. A kind no job can have is dropped, as
            // the list page would refuse it; the one kept is escaped like an id.
            let kind = match form.kind.as_deref().filter(|k| check_kind(k).is_ok()) {
                Some(kind) => {
                    let kind =
                        askama::filters::urlencode_strict(kind).unwrap_or_else(|n| match n {});
                    format!("&kind={kind}")
                }
                None => String::new(),
            };
            Redirect::to(&base.to(&format!("/jobs/dead?done={done}{kind}"))).into_response()
        }
        Ok(true) => {
            let id = askama::filters::urlencode_strict(&form.id).unwrap_or_else(|n| match n {});
            Redirect::to(&base.to(&format!("/job?id={id}&done={done}"))).into_response()
        }
        Ok(false) => {
            let why = match action {
                OnJob::Cancel => match queue.recurring_of(&form.id).await {
                    Ok(Some(series)) => format!(
                        "job {:?} is the next occurrence of the recurring series {:?}: \
                         cancel the series (JobQueue::cancel_recurring), not the occurrence",
                        form.id,
                        series.name()
                    ),
                    _ => format!("job {:?} {unchanged}", form.id),
                },
                _ => format!("job {:?} {unchanged}", form.id),
            };
            refuse(&app, base, StatusCode::CONFLICT, why)
        }
        Err(err) => refuse(&app, base, status_of(&err), err.to_string()),
    }
}

pub(super) async fn cancel(State(app): State<AppState>, base: Base, form: Posted) -> Response {
    on_job(app, base, form, OnJob::Cancel).await
}

pub(super) async fn remove_dead(State(app): State<AppState>, base: Base, form: Posted) -> Response {
    on_job(app, base, form, OnJob::RemoveDead).await
}

pub(super) async fn revive(State(app): State<AppState>, base: Base, form: Posted) -> Response {
    on_job(app, base, form, OnJob::Revive).await
}

/// A call on the whole queue.
enum OnQueue {
    ReviveAllDead,
    PurgeDead,
    Pause,
    Resume,
}

async fn on_queue(app: AppState, base: Base, form: Posted, action: OnQueue) -> Response {
    if let Err((status, why)) = admitted(&app, form) {
        return refuse(&app, base, status, why);
    }
    let queue = &app.queue;
    let done = match action {
        OnQueue::ReviveAllDead => queue
            .revive_all_dead(Duration::ZERO)
            .await
            .map(|_| "revived-all"),
        OnQueue::PurgeDead => queue.purge_dead().await.map(|_| "purged"),
        OnQueue::Pause => queue.pause().await.map(|()| "paused"),
        OnQueue::Resume => queue.resume().await.map(|()| "resumed"),
    };
    match done {
        Ok(done) => Redirect::to(&format!("{}?done={done}", base.home())).into_response(),
        Err(err) => refuse(&app, base, status_of(&err), err.to_string()),
    }
}

pub(super) async fn revive_all_dead(
    State(app): State<AppState>,
    base: Base,
    form: Posted,
) -> Response {
    on_queue(app, base, form, OnQueue::ReviveAllDead).await
}

pub(super) async fn purge_dead(State(app): State<AppState>, base: Base, form: Posted) -> Response {
    on_queue(app, base, form, OnQueue::PurgeDead).await
}

pub(super) async fn pause(State(app): State<AppState>, base: Base, form: Posted) -> Response {
    on_queue(app, base, form, OnQueue::Pause).await
}

pub(super) async fn resume(State(app): State<AppState>, base: Base, form: Posted) -> Response {
    on_queue(app, base, form, OnQueue::Resume).await
}
