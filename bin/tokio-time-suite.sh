#!/usr/bin/env bash
# Runs tokio's own time tests against the wheel: tokio's `tests/time_sleep.rs`,
# `time_timeout.rs`, `time_interval.rs` and `time_pause.rs`, from the tokio version in
# Cargo.lock, with their `tokio::time` paths pointed at `wheel_timer::time`.
#
#   bin/tokio-time-suite.sh               # 10 whole-file runs of time_sleep, 3 of the others
#   RUNS=100 OTHER_RUNS=10 bin/tokio-time-suite.sh
#   TOKIO_SUITE_DIR=/some/dir bin/tokio-time-suite.sh
#
# tokio's tests are tokio's, so none is kept in this repository: the files are copied from
# the tokio source cargo unpacked into its registry (`cargo fetch`), into a scratch crate
# outside the repository (`$TOKIO_SUITE_DIR`, by default under `${TMPDIR:-/tmp}`), whose
# target dir is kept between runs so tokio is built once. There is one per checkout: cargo
# would take a build of wheel-timer from one checkout's path for another's. Only paths are
# rewritten: every `tokio::time` becomes `tokio_time_suite::time`, the scratch crate's
# module holding `wheel_timer::time`'s items plus tokio's clock controls (`pause`,
# `advance`, `resume`: the clock the wheel reads). Test bodies are not touched and no test
# is skipped. After a first run (which fetches the scratch crate's own dev-dependencies:
# tokio-test, futures, rand), reruns need no network.
#
# Each test binary runs whole (all its tests in one process, as `cargo test` runs them)
# several times, each run under a `timeout` of $RUN_TIMEOUT seconds (default 60). Prints
# passed/failed/hung per file; exits non-zero on any failure, hang or ignored test.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
runs="${RUNS:-10}"
other_runs="${OTHER_RUNS:-3}"
run_timeout="${RUN_TIMEOUT:-60}"
files=(time_sleep time_timeout time_interval time_pause)
tag="$(printf '%s' "$repo" | cksum | cut -d' ' -f1)"
dir="${TOKIO_SUITE_DIR:-${TMPDIR:-/tmp}/wheel-timer-tokio-suite-$tag}"
case "$dir/" in
"$repo"/*)
    echo "tokio-time-suite: $dir is inside the repository; pick a TOKIO_SUITE_DIR outside it" >&2
    exit 2
    ;;
esac

cd "$repo"
cargo fetch --locked
version="$(awk '/^name = "tokio"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)"
if [ -z "$version" ]; then
    echo "tokio-time-suite: no tokio in Cargo.lock" >&2
    exit 2
fi
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
src=""
for candidate in "$cargo_home"/registry/src/*/tokio-"$version"; do
    if [ -d "$candidate/tests" ]; then src="$candidate"; fi
done
if [ -z "$src" ]; then
    echo "tokio-time-suite: tokio $version's source is not in $cargo_home/registry/src" >&2
    exit 2
fi

# tokio's dev-dependency on `name`, as its Cargo.toml states it (the version requirement).
dev_dep() {
    awk -v name="$1" '
        $0 ~ "^\\[(.*\\.)?dev-dependencies\\." name "\\]$" { found = 1; next }
        found && /^version = / { gsub(/version = |"/, ""); print; exit }
        /^\[/ { found = 0 }
    ' "$src/Cargo.toml"
}

# Writes stdin to `$1` unless it already holds exactly that: an unchanged file keeps its
# mtime, so a rerun rebuilds nothing.
put() {
    cat >"$1.new"
    if cmp -s "$1.new" "$1"; then rm "$1.new"; else mv "$1.new" "$1"; fi
}

mkdir -p "$dir/src" "$dir/tests"
put "$dir/Cargo.toml" <<EOF
# Made by bin/tokio-time-suite.sh of $repo: tokio $version's time tests on the wheel.
[package]
name = "tokio-time-suite"
version = "0.0.0"
edition = "2021"
publish = false

[workspace]

[features]
# tokio's test files are gated on tokio's own feature names.
default = ["full"]
full = []

[dependencies]
wheel-timer = { path = "$repo" }
tokio = { version = "=$version", features = ["full", "test-util"] }

[dev-dependencies]
tokio-test = "$(dev_dep tokio-test)"
futures = { version = "$(dev_dep futures)", features = ["async-await"] }
rand = "$(dev_dep rand)"

[lints.rust]
# tokio's files name cfgs of tokio's build (tokio_unstable, its feature set).
unexpected_cfgs = "allow"
EOF
put "$dir/src/lib.rs" <<'EOF'
//! The `time` that tokio's test files are pointed at: the wheel's drop-ins, plus tokio's
//! clock controls, which drive the clock the wheel reads.
pub mod time {
    pub use tokio::time::{advance, pause, resume};
    pub use wheel_timer::time::*;
}
EOF
# The repository's lock, so that tokio and every shared crate are the versions it tests
# with; cargo adds the suite's own dev-dependencies to it. Seeded again only when the
# repository's lock changed, so a rerun resolves nothing (and needs no network).
if ! cmp -s Cargo.lock "$dir/Cargo.lock.repo"; then
    cp Cargo.lock "$dir/Cargo.lock"
    cp Cargo.lock "$dir/Cargo.lock.repo"
fi
if [ -d "$src/tests/support" ]; then
    mkdir -p "$dir/tests/support"
    for helper in "$src"/tests/support/*.rs; do
        put "$dir/tests/support/$(basename "$helper")" <"$helper"
    done
fi
for file in "${files[@]}"; do
    sed 's/\btokio::time\b/tokio_time_suite::time/g' "$src/tests/$file.rs" | put "$dir/tests/$file.rs"
done

cd "$dir"
export CARGO_TARGET_DIR="$dir/target"
cargo fetch
if ! grep -q "^version = \"$version\"$" <(awk '/^name = "tokio"$/ { getline; print }' Cargo.lock); then
    echo "tokio-time-suite: the scratch crate resolved another tokio than $version" >&2
    exit 2
fi
build_log="$dir/build.log"
if ! cargo test --offline --release --no-run >"$build_log" 2>&1; then
    cat "$build_log" >&2
    exit 1
fi

status=0
echo "tokio $version's time tests against wheel_timer::time (each run: one whole file, ${run_timeout} s limit)"
for file in "${files[@]}"; do
    bin="$(sed -n "s|.*Executable tests/$file.rs (\(.*\))|\1|p" "$build_log" | tail -n 1)"
    if [ -z "$bin" ]; then
        echo "tokio-time-suite: no test binary for $file in $build_log" >&2
        exit 1
    fi
    # Every test runs: a test marked `#[ignore]` on this platform is reported and fails.
    tests="$("$bin" --list 2>/dev/null | grep -c ': test$' || true)"
    ignored="$("$bin" --list --ignored 2>/dev/null | grep -c ': test$' || true)"
    if [ "$ignored" != 0 ]; then
        echo "  $file: $ignored of its $tests tests are ignored on this platform" >&2
        status=1
    fi
    n=$other_runs
    if [ "$file" = time_sleep ]; then n=$runs; fi
    passed=0 failed=0 hung=0
    for i in $(seq 1 "$n"); do
        log="$dir/$file.run$i.log"
        rc=0
        timeout --kill-after=5 "$run_timeout" "$bin" >"$log" 2>&1 || rc=$?
        case $rc in
        0) passed=$((passed + 1)); rm -f "$log" ;;
        124 | 137) hung=$((hung + 1)); echo "  $file run $i: hung (no end within ${run_timeout} s); log: $log" ;;
        *) failed=$((failed + 1)); echo "  $file run $i: failed (exit $rc); log: $log" ;;
        esac
    done
    printf '%-14s %3d tests, %3d whole-file runs: %3d passed, %3d failed, %3d hung\n' \
        "$file" "$tests" "$n" "$passed" "$failed" "$hung"
    if [ $((failed + hung)) -gt 0 ]; then status=1; fi
done
exit $status
