#!/bin/sh
# Runs the loom models (src/loom_tests/, see docs/ARCHITECTURE.md).
#
#   bin/loom.sh                        # every model, LOOM_MAX_PREEMPTIONS=3
#   bin/loom.sh sleep::drop_vs_fire    # one model (any libtest filter under loom_tests::)
#   bin/loom.sh driver_gone            # the driver dropped by a runtime's shutdown vs a registration
#   LOOM_MAX_PREEMPTIONS=4 bin/loom.sh shards
#
# Builds with `--cfg wheel_loom` (a crate-specific cfg: tokio is built as usual) in its own
# target dir, target/loom, so the normal build is not invalidated. The models run under
# LOOM_TIME_BUDGET seconds (default 300; the build is not counted); exceeding it fails.
set -eu

cd "$(dirname "$0")/.."

filter="loom_tests::${1:-}"
export RUSTFLAGS="--cfg wheel_loom -C debug-assertions"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/loom}"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
budget="${LOOM_TIME_BUDGET:-300}"

cargo test --release --lib --no-run
start=$(date +%s)
timeout "$budget" cargo test --release --lib "$filter" -- --nocapture || {
    status=$?
    if [ "$status" -eq 124 ]; then
        echo "loom: models exceeded the ${budget}s budget" >&2
    fi
    exit "$status"
}
echo "loom: models passed in $(($(date +%s) - start))s (LOOM_MAX_PREEMPTIONS=$LOOM_MAX_PREEMPTIONS)" >&2
