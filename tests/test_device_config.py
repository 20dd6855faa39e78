"""A config's `device:` as a built-in name, a device YAML file relative to the config file, or
an inline mapping; a bad device key is an error naming the file and the key; the point is priced
with the described device's figures."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest
import yaml

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


@pytest.mark.parametrize("line, leaf, value, bounds, largest", [
    ("memory_gib: 24", "memory_gib", "1.0e+12", "0.0625 to 4096", "268 GiB (288 GB) on B300 / MI355X"),  # 10^17 blocks
    ("memory_gib: 24", "memory_gib", "1.0e+6", "0.0625 to 4096", "268 GiB (288 GB) on B300 / MI355X"),
    ("memory_bandwidth_gb_per_s: 1000", "memory_bandwidth_gb_per_s", "1.0e-305", "1 to 80000",
     "8,000 on B300 / MI355X"),  # every step inf
    ("dense_bf16_tflops: 100", "dense_bf16_tflops", "1.0e+9", "0.001 to 25000", "~2,500 on MI355X"),
    ("gpu_link: {kind: pcie, gb_per_s_per_direction: 32}", "gpu_link.gb_per_s_per_direction", "1.0e+9",
     "0.1 to 10000", "900 for NVLink 5"),
])
def test_a_device_figure_beyond_any_real_card_names_the_key_and_the_largest_card(tmp_path, line, leaf, value, bounds,
                                                                                 largest):
    # Issue 30 items 2 and 4: memory_gib 1e12 put no cap on the KV pool (OOM at 24 GB), bandwidth
    # 1e-305 made step times inf ("completed 40, TTFT n/a", exit 0).
    (tmp_path / "big.yaml").write_text(CARD.replace(line, line.replace(line.rsplit(": ", 1)[1].rstrip("}"), value)))
    with pytest.raises(ConfigError) as info:
        config(tmp_path, "device: big.yaml")
    assert f"{tmp_path / 'big.yaml'}: {leaf}: outside what a real device has: give {bounds} (the largest real card " \
        f"has {largest}); check the unit in the key's name (got {float(value)!r})" in str(info.value)


def test_an_efficiency_of_almost_nothing_is_refused_not_priced_as_inf(tmp_path):
    (tmp_path / "slow.yaml").write_text(CARD.replace("gemm_flops: 0.5", "gemm_flops: 1.0e-305"))
    with pytest.raises(ConfigError, match=r"slow.yaml: efficiency.gemm_flops: Input should be greater than or equal "
                                          r"to 0.001"):
        config(tmp_path, "device: slow.yaml")


def test_every_shipped_device_is_within_the_physical_bounds():
    from profiler.device_file import DEVICES_DIR, device_fields_from_file

    assert len([device_fields_from_file(path) for path in sorted(DEVICES_DIR.glob("*.yaml"))]) == 12


def test_a_kv_pool_derived_beyond_what_the_simulator_holds_is_refused_before_allocation(tmp_path):
    # A 4 TiB card (within the bounds) holding a tiny model's KV in blocks of 1 token: 15.5 billion
    # blocks, ~40 bytes each in the simulator, refused before any pool is built.
    from pathlib import Path

    from experiments.deployment import build_scheduler_config

    tiny = Path(__file__).resolve().parent / "data" / "engine" / "tiny" / "config.json"
    big = INLINE.replace("memory_gib: 24", "memory_gib: 4096")
    point = SweepConfig.model_validate(yaml.safe_load(f"""
        model: {tiny}
        device: {big}
        trace: {{kind: poisson, qps: 2, num_requests: 10, prompt_tokens: 50, output_tokens: 5}}
        engine: {{scheduler: sarathi, block_size: 1, chunk_size: 64, max_num_seqs: 8}}
        """))
    with pytest.raises(ValueError) as info:
        build_scheduler_config(point)
    assert str(info.value) == ("engine.block_size: inline-card's memory holds 15,460,701,431 KV blocks of 1 tokens of "
                               "tiny, more than the 33,554,432 one pool may hold in the simulator; use a larger "
                               "block_size or cap the pool with engine.num_gpu_blocks")
    capped = point.model_copy(update={"engine": point.engine.model_copy(update={"num_gpu_blocks": 4096})})
    assert build_scheduler_config(capped).num_gpu_blocks == 4096


def test_file_and_inline_devices_are_labelled_and_described_by_their_names_once_each(tmp_path):
    # A device given by file was labelled by its path; report.md listed it twice (the inline
    # device's name was not found and the base's file stood in for it) and the inline one had no
    # line (issue 30 item 9).
    import pandas as pd

    from experiments.config import point_labels
    from experiments.planning.report_header import device_lines, point_devices

    (tmp_path / "devices").mkdir()
    (tmp_path / "devices" / "card.yaml").write_text(CARD)
    path = tmp_path / "c.yaml"
    path.write_text("model: llama-3-8b\ndevice: devices/card.yaml\ncost_model: roofline\n"
                    "trace: {kind: poisson, qps: 2, num_requests: 10}\n"
                    f"variants:\n  - {{device: devices/card.yaml}}\n  - {{device: h100-sxm}}\n  - {{device: {INLINE}}}\n")
    base, points = load_config(path)
    configs = [SweepConfig.model_validate(p) for p in points]
    assert point_labels(configs) == ["my-card · sarathi chunk=512", "h100-sxm · sarathi chunk=512",
                                     "inline-card · sarathi chunk=512"]
    table = pd.DataFrame({"device": ["my-card", "h100-sxm", "inline-card"]})
    lines = device_lines(table, base, point_devices(points))
    assert [line.split(":")[0] for line in lines] == ["Device my-card", "Device h100-sxm", "Device inline-card"]
    assert lines[2] == ("Device inline-card: 24 GiB, 100 TFLOP/s dense BF16, 2000 GB/s; GPU link pcie 32 GB/s per "
                        "direction; roofline efficiencies GEMM 0.50 of peak, bandwidth 0.50 (given in device (inline)); "
                        "figures from device (inline).")
    assert device_lines(table, base)[2] == ("Device inline-card: its figures are not known to this report (a file or "
                                            "inline device of points not given to it).")
