"""The serving front end (simulator/frontend.py): client-side and engine-side terms of a request,
closed loops behind it, the `frontend:` config section and its bad input."""
from __future__ import annotations

import math

import pytest
import yaml

from simulator.frontend import FrontEnd
from simulator.metrics import summarize
from simulator.scheduler import SchedulerConfig, make_scheduler
from simulator.simulate import simulate
from tests.conftest import ConstantCostModel
from traces import ClosedLoopWorkload, Request

FE = FrontEnd(request_s=0.002, tokenize_s_per_token=1e-5, output_s=0.003)


def _config():
    return SchedulerConfig(max_model_len=8192, block_size=16, chunk_size=512, num_gpu_blocks=4096)


def test_one_request_hand_worked():
    # Sent at 0 with 100 prompt tokens: at the engine 2 ms + 100 × 10 µs = 3 ms later; prefill step
    # [3, 13) ms, first token leaves the engine at 13 ms and reaches the client 3 ms later (16 ms);
    # 4 tokens: the last at 43 ms at the engine, 46 ms at the client.
    r = simulate([Request(0, 0.0, 100, 4)], make_scheduler("vllm_v1", _config()), ConstantCostModel(0.01),
                 frontend=FE).requests.iloc[0]
    assert r["frontend_in_s"] == pytest.approx(0.003)
    assert r["engine_arrival_s"] == pytest.approx(0.003)
    assert r["first_scheduled_s"] == pytest.approx(0.003)
    assert r["queue_s"] == pytest.approx(0.0) and r["scheduling_delay_s"] == pytest.approx(0.0)
    assert r["engine_first_token_s"] == pytest.approx(0.01)
    assert r["frontend_out_s"] == pytest.approx(0.003)
    assert r["engine_ttft_s"] == pytest.approx(0.01)
    assert r["ttft_s"] == pytest.approx(0.016)
    assert r["frontend_in_s"] + r["queue_s"] + r["engine_first_token_s"] + r["frontend_out_s"] == \
        pytest.approx(r["ttft_s"])
    assert r["engine_e2e_s"] == pytest.approx(0.04)
    assert r["e2e_s"] == pytest.approx(0.046)
    assert r["tpot_s"] == pytest.approx(0.01)  # a constant shift: TPOT and ITL are the engine's


def test_the_five_terms_of_a_queued_request_sum_to_its_ttft():
    # Async scheduling, 10 ms steps. A sent at 0: at the engine at 3 ms (2 ms + 100 × 10 µs), runs
    # [3, 13) ms, decodes after. B sent at 20 ms with 50 tokens: at the engine at 22.5 ms, during
    # [13, 23), whose successor [23, 33) was decided at 13 ms without it; vLLM decides B at 23 ms
    # (the start of the step before B's), B's prefill runs [33, 43): front end in 2.5 ms, queue
    # 0.5 ms, schedule wait 10 ms, prefill 10 ms, front end out 3 ms = 26 ms.
    r = simulate([Request(0, 0.0, 100, 8), Request(1, 0.02, 50, 2)], make_scheduler("vllm_v1", _config()),
                 ConstantCostModel(0.01), frontend=FE, async_scheduling=True).requests.set_index("request_id").loc[1]
    terms = ("frontend_in_s", "queue_s", "schedule_wait_s", "prefill_s", "frontend_out_s")
    assert [r[t] for t in terms] == pytest.approx([0.0025, 0.0005, 0.01, 0.01, 0.003])
    assert r["ttft_s"] == pytest.approx(0.026)
    assert sum(r[t] for t in terms) == pytest.approx(r["ttft_s"])
    assert r["engine_first_token_s"] == pytest.approx(r["schedule_wait_s"] + r["prefill_s"])


def test_without_a_front_end_the_frame_is_unchanged():
    requests = [Request(0, 0.0, 100, 4), Request(1, 0.004, 50, 3)]
    plain = simulate(requests, make_scheduler("vllm_v1", _config()), ConstantCostModel(0.01)).requests
    zero = simulate(requests, make_scheduler("vllm_v1", _config()), ConstantCostModel(0.01),
                    frontend=FrontEnd()).requests
    for name in plain.columns:
        if name != "token_times_s":
            assert plain[name].equals(zero[name]), name
    assert "engine_ttft_s" not in plain  # no front end: no client/engine split


def test_summary_reports_client_and_engine_side():
    result = simulate([Request(0, 0.0, 100, 4)], make_scheduler("vllm_v1", _config()), ConstantCostModel(0.01),
                      frontend=FE)
    assert result.summary["ttft_s_p50"] == pytest.approx(0.016)
    assert result.summary["engine_ttft_s_p50"] == pytest.approx(0.01)
    assert result.summary["e2e_s_p50"] == pytest.approx(0.046)
    assert result.summary["engine_e2e_s_p50"] == pytest.approx(0.04)
    assert summarize(result.requests, result.steps, 4096)["engine_ttft_s_p50"] == pytest.approx(0.01)


def test_closed_loop_client_waits_for_the_front_end_both_ways():
    # One client, two requests of 100 prompt tokens and 2 output tokens: the first is at the engine at
    # 3 ms, its last token leaves at 23 ms and reaches the client at 26 ms, which sends the second;
    # that one is at the engine at 29 ms.
    result = simulate(ClosedLoopWorkload(1, 0.0, 100, 2, 2), make_scheduler("vllm_v1", _config()),
                      ConstantCostModel(0.01), frontend=FE)
    second = result.requests.set_index("request_id").loc[1]
    assert second["arrival_s"] == pytest.approx(0.026)
    assert second["engine_arrival_s"] == pytest.approx(0.029)
    assert second["first_token_s"] == pytest.approx(0.039)


def test_open_loop_requests_reach_the_engine_in_front_end_order():
    # A long prompt sent first reaches the engine after a short one sent 1 ms later.
    fe = FrontEnd(0.0, 1e-5, 0.0)
    requests = [Request(0, 0.0, 1000, 2), Request(1, 0.001, 10, 2)]
    r = simulate(requests, make_scheduler("vllm_v1", _config()), ConstantCostModel(0.01),
                 frontend=fe).requests.set_index("request_id")
    assert r.loc[1, "first_scheduled_s"] == pytest.approx(0.0011)
    assert r.loc[0, "engine_arrival_s"] == pytest.approx(0.01)


@pytest.mark.parametrize("name", ["request_s", "tokenize_s_per_token", "output_s"])
@pytest.mark.parametrize("value", [-1e-3, math.nan, math.inf, 61.0])
def test_frontend_delays_out_of_range_are_refused(name, value):
    with pytest.raises(ValueError, match=name):
        FrontEnd(**{name: value})


def _write(tmp_path, frontend: dict, engine: dict | None = None):
    path = tmp_path / "point.yaml"
    path.write_text(yaml.safe_dump({"model": "llama-3-8b", "trace": {"kind": "poisson", "qps": 1, "num_requests": 4},
                                    "engine": engine or {"scheduler": "vllm_v1"}, "frontend": frontend}))
    return path


@pytest.mark.parametrize("key, value", [("request_ms", -1), ("request_ms", ".nan"), ("output_ms", ".inf"),
                                        ("tokenize_us_per_token", 5000), ("output_ms", "fast")])
def test_bad_frontend_key_names_file_and_key(tmp_path, key, value):
    from experiments.config import ConfigError, load_config

    path = tmp_path / "point.yaml"
    path.write_text(f"model: llama-3-8b\ntrace: {{kind: poisson, qps: 1, num_requests: 4}}\n"
                    f"engine: {{scheduler: vllm_v1}}\nfrontend: {{{key}: {value}}}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in str(info.value) and f"frontend.{key}" in str(info.value)


def test_unknown_frontend_key_is_refused(tmp_path):
    from experiments.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="frontend.request_s"):
        load_config(_write(tmp_path, {"request_s": 1}))


def test_points_build_the_front_end_of_vllm_v1_only(tmp_path):
    from experiments.config import SweepConfig, load_config
    from experiments.deployment import build_frontend

    _, points = load_config(_write(tmp_path, {}))
    fe = build_frontend(SweepConfig.model_validate(points[0]))
    assert fe == FrontEnd.vllm_default()
    assert (fe.request_s, fe.tokenize_s_per_token, fe.output_s) == pytest.approx((4.27e-3, 3.5e-6, 0.0))
    _, points = load_config(_write(tmp_path, {"enabled": False}))
    assert build_frontend(SweepConfig.model_validate(points[0])) is None
    _, points = load_config(_write(tmp_path, {}, {"scheduler": "sarathi"}))
    assert build_frontend(SweepConfig.model_validate(points[0])) is None
    _, points = load_config(_write(tmp_path, {"enabled": True, "request_ms": 0, "output_ms": 1.5},
                                   {"scheduler": "sarathi"}))
    assert build_frontend(SweepConfig.model_validate(points[0])) == FrontEnd.from_config_units(0, 3.5, 1.5)
