//! The console's actions: POSTs of a form carrying the CSRF token, each one `JobQueue`
//! call, answered with a redirect to the page that shows the outcome (303 See Other, so a
//! reload does not post again).

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::pages::{refuse, status_of, Base};
use super::Shared;

#[derive(Deserialize)]
pub(super) struct ActionForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    id: String,
}

/// The action form, once its CSRF token is checked; else the status and message to refuse
/// it with.
fn admitted(
    app: &Shared,
    form: Result<Form<ActionForm>, FormRejection>,
) -> Result<ActionForm, (StatusCode, String)> {
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
        }
    }
}

async fn on_job(
    app: Shared,
    base: Base,
    form: Result<Form<ActionForm>, FormRejection>,
    action: OnJob,
) -> Response {
    let form = match admitted(&app, form) {
        Ok(form) => form,
        Err((status, why)) => return refuse(&app, base, status, why),
    };
    let result = match action {
        OnJob::Cancel => app.queue.cancel(&form.id).await,
        OnJob::RemoveDead => app.queue.remove_dead(&form.id).await,
    };
    let (done, unchanged) = action.words();
    match result {
        Ok(true) => {
            let id = askama::filters::urlencode_strict(&form.id).unwrap_or_else(|n| match n {});
            Redirect::to(&base.to(&format!("/job?id={id}&done={done}"))).into_response()
        }
        Ok(false) => refuse(
            &app,
            base,
            StatusCode::CONFLICT,
            format!("job {:?} {unchanged}", form.id),
        ),
        Err(err) => refuse(&app, base, status_of(&err), err.to_string()),
    }
}

pub(super) async fn cancel(
    State(app): State<Shared>,
    base: Base,
    form: Result<Form<ActionForm>, FormRejection>,
) -> Response {
    on_job(app, base, form, OnJob::Cancel).await
}

pub(super) async fn remove_dead(
    State(app): State<Shared>,
    base: Base,
    form: Result<Form<ActionForm>, FormRejection>,
) -> Response {
    on_job(app, base, form, OnJob::RemoveDead).await
}

pub(super) async fn purge_dead(
    State(app): State<Shared>,
    base: Base,
    form: Result<Form<ActionForm>, FormRejection>,
) -> Response {
    if let Err((status, why)) = admitted(&app, form) {
        return refuse(&app, base, status, why);
    }
    match app.queue.purge_dead().await {
        Ok(n) => Redirect::to(&format!("{}?done=purged&n={n}", base.home())).into_response(),
        Err(err) => refuse(&app, base, status_of(&err), err.to_string()),
    }
}
