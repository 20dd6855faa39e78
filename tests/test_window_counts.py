"""A cost model's step counts are the step-by-step path's whatever the simulator's windows price
ahead (issue 17): windows price steps they may not run (they stop at the next arrival, an
interrupt cuts them), and the report's `cost_model_steps_out_of_range` comes from those counts."""
from __future__ import annotations

import random

import pandas as pd
import pytest

from simulator.scheduler import SchedulerConfig, make_scheduler
from simulator.simulate import simulate
from traces import ClosedLoopWorkload, Request


def _measured():
    from profiler.device_spec import get_device_spec
    from profiler.measured.shipped import build_measured
    from profiler.model_spec import get_model_spec
    return build_measured("auto", get_model_spec("llama-3-8b"), get_device_spec("h100-sxm"), 1)


def _long_prompts():
    # Contexts past the measured decode-attention grid: many steps are priced off it.
    r = random.Random(1)
    return sorted([Request(i, r.uniform(0, 30), r.randint(1_000, 60_000), r.randint(50, 300)) for i in range(80)],
                  key=lambda x: x.arrival_s)


def _busy_short_prompts():
    from traces import load_profile
    return load_profile("azure-code").sample(300, 6.0, seed=5)


@pytest.mark.parametrize("requests", [_long_prompts, _busy_short_prompts])
def test_measured_counts_equal_step_by_step(requests):
    counts = []
    for fast_forward in (True, False):
        cost = _measured()
        config = SchedulerConfig(num_gpu_blocks=60_000, max_model_len=65_536, max_num_seqs=256, chunk_size=512)
        result = simulate(requests(), make_scheduler("sarathi", config), cost, fast_forward=fast_forward)
        counts.append((len(result.steps), cost.num_predictions, cost.out_of_grid_steps, dict(cost.out_of_range)))
    assert counts[0] == counts[1]
    assert counts[0][0] == counts[0][1]  # one count per step run
    # Before, windows counted the steps they priced past the next arrival (the busy trace: 5,218
    # counts for 4,529 steps; the long prompts: 5,423 for 5,418, out of grid counted the same).


class _CountingCost:
    """A cost model that counts each step it prices (as a fitted model counts extrapolations),
    with no deferred counting: windows may price only steps sure to run."""

    def __init__(self):
        self.num_predictions = 0

    def predict_step_s(self, query_tokens, context_tokens, is_prefill) -> float:
        self.num_predictions += 1
        return 0.004 + 1e-7 * float(sum(context_tokens)) + 2e-5 * float(sum(query_tokens)) if len(query_tokens) else 0.0


def test_a_counting_cost_model_counts_each_step_run_once_open_and_closed_loop():
    config = SchedulerConfig(num_gpu_blocks=30_000, max_model_len=8192, max_num_seqs=64, chunk_size=512)
    from traces import load_profile
    open_loop = load_profile("azure-conv").sample(200, 12.0, seed=2)
    for workload, replicas in ((open_loop, 1), (open_loop, 2), (None, 3)):
        frames = []
        for fast_forward in (True, False):
            cost = _CountingCost()
            if workload is None:
                work = ClosedLoopWorkload(num_clients=12, think_time_s=0.0, prompt=(50, 800), output=(20, 200),
                                          num_requests=150, seed=4)
            else:
                work = workload
            result = simulate(work, [make_scheduler("sarathi", config) for _ in range(replicas)], cost,
                              router="least_outstanding", fast_forward=fast_forward)
            assert cost.num_predictions == len(result.steps)
            frames.append(result)
        pd.testing.assert_frame_equal(frames[0].requests, frames[1].requests)
        pd.testing.assert_frame_equal(frames[0].steps, frames[1].steps)
