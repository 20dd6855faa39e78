"""A custom device may not take a built-in's name with other figures (the name selects the
built-in's KV memory and measured tables: the figures would be silently ignored), and a bad key
of a device's `efficiency:` is named with the valid ones."""
from __future__ import annotations

import pytest
import yaml

from experiments.config import SweepConfig
from profiler import BUILTIN_DEVICES, get_device_spec
from profiler.device_file import DEVICES_DIR, device_fields_from_mapping

# The breaker's inline device: H100-SXM's datasheet figures with 40 GiB, under its name.
H100_40 = {"name": "h100-sxm", "memory_gib": 40, "dense_bf16_tflops": 989.5, "dense_fp8_tflops": 1979,
           "memory_bandwidth_gb_per_s": 3350, "gpu_link": {"kind": "nvlink", "gb_per_s_per_direction": 450,
                                                          "latency_us": 10},
           "host_link": {"gb_per_s_per_direction": 64}, "efficiency": "fitted"}
TRACE = {"kind": "synthetic", "qps": 2.0, "num_requests": 10, "prompt_tokens": 512, "output_tokens": 16}


def test_an_inline_device_under_a_built_in_name_with_other_memory_is_refused():
    with pytest.raises(ValueError) as caught:
        get_device_spec(H100_40)
    assert str(caught.value) == (
        "device.name: 'h100-sxm' is the name of a built-in device, whose figures differ from these: "
        "cuda_total_memory_gib None (built-in: 79.19); memory_gib 40 (built-in: 80). The name selects the built-in's "
        "KV memory and measured tables, so pick another name for this device (e.g. my-h100-sxm; with base: h100-sxm "
        "to keep its measured tables and change only the keys you give), or use the built-in by name "
        "(device: h100-sxm)")


def test_a_config_with_such_a_device_is_refused_naming_the_key():
    with pytest.raises(ValueError, match=r"device: device\.name: 'h100-sxm' is the name of a built-in device.*"
                                         r"dense_bf16_tflops 10 \(built-in: 989\.5\).*"
                                         r"memory_bandwidth_gb_per_s 100 \(built-in: 3350\).*pick another name"):
        SweepConfig.model_validate({"trace": TRACE, "device": {**H100_40, "memory_gib": 80, "dense_bf16_tflops": 10,
                                                                "memory_bandwidth_gb_per_s": 100}})


def test_a_device_file_under_a_built_in_name_with_other_efficiencies_is_refused(tmp_path):
    text = (DEVICES_DIR / "h100-sxm.yaml").read_text().replace("efficiency: fitted", "efficiency: {gemm_flops: 0.5}")
    path = tmp_path / "dev.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=rf"^{path}: name: 'h100-sxm' is the name of a built-in device, whose "
                                         r"figures differ from these: efficiency \(the built-in's: fitted to "
                                         r"AIConfigurator h100_sxm tables"):
        get_device_spec(str(path))


def test_a_copy_of_the_built_in_is_the_built_in_and_another_name_keeps_its_figures(tmp_path):
    path = tmp_path / "copy.yaml"
    path.write_text((DEVICES_DIR / "h100-sxm.yaml").read_text())
    assert get_device_spec(str(path)) is BUILTIN_DEVICES["h100-sxm"]  # its KV memory and tables are right
    own = get_device_spec({**H100_40, "name": "my-h100-sxm", "efficiency": {"gemm_flops": 0.5}})
    assert (own.name, own.memory_gib, own.gemm_flops_efficiency) == ("my-h100-sxm", 40, 0.5)


def test_every_built_in_file_loads_as_itself_inline():
    for name in BUILTIN_DEVICES:
        raw = yaml.safe_load((DEVICES_DIR / f"{name}.yaml").read_text())
        assert get_device_spec(raw) is BUILTIN_DEVICES[name]


def _message(efficiency) -> str:
    device = {**H100_40, "name": "x", "efficiency": efficiency}
    with pytest.raises(ValueError) as caught:
        device_fields_from_mapping(device, where="device (inline)")
    return str(caught.value)


def test_an_unknown_efficiency_key_lists_the_valid_ones_and_nothing_about_fitted():
    assert _message({"gemm": 1.5}) == ("device (inline): efficiency.gemm: unknown key (did you mean gemm_flops?); valid keys: gemm_flops, "
                                       "memory_bandwidth, kernel_latency_us, fp8_gemm, attention, all_reduce")
    assert _message({"attention": {"flops": 0.5, "memory_bandwidth": 0.5, "latency_us": 1.0, "per_seq_us": 1.0}}) == (
        "device (inline): efficiency.attention.per_seq_us: unknown key (did you mean per_sequence_us?); valid keys: "
        "flops, memory_bandwidth, "
        "latency_us, per_sequence_us")
    assert _message({"all_reduce": {2: {"latency_us": 1.0, "link_bandwidth": 0.5, "bw": 1.0}}}) == (
        "device (inline): efficiency.all_reduce.2.bw: unknown key; valid keys: latency_us, link_bandwidth")


def test_an_efficiency_that_is_neither_form_says_both():
    assert _message("fited") == ("device (inline): efficiency: must be 'fitted' (the shipped fit of this device "
                                 "name) or a mapping of gemm_flops, memory_bandwidth, kernel_latency_us, fp8_gemm, "
                                 "attention, all_reduce (got 'fited')")
