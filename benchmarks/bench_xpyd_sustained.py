"""Is search-xpyd's colocated answer sustained? (issue 29, item 5's target: the colocated 4× TP1
answer within 10 % of a long run's sustained throughput.)

The issue's case: `search-xpyd benchmarks/xpyd_llama3_8b.yaml --gpus 4 --tp 1,2 --seeds 1` with
`search.num_requests: 1024` rated colocated 4× TP1 at 81.5 req/s, where a sweep of 8,192 requests
at that rate met the goodput SLOs for 0.6 % of requests and sustained 47.6 req/s. Here the same
layout is searched as search-xpyd searches it (`disaggregation.layout_capacity`, seed 0, the
config's search keys, 1,024 requests per instance) giving Q, then judged on long fixed trials of
`--long` × 1,024 requests per instance (default 8: 32,768 requests, 8,192 per replica) by the
search's own criterion, ≥ 90 % of the trimmed window's requests meeting TTFT ≤ 0.3 s and TPOT ≤
0.03 s. As in bench_capacity_coverage.py the long run is not a second bisection: the long-run
capacity L is within 10 % of Q (|Q − L| ≤ 0.1 L ⇔ Q / 1.1 ≤ L ≤ Q / 0.9) iff the long trial meets
the SLOs at Q / 1.1 and misses them at Q / 0.9 (monotone pass/fail, as bisection assumes). Each
long trial's sustained throughput (completions inside the window / its length) is printed, and
the long trial at Q itself, the issue's yardstick (a sweep of the layout at the answer).

Run: python benchmarks/bench_xpyd_sustained.py [--long 8] [--seed-offset 100]
"""
from __future__ import annotations

import argparse
import time

from experiments.config import SweepConfig, load_config
from experiments.planning.disaggregation import DEFAULT_ATTAINMENT, layout_capacity, layouts, slo_attainment
from experiments.planning.repetitions import trial_point
from experiments.planning.steady_state import check_window, drift_floor_s
from experiments.point import run_point

CONFIG = "benchmarks/xpyd_llama3_8b.yaml"
REQUESTS_PER_INSTANCE = 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--long", type=int, default=8, help="long trials = this × 1,024 requests per instance")
    parser.add_argument("--seed-offset", type=int, default=100, help="the long trials' seeds (trace and engine + this)")
    args = parser.parse_args()
    _, points = load_config(CONFIG, [f"search.num_requests={REQUESTS_PER_INSTANCE}"])
    base = SweepConfig.model_validate(points[0])
    layout = next(x for x in layouts(base, 4, (1, 2)) if x.label == "colocated 4x TP1")
    s = base.search
    start = time.process_time()
    result = layout_capacity(layout, base.goodput, DEFAULT_ATTAINMENT, qps=tuple(s.qps), num_requests=s.num_requests,
                             precision=s.precision, trim_fraction=s.trim_fraction, max_trials=s.max_trials,
                             max_qps=s.qps[1], max_trial_scale=s.max_trial_scale)
    search_cpu = time.process_time() - start
    q = result.capacity_qps
    print(f"search (as search-xpyd --seeds 1): colocated 4x TP1 {q:.4g} req/s; {len(result.trials)} trials; "
          f"at cap: {getattr(result, 'at_cap', 'not recorded')}; {search_cpu:.0f} CPU-s")
    size = args.long * REQUESTS_PER_INSTANCE * 4
    meets = {}
    for rate in (q / 1.1, q, q / 0.9):
        start = time.process_time()
        run = run_point(trial_point(layout.point, args.seed_offset, rate, size), 0, trim_fraction=s.trim_fraction)
        met = slo_attainment(run.requests, base.goodput, s.trim_fraction)
        check = check_window(run.requests, s.trim_fraction, drift_floor_s(base.goodput))
        sustained = check.completions / check.window_s
        meets[rate] = met >= DEFAULT_ATTAINMENT
        print(f"long trial ({size:,} requests) at {rate:.4g} req/s: attainment {met:.1%} "
              f"({'meets' if met >= DEFAULT_ATTAINMENT else 'misses'} 90 %), sustained {sustained:.4g} req/s "
              f"({sustained / q - 1:+.1%} of the search's answer), {check.why_not_steady() or 'steady'}; "
              f"{time.process_time() - start:.0f} CPU-s")
    within = meets[q / 1.1] and not meets[q / 0.9]
    print(f"long-run capacity within 10 % of the search's answer: {'yes' if within else 'no'}")


if __name__ == "__main__":
    main()
