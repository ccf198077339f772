//! [`JobQueue`]'s recurring series: validation once for every backend, then the trait.
//! The rules (one pending occurrence per series, moved by the claim of the current one,
//! catch-up) are in `core/series.rs`.

use std::time::SystemTime;

use super::JobQueue;
use crate::core::error::Error;
use crate::core::job::check_payload;
use crate::core::recurrence::Recurrence;
use crate::core::series::{
    check_name, occurrence_id, occurrence_series, CatchUp, Recurring, RecurringInfo,
    RecurringOptions,
};

impl JobQueue {
    /// Creates the recurring series `name`: a job with `payload` at every occurrence of
    /// `recurrence`, under the default catch-up policy ([`CatchUp::Latest`]). If the series
    /// exists, its recurrence and payload are replaced ([`Recurring::Updated`]) and its
    /// policy becomes the default: with the same recurrence its pending occurrence stays
    /// (with the new payload), so calling this at every start catches up what was missed;
    /// with another, the pending occurrence is replaced by the first of the new recurrence,
    /// unless already due (then it runs once first: see [`Recurring::Updated`]). Durable
    /// when it returns.
    ///
    /// Each occurrence is an ordinary job (it shows in [`get`](Self::get), gets leases,
    /// retries, and goes [`Dead`](crate::JobState::Dead) after
    /// [`max_attempts`](crate::Builder::max_attempts)) whose id is `name@` its time in
    /// RFC 3339 UTC (`digest@2026-12-01T12:00:00Z`) and whose
    /// [`run_at`](crate::Delivery::run_at) is that time. A series always has exactly one
    /// pending occurrence: the next one is created in the same atomic step that first
    /// claims the current one, so any number of processes consume the queue, each
    /// occurrence is delivered once (at least once, as every job), and a crash anywhere
    /// neither loses the series nor duplicates an occurrence.
    ///
    /// The first occurrence is the first after now (the store's clock; on Redis the
    /// server's).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheel_jobs::{Recurrence, Recurring};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_jobs::Error> {
    /// # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-recurring-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// # let queue = wheel_jobs::JobQueue::open(dir.join("jobs.redb")).await?;
    /// let evening = Recurrence::cron("0 20 * * *")?.in_tz("Asia/Shanghai")?;
    /// assert_eq!(queue.schedule_recurring("digest", evening.clone(), "all").await?, Recurring::Created);
    /// assert_eq!(queue.schedule_recurring("digest", evening, "new").await?, Recurring::Updated);
    /// let series = &queue.list_recurring().await?[0];
    /// println!("next digest at {:?}", series.next_run());
    /// assert_eq!(queue.pending().await?, 1); // its one pending occurrence
    /// # queue.close().await?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_id`] if `name` is empty, holds `@` or is longer than 225 bytes;
    /// [`Error::is_payload_too_large`]; [`Error::is_invalid_recurrence`] if the recurrence
    /// has no occurrence left; [`Error::is_storage`], [`Error::is_unavailable`],
    /// [`Error::is_closed`]. Nothing is stored after an input error.
    pub async fn schedule_recurring(
        &self,
        name: &str,
        recurrence: Recurrence,
        payload: impl Into<Vec<u8>>,
    ) -> Result<Recurring, Error> {
        self.schedule_recurring_with(name, recurrence, payload, CatchUp::default())
            .await
    }

    /// [`schedule_recurring`](Self::schedule_recurring) with [`RecurringOptions`]: the
    /// [`JobOptions`](crate::JobOptions) its occurrences are made with (a kind, routed to
    /// that kind's workers; a priority, attempts, backoff, lease), and a [`CatchUp`]
    /// policy: what to run when several occurrences fell due while nothing consumed the
    /// queue. A [`CatchUp`] or a [`JobOptions`](crate::JobOptions) alone converts.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use wheel_jobs::{CatchUp, Recurrence, RecurringOptions};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_jobs::Error> {
    /// # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-recurring-with-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// # let queue = wheel_jobs::JobQueue::open(dir.join("jobs.redb")).await?;
    /// let cleanup = Recurrence::every(Duration::from_secs(300))?;
    /// queue.schedule_recurring_with("cleanup", cleanup, "", CatchUp::None).await?;
    /// assert_eq!(queue.list_recurring().await?[0].catch_up(), CatchUp::None);
    /// let evening = Recurrence::cron("0 20 * * *")?;
    /// let digest = RecurringOptions::kind("digest").catch_up(CatchUp::None);
    /// queue.schedule_recurring_with("digest", evening, "", digest).await?;
    /// let series = queue.list_recurring().await?; // in name order
    /// assert_eq!((series[0].name(), series[1].kind()), ("cleanup", "digest"));
    /// # queue.close().await?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`schedule_recurring`](Self::schedule_recurring), and
    /// [`Error::is_invalid_input`] for options a job could not have, or a key, key limit or
    /// rate, or a dedup mode (see [`RecurringOptions`]).
    pub async fn schedule_recurring_with(
        &self,
        name: &str,
        recurrence: Recurrence,
        payload: impl Into<Vec<u8>>,
        options: impl Into<RecurringOptions>,
    ) -> Result<Recurring, Error> {
        let RecurringOptions { options, catch_up } = options.into();
        check_name(name)?;
        let spec = self.inner.defaults.resolve_series(&options)?;
        let payload = payload.into();
        check_payload(&payload, self.inner.config.max_payload)?;
        if recurrence.next_after(SystemTime::now()).is_none() {
            return Err(Error::invalid_recurrence(format!(
                "{recurrence} has no occurrence left before the year 2554"
            )));
        }
        let (outcome, head) = self
            .inner
            .backend
            .schedule_recurring(name.to_owned(), recurrence, payload, catch_up, spec)
            .await?;
        if let Some(head) = head {
            self.inner.wakeup.due_at(head);
        }
        Ok(outcome)
    }

    /// Deletes the series `name` and its pending occurrence: `true` if it existed. No
    /// further occurrence is created; one already delivered runs to its end (and its
    /// retries, if it fails).
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_id`] for a name no series can have, [`Error::is_storage`],
    /// [`Error::is_unavailable`], [`Error::is_closed`].
    pub async fn cancel_recurring(&self, name: &str) -> Result<bool, Error> {
        check_name(name)?;
        self.inner.backend.cancel_recurring(name.to_owned()).await
    }

    /// Every recurring series: its name, recurrence (and zone), catch-up policy, next run
    /// (the pending occurrence's time) and last run (the last occurrence delivered). In
    /// name order (on a partitioned Redis queue too: the partitions' series merged). A series whose stored
    /// recurrence no longer parses (one a later version refuses) is left out and logged
    /// (`tracing` warning); its pending occurrence runs once as an ordinary job, and
    /// [`schedule_recurring`](Self::schedule_recurring) sets it anew.
    ///
    /// # Errors
    ///
    /// [`Error::is_storage`], [`Error::is_unavailable`], [`Error::is_closed`].
    pub async fn list_recurring(&self) -> Result<Vec<RecurringInfo>, Error> {
        self.inner.backend.list_recurring().await
    }

    /// The series whose pending occurrence is the job `id`, or `None` if `id` is not one.
    /// That job cannot be [cancelled](Self::cancel) on its own (the series would have no
    /// pending occurrence left): [cancel the series](Self::cancel_recurring) instead. An
    /// id without an occurrence id's form (`name@` an RFC 3339 UTC time) is answered
    /// without a store read; one with it reads the series as
    /// [`list_recurring`](Self::list_recurring) does.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_jobs::Error> {
    /// # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-recurring-of-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// use wheel_jobs::Recurrence;
    ///
    /// let queue = wheel_jobs::JobQueue::open(dir.join("jobs.redb")).await?;
    /// let every_hour = Recurrence::every(std::time::Duration::from_secs(3600))?;
    /// queue.schedule_recurring("digest", every_hour, "").await?;
    /// let next = queue.list_recurring().await?[0].next_run().unwrap();
    /// let id = format!("digest@{}", jiff::Timestamp::try_from(next).unwrap());
    /// assert!(!queue.cancel(&id).await?);
    /// assert_eq!(queue.recurring_of(&id).await?.unwrap().name(), "digest");
    /// assert!(queue.recurring_of("digest").await?.is_none());
    /// # queue.close().await?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_storage`], [`Error::is_unavailable`], [`Error::is_closed`].
    pub async fn recurring_of(&self, id: &str) -> Result<Option<RecurringInfo>, Error> {
        let Some(name) = occurrence_series(id) else {
            return Ok(None);
        };
        let series = self.list_recurring().await?;
        Ok(series.into_iter().find(|series| {
            series.name() == name
                && series
                    .next_run_nanos()
                    .is_some_and(|at| occurrence_id(name, at) == id)
        }))
    }
}
