"""Medians and ratios of pg-rounds.sh's runs: reads OUT/{ours,graphile,pgboss}.<round> and
prints one Markdown table, each figure the median over the rounds, with ours over the
better peer (throughput: higher is better; lateness and CPU per job: lower is better).

    python3 bench/peers/pg-medians.py /tmp/pg-rounds
"""
import glob
import re
import statistics
import sys

out = sys.argv[1]
RUNNERS = [("ours", "wheel-jobs"), ("graphile", "graphile-worker"), ("pgboss", "pg-boss")]
# (row name, line prefix, what to take from the line, higher is better)
ROWS = [
    ("single schedules, 64 in flight (jobs/s)", "single schedules", r"([\d.]+) jobs/s", True),
    ("bulk schedules, 10,000 per call (jobs/s)", "bulk schedules", r"([\d.]+) jobs/s", True),
    ("deliveries + acks, 50 handlers (jobs/s)", "deliveries + acks", r"([\d.]+) jobs/s", True),
    ("lateness of N over 10 s, p50 (ms)", "lateness, N ", r"p50 ([\d.]+) ms", False),
    ("lateness of N over 10 s, p99 (ms)", "lateness, N ", r"p99 ([\d.]+) ms", False),
    ("lateness of N over 10 s, max (ms)", "lateness, N ", r"max ([\d.]+) ms", False),
    ("sparse, 1,000 over 10 s, p50 (ms)", "lateness, 1000 ", r"p50 ([\d.]+) ms", False),
    ("sparse, 1,000 over 10 s, p99 (ms)", "lateness, 1000 ", r"p99 ([\d.]+) ms", False),
    ("sparse, 1,000 over 10 s, max (ms)", "lateness, 1000 ", r"max ([\d.]+) ms", False),
]
CPU = r"database CPU ([\d.]+) ms per job"


def figures(path):
    text = open(path).read()
    n = re.search(r"N = (\d+)", text).group(1)
    lines = text.splitlines()
    got = {}
    for name, prefix, pattern, _ in ROWS:
        prefix = prefix.replace("N ", n + " ")
        line = next((l for l in lines if l.startswith(prefix)), None)
        if line is None:
            continue
        m = re.search(pattern, line)
        if m:
            got[name] = float(m.group(1))
        c = re.search(CPU, line)
        if c:
            phase = re.sub(r", (p50|p99|max)$", "", name.split(" (")[0])
            got[phase + ": database CPU (ms per job)"] = float(c.group(1))
    for line in lines:
        if line.startswith("transactions of 64 in flight"):
            kind = "and its schedule_in" if "schedule_in" in line else "alone"
            got[f"transactions, an order row {kind} (/s)"] = float(re.search(r"([\d.]+)/s", line).group(1))
            c = re.search(CPU, line)
            if c:
                got[f"transactions, an order row {kind}: database CPU (ms per job)"] = float(c.group(1))
    return got


runs = {}
for key, _ in RUNNERS:
    runs[key] = [figures(p) for p in sorted(glob.glob(f"{out}/{key}.*"))]

names = []
for key, _ in RUNNERS:
    for run in runs[key]:
        for name in run:
            if name not in names:
                names.append(name)

print(f"| phase (median of {len(runs['ours'])} rounds) | " + " | ".join(n for _, n in RUNNERS) + " | ours / better peer |")
print("|---|" + "---:|" * (len(RUNNERS) + 1))
for name in names:
    medians = {}
    for key, _ in RUNNERS:
        values = [run[name] for run in runs[key] if name in run]
        if values:
            medians[key] = statistics.median(values)
    higher = next((h for row, _, _, h in ROWS if row == name), "/s)" in name)
    peers = [medians[k] for k in ("graphile", "pgboss") if k in medians]
    ratio = ""
    if "ours" in medians and peers:
        better = max(peers) if higher else min(peers)
        if higher:
            ratio = f"{medians['ours'] / better:.2f}x"
        elif medians["ours"] > 0 and medians["ours"] <= better:
            ratio = f"{better / medians['ours']:.1f}x lower"
        elif better > 0:
            ratio = f"{medians['ours'] / better:.1f}x higher"
    cells = [f"{medians[k]:,.3f}" if k in medians and medians[k] < 10 else (f"{medians[k]:,.0f}" if k in medians else "") for k, _ in RUNNERS]
    print(f"| {name} | " + " | ".join(cells) + f" | {ratio} |")
