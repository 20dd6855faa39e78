"""CPU cost of one simulated step by kind: decode-only steps against mixed steps (decodes plus
prefill chunks), on the full Azure conv trace (llama-3-8b on h100-sxm, sarathi chunk 512, the
`auto` cost model), time-scaled to a given QPS.

Each scheduled step's `schedule` + pricing + `complete_step` is timed with the thread's CPU clock
and filed under its plan's kind (a plan with any prefill entry is mixed). Decode windows (runs
of plain decode steps taken in one go, `Scheduler.decode_window`) are not in these counts.

Run from the repo root (needs ../shared/traces):
    .venv/bin/python benchmarks/bench_step_kinds.py 16
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from experiments.config import FileTrace, SweepConfig
from experiments.point import run_point
from simulator.pricing import StepPricer
from simulator.scheduler import Scheduler

_clock = time.thread_time_ns
TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "azure_public_dataset" / "AzureLLMInferenceTrace_conv.csv"


def main(qps: float) -> None:
    cost_ns = {"decode-only": 0, "mixed": 0}
    count = {"decode-only": 0, "mixed": 0}
    seqs = {"decode-only": 0, "mixed": 0}
    schedule, step_s, complete = Scheduler.schedule, StepPricer.step_s, Scheduler.complete_step
    pending = {}

    def timed_schedule(self, now_s):
        t0 = _clock()
        plan = schedule(self, now_s)
        pending[id(plan)] = _clock() - t0
        return plan

    def timed_step_s(self, plan):
        t0 = _clock()
        out = step_s(self, plan)
        pending[id(plan)] = pending.get(id(plan), 0) + _clock() - t0
        return out

    def timed_complete(self, plan, outcome, now_s):
        t0 = _clock()
        out = complete(self, plan, outcome, now_s)
        kind = "mixed" if any(plan.columns.is_prefill) else "decode-only"
        cost_ns[kind] += pending.pop(id(plan), 0) + _clock() - t0
        count[kind] += 1
        seqs[kind] += len(plan)
        return out

    Scheduler.schedule, StepPricer.step_s, Scheduler.complete_step = timed_schedule, timed_step_s, timed_complete
    config = SweepConfig(trace=FileTrace(kind="file", path=str(TRACE), qps=qps), engine={"scheduler": "sarathi",
                                                                                          "chunk_size": 512})
    run_point(config)
    for kind in ("decode-only", "mixed"):
        n = max(count[kind], 1)
        print(f"qps {qps:g} {kind}: {count[kind]} steps, mean batch {seqs[kind] / n:.1f}, "
              f"{cost_ns[kind] / n / 1e3:.1f} us/step (schedule + price + complete)")
    d, m = cost_ns["decode-only"] / max(count["decode-only"], 1), cost_ns["mixed"] / max(count["mixed"], 1)
    print(f"qps {qps:g} mixed / decode-only: {m / d:.2f}x" if d else "no decode-only steps")


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 16.0)
