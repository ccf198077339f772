//! Delayed tasks: automatic order rating.
//!
//! A shop rates an order five stars automatically 48 hours after delivery unless the
//! customer rates it first, and sends a digest at 20:00. Each auto-rating is a
//! `Timer::schedule` callback; a customer's rating cancels it with `TimerTask::cancel`
//! (which says whether it was still in time); the digest is a `Timer::schedule_at`.
//! The runtime's clock is paused, so the simulated two days pass in milliseconds.
//!
//! ```text
//! cargo run --example delayed_tasks
//! cargo run --example delayed_tasks -- --auto-rate-hours 2   # the customer is too late for 1002
//! cargo run --example delayed_tasks -- --help
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use tokio::time::{sleep, Instant};
use wheel_timer::{Error, Timer, TimerTask};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
/// The simulation starts on day 1 at 09:30.
const OPENING: Duration = Duration::from_secs(9 * 3600 + 30 * 60);

/// The simulated wall clock, "day D HH:MM".
#[derive(Clone, Copy)]
struct Clock(Instant);

impl Clock {
    fn now(self) -> String {
        self.at(Instant::now())
    }

    fn at(self, instant: Instant) -> String {
        let t = (instant - self.0 + OPENING).as_secs();
        let (day, hour, minute) = (t / 86_400 + 1, t / 3600 % 24, t / 60 % 60);
        format!("day {day} {hour:02}:{minute:02}")
    }

    /// The instant of `hh:mm` on day 1.
    fn today_at(self, hour: u64, minute: u64) -> Instant {
        self.0 + Duration::from_secs(hour * 3600 + minute * 60) - OPENING
    }
}

/// Automatic order rating on a paused clock: auto-ratings are wheel callbacks that a
/// customer's own rating cancels.
#[derive(Parser, Debug)]
#[command(name = "delayed_tasks")]
struct Args {
    /// Hours after delivery at which an unrated order is rated five stars automatically.
    #[arg(long, default_value_t = 48)]
    auto_rate_hours: u64,
}

struct Shop {
    timer: Timer,
    /// Delay from delivery to the automatic rating.
    auto_rate: Duration,
    clock: Clock,
    /// Auto-ratings not yet known to have fired or been cancelled, by order number.
    auto_ratings: Mutex<HashMap<u32, TimerTask>>,
    ratings: Mutex<Vec<(u32, u8, &'static str)>>,
}

impl Shop {
    fn delivered(self: &Arc<Self>, order: u32) -> Result<(), Error> {
        let shop = self.clone();
        let hours = self.auto_rate.as_secs() / 3600;
        let task = self.timer.schedule(self.auto_rate, move || {
            shop.ratings.lock().unwrap().push((order, 5, "auto"));
            println!(
                "{}  order {order}: no rating in {hours} h, auto-rated 5 stars",
                shop.clock.now()
            );
        })?;
        println!(
            "{}  order {order} delivered: auto-rating scheduled for {}",
            self.clock.now(),
            self.clock.at(task.deadline())
        );
        self.auto_ratings.lock().unwrap().insert(order, task);
        Ok(())
    }

    fn customer_rates(&self, order: u32, stars: u8) {
        let task = self.auto_ratings.lock().unwrap().remove(&order);
        let now = self.clock.now();
        match task {
            Some(task) if task.cancel() => {
                self.ratings
                    .lock()
                    .unwrap()
                    .push((order, stars, "customer"));
                println!(
                    "{now}  order {order}: customer rated {stars} stars, auto-rating cancelled"
                );
            }
            _ => println!("{now}  order {order}: customer rating refused, already auto-rated"),
        }
    }
}

fn main() -> Result<(), Error> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime builds");
    runtime.block_on(simulate(Duration::from_secs(
        args.auto_rate_hours.clamp(1, 24 * 365) * 3600,
    )))
}

async fn simulate(auto_rate: Duration) -> Result<(), Error> {
    // Hours-long delays need no millisecond ticks: a one-second tick is plenty.
    let timer = Timer::builder().tick(Duration::from_secs(1)).build()?;
    let clock = Clock(Instant::now());
    let shop = Arc::new(Shop {
        timer: timer.clone(),
        auto_rate,
        clock,
        auto_ratings: Mutex::default(),
        ratings: Mutex::default(),
    });

    for order in [1001, 1002, 1003] {
        shop.delivered(order)?;
        sleep(10 * MINUTE).await;
    }

    let digest_shop = shop.clone();
    let digest = timer.schedule_at(clock.today_at(20, 0), move || {
        let rated = digest_shop.ratings.lock().unwrap().len();
        let waiting = digest_shop.auto_ratings.lock().unwrap().len();
        println!(
            "{}  digest sent: {rated} rating(s) so far, {waiting} order(s) awaiting one",
            digest_shop.clock.now(),
        );
    })?;
    println!(
        "{}  digest scheduled for {}",
        clock.now(),
        clock.at(digest.deadline())
    );

    sleep(3 * HOUR).await;
    shop.customer_rates(1002, 4);

    // The auto-rating delay passes: the other orders are auto-rated on time.
    sleep(auto_rate).await;
    shop.customer_rates(1001, 3);
    shop.delivered(1004)?;

    let stats = timer.stats();
    println!(
        "{}  scheduled {}, fired {}, cancelled {}, pending {}",
        clock.now(),
        stats.scheduled,
        stats.fired,
        stats.cancelled,
        stats.pending
    );
    // Stopping the shop: unfired auto-ratings come back cancelled, ready to be persisted.
    for task in timer.shutdown() {
        println!(
            "{}  shut down: auto-rating due {} returned, cancelled: {}",
            clock.now(),
            clock.at(task.deadline()),
            task.is_cancelled()
        );
    }
    Ok(())
}
