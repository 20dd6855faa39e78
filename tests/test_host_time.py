"""A synchronous vLLM V1 engine's host time per running sequence (experiments.deployment.host_s_per_seq):
priced in every step by the roofline and measured cost models, 0 with async scheduling, a device key."""
from __future__ import annotations

import pytest

from profiler import RooflineCostModel, get_device_spec, get_model_spec


def test_roofline_adds_the_host_time_of_each_sequence():
    model, device = get_model_spec("llama-3-8b"), get_device_spec("h100-sxm")
    plain = RooflineCostModel(model, device)
    hosted = RooflineCostModel(model, device, host_s_per_seq=1e-3)
    q, c, p = [1] * 10, [500] * 10, [False] * 10
    assert hosted.predict_step_s(q, c, p) - plain.predict_step_s(q, c, p) == pytest.approx(10e-3)
    assert hosted.breakdown(q, c, p)["overhead_s"] == pytest.approx(device.step_overhead_s + 10e-3)
    steps = hosted.predict_decode_steps_s(c, 3, 0)
    assert [a - b for a, b in zip(steps, plain.predict_decode_steps_s(c, 3, 0))] == pytest.approx([10e-3] * 3)


def test_measured_model_adds_the_host_time_of_each_sequence():
    from profiler.measured.shipped import build_measured

    model, device = get_model_spec("qwen3-32b"), get_device_spec("h100-sxm")
    plain = build_measured("auto", model, device, 2)
    hosted = build_measured("auto", model, device, 2, host_s_per_seq=49e-6)
    q, c, p = [1] * 64, [2000] * 64, [False] * 64
    assert hosted.predict_step_s(q, c, p) - plain.predict_step_s(q, c, p) == pytest.approx(64 * 49e-6)
    assert sum(hosted.breakdown(q, c, p).values()) == pytest.approx(hosted.predict_step_s(q, c, p))


def _point(engine: dict):
    from experiments.config import SweepConfig

    return SweepConfig.model_validate({"model": "llama-3-8b", "device": "h100-sxm",
                                       "trace": {"kind": "poisson", "qps": 1, "num_requests": 4}, "engine": engine})


def test_only_a_synchronous_vllm_v1_engine_waits_for_its_host():
    from experiments.deployment import host_s_per_seq

    assert host_s_per_seq(_point({"scheduler": "vllm_v1", "async_scheduling": False})) == 49e-6
    assert host_s_per_seq(_point({"scheduler": "vllm_v1"})) == 0.0  # async by default: overlapped
    assert host_s_per_seq(_point({"scheduler": "sarathi"})) == 0.0


def test_device_file_sets_it_and_refuses_a_bad_value(tmp_path):
    import yaml

    from profiler.device_spec import get_device_spec as spec_of

    base = {"name": "my-gpu", "memory_gib": 80, "dense_bf16_tflops": 989, "memory_bandwidth_gb_per_s": 3350,
            "gpu_link": {"kind": "nvlink", "gb_per_s_per_direction": 450}, "host_link": {"gb_per_s_per_direction": 64}}
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump({**base, "sync_host_us_per_seq": 30}))
    assert spec_of(str(path)).sync_host_s_per_seq == pytest.approx(30e-6)
    path.write_text(yaml.safe_dump({**base, "sync_host_us_per_seq": -1}))
    with pytest.raises(ValueError, match="sync_host_us_per_seq"):
        spec_of(str(path))
