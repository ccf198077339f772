//! `DelayQueue`: the cases of tokio-util's `time_delay_queue.rs`, written for the wheel, plus
//! what is specific to it (stale keys stay stale, one sleep, no sleep while empty).

use std::collections::HashSet;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::StreamExt;
use tokio::time::{sleep, sleep_until, Instant};
use wheel_timer::delay_queue::{Expired, Key};
use wheel_timer::{DelayQueue, Timer};

use crate::support::{ms, WakeCounter};

/// A queue polled by a task whose wakes are counted (tokio-test's `task::spawn`, by hand).
struct Polled<T> {
    queue: DelayQueue<T>,
    task: WakeCounter,
    seen: usize,
}

impl<T> Polled<T> {
    fn new(queue: DelayQueue<T>) -> Self {
        Polled {
            queue,
            task: WakeCounter::new(),
            seen: 0,
        }
    }

    fn poll(&mut self) -> Poll<Option<Expired<T>>> {
        self.seen = self.task.count();
        let waker = self.task.waker();
        self.queue.poll_expired(&mut Context::from_waker(&waker))
    }

    /// Whether the task was woken since its last poll.
    fn is_woken(&self) -> bool {
        self.task.count() > self.seen
    }

    #[track_caller]
    fn ready(&mut self) -> Expired<T> {
        match self.poll() {
            Poll::Ready(Some(expired)) => expired,
            Poll::Ready(None) => panic!("queue is empty"),
            Poll::Pending => panic!("nothing expired"),
        }
    }

    #[track_caller]
    fn pending(&mut self) {
        assert!(self.poll().is_pending(), "expected Pending");
    }

    #[track_caller]
    fn exhausted(&mut self) {
        assert!(
            matches!(self.poll(), Poll::Ready(None)),
            "expected Ready(None)"
        );
    }
}

/// Lets the wheel's driver task run after a paused-clock jump, so that wakes it owes have
/// been delivered (see the README on `advance`).
async fn settle() {
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn immediate_deadline_is_ready_at_once() {
    let mut q = Polled::new(DelayQueue::new());
    q.queue.insert_at("foo", Instant::now());
    assert_eq!(q.ready().into_inner(), "foo");
    q.exhausted();
}

#[tokio::test(start_paused = true)]
async fn zero_timeouts_all_come_out_at_once() {
    let mut q = Polled::new(DelayQueue::new());
    q.queue.insert("1", Duration::ZERO);
    q.queue.insert("2", Duration::ZERO);
    let mut got = vec![q.ready().into_inner(), q.ready().into_inner()];
    got.sort_unstable();
    assert_eq!(got, ["1", "2"]);
    q.exhausted();
}

#[tokio::test(start_paused = true)]
async fn short_delay_comes_out_at_its_deadline_not_before() {
    let mut q = Polled::new(DelayQueue::new());
    let start = Instant::now();
    q.queue.insert_at("foo", start + ms(5));
    q.pending();
    sleep_until(start + ms(4)).await;
    q.pending();
    let expired = q.queue.next().await.expect("one value");
    assert_eq!(
        Instant::now(),
        start + ms(5),
        "out exactly at the 1 ms tick"
    );
    assert_eq!(expired.deadline(), start + ms(5));
    assert_eq!(expired.into_inner(), "foo");
    q.exhausted();
}

#[tokio::test(start_paused = true)]
async fn values_come_out_in_deadline_order_and_never_early() {
    let mut queue = DelayQueue::new();
    let start = Instant::now();
    // Spread over level 0, level 1 and level 2 of a 256-slot wheel, inserted out of order.
    let delays = [2_000, 5, 300, 1, 64, 70_000, 255, 256, 1_000, 999];
    for d in delays {
        queue.insert_at(d, start + ms(d));
    }
    let mut out = Vec::new();
    while let Some(expired) = queue.next().await {
        assert!(Instant::now() >= expired.deadline(), "came out early");
        assert_eq!(expired.deadline(), start + ms(*expired.get_ref()));
        out.push(expired.into_inner());
    }
    let mut sorted = delays.to_vec();
    sorted.sort_unstable();
    assert_eq!(out, sorted);
    assert_eq!(
        Instant::now(),
        start + ms(70_000),
        "the last one at its own tick"
    );
}

#[tokio::test(start_paused = true)]
async fn insert_in_the_past_is_ready_at_once() {
    sleep(ms(10)).await;
    let mut q = Polled::new(DelayQueue::new());
    let now = Instant::now();
    q.queue.insert_at("foo", now - ms(5));
    assert_eq!(q.ready().into_inner(), "foo");
}

#[tokio::test(start_paused = true)]
async fn remove_returns_the_value_and_the_queue_ends() {
    let mut q = Polled::new(DelayQueue::new());
    let key = q.queue.insert("foo", ms(5));
    q.pending();
    let removed = q.queue.remove(&key);
    assert_eq!(removed.key(), key);
    assert_eq!(removed.into_inner(), "foo");
    assert!(q.is_woken(), "the poller learns the queue is empty");
    q.exhausted();
    sleep(ms(10)).await;
    q.exhausted();
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "stale key")]
async fn remove_with_a_stale_key_panics() {
    let mut queue = DelayQueue::new();
    let key = queue.insert("foo", ms(5));
    queue.remove(&key);
    queue.remove(&key);
}

#[tokio::test(start_paused = true)]
async fn try_remove_and_stale_keys() {
    let mut q = Polled::new(DelayQueue::new());
    let key = q.queue.insert("foo", Duration::ZERO);
    let expired = q.ready();
    assert_eq!(expired.key(), key);
    assert!(
        q.queue.try_remove(&key).is_none(),
        "came out: the key is stale"
    );
    // The slot is reused, but the old key never names the new value.
    let fresh = q.queue.insert("bar", ms(5));
    assert_ne!(fresh, key);
    assert!(q.queue.try_remove(&key).is_none());
    assert_eq!(q.queue.len(), 1);
    assert_eq!(
        q.queue.try_remove(&fresh).map(Expired::into_inner),
        Some("bar")
    );
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "stale key")]
async fn reset_with_a_stale_key_panics() {
    let mut queue = DelayQueue::new();
    let key = queue.insert("foo", ms(5));
    queue.remove(&key);
    queue.reset(&key, ms(1));
}

#[tokio::test(start_paused = true)]
async fn reset_later_moves_the_deadline() {
    let mut q = Polled::new(DelayQueue::new());
    let start = Instant::now();
    let key = q.queue.insert_at("foo", start + ms(5));
    q.pending();
    sleep_until(start + ms(3)).await;
    q.queue.reset_at(&key, start + ms(20));
    assert_eq!(q.queue.deadline(&key), start + ms(20));
    sleep_until(start + ms(10)).await;
    q.pending();
    let expired = q.queue.next().await.expect("one value");
    assert_eq!(Instant::now(), start + ms(20));
    assert_eq!(expired.deadline(), start + ms(20));
}

#[tokio::test(start_paused = true)]
async fn reset_to_the_past_wakes_the_pending_queue() {
    let mut q = Polled::new(DelayQueue::new());
    let key = q.queue.insert("foo", ms(10_000));
    q.pending();
    assert!(!q.is_woken());
    q.queue.reset_at(&key, Instant::now() - ms(100));
    assert!(q.is_woken());
    assert_eq!(q.ready().into_inner(), "foo");
    q.exhausted();
}

#[tokio::test(start_paused = true)]
async fn reset_much_earlier_wakes_at_the_new_deadline() {
    let mut q = Polled::new(DelayQueue::new());
    let start = Instant::now();
    let key = q.queue.insert_at("foo", start + ms(200));
    q.pending();
    sleep(ms(3)).await;
    q.queue.reset_at(&key, start + ms(10));
    assert!(
        q.is_woken(),
        "the sleep is armed later than the new deadline"
    );
    q.pending();
    sleep_until(start + ms(20)).await;
    settle().await;
    assert!(q.is_woken());
    assert_eq!(q.ready().into_inner(), "foo");
}

#[tokio::test(start_paused = true)]
async fn reset_twice_keeps_the_last_deadline() {
    let mut q = Polled::new(DelayQueue::new());
    let start = Instant::now();
    let key = q.queue.insert_at("foo", start + ms(200));
    q.pending();
    q.queue.reset_at(&key, start + ms(50));
    q.queue.reset_at(&key, start + ms(40));
    q.pending();
    sleep_until(start + ms(39)).await;
    q.pending();
    let expired = q.queue.next().await.expect("one value");
    assert_eq!(Instant::now(), start + ms(40));
    assert_eq!(expired.into_inner(), "foo");
}

#[tokio::test(start_paused = true)]
async fn reset_of_a_value_inserted_as_expired() {
    sleep(ms(1000)).await;
    let mut q = Polled::new(DelayQueue::new());
    let now = Instant::now();
    let key = q.queue.insert_at("foo", now - ms(100));
    q.queue.reset_at(&key, now + ms(100));
    assert_eq!(q.queue.len(), 1);
    for _ in 0..3 {
        q.queue.reset(&key, ms(100));
        q.pending();
    }
    sleep(ms(100)).await;
    assert_eq!(q.ready().into_inner(), "foo");
    assert!(q.queue.is_empty());
}

#[tokio::test(start_paused = true)]
async fn remove_an_expired_value_before_it_is_polled() {
    let mut q = Polled::new(DelayQueue::new());
    let key = q.queue.insert("foo", ms(10));
    sleep(ms(20)).await;
    assert_eq!(q.queue.remove(&key).into_inner(), "foo");
    q.exhausted();
}

#[tokio::test(start_paused = true)]
async fn remove_at_a_level_boundary() {
    let mut q = Polled::new(DelayQueue::new());
    let start = Instant::now();
    // 256 ms is the first level-1 deadline of the queue's 256-slot wheel.
    let key = q.queue.insert_at("foo", start + ms(256));
    q.queue.insert_at("bar", start + ms(300));
    q.pending();
    sleep_until(start + ms(250)).await;
    q.pending();
    q.queue.remove(&key);
    let expired = q.queue.next().await.expect("bar is left");
    assert_eq!(Instant::now(), start + ms(300));
    assert_eq!(expired.into_inner(), "bar");
}

#[tokio::test(start_paused = true)]
async fn inserting_earlier_than_the_armed_deadline_wakes() {
    let mut q = Polled::new(DelayQueue::new());
    let start = Instant::now();
    q.queue.insert_at("one", start + ms(200));
    q.pending();
    q.queue.insert_at("two", start + ms(100));
    assert!(q.is_woken());
    q.pending();
    sleep_until(start + ms(99)).await;
    q.pending();
    sleep_until(start + ms(100)).await;
    settle().await;
    assert!(q.is_woken());
    assert_eq!(q.ready().into_inner(), "two");
}

#[tokio::test(start_paused = true)]
async fn inserting_later_than_the_armed_deadline_does_not_wake() {
    let mut q = Polled::new(DelayQueue::new());
    q.queue.insert("one", ms(100));
    q.pending();
    q.queue.insert("two", ms(200));
    assert!(!q.is_woken());
}

#[tokio::test(start_paused = true)]
async fn inserting_after_a_ready_poll_keeps_draining() {
    let mut q = Polled::new(DelayQueue::new());
    let start = Instant::now();
    for name in ["1", "2", "3"] {
        q.queue.insert_at(name, start + ms(100));
    }
    q.pending();
    sleep_until(start + ms(100)).await;
    settle().await;
    assert!(q.is_woken());
    let mut got = Vec::new();
    while got.len() < 3 {
        got.push(q.ready().into_inner());
        q.queue.insert_at("later", start + ms(500));
    }
    got.sort_unstable();
    assert_eq!(got, ["1", "2", "3"]);
    q.pending();
    assert_eq!(q.queue.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn reset_earlier_and_later_within_a_cascading_bucket() {
    let mut q = Polled::new(DelayQueue::new());
    let start = Instant::now();
    let foo = q.queue.insert_at("foo", start + ms(600));
    q.pending();
    sleep_until(start + ms(280)).await;
    q.pending();
    q.queue.reset_at(&foo, start + ms(300));
    assert!(q.is_woken());
    q.pending();
    sleep_until(start + ms(299)).await;
    q.pending();
    q.queue.reset_at(&foo, start + ms(320));
    let expired = q.queue.next().await.expect("foo");
    assert_eq!(Instant::now(), start + ms(320));
    assert_eq!(expired.into_inner(), "foo");
}

#[tokio::test(start_paused = true)]
async fn multi_reset_reorders() {
    let mut queue = DelayQueue::new();
    let start = Instant::now();
    let one = queue.insert_at("one", start + ms(200));
    let two = queue.insert_at("two", start + ms(250));
    queue.reset_at(&one, start + ms(300));
    queue.reset_at(&two, start + ms(350));
    queue.reset_at(&one, start + ms(400));
    assert_eq!(queue.peek(), Some(two));
    assert_eq!(queue.next().await.map(Expired::into_inner), Some("two"));
    assert_eq!(Instant::now(), start + ms(350));
    assert_eq!(queue.next().await.map(Expired::into_inner), Some("one"));
    assert_eq!(Instant::now(), start + ms(400));
}

#[tokio::test(start_paused = true)]
async fn poll_expired_when_empty_then_yields_again_after_insert() {
    let mut q = Polled::<u32>::new(DelayQueue::new());
    q.exhausted();
    let key = q.queue.insert(0, ms(10_000));
    q.pending();
    q.queue.remove(&key);
    q.exhausted();
    q.queue.insert(1, ms(5));
    q.pending();
    assert_eq!(q.queue.next().await.map(Expired::into_inner), Some(1));
    assert!(q.queue.next().await.is_none());
    q.queue.insert(2, Duration::ZERO);
    assert_eq!(q.queue.next().await.map(Expired::into_inner), Some(2));
}

#[tokio::test(start_paused = true)]
async fn deadlines_far_beyond_the_first_levels() {
    let mut q = Polled::new(DelayQueue::new());
    let start = Instant::now();
    let day = Duration::from_secs(86_400);
    q.queue.insert_at("later", start + day * 400);
    q.queue.insert_at("sooner", start + day * 3);
    assert_eq!(
        q.queue.next().await.map(Expired::into_inner),
        Some("sooner")
    );
    assert_eq!(Instant::now(), start + day * 3);
    assert_eq!(q.queue.next().await.map(Expired::into_inner), Some("later"));
    assert_eq!(Instant::now(), start + day * 400);
}

#[tokio::test(start_paused = true)]
async fn duration_max_saturates_instead_of_overflowing() {
    let mut q = Polled::new(DelayQueue::new());
    let key = q.queue.insert("never", Duration::MAX);
    q.pending();
    assert!(q.queue.deadline(&key) > Instant::now() + Duration::from_secs(100 * 365 * 86_400));
    assert_eq!(q.queue.remove(&key).into_inner(), "never");
}

#[tokio::test(start_paused = true)]
async fn peek_follows_the_next_value() {
    let mut q = Polled::new(DelayQueue::new());
    let foo = q.queue.insert("foo", ms(10));
    let bar = q.queue.insert("bar", ms(5));
    let baz = q.queue.insert("baz", ms(15));
    assert_eq!(q.queue.peek(), Some(bar));
    sleep(ms(5)).await;
    assert_eq!(q.ready().key(), bar);
    assert_eq!(q.queue.peek(), Some(foo));
    sleep(ms(5)).await;
    assert_eq!(q.ready().key(), foo);
    assert_eq!(q.queue.peek(), Some(baz));
    sleep(ms(5)).await;
    assert_eq!(q.ready().key(), baz);
    assert_eq!(q.queue.peek(), None);
}

#[tokio::test(start_paused = true)]
async fn peek_finds_the_earliest_of_a_shared_upper_bucket() {
    let mut q = Polled::new(DelayQueue::new());
    let start = Instant::now();
    // Both in the same level-1 bucket ([256, 512) ms); the later one is linked at its head.
    let early = q.queue.insert_at("early", start + ms(300));
    let late = q.queue.insert_at("late", start + ms(400));
    assert_eq!(q.queue.peek(), Some(early));
    sleep_until(start + ms(305)).await;
    assert_eq!(q.queue.peek(), Some(early));
    assert_eq!(q.ready().key(), early);
    assert_eq!(q.queue.peek(), Some(late));
    sleep_until(start + ms(400)).await;
    assert_eq!(q.ready().key(), late);
    assert_eq!(q.queue.peek(), None);
}

#[tokio::test(start_paused = true)]
async fn removing_the_last_value_wakes_and_ends() {
    let mut q = Polled::new(DelayQueue::new());
    let key = q.queue.insert("foo", ms(1000));
    q.pending();
    q.queue.remove(&key);
    assert!(q.is_woken());
    q.exhausted();
}

#[tokio::test(start_paused = true)]
async fn clear_wakes_ends_and_invalidates_keys() {
    let mut q = Polled::new(DelayQueue::new());
    let key = q.queue.insert("foo", ms(1000));
    q.queue.insert("bar", ms(2000));
    q.pending();
    assert!(!q.is_woken());
    q.queue.clear();
    assert!(q.is_woken());
    assert!(q.queue.is_empty());
    assert!(q.queue.try_remove(&key).is_none());
    q.exhausted();
}

#[tokio::test(start_paused = true)]
async fn len_capacity_and_shrink_to_fit() {
    let mut queue = DelayQueue::with_capacity(64);
    assert!(queue.capacity() >= 64);
    let keys: Vec<Key> = (0..100).map(|i| queue.insert(i, ms(1 + i))).collect();
    assert_eq!(queue.len(), 100);
    assert!(queue.capacity() >= 100);
    for key in &keys[..50] {
        queue.remove(key);
    }
    assert_eq!(queue.len(), 50);
    queue.shrink_to_fit();
    assert!(queue.capacity() >= 50, "live values keep their slots");
    let left: HashSet<u64> = keys[50..]
        .iter()
        .map(|k| *queue.remove(k).get_ref())
        .collect();
    assert_eq!(left, (50..100).collect());
    queue.shrink_to_fit();
    assert_eq!(queue.capacity(), 0, "an empty queue frees everything");
    queue.insert(7, ms(1));
    assert_eq!(queue.next().await.map(Expired::into_inner), Some(7));
}

#[tokio::test(start_paused = true)]
async fn expired_accessors() {
    let mut q = Polled::new(DelayQueue::new());
    let start = Instant::now();
    let key = q.queue.insert_at(vec![1], start);
    let mut expired = q.ready();
    expired.get_mut().push(2);
    assert_eq!(expired.get_ref(), &[1, 2]);
    assert_eq!(expired.deadline(), start);
    assert_eq!(expired.key(), key);
    assert_eq!(expired.into_inner(), [1, 2]);
}

#[tokio::test(start_paused = true)]
async fn with_timer_rounds_up_to_that_timers_tick() {
    let timer = Timer::builder().tick(ms(10)).build().unwrap();
    let mut queue = DelayQueue::with_timer(&timer);
    let start = Instant::now();
    queue.insert_at("foo", start + ms(25));
    assert_eq!(queue.next().await.map(Expired::into_inner), Some("foo"));
    let elapsed = start.elapsed();
    assert!(elapsed >= ms(25), "never early: {elapsed:?}");
    assert!(
        elapsed <= ms(40),
        "within a tick of the 30 ms tick: {elapsed:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn one_sleep_while_pending_and_none_while_empty() {
    let timer = Timer::new();
    let mut q = Polled::new(DelayQueue::with_timer(&timer));
    for i in 0..100 {
        q.queue.insert(i, ms(10 + i));
    }
    assert_eq!(timer.pending(), 0, "nothing is armed before the first poll");
    q.pending();
    assert_eq!(timer.pending(), 1, "one wheel sleep for 100 values");
    q.queue.clear();
    assert_eq!(timer.pending(), 0, "an empty queue holds no sleep");
    q.exhausted();
    let key = q.queue.insert(0, ms(5));
    q.pending();
    assert_eq!(timer.pending(), 1);
    q.queue.remove(&key);
    assert_eq!(timer.pending(), 0);
    // Wakes the driver had planned for the removed sleeps may still come; after them, none.
    sleep(ms(200)).await;
    let wakeups = timer.stats().driver_wakeups;
    sleep(Duration::from_secs(3600)).await;
    assert_eq!(
        timer.stats().driver_wakeups,
        wakeups,
        "no driver wakeup for an empty queue"
    );
}

#[tokio::test(start_paused = true)]
async fn new_needs_no_runtime_until_the_first_insert() {
    let queue = std::thread::spawn(|| {
        let queue = DelayQueue::<u8>::new();
        assert!(queue.is_empty());
        format!("{queue:?}")
    })
    .join()
    .unwrap();
    assert!(queue.contains("DelayQueue"));
}

#[test]
fn is_a_stream_of_expired() {
    fn stream<S: futures::Stream<Item = Expired<u8>> + Unpin>(_: &S) {}
    stream(&DelayQueue::<u8>::new());
}

#[tokio::test(start_paused = true)]
async fn deadlines_round_up_to_the_tick_as_tokio_util_rounds_to_the_millisecond() {
    let mut queue = DelayQueue::new();
    let start = Instant::now();
    let key = queue.insert_at("foo", start + Duration::from_micros(1_500));
    assert_eq!(queue.deadline(&key), start + ms(2));
    let expired = queue.next().await.expect("one value");
    assert_eq!(Instant::now(), start + ms(2), "never before 1.5 ms");
    assert_eq!(expired.deadline(), start + ms(2));
}

#[tokio::test(start_paused = true)]
async fn a_later_insert_that_expires_first_comes_out_first() {
    let mut q = Polled::new(DelayQueue::new());
    let start = Instant::now();
    q.queue.insert_at("foo", start + ms(10_000));
    q.pending();
    q.queue.insert_at("bar", start + ms(600));
    q.pending();
    sleep_until(start + ms(600)).await;
    settle().await;
    assert!(q.is_woken());
    assert_eq!(q.ready().into_inner(), "bar");
    q.pending();
}

#[tokio::test(start_paused = true)]
async fn resetting_either_key_earlier_makes_it_come_out_first() {
    for reset_second in [false, true] {
        let mut q = Polled::new(DelayQueue::new());
        let start = Instant::now();
        let one = q.queue.insert_at("one", start + ms(200));
        let two = q.queue.insert_at("two", start + ms(250));
        q.pending();
        let (moved, name) = if reset_second {
            (two, "two")
        } else {
            (one, "one")
        };
        q.queue.reset_at(&moved, start + ms(100));
        sleep_until(start + ms(100)).await;
        settle().await;
        assert!(q.is_woken());
        assert_eq!(q.ready().into_inner(), name);
    }
}

#[tokio::test(start_paused = true)]
async fn resetting_the_first_value_later_lets_the_second_out_first() {
    let mut q = Polled::new(DelayQueue::new());
    let start = Instant::now();
    let one = q.queue.insert_at("one", start + ms(200));
    q.queue.insert_at("two", start + ms(250));
    q.pending();
    q.queue.reset_at(&one, start + ms(300));
    sleep_until(start + ms(250)).await;
    settle().await;
    assert!(q.is_woken(), "woken for two at 250 ms");
    assert_eq!(q.ready().into_inner(), "two");
    q.pending();
    sleep_until(start + ms(300)).await;
    assert_eq!(q.ready().into_inner(), "one");
    q.exhausted();
}

#[tokio::test(start_paused = true)]
async fn a_queue_older_than_its_first_levels_keeps_working() {
    let mut queue = DelayQueue::new();
    for _ in 0..2 {
        tokio::time::advance(Duration::from_millis(1 << 35)).await;
        queue.insert(0, Duration::ZERO);
        assert_eq!(queue.next().await.map(Expired::into_inner), Some(0));
    }
    let start = Instant::now();
    queue.insert(1, ms(1));
    assert_eq!(queue.next().await.map(Expired::into_inner), Some(1));
    assert_eq!(Instant::now(), start + ms(1));
}
