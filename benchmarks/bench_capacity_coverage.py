"""Do capacity intervals hold? (issue 29, item 2) Each configuration is searched with the default
settings and with fixed trials `--long` times longer; the benchmark reports both, whether the long
run's capacity lies inside the default's 95 % interval, and |default − long| / long.

Configurations: devices × models × SLO sets (2 × 2 × 3 = 12 by default), llama-3.1-8b-class
models on vllm_v1 chunk 2048, lognormal prompts (mean 1024, std 512) and outputs (mean 256, std
128) — issue 29's case is h200 / llama-3.1-8b / the first SLO set. The long search runs one seed
with `search.max_trial_scale: 1` (fixed trials, no lengthening) and `num_requests` × `--long`.

Run (CPU-heavy: about 1 CPU-hour for the full set at --long 16 on a quiet 2-core host):
    python benchmarks/bench_capacity_coverage.py [--long 16] [--only 0,3] [--jobs 1] > coverage.md
"""
from __future__ import annotations

import argparse
import itertools
import math
import sys
import time

from experiments.planning.sweep import run_capacity_sweep

DEVICES = ("h200", "a100-80gb")
MODELS = ("llama-3.1-8b", "qwen3-8b")
SLO_SETS = ({"ttft_p99_s": 2.0, "tpot_p99_s": 0.1},
            {"ttft_p99_s": 0.5, "tpot_p99_s": 0.05},
            {"tbt_p99_s": 0.1, "scheduling_delay_p50_s": 2.0})
DEFAULT_REQUESTS = 2048


def point(device: str, model: str, slo: dict, num_requests: int, seeds: int, max_trial_scale: int) -> dict:
    return {"name": "coverage", "model": model, "device": device,
            "trace": {"kind": "synthetic", "qps": 8, "num_requests": num_requests, "seed": 0,
                      "prompt_tokens": {"dist": "lognormal", "mean": 1024, "std": 512},
                      "output_tokens": {"dist": "lognormal", "mean": 256, "std": 128}},
            "engine": {"scheduler": "vllm_v1", "chunk_size": 2048},
            "slo": slo,
            "search": {"qps": [0.5, 64], "num_requests": num_requests, "seeds": seeds,
                       "max_trial_scale": max_trial_scale}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--long", type=int, default=16, help="long trials = default × this (fixed)")
    parser.add_argument("--only", default="", help="comma-separated configuration numbers (default: all 12)")
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    configs = list(itertools.product(DEVICES, MODELS, SLO_SETS))
    chosen = [int(i) for i in args.only.split(",")] if args.only else list(range(len(configs)))
    print(f"| # | device | model | SLO | default (2 seeds) | 95 % interval | long ({args.long}×, 1 seed) | covered | "
          "|default − long| / long | CPU-s default / long |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    covered = close = counted = 0
    for i in chosen:
        device, model, slo = configs[i]
        cpu = []
        rows = []
        for requests, seeds, scale in ((DEFAULT_REQUESTS, 2, 4), (DEFAULT_REQUESTS * args.long, 1, 1)):
            start = time.process_time()
            table, _, _ = run_capacity_sweep([point(device, model, slo, requests, seeds, scale)], jobs=args.jobs)
            cpu.append(time.process_time() - start)
            rows.append(table.iloc[0])
        default, long = rows
        if "error" in default and isinstance(default.get("error"), str):
            print(f"| {i} | {device} | {model} | {slo} | error: {default['error']} | | | | | |")
            continue
        low, high, value = default["capacity_ci_low"], default["capacity_ci_high"], long["capacity_qps"]
        inside = low <= value <= high if not math.isnan(value) else False
        error = abs(default["capacity_qps"] - value) / value if value > 0 else math.nan
        counted += 1
        covered += inside
        close += error <= 0.05
        print(f"| {i} | {device} | {model} | {', '.join(f'{k} {v:g}' for k, v in slo.items())} | "
              f"{default['capacity_qps']:.3g} | {low:.3g}–{high:.3g} | {value:.3g} | {'yes' if inside else 'no'} | "
              f"{error:.1%} | {cpu[0]:.0f} / {cpu[1]:.0f} |")
        sys.stdout.flush()
    print(f"\nCovered: {covered} of {counted}; within 5 %: {close} of {counted}.")


if __name__ == "__main__":
    main()
