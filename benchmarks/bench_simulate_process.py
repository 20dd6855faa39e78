"""CPU seconds and peak RSS of whole `sarathi-sim simulate` processes, A/B interleaved (issue 34).

Run from the repo root:
    .venv/bin/python benchmarks/bench_simulate_process.py --requests 50000 --rounds 2 \
        --tree A=/path/to/old/checkout --tree B=.

Each round runs, for every point of `benchmarks/issue34_simulate.yaml` (0: vllm_v1 with prefix
caching, 1: sarathi; llama-3-8b on h100-sxm, azure-conv at 12 QPS, chunk 512, every default
output on) and every tree in turn, `python -m experiments.cli.main simulate CONFIG --point K
--set trace.num_requests=N --out DIR` under `/usr/bin/time -v` with that tree's code
(PYTHONPATH, the config of this checkout for both), and prints CPU-s (user + sys: on a shared
machine wall time says more about the neighbours than the code) and `Maximum resident set
size`. Trees alternate within a round, so a slower stretch of the host hits both. With
`--compare`, each point's requests.parquet, steps.parquet and points.csv are compared byte for
byte between the first tree and the others (the records must not change).
"""
from __future__ import annotations

import argparse
import filecmp
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

CONFIG = Path(__file__).resolve().parent / "issue34_simulate.yaml"
RECORDS = ("requests.parquet", "steps.parquet", "points.csv")


def run_once(tree: Path, point: int, requests: int, out: Path) -> tuple[float, float]:
    """(CPU-s user + sys, peak RSS in MB) of one `simulate` process run with `tree`'s code."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    command = ["/usr/bin/time", "-v", sys.executable, "-m", "experiments.cli.main", "simulate", str(CONFIG),
               "--point", str(point), "--set", f"trace.num_requests={requests}", "--out", str(out)]
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{tree}: simulate failed:\n{done.stderr[-3000:]}")
    fields = dict(re.findall(r"^\s*([^:\n]+):\s*(\S+)\s*$", done.stderr, re.M))
    cpu_s = float(fields["User time (seconds)"]) + float(fields["System time (seconds)"])
    return cpu_s, int(fields["Maximum resident set size (kbytes)"]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--points", default="0,1", help="points of the config (0 vllm_v1, 1 sarathi)")
    parser.add_argument("--tree", action="append", required=True, help="NAME=PATH of a checkout (repeatable)")
    parser.add_argument("--compare", action="store_true", help="compare the records of the trees byte for byte")
    args = parser.parse_args()
    trees = dict(t.split("=", 1) for t in args.tree)
    points = [int(p) for p in args.points.split(",")]
    scratch = Path(tempfile.mkdtemp(prefix="bench-simulate-"))
    print(f"{'round':>5} {'point':>5} {'tree':>6} {'CPU-s':>8} {'RSS MB':>8}")
    for r in range(args.rounds):
        for point in points:
            for name, path in trees.items():
                cpu_s, rss_mb = run_once(Path(path).resolve(), point, args.requests, scratch / f"{name}-{point}")
                print(f"{r:>5} {point:>5} {name:>6} {cpu_s:>8.2f} {rss_mb:>8.0f}", flush=True)
    if args.compare:
        first, *others = trees
        for point in points:
            for name in others:
                for record in RECORDS:
                    same = filecmp.cmp(scratch / f"{first}-{point}" / record, scratch / f"{name}-{point}" / record,
                                       shallow=False)
                    print(f"point {point} {record}: {first} and {name} {'identical' if same else 'DIFFER'}")


if __name__ == "__main__":
    main()
