"""Calibration speed: profile time of llama-3-8b's ops on this CPU at the default grid, fit time,
model load time, and steps per second through FittedCostModel (against the roofline).

    .venv/bin/python benchmarks/bench_profiler.py [--budget-s 300] [--out /tmp/bench-profile]

Results are written down in BENCHMARKS.md ("Calibration speed").
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from profiler import RooflineCostModel, get_device_spec, get_model_spec
from profiler.fit_report import MODEL_FILE, fit_directory
from profiler.fitted import FittedCostModel
from profiler.harness import run_profile


def step_mix(num_steps: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Steps shaped like a loaded Sarathi replica: 8-64 decodes (context 100-2,000) and, in half the
    steps, one 256-token prefill chunk over 0-2,000 cached tokens."""
    rng = np.random.default_rng(seed)
    steps = []
    for _ in range(num_steps):
        decodes = int(rng.integers(8, 65))
        q = np.ones(decodes, dtype=np.int64)
        c = rng.integers(100, 2001, decodes)
        p = np.zeros(decodes, dtype=bool)
        if rng.random() < 0.5:
            q, c, p = np.append(q, 256), np.append(c, rng.integers(0, 2001)), np.append(p, True)
        steps.append((q, c, p))
    return steps


def steps_per_s(cost_model, steps) -> float:
    """Best of three passes over `steps`, in predicted steps per second."""
    best = np.inf
    for _ in range(3):
        start = time.perf_counter()
        for q, c, p in steps:
            cost_model.predict_step_s(q, c, p)
        best = min(best, time.perf_counter() - start)
    return len(steps) / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--budget-s", type=float, default=300.0)
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench-profile-llama-3-8b"))
    args = parser.parse_args()
    model = get_model_spec("llama-3-8b")

    start = time.perf_counter()
    profile = run_profile(model, "cpu", args.budget_s, args.out, log=print)
    print(f"profile: {time.perf_counter() - start:.1f} s wall (timing loop {profile.meta['elapsed_s']:.1f} s); "
          f"{sum(len(t) for t in profile.tables.values())} shapes timed, {len(profile.meta['skipped'])} skipped")
    for name in profile.op_names:
        rows = profile.rows(name)
        print(f"  {name}: {len(rows)} shapes, rounds {rows['rounds'].min()}-{rows['rounds'].max()}, "
              f"largest {rows[profile.catalogue.op(name).key[0]].max()}")

    start = time.perf_counter()
    fitted, errors = fit_directory(args.out)
    print(f"fit (held-out pass + final fit + tables): {time.perf_counter() - start:.1f} s; "
          f"held-out MAPE per op: {errors.set_index('op')['mape_pct'].round(1).to_dict()}")
    start = time.perf_counter()
    fitted = FittedCostModel.load(args.out / MODEL_FILE)
    print(f"load cost_model.joblib ({(args.out / MODEL_FILE).stat().st_size / 1e6:.1f} MB): "
          f"{time.perf_counter() - start:.2f} s")

    steps = step_mix(20_000)
    roofline = RooflineCostModel(model, get_device_spec("h100-sxm"))
    print(f"FittedCostModel: {steps_per_s(fitted, steps):,.0f} steps/s; "
          f"RooflineCostModel: {steps_per_s(roofline, steps):,.0f} steps/s")


if __name__ == "__main__":
    main()
