"""Simulator speed: simulated requests per CPU-second for one point, and the quickstart's wall time.

Run from the repo root (results go in BENCHMARKS.md with this command):
    .venv/bin/python benchmarks/bench_simulator.py
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from experiments.config import SweepConfig, describe_point, load_config
from experiments.point import run_point

QUICKSTART = Path(__file__).resolve().parents[1] / "experiments" / "configs" / "quickstart.yaml"


def one_point_rate(label: str = "sarathi chunk=512", repeats: int = 3) -> None:
    _, points = load_config(QUICKSTART)
    config = next(SweepConfig.model_validate(p) for p in points
                  if describe_point(SweepConfig.model_validate(p)) == label)
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        row = run_point(config).row
        best = min(best, time.process_time() - start)
    print(f"one point ({label}, {row['num_requests']} requests, {row['num_steps']} steps): "
          f"{best:.2f} CPU-s best of {repeats} -> {row['num_requests'] / best:,.0f} simulated requests/CPU-s, "
          f"{row['num_steps'] / best:,.0f} steps/CPU-s")


def quickstart_wall() -> None:
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "experiments.cli.main", "sweep", str(QUICKSTART), "--out", out],
                       check=True, capture_output=True)
        print(f"whole quickstart sweep (5 points, CLI incl. start-up and report): "
              f"{time.perf_counter() - start:.1f} s wall")


if __name__ == "__main__":
    one_point_rate()
    quickstart_wall()
