"""Fit the roofline's per-device efficiencies to AIConfigurator's measured vLLM kernel tables.

Source tables (ai-dynamo/aiconfigurator, `aic-core/src/aiconfigurator_core/systems/data/<system>/`,
commit 095f58a, Apache-2.0; copies in `../shared/profiles/aiconfigurator/`, never committed):

- `gemm/vllm/<version>/gemm_perf.parquet`: one vLLM `RowParallelLinear` (k in, n out, no bias)
  applied to an (m × k) input, timed under a CUDA graph. Columns m, n, k (elements), gemm_dtype,
  latency in **milliseconds per GEMM** (upstream `collector/vllm/collect_gemm.py`:
  `results["latency_ms"] / outside_loop_count`). Only the `bfloat16` rows are fitted.
  Hand check, h100_sxm row (m, n, k) = (32768, 65536, 12288): 2 m n k = 5.28e16 FLOP in
  63.75 ms = 829 TFLOP/s, 84 % of the 989.5 TFLOPS dense peak.
- `comm/vllm/<version>/custom_allreduce_perf.parquet`: `tensor_model_parallel_all_reduce` over
  num_gpus GPUs; message_size is the tensor's **element count** (bf16, 2 bytes each: upstream
  `collector/collect_all_reduce.py` builds `torch.ones(shape, dtype)` of `size` elements),
  latency in **milliseconds per call** (CUDA-event time / runs / repeats). Only the
  `vllm_graph` rows (captured in a CUDA graph, as vLLM V1 runs its steps) are fitted.

Fitted, per device (against the datasheet figures of its `profiler/data/devices/<name>.yaml`):
- GEMM: t = max(2 m n k / (peak × gemm_flops), (m k + k n + m n) × 2 / (bandwidth ×
  memory_bandwidth)) + kernel_latency, by least squares on log(predicted / measured)
  (`profiler.roofline_tuning.tune_roofline`), so every row counts by its relative error.
- All-reduce, per GPU count n: t = latency + 2 (n − 1) / n × bytes / (link bandwidth ×
  link_bandwidth), the same log least squares.

Run `python -m profiler.roofline_fit ../shared/profiles/aiconfigurator` to rewrite
`profiler/data/roofline_fits.yaml` (the coefficients and their in-sample errors).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from profiler.device_spec import BUILTIN_DEVICES, DeviceSpec

# AIConfigurator system folder -> built-in device name.
AIC_SYSTEMS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200",
               "rtx_pro_6000_server": "rtx-pro-6000", "l40s": "l40s", "a100_sxm": "a100-80gb"}
_BF16_BYTES = 2


def _table(system_dir: Path, kind: str, name: str) -> tuple[Path, str]:
    """The one parquet file `<system>/<kind>/vllm/<version>/<name>.parquet` and its version."""
    paths = sorted((system_dir / kind / "vllm").glob(f"*/{name}.parquet"))
    if len(paths) != 1:
        raise ValueError(f"{system_dir}: expected one {kind}/vllm/<version>/{name}.parquet, found {len(paths)}")
    return paths[0], paths[0].parent.name


def read_gemm_rows(system_dir: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]:
    """(m, n, k, latency_s, vLLM version) of the bf16 rows of a system's gemm_perf table.

    Raises:
        ValueError: the table is missing, lacks a column, or holds a latency that is not > 0.
    """
    import pandas as pd

    path, version = _table(system_dir, "gemm", "gemm_perf")
    frame = pd.read_parquet(path)
    _require(path, frame, ("gemm_dtype", "m", "n", "k", "latency"))
    frame = frame[frame["gemm_dtype"] == "bfloat16"]
    latency_s = frame["latency"].to_numpy(np.float64) * 1e-3  # ms -> s
    if not len(frame) or not (latency_s > 0).all():
        raise ValueError(f"{path}: column latency: needs bf16 rows with latencies > 0")
    m, n, k = (frame[c].to_numpy(np.float64) for c in ("m", "n", "k"))
    return m, n, k, latency_s, version


def read_all_reduce_rows(system_dir: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """(num_gpus, bytes, latency_s, vLLM version) of the graph-mode bf16 all-reduce rows.

    Raises:
        ValueError: the table is missing, lacks a column, or holds a latency that is not > 0.
    """
    import pandas as pd

    path, version = _table(system_dir, "comm", "custom_allreduce_perf")
    frame = pd.read_parquet(path)
    _require(path, frame, ("backend", "allreduce_dtype", "num_gpus", "message_size", "latency"))
    frame = frame[(frame["backend"] == "vllm_graph") & (frame["allreduce_dtype"] == "bfloat16")]
    latency_s = frame["latency"].to_numpy(np.float64) * 1e-3  # ms -> s
    if not len(frame) or not (latency_s > 0).all():
        raise ValueError(f"{path}: column latency: needs vllm_graph bf16 rows with latencies > 0")
    num_bytes = frame["message_size"].to_numpy(np.float64) * _BF16_BYTES  # elements -> bytes
    return frame["num_gpus"].to_numpy(np.int64), num_bytes, latency_s, version


def _require(path: Path, frame, columns: tuple[str, ...]) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; has {list(frame.columns)}")


def gemm_terms(device: DeviceSpec, m, n, k) -> tuple[np.ndarray, np.ndarray]:
    """(compute s, memory s) of bf16 GEMMs at the device's full datasheet rates: 2 m n k / peak
    and (m k + k n + m n) × 2 / bandwidth, as `profiler.roofline.gemm_time_s` prices them."""
    m, n, k = (np.asarray(a, dtype=np.float64) for a in (m, n, k))
    return (2.0 * m * n * k / device.peak_bf16_flops,
            (m * k + k * n + m * n) * _BF16_BYTES / device.mem_bandwidth_bytes_per_s)


def ring_factor(tp) -> np.ndarray:
    """2 (n − 1) / n: the fraction of the buffer each link carries in a ring all-reduce."""
    tp = np.asarray(tp, dtype=np.float64)
    return 2.0 * (tp - 1.0) / tp


def fit_gemm(device: DeviceSpec, m, n, k, latency_s) -> tuple[float, float, float]:
    """(gemm_flops efficiency, memory_bandwidth efficiency, kernel_latency_s) minimising the
    squared log error of the roofline against the measured `latency_s` (arrays, seconds)."""
    from profiler.roofline_tuning import tune_roofline

    t_c, t_m = gemm_terms(device, m, n, k)
    tuned = tune_roofline(np.full(len(t_c), "gemm"), t_c, t_m, latency_s)
    return tuned.flops_efficiency, tuned.bandwidth_efficiency, tuned.kernel_latency_s


def fit_all_reduce(device: DeviceSpec, tp: int, num_bytes, latency_s) -> tuple[float, float]:
    """(latency_s, link bandwidth efficiency) of one TP degree's all-reduces, minimising the
    squared log error of latency + 2 (tp − 1) / tp × bytes / (link bandwidth × efficiency)."""
    from scipy.optimize import least_squares

    t_link = ring_factor(tp) * np.asarray(num_bytes) / device.interconnect_bandwidth_bytes_per_s
    y = np.asarray(latency_s)

    def log_error(params: np.ndarray) -> np.ndarray:
        return np.log((params[0] + t_link / params[1]) / y)

    result = least_squares(log_error, [y.min(), 0.8], bounds=([0.0, 0.01], [1e-3, 2.0]), x_scale=[1e-6, 0.1])
    return float(result.x[0]), float(result.x[1])


def relative_errors(predicted, measured) -> dict[str, float]:
    """MAPE, median and 90th percentile of |predicted / measured − 1|, in percent, and the row count."""
    err = np.abs(np.asarray(predicted) / np.asarray(measured) - 1.0) * 100.0
    return {"rows": int(err.size), "mape_pct": round(float(err.mean()), 2),
            "median_pct": round(float(np.median(err)), 2), "p90_pct": round(float(np.quantile(err, 0.9)), 2)}


def fit_system(system_dir: Path, device: DeviceSpec) -> dict:
    """The `roofline_fits.yaml` entry of one AIConfigurator system: efficiencies, latencies (µs),
    the per-TP all-reduce terms and the in-sample errors of each fit."""
    m, n, k, gemm_s, version = read_gemm_rows(system_dir)
    flops_eff, bw_eff, latency_s = fit_gemm(device, m, n, k, gemm_s)
    t_c, t_m = gemm_terms(device, m, n, k)
    predicted = np.maximum(t_c / flops_eff, t_m / bw_eff) + latency_s
    entry = {"system": system_dir.name, "engine": f"vLLM {version}",
             "gemm_flops": round(flops_eff, 4), "memory_bandwidth": round(bw_eff, 4),
             "kernel_latency_us": round(latency_s * 1e6, 3), "all_reduce": {}, "error": {}}
    entry["error"].update({f"gemm_{key}": value for key, value in relative_errors(predicted, gemm_s).items()})
    tps, num_bytes, ar_s, _ = read_all_reduce_rows(system_dir)
    for tp in sorted(set(tps.tolist())):
        rows = tps == tp
        ar_latency_s, link_eff = fit_all_reduce(device, tp, num_bytes[rows], ar_s[rows])
        entry["all_reduce"][tp] = {"latency_us": round(ar_latency_s * 1e6, 3), "link_bandwidth": round(link_eff, 4)}
        ar_pred = ar_latency_s + ring_factor(tp) * num_bytes[rows] / (device.interconnect_bandwidth_bytes_per_s * link_eff)
        entry["error"].update({f"all_reduce_tp{tp}_{key}": value
                               for key, value in relative_errors(ar_pred, ar_s[rows]).items()})
    return entry


_HEADER = """\
# Roofline efficiencies per device, fitted to AIConfigurator's measured vLLM kernel tables by
# `python -m profiler.roofline_fit ../shared/profiles/aiconfigurator` (profiler/roofline_fit.py
# states the units and the formulas). Derived figures only; the tables are not shipped.
# Source: ai-dynamo/aiconfigurator, aic-core/src/aiconfigurator_core/systems/data/<system>/,
# commit 095f58a (2026-08-21); licence Apache-2.0. Engine: vLLM version per device below.
# Errors are in-sample, percent of the measured time.
"""


def main(argv: list[str]) -> int:
    """`python -m profiler.roofline_fit AIC_DIR [--out FILE]`: fit every known system found."""
    import yaml

    from profiler.device_file import FITS_FILE

    if not argv or argv[0].startswith("-"):
        print("usage: python -m profiler.roofline_fit AIC_DIR [--out FILE]", file=sys.stderr)
        return 2
    root = Path(argv[0])
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else FITS_FILE
    devices = {}
    for system, name in AIC_SYSTEMS.items():
        if (root / system).is_dir():
            devices[name] = fit_system(root / system, BUILTIN_DEVICES[name])
            print(name, devices[name]["gemm_flops"], devices[name]["memory_bandwidth"],
                  devices[name]["kernel_latency_us"], devices[name]["error"]["gemm_mape_pct"])
    text = _HEADER + yaml.safe_dump({"source": "ai-dynamo/aiconfigurator@095f58a", "licence": "Apache-2.0",
                                     "devices": devices}, sort_keys=False)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(out)  # atomic
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
