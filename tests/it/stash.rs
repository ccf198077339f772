//! The thread-local stash of shard handles (`src/stash.rs`): a dropped sleep leaves its
//! handle (never its entry or waker) for the thread's next sleep. These check that dropping
//! still cancels at once (the waker is dropped, nothing stays scheduled, the paused clock
//! does not jump), that counts stay exact on every thread, and that a dropped timer's driver
//! still exits. Several come from the review of an earlier version that kept the entry too.

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use tokio::time::Instant;
use wheel_timer::Timer;

use crate::support::{ms, poll_noop, WakeCounter};

const HOUR: Duration = Duration::from_secs(3600);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Waits (bounded) until the runtime has `n` tasks alive; returns whether it got there.
fn settles_at(rt: &tokio::runtime::Runtime, n: usize) -> bool {
    for _ in 0..5000 {
        if rt.metrics().num_alive_tasks() == n {
            return true;
        }
        std::thread::sleep(ms(1));
    }
    false
}

#[tokio::test(start_paused = true)]
async fn the_next_sleep_completes_at_its_own_deadline_and_the_dropped_one_never_wakes() {
    let timer = Timer::new();
    for (dropped, next) in [(10, 50), (50, 10), (30, 30), (20, 0)] {
        let dropped_waker = WakeCounter::new();
        let mut old = Box::pin(timer.sleep(ms(dropped)));
        assert!(dropped_waker.poll(old.as_mut()).is_pending());
        drop(old);
        assert_eq!(timer.pending(), 0);

        let start = Instant::now();
        let mut sleep = Box::pin(timer.sleep(ms(next)));
        if next > 0 {
            assert!(poll_noop(sleep.as_mut()).is_pending());
            tokio::time::advance(ms(dropped.min(next) - 1)).await;
            assert!(poll_noop(sleep.as_mut()).is_pending(), "completed early");
        }
        sleep.as_mut().await;
        let elapsed = start.elapsed();
        assert!(
            elapsed >= ms(next) && elapsed <= ms(next + 1),
            "{elapsed:?}"
        );
        tokio::time::advance(ms(dropped + 1)).await;
        assert_eq!(
            dropped_waker.count(),
            0,
            "a dropped sleep's waker was woken"
        );
    }
    assert_eq!(timer.pending(), 0);
}

#[tokio::test(start_paused = true)]
async fn sleeps_of_two_timers_dropped_in_turn_on_one_thread() {
    let (a, b) = (Timer::new(), Timer::new());
    for round in 0..10u64 {
        for timer in [&a, &b] {
            let mut sleep = pin!(timer.sleep(HOUR));
            assert!(poll_noop(sleep.as_mut()).is_pending());
        }
        let start = Instant::now();
        let timer = if round % 2 == 0 { &a } else { &b };
        timer.sleep(ms(round + 1)).await;
        let elapsed = start.elapsed();
        assert!(
            elapsed >= ms(round + 1) && elapsed <= ms(round + 2),
            "{elapsed:?}"
        );
    }
    assert_eq!((a.pending(), b.pending()), (0, 0));
}

#[test]
fn sleeps_dropped_on_another_thread_are_not_counted_while_it_lives() {
    let rt = runtime();
    let _enter = rt.enter();
    let timer = Timer::new();
    let (dropped_tx, dropped_rx) = mpsc::channel();
    let (exit_tx, exit_rx) = mpsc::channel::<()>();
    let thread = {
        let (timer, handle) = (timer.clone(), rt.handle().clone());
        std::thread::spawn(move || {
            let _enter = handle.enter();
            for _ in 0..100 {
                let mut sleep = pin!(timer.sleep(HOUR));
                assert!(poll_noop(sleep.as_mut()).is_pending());
            }
            dropped_tx.send(()).unwrap();
            exit_rx.recv().unwrap();
        })
    };
    dropped_rx.recv().unwrap();
    assert_eq!(timer.pending(), 0);
    exit_tx.send(()).unwrap();
    thread.join().unwrap();
}

#[test]
fn a_dropped_sleep_drops_its_waker_at_once() {
    struct Holder(#[allow(dead_code)] mpsc::Sender<()>);
    impl Wake for Holder {
        fn wake(self: Arc<Self>) {}
    }
    let rt = runtime();
    let _enter = rt.enter();
    let timer = Timer::new();
    let (tx, rx) = mpsc::channel::<()>();
    {
        let waker = Waker::from(Arc::new(Holder(tx)));
        let mut sleep = pin!(timer.sleep(HOUR));
        assert!(sleep
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        // the sleep and this waker are dropped here
    }
    assert_eq!(
        rx.recv_timeout(Duration::from_millis(500)),
        Err(mpsc::RecvTimeoutError::Disconnected),
        "the dropped sleep's waker (and the Sender it owns) is still alive"
    );
}

#[test]
fn an_executor_that_stops_when_its_wakers_are_gone_stops() {
    type BoxFut = Pin<Box<dyn Future<Output = ()> + Send>>;
    struct Task {
        fut: Mutex<Option<BoxFut>>,
        queue: mpsc::SyncSender<Arc<Task>>,
    }
    impl Wake for Task {
        fn wake(self: Arc<Self>) {
            let q = self.queue.clone();
            let _ = q.send(self);
        }
    }
    let rt = runtime();
    let _enter = rt.enter();
    let timer = Timer::new();
    let (done_tx, done_rx) = mpsc::channel();
    let executor = {
        let timer = timer.clone();
        std::thread::spawn(move || {
            let (queue, ready) = mpsc::sync_channel::<Arc<Task>>(100);
            let fut: BoxFut = Box::pin(async move {
                // The inner future needs two polls; the timeout's sleep registers at the first.
                let mut yielded = false;
                let inner = std::future::poll_fn(move |cx| {
                    if yielded {
                        Poll::Ready(())
                    } else {
                        yielded = true;
                        cx.waker().wake_by_ref();
                        Poll::Pending
                    }
                });
                let _ = timer.timeout(HOUR, inner).await;
            });
            let task = Arc::new(Task {
                fut: Mutex::new(Some(fut)),
                queue: queue.clone(),
            });
            queue.send(task).unwrap();
            drop(queue);
            while let Ok(task) = ready.recv() {
                let mut slot = task.fut.lock().unwrap();
                if let Some(mut fut) = slot.take() {
                    let waker = Waker::from(task.clone());
                    if fut
                        .as_mut()
                        .poll(&mut Context::from_waker(&waker))
                        .is_pending()
                    {
                        *slot = Some(fut);
                    }
                }
            }
            done_tx.send(()).unwrap();
        })
    };
    let finished = done_rx.recv_timeout(Duration::from_secs(2)).is_ok();
    assert!(
        finished,
        "the executor still runs: a dropped timeout's waker keeps its task"
    );
    executor.join().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_dropped_timeout_does_not_make_the_paused_clock_jump() {
    use tokio::time::Instant;
    let timer = Timer::new();
    let start = Instant::now();
    // Polled once (registered with this task's waker), completes at the second poll.
    let _ = timer.timeout(HOUR, tokio::task::yield_now()).await;
    // Something of the wheel's fires at 10 ms, so its driver re-plans.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let _task = timer
        .schedule(Duration::from_millis(10), move || {
            let _ = tx.send(());
        })
        .unwrap();
    rx.await.unwrap();
    // An event from outside the runtime, 200 ms of real time later.
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        let _ = tx.send(());
    });
    rx.await.unwrap();
    let elapsed = start.elapsed();
    assert!(
        elapsed < Duration::from_secs(1),
        "the paused clock jumped to the dropped timeout's deadline: {elapsed:?}"
    );
}

#[test]
fn the_driver_exits_once_every_handle_and_sleep_is_gone() {
    let rt = runtime();
    let _enter = rt.enter();
    let before = rt.metrics().num_alive_tasks();
    let timer = Timer::new();
    assert!(settles_at(&rt, before + 1));
    let (kept_tx, kept_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel();
    let (exit_tx, exit_rx) = mpsc::channel::<()>();
    let thread = {
        let (timer, handle) = (timer.clone(), rt.handle().clone());
        std::thread::spawn(move || {
            let _enter = handle.enter();
            let mut last = Box::pin(timer.sleep(HOUR));
            let _ = last.as_mut().poll(&mut Context::from_waker(Waker::noop()));
            {
                let mut s = pin!(timer.sleep(HOUR));
                let _ = s.as_mut().poll(&mut Context::from_waker(Waker::noop()));
            }
            drop(timer);
            kept_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            // The timer's last handle is gone: this is its last sleep.
            drop(last);
            done_tx.send(()).unwrap();
            exit_rx.recv().unwrap();
        })
    };
    kept_rx.recv().unwrap();
    drop(timer);
    go_tx.send(()).unwrap();
    done_rx.recv().unwrap();
    let exited = settles_at(&rt, before);
    exit_tx.send(()).unwrap();
    thread.join().unwrap();
    assert!(
        exited,
        "no Timer and no Sleep is left, yet the driver task still runs"
    );
}

#[test]
fn a_dropped_timers_driver_exits_once_the_threads_that_kept_its_handles_move_on() {
    let rt = runtime();
    let _enter = rt.enter();
    let before = rt.metrics().num_alive_tasks();
    let (first, second) = (Timer::new(), Timer::new());
    assert!(settles_at(&rt, before + 2));
    let (kept_tx, kept_rx) = mpsc::channel();
    let (next_tx, next_rx) = mpsc::channel::<()>();
    let (moved_tx, moved_rx) = mpsc::channel();
    let (exit_tx, exit_rx) = mpsc::channel::<()>();
    let thread = {
        let handle = rt.handle().clone();
        let (first, second) = (first.clone(), second.clone());
        std::thread::spawn(move || {
            let _enter = handle.enter();
            for timer in [&first, &second] {
                let mut sleep = pin!(timer.sleep(HOUR));
                assert!(poll_noop(sleep.as_mut()).is_pending());
            }
            // This thread now keeps a handle of `second`.
            drop((first, second));
            kept_tx.send(()).unwrap();
            next_rx.recv().unwrap();
            let other = Timer::new();
            {
                let mut sleep = pin!(other.sleep(HOUR));
                assert!(poll_noop(sleep.as_mut()).is_pending());
            }
            drop(other);
            moved_tx.send(()).unwrap();
            exit_rx.recv().unwrap();
        })
    };
    kept_rx.recv().unwrap();
    drop((first, second));
    // `first`'s handle was released when `second`'s sleep was dropped on the thread.
    assert!(
        settles_at(&rt, before + 1),
        "the first timer's driver still runs"
    );
    next_tx.send(()).unwrap();
    moved_rx.recv().unwrap();
    // The thread's next sleep drop (of a third timer, dropped with its timer there)
    // released `second`'s.
    assert!(settles_at(&rt, before), "a driver outlived its timer");
    exit_tx.send(()).unwrap();
    thread.join().unwrap();
}

#[test]
fn sleeps_in_a_thread_local_dropped_at_thread_exit_in_either_order() {
    use std::cell::RefCell;
    thread_local! {
        static HOLD: RefCell<Vec<wheel_timer::Sleep>> = const { RefCell::new(Vec::new()) };
    }
    let rt = runtime();
    let _enter = rt.enter();
    let timer = Timer::new();
    for hold_first in [false, true] {
        let (timer2, handle) = (timer.clone(), rt.handle().clone());
        std::thread::spawn(move || {
            let _enter = handle.enter();
            if hold_first {
                HOLD.with(|_| {});
            }
            for _ in 0..3 {
                let mut s = Box::pin(timer2.sleep(HOUR));
                assert!(s
                    .as_mut()
                    .poll(&mut Context::from_waker(Waker::noop()))
                    .is_pending());
                HOLD.with(|h| h.borrow_mut().push(*Pin::into_inner(s)));
            }
            // One more, whose handle the stash keeps.
            let mut s = pin!(timer2.sleep(HOUR));
            let _ = s.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        })
        .join()
        .unwrap();
        assert_eq!(timer.pending(), 0, "hold_first={hold_first}");
    }
}

#[test]
fn many_tasks_creating_resetting_moving_and_dropping_sleeps_never_early_never_hung() {
    use tokio::time::Instant;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let timer = rt.block_on(async { Timer::new() });
    let early = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (drop_tx, drop_rx) = tokio::sync::mpsc::unbounded_channel::<wheel_timer::Sleep>();
    let drop_rx = Arc::new(tokio::sync::Mutex::new(drop_rx));
    rt.block_on(async {
        let dropper = {
            let drop_rx = drop_rx.clone();
            tokio::spawn(async move {
                while let Some(s) = drop_rx.lock().await.recv().await {
                    drop(s);
                    tokio::task::yield_now().await;
                }
            })
        };
        let mut tasks = Vec::new();
        for t in 0..64u64 {
            let timer = timer.clone();
            let early = early.clone();
            let drop_tx = drop_tx.clone();
            tasks.push(tokio::spawn(async move {
                let mut x = t.wrapping_mul(0x9E3779B97F4A7C15) | 1;
                let mut rnd = move || {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x
                };
                for _ in 0..150 {
                    let d = Duration::from_micros(rnd() % 4000);
                    match rnd() % 7 {
                        0 => {
                            let start = Instant::now();
                            let s = timer.sleep(d);
                            let dl = s.deadline();
                            s.await;
                            if Instant::now() < dl || start.elapsed() < d {
                                early.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            }
                        }
                        1 => {
                            // timeout whose inner future wins after a yield
                            let _ = timer
                                .timeout(d + Duration::from_millis(50), tokio::task::yield_now())
                                .await;
                        }
                        2 => {
                            // poll once, then drop on another thread
                            let mut s = Box::pin(timer.sleep(d));
                            let _ = futures::poll!(s.as_mut());
                            let _ = drop_tx.send(*Pin::into_inner(s));
                        }
                        3 => {
                            // reset before the first poll
                            let mut s = Box::pin(timer.sleep(Duration::from_secs(10)));
                            let dl = Instant::now() + d;
                            s.as_mut().reset(dl);
                            s.as_mut().await;
                            if Instant::now() < dl {
                                early.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            }
                        }
                        4 => {
                            // select: sleep vs a quick yield, then a fresh sleep awaited
                            let s = timer.sleep(d);
                            tokio::select! {
                                _ = s => {}
                                _ = tokio::task::yield_now() => {}
                            }
                        }
                        5 => {
                            let start = Instant::now();
                            wheel_timer::sleep_wheel(d).await;
                            if start.elapsed() < d {
                                early.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            }
                        }
                        _ => {
                            // poll, reset later, move to another task and await there
                            let mut s = Box::pin(timer.sleep(d));
                            let _ = futures::poll!(s.as_mut());
                            let dl = Instant::now() + d;
                            s.as_mut().reset(dl);
                            let early = early.clone();
                            tokio::spawn(async move {
                                s.as_mut().await;
                                if Instant::now() < dl {
                                    early.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                                }
                            })
                            .await
                            .unwrap();
                        }
                    }
                }
            }));
        }
        for task in tasks {
            tokio::time::timeout(Duration::from_secs(60), task)
                .await
                .expect("a task hung (lost wakeup?)")
                .unwrap();
        }
        drop(drop_tx);
        let _ = tokio::time::timeout(Duration::from_secs(5), dropper).await;
    });
    assert_eq!(
        early.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "early completions"
    );
    assert_eq!(timer.pending(), 0);
}
