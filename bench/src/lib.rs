//! Measurement harnesses for wheel-timer and wheel-jobs: the binaries in `src/bin/`, each
//! listed with the command that runs it in `bench/README.md`. The library holds what more
//! than one of them reads.

#![forbid(unsafe_code)]

pub mod cpu;
