//! Model 17: the driver task dropped by its runtime's shutdown while a task of that runtime
//! registers a sleep.

use super::{allocated, at, fixture, model, Probe, BASE};
use crate::driver;
use crate::loom::{runtime, thread};
use crate::shard::Closing;

/// Model 17: the main thread drops the driver task, whose guard closes the timer with
/// `Closing::DriverGone` as a runtime's shutdown does, while a loom thread playing a task of
/// that runtime polls a new sleep (the first poll registers it) and polls it again if it was
/// woken. No poll panics and none is ready: the sleep stays pending, as a tokio sleep does in
/// its runtime's shutdown, before and after the close and however the two interleave. No
/// wake is lost: a sleep that registered before the close was woken by it, once. Dropping
/// the sleep frees its entry, and nothing leaks.
///
/// Mutations seen to fail it: `Sleep::closed` panicking whatever the caller (the behaviour
/// before, "polled after its timer's driver stopped" once the close precedes the
/// registration); `Global::close` storing its state after closing the shards instead of
/// before (a registration refused by a closed shard then reads the timer as running and
/// panics "shut down").
#[test]
fn driver_gone_vs_register() {
    model(|| {
        let (timer, global, _) = fixture(1);
        let mut sleep = timer.sleep_until(at(&global, BASE + 1));
        let task = thread::spawn(move || {
            runtime::enter_task(Some(runtime::MODEL));
            let probe = Probe::new();
            assert!(
                probe.poll(&mut sleep).is_pending(),
                "the first poll completed"
            );
            if probe.wakes() > 0 {
                assert!(
                    probe.poll(&mut sleep).is_pending(),
                    "the woken re-poll completed"
                );
            }
            (sleep, probe)
        });
        drop(driver::task(global.clone()));
        let (mut sleep, probe) = task.join().unwrap();

        assert_eq!(global.closing(), Some(Closing::DriverGone));
        let registered = allocated(&global) == 1;
        assert_eq!(
            probe.wakes(),
            usize::from(registered),
            "a sleep registered before the close was not woken once (or one registered after was woken)"
        );
        runtime::enter_task(Some(runtime::MODEL));
        assert!(
            probe.poll(&mut sleep).is_pending(),
            "a poll after the close completed"
        );
        drop(sleep);
        assert_eq!(allocated(&global), 0);
        drop(timer);
    });
}
