//! Model 8: the driver task's exit when the last handle to its timer goes away.

use super::{model, Driver, Probe, BASE};
use crate::loom::{thread, Arc};
use crate::shard::Closing;

/// Model 8: the `Timer` handle and the last (registered) sleep are dropped on two threads
/// while a third runs the driver task's loop: turn, stop if the timer closed or was
/// abandoned (`live == 0`), else sleep until the planned tick or park until notified. The
/// driver must see the last drop, however it interleaves with parking (the dropping thread
/// notifies it), and exit (a driver parked for ever makes loom fail the model); afterwards
/// the test holds the last reference to the timer's state, and loom's leak check finds
/// every `Arc` freed.
#[test]
fn last_handle_vs_park() {
    model(|| {
        let (timer, global, _) = super::fixture(1);
        let mut sleep = timer.sleep_until(super::at(&global, BASE + 1));
        let probe = Probe::new();
        assert!(probe.poll(&mut sleep).is_pending());

        let driver = {
            let global = global.clone();
            thread::spawn(move || {
                Driver::new(global.clone()).run(BASE);
                // The task's exit guard.
                global.close(Closing::DriverGone, &mut Vec::new());
            })
        };
        let dropper = thread::spawn(move || drop(sleep));
        drop(timer);
        dropper.join().unwrap();
        driver.join().unwrap();

        assert!(probe.wakes() <= 1);
        assert_eq!(global.pending(), 0);
        assert_eq!(super::allocated(&global), 0);
        assert_eq!(
            Arc::strong_count(&global),
            1,
            "a reference to the timer leaked"
        );
    });
}
