//! Table tests of every transition, and a check of the state machine against a trivially
//! correct model of one job's life.

use super::*;
use proptest::prelude::*;

const MAX: u32 = 3;

#[track_caller]
fn check_claim(mut job: Machine, now: u64, expect: Claim, after: Machine) {
    assert_eq!(job.claim(now, now + 10, 7, MAX), expect);
    assert_eq!(job, after);
}

#[test]
fn claim_table() {
    let pending = Machine::new(100);
    let leased = |attempt, until| Machine {
        run_at: 100,
        attempt,
        status: Status::Running { token: 7, until },
    };
    // Not yet due: untouched.
    check_claim(pending, 99, Claim::NotDue, pending);
    // Due at exactly run_at: first delivery.
    check_claim(pending, 100, Claim::Deliver, leased(1, 110));
    // A lease still running is not claimable; an expired one is redelivered.
    check_claim(leased(1, 110), 109, Claim::NotDue, leased(1, 110));
    check_claim(leased(1, 110), 110, Claim::Deliver, leased(2, 120));
    // The last attempt's lease expired: dead, attempt kept.
    let dead = Machine {
        run_at: 100,
        attempt: MAX,
        status: Status::Dead { at: 200 },
    };
    check_claim(leased(MAX, 110), 200, Claim::Died, dead);
    check_claim(dead, u64::MAX - 10, Claim::NotDue, dead);
}

#[test]
fn lease_operations_check_the_token() {
    let mut job = Machine::new(0);
    assert_eq!(job.claim(5, 50, 1, MAX), Claim::Deliver);
    assert!(!job.ack(2));
    assert!(job.ack(1));
    assert!(!job.extend(2, 90));
    assert!(job.extend(1, 90));
    assert_eq!(job.due(), Some(90));
    assert_eq!(job.retry(2, 55, 60, MAX), Retry::Stale);
    assert_eq!(job.retry(1, 55, 60, MAX), Retry::Pending);
    assert_eq!(
        job,
        Machine {
            run_at: 60,
            attempt: 1,
            status: Status::Pending
        }
    );
    // Once pending again, the old token is stale for everything.
    assert!(!job.ack(1));
    assert!(!job.extend(1, 100));
}

#[test]
fn retry_of_the_last_attempt_kills() {
    let mut job = Machine::new(0);
    for attempt in 1..=MAX {
        assert_eq!(
            job.claim(job.run_at, job.run_at + 1, attempt.into(), MAX),
            Claim::Deliver
        );
        assert_eq!(job.attempt, attempt);
        let outcome = job.retry(attempt.into(), job.run_at + 1, job.run_at + 2, MAX);
        let expect = if attempt == MAX {
            Retry::Died
        } else {
            Retry::Pending
        };
        assert_eq!(outcome, expect);
    }
    // Died at the retry's `now`: the previous run_at (2 · (MAX − 1)) + 1.
    let died = 2 * u64::from(MAX - 1) + 1;
    assert_eq!(job.status, Status::Dead { at: died });
    assert_eq!((job.due(), job.listed_at()), (None, died));
}

#[test]
fn revive_starts_a_dead_job_again() {
    let mut job = Machine::new(10);
    assert!(!job.revive(5), "a pending job is not revived");
    job.claim(10, 20, 1, 1);
    assert!(!job.revive(5), "nor a running one");
    assert_eq!(job.claim(20, 30, 2, 1), Claim::Died);
    assert_eq!(job.listed_at(), 20);
    assert!(job.revive(5));
    assert_eq!(job, Machine::new(5));
    assert_eq!(job.claim(5, 15, 3, 1), Claim::Deliver);
    assert_eq!(job.attempt, 1);
}

#[test]
fn a_claim_names_an_ended_lease_as_the_error() {
    let mut job = Machine::new(10);
    assert_eq!(job.claim_error(), None, "a first delivery records nothing");
    job.claim(10, 20, 1, 2);
    assert_eq!(job.claim_error(), Some(LEASE_EXPIRED));
    assert_eq!(
        job.listed_at(),
        20,
        "running jobs are listed by their lease's end"
    );
}

#[test]
fn only_pending_jobs_cancel_or_move() {
    let mut job = Machine::new(10);
    assert!(job.cancel());
    assert!(job.reschedule(5));
    assert_eq!(job.due(), Some(5));
    job.claim(5, 6, 1, MAX);
    assert!(!job.cancel());
    assert!(!job.reschedule(1));
    assert_eq!(job.run_at, 5);
}

#[test]
fn counts_follow_transitions() {
    let mut counts = Tally::default();
    counts.transition(None, Some(Status::Pending));
    counts.transition(
        Some(Status::Pending),
        Some(Status::Running { token: 1, until: 2 }),
    );
    counts.transition(None, Some(Status::Pending));
    counts.transition(
        Some(Status::Running { token: 1, until: 2 }),
        Some(Status::Dead { at: 3 }),
    );
    assert_eq!(
        counts,
        Tally {
            pending: 1,
            running: 0,
            dead: 1
        }
    );
    counts.transition(Some(Status::Dead { at: 3 }), None);
    assert_eq!(
        counts,
        Tally {
            pending: 1,
            running: 0,
            dead: 0
        }
    );
}

/// The trivially correct model: the facts about one job written as plain fields.
#[derive(Debug, Clone)]
struct Model {
    run_at: u64,
    deliveries: u32,
    holder: Option<(u64, u64)>,
    dead: bool,
    died_at: u64,
}

#[derive(Debug, Clone)]
enum Op {
    Claim { now: u64, lease: u64 },
    Ack { current: bool },
    Retry { current: bool, after: u64 },
    Extend { current: bool, until: u64 },
    Reschedule { run_at: u64 },
    Revive { run_at: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..200u64, 1..50u64).prop_map(|(now, lease)| Op::Claim { now, lease }),
        any::<bool>().prop_map(|current| Op::Ack { current }),
        (any::<bool>(), 0..50u64).prop_map(|(current, after)| Op::Retry { current, after }),
        (any::<bool>(), 0..200u64).prop_map(|(current, until)| Op::Extend { current, until }),
        (0..200u64).prop_map(|run_at| Op::Reschedule { run_at }),
        (0..200u64).prop_map(|run_at| Op::Revive { run_at }),
    ]
}

proptest! {
    #[test]
    fn job_matches_model(run_at in 0..100u64, ops in proptest::collection::vec(op(), 0..40)) {
        let mut job = Machine::new(run_at);
        let mut model = Model { run_at, deliveries: 0, holder: None, dead: false, died_at: 0 };
        let mut next_token = 1u64;
        for op in ops {
            let token_of = |model: &Model, current: bool| match model.holder {
                Some((token, _)) if current => token,
                _ => 0,
            };
            match op {
                Op::Claim { now, lease } => {
                    let token = next_token;
                    next_token += 1;
                    let due = match model.holder { Some((_, until)) => until, None => model.run_at };
                    let expired = model.holder.is_some();
                    let expect = if model.dead || due > now {
                        Claim::NotDue
                    } else if model.deliveries >= MAX {
                        model.dead = true;
                        model.died_at = now;
                        model.holder = None;
                        Claim::Died
                    } else {
                        model.deliveries += 1;
                        model.holder = Some((token, now + lease));
                        Claim::Deliver
                    };
                    if expect != Claim::NotDue {
                        prop_assert_eq!(job.claim_error(), expired.then_some(LEASE_EXPIRED));
                    }
                    prop_assert_eq!(job.claim(now, now + lease, token, MAX), expect);
                }
                Op::Ack { current } => {
                    let token = token_of(&model, current);
                    let valid = model.holder.is_some_and(|(t, _)| t == token);
                    prop_assert_eq!(job.ack(token), valid);
                    if valid {
                        return Ok(()); // the backend deletes it: its life is over
                    }
                }
                Op::Retry { current, after } => {
                    let token = token_of(&model, current);
                    let expect = match model.holder {
                        Some((t, until)) if t == token => {
                            model.holder = None;
                            if model.deliveries >= MAX {
                                model.dead = true;
                                model.died_at = until;
                                Retry::Died
                            } else {
                                model.run_at = until + after;
                                Retry::Pending
                            }
                        }
                        _ => Retry::Stale,
                    };
                    let run_at = match job.status { Status::Running { until, .. } => until + after, _ => 0 };
                    let now = run_at.saturating_sub(after);
                    prop_assert_eq!(job.retry(token, now, run_at, MAX), expect);
                }
                Op::Extend { current, until } => {
                    let token = token_of(&model, current);
                    let valid = model.holder.is_some_and(|(t, _)| t == token);
                    if valid {
                        model.holder = Some((token, until));
                    }
                    prop_assert_eq!(job.extend(token, until), valid);
                }
                Op::Reschedule { run_at } => {
                    let valid = !model.dead && model.holder.is_none();
                    if valid {
                        model.run_at = run_at;
                    }
                    prop_assert_eq!(job.reschedule(run_at), valid);
                }
                Op::Revive { run_at } => {
                    let valid = model.dead;
                    if valid {
                        model = Model { run_at, deliveries: 0, holder: None, dead: false, died_at: 0 };
                    }
                    prop_assert_eq!(job.revive(run_at), valid);
                }
            }
            // The observable facts agree after every step.
            prop_assert_eq!(job.attempt, model.deliveries);
            prop_assert_eq!(matches!(job.status, Status::Dead { .. }), model.dead);
            let listed_at = match model.holder {
                _ if model.dead => model.died_at,
                Some((_, until)) => until,
                None => model.run_at,
            };
            prop_assert_eq!(job.listed_at(), listed_at);
            let due = if model.dead { None } else { Some(model.holder.map_or(model.run_at, |(_, u)| u)) };
            prop_assert_eq!(job.due(), due);
            if !model.dead && model.holder.is_none() {
                prop_assert_eq!(job.run_at, model.run_at);
            }
        }
    }
}
