"""DeviceSpec built-ins: dense datasheet peaks (REFERENCE.md §5) and lookup errors."""
import pytest

from profiler import BUILTIN_DEVICES, get_device_spec


def test_builtin_datasheet_figures():
    figures = {name: (d.peak_bf16_flops, d.mem_bandwidth_bytes_per_s, d.memory_gib)
               for name, d in BUILTIN_DEVICES.items()}
    assert figures == {
        "a100-80gb": (312e12, 2.039e12, 80),
        "h100-sxm": (1979e12 / 2, 3.35e12, 80),  # datasheet's 1,979 is with 2:4 sparsity
        "h200": (1979e12 / 2, 4.8e12, 141),
        "l40s": (362e12, 864e9, 48),
        "a40": (149.7e12, 696e9, 48),
    }


def test_interconnect_is_per_direction_half_of_datasheet():
    assert get_device_spec("a100-80gb").interconnect_bandwidth_bytes_per_s == 600e9 / 2  # NVLink3
    assert get_device_spec("h100-sxm").interconnect_bandwidth_bytes_per_s == 900e9 / 2  # NVLink4
    assert get_device_spec("l40s").interconnect_bandwidth_bytes_per_s == 64e9 / 2  # PCIe4 x16


def test_fp8_peak():
    for name in ("h100-sxm", "h200", "l40s"):
        device = get_device_spec(name)
        assert device.peak_fp8_flops == 2 * device.peak_bf16_flops
        assert device.peak_flops(1) == device.peak_fp8_flops
    for name in ("a100-80gb", "a40"):  # Ampere: no FP8 tensor cores, weight-only FP8 runs in BF16
        device = get_device_spec(name)
        assert device.peak_fp8_flops is None
        assert device.peak_flops(1) == device.peak_bf16_flops


def test_unknown_device_lists_names():
    with pytest.raises(ValueError, match="a100-80gb.*h100-sxm"):
        get_device_spec("tpu-v5")
