//! The shared suite: behaviour every backend must have, written once.
//!
//! Each `pub async fn` of the modules below takes a fresh [`Harness`];
//! `run_shared_suite!(harness)` turns them all into `#[tokio::test]`s for one backend, in the
//! module that invokes it (so a test's name is `<backend>::<test>`). Deadlines are real
//! wall-clock times (the store's clock decides what is due), kept to tens of milliseconds;
//! no assertion is about how long anything took, only about order, counts and "never before
//! `run_at`".

use std::time::Duration;

use wheel_jobs::JobQueue;

use crate::support::{next, Harness};

pub mod dedup;
pub mod keys;
pub mod kinds;
pub mod lease;
pub mod operate;
pub mod recurring;
pub mod schedule;
pub mod successor;
#[cfg(feature = "serde")]
pub mod typed;
pub mod worker;

/// One `#[tokio::test]` per name, in the invoking module, running
/// `crate::suite::<concept>::<name>` on a fresh `$harness`.
macro_rules! shared_suite {
    ($harness:expr; $($concept:ident { $($(#[$attr:meta])* $name:ident),* $(,)? })*) => {
        $($(
            $(#[$attr])*
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                crate::suite::$concept::$name($harness).await
            }
        )*)*
    };
}

/// The `keys` group against `$harness`: part of `run_shared_suite!`, and run alone where a
/// backend's variant is tested for fairness per key only (Redis under a one-partition ACL).
macro_rules! run_keys_suite {
    ($harness:expr) => {
        shared_suite!($harness;
            keys {
                a_key_is_stored_and_shown,
                a_key_without_limits_limits_nothing,
                a_key_limit_holds_and_an_ack_wakes_the_next,
                limits_are_per_kind_and_key,
                tenant_b_is_not_behind_tenant_as_backlog,
                a_key_limit_holds_under_a_busy_worker,
                retry_fail_and_death_free_the_slot,
                an_ended_lease_keeps_its_slot_until_its_last_attempt,
                waiting_jobs_are_pending_listed_cancelled_and_moved,
                a_due_job_goes_before_a_later_one_of_a_higher_priority,
                a_key_rate_holds_starts_to_its_window,
                bad_keys_and_limits_are_refused_and_nothing_is_stored,
            }
        );
    };
}

/// Every test of the suite against the harness `$harness` (an expression making a fresh one).
macro_rules! run_shared_suite {
    ($harness:expr) => {
        shared_suite!($harness;
            schedule {
                schedule_is_idempotent,
                bad_input_is_refused,
                get_reports_state_run_at_and_attempt,
                never_before_run_at,
                past_deadlines_are_due_at_once,
                duration_max_saturates,
                cancel_wins_before_delivery,
                reschedule_earlier_and_later,
                earlier_schedule_wakes_an_idle_consumer,
                schedule_many_is_atomic_and_idempotent,
                many_jobs_each_delivered_once,
                schedule_many_larger_than_one_script_call,
            }
            lease {
                lease_expiry_redelivers_with_attempt_2,
                stale_delivery_changes_nothing,
                extend_keeps_the_lease,
                retry_counts_the_attempt,
                dead_after_max_attempts,
                ack_removes,
                a_prefetched_job_whose_lease_ended_is_not_handed_out,
                a_lease_below_the_minimum_is_raised,
                fail_keeps_the_error_with_the_job,
                an_ended_lease_is_the_last_error,
            }
            worker {
                run_acks_and_retries_failures_and_panics,
                run_kills_after_max_attempts,
                run_renews_the_lease_of_a_slow_handler,
                run_never_shortens_a_handlers_own_extend,
                close_ends_consumers_and_calls,
                close_lets_running_handlers_finish_and_ack,
                close_inside_a_handler_does_not_wait_for_itself,
                run_records_errors_and_panics,
            }
            operate {
                pending_and_running_count_states,
                counts_follow_the_states,
                list_pages_through_inserts_and_deletes,
                list_pages_through_equal_due_times,
                list_running_and_dead_jobs,
                list_without_payloads_leaves_them_out,
                list_refuses_bad_limits_and_cursors,
                revive_sends_a_dead_job_back,
                revive_all_dead_sends_every_dead_job_back,
                pause_stops_claims_across_a_reopen_and_resume_wakes_consumers,
            }
            typed {
                #[cfg(feature = "serde")]
                typed_payloads_round_trip_and_undecodable_ones_die,
                #[cfg(feature = "serde")]
                a_typed_queue_of_a_kind_schedules_and_runs_that_kind,
            }
            kinds {
                run_kind_workers_get_only_their_kind,
                an_unhandled_kind_stays_pending_and_is_counted,
                priorities_are_claimed_first_then_run_at_then_id,
                consume_kind_claims_by_priority_within_its_kind,
                a_jobs_own_max_attempts_beats_the_queues,
                kind_defaults_apply_and_a_jobs_own_options_win,
                a_jobs_own_lease_is_redelivered_before_the_queues,
                get_and_list_show_kind_and_priority_and_filter_by_kind,
                bad_options_are_refused_and_nothing_is_stored,
                a_kind_no_job_can_have_is_refused_by_open_claims_and_lists,
                schedule_many_with_gives_every_job_the_options,
                workers_of_two_kinds_get_each_job_once,
                one_worker_of_three_kinds_routes_each_to_its_own_handler,
                a_workers_kind_caps_hold_and_leave_room_to_the_other_kinds,
                a_worker_claims_by_priority_across_its_kinds,
                close_drains_a_worker_of_several_kinds,
                workers_of_overlapping_kinds_take_each_job_once,
                a_worker_of_several_kinds_hands_a_killed_job_over_to_its_successor,
            }
            recurring {
                recurring_bad_input_stores_nothing,
                recurring_runs_on_schedule_one_pending_at_a_time,
                recurring_cancel_stops_it_and_a_running_occurrence_finishes,
                recurring_update_replaces_it,
                recurring_two_consumers_get_each_occurrence_once,
                recurring_a_failed_occurrence_retries_and_the_series_goes_on,
                recurring_survives_a_reopen,
                recurring_catch_up_latest,
                recurring_catch_up_none,
                recurring_catch_up_all_up_to_max,
                recurring_catch_up_all,
                recurring_catch_up_after_a_downtime_of_twenty_occurrences,
                recurring_an_at_in_the_name_of_a_job_is_no_series,
                recurring_a_delivered_job_under_an_occurrence_id_is_skipped,
                recurring_setting_it_again_keeps_a_missed_occurrence,
                recurring_a_new_recurrence_runs_a_due_occurrence_first,
                recurring_its_pending_occurrence_is_not_rescheduled,
                recurring_of_a_kind_goes_to_its_workers,
                recurring_of_a_kind_runs_under_run_kind_with_its_attempts,
                recurring_set_again_moves_its_pending_occurrence_to_the_new_kind,
                recurring_bad_options_are_refused_and_nothing_is_stored,
                recurring_a_claim_meeting_the_job_its_head_moved_to_goes_on,
            }
            dedup {
                replace_moves_run_at_payload_and_options,
                replace_earlier_wakes_an_idle_consumer,
                replace_leaves_running_and_dead_jobs,
                replace_leaves_a_series_occurrence,
                hold_off_refuses_the_id_until_it_ends,
                hold_off_follows_only_an_ack,
                racing_schedulers_leave_each_id_once,
            }
            successor {
                a_successor_waits_for_the_ack_then_runs,
                a_due_successor_wakes_an_idle_consumer,
                allow_while_running_creates_and_leaves_pending_and_dead_jobs,
                a_successor_waits_through_retries,
                a_successor_takes_over_from_a_death,
                a_successor_handed_over_by_a_claims_kill_wakes_an_idle_consumer,
                a_successor_after_a_hold_off_waits_for_its_end,
                a_replace_after_a_retry_drops_the_waiting_successor,
                an_occurrence_gets_no_successor_and_other_ids_with_at_do,
                cancel_removes_a_waiting_successor,
                racing_successors_are_each_delivered_once,
            }
        );
        run_keys_suite!($harness);
    };
}

pub async fn open(h: &impl Harness, configure: impl FnOnce(&mut wheel_jobs::Builder)) -> JobQueue {
    let mut builder = JobQueue::builder();
    configure(&mut builder);
    h.open(&builder).await.expect("open")
}

/// A wheel of one-hour ticks: a consumer sleeping on it wakes during a test only if told to.
pub fn hour_ticks() -> wheel_timer::Timer {
    wheel_timer::Timer::builder()
        .tick(Duration::from_secs(3600))
        .build()
        .unwrap()
}

/// Spawns a consumer of `queue` waiting for one delivery, and returns once it has claimed
/// and found nothing (it sleeps on `timer`); the task yields the delivered id.
pub async fn idle_consumer(
    queue: &JobQueue,
    timer: &wheel_timer::Timer,
) -> tokio::task::JoinHandle<String> {
    idle(queue.consume(), timer).await
}

/// [`idle_consumer`] of one kind (`consume_kind`).
pub async fn idle_kind_consumer(
    queue: &JobQueue,
    timer: &wheel_timer::Timer,
    kind: &str,
) -> tokio::task::JoinHandle<String> {
    idle(queue.consume_kind(kind), timer).await
}

async fn idle(
    mut consumer: wheel_jobs::Consumer,
    timer: &wheel_timer::Timer,
) -> tokio::task::JoinHandle<String> {
    let waiting = tokio::spawn(async move { next(&mut consumer).await.id().to_owned() });
    while timer.pending() == 0 {
        tokio::task::yield_now().await;
    }
    waiting
}
