//! The behavioural suite on Redis (feature `redis`), each test on a `redis-server` of its own.

run_behaviour_suite!(crate::support::redis());
