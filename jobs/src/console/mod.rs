//! A web console for a queue (feature `console`): an axum [`Router`] to mount in one's own
//! app, or to run with `wheel-jobs serve`.
//!
//! # Ground rules
//!
//! - The console reads and acts only through [`JobQueue`]'s public calls: it has no private
//!   path into a store, so it sees what an app sees and works on every backend. No page
//!   counts or scans the queue; each asks the store for O(1) or O(page) work.
//! - Every request passes the guard (`guard.rs`) before any route runs: with a token, the
//!   token must come with it (401 otherwise); without one, only requests addressed to a
//!   loopback host are served (403 otherwise), so a web page elsewhere cannot reach a
//!   console on `127.0.0.1` through DNS rebinding, and only from a loopback peer when the
//!   server records peers (`into_make_service_with_connect_info::<SocketAddr>()`, as
//!   `wheel-jobs serve` does). A token-less request carrying `Forwarded`,
//!   `X-Forwarded-For` or `X-Real-IP` is refused: behind a reverse proxy every client looks
//!   local, so a proxied console needs a token.
//! - Reads are GETs and change nothing; every change is a POST carrying the console's CSRF
//!   token (in each form: derived from the console's token, so replicas agree; without
//!   one, a random value per router). A GET to an action route is 405 Method Not Allowed.
//! - Every value shown (ids, kinds, payloads, errors) goes through the template engine's
//!   HTML escaping (askama, templates in `jobs/templates/console/`, checked at compile
//!   time); nothing is escaped or marked safe by hand. A `?kind=` filter that no job could
//!   have (too long, a control character) is refused (400), never echoed. Pages also
//!   forbid inline scripts and framing (a `Content-Security-Policy` on every response), so
//!   even an escaping mistake could not run a script.
//! - Links and redirects are built from the path the router is mounted at (`Base`), so the
//!   router works at `/` and nested under any prefix.
//! - Rates (deliveries and failures per minute, lateness) are what a [`Recorder`] in this
//!   process saw the queue's workers do; nothing derives them from the store.

mod actions;
mod frame;
mod guard;
mod pages;
mod recorder;
mod view;

use std::fmt;
use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;

use crate::queue::JobQueue;

use self::guard::Guard;
pub use self::recorder::Recorder;

/// Configures a console [`Router`] for one [`JobQueue`]. [`router`] is the default one.
///
/// # Examples
///
/// Mounted in one's own app under `/jobs/` (the only way to look into an embedded store
/// while the app that holds it runs):
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), wheel_jobs::Error> {
/// # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-console-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// let queue = wheel_jobs::JobQueue::open(dir.join("jobs.redb")).await?;
/// let console = wheel_jobs::console::Console::new(queue.clone())
///     .token("a long random secret")
///     .router();
/// let app: axum::Router = axum::Router::new().nest("/jobs", console);
/// # drop(app);
/// # queue.close().await?;
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Console {
    queue: JobQueue,
    token: Option<Arc<str>>,
    any_host: bool,
    recorder: Option<Recorder>,
}

impl fmt::Debug for Console {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Console")
            .field("queue", &self.queue)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("any_host", &self.any_host)
            .field("recorder", &self.recorder)
            .finish()
    }
}

impl Console {
    /// A console for `queue`, without a token: it serves only requests addressed to a
    /// loopback host (`localhost`, `127.0.0.1`, `[::1]`), from a loopback peer if the
    /// server records peers (serve it with
    /// `into_make_service_with_connect_info::<SocketAddr>()` so it does), and none that
    /// came through a reverse proxy (`Forwarded`, `X-Forwarded-For`, `X-Real-IP`): a
    /// console behind a proxy needs a [`token`](Console::token).
    pub fn new(queue: JobQueue) -> Console {
        Console {
            queue,
            token: None,
            any_host: false,
            recorder: None,
        }
    }

    /// Requires `token` on every request, from any host: as the password of HTTP Basic
    /// authentication (a browser asks for it; the user name is ignored) or as
    /// `Authorization: Bearer <token>` (scripts, Prometheus). Anything else gets 401.
    ///
    /// # Panics
    ///
    /// Panics if `token` is empty.
    #[track_caller]
    pub fn token(&mut self, token: impl Into<String>) -> &mut Self {
        let token = token.into();
        assert!(!token.is_empty(), "wheel-jobs console: the token is empty");
        self.token = Some(token.into());
        self
    }

    /// Without a token, serves requests addressed to any host, for a router mounted behind
    /// the app's own authentication. Anyone who can reach it can then act on the queue.
    pub fn allow_any_host(&mut self) -> &mut Self {
        self.any_host = true;
        self
    }

    /// Shows the rates `recorder` saw on the overview (deliveries and failures per minute
    /// over the last hour, lateness p99), and serves its series on `/metrics`. Without
    /// one, the overview shows the counts only, and `/metrics` the counts as gauges.
    pub fn recorder(&mut self, recorder: Recorder) -> &mut Self {
        self.recorder = Some(recorder);
        self
    }

    /// The router: pages at `/` (overview), `/jobs/{pending,running,dead}` (a page of each
    /// list) and `/job?id=…`; `/metrics` (Prometheus text); actions as POSTs; static
    /// assets under `/assets/`. With a [`token`](Console::token), the forms' CSRF token
    /// is derived from it, so routers with the same token (replicas behind a load
    /// balancer, a restarted console) accept each other's forms; without one, each call
    /// makes a new random CSRF token, so forms rendered by one router are refused by
    /// another.
    ///
    /// # Panics
    ///
    /// Panics, without a token, if the operating system gives no randomness for the CSRF
    /// token (a broken system: every platform tokio runs on has it).
    pub fn router(&self) -> Router {
        let app = Arc::new(App {
            queue: self.queue.clone(),
            guard: Arc::new(Guard::new(self.token.clone(), self.any_host)),
            recorder: self.recorder.clone(),
        });
        Router::new()
            .route("/", get(pages::overview))
            .route("/jobs/{state}", get(pages::list))
            .route("/job", get(pages::job))
            .route("/metrics", get(pages::metrics))
            .route("/job/cancel", post(actions::cancel))
            .route("/job/remove", post(actions::remove_dead))
            .route("/job/revive", post(actions::revive))
            .route("/dead/revive", post(actions::revive_all_dead))
            .route("/dead/purge", post(actions::purge_dead))
            .route("/pause", post(actions::pause))
            .route("/resume", post(actions::resume))
            .route("/assets/console.css", get(pages::stylesheet))
            .route("/assets/console.js", get(pages::script))
            .layer(axum::middleware::from_fn_with_state(
                app.guard.clone(),
                guard::check,
            ))
            .with_state(app)
    }
}

/// A console router for `queue` with the defaults of [`Console::new`]: no token, loopback
/// hosts only.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), wheel_jobs::Error> {
/// # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-router-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// let queue = wheel_jobs::JobQueue::open(dir.join("jobs.redb")).await?;
/// let app = wheel_jobs::console::router(queue.clone());
/// // axum::serve(tokio::net::TcpListener::bind("127.0.0.1:8080").await?, app).await?;
/// # drop(app);
/// # queue.close().await?;
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok(())
/// # }
/// ```
///
/// # Panics
///
/// As [`Console::router`]: if the operating system gives no randomness.
pub fn router(queue: JobQueue) -> Router {
    Console::new(queue).router()
}

/// What every route shares.
struct App {
    queue: JobQueue,
    guard: Arc<Guard>,
    recorder: Option<Recorder>,
}

/// What every handler gets: the console's settings and its queue, shared by the router.
type AppState = Arc<App>;
