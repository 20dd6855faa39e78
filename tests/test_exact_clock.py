"""SimPy's clock reaches a step's end exactly: a decode window, an arrival or a KV transfer
wakes at the float the step-by-step path computes (`simulator.replica.delay_legs_s`), so decode
windows change no record, closed loops with think time 0 included."""
from __future__ import annotations

import math

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.replica import delay_legs_s, delay_until_s
from simulator.scheduler import SchedulerConfig, make_scheduler
from simulator.simulate import simulate


def _clock_after(now_s: float, delays: list[float]) -> float:
    for delay in delays:
        now_s = now_s + delay  # as simpy.Environment.schedule adds a Timeout's delay
    return now_s


def test_a_time_no_single_delay_reaches_is_reached_in_two_legs():
    now_s, at_s = 0.0801768, 0.22240469999999998  # found by the closed-loop property test
    assert now_s + delay_until_s(now_s, at_s) == math.nextafter(at_s, math.inf)  # one ulp late
    legs = delay_legs_s(now_s, at_s)
    assert legs == [at_s / 2 - now_s, at_s / 2]
    assert _clock_after(now_s, legs) == at_s


def test_one_leg_when_one_delay_lands():
    assert delay_legs_s(0.0, 1.5) == [1.5]
    assert delay_legs_s(0.3, 0.5) == [0.5 - 0.3]  # at <= 2 now: exact (Sterbenz)
    assert delay_legs_s(2.0, 1.0) == [0.0]  # not in the future


@settings(deadline=None, max_examples=2000)
@given(now_s=st.floats(0, 1e7, allow_nan=False), at_s=st.floats(0, 1e7, allow_nan=False))
def test_legs_land_exactly_and_are_few(now_s, at_s):
    legs = delay_legs_s(now_s, at_s)
    assert all(d >= 0 for d in legs)
    if at_s > now_s:
        assert _clock_after(now_s, legs) == at_s
        assert len(legs) <= (2 + max(0, math.ceil(math.log2(at_s) - math.log2(now_s))) if now_s > 0 else 1)
    else:
        assert legs == [0.0]


@settings(deadline=None, max_examples=150)
@given(num_clients=st.integers(1, 4), num_requests=st.integers(1, 20), prompt=st.integers(1, 300),
       output=st.integers(2, 30), blocks=st.integers(30, 200), name=st.sampled_from(["sarathi", "vllm_v1", "vllm"]))
def test_closed_loop_with_think_time_zero_same_with_and_without_decode_windows(
        num_clients, num_requests, prompt, output, blocks, name):
    # The roofline prices each context differently, so step ends are sums no single delay from
    # a window's start always reaches (a constant step time never shows it).
    from profiler import RooflineCostModel, get_device_spec, get_model_spec
    from traces import ClosedLoopWorkload

    cost = RooflineCostModel(get_model_spec("llama-3-8b"), get_device_spec("h100-sxm"))

    frames = []
    for fast in (True, False):
        config = SchedulerConfig(num_gpu_blocks=blocks, max_model_len=4096, max_num_seqs=64,
                                 **({"chunk_size": 256} if name != "vllm" else {}))
        workload = ClosedLoopWorkload(num_clients, 0.0, prompt, output, num_requests)
        schedulers = [make_scheduler(name, config) for _ in range(2)]
        result = simulate(workload, schedulers, cost, router="round_robin", fast_forward=fast)
        frames.append((result.requests.sort_values("request_id").reset_index(drop=True), result.steps))
    pd.testing.assert_frame_equal(frames[0][0], frames[1][0])
    pd.testing.assert_frame_equal(frames[0][1], frames[1][1])
