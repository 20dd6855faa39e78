"""A config's `device:` as a built-in name, a device YAML file relative to the config file, or
an inline mapping; a bad device key is an error naming the file and the key; the point is priced
with the described device's figures."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

from experiments.config import ConfigError, SweepConfig, load_config
from experiments.point import build_cost_model

CARD = """\
name: my-card
memory_gib: 24
dense_bf16_tflops: 100
memory_bandwidth_gb_per_s: 1000
gpu_link: {kind: pcie, gb_per_s_per_direction: 32}
host_link: {gb_per_s_per_direction: 32}
efficiency: {gemm_flops: 0.5, memory_bandwidth: 0.5, kernel_latency_us: 0}
step_overhead_ms: 0
"""
INLINE = ("{name: inline-card, memory_gib: 24, dense_bf16_tflops: 100, memory_bandwidth_gb_per_s: 2000, "
          "gpu_link: {kind: pcie, gb_per_s_per_direction: 32}, host_link: {gb_per_s_per_direction: 32}, "
          "efficiency: {gemm_flops: 0.5, memory_bandwidth: 0.5, kernel_latency_us: 0}, step_overhead_ms: 0}")


def config(tmp_path, device_line: str) -> list[SweepConfig]:
    (tmp_path / "devices").mkdir(exist_ok=True)
    (tmp_path / "devices" / "card.yaml").write_text(CARD)
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(f"""\
        model: llama-3-8b
        {device_line}
        cost_model: roofline
        trace: {{kind: poisson, qps: 2, num_requests: 10}}
        engine: {{scheduler: sarathi, chunk_size: 512}}
        """))
    _, points = load_config(path)
    return [SweepConfig.model_validate(p) for p in points]


def test_file_relative_to_config_and_inline_mapping_price_their_figures(tmp_path):
    (from_file,) = config(tmp_path, "device: devices/card.yaml")
    assert from_file.device == str(tmp_path / "devices" / "card.yaml")
    (inline,) = config(tmp_path, f"device: {INLINE}")
    (builtin,) = config(tmp_path, "device: l4")
    step = (np.array([1]), np.array([0]), np.array([False]))
    # Same figures but twice the bandwidth: a one-token decode of llama-3-8b is memory-bound in
    # every kernel (no latency, no overhead), so the inline card takes exactly half the time.
    file_s = build_cost_model(from_file).predict_step_s(*step)
    inline_s = build_cost_model(inline).predict_step_s(*step)
    assert inline_s == pytest.approx(file_s / 2, rel=1e-12)
    # The streamed weights (every GEMM's and the LM head's, not the gathered embedding table)
    # at 1000 GB/s x 0.5: 15.01e9 B -> 30.0 ms, the bulk of the 30.05 ms step.
    weights = (32 * (4096 * 6144 + 4096 * 4096 + 4096 * 28672 + 14336 * 4096) + 128256 * 4096) * 2
    assert weights / 500e9 == pytest.approx(30.02e-3, rel=1e-3)
    assert weights / 500e9 < file_s < weights / 500e9 * 1.002
    assert build_cost_model(builtin).device.name == "l4"


def test_bad_device_key_names_config_device_file_and_key(tmp_path):
    (tmp_path / "bad.yaml").write_text(CARD.replace("memory_gib", "memory_gb"))
    with pytest.raises(ConfigError) as info:
        config(tmp_path, "device: bad.yaml")
    message = str(info.value)
    assert str(tmp_path / "c.yaml") in message
    assert f"{tmp_path / 'bad.yaml'}: memory_gb: unknown key" in message


def test_bad_inline_key_and_unknown_name(tmp_path):
    with pytest.raises(ConfigError, match=r"device \(inline\): gpu_link.kind: Input should be"):
        config(tmp_path, "device: " + INLINE.replace("kind: pcie", "kind: ethernet"))
    with pytest.raises(ConfigError, match="unknown device 'tpu-v5'; built-in devices are"):
        config(tmp_path, "device: tpu-v5")
