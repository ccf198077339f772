//! Claims of several loops merged into one statement: the `run_kind` loops (and workers)
//! of one queue handle each claim their own kinds; the claims waiting while one is in
//! flight share the next statement, a claim of the set of their kinds, and its one commit
//! (group commit, as `batch.rs` does for acks), each caller answered with its own kinds'
//! jobs and next due time. Four `run_kind` loops of 12 made four claims of 12 where one
//! `run(48)` made one of 48: a statement and a commit each, most of a claim's cost.
//! Also what every claim answers its caller ([`look_again`], [`in_claim_order`]), merged
//! or not (`backend.rs`), and the first claims of the due series heads a claim statement
//! lists ([`HeadClaims`], [`in_room`]).
//!
//! # Ground rules
//!
//! - Only a claim whose kinds are all named (not `''`, which stays a statement of its own,
//!   nor every kind) and whose rooms add up to at most its `max` is merged ([`mergeable`]):
//!   the merged statement takes each kind at most its room, so a caller gets at most what
//!   it asked for, and only jobs of its kinds.
//! - Series heads of any kind and priority are jobs of their kind: the statement (merged or
//!   not) finds, for each caller, the highest priority of the due heads of its kinds, reads
//!   none of its kinds' levels below it (strict priority across a caller's kinds; another
//!   caller's heads hold back none of its jobs), and orders the heads at it with the jobs
//!   before the claim is cut to its rooms; each caller takes those of its kinds the
//!   statement kept ([`in_room`]), all in one transaction after the statement
//!   ([`HeadClaims::claim`]), each head's step (its series moving with its claim) in a
//!   savepoint of its own: a head whose step fails is rolled back alone and logged, and
//!   costs no other head, nor another caller its heads. If the transaction itself fails,
//!   the jobs the statement leased are delivered all the same (the heads go to a later
//!   claim); a caller with nothing to deliver gets the error (its heads' or the
//!   transaction's). Heads that held places and delivered nothing (locked by another
//!   transaction, moved, their step failed) hold back nothing: the callers they belong to
//!   claim again, in a statement without them, for their room left, the last one without
//!   any head ([`HEAD_ROUNDS`]).
//! - Claims naming a kind in common are never merged (a job of that kind would have no
//!   one owner): they run one after the other. A merged statement takes at most
//!   [`MAX_BATCH`] jobs.
//! - Each kind's expired leases are taken up to its room (one kind's many expired leases
//!   never crowd out another's). A caller's next due time is its own kinds' (their next
//!   pending due time and next lease end) and the rest of the set's (the leases this
//!   statement made, successors it handed over, gate timers): never later than what its own
//!   claim would have answered, so it may look early, never late. Another kind's due jobs
//!   or expired leases never make it look again at once. Gate timers are the set's: a due
//!   one of any kind of the set makes every caller look again at once, once per timer (the
//!   rebalance after the claim moves it), and a successor handed over due makes every
//!   caller look again shortly (`LOCKED_RETRY`), once.
//! - A caller that gives up before its group's statement is sent is left out of it, and
//!   out of each later statement of its claim ([`HEAD_ROUNDS`]); one that gives up after a
//!   statement is sent holds what that statement leased for it until their lease ends, as
//!   an unmerged claim dropped in flight does.
//! - All named-kind claims of a handle wait behind the statement in flight: a slow claim
//!   (a lock wait, a large backlog of one kind) delays every `run_kind` loop's next claim.
//! - A claim alone in its statement runs exactly as an unmerged one. A claim waits only
//!   for the statement in flight (none when idle), as an ack waits for the settle in
//!   flight; the caller's `postgres_timeout` counts that wait (`batch.rs`).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use sqlx::PgPool;

use super::batch::{Reply, MAX_BATCH};
use super::series::SeriesSql;
use super::sql::{Head, HeadsListed, Leased, Sql};
use crate::backend::{ClaimBatch, ClaimKinds, Claimed};
use crate::core::error::Error;
use crate::core::kind::Spec;
use crate::core::series::Rules;

/// After a claim that left due jobs locked by others (in flight elsewhere), how long an
/// idle consumer waits before looking again (nanoseconds): their commit or rollback wakes
/// it anyway when it makes one pending.
const LOCKED_RETRY: u64 = 10_000_000;

/// After a claim whose gate rebalance (`gate_timers`) failed, how long a consumer waits at
/// least before looking again (nanoseconds), unless the claim was full: the timer it saw
/// is still due, and looking again at once would rebalance, and fail, in a loop. A commit
/// that makes a job pending wakes it anyway.
pub(super) const REBALANCE_RETRY: u64 = 1_000_000_000;

/// How often the claim batcher yields after answering a batch (`claim_batch`): two were
/// as good as eight or 32 (claims per job of four `run_kind` loops).
const REJOIN_YIELDS: usize = 2;

/// What the first claims of series heads need, shared by a handle and its claim batcher.
#[derive(Debug)]
pub(super) struct HeadClaims {
    pub(super) series: SeriesSql,
    /// Recurrences parsed once per text.
    pub(super) rules: Mutex<Rules>,
    /// The spec of a job scheduled without options, which NULL options read as.
    pub(super) plain: Spec,
}

impl HeadClaims {
    /// The first claims of `heads` (what [`in_room`] picked) in one transaction, each in a
    /// savepoint of its own: what they deliver leased under `token`, and the kind and error
    /// of each whose step failed (rolled back alone; logged).
    pub(super) async fn claim(
        &self,
        pool: &PgPool,
        sql: &Sql,
        queue: &str,
        heads: &[Head],
        token: i64,
    ) -> Result<HeadsClaimed, Error> {
        let mut out = HeadsClaimed {
            jobs: Vec::new(),
            failed: Vec::new(),
            short: Vec::new(),
        };
        if heads.is_empty() {
            return Ok(out);
        }
        let answers = self
            .series
            .claim_heads(pool, sql, queue, &self.rules, &self.plain, heads, token)
            .await?;
        for (head, answer) in heads.iter().zip(answers) {
            match answer {
                Ok(Some(job)) => out.jobs.push(claimed(job, token)),
                Ok(None) => out.short.push(head.id.clone()),
                Err(err) => {
                    out.short.push(head.id.clone());
                    out.failed.push((head.kind.clone(), err));
                }
            }
        }
        Ok(out)
    }
}

/// What the first claims of a claim's series heads did ([`HeadClaims::claim`]).
#[derive(Debug)]
pub(super) struct HeadsClaimed {
    /// The jobs they deliver.
    pub(super) jobs: Vec<Claimed>,
    /// The kind of each head whose step failed, and its error.
    pub(super) failed: Vec<(String, Error)>,
    /// The heads that delivered nothing (locked, moved, their step failed): the claim runs
    /// its statement again without them ([`HEAD_ROUNDS`]).
    pub(super) short: Vec<String>,
}

/// The most statements one claim runs: the first, and one more each time the due series
/// heads it listed delivered fewer jobs than they held places for (locked by another
/// transaction, moved, their step failed) while it had room, each without those heads,
/// so a head that cannot be claimed holds back no job below it (as a locked job holds back
/// none) and one that always fails costs each claim a bounded number of statements. The
/// last lists no head at all ([`listed`]): however many heads deliver nothing, level after
/// level, the jobs below them are claimed; a head below them waits for a claim whose
/// earlier statements reach it.
pub(super) const HEAD_ROUNDS: usize = 3;

/// The heads the statement of a claim's `round` (from 0) lists: all but those of its
/// earlier statements that delivered nothing (`skip`); in its last round none, every level
/// read ([`HEAD_ROUNDS`]).
pub(super) fn listed(round: usize, skip: &[String]) -> HeadsListed<'_> {
    if round + 1 >= HEAD_ROUNDS {
        HeadsListed::None
    } else {
        HeadsListed::Except(skip)
    }
}

/// Rebalances, after a claim whose statement saw a due gate timer (`timers`), the gates of
/// `kinds` whose timer came (the statement could not lease what that admits): (whether
/// it rebalanced any, so the consumer looks again at once; whether it failed). Its
/// failure fails no caller (the claim committed: its jobs are delivered), and the
/// consumer looks again at that timer after [`REBALANCE_RETRY`], not at once: it is
/// still due ([`look_again`]).
pub(super) async fn rebalance(
    pool: &PgPool,
    sql: &Sql,
    queue: &str,
    kinds: &ClaimKinds,
    timers: bool,
) -> (bool, bool) {
    if !timers {
        return (false, false);
    }
    match sql.gate_timers(pool, queue, kinds).await {
        Ok(n) => (n > 0, false),
        Err(err) => {
            tracing::warn!(error = %err, "wheel-jobs: rebalancing the gates whose timer came failed after a claim; looking again later");
            (false, true)
        }
    }
}

/// The kinds a claim of `kinds` (`want` in all) still has room for after taking `jobs`,
/// each at most its room less its jobs taken; `None` when it has no room left.
pub(super) fn still_room(kinds: &ClaimKinds, want: usize, jobs: &[Claimed]) -> Option<ClaimKinds> {
    if jobs.len() >= want {
        return None;
    }
    match kinds {
        ClaimKinds::All => Some(ClaimKinds::All),
        ClaimKinds::Some(set) => {
            let left: Vec<(String, usize)> = set
                .iter()
                .filter_map(|(kind, _)| {
                    let taken = jobs.iter().filter(|j| j.spec.kind == *kind).count();
                    let room = kinds.most(kind, want).saturating_sub(taken);
                    (room > 0).then(|| (kind.clone(), room))
                })
                .collect();
            (!left.is_empty()).then_some(ClaimKinds::Some(left))
        }
    }
}

/// The least of two next due times (`None`: none).
pub(super) fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The due `heads` (those the statement kept a place for, earliest first) a claim of at
/// most `want` jobs that took `jobs` has room for: in all, and for each kind at most
/// `most(kind)` with its jobs of that kind (0: a kind the claim does not take). The
/// statement already cut them to the rooms; this keeps each caller to its own.
pub(super) fn in_room(
    heads: &[Head],
    jobs: &[Claimed],
    want: usize,
    most: impl Fn(&str) -> usize,
) -> Vec<Head> {
    let mut taken = jobs.len();
    let mut by_kind: Vec<(&str, usize)> = Vec::new();
    let mut out = Vec::new();
    for head in heads {
        if taken >= want {
            break;
        }
        let n = match by_kind.iter().position(|(k, _)| *k == head.kind) {
            Some(i) => i,
            None => {
                let of = jobs.iter().filter(|j| j.spec.kind == head.kind).count();
                by_kind.push((&head.kind, of));
                by_kind.len() - 1
            }
        };
        if by_kind[n].1 < most(&head.kind) {
            by_kind[n].1 += 1;
            taken += 1;
            out.push(head.clone());
        }
    }
    out
}

/// A claim to merge: at most `want` jobs of `kinds`, each at most its room (adding up to
/// at most `want`), leased under `token` if it runs first in its statement.
#[derive(Debug)]
pub(super) struct ClaimReq {
    pub(super) want: usize,
    pub(super) kinds: Vec<(String, usize)>,
    pub(super) token: i64,
}

/// The kinds of a claim of at most `want` jobs of `kinds`, each with its room, if the claim
/// can be merged with others (module docs).
pub(super) fn mergeable(kinds: &ClaimKinds, want: usize) -> Option<Vec<(String, usize)>> {
    let ClaimKinds::Some(set) = kinds else {
        return None;
    };
    if set.iter().any(|(kind, _)| kind.is_empty()) {
        return None;
    }
    let rooms: Vec<(String, usize)> = set
        .iter()
        .map(|(kind, most)| (kind.clone(), (*most).min(want)))
        .collect();
    let total = rooms.iter().fold(0usize, |n, (_, r)| n.saturating_add(*r));
    (total <= want).then_some(rooms)
}

/// The claims in flight together, in groups of disjoint kinds (in arrival order), each
/// group one statement.
fn groups(reqs: &[ClaimReq]) -> Vec<Vec<usize>> {
    let mut groups: Vec<(Vec<usize>, BTreeSet<&str>, usize)> = Vec::new();
    for (i, req) in reqs.iter().enumerate() {
        let rooms: usize = req.kinds.iter().map(|(_, r)| r).sum();
        let fits = |(_, kinds, total): &&mut (Vec<usize>, BTreeSet<&str>, usize)| {
            total + rooms <= MAX_BATCH && req.kinds.iter().all(|(k, _)| !kinds.contains(k.as_str()))
        };
        match groups.iter_mut().find(|g| fits(g)) {
            Some((members, kinds, total)) => {
                members.push(i);
                kinds.extend(req.kinds.iter().map(|(k, _)| k.as_str()));
                *total += rooms;
            }
            None => {
                let kinds = req.kinds.iter().map(|(k, _)| k.as_str()).collect();
                groups.push((vec![i], kinds, rooms));
            }
        }
    }
    groups.into_iter().map(|(members, _, _)| members).collect()
}

/// One batch of claims (the [`Batcher`](super::batch::Batcher)'s `run`): a statement per
/// group of disjoint kinds, each caller answered with its share.
pub(super) async fn claim_batch(
    pool: PgPool,
    sql: Arc<Sql>,
    heads: Arc<HeadClaims>,
    queue: String,
    reqs: Vec<ClaimReq>,
    replies: Vec<Reply<ClaimBatch>>,
) {
    let mut replies: Vec<Option<Reply<ClaimBatch>>> = replies.into_iter().map(Some).collect();
    for group in groups(&reqs) {
        // A caller that gave up while an earlier group ran is left out: its claim is not
        // sent, as the batcher drops one that gave up before the batch was taken. One that
        // gives up once its statement is sent holds its jobs until their lease ends, as an
        // unmerged claim dropped in flight does (`Consumer`'s docs).
        let group: Vec<usize> = group
            .into_iter()
            .filter(|&i| replies[i].as_ref().is_some_and(|r| !r.is_closed()))
            .collect();
        if group.is_empty() {
            continue;
        }
        let members: Vec<&ClaimReq> = group.iter().map(|&i| &reqs[i]).collect();
        let gave_up = |n: usize| replies[group[n]].as_ref().is_none_or(|r| r.is_closed());
        let answers = claim_group(&pool, &sql, &heads, &queue, &members, gave_up).await;
        for (n, i) in group.into_iter().enumerate() {
            let Some(reply) = replies[i].take() else {
                continue;
            };
            let answer = match &answers {
                Ok(answers) => answers[n].clone(),
                Err(err) => Err(err.clone()),
            };
            if let Err(Ok(lost)) = reply.send(answer) {
                tracing::debug!(
                    jobs = lost.jobs.len(),
                    "wheel-jobs: a merged claim's caller gave up in flight; its jobs run again when their lease ends"
                );
            }
        }
    }
    // Before the batcher takes the next batch: let the loops just answered hand their
    // jobs out, and those whose handlers return at once claim again, so their claims join
    // the next statement instead of the one after it (without this the loops split into
    // two halves taking turns, a statement each; 20,000 jobs of four `run_kind` loops of
    // 12: ~880 claims, 593–614 with it, against 471–481 for one `run(50)`). Never a wait on
    // a timer.
    for _ in 0..REJOIN_YIELDS {
        tokio::task::yield_now().await;
    }
}

/// The claim of `members`' kinds in one statement, split among them (in their order); for
/// the members whose series heads delivered fewer jobs than they held places for, a
/// statement again without those heads, for their room left ([`HEAD_ROUNDS`]), but for
/// those that gave up (`gave_up(n)`, asked before each statement): none is sent for them.
async fn claim_group(
    pool: &PgPool,
    sql: &Sql,
    heads: &HeadClaims,
    queue: &str,
    members: &[&ClaimReq],
    gave_up: impl Fn(usize) -> bool,
) -> Result<Vec<Result<ClaimBatch, Error>>, Error> {
    let token = members[0].token;
    let count = members.len();
    let mut shares: Vec<Vec<Claimed>> = vec![Vec::new(); count];
    let mut failed: Vec<Option<Error>> = vec![None; count];
    let mut heads_claimed = vec![false; count];
    let (mut next_due, mut untimed) = (vec![None; count], vec![None; count]);
    let (mut now, mut paused, mut died, mut saw_timers) = (0, false, 0, false);
    // Heads that delivered nothing, left out of the next round's statement.
    let mut skip: Vec<String> = Vec::new();
    // The members claiming in this round: all, then those whose heads fell short.
    let mut active: Vec<usize> = (0..count).collect();
    let owner_of = |kind: &str| {
        members
            .iter()
            .position(|r| r.kinds.iter().any(|(k, _)| k == kind))
    };
    for round in 0..HEAD_ROUNDS {
        // A member that gave up gets no more: what this statement would lease for it
        // would wait out its lease, held for no one.
        active.retain(|&n| !gave_up(n));
        // Each kind with its room left and the member it is claimed for: a member's due
        // series heads hold back its own kinds' lower levels, never another member's.
        let mut set: Vec<(String, usize, i32)> = Vec::new();
        for &n in &active {
            let (req, mine) = (members[n], &shares[n]);
            let left = req.want.saturating_sub(mine.len());
            for (kind, room) in &req.kinds {
                let taken = mine.iter().filter(|j| j.spec.kind == *kind).count();
                let room = room.saturating_sub(taken).min(left);
                if room > 0 {
                    set.push((kind.clone(), room, i32::try_from(n).unwrap_or(i32::MAX)));
                }
            }
        }
        if set.is_empty() {
            break;
        }
        set.sort();
        let want: usize = set.iter().map(|(_, r, _)| r).sum();
        let of: Vec<i32> = set.iter().map(|(_, _, n)| *n).collect();
        let kinds = ClaimKinds::Some(set.into_iter().map(|(k, r, _)| (k, r)).collect());
        let rows = match sql
            .claim(pool, queue, want, token, &kinds, &of, listed(round, &skip))
            .await
        {
            Ok(rows) => rows,
            Err(err) if round == 0 => return Err(err),
            Err(err) => {
                tracing::warn!(error = %err, "wheel-jobs: a merged claim's statement without the series heads it could not claim failed; delivering what it has");
                break;
            }
        };
        (now, paused, died) = (rows.now, paused || rows.paused, died + rows.died);
        saw_timers |= rows.timers;
        for &n in &active {
            let (mine, mine_untimed) = if active.len() == 1 {
                (rows.next_due, rows.untimed)
            } else {
                // Its own kinds' next pending due time, and the rest of the set's.
                let own = members[n].kinds.iter().filter_map(|(kind, _)| {
                    let found = rows.next_by_kind.iter().find(|(k, _)| k == kind);
                    found.and_then(|(_, t)| *t)
                });
                let own: Vec<u64> = own.collect();
                (
                    own.iter().copied().chain(rows.next_other).min(),
                    own.iter().copied().chain(rows.other_untimed).min(),
                )
            };
            next_due[n] = earliest(next_due[n], mine);
            untimed[n] = earliest(untimed[n], mine_untimed);
        }
        for job in rows.jobs {
            let job = claimed(job, token);
            let Some(owner) = owner_of(&job.spec.kind) else {
                tracing::error!(job = %job.id, kind = %job.spec.kind, "wheel-jobs: a merged claim returned a job of a kind no caller asked for; it runs again when its lease ends");
                continue;
            };
            shares[owner].push(job);
        }
        // The due heads each member has room for, of its kinds; their first claims in one
        // transaction, each delivered to the member of its kind.
        let mut picked: Vec<Head> = Vec::new();
        let mut wanted = vec![false; count];
        for &n in &active {
            let req = members[n];
            let room = |kind: &str| {
                let found = req.kinds.iter().find(|(k, _)| k == kind);
                found.map_or(0, |(_, r)| *r)
            };
            let mine = in_room(&rows.heads, &shares[n], req.want, room);
            wanted[n] = !mine.is_empty();
            picked.extend(mine);
        }
        if picked.is_empty() {
            break;
        }
        // Each head's step is its own savepoint: one member's failing head costs no other
        // member its heads.
        let short = match heads.claim(pool, sql, queue, &picked, token).await {
            Ok(done) => {
                for job in done.jobs {
                    let Some(owner) = owner_of(&job.spec.kind) else {
                        tracing::error!(job = %job.id, kind = %job.spec.kind, "wheel-jobs: a merged claim's series head is of a kind no caller asked for; it runs again when its lease ends");
                        continue;
                    };
                    heads_claimed[owner] = true;
                    shares[owner].push(job);
                }
                for (kind, err) in done.failed {
                    if let Some(owner) = owner_of(&kind) {
                        failed[owner].get_or_insert(err);
                    }
                }
                done.short
            }
            Err(err) => {
                tracing::warn!(error = %err, "wheel-jobs: claiming series heads failed after a merged claim; claiming below them");
                for (n, slot) in failed.iter_mut().enumerate() {
                    if wanted[n] {
                        slot.get_or_insert(err.clone());
                    }
                }
                picked.iter().map(|h| h.id.clone()).collect()
            }
        };
        // Heads that held places and delivered nothing held back the levels below them:
        // what their members have room for still comes from below, without them.
        active = (0..count)
            .filter(|&n| {
                let of_n = |id: &String| {
                    let head = picked.iter().find(|h| h.id == *id);
                    head.is_some_and(|h| owner_of(&h.kind) == Some(n))
                };
                short.iter().any(of_n) && shares[n].len() < members[n].want
            })
            .collect();
        skip.extend(short);
    }
    let all = {
        let mut set: Vec<(String, usize)> = members.iter().flat_map(|r| r.kinds.clone()).collect();
        set.sort();
        ClaimKinds::Some(set)
    };
    let (timers, rebalance_failed) = rebalance(pool, sql, queue, &all, saw_timers).await;
    let answers = members
        .iter()
        .zip(shares)
        .enumerate()
        .map(|(n, (req, mut jobs))| {
            if let Some(err) = failed[n].as_ref().filter(|_| jobs.is_empty()) {
                // Nothing to deliver but the heads it could not claim: its error.
                return Err(err.clone());
            }
            let full = jobs.len() >= req.want;
            in_claim_order(&mut jobs);
            Ok(ClaimBatch {
                jobs,
                next_due: look_again(
                    next_due[n],
                    untimed[n],
                    now,
                    paused,
                    full || timers,
                    heads_claimed[n],
                    rebalance_failed,
                ),
                now,
                // Counted once, by the first caller's metrics.
                died: if n == 0 { died } else { 0 },
            })
        });
    Ok(answers.collect())
}

/// When a consumer looks again after a claim whose `next_due` the statement answered
/// (`untimed`: without the gate timers): never while paused; at once when the claim was
/// `full` (more may be due) or after due jobs the series heads held back
/// (`heads_claimed`); shortly when what is due was locked by others; else at `next_due`.
/// After a failed gate rebalance (`rebalance_failed`) only the timer's look waits
/// [`REBALANCE_RETRY`]: the consumer looks again at the least of that and the rest of what
/// is due (`untimed`), never later for a job due soon nor for a caller whose kinds have no
/// gate.
pub(super) fn look_again(
    next_due: Option<u64>,
    untimed: Option<u64>,
    now: u64,
    paused: bool,
    full: bool,
    heads_claimed: bool,
    rebalance_failed: bool,
) -> Option<u64> {
    // What is due and was not taken is locked by another transaction (a claim, a series
    // step, a caller's `cancel_in`) or a series head whose step moved or failed: the
    // outcome of a commit that makes a job pending wakes us anyway; look again shortly,
    // not in a loop.
    let shortly = |next: Option<u64>| {
        next.map(|n| {
            if n <= now {
                n.max(now.saturating_add(LOCKED_RETRY))
            } else {
                n
            }
        })
    };
    if paused {
        None
    } else if full {
        // More may be due: look again at once.
        Some(now)
    } else if heads_claimed && next_due.is_some_and(|n| n <= now) {
        // Due jobs and heads below the heads it delivered, held back: look again at once (after
        // a delivery, so never in a loop).
        Some(now)
    } else if rebalance_failed {
        // The gate timer it saw is still due: a claim at once would rebalance (and fail)
        // again, in a loop; the rest of what is due as ever.
        earliest(shortly(untimed), Some(now.saturating_add(REBALANCE_RETRY)))
    } else {
        shortly(next_due)
    }
}

/// A job a statement leased under `token`, as a claim hands it out.
pub(super) fn claimed((id, payload, attempt, run_at, spec): Leased, token: i64) -> Claimed {
    Claimed {
        id,
        payload,
        attempt,
        run_at,
        token: token as u64,
        spec,
    }
}

/// Sorts a claim's jobs in claim order: priority, then due time, then id.
pub(super) fn in_claim_order(jobs: &mut [Claimed]) {
    jobs.sort_by(|x, y| {
        let key = |c: &Claimed| (std::cmp::Reverse(c.spec.priority), c.run_at);
        (key(x), &x.id).cmp(&(key(y), &y.id))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(kinds: &[(&str, usize)], want: usize) -> ClaimReq {
        ClaimReq {
            want,
            kinds: kinds.iter().map(|(k, r)| (k.to_string(), *r)).collect(),
            token: 0,
        }
    }

    fn set(kinds: &[(&str, usize)]) -> ClaimKinds {
        ClaimKinds::Some(kinds.iter().map(|(k, r)| (k.to_string(), *r)).collect())
    }

    #[test]
    fn only_named_kinds_whose_rooms_fit_the_claim_merge() {
        let rooms = |kinds: &[(&str, usize)]| {
            Some(
                kinds
                    .iter()
                    .map(|(k, r)| (k.to_string(), *r))
                    .collect::<Vec<_>>(),
            )
        };
        // A run_kind loop: its one kind as many as the claim takes.
        assert_eq!(mergeable(&ClaimKinds::one("a"), 12), rooms(&[("a", 12)]));
        // A worker whose capped kinds' rooms add up to its free slots.
        assert_eq!(
            mergeable(&set(&[("a", 6), ("b", 6)]), 12),
            rooms(&[("a", 6), ("b", 6)])
        );
        // Rooms above the free slots: merged, its kinds could take more than it asked for.
        assert_eq!(mergeable(&set(&[("a", 6), ("b", 6)]), 8), None);
        assert_eq!(mergeable(&ClaimKinds::All, 12), None);
        // The kind '' is a statement of its own.
        assert_eq!(mergeable(&ClaimKinds::one(""), 12), None);
    }

    #[test]
    fn after_a_failed_rebalance_only_the_timers_look_waits() {
        let now = 1_000;
        // The timer is due (in `next_due`); a job is due 200 ns ahead: looked at when due.
        let soon = look_again(Some(now), Some(now + 200), now, false, false, false, true);
        assert_eq!(soon, Some(now + 200));
        // Nothing but the timer: its retry.
        let idle = look_again(Some(now), None, now, false, false, false, true);
        assert_eq!(idle, Some(now + REBALANCE_RETRY));
        // A due job locked by another transaction: shortly, not at once.
        let locked = look_again(Some(now), Some(now), now, false, false, false, true);
        assert_eq!(locked, Some(now + LOCKED_RETRY));
        // A job due after the retry: the retry first.
        let late = now + 2 * REBALANCE_RETRY;
        let later = look_again(Some(now), Some(late), now, false, false, false, true);
        assert_eq!(later, Some(now + REBALANCE_RETRY));
    }

    #[test]
    fn claims_sharing_a_kind_or_past_the_batch_go_in_separate_statements() {
        let reqs = [
            req(&[("a", 12)], 12),
            req(&[("b", 12)], 12),
            req(&[("a", 12)], 12),
            req(&[("c", 6), ("d", 6)], 12),
            req(&[("b", 3), ("e", 3)], 6),
        ];
        assert_eq!(groups(&reqs), [vec![0, 1, 3], vec![2, 4]]);
        let big = [
            req(&[("a", 400)], 400),
            req(&[("b", 200)], 200),
            req(&[("c", 100)], 100),
        ];
        assert_eq!(groups(&big), [vec![0, 2], vec![1]]);
    }
}
