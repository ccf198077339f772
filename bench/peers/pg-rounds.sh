#!/bin/sh
# The PostgreSQL benchmark side by side: wheel-jobs (`jobs --postgres`), graphile-worker and
# pg-boss on the same server, alternated (ours, graphile-worker, pg-boss, ours, …) for
# ROUNDS rounds, each run's output kept in OUT; then the medians and ratios
# (pg-medians.py). Run from the repository root after building the harness
# (`cargo build --release -p wheel-bench --bin jobs`) and `npm ci` in both peers' dirs:
#
#   sh bench/peers/pg-rounds.sh postgres://postgres@127.0.0.1:5432/postgres 20000 3 /tmp/pg-rounds
set -eu
url=$1
n=${2:-20000}
rounds=${3:-3}
out=${4:-/tmp/pg-rounds}
jobs=${CARGO_TARGET_DIR:-target}/release/jobs
mkdir -p "$out"
root=$(pwd)
for r in $(seq 1 "$rounds"); do
    echo "round $r: load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/load"
    "$jobs" --postgres "$url" --n "$n" >"$out/ours.$r" 2>&1
    (cd "$root/bench/peers/graphile-worker" && node bench.mjs "$url" "$n") >"$out/graphile.$r" 2>&1
    (cd "$root/bench/peers/pg-boss" && node bench.mjs "$url" "$n") >"$out/pgboss.$r" 2>&1
done
echo "after: load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/load"
python3 "$root/bench/peers/pg-medians.py" "$out"
