"""Do capacity intervals hold? (issue 29, item 2) Each configuration is searched with the default
settings (`search:` defaults: 3 seeds, 2,048 requests a trial lengthened up to 4×) and judged
against fixed trials `--long` times longer (16×: 32,768 requests); the benchmark reports whether
the long-run capacity lies inside the default's 95 % interval and whether |default − long| ≤ 5 %
of the long-run value.

Configurations: devices × models × SLO sets (2 × 2 × 3 = 12), llama-3.1-8b-class models on
vllm_v1 chunk 2048, lognormal prompts (mean 1024, std 512) and outputs (mean 256, std 128) —
issue 29's case is h200 / llama-3.1-8b / the first SLO set.

The long run is not a second bisection. Both targets are yes/no questions about where the long-run
capacity L lies, and under the monotonicity every bisection assumes (a load passes, so every lower
load passes) each is settled by long trials at its ends: L is within 5 % of the default's D iff
the long trial passes at D / 1.05 and fails at D / 0.95 (|D − L| ≤ 0.05 L ⇔ D / 1.05 ≤ L ≤
D / 0.95); L is inside the interval [lo, hi] iff it passes at lo and fails above hi (a pass at hi
is L ≥ hi). A trial implied by one already run is not run (a pass at q implies every load below q
passes). That is two to four 32,768-request trials a configuration instead of a bisection's 8-10,
and the answers are the same as a bisection's to within its 2.5 % precision. The long trials run
the trace and engine seeds + `LONG_SEED` (a sample independent of the default's seeds 0-2) and pass
when their trimmed window meets every SLO (the issue's yardstick: plain long trials); the
steady-state rule's verdict on the same trial (`steady_state.check_window`) is reported beside it.

Run (about 2.5 CPU-min a configuration on a quiet 2-core host; pieces with --only):
    python benchmarks/bench_capacity_coverage.py [--long 16] [--only 0,3] [--seeds 3] > coverage.md
"""
from __future__ import annotations

import argparse
import itertools
import math
import sys
import time

from experiments.config import SweepConfig
from experiments.planning.search import search_slo, trial_config
from experiments.planning.steady_state import at_cap, check_window, drift_floor_s, judge
from experiments.planning.sweep import run_capacity_sweep
from experiments.point import run_point

DEVICES = ("h200", "a100-80gb")
MODELS = ("llama-3.1-8b", "qwen3-8b")
SLO_SETS = ({"ttft_p99_s": 2.0, "tpot_p99_s": 0.1},
            {"ttft_p99_s": 0.5, "tpot_p99_s": 0.05},
            {"tbt_p99_s": 0.1, "scheduling_delay_p50_s": 2.0})
DEFAULT_REQUESTS = 2048
LONG_SEED = 100  # repetition 100: trace and engine seeds 100, not one of the default's


def point(device: str, model: str, slo: dict, seeds: int) -> dict:
    return {"name": "coverage", "model": model, "device": device,
            "trace": {"kind": "synthetic", "qps": 8, "num_requests": DEFAULT_REQUESTS, "seed": 0,
                      "prompt_tokens": {"dist": "lognormal", "mean": 1024, "std": 512},
                      "output_tokens": {"dist": "lognormal", "mean": 256, "std": 128}},
            "engine": {"scheduler": "vllm_v1", "chunk_size": 2048},
            "slo": slo,
            "search": {"qps": [0.5, 64], "num_requests": DEFAULT_REQUESTS, "seeds": seeds}}


class LongTrials:
    """Fixed long trials of one point, memoised with monotone inference (`passes`)."""

    def __init__(self, config: SweepConfig, num_requests: int):
        self.config, self.num_requests = config, num_requests
        self.passed: list[float] = []
        self.failed: list[float] = []
        self.log: list[str] = []
        self.cpu_s = 0.0

    def passes(self, qps: float) -> bool:
        if qps <= 0 or any(qps <= q for q in self.passed):
            return True
        if any(qps >= q for q in self.failed):
            return False
        start = time.process_time()
        result = run_point(trial_config(self.config, qps, LONG_SEED, self.num_requests), 0,
                           trim_fraction=self.config.search.trim_fraction)
        self.cpu_s += time.process_time() - start
        slo_met = bool(result.row["slo_met"])
        check = check_window(result.requests, self.config.search.trim_fraction,
                             drift_floor_s(search_slo(self.config)))
        rule = judge(slo_met, check)
        rule = at_cap(check) if rule.value == "undecided" else rule
        (self.passed if slo_met else self.failed).append(qps)
        self.log.append(f"{qps:.3g} {'pass' if slo_met else 'fail'} (rule: {rule.value})")
        return slo_met

    def bracket(self) -> str:
        low = max(self.passed, default=0.0)
        high = min(self.failed, default=math.inf)
        return f"[{low:.3g}, {high:.3g})"


def interval(capacities: list[float]) -> tuple[float, float, float]:
    from experiments.planning.capacity import confidence_interval

    return confidence_interval([0.0 if math.isnan(c) else c for c in capacities])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--long", type=int, default=16, help="long trials = default × this (fixed)")
    parser.add_argument("--only", default="", help="comma-separated configuration numbers (default: all 12)")
    parser.add_argument("--seeds", type=int, default=3, help="the default search's seeds (search.seeds default 3)")
    args = parser.parse_args()
    configs = list(itertools.product(DEVICES, MODELS, SLO_SETS))
    chosen = [int(i) for i in args.only.split(",")] if args.only else list(range(len(configs)))
    print(f"| # | device | model | SLO | default ({args.seeds} seeds) | by seed | 95 % interval | "
          f"2-seed interval | long trials ({args.long}×, QPS verdict) | long capacity in | within 5 % | covered | "
          "covered (2 seeds) | CPU-s default / long |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for i in chosen:
        device, model, slo = configs[i]
        raw = point(device, model, slo, args.seeds)
        start = time.process_time()
        table, trials, _ = run_capacity_sweep([raw], jobs=1)
        default_cpu = time.process_time() - start
        row = table.iloc[0]
        slo_text = ", ".join(f"{k} {v:g}" for k, v in slo.items())
        if isinstance(row.get("error"), str):
            print(f"| {i} | {device} | {model} | {slo_text} | error: {row['error']} |" + " |" * 9)
            continue
        passed = trials[trials["passed"].astype(bool)].groupby("seed")["trial_qps"].max()
        by_seed = [float(passed.get(seed, math.nan)) for seed in range(args.seeds)]  # each seed's capacity
        d, low, high = row["capacity_qps"], row["capacity_ci_low"], row["capacity_ci_high"]
        _, low2, high2 = interval(by_seed[:2])
        long = LongTrials(SweepConfig.model_validate(raw), DEFAULT_REQUESTS * args.long)
        within = long.passes(d / 1.05) and not long.passes(d / 0.95)
        covered = long.passes(low) and not long.passes(high)
        covered2 = long.passes(low2) and not long.passes(high2)
        print(f"| {i} | {device} | {model} | {slo_text} | {d:.4g} | {row['capacity_by_seed']} | {low:.4g}–{high:.4g} | "
              f"{low2:.4g}–{high2:.4g} | {'; '.join(long.log)} | {long.bracket()} | {'yes' if within else 'no'} | "
              f"{'yes' if covered else 'no'} | {'yes' if covered2 else 'no'} | {default_cpu:.0f} / {long.cpu_s:.0f} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
