//! Recurring series on PostgreSQL: each series step as statements inside one transaction,
//! the rules in `core/series.rs` (this file follows `embedded/series.rs` step for step).
//!
//! # Ground rules
//!
//! - `series` holds a series' record: catch-up policy (`runs`), the head's time and job id,
//!   the last delivered occurrence's time, the recurrence's text form, the payload and the
//!   spec its occurrences are made with ([`Made`]: kind, priority, attempts, backoff, lease;
//!   NULL options, a series of version 3, read as the plain spec). The head is an ordinary
//!   pending job of that kind and priority in `jobs`, inserted with those columns as they
//!   are.
//! - Setting and cancelling a series take a transaction-scoped advisory lock on the
//!   series, then its row; the claim step takes the series row and then the head's job row
//!   with `SKIP LOCKED` (it never waits, so it cannot deadlock against a setter): a head
//!   that is busy is claimed by a later claim.
//! - The first claim of a head (the main claim statement leaves heads out and lists the due
//!   heads of the kinds it claims, with their kind and priority) runs [`first_claim`] and
//!   leases what it delivers in the same transaction ([`SeriesSql::claim_heads`]): the series
//!   moves if and only if its head is claimed, and only by a claim of the head's kind.

use sqlx::postgres::{PgConnection, PgRow};
use sqlx::{PgPool, Row};

use super::error::pg_error;
use super::names::Names;
use super::sql::{dec, enc, span, Head, Leased, Sql};
use crate::core::error::Error;
use crate::core::kind::Spec;
use crate::core::recurrence::Recurrence;
use crate::core::series::{self, occurrence_id, CatchUp, Recurring, RecurringInfo, Rules, Step};
use crate::core::state::{Machine, Status};

fn db<T>(r: Result<T, sqlx::Error>) -> Result<T, Error> {
    r.map_err(pg_error)
}

/// One series as stored.
#[derive(Debug, Clone)]
pub(super) struct Record {
    runs: u32,
    head: Option<u64>,
    last: Option<u64>,
    rule: String,
    payload: Vec<u8>,
    made: Made,
}

/// What a series' occurrences are made with, as its columns hold it (`kind`, `priority`,
/// `max_attempts`, `backoff_first`, `backoff_max`, `lease`): every option of a series set
/// by version 4, none (NULL: the reading handle's plain spec) of one set by version 3, whose
/// kind is `''` and priority 0. An occurrence's job row gets these columns as they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Made {
    kind: String,
    priority: i16,
    max_attempts: Option<i32>,
    backoff_first: Option<i64>,
    backoff_max: Option<i64>,
    lease: Option<i64>,
}

/// The select list of [`Made`]'s columns, in [`Made::read`]'s order.
const MADE: &str = "kind, priority, max_attempts, backoff_first, backoff_max, lease";

impl Made {
    /// A spec as stored: all of it (a series takes no key and no hold-off).
    fn of(spec: &Spec) -> Made {
        Made {
            kind: spec.kind.clone(),
            priority: spec.priority.into(),
            max_attempts: Some(i32::try_from(spec.max_attempts).unwrap_or(i32::MAX)),
            backoff_first: Some(span(spec.backoff.0)),
            backoff_max: Some(span(spec.backoff.1)),
            lease: Some(span(spec.lease)),
        }
    }

    /// The columns [`MADE`] at `i..i + 6` of `r`.
    fn read(r: &PgRow, i: usize) -> Result<Made, Error> {
        Ok(Made {
            kind: db(r.try_get(i))?,
            priority: db(r.try_get(i + 1))?,
            max_attempts: db(r.try_get(i + 2))?,
            backoff_first: db(r.try_get(i + 3))?,
            backoff_max: db(r.try_get(i + 4))?,
            lease: db(r.try_get(i + 5))?,
        })
    }

    /// The spec it stands for, NULL options `plain`'s (as a job row's read).
    fn spec(&self, plain: &Spec) -> Spec {
        let ns = |v: Option<i64>| v.map(|v| std::time::Duration::from_nanos(v.max(0) as u64));
        Spec {
            kind: self.kind.clone(),
            priority: i8::try_from(self.priority).unwrap_or(if self.priority < 0 {
                i8::MIN
            } else {
                i8::MAX
            }),
            max_attempts: self
                .max_attempts
                .map_or(plain.max_attempts, |a| u32::try_from(a).unwrap_or(1)),
            backoff: (
                ns(self.backoff_first).unwrap_or(plain.backoff.0),
                ns(self.backoff_max).unwrap_or(plain.backoff.1),
            ),
            lease: ns(self.lease).unwrap_or(plain.lease),
            hold_off: std::time::Duration::ZERO,
            key: None,
        }
    }

    /// Binds the columns, in [`MADE`]'s order.
    fn bind<'q>(
        &'q self,
        q: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        q.bind(&self.kind)
            .bind(self.priority)
            .bind(self.max_attempts)
            .bind(self.backoff_first)
            .bind(self.backoff_max)
            .bind(self.lease)
    }
}

/// A job [`SeriesSql::load_job`] read: as the state machine sees it, its kind and priority,
/// and whether it has a key (or a key's limits).
#[derive(Debug)]
struct Found {
    job: Machine,
    kind: String,
    priority: i16,
    keyed: bool,
}

/// The statements of the series steps.
#[derive(Debug)]
pub(super) struct SeriesSql {
    lock: String,
    load: String,
    load_skip_locked: String,
    save: String,
    delete: String,
    list: String,
    load_job: String,
    load_job_skip_locked: String,
    load_dead: String,
    insert_job: String,
    delete_pending: String,
    set_head: String,
    lease: String,
    schema: String,
}

impl SeriesSql {
    pub(super) fn new(n: &Names) -> SeriesSql {
        let Names {
            jobs, dead, series, ..
        } = n;
        let load = format!(
            "SELECT runs, head, last, rule, payload, {MADE} FROM {series} \
             WHERE queue = $1 AND name = $2 FOR UPDATE"
        );
        SeriesSql {
            lock: "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))".to_owned(),
            load_skip_locked: format!("{load} SKIP LOCKED"),
            load,
            save: format!(
                "INSERT INTO {series} (queue, name, runs, head, head_id, last, rule, payload, {MADE}) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
                 ON CONFLICT (queue, name) DO UPDATE SET \
                 runs = excluded.runs, head = excluded.head, head_id = excluded.head_id, \
                 last = excluded.last, rule = excluded.rule, payload = excluded.payload, \
                 kind = excluded.kind, priority = excluded.priority, \
                 max_attempts = excluded.max_attempts, backoff_first = excluded.backoff_first, \
                 backoff_max = excluded.backoff_max, lease = excluded.lease"
            ),
            delete: format!("DELETE FROM {series} WHERE queue = $1 AND name = $2"),
            list: format!(
                "SELECT name, runs, head, last, rule, {MADE} FROM {series} WHERE queue = $1 ORDER BY name"
            ),
            load_job: format!(
                "SELECT run_at, attempt, token, lease_until, kind, priority, \
                 key IS NOT NULL OR key_limit IS NOT NULL OR rate_starts IS NOT NULL FROM {jobs} \
                 WHERE queue = $1 AND id = $2 FOR UPDATE"
            ),
            load_job_skip_locked: format!(
                "SELECT run_at, attempt, token, kind FROM {jobs} \
                 WHERE queue = $1 AND id = $2 FOR UPDATE SKIP LOCKED"
            ),
            load_dead: format!("SELECT died_at FROM {dead} WHERE queue = $1 AND id = $2"),
            insert_job: format!(
                "INSERT INTO {jobs} (queue, id, run_at, payload, {MADE}) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
                 ON CONFLICT (queue, id) DO NOTHING RETURNING 1"
            ),
            delete_pending: format!(
                "DELETE FROM {jobs} WHERE queue = $1 AND id = $2 AND token IS NULL \
                 AND key_limit IS NULL AND rate_starts IS NULL"
            ),
            // A kept head takes the series' new payload and spec: its kind's counters, due
            // index and lists follow the row (the update trigger counts it out of its old
            // kind and into its new one).
            set_head: format!(
                "UPDATE {jobs} SET payload = $3, kind = $4, priority = $5, max_attempts = $6, \
                 backoff_first = $7, backoff_max = $8, lease = $9 \
                 WHERE queue = $1 AND id = $2 AND token IS NULL"
            ),
            // Machine::claim of a head, which is pending with attempt 0 (so never killed),
            // for its own lease (NULL, as a version-3 series' occurrence is written: the
            // queue's, $4). A head
            // is never gated (`place_head`); `NOT waiting` holds a gate's limit all the same.
            lease: format!(
                "UPDATE {jobs} SET attempt = attempt + 1, token = $3, \
                 lease_until = LEAST((extract(epoch FROM clock_timestamp()) * 1000000000)::numeric \
                 + coalesce(lease, $4), 9223372036854775807)::bigint \
                 WHERE queue = $1 AND id = $2 AND token IS NULL AND NOT waiting \
                 RETURNING payload, attempt, run_at, kind, priority, max_attempts, backoff_first, \
                 backoff_max, lease, hold_off, key, key_limit, rate_starts, rate_per"
            ),
            schema: n.schema.clone(),
        }
    }

    /// Serializes the setters of one series.
    async fn lock(&self, c: &mut PgConnection, queue: &str, name: &str) -> Result<(), Error> {
        let key = format!("wheel-jobs series {} {queue} {name}", self.schema);
        db(sqlx::query(&self.lock).bind(key).execute(c).await)?;
        Ok(())
    }

    async fn load(
        &self,
        c: &mut PgConnection,
        queue: &str,
        name: &str,
        skip_locked: bool,
    ) -> Result<Option<Record>, Error> {
        let text = if skip_locked {
            &self.load_skip_locked
        } else {
            &self.load
        };
        let row = db(sqlx::query(text)
            .bind(queue)
            .bind(name)
            .fetch_optional(c)
            .await)?;
        row.map(|r| {
            Ok(Record {
                runs: u32::try_from(db(r.try_get::<i64, _>(0))?).unwrap_or(u32::MAX),
                head: db(r.try_get::<Option<i64>, _>(1))?.map(dec),
                last: db(r.try_get::<Option<i64>, _>(2))?.map(dec),
                rule: db(r.try_get(3))?,
                payload: db(r.try_get(4))?,
                made: Made::read(&r, 5)?,
            })
        })
        .transpose()
    }

    async fn save(
        &self,
        c: &mut PgConnection,
        queue: &str,
        name: &str,
        r: &Record,
    ) -> Result<(), Error> {
        let q = sqlx::query(&self.save)
            .bind(queue)
            .bind(name)
            .bind(i64::from(r.runs))
            .bind(r.head.map(enc))
            .bind(r.head.map(|h| occurrence_id(name, h)))
            .bind(r.last.map(enc))
            .bind(&r.rule)
            .bind(&r.payload);
        db(r.made.bind(q).execute(c).await)?;
        Ok(())
    }

    /// The job `id` as [`Found`], locked if it is pending or running.
    async fn load_job(
        &self,
        c: &mut PgConnection,
        queue: &str,
        id: &str,
    ) -> Result<Option<Found>, Error> {
        let row = db(sqlx::query(&self.load_job)
            .bind(queue)
            .bind(id)
            .fetch_optional(&mut *c)
            .await)?;
        if let Some(r) = row {
            let token: Option<i64> = db(r.try_get(2))?;
            let until: Option<i64> = db(r.try_get(3))?;
            let status = match (token, until) {
                (Some(token), Some(until)) => Status::Running {
                    token: token as u64,
                    until: dec(until),
                },
                _ => Status::Pending,
            };
            let job = Machine {
                run_at: dec(db(r.try_get(0))?),
                attempt: u32::try_from(db(r.try_get::<i32, _>(1))?).unwrap_or(0),
                status,
            };
            return Ok(Some(Found {
                job,
                kind: db(r.try_get(4))?,
                priority: db(r.try_get(5))?,
                keyed: db(r.try_get(6))?,
            }));
        }
        let dead = db(sqlx::query(&self.load_dead)
            .bind(queue)
            .bind(id)
            .fetch_optional(c)
            .await)?;
        dead.map(|r| {
            let job = Machine {
                run_at: 0,
                attempt: 0,
                status: Status::Dead {
                    at: dec(db(r.try_get(0))?),
                },
            };
            Ok(Found {
                job,
                kind: String::new(),
                priority: 0,
                keyed: true,
            })
        })
        .transpose()
    }

    /// Makes the occurrence at `at` (or the first after it whose id is free, and after
    /// `last`) the head of `name`, a job made with `made` (`embedded/series.rs`
    /// `place_head`).
    #[allow(clippy::too_many_arguments)] // the series' parts, each named once here
    async fn place_head(
        &self,
        c: &mut PgConnection,
        queue: &str,
        rule: &Recurrence,
        name: &str,
        mut at: Option<u64>,
        last: Option<u64>,
        payload: &[u8],
        made: &Made,
    ) -> Result<Option<u64>, Error> {
        while let Some(time) = at {
            if let Some(last) = last.filter(|&last| time <= last) {
                // At or before an occurrence delivered already: times only grow.
                at = rule.next_after_nanos(last);
                continue;
            }
            let id = occurrence_id(name, time);
            match self.load_job(c, queue, &id).await? {
                None => {
                    let q = sqlx::query(&self.insert_job)
                        .bind(queue)
                        .bind(&id)
                        .bind(enc(time))
                        .bind(payload);
                    let inserted = db(made.bind(q).fetch_optional(&mut *c).await)?;
                    if inserted.is_some() {
                        return Ok(Some(time));
                    }
                    // Scheduled by hand meanwhile: look at it again.
                }
                // Never delivered, of the series' kind and priority, no key: it becomes
                // the head as it is.
                Some(found) if adoptable(&found, made) => return Ok(Some(time)),
                // Delivered already, or a job of its own (another kind or priority, or a
                // key): never made twice, that time is skipped.
                Some(_) => at = rule.next_after_nanos(time),
            }
        }
        Ok(None)
    }

    async fn drop_head(
        &self,
        c: &mut PgConnection,
        queue: &str,
        name: &str,
        head: Option<u64>,
    ) -> Result<(), Error> {
        let Some(head) = head else { return Ok(()) };
        db(sqlx::query(&self.delete_pending)
            .bind(queue)
            .bind(occurrence_id(name, head))
            .execute(c)
            .await)?;
        Ok(())
    }

    /// Gives the head at `head`, if still a never-delivered pending job the series made
    /// with `old` (its kind and priority, no key), the payload and the spec `made`.
    #[allow(clippy::too_many_arguments)] // the series' parts, each named once here
    async fn keep_head(
        &self,
        c: &mut PgConnection,
        queue: &str,
        name: &str,
        head: Option<u64>,
        old: &Made,
        payload: &[u8],
        made: &Made,
    ) -> Result<Option<u64>, Error> {
        let Some(head) = head else { return Ok(None) };
        let id = occurrence_id(name, head);
        match self.load_job(c, queue, &id).await? {
            Some(found) if adoptable(&found, old) => {
                let q = sqlx::query(&self.set_head)
                    .bind(queue)
                    .bind(&id)
                    .bind(payload);
                db(made.bind(q).execute(&mut *c).await)?;
                Ok(Some(head))
            }
            _ => Ok(None),
        }
    }

    /// `schedule_recurring`, in the caller's transaction (`embedded/series.rs` `set`): its
    /// occurrences made with `spec`.
    #[allow(clippy::too_many_arguments)] // the series' parts, each named once here
    pub(super) async fn set(
        &self,
        c: &mut PgConnection,
        queue: &str,
        now: u64,
        name: &str,
        rule: &Recurrence,
        payload: Vec<u8>,
        catch_up: CatchUp,
        spec: &Spec,
    ) -> Result<(Recurring, Option<u64>), Error> {
        self.lock(c, queue, name).await?;
        let old = self.load(c, queue, name, false).await?;
        let text = rule.to_string();
        let made = Made::of(spec);
        let mut kept = None;
        let outcome = match &old {
            Some(old) if old.rule == text => {
                kept = self
                    .keep_head(c, queue, name, old.head, &old.made, &payload, &made)
                    .await?;
                Recurring::Updated
            }
            Some(old) => {
                match old.head {
                    Some(head) if head <= now && keeps_due_head(old, head, now) => {}
                    _ => self.drop_head(c, queue, name, old.head).await?,
                }
                Recurring::Updated
            }
            None => Recurring::Created,
        };
        let last = old.and_then(|old| old.last);
        let head = match kept {
            Some(head) => Some(head),
            None => {
                let first = rule.next_after_nanos(now);
                self.place_head(c, queue, rule, name, first, last, &payload, &made)
                    .await?
            }
        };
        let record = Record {
            runs: catch_up.runs(),
            head,
            last,
            rule: text,
            payload,
            made,
        };
        self.save(c, queue, name, &record).await?;
        Ok((outcome, head))
    }

    /// `cancel_recurring`, in the caller's transaction.
    pub(super) async fn cancel(
        &self,
        c: &mut PgConnection,
        queue: &str,
        name: &str,
    ) -> Result<bool, Error> {
        self.lock(c, queue, name).await?;
        let Some(old) = self.load(c, queue, name, false).await? else {
            return Ok(false);
        };
        self.drop_head(c, queue, name, old.head).await?;
        db(sqlx::query(&self.delete)
            .bind(queue)
            .bind(name)
            .execute(c)
            .await)?;
        Ok(true)
    }

    /// `list_recurring`: every series in name order but those whose rule no longer parses,
    /// each with its spec (NULL options: `plain`'s).
    pub(super) async fn list(
        &self,
        c: &mut PgConnection,
        queue: &str,
        rules: &std::sync::Mutex<Rules>,
        plain: &Spec,
    ) -> Result<Vec<RecurringInfo>, Error> {
        let rows = db(sqlx::query(&self.list).bind(queue).fetch_all(c).await)?;
        let mut out = Vec::new();
        for r in rows {
            let name: String = db(r.try_get(0))?;
            let text: String = db(r.try_get(4))?;
            let rule = match rules.lock().expect("rules").get(&text) {
                Ok(rule) => rule.clone(),
                Err(err) => {
                    series::unparsable(&name, &text, &err);
                    continue;
                }
            };
            let runs = u32::try_from(db(r.try_get::<i64, _>(1))?).unwrap_or(u32::MAX);
            out.push(RecurringInfo::new(
                name,
                rule,
                CatchUp::from_runs(runs),
                Made::read(&r, 5)?.spec(plain),
                db(r.try_get::<Option<i64>, _>(2))?.map(dec),
                db(r.try_get::<Option<i64>, _>(3))?.map(dec),
            ));
        }
        Ok(out)
    }

    /// The first claims of the due `heads` a claim listed and has room for, in one
    /// transaction: each one's [`first_claim`](Self::first_claim), and what it delivers
    /// leased under `token` (NULL options: `plain`'s); one answer per head, in order. Each
    /// head's step is a savepoint of its own: one that fails (its series' next occurrence
    /// refused, say) is rolled back and answered as its error, and the others go on and
    /// commit (a claim merged from several callers' delivers their heads all the same). The
    /// outer error is the transaction's own (begin, the clock, the commit).
    #[allow(clippy::too_many_arguments)] // the claim's parts, each named once here
    pub(super) async fn claim_heads(
        &self,
        pool: &PgPool,
        sql: &Sql,
        queue: &str,
        rules: &std::sync::Mutex<Rules>,
        plain: &Spec,
        heads: &[Head],
        token: i64,
    ) -> Result<Vec<Result<Option<Leased>, Error>>, Error> {
        let mut tx = db(pool.begin().await)?;
        let now = sql.now(&mut *tx).await?;
        let mut out = Vec::with_capacity(heads.len());
        for head in heads {
            let mut step = db(sqlx::Connection::begin(&mut *tx).await)?;
            let claimed = async {
                let Some(id) = self
                    .first_claim(&mut step, queue, rules, now, &head.id, &head.kind)
                    .await?
                else {
                    return Ok(None);
                };
                let leased = self.lease(&mut step, queue, &id, token, plain).await?;
                Ok(leased
                    .map(|(payload, attempt, run_at, spec)| (id, payload, attempt, run_at, spec)))
            }
            .await;
            match claimed {
                Ok(leased) => {
                    db(step.commit().await)?;
                    out.push(Ok(leased));
                }
                Err(err) => {
                    db(step.rollback().await)?;
                    tracing::warn!(head = %head.id, kind = %head.kind, error = %err, "wheel-jobs: the first claim of a series head failed; rolled back, it is claimed again later");
                    out.push(Err(err));
                }
            }
        }
        db(tx.commit().await)?;
        Ok(out)
    }

    /// The first claim of the due head `id` of the kind `kind` (as the claim listed it) at
    /// `now`, in the claim's transaction (`embedded/series.rs` `on_first_claim`): moves the
    /// series by [`series::on_due`] and returns the job to deliver (the head, or a later
    /// occurrence of that kind the catch-up picks), or `None` if the series or its head is
    /// busy elsewhere, moved, no longer of `kind`, or superseded by one not yet due or not
    /// of `kind` (a claim of its kind takes it).
    pub(super) async fn first_claim(
        &self,
        c: &mut PgConnection,
        queue: &str,
        rules: &std::sync::Mutex<Rules>,
        now: u64,
        id: &str,
        kind: &str,
    ) -> Result<Option<String>, Error> {
        let Some(name) = series::series_of(id) else {
            return Ok(None);
        };
        let Some(mut record) = self.load(c, queue, name, true).await? else {
            return Ok(None);
        };
        let Some(mut head) = record.head.filter(|&h| occurrence_id(name, h) == id) else {
            return Ok(None);
        };
        // The head's job, locked without waiting; a head must be pending, never delivered,
        // and of the kind this claim takes.
        match self.load_job_skip_locked(c, queue, id).await? {
            Some((job, of))
                if job.status == Status::Pending
                    && job.attempt == 0
                    && job.run_at <= now
                    && of == kind => {}
            _ => return Ok(None),
        }
        let parsed = rules.lock().expect("rules").get(&record.rule).cloned();
        let rule = match parsed {
            Ok(rule) => rule,
            Err(err) => {
                // Failing the claim would fail every claim that meets this head, for good.
                series::unparsable(name, &record.rule, &err);
                record.last = Some(head);
                record.head = None;
                self.save(c, queue, name, &record).await?;
                return Ok(Some(id.to_owned()));
            }
        };
        let catch_up = CatchUp::from_runs(record.runs);
        let mut head_id = id.to_owned();
        // At most twice round: an occurrence the catch-up picks is within the policy's
        // count, so its own step is `Deliver`; each round the head only grows.
        loop {
            match series::on_due(&rule, catch_up, head, now) {
                Step::Deliver { next } => {
                    record.last = Some(head);
                    record.head = self
                        .place_head(
                            c,
                            queue,
                            &rule,
                            name,
                            next,
                            record.last,
                            &record.payload,
                            &record.made,
                        )
                        .await?;
                    self.save(c, queue, name, &record).await?;
                    return Ok(Some(head_id));
                }
                Step::Skip { to } => {
                    db(sqlx::query(&self.delete_pending)
                        .bind(queue)
                        .bind(&head_id)
                        .execute(&mut *c)
                        .await)?;
                    record.head = self
                        .place_head(
                            c,
                            queue,
                            &rule,
                            name,
                            to,
                            record.last,
                            &record.payload,
                            &record.made,
                        )
                        .await?;
                    let due = record.head.filter(|&h| h <= now);
                    let loaded = match due {
                        Some(h) => self
                            .load_job(c, queue, &occurrence_id(name, h))
                            .await?
                            .filter(|f| f.job.status == Status::Pending && f.kind == kind)
                            .map(|_| h),
                        None => None,
                    };
                    let Some(h) = loaded else {
                        self.save(c, queue, name, &record).await?;
                        return Ok(None);
                    };
                    (head, head_id) = (h, occurrence_id(name, h));
                }
            }
        }
    }

    /// The job `id` locked without waiting, and its kind.
    async fn load_job_skip_locked(
        &self,
        c: &mut PgConnection,
        queue: &str,
        id: &str,
    ) -> Result<Option<(Machine, String)>, Error> {
        let row = db(sqlx::query(&self.load_job_skip_locked)
            .bind(queue)
            .bind(id)
            .fetch_optional(c)
            .await)?;
        row.map(|r| {
            let job = Machine {
                run_at: dec(db(r.try_get(0))?),
                attempt: u32::try_from(db(r.try_get::<i32, _>(1))?).unwrap_or(0),
                status: match db(r.try_get::<Option<i64>, _>(2))? {
                    None => Status::Pending,
                    Some(token) => Status::Running {
                        token: token as u64,
                        until: 0,
                    },
                },
            };
            Ok((job, db(r.try_get(3))?))
        })
        .transpose()
    }
    /// Leases the job `id` under `token` for its own lease (NULL options: `plain`'s):
    /// (payload, attempt, run_at, spec).
    pub(super) async fn lease(
        &self,
        c: &mut PgConnection,
        queue: &str,
        id: &str,
        token: i64,
        plain: &Spec,
    ) -> Result<Option<(Vec<u8>, u32, u64, Spec)>, Error> {
        let row = db(sqlx::query(&self.lease)
            .bind(queue)
            .bind(id)
            .bind(token)
            .bind(super::sql::span(plain.lease))
            .fetch_optional(c)
            .await)?;
        row.map(|r| {
            Ok((
                db(r.try_get(0))?,
                u32::try_from(db(r.try_get::<i32, _>(1))?).unwrap_or(0),
                dec(db(r.try_get(2))?),
                super::sql::spec(&r, 3, plain)?,
            ))
        })
        .transpose()
    }
}

/// Whether a job [`SeriesSql::load_job`] read may be the head of a series whose
/// occurrences are made with `made`: pending, never delivered, of its kind and priority,
/// without a key (a gate would not know it as a head, and its limits would not hold).
fn adoptable(found: &Found, made: &Made) -> bool {
    found.job.status == Status::Pending
        && found.job.attempt == 0
        && !found.keyed
        && found.kind == made.kind
        && found.priority == made.priority
}

/// Whether the old series' head at `head`, due at `now`, runs before a new recurrence
/// replaces it (one whose rule no longer parses keeps it: nothing is dropped on a guess).
fn keeps_due_head(old: &Record, head: u64, now: u64) -> bool {
    match old.rule.parse::<Recurrence>() {
        Ok(rule) => series::keeps_due_head(&rule, CatchUp::from_runs(old.runs), head, now),
        Err(_) => true,
    }
}
