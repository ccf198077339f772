//! Typed payloads (feature `serde`): [`TypedQueue`] and [`TypedDelivery`], a queue whose
//! payloads are a Rust type, stored as JSON.
//!
//! # Ground rules
//!
//! - A thin layer over [`JobQueue`] and [`Delivery`]: the store still holds bytes (JSON, so a
//!   console or `redis-cli` shows them as text), and typed and untyped handles of one queue
//!   see the same jobs.
//! - Encoding happens before the call reaches the queue: a value that does not encode is
//!   refused ([`Error::is_invalid_input`]) and nothing is stored.
//! - A payload that does not decode as `T` never reaches the handler and never panics: its
//!   delivery fails like a handler's `Err` (the serde error as its last error), and after
//!   `max_attempts` the job is dead, kept for inspection.
//! - A typed queue bound to a kind ([`JobQueue::typed_kind`]) schedules every job with that
//!   kind and runs only that kind: one Rust type per kind, and a worker of one kind never
//!   decodes another kind's payload.

use std::any::type_name;
use std::borrow::Borrow;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::core::error::Error;
use crate::core::job::{Scheduled, When};
use crate::core::kind::{assert_kind, JobOptions};
use crate::queue::delivery::Delivery;
use crate::queue::{worker, JobQueue};

/// A [`JobQueue`] whose payloads are values of `T`, stored as JSON. Made by
/// [`JobQueue::typed`]; cheap to clone.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct RateOrder {
///     order: u64,
///     stars: u8,
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), wheel_jobs::Error> {
/// # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-typed-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// let queue = wheel_jobs::JobQueue::open(dir.join("jobs.redb")).await?;
/// let typed = queue.typed::<RateOrder>();
/// typed.schedule("rate:order-42", Duration::ZERO, &RateOrder { order: 42, stars: 5 }).await?;
///
/// let (done, mut rated) = tokio::sync::mpsc::unbounded_channel();
/// tokio::spawn(async move {
///     typed.run(16, move |job| {
///         let done = done.clone();
///         async move {
///             done.send((job.payload().order, job.payload().stars)).ok();
///             Ok::<(), std::io::Error>(())
///         }
///     }).await
/// });
/// assert_eq!(rated.recv().await, Some((42, 5)));
/// # queue.close().await?;
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok(())
/// # }
/// ```
pub struct TypedQueue<T> {
    queue: JobQueue,
    /// The kind every job is scheduled with and `run` claims; `None`: no kind of its own
    /// (jobs scheduled without one, every kind run).
    kind: Option<String>,
    // `fn() -> T`: the queue holds no `T`, so it is Send and Sync whatever `T` is.
    payload: PhantomData<fn() -> T>,
}

impl<T> Clone for TypedQueue<T> {
    fn clone(&self) -> Self {
        TypedQueue {
            queue: self.queue.clone(),
            kind: self.kind.clone(),
            payload: PhantomData,
        }
    }
}

impl<T> fmt::Debug for TypedQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedQueue")
            .field("payload", &type_name::<T>())
            .field("kind", &self.kind)
            .field("queue", &self.queue)
            .finish()
    }
}

impl JobQueue {
    /// This queue with payloads of type `T`, stored as JSON (feature `serde`). Typed and
    /// untyped handles of a queue see the same jobs.
    pub fn typed<T>(&self) -> TypedQueue<T>
    where
        T: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        TypedQueue {
            queue: self.clone(),
            kind: None,
            payload: PhantomData,
        }
    }

    /// This queue's jobs of `kind`, with payloads of type `T` stored as JSON (feature
    /// `serde`): [`schedule`](TypedQueue::schedule) gives each job that kind (its options
    /// come from the kind's defaults, [`Builder::kind`](crate::Builder::kind)), and
    /// [`run`](TypedQueue::run) claims only jobs of that kind, as
    /// [`run_kind`](JobQueue::run_kind) does.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use serde::{Deserialize, Serialize};
    /// use wheel_jobs::JobOptions;
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Rate { order: u64, stars: u8 }
    /// #[derive(Serialize, Deserialize)]
    /// struct Remind { user: String }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_jobs::Error> {
    /// # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-typed-kind-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// let queue = wheel_jobs::JobQueue::open(dir.join("jobs.redb")).await?;
    /// let rates = queue.typed_kind::<Rate>("rate");
    /// let reminders = queue.typed_kind::<Remind>("remind");
    /// rates.schedule("rate:42", Duration::ZERO, &Rate { order: 42, stars: 5 }).await?;
    /// let urgent = JobOptions::new().priority(10);
    /// reminders.schedule_with("remind:ann", Duration::ZERO, &Remind { user: "ann".into() }, &urgent).await?;
    /// assert_eq!(queue.get("remind:ann").await?.expect("stored").kind(), "remind");
    ///
    /// // Each worker decodes its own kind's type only.
    /// let (done, mut rated) = tokio::sync::mpsc::unbounded_channel();
    /// tokio::spawn(async move {
    ///     rates.run(8, move |job| {
    ///         let done = done.clone();
    ///         async move {
    ///             done.send(job.payload().stars).ok();
    ///             Ok::<(), std::io::Error>(())
    ///         }
    ///     }).await
    /// });
    /// assert_eq!(rated.recv().await, Some(5));
    /// # queue.close().await?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// Panics if `kind` is longer than [`MAX_KIND_LEN`](crate::MAX_KIND_LEN) bytes or holds
    /// a control character (no job has such a kind).
    #[track_caller]
    pub fn typed_kind<T>(&self, kind: &str) -> TypedQueue<T>
    where
        T: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        assert_kind("typed_kind", kind);
        TypedQueue {
            queue: self.clone(),
            kind: Some(kind.to_owned()),
            payload: PhantomData,
        }
    }
}

fn encode<T: Serialize>(payload: &T) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(payload).map_err(|err| {
        Error::invalid_input(format!(
            "the payload does not encode as JSON ({}): {err}",
            type_name::<T>()
        ))
    })
}

/// Why a typed delivery failed: its payload did not decode, or the handler failed.
enum Failure<E> {
    Decode(String),
    Handler(E),
}

impl<E: fmt::Display> fmt::Display for Failure<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Decode(why) => f.write_str(why),
            Failure::Handler(err) => err.fmt(f),
        }
    }
}

impl<T> TypedQueue<T>
where
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    /// The untyped queue (for `get`, `list`, `cancel`, `pause`, …).
    pub fn queue(&self) -> &JobQueue {
        &self.queue
    }

    /// The kind this queue is bound to ([`JobQueue::typed_kind`]), if any.
    pub fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }

    /// [`JobQueue::schedule`] with `payload` encoded as JSON; on a queue bound to a kind,
    /// [`JobQueue::schedule_with`] that kind.
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_input`] if the payload does not encode (a map with non-string
    /// keys, a failing `Serialize`); otherwise as [`JobQueue::schedule`] (and
    /// [`JobQueue::schedule_with`] on a queue bound to a kind).
    pub async fn schedule(
        &self,
        id: &str,
        when: impl Into<When>,
        payload: &T,
    ) -> Result<Scheduled, Error> {
        let bytes = encode(payload)?;
        match &self.kind {
            Some(kind) => {
                let options = JobOptions::kind(kind.as_str());
                self.queue.schedule_with(id, when, bytes, &options).await
            }
            None => self.queue.schedule(id, when, bytes).await,
        }
    }

    /// [`JobQueue::schedule_with`] with `payload` encoded as JSON. On a queue bound to a
    /// kind, the job is of that kind: `options` may leave the kind unset or name the same
    /// one.
    ///
    /// # Errors
    ///
    /// As [`schedule`](Self::schedule) and [`JobQueue::schedule_with`];
    /// [`Error::is_invalid_input`] if `options` names another kind than the queue's.
    pub async fn schedule_with(
        &self,
        id: &str,
        when: impl Into<When>,
        payload: &T,
        options: &JobOptions,
    ) -> Result<Scheduled, Error> {
        let options = self.bind(options)?;
        let bytes = encode(payload)?;
        self.queue.schedule_with(id, when, bytes, &options).await
    }

    /// `options` with this queue's kind, or why they cannot have it.
    fn bind(&self, options: &JobOptions) -> Result<JobOptions, Error> {
        let Some(kind) = &self.kind else {
            return Ok(options.clone());
        };
        match options.kind_name() {
            Some(other) if other != kind => Err(Error::invalid_input(format!(
                "the options name the kind {other:?}, this typed queue schedules {kind:?}"
            ))),
            _ => Ok(options.clone().of_kind(kind.as_str())),
        }
    }

    /// [`JobQueue::schedule_many`] with each payload encoded as JSON.
    ///
    /// # Errors
    ///
    /// As [`schedule`](Self::schedule); a payload that does not encode refuses the whole
    /// batch before anything is stored.
    pub async fn schedule_many<I, S, W, P>(&self, jobs: I) -> Result<Vec<Scheduled>, Error>
    where
        I: IntoIterator<Item = (S, W, P)>,
        S: Into<String>,
        W: Into<When>,
        P: Borrow<T>,
    {
        let mut batch = Vec::new();
        for (id, when, payload) in jobs {
            batch.push((id.into(), when.into(), encode(payload.borrow())?));
        }
        match &self.kind {
            Some(kind) => {
                let options = JobOptions::kind(kind.as_str());
                self.queue.schedule_many_with(batch, &options).await
            }
            None => self.queue.schedule_many(batch).await,
        }
    }

    /// [`JobQueue::run`] with each payload decoded as `T` before the handler sees it; on a
    /// queue bound to a kind, [`JobQueue::run_kind`] of that kind.
    ///
    /// A payload that does not decode is failed like a handler's `Err` (its last error says
    /// why, naming `T`) without calling the handler, and so goes dead after
    /// [`max_attempts`](crate::Builder::max_attempts): never a panic.
    ///
    /// # Errors
    ///
    /// As [`JobQueue::run`].
    ///
    /// # Panics
    ///
    /// Panics if `concurrency` is 0.
    #[track_caller]
    pub fn run<F, Fut, E>(
        &self,
        concurrency: usize,
        handler: F,
    ) -> impl Future<Output = Result<(), Error>> + Send
    where
        F: Fn(TypedDelivery<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: fmt::Display + Send + 'static,
    {
        assert!(
            concurrency > 0,
            "wheel-jobs: run needs a concurrency of at least 1"
        );
        let handler = Arc::new(handler);
        let decoding = move |delivery: Delivery| {
            let handler = handler.clone();
            async move {
                let payload = match serde_json::from_slice::<T>(delivery.payload()) {
                    Ok(payload) => payload,
                    Err(err) => {
                        return Err(Failure::Decode(format!(
                            "the payload does not decode as {}: {err}",
                            type_name::<T>()
                        )))
                    }
                };
                let job = TypedDelivery { delivery, payload };
                handler(job).await.map_err(Failure::Handler)
            }
        };
        worker::run(
            self.queue.inner.clone(),
            self.kind.clone(),
            concurrency,
            decoding,
        )
    }
}

/// One due job of a [`TypedQueue`], its payload decoded: a [`Delivery`] and its `T`.
pub struct TypedDelivery<T> {
    delivery: Delivery,
    payload: T,
}

impl<T: fmt::Debug> fmt::Debug for TypedDelivery<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedDelivery")
            .field("delivery", &self.delivery)
            .field("payload", &self.payload)
            .finish()
    }
}

impl<T> TypedDelivery<T> {
    /// The decoded payload.
    pub fn payload(&self) -> &T {
        &self.payload
    }

    /// The decoded payload, owned (the delivery is dropped: its lease runs on until it ends
    /// or `run` settles it).
    pub fn into_payload(self) -> T {
        self.payload
    }

    /// The delivery itself, for everything else it offers.
    pub fn delivery(&self) -> &Delivery {
        &self.delivery
    }

    /// The job's id.
    pub fn id(&self) -> &str {
        self.delivery.id()
    }

    /// As [`Delivery::attempt`].
    pub fn attempt(&self) -> u32 {
        self.delivery.attempt()
    }

    /// As [`Delivery::run_at`].
    pub fn run_at(&self) -> SystemTime {
        self.delivery.run_at()
    }

    /// As [`Delivery::ack`].
    ///
    /// # Errors
    ///
    /// As [`Delivery::ack`].
    pub async fn ack(&self) -> Result<bool, Error> {
        self.delivery.ack().await
    }

    /// As [`Delivery::retry`].
    ///
    /// # Errors
    ///
    /// As [`Delivery::retry`].
    pub async fn retry(&self, after: Duration) -> Result<bool, Error> {
        self.delivery.retry(after).await
    }

    /// As [`Delivery::fail`].
    ///
    /// # Errors
    ///
    /// As [`Delivery::fail`].
    pub async fn fail(&self, after: Duration, error: impl fmt::Display) -> Result<bool, Error> {
        self.delivery.fail(after, error).await
    }

    /// As [`Delivery::extend`].
    ///
    /// # Errors
    ///
    /// As [`Delivery::extend`].
    pub async fn extend(&self, by: Duration) -> Result<bool, Error> {
        self.delivery.extend(by).await
    }
}
