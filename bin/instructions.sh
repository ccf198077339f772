#!/bin/sh
# Instructions (and, with --cache, simulated cache misses) per operation of one case of
# benches/instructions.rs, under callgrind: the count at 2N operations minus the count at N,
# divided by N, so the setup (runtime, timer, 100k connections) cancels out. Exact and
# repeatable on a loaded machine, where times are not.
#
#   bin/instructions.sh sleep/timer task            # instructions per create + poll + drop
#   bin/instructions.sh touch/keyed thread --cache  # plus D1 / LL misses per touch
#   N=200000 bin/instructions.sh queue/wheel thread
#   BREAKDOWN=1 bin/instructions.sh sleep/timer thread  # per op by source file and by function
#
# Builds the bench profile (optimised, with debug info for the per-function attribution) in
# CARGO_TARGET_DIR (default target/). Needs valgrind.
set -eu

cd "$(dirname "$0")/.."

case_="${1:?usage: bin/instructions.sh CASE thread|task [--cache]}"
place="${2:-thread}"
cache="${3:-}"
n="${N:-100000}"

exe=$(cargo bench --bench instructions --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
[ -x "$exe" ] || { echo "instructions: build failed (cargo bench --bench instructions --no-run)" >&2; exit 1; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

sim=""
events="Ir"
if [ "$cache" = "--cache" ]; then
    sim="--cache-sim=yes"
    events="Ir,D1mr,D1mw,DLmr,DLmw"
fi

run() {
    valgrind --tool=callgrind $sim --callgrind-out-file="$out/$1.out" \
        "$exe" "$case_" "$place" "$1" >/dev/null 2>"$out/$1.log"
}
run "$n"
run "$((2 * n))"

# Event totals of a callgrind output file, in the order of $events.
totals() {
    callgrind_annotate --show="$events" --show-percs=no --auto=no --threshold=100 "$out/$1.out" 2>/dev/null |
        sed -n 's/ *PROGRAM TOTALS//p' | tr -d ',' | tr -s ' ' '\n' | sed '/^$/d'
}
totals "$n" >"$out/a"
totals "$((2 * n))" >"$out/b"
echo "$case_ ($place), per operation (callgrind, 2N - N with N = $n):"
echo "$events" | tr ',' '\n' >"$out/names"
paste "$out/names" "$out/a" "$out/b" |
    awk -v n="$n" '{ printf "  %-5s %10.1f\n", $1, ($3 - $2) / n }'

if [ "${BREAKDOWN:-}" = 1 ]; then
    # Instructions per operation by source file (inlined code counts in the file it was
    # written in) and by function symbol (inlined code counts in the function it was
    # inlined into), self cost, from the 2N - N difference.
    for f in "$n" "$((2 * n))"; do
        callgrind_annotate --show=Ir --show-percs=no --auto=no --threshold=100 "$out/$f.out" \
            >"$out/$f.txt" 2>/dev/null
    done
    python3 - "$out/$n.txt" "$out/$((2 * n)).txt" "$n" <<'PY'
import re, sys
from collections import Counter
line = re.compile(r"^\s*([0-9][0-9,]*)\s+(.*?):(.*?)(?: \[.*\])?$")
def parse(path):
    files, funcs = Counter(), Counter()
    for l in open(path):
        m = line.match(l.rstrip("\n"))
        if m and "PROGRAM TOTALS" not in l:
            c = int(m.group(1).replace(",", ""))
            f = re.sub(r"^.*/(src|library|registry/src/[^/]*)/", "", m.group(2))
            files[f] += c
            funcs[m.group(3)] += c
    return files, funcs
(fa, ga), (fb, gb), n = parse(sys.argv[1]), parse(sys.argv[2]), int(sys.argv[3])
for title, a, b in (("by source file", fa, fb), ("by function", ga, gb)):
    print(f"  {title} (self):")
    rows = sorted(((b[k] - a[k]) / n, k) for k in b)
    for d, k in reversed(rows):
        if d >= 0.5:
            print(f"  {d:8.1f}  {k[:110]}")
PY
fi
