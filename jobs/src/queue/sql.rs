//! The transactional forms of a queue on PostgreSQL (feature `postgres`): schedule, cancel,
//! reschedule and ack inside the application's own transaction, so "insert the order" and
//! "schedule its job" commit together or not at all.
//!
//! # Ground rules
//!
//! - Each form runs one statement (`schedule_in` two, two more per id repeated in one call) on the caller's connection (a
//!   `Transaction` derefs to one) and changes nothing else: the caller's commit makes it durable, a rollback undoes
//!   it, and the commit's `NOTIFY` wakes idle consumers in every process.
//! - Input is checked as by the plain forms; a queue on another backend refuses with
//!   [`Error::is_invalid_input`].

use sqlx::PgConnection;

use crate::backend::postgres::Postgres;
use crate::backend::NewJob;
use crate::core::error::Error;
use crate::core::job::{check_id, check_payload, Scheduled, When};
use crate::core::kind::{Dedup, JobOptions, Spec};
use crate::queue::delivery::Delivery;
use crate::queue::hub::Hub;
use crate::queue::JobQueue;

fn on_postgres(hub: &Hub) -> Result<&Postgres, Error> {
    hub.backend.postgres().ok_or_else(|| {
        Error::invalid_input("a transactional form needs a queue opened with Builder::postgres")
    })
}

impl JobQueue {
    /// [`schedule`](Self::schedule) inside the caller's transaction: the job exists if and
    /// only if that transaction commits, and its commit wakes idle consumers. `conn` is a
    /// connection of the queue's database (a `&mut *tx` of an open
    /// [`Transaction`](sqlx::Transaction)); the queue's schema must be visible on it.
    ///
    /// [`Scheduled::Exists`] as for `schedule`; a job another open transaction is creating
    /// under the same id makes this call wait for that transaction's end. The other way
    /// round too: until this transaction ends, a plain [`schedule`](crate::JobQueue::schedule)
    /// of the same id (from any handle) waits for it, up to `postgres_timeout`, then answers
    /// as its commit or rollback decides; schedules of other ids do not wait.
    ///
    /// A job it replaced ([`Dedup::Replace`](crate::Dedup::Replace)) stays locked until this
    /// transaction ends: no worker claims it meanwhile. A job it finds existing (or running,
    /// for a Replace) is answered without a lock, except in one narrow case: if another
    /// transaction creates or claims the job in the instant between this statement's start
    /// and its write, that job's row stays locked (and unchanged) until this transaction
    /// ends, which delays its worker's ack, retry or extension until then.
    ///
    /// A successor it stores beside a running job
    /// ([`Dedup::AllowWhileRunning`](crate::Dedup::AllowWhileRunning)) locks that job's
    /// row until this transaction ends: that job's own ack, retry or extension waits for
    /// the commit (which decides whether the successor exists), up to `postgres_timeout`.
    /// Acks, retries and extensions of other jobs, from the same handle or any other, do
    /// not wait for it. A running job that already has one, or one of another mode's
    /// schedule, is answered without a lock.
    ///
    /// # Examples
    ///
    /// The order and its 48 h rating job commit together:
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn f(pool: wheel_jobs::sqlx::PgPool, queue: wheel_jobs::JobQueue) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut tx = pool.begin().await?;
    /// wheel_jobs::sqlx::query("INSERT INTO orders (oid, status) VALUES ($1, 'finished')")
    ///     .bind(42_i64)
    ///     .execute(&mut *tx)
    ///     .await?;
    /// queue.schedule_in(&mut tx, "rate:42", Duration::from_secs(48 * 3600), "5 stars").await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_id`], [`Error::is_payload_too_large`],
    /// [`Error::is_invalid_input`] on a queue not on PostgreSQL, [`Error::is_unavailable`]
    /// or [`Error::is_storage`] from the statement (the caller's transaction is then
    /// aborted, as PostgreSQL aborts it on any error).
    pub async fn schedule_in(
        &self,
        conn: &mut PgConnection,
        id: &str,
        when: impl Into<When>,
        payload: impl Into<Vec<u8>>,
    ) -> Result<Scheduled, Error> {
        let spec = self.inner.defaults.plain().clone();
        self.schedule_in_spec(conn, id, when.into(), payload.into(), spec, Dedup::Keep)
            .await
    }

    /// [`schedule_in`](Self::schedule_in) with options, as
    /// [`schedule_with`](Self::schedule_with) takes them: the job, with its kind,
    /// priority, attempts, backoff and lease, exists if and only if the caller's
    /// transaction commits.
    ///
    /// A job with a key limit or rate ([`JobOptions::key_limit`],
    /// [`key_rate`](JobOptions::key_rate)) locks its key's gate (one row per kind and
    /// key) until this transaction ends: acks and retries of that key's jobs wait for the
    /// commit, and claims leave that key's jobs for a claim after it (they never wait);
    /// other keys' jobs go on. Each statement takes the gates it touches in one
    /// order, but a transaction writing jobs of two keys in two statements (schedules,
    /// cancels, reschedules, [`Delivery::ack_in`]) takes them in its own: if another
    /// transaction takes them in the other order, the server picks one of the two as a
    /// deadlock victim, which fails with [`Error::is_unavailable`]. Roll back and run the
    /// transaction again.
    ///
    /// # Examples
    ///
    /// The payment and its capture job, of its own kind and priority, commit together:
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use wheel_jobs::JobOptions;
    /// # async fn f(pool: wheel_jobs::sqlx::PgPool, queue: wheel_jobs::JobQueue) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut tx = pool.begin().await?;
    /// wheel_jobs::sqlx::query("INSERT INTO payments (oid, status) VALUES ($1, 'authorized')")
    ///     .bind(42_i64)
    ///     .execute(&mut *tx)
    ///     .await?;
    /// let capture = JobOptions::kind("capture").priority(10).max_attempts(3);
    /// queue.schedule_in_with(&mut tx, "capture:42", Duration::from_secs(60), "42", &capture).await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`schedule_in`](Self::schedule_in), and as [`schedule_with`](Self::schedule_with)
    /// for options that cannot be used ([`Error::is_invalid_input`]).
    pub async fn schedule_in_with(
        &self,
        conn: &mut PgConnection,
        id: &str,
        when: impl Into<When>,
        payload: impl Into<Vec<u8>>,
        options: &JobOptions,
    ) -> Result<Scheduled, Error> {
        let spec = self.inner.defaults.resolve(options)?;
        let dedup = self.inner.defaults.dedup_of(options);
        self.schedule_in_spec(conn, id, when.into(), payload.into(), spec, dedup)
            .await
    }

    async fn schedule_in_spec(
        &self,
        conn: &mut PgConnection,
        id: &str,
        when: When,
        payload: Vec<u8>,
        spec: Spec,
        dedup: Dedup,
    ) -> Result<Scheduled, Error> {
        check_id(id)?;
        check_payload(&payload, self.inner.config.max_payload)?;
        let job = NewJob {
            id: id.to_owned(),
            when,
            payload,
            spec,
            dedup,
        };
        on_postgres(&self.inner)?.schedule_in(conn, job).await
    }

    /// [`cancel`](Self::cancel) inside the caller's transaction: the job is gone if and only
    /// if that transaction commits ("paid" cancels the payment timeout in the payment's
    /// transaction). The job's row stays locked until then, so no consumer claims it
    /// meanwhile.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(pool: wheel_jobs::sqlx::PgPool, queue: wheel_jobs::JobQueue) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut tx = pool.begin().await?;
    /// wheel_jobs::sqlx::query("UPDATE orders SET status = 'paid' WHERE oid = $1")
    ///     .bind(42_i64)
    ///     .execute(&mut *tx)
    ///     .await?;
    /// queue.cancel_in(&mut tx, "unpaid-timeout:42").await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`schedule_in`](Self::schedule_in).
    pub async fn cancel_in(&self, conn: &mut PgConnection, id: &str) -> Result<bool, Error> {
        check_id(id)?;
        on_postgres(&self.inner)?.cancel_in(conn, id).await
    }

    /// [`reschedule`](Self::reschedule) inside the caller's transaction.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn f(pool: wheel_jobs::sqlx::PgPool, queue: wheel_jobs::JobQueue) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut tx = pool.begin().await?;
    /// queue.reschedule_in(&mut tx, "rate:42", Duration::from_secs(3600)).await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`schedule_in`](Self::schedule_in).
    pub async fn reschedule_in(
        &self,
        conn: &mut PgConnection,
        id: &str,
        when: impl Into<When>,
    ) -> Result<bool, Error> {
        check_id(id)?;
        on_postgres(&self.inner)?
            .reschedule_in(conn, id, when.into())
            .await
    }
}

impl Delivery {
    /// [`ack`](Self::ack) inside the caller's transaction, so a handler's effects in the
    /// same database and the job's completion commit together: exactly-once effects.
    ///
    /// `true`: the lease was held, and the job is deleted when the transaction commits
    /// (its row is locked until then, so the job is not delivered again meanwhile). `false`
    /// or an error: the lease was lost (the job was delivered again, or is gone) or the
    /// check failed, and the caller **must not commit** (roll back: another delivery owns
    /// the job's effects). A rollback after `true` leaves the job leased to this delivery
    /// until its lease ends (in a [`run`](crate::JobQueue::run) handler, `true` stops the
    /// lease's renewals, as an ack does), then it is delivered again.
    ///
    /// A job with a successor ([`Dedup::AllowWhileRunning`]) hands over to it in the same
    /// statement: the successor is the pending job if and only if the transaction commits.
    ///
    /// Use a `READ COMMITTED` transaction (PostgreSQL's default). A lease renewal (which
    /// [`run`](crate::JobQueue::run) makes while the handler works) committed after the
    /// transaction's snapshot was taken makes `ack_in` under `REPEATABLE READ` or
    /// `SERIALIZABLE` fail with a serialization error ([`Error::is_unavailable`]): roll back,
    /// and the job is delivered again.
    ///
    /// A job with a key limit or rate locks its key's gate until the transaction ends, as
    /// [`schedule_in_with`](crate::JobQueue::schedule_in_with) does, with the same
    /// deadlock to expect when the transaction writes jobs of another such key too: an
    /// [`Error::is_unavailable`], after which the transaction rolls back and the job is
    /// delivered again.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(pool: wheel_jobs::sqlx::PgPool, job: wheel_jobs::Delivery) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut tx = pool.begin().await?;
    /// wheel_jobs::sqlx::query("UPDATE orders SET stars = 5 WHERE oid = $1 AND stars IS NULL")
    ///     .bind(42_i64)
    ///     .execute(&mut *tx)
    ///     .await?;
    /// if job.ack_in(&mut tx).await? {
    ///     tx.commit().await?;
    /// } else {
    ///     tx.rollback().await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_input`] on a queue not on PostgreSQL, [`Error::is_unavailable`]
    /// or [`Error::is_storage`] from the statement.
    pub async fn ack_in(&self, conn: &mut PgConnection) -> Result<bool, Error> {
        let acked = on_postgres(self.hub())?
            .ack_in(conn, self.id(), self.token())
            .await;
        match acked {
            Ok(true) => self.settled(Ok(true)),
            other => other,
        }
    }
}
