//! Model 14: the driver's two turns at once. The task steps while tokio's time driver runs the
//! `TurnWaker`'s turn in its park (on another worker), and a task registers a sleep meanwhile.

use super::{at, fixture, model, Probe, BASE};
use crate::driver;
use crate::loom::thread;

/// Model 14: a sleep due at `BASE + 1` is registered; one thread plays the `TurnWaker` (the
/// shipped `driver::waker_turn` with the clock at `BASE + 1`), another registers a second
/// sleep due at `BASE + 2`, and the main thread plays the task's own step at `BASE + 1`. The
/// due sleep is woken exactly once (each shard is advanced under its lock, so one of the two
/// turns pops it); the second sleep is not fired early by either turn. The waker's turn ends
/// by waking the task, whose next step plans for the second sleep: it is not stranded, fires
/// at `BASE + 2`, once.
#[test]
fn two_turns_vs_register() {
    model(|| {
        let (timer, global, mut task) = fixture(1);
        let mut due = timer.sleep_until(at(&global, BASE + 1));
        let first = Probe::new();
        assert!(first.poll(&mut due).is_pending());
        let waker_turn = {
            let global = global.clone();
            thread::spawn(move || driver::waker_turn(&global, BASE + 1))
        };
        let registrar = {
            let (timer, global) = (timer.clone(), global.clone());
            thread::spawn(move || {
                let mut later = timer.sleep_until(at(&global, BASE + 2));
                let probe = Probe::new();
                assert!(probe.poll(&mut later).is_pending(), "fired before its tick");
                (later, probe)
            })
        };
        task.turn(BASE + 1);
        waker_turn.join().unwrap();
        let (mut later, second) = registrar.join().unwrap();
        assert_eq!(first.wakes(), 1, "the due sleep was not woken exactly once");
        assert_eq!(second.wakes(), 0, "the later sleep fired before its tick");
        // The waker's turn wakes the task: its next step.
        task.turn(BASE + 1);
        task.assert_none_stranded();
        task.turn(BASE + 2);
        assert_eq!(
            second.wakes(),
            1,
            "the later sleep was not woken exactly once"
        );
        assert!(first.poll(&mut due).is_ready());
        assert!(second.poll(&mut later).is_ready());
        assert_eq!(timer.pending(), 0);
    });
}
