//! [`Folds`]: a partition's acks parked until its next claim carries them, so a steady
//! consumer pays about one request per job (the claim) instead of two (claim, then ack).
//!
//! # Ground rules
//!
//! - An ack is parked only while the partition's last claim said a job is due within the
//!   window ([`FOLD_WINDOW`], at most a quarter of the lease): a consumer is then about to
//!   claim again. Otherwise it goes through the ack batcher at once.
//! - The next claim on the partition takes the parked acks (at most `MAX_JOBS_PER_SCRIPT`) into its
//!   own script call, which applies them before it claims, exactly as `ack.lua` would
//!   (`lua/acks.lua`), and answers each.
//! - An ack that no claim took within the window goes back to its caller, who sends it
//!   through the ack batcher: no ack waits longer than the window plus one ack call, and
//!   none is lost when no consumer claims, a claim fails before taking it, or the queue
//!   closes (`release` hands every parked ack back at once).
//! - A claim that took acks and then failed (or was dropped) fails them with its error,
//!   `is_unavailable`: like a failed ack call, each may or may not have been applied. They
//!   are not sent again, since a resent ack that the claim did apply answers "stale".
//! - An ack whose caller stopped waiting before a claim took it is left out, as in the
//!   batcher: nobody would learn its outcome, so it is never applied.
//! - With `min_replicas` nothing is parked: claims do not wait for replicas, acks must.

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::batcher::Reply;
use super::scripts::MAX_JOBS_PER_SCRIPT;
use crate::core::error::Error;

/// How long an ack may wait for a claim to carry it.
pub(super) const FOLD_WINDOW: Duration = Duration::from_millis(20);

/// One partition's parked acks (see the module's ground rules).
pub(super) struct Folds {
    /// `None`: never park (`min_replicas`).
    window: Option<Duration>,
    state: std::sync::Mutex<State>,
}

struct State {
    /// Park until then: the last claim said a job is due within the window.
    until: Option<Instant>,
    next_ticket: u64,
    parked: Vec<Parked>,
}

struct Parked {
    ticket: u64,
    id: String,
    token: u64,
    reply: Reply<bool>,
}

/// Acks a claim took: answered from its reply, or failed when dropped unanswered.
pub(super) struct Taken(Vec<Parked>);

impl Folds {
    /// Folds for a queue whose leases last `lease`; `fold: false` never parks.
    pub(super) fn new(fold: bool, lease: Duration) -> Folds {
        Folds {
            window: fold.then(|| FOLD_WINDOW.min(lease / 4)),
            state: std::sync::Mutex::new(State {
                until: None,
                next_ticket: 0,
                parked: Vec::new(),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("parked acks")
    }

    /// A claim answered: its next job is due in `wait` ns (`None`: nothing due).
    pub(super) fn claimed(&self, wait: Option<u64>) {
        let until = match (self.window, wait) {
            (Some(w), Some(wait)) if u128::from(wait) <= w.as_nanos() => Some(Instant::now() + w),
            _ => None,
        };
        self.state().until = until;
    }

    /// The parked acks a claim carries (at most `MAX_JOBS_PER_SCRIPT`).
    pub(super) fn take(&self) -> Taken {
        let mut state = self.state();
        state.parked.retain(|p| !p.reply.is_closed());
        let n = state.parked.len().min(MAX_JOBS_PER_SCRIPT);
        Taken(state.parked.drain(..n).collect())
    }

    /// Hands every parked ack back to its caller, who sends it through the ack batcher.
    pub(super) fn release(&self) {
        let mut state = self.state();
        state.until = None;
        state.parked.clear();
    }

    /// Parks an ack for the next claim and waits for its answer; `None` when it was not
    /// parked or came back unsent: the caller sends it through the ack batcher.
    pub(super) async fn park(&self, id: &str, token: u64) -> Option<Result<bool, Error>> {
        let window = self.window?;
        let (reply, mut answer) = oneshot::channel();
        let ticket = {
            let mut state = self.state();
            if state.until.is_none_or(|until| Instant::now() >= until) {
                return None;
            }
            let ticket = state.next_ticket;
            state.next_ticket += 1;
            state.parked.push(Parked {
                ticket,
                id: id.to_owned(),
                token,
                reply,
            });
            ticket
        };
        match tokio::time::timeout(window, &mut answer).await {
            Ok(Ok(answered)) => return Some(answered),
            // Released: sent by the caller.
            Ok(Err(_)) => return None,
            Err(_) => {}
        }
        {
            let mut state = self.state();
            if let Some(i) = state.parked.iter().position(|p| p.ticket == ticket) {
                state.parked.swap_remove(i);
                return None;
            }
        }
        // A claim carries it now; that claim answers within its own redis_timeout.
        answer.await.ok()
    }
}

impl Taken {
    /// The `(id, token)` pairs to send with the claim.
    pub(super) fn pairs(&self) -> Vec<(String, u64)> {
        self.0.iter().map(|p| (p.id.clone(), p.token)).collect()
    }

    /// Answers each ack from the claim's reply (its answers in order), or with its error.
    pub(super) fn answer(mut self, answers: Result<&[bool], &Error>) {
        for (i, parked) in self.0.drain(..).enumerate() {
            let answer = match answers {
                Ok(acked) => Ok(acked[i]),
                Err(err) => Err(err.clone()),
            };
            let _ = parked.reply.send(answer);
        }
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        for parked in self.0.drain(..) {
            let _ = parked.reply.send(Err(Error::unavailable(
                "the claim carrying this ack was dropped: it may or may not have been applied",
            )));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without folding (`min_replicas`) an ack is never parked, even right after a claim
    /// that saw a job due at once.
    #[tokio::test]
    async fn no_fold_never_parks() {
        let folds = Folds::new(false, Duration::from_secs(30));
        folds.claimed(Some(0));
        assert!(folds.park("a", 1).await.is_none());
        assert!(folds.take().pairs().is_empty());
    }

    /// A parked ack is carried by the next claim and answered from its reply. (Paused
    /// clock: the window cannot pass while the claim is being taken.)
    #[tokio::test(start_paused = true)]
    async fn a_parked_ack_is_answered_by_the_claim_that_took_it() {
        let folds = std::sync::Arc::new(Folds::new(true, Duration::from_secs(30)));
        folds.claimed(Some(0));
        let parked = folds.clone();
        let ack = tokio::spawn(async move { parked.park("a", 7).await });
        let taken = loop {
            let taken = folds.take();
            if !taken.0.is_empty() {
                break taken;
            }
            tokio::task::yield_now().await;
        };
        assert_eq!(taken.pairs(), vec![("a".to_owned(), 7)]);
        taken.answer(Ok(&[true]));
        assert!(ack.await.unwrap().unwrap().unwrap());
    }

    /// A claim that saw nothing due soon stops the parking.
    #[tokio::test]
    async fn nothing_due_soon_sends_acks_at_once() {
        let folds = Folds::new(true, Duration::from_secs(30));
        folds.claimed(Some(0));
        folds.claimed(Some(1_000_000_000));
        assert!(folds.park("a", 1).await.is_none());
        folds.claimed(None);
        assert!(folds.park("a", 1).await.is_none());
    }
}
