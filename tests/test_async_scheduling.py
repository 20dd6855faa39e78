"""vLLM V1's async scheduling in a replica (simulator/replica.py): hand-worked times, the decision
time stamped as `first_scheduled_s`, decode windows unchanged by it, and how points resolve it."""
from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.scheduler import SchedulerConfig, make_scheduler
from simulator.simulate import simulate
from tests.conftest import ConstantCostModel
from traces import ClosedLoopWorkload, Request


def _run(rows, async_scheduling, step_s=0.01, **kw):
    config = SchedulerConfig(max_model_len=8192, block_size=16, chunk_size=512, num_gpu_blocks=4096)
    requests = [Request(i, a, p, o) for i, (a, p, o) in enumerate(rows)]
    result = simulate(requests, make_scheduler("vllm_v1", config), ConstantCostModel(step_s),
                      async_scheduling=async_scheduling, **kw)
    return result.requests.set_index("request_id")


def test_a_request_arriving_mid_step_waits_one_more_step_than_synchronous():
    # Steps of 10 ms from t=0 (A's prefill, then A's decodes). B arrives at 25 ms, during the step
    # [20, 30) ms. Synchronous: scheduled at 30 ms, first token at 40 ms (TTFT 15 ms). Async: the
    # step [30, 40) was scheduled at 20 ms, before B arrived; B goes into [40, 50): first token at
    # 50 ms (TTFT 25 ms), its scheduling decision at 30 ms (the start of the step before).
    rows = [(0.0, 100, 10), (0.025, 100, 3)]
    sync, asyn = _run(rows, False), _run(rows, True)
    assert sync.loc[1, "ttft_s"] == pytest.approx(0.015)
    assert sync.loc[1, "first_scheduled_s"] == pytest.approx(0.03)
    assert asyn.loc[1, "ttft_s"] == pytest.approx(0.025)
    assert asyn.loc[1, "first_scheduled_s"] == pytest.approx(0.03)
    assert asyn.loc[1, "completion_s"] == pytest.approx(0.07)  # 50, 60, 70 ms: one token a step after
    assert asyn.loc[1, "tpot_s"] == pytest.approx(0.01)
    # A, scheduled on an idle engine, is not delayed; its tokens are the synchronous run's.
    assert asyn.loc[0, "ttft_s"] == pytest.approx(0.01)
    assert asyn.loc[0, "completion_s"] == pytest.approx(sync.loc[0, "completion_s"])


def test_an_idle_engine_schedules_at_once():
    rows = [(0.0, 100, 2), (0.5, 100, 2)]  # the second arrives long after the first has finished
    asyn = _run(rows, True)
    assert asyn.loc[1, "ttft_s"] == pytest.approx(0.01)
    assert asyn.loc[1, "first_scheduled_s"] == pytest.approx(0.5)


def test_arrival_exactly_at_a_step_start_is_seen_by_the_next_step_scheduled():
    # B arrives at 20 ms, when the step [20, 30) begins (scheduled at 10 ms, without B); the step
    # [30, 40), scheduled at 20 ms, sees it: first token at 40 ms, whichever event SimPy runs first.
    rows = [(0.0, 100, 10), (0.02, 100, 3)]
    asyn = _run(rows, True, step_s=0.01)
    assert asyn.loc[1, "first_token_s"] == pytest.approx(0.04)


def test_when_nothing_else_runs_an_arrival_during_the_last_step_starts_at_its_end():
    # A's last token comes from the step [10, 20) ms (output 2); B arrives at 15 ms. The step after
    # A's last was scheduled empty at 10 ms, so vLLM's next schedule() at 20 ms takes B at once.
    rows = [(0.0, 100, 2), (0.015, 100, 2)]
    asyn = _run(rows, True)
    assert asyn.loc[1, "first_scheduled_s"] == pytest.approx(0.02)
    assert asyn.loc[1, "first_token_s"] == pytest.approx(0.03)


@settings(deadline=None, max_examples=60)
@given(num_clients=st.integers(1, 4), num_requests=st.integers(1, 16), prompt=st.integers(1, 300),
       output=st.integers(2, 24), think_s=st.sampled_from([0.0, 0.013]), open_loop=st.booleans())
def test_decode_windows_change_nothing_with_async_scheduling(num_clients, num_requests, prompt, output, think_s,
                                                            open_loop):
    from profiler import RooflineCostModel, get_device_spec, get_model_spec

    cost = RooflineCostModel(get_model_spec("llama-3-8b"), get_device_spec("h100-sxm"))
    frames = []
    for fast in (True, False):
        config = SchedulerConfig(num_gpu_blocks=400, max_model_len=4096, max_num_seqs=64, chunk_size=256)
        if open_loop:
            workload = [Request(i, 0.007 * i * (i % 3), prompt + i, output + i % 5) for i in range(num_requests)]
        else:
            workload = ClosedLoopWorkload(num_clients, think_s, prompt, output, num_requests)
        result = simulate(workload, make_scheduler("vllm_v1", config), cost, fast_forward=fast,
                          async_scheduling=True)
        frames.append((result.requests.sort_values("request_id").reset_index(drop=True), result.steps))
    pd.testing.assert_frame_equal(frames[0][0], frames[1][0])
    pd.testing.assert_frame_equal(frames[0][1], frames[1][1])


def test_pipeline_parallel_replica_refuses_async_scheduling():
    from simulator.pricing import StepPricer

    config = SchedulerConfig(max_model_len=8192, block_size=16, chunk_size=512, num_gpu_blocks=4096)
    with pytest.raises(ValueError, match="pipeline parallelism"):
        simulate([Request(0, 0.0, 10, 2)], make_scheduler("vllm_v1", config),
                 StepPricer(ConstantCostModel(0.01), pipeline_stages=2), async_scheduling=True)


def _point(engine: dict, **top):
    from experiments.config import SweepConfig

    return SweepConfig.model_validate({"model": "llama-3-8b", "device": "h100-sxm", **top,
                                       "trace": {"kind": "poisson", "qps": 1, "num_requests": 4},
                                       "engine": engine})


def test_points_resolve_async_scheduling_as_vllm_does():
    from experiments.deployment import async_scheduling_on

    assert async_scheduling_on(_point({"scheduler": "vllm_v1"})) is True
    assert async_scheduling_on(_point({"scheduler": "vllm_v1", "pipeline_parallel_size": 2})) is False
    assert async_scheduling_on(_point({"scheduler": "vllm_v1", "split_n": 2})) is False  # CPU n-gram drafter
    assert async_scheduling_on(_point({"scheduler": "vllm_v1", "async_scheduling": False})) is False
    assert async_scheduling_on(_point({"scheduler": "sarathi"})) is False


@pytest.mark.parametrize("engine, message", [
    ({"scheduler": "sarathi", "async_scheduling": True}, "only by vllm_v1"),
    ({"scheduler": "vllm_v1", "async_scheduling": True, "pipeline_parallel_size": 2}, "pipeline_parallel_size"),
    ({"scheduler": "vllm_v1", "async_scheduling": True, "split_n": 2}, "n-gram drafter"),
])
def test_impossible_async_scheduling_is_a_clear_config_error(tmp_path, engine, message):
    import yaml

    from experiments.config import ConfigError, load_config

    path = tmp_path / "point.yaml"
    path.write_text(yaml.safe_dump({"model": "llama-3-8b", "trace": {"kind": "poisson", "qps": 1, "num_requests": 4},
                                    "engine": engine}))
    with pytest.raises(ConfigError, match=message) as info:
        load_config(path)
    assert str(path) in str(info.value) and "engine" in str(info.value)


def test_schedule_wait_and_prefill_split_the_engine_first_token_hand_worked():
    # As the first test: B arrives at 25 ms, vLLM decides at 30 ms (start of the step [30, 40)) and
    # B's prefill runs in [40, 50): queue 5 ms, schedule wait 10 ms (the step in flight at the
    # decision), prefill 10 ms. A was scheduled on an idle engine: no wait. Synchronous: no wait.
    rows = [(0.0, 100, 10), (0.025, 100, 3)]
    asyn, sync = _run(rows, True), _run(rows, False)
    assert asyn["schedule_wait_s"].tolist() == pytest.approx([0.0, 0.01])
    assert sync["schedule_wait_s"].tolist() == [0.0, 0.0]


def test_requests_decided_at_one_instant_get_the_wait_of_their_own_step():
    # Three one-token requests at t = 0, one sequence at a time (10 ms steps). The idle engine
    # decides step [0, 10) at 0 (A: no wait) and step [10, 20) also at 0, while [0, 10) runs (B:
    # waits 10 ms); step [20, 30) is decided at 10 ms (C: queue 10 ms, wait 10 ms). Prefill 10 ms each.
    config = SchedulerConfig(max_model_len=8192, block_size=16, chunk_size=512, num_gpu_blocks=4096,
                             max_num_seqs=1)
    requests = [Request(i, 0.0, 100, 1) for i in range(3)]
    frame = simulate(requests, make_scheduler("vllm_v1", config), ConstantCostModel(0.01),
                     async_scheduling=True).requests.set_index("request_id")
    assert frame["first_scheduled_s"].tolist() == pytest.approx([0.0, 0.0, 0.01])
    assert frame["schedule_wait_s"].tolist() == pytest.approx([0.0, 0.01, 0.01])
    prefill = frame["first_token_s"] - frame["first_scheduled_s"] - frame["schedule_wait_s"]
    assert prefill.tolist() == pytest.approx([0.01, 0.01, 0.01])


def test_async_scheduling_other_than_vllm_v1_is_refused():
    config = SchedulerConfig(max_model_len=8192, block_size=16, chunk_size=512, num_gpu_blocks=4096)
    with pytest.raises(ValueError, match="vllm_v1"):
        simulate([Request(0, 0.0, 10, 2)], make_scheduler("sarathi", config), ConstantCostModel(0.01),
                 async_scheduling=True)
