"""Closed-loop load: a fixed number of clients, each sending its next request when one ends."""
from __future__ import annotations

import numpy as np
import pytest

from experiments.config import SweepConfig
from experiments.point import run_point
from simulator.scheduler import SchedulerConfig, make_scheduler
from simulator.simulate import simulate
from tests.conftest import ConstantCostModel
from traces import ClosedLoopWorkload


def in_flight_at(requests, t):
    return int(((requests["arrival_s"] <= t) & (requests["completion_s"] > t)).sum())


def test_closed_loop_holds_exactly_32_in_flight():
    workload = ClosedLoopWorkload(32, think_time_s=0.0, prompt=(50, 500), output=100, num_requests=320, seed=1)
    scheduler = make_scheduler("sarathi", SchedulerConfig(num_gpu_blocks=100_000, max_model_len=4096,
                                                          chunk_size=512, max_num_seqs=128))
    result = simulate(workload, scheduler, ConstantCostModel(0.01))
    r = result.requests
    assert len(r) == 320 and (r["finish_reason"] == "completed").all()
    # While requests remain to be issued (before the 289th completion), 32 are always in flight.
    completions = np.sort(r["completion_s"].to_numpy())
    for t in np.linspace(0.0, completions[320 - 32] - 1e-6, 50):
        assert in_flight_at(r, t) == 32
    # Each client's next request arrives exactly when its previous one completed (think 0).
    assert (r["arrival_s"].iloc[32:].isin(r["completion_s"])).all()


def test_think_time_delays_the_next_request():
    workload = ClosedLoopWorkload(1, think_time_s=0.5, prompt=10, output=2, num_requests=3)
    scheduler = make_scheduler("sarathi", SchedulerConfig(num_gpu_blocks=100, max_model_len=512, chunk_size=64))
    r = simulate(workload, scheduler, ConstantCostModel(0.01)).requests
    # Each request takes 2 steps (prefill + 1 decode) = 20 ms, then 500 ms of thinking.
    assert r["arrival_s"].tolist() == pytest.approx([0.0, 0.52, 1.04])


def test_closed_loop_config_runs_and_rejections_keep_the_loop_going():
    point = SweepConfig.model_validate({
        "model": "llama-2-13b", "device": "a100-80gb",
        "trace": {"kind": "closed_loop", "clients": 4, "num_requests": 20, "prompt_tokens": [50, 500],
                  "output_tokens": 100},
        "engine": {"scheduler": "vllm"}})
    row = run_point(point).row
    assert row["completed"] == 20 and row["trace_source"] == "closed loop, 4 clients"
    tiny = point.model_copy(update={"engine": point.engine.model_copy(update={"max_model_len": 300})})
    row = run_point(tiny).row  # prompts above 200 tokens are rejected as too long; the loop goes on
    assert row["completed"] + row["rejected_too_long"] == 20 and row["rejected_too_long"] > 0
