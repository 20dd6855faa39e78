"""Cost of staged and pooled workloads against an equivalent single-rate trace (issue 31 target:
<= 1.1x): the same number of requests and the same lengths, simulated on llama-3-8b / h100-sxm,
vllm_v1 chunk 512, roofline; CPU seconds of building the requests and of the simulation.

Run from the repo root (results in BENCHMARKS.md with this command):
    .venv/bin/python benchmarks/bench_staged.py [REPEATS]

Workloads (two stages, 8 req/s for 300 s then 20 req/s for 300 s: 8,400 requests):
- single rate (mean): the 8,400 requests at one constant rate, 14 req/s (the stages' mean),
  lengths drawn per request (prompt 512..2048, output 64..256 uniform); its batches differ from
  the stages' (20 req/s fills larger ones), so it is not the same work;
- two single-rate runs: 8 req/s for 300 s, then 20 req/s for 300 s, simulated apart, CPU summed:
  the stages' work without the staged profile (the equivalent for the 1.1x target);
- staged: the two constant stages, the same lengths (same seed, drawn after the arrivals);
- single + shared prefix, prefix caching on: the single-rate requests with a 1,024-token shared
  system prompt, one of 8 (traces.shared_prefix);
- single rate + pool, prefix caching on: the single-rate arrivals over a pool of 8 groups x 64
  prompts (1,024 system + 512..2048 question tokens, output 64..256), cycled;
- two single-rate runs + pool: the two rates apart over the same pool (each from a cold cache);
- staged + pool, prefix caching on: the stages over the same pool.
Each is simulated REPEATS times (default 5), interleaved; the least and the median CPU time are reported
(the machine is shared: the least is the cost, the median shows the noise).
"""
from __future__ import annotations

import statistics
import sys
import time

from experiments.config import SweepConfig
from experiments.deployment import build_outcome_fn, build_pricer, build_scheduler_config, build_schedulers
from experiments.point import build_cost_model
from simulator.simulate import simulate
from traces.arrivals import constant_arrivals
from traces.generators import pooled_trace, staged_trace, synthetic_trace
from traces.prompt_pool import PromptPool
from traces.shared_prefix import with_shared_prefixes
from traces.stages import LoadStage

STAGES = [LoadStage(8, 300), LoadStage(20, 300)]
NUM = 8 * 300 + 20 * 300
PROMPT, OUTPUT = (512, 2048), (64, 256)


def workloads():
    """(name, builders, prefix caching) of the workloads; a workload of several builders is
    simulated as separate runs whose CPU times add up."""
    pool = PromptPool(8, 64, 1024, PROMPT, OUTPUT, order="cycle")
    per_stage = [(stage.rate, int(stage.rate * stage.duration_s)) for stage in STAGES]
    return [
        ("single rate (mean)", [lambda: synthetic_trace(NUM, NUM / 600, PROMPT, OUTPUT, 0, "constant")], False),
        ("two single-rate runs", [lambda r=r, n=n: synthetic_trace(n, r, PROMPT, OUTPUT, 0, "constant")
                                  for r, n in per_stage], False),
        ("staged", [lambda: staged_trace(STAGES, PROMPT, OUTPUT, 0, "constant")[0]], False),
        ("single rate + shared prefix", [lambda: with_shared_prefixes(
            synthetic_trace(NUM, NUM / 600, PROMPT, OUTPUT, 0, "constant"), 1024, 8)], True),
        ("single rate + pool", [lambda: pooled_trace(constant_arrivals(NUM / 600, NUM), pool)], True),
        ("two single-rate runs + pool", [lambda r=r, n=n: pooled_trace(constant_arrivals(r, n), pool)
                                         for r, n in per_stage], True),
        ("staged + pool", [lambda: staged_trace(STAGES, seed=0, arrival="constant", pool=pool)[0]], True),
    ]


def run(build, caching: bool) -> tuple[float, float, int]:
    """(CPU s to build, CPU s to simulate, steps)."""
    point = SweepConfig(model="llama-3-8b", device="h100-sxm",
                        trace={"kind": "synthetic", "qps": 1.0, "num_requests": 1},
                        engine={"scheduler": "vllm_v1", "chunk_size": 512, "enable_prefix_caching": caching})
    cost_model = build_cost_model(point)
    start = time.process_time()
    requests = build()
    built = time.process_time()
    result = simulate(requests, build_schedulers(point, build_scheduler_config(point)), build_pricer(point, cost_model),
                      outcome_fn=build_outcome_fn(point), seed=0)
    return built - start, time.process_time() - built, int(result.summary["num_steps"])


def main(repeats: int = 5) -> None:
    cases = workloads()
    runs: dict[str, list] = {name: [] for name, _, _ in cases}
    for _ in range(repeats):  # interleaved, so a busy spell of the shared machine hits every workload
        for name, builders, caching in cases:
            parts = [run(build, caching) for build in builders]
            runs[name].append(tuple(sum(p[i] for p in parts) for i in range(3)))
    for name, _, caching in cases:
        sims = [r[1] for r in runs[name]]
        print(f"{name:28s} caching {'on ' if caching else 'off'}: build {min(r[0] for r in runs[name]):.3f} CPU-s, "
              f"simulate min {min(sims):.2f} / median {statistics.median(sims):.2f} CPU-s "
              f"({NUM / min(sims):,.0f} requests/CPU-s, {runs[name][0][2]:,} steps)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
