"""How well the host-speed probe (profiler/host_speed.py) tracks a shared CPU's speed changes.

Run from the repo root after `make test` (which installs torch):
    .venv/bin/python benchmarks/bench_host_speed.py [--seconds 60]

For `--seconds`, alternates two fixed engine steps of the tiny Llama of tests/data/engine/tiny
(an 8-sequence decode, and a 48-token prefill chunk with 4 decodes) with the probe step, each
timed by the thread's CPU time. A fixed step should always take the same time; how far its times
spread around their median (mean absolute deviation, %) is how much the host's speed moves them.
Prints that spread raw, then after scaling each step by the probe under several estimators:
probing after every k-th step, scaling by the median of the last `window` probes, taken before
the step only or including the one just after it. The engine uses k = 1, window 2, after
(`PROBE_INTERVAL_S`, `PROBE_WINDOW`). Also prints the probe's range (how much the speed moved).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from gpu_engine.build import build_model
from gpu_engine.inputs import SequenceWork
from gpu_engine.model import ModelArgs
from gpu_engine.runner import ModelRunner
from profiler.host_speed import HostSpeedProbe
from profiler.model_spec import get_model_spec

TINY = Path(__file__).resolve().parents[1] / "tests" / "data" / "engine" / "tiny" / "config.json"
DECODE_8 = [SequenceWork(i, [1], 10 + i, list(range(6 * i, 6 * i + 6)), 1) for i in range(8)]
MIXED = ([SequenceWork(0, list(range(48)), 0, list(range(60, 76)), 1)]
         + [SequenceWork(i, [1], 10 + i, list(range(6 * i, 6 * i + 6)), 1) for i in range(1, 5)])


def record(seconds: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(step kind 0/1, step CPU s, probe CPU s just after the step), alternating the two steps."""
    probe = HostSpeedProbe()
    model = build_model(ModelArgs(get_model_spec(TINY)), dtype=torch.float32, device="cpu")
    runner = ModelRunner(model, 128, 4)
    kinds, steps, probes = [], [], []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        kind = len(kinds) % 2
        start = time.thread_time()
        runner.run(MIXED if kind else DECODE_8)
        steps.append(time.thread_time() - start)
        probes.append(probe.measure_s())
        kinds.append(kind)
    return np.array(kinds), np.array(steps), np.array(probes)


def spread_pct(kinds: np.ndarray, times: np.ndarray) -> float:
    """Mean over the two steps of the mean |t / median − 1|, percent."""
    return float(np.mean([np.mean(np.abs(times[kinds == k] / np.median(times[kinds == k]) - 1)) * 100
                          for k in (0, 1)]))


def estimate(probes: np.ndarray, every: int, window: int, after: bool) -> np.ndarray:
    """Per step, the median of the last `window` probes available when it is scaled (probes after
    every `every`-th step; `after`: the probe just after the step counts)."""
    taken = np.arange(0, len(probes), every)
    out = np.empty(len(probes))
    for j in range(len(probes)):
        seen = taken[taken <= (j if after else j - 1)]
        out[j] = np.median(probes[(seen if len(seen) else taken[:1])[-window:]])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    kinds, steps, probes = record(args.seconds)
    print(f"{len(steps)} steps; probe {np.min(probes) * 1e3:.2f}-{np.max(probes) * 1e3:.2f} ms "
          f"(median {np.median(probes) * 1e3:.2f}); raw spread {spread_pct(kinds, steps):.1f} %")
    print("| probe after every k-th step | window | probes used | spread % |")
    print("|---|---|---|---|")
    for every in (1, 3, 6, 12):
        for window in (1, 2, 3, 5):
            for after in (False, True):
                scaled = steps / estimate(probes, every, window, after)
                used = "before and after" if after else "before only"
                print(f"| {every} | {window} | {used} | {spread_pct(kinds, scaled):.1f} |")


if __name__ == "__main__":
    main()
