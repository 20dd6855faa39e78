"""Devices: built-in datasheet figures, device YAML files and inline mappings, validation errors
that name the file and the key, and the fitted efficiencies reproducing their measured tables."""
import re
from pathlib import Path

import numpy as np
import pytest

from profiler import BUILTIN_DEVICES, get_device_spec
from profiler.roofline import gemm_time_s, ring_all_reduce_time_s

AIC_DIR = Path(__file__).resolve().parents[2] / "shared" / "profiles" / "aiconfigurator"

GOOD = """\
name: my-l40s
memory_gib: 48
dense_bf16_tflops: 362
dense_fp8_tflops: 724
memory_bandwidth_gb_per_s: 864
gpu_link: {kind: pcie, gb_per_s_per_direction: 32, latency_us: 25}
host_link: {gb_per_s_per_direction: 32}
"""


def test_builtin_datasheet_figures():
    figures = {name: (d.peak_bf16_flops, d.mem_bandwidth_bytes_per_s, d.memory_gib)
               for name, d in BUILTIN_DEVICES.items()}
    assert figures == {
        "a100-80gb": (312e12, 2.039e12, 80),
        "a100-40gb": (312e12, 1.555e12, 40),
        "h100-sxm": (1979e12 / 2, 3.35e12, 80),  # datasheet's 1,979 is with 2:4 sparsity
        "h100-pcie": (1513e12 / 2, 2.0e12, 80),
        "h200": (1979e12 / 2, 4.8e12, 141),
        "b200": (4.5e15 / 2, 7.7e12, 180),
        "l40s": (362e12, 864e9, 48),
        "l4": (242e12 / 2, 300e9, 24),
        "a40": (149.7e12, 696e9, 48),
        "rtx-4090": (165.2e12, 1008e9, 24),  # FP32-accumulate rate (Ada whitepaper)
        "rtx-pro-6000": (503.8e12, 1792e9, 96),
        "mi300x": (1307.4e12, 5.3e12, 192),
    }


def test_interconnect_is_per_direction_half_of_datasheet():
    assert get_device_spec("a100-80gb").interconnect_bandwidth_bytes_per_s == 600e9 / 2  # NVLink3
    assert get_device_spec("h100-sxm").interconnect_bandwidth_bytes_per_s == 900e9 / 2  # NVLink4
    assert get_device_spec("b200").interconnect_bandwidth_bytes_per_s == 1800e9 / 2  # NVLink5
    assert get_device_spec("l40s").interconnect_bandwidth_bytes_per_s == 64e9 / 2  # PCIe4 x16
    assert get_device_spec("rtx-pro-6000").interconnect_bandwidth_bytes_per_s == 128e9 / 2  # PCIe5 x16
    assert [get_device_spec(n).interconnect_kind for n in ("h100-pcie", "rtx-4090", "mi300x")] == ["pcie", "pcie", "xgmi"]


def test_fp8_peak():
    for name in ("h100-sxm", "h200", "l40s", "b200", "l4", "mi300x", "rtx-pro-6000"):
        device = get_device_spec(name)
        assert device.peak_fp8_flops == pytest.approx(2 * device.peak_bf16_flops, rel=3e-3)  # L4: 242.5 vs 2 x 121
        assert device.peak_flops(1) == device.peak_fp8_flops
    for name in ("a100-80gb", "a100-40gb", "a40"):  # Ampere: no FP8 tensor cores, weight-only FP8 runs in BF16
        device = get_device_spec(name)
        assert device.peak_fp8_flops is None
        assert device.peak_flops(1) == device.peak_bf16_flops


def test_efficiencies_fitted_or_assumed():
    h100 = get_device_spec("h100-sxm")
    assert (h100.gemm_flops_efficiency, h100.memory_bandwidth_efficiency, h100.kernel_latency_s) == \
        (0.7633, 0.7992, pytest.approx(3.358e-6))
    assert h100.all_reduce_terms(2).latency_s == pytest.approx(4.301e-6)
    assert "fitted to AIConfigurator h100_sxm" in h100.efficiency_source
    l4 = get_device_spec("l4")  # no measured table: the assumed defaults
    assert (l4.gemm_flops_efficiency, l4.memory_bandwidth_efficiency, l4.kernel_latency_s, l4.step_overhead_s) == \
        (0.6, 0.8, 3e-6, 0.5e-3)
    assert l4.efficiency_source == "assumed defaults"


def test_device_file_and_describe(tmp_path):
    path = tmp_path / "card.yaml"
    path.write_text(GOOD + "efficiency: {gemm_flops: 0.7, kernel_latency_us: 4}\nstep_overhead_ms: 0.25\n")
    device = get_device_spec(path)
    assert (device.name, device.peak_bf16_flops, device.peak_fp8_flops, device.memory_gib) == ("my-l40s", 362e12, 724e12, 48)
    assert (device.interconnect_kind, device.interconnect_latency_s) == ("pcie", 25e-6)
    assert (device.gemm_flops_efficiency, device.memory_bandwidth_efficiency) == (0.7, 0.8)  # bandwidth: default
    assert (device.kernel_latency_s, device.step_overhead_s) == (4e-6, 0.25e-3)
    described = device.describe()
    assert described["dense_bf16_tflops"] == 362 and described["memory_bandwidth_gb_per_s"] == 864
    assert described["gpu_link"] == {"kind": "pcie", "gb_per_s_per_direction": 32, "latency_us": 25}
    assert described["efficiency_source"] == f"given in {path}" and described["source"] == str(path)
    # Relative to a base folder (the config file's), as other config paths are.
    assert get_device_spec("card.yaml", base_dir=tmp_path).name == "my-l40s"


def test_inline_device_with_link_latency_default():
    device = get_device_spec({"name": "x", "memory_gib": 24, "dense_bf16_tflops": 121,
                              "memory_bandwidth_gb_per_s": 300,
                              "gpu_link": {"kind": "pcie", "gb_per_s_per_direction": 32},
                              "host_link": {"gb_per_s_per_direction": 32}})
    assert device.interconnect_latency_s == 20e-6  # PCIe default
    assert device.peak_fp8_flops is None and device.peak_flops(1) == 121e12
    assert device.source == "device (inline)"


def test_bad_key_in_file_names_file_and_key(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD.replace("memory_gib: 48", "memory_gb: 48"))
    with pytest.raises(ValueError) as info:
        get_device_spec(path)
    message = str(info.value)
    assert f"{path}: memory_gb: unknown key" in message
    assert f"{path}: memory_gib: Field required" in message


@pytest.mark.parametrize("edit, expected", [
    (("kind: pcie", "kind: infiniband"), "gpu_link.kind: Input should be 'nvlink', 'pcie' or 'xgmi'"),
    (("dense_bf16_tflops: 362", "dense_bf16_tflops: -1"), "dense_bf16_tflops: Input should be greater than 0"),
    (("dense_bf16_tflops: 362", "dense_bf16_tflops: true"), "dense_bf16_tflops: Input should be a valid number (got True)"),
    (("dense_bf16_tflops: 362", "dense_bf16_tflops: 3.62e2"), "dense_bf16_tflops: Input should be a valid number (got '3.62e2'); YAML reads an exponent"),
    (("host_link: {gb_per_s_per_direction: 32}", "host_link: {gb_per_s_per_direction: 32, lanes: 16}"),
     "host_link.lanes: unknown key"),
])
def test_bad_values_name_the_key(tmp_path, edit, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD.replace(*edit))
    with pytest.raises(ValueError, match=re.escape(expected)):
        get_device_spec(path)


def test_bad_efficiency_and_fitted_without_fit(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD + "efficiency: {gemm_flops: 1.2, all_reduce: {1: {latency_us: 5, link_bandwidth: 1}}}\n")
    with pytest.raises(ValueError) as info:
        get_device_spec(path)
    assert "efficiency.gemm_flops: Input should be less than or equal to 1" in str(info.value)
    path.write_text(GOOD + "efficiency: fitted\n")
    with pytest.raises(ValueError, match="no fit is shipped for device 'my-l40s'"):
        get_device_spec(path)


def test_missing_file_and_unknown_name(tmp_path):
    with pytest.raises(ValueError, match="device file /nonexistent/card.yaml: cannot read it"):
        get_device_spec("/nonexistent/card.yaml")
    with pytest.raises(ValueError, match="a100-80gb.*h100-sxm"):
        get_device_spec("tpu-v5")
    listed = tmp_path / "list.yaml"
    listed.write_text("- name: x\n")
    with pytest.raises(ValueError, match=f"{listed}: a device is a mapping of keys"):
        get_device_spec(listed)
    with pytest.raises(ValueError, match=r"device \(inline\): name: Field required"):
        get_device_spec({"memory_gib": 1})


def _aic(system: str) -> Path:
    path = AIC_DIR / system
    if not path.is_dir():
        pytest.skip(f"{path} absent: the AIConfigurator tables live in ../shared, not in the repository")
    return path


# In-sample MAPE (%) the shipped fits reach on their tables (profiler/data/roofline_fits.yaml,
# `error`): GEMM bf16 rows, graph-mode all-reduce rows at TP2, generation attention rows.
FIT_ERRORS = {"h100_sxm": ("h100-sxm", 12.6, 6.3, 21.0), "h200_sxm": ("h200", 14.4, 5.4, 24.1),
              "b200_sxm": ("b200", 17.1, 18.4, 33.4), "rtx_pro_6000_server": ("rtx-pro-6000", 22.5, 17.8, 28.3),
              "l40s": ("l40s", 16.2, 2.3, 24.5), "a100_sxm": ("a100-80gb", 16.3, 7.7, 33.7)}


FP8_GEMM_ERRORS = {"h100_sxm": 20.0, "h200_sxm": 23.4, "b200_sxm": 16.7, "rtx_pro_6000_server": 32.1, "l40s": 33.4}


@pytest.mark.parametrize("system", sorted(FIT_ERRORS))
def test_fitted_efficiencies_reproduce_their_tables(system):
    from profiler.roofline_fit import attention_errors, physical_attention_rows, physical_gemm_rows, read_all_reduce_rows

    name, gemm_mape, all_reduce_mape, attention_mape = FIT_ERRORS[system]
    device = get_device_spec(name)
    m, n, k, measured, _, _ = physical_gemm_rows(_aic(system), device)
    # Priced one GEMM at a time by the roofline's own function, on a sample of 2,000 rows.
    rows = np.random.default_rng(0).choice(len(m), size=min(2000, len(m)), replace=False)
    predicted = np.array([gemm_time_s(int(m[i]), int(n[i]), int(k[i]), device) for i in rows])
    error = np.abs(predicted / measured[rows] - 1).mean() * 100
    assert error == pytest.approx(gemm_mape, abs=2.0)  # the sample's MAPE is near the full table's
    tps, num_bytes, ar_measured, _ = read_all_reduce_rows(_aic(system))
    tp2 = tps == 2
    ar_predicted = np.array([ring_all_reduce_time_s(b, device, 2) for b in num_bytes[tp2]])
    assert np.abs(ar_predicted / ar_measured[tp2] - 1).mean() * 100 == pytest.approx(all_reduce_mape, abs=0.1)
    if system in FP8_GEMM_ERRORS:  # FP8 weights and activations: the fp8_gemm terms
        m, n, k, measured, _, _ = physical_gemm_rows(_aic(system), device, "fp8")
        rows = np.random.default_rng(0).choice(len(m), size=min(2000, len(m)), replace=False)
        predicted = np.array([gemm_time_s(int(m[i]), int(n[i]), int(k[i]), device, dtype_bytes=1) for i in rows])
        assert np.abs(predicted / measured[rows] - 1).mean() * 100 == pytest.approx(FP8_GEMM_ERRORS[system], abs=2.0)
    frame, _ = physical_attention_rows(_aic(system), device, "generation")
    errors = attention_errors({"generation": frame}, device)  # priced by RooflineCostModel, one layer
    assert errors["generation_attention_mape_pct"] == pytest.approx(attention_mape, abs=0.1)


def test_refitting_a100_from_the_importers_reader_gives_its_shipped_entry():
    # profiler.roofline_fit reads the tables through profiler.importers.aiconfigurator (one reader):
    # the whole entry (terms, per-TP all-reduce, every error and dropped-row count) is unchanged.
    import yaml

    from profiler.device_file import FITS_FILE
    from profiler.roofline_fit import fit_system

    entry = fit_system(_aic("a100_sxm"), BUILTIN_DEVICES["a100-80gb"])
    shipped = yaml.safe_load(FITS_FILE.read_text())["devices"]["a100-80gb"]
    refit = _flatten(yaml.safe_load(yaml.safe_dump(entry, sort_keys=False)))
    expected = _flatten(shipped)
    assert refit.keys() == expected.keys()
    # The fit is a scipy least-squares solve: its last printed digit (a p90 error of 31.36 vs
    # 31.37 %) moves with the installed numpy/scipy, so numbers agree to 0.05 (absolute, in the
    # shipped rounding's units) or 0.1 %; counts and names exactly.
    for key, value in expected.items():
        if isinstance(value, float):
            assert refit[key] == pytest.approx(value, rel=1e-3, abs=0.05), key
        else:
            assert refit[key] == value, key
    assert (entry["gemm_flops"], entry["memory_bandwidth"], entry["kernel_latency_us"]) == pytest.approx(
        (0.7098, 0.6436, 4.536), rel=1e-3)


def _flatten(tree, prefix: str = "") -> dict:
    """{'a.b': leaf} for a nested mapping (lists indexed as 'a.0')."""
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else None
    if items is None:
        return {prefix: tree}
    flat = {}
    for key, value in items:
        flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


@pytest.mark.slow
def test_regenerating_roofline_fits_yaml_gives_the_shipped_file_byte_for_byte(tmp_path):
    from profiler.device_file import FITS_FILE
    from profiler.roofline_fit import main

    _aic("h100_sxm")
    assert main([str(AIC_DIR), "--out", str(tmp_path / "fits.yaml")]) == 0
    assert (tmp_path / "fits.yaml").read_bytes() == FITS_FILE.read_bytes()


def test_attention_terms_by_hand():
    # h100-sxm's fitted attention terms: 0.4581 of the BF16 peak, 0.7255 of HBM, 9.885 µs a call,
    # 0.0478 µs a sequence. 64 decodes of 1 query over 1,023 cached tokens, 8 KV heads of 128:
    # memory-bound (1.07 GFLOP take 2.4 µs at 45.8 % of 989.5 TFLOPS): 268.4 MB of K and V + 1.0 MB
    # of Q and O at 2.430 TB/s = 110.9 µs, + 9.885 µs + 64 x 0.0478 µs = 123.8 µs for the layer.
    from profiler import ModelSpec, RooflineCostModel

    device = get_device_spec("h100-sxm")
    cost = RooflineCostModel(ModelSpec("one-layer", 1, 4096, 32, 8, 128, 14336, 1000, 8192), device)
    kv_bytes = 64 * 1024 * (2 * 8 * 128 * 2)  # K and V of 1,024 tokens, bf16
    qo_bytes = 64 * 2 * 32 * 128 * 2
    memory_s = (kv_bytes + qo_bytes) / (3.35e12 * 0.7255)
    expected = memory_s + 9.885e-6 + 64 * 0.0478e-6
    parts = cost.breakdown(np.ones(64), np.full(64, 1023), np.zeros(64, bool))
    assert parts["attention_decode_s"] == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(123.82e-6, rel=1e-4)
