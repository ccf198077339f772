//! The application's pool, far too small for the work, shared by the queue and its
//! handlers (feature `postgres`): claims, acks, schedules and the handlers' own
//! transactions all queue for the same two connections, and none of them may wait for a
//! second connection while holding one, or the pool deadlocks.

use std::time::Duration;

use wheel_jobs::sqlx::{self, postgres::PgPoolOptions, Row};
use wheel_jobs::{Builder, JobQueue};

use crate::support::ms;
use crate::support::postgres::{fresh_queue, shared};

/// Only fails a hung test: the work takes a few seconds.
const HANG: Duration = Duration::from_secs(120);

/// Connections in the shared pool.
const POOL: u32 = 2;
/// Handlers at once, each wanting a connection of the pool for its transaction.
const CONCURRENCY: usize = 50;
/// Jobs scheduled while the worker runs, by [`SCHEDULERS`] tasks.
const JOBS: usize = 1_000;
const SCHEDULERS: usize = 4;

/// Schedules `JOBS / SCHEDULERS` jobs (`<who>-<n>`), one at a time: even-numbered
/// schedulers through the queue's own batches, odd-numbered in a transaction of their own
/// (`schedule_in`), both on the shared pool.
async fn schedule_some(queue: JobQueue, pool: sqlx::PgPool, who: usize) {
    for n in 0..JOBS / SCHEDULERS {
        let id = format!("{who}-{n}");
        if who.is_multiple_of(2) {
            queue.schedule(&id, Duration::ZERO, "p").await.unwrap();
        } else {
            let mut tx = pool.begin().await.unwrap();
            queue
                .schedule_in(&mut tx, &id, Duration::ZERO, "p")
                .await
                .unwrap();
            tx.commit().await.unwrap();
        }
    }
}

/// A pool of two connections, shared by the queue (`postgres_pool`), by schedulers and by
/// 50 handlers that each write an effect and `ack_in` in their own transaction: every job's
/// effect is committed exactly once with its ack, and nothing is left pending, running or
/// dead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_tiny_shared_pool_does_not_deadlock_claims_against_acks() {
    let pool = PgPoolOptions::new()
        .max_connections(POOL)
        .connect(&shared().url())
        .await
        .unwrap();
    let effects = format!("effects_{}", fresh_queue());
    sqlx::query(&format!("CREATE TABLE {effects} (id text NOT NULL)"))
        .execute(&pool)
        .await
        .unwrap();
    let queue = Builder::new()
        .postgres_pool(pool.clone(), &fresh_queue())
        .await
        .unwrap();

    let worker = {
        let (queue, pool, effects) = (queue.clone(), pool.clone(), effects.clone());
        tokio::spawn(async move {
            queue
                .run(CONCURRENCY, move |job| {
                    let (pool, effects) = (pool.clone(), effects.clone());
                    async move {
                        let mut tx = pool.begin().await.map_err(|e| e.to_string())?;
                        sqlx::query(&format!("INSERT INTO {effects} (id) VALUES ($1)"))
                            .bind(job.id())
                            .execute(&mut *tx)
                            .await
                            .map_err(|e| e.to_string())?;
                        if job.ack_in(&mut tx).await.map_err(|e| e.to_string())? {
                            tx.commit().await.map_err(|e| e.to_string())?;
                        }
                        Ok::<(), String>(())
                    }
                })
                .await
        })
    };
    let schedulers: Vec<_> = (0..SCHEDULERS)
        .map(|who| tokio::spawn(schedule_some(queue.clone(), pool.clone(), who)))
        .collect();

    let done = async {
        for scheduler in schedulers {
            scheduler.await.unwrap();
        }
        loop {
            let counts = queue.counts().await.unwrap();
            assert_eq!(counts.dead, 0, "jobs out of attempts");
            if counts.pending + counts.running == 0 {
                break;
            }
            tokio::time::sleep(ms(50)).await;
        }
    };
    tokio::time::timeout(HANG, done)
        .await
        .expect("claims, acks and schedules on a pool of two deadlocked");

    let row = sqlx::query(&format!(
        "SELECT count(*), count(DISTINCT id) FROM {effects}"
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    let (effects_committed, distinct): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!(distinct, JOBS as i64, "every job's effect");
    assert_eq!(effects_committed, JOBS as i64, "each effect once");
    queue.close().await.unwrap();
    worker.await.unwrap().unwrap();
}
