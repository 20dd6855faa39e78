"""Concurrency-limited clients (traces/concurrency.py) driven by the simulator."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.scheduler import SchedulerConfig, make_scheduler
from simulator.simulate import simulate
from tests.conftest import ConstantCostModel
from traces import Request
from traces.concurrency import ScheduledConcurrency, StaggeredClosedLoop, staggered_starts_s


def _run(workload):
    scheduler = make_scheduler("vllm_v1", SchedulerConfig(num_gpu_blocks=400, max_model_len=1024, chunk_size=512))
    return simulate(workload, scheduler, ConstantCostModel(0.01)).requests.sort_values("request_id")


def test_max_concurrency_sends_each_request_when_its_slot_frees_or_on_schedule():
    # One slot; each request takes 3 steps of 10 ms (prefill + first token, 2 decodes).
    # Scheduled 0, 0.01, 0.05, 0.20: sent at 0, 0.03 (slot), 0.06 (slot), 0.20 (schedule).
    schedule = [0.0, 0.01, 0.05, 0.20]
    requests = [Request(i, t, 16, 3) for i, t in enumerate(schedule)]
    frame = _run(ScheduledConcurrency(requests, 1))
    np.testing.assert_allclose(frame["arrival_s"], [0.0, 0.03, 0.06, 0.20])
    np.testing.assert_allclose(frame["ttft_s"], [0.01] * 4)  # the wait for a slot is not TTFT (vLLM's start_time)


def test_max_concurrency_over_an_infinite_rate_is_a_closed_loop_of_n():
    requests = [Request(i, 0.0, 16, 3) for i in range(4)]
    frame = _run(ScheduledConcurrency(requests, 2))
    np.testing.assert_allclose(frame["arrival_s"], [0.0, 0.0, 0.03, 0.03])


def test_a_ramped_schedule_releases_later_requests_on_completion():
    # Two streams started at 0.5 and 1.0 s; requests 2 and 3 (scheduled at 0) go when a slot frees.
    requests = [Request(0, 0.5, 16, 3), Request(1, 1.0, 16, 3), Request(2, 0.0, 16, 3), Request(3, 0.0, 16, 3)]
    frame = _run(ScheduledConcurrency(requests, 2))
    np.testing.assert_allclose(frame["arrival_s"], [0.5, 1.0, 0.53, 0.56])


def test_bad_workloads_are_errors():
    with pytest.raises(ValueError, match="numbered 0..n-1"):
        ScheduledConcurrency([Request(1, 1.0, 4, 4)], 1)
    with pytest.raises(ValueError, match="max concurrency"):
        ScheduledConcurrency([], 0)


def test_streams_ramp_up_as_guidellm_spreads_them():
    np.testing.assert_allclose(staggered_starts_s(4, 2.0), [0.0, 0.5, 1.0, 1.5])
    workload = StaggeredClosedLoop(4, 2.0, prompt=16, output=3, num_requests=8)
    frame = _run(workload)
    first = frame.groupby(frame["request_id"].map(workload.client_of))["arrival_s"].min()
    np.testing.assert_allclose(first.to_numpy(), [0.0, 0.5, 1.0, 1.5])
    with pytest.raises(ValueError, match="rampup_s"):
        staggered_starts_s(2, -1.0)
