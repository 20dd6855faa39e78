"""Fit the roofline's per-device efficiencies to AIConfigurator's measured vLLM kernel tables.

Source tables (ai-dynamo/aiconfigurator, `aic-core/src/aiconfigurator_core/systems/data/<system>/`,
commit 095f58a, Apache-2.0; copies in `../shared/profiles/aiconfigurator/`, never committed):

- `gemm/vllm/<version>/gemm_perf.parquet`: one vLLM `RowParallelLinear` (k in, n out, no bias)
  applied to an (m × k) input, timed under a CUDA graph. Columns m, n, k (elements), gemm_dtype,
  latency in **milliseconds per GEMM** (upstream `collector/vllm/collect_gemm.py`:
  `results["latency_ms"] / outside_loop_count`). The `bfloat16` rows give the GEMM terms, the
  `fp8` rows (per-tensor FP8, activations quantised in the call) the `fp8_gemm` terms.
  Hand check, h100_sxm row (m, n, k) = (32768, 65536, 12288): 2 m n k = 5.28e16 FLOP in
  63.75 ms = 829 TFLOP/s, 84 % of the 989.5 TFLOPS dense peak.
- `comm/vllm/<version>/custom_allreduce_perf.parquet`: `tensor_model_parallel_all_reduce` over
  num_gpus GPUs; message_size is the tensor's **element count** (bf16, 2 bytes each: upstream
  `collector/collect_all_reduce.py` builds `torch.ones(shape, dtype)` of `size` elements),
  latency in **milliseconds per call** (CUDA-event time / runs / repeats). Only the
  `vllm_graph` rows (captured in a CUDA graph, as vLLM V1 runs its steps) are fitted.
- `attention/vllm/<version>/{context,generation}_attention_perf.parquet`: one vLLM attention
  backend call (upstream `collector/vllm/collect_attn.py`, KV blocks of 64 tokens) over
  batch_size sequences, latency in **milliseconds**: context rows run isl query tokens each with
  no cached context; generation rows one query token over `step` cached tokens. Only bf16-KV rows
  without a sliding window are fitted.

The tables are read by the importer's reader (`profiler.importers.aiconfigurator.read_source_table`:
the newest version folder, the columns checked, rows of NaN or non-positive latency left out) and
converted by its `convert_*` functions (ms to s, element counts to bytes).

Rows measured faster than the datasheet allows (below max(FLOPs / peak, bytes / bandwidth):
weights served from L2 cache, as the collector reruns the same few kernels, or mis-timed) are
left out and counted (`*_rows_faster_than_datasheet`): 4,930 of h200_sxm's 15,017 context
attention rows, 1,499 of l40s's 9,240 GEMM rows.

Fitted, per device (against the datasheet figures of its `profiler/data/devices/<name>.yaml`):
- GEMM: t = max(2 m n k / (peak × gemm_flops), (m k + k n + m n) × 2 / (bandwidth ×
  memory_bandwidth)) + kernel_latency, by least squares on log(predicted / measured)
  (`profiler.roofline_tuning.tune_roofline`), so every row counts by its relative error.
- Attention (own terms, `fit_attention`): the roofline at its own FLOP/s and bandwidth
  fractions + a latency per call + a cost per sequence.
- All-reduce, per GPU count n: t = latency + 2 (n − 1) / n × bytes / (link bandwidth ×
  link_bandwidth), the same log least squares.

Run `python -m profiler.roofline_fit ../shared/profiles/aiconfigurator` to rewrite
`profiler/data/roofline_fits.yaml` (the coefficients and their in-sample errors).
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np

from profiler.device_spec import BUILTIN_DEVICES, AttentionFit, DeviceSpec
from profiler.importers.aiconfigurator import MS, SYSTEMS, convert_all_reduce, convert_context_attention, \
    convert_decode_attention, read_source_table

AIC_SYSTEMS = SYSTEMS  # AIConfigurator system folder -> built-in device name
_BF16_BYTES = 2
_DTYPE_BYTES = {"bfloat16": 2, "fp8": 1}


def _source(system_dir: Path, name: str):
    """(rows, file, vLLM version) of one table (`read_source_table`); the fit needs every table.

    Raises:
        ValueError: the system has no such table (or `MeasuredTableError`, a ValueError: a column
            missing, no usable latency; naming the file).
    """
    found = read_source_table(system_dir, name)
    if found is None:
        raise ValueError(f"{system_dir}: no {name} table under */vllm/<version>/ (the layout of "
                         "profiler/importers/aiconfigurator.py)")
    rows, path = found
    return rows, path, path.parent.name


def read_gemm_rows(system_dir: Path, gemm_dtype: str = "bfloat16") -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                           np.ndarray, str]:
    """(m, n, k, latency_s, vLLM version) of the `gemm_dtype` rows ("bfloat16", "fp8": per-tensor
    FP8 weights and activations) of a system's gemm_perf table, in the file's order (the
    importer's `convert_gemm` keeps bf16 only, sorted).

    Raises:
        ValueError: the table is missing, lacks a column, or has no `gemm_dtype` row with a
            latency > 0.
    """
    table, path, version = _source(system_dir, "gemm")
    frame = table[table["gemm_dtype"] == gemm_dtype]
    if not len(frame):
        raise ValueError(f"{path}: column gemm_dtype: needs {gemm_dtype} rows with latencies > 0")
    latency_s = frame["latency"].to_numpy(np.float64) * MS
    m, n, k = (frame[c].to_numpy(np.float64) for c in ("m", "n", "k"))
    return m, n, k, latency_s, version


def read_all_reduce_rows(system_dir: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """(num_gpus, bytes, latency_s, vLLM version) of the graph-mode bf16 all-reduce rows
    (`convert_all_reduce`: message_size elements x 2 bytes).

    Raises:
        ValueError: the table is missing, lacks a column, or has no graph-mode bf16 row with a
            latency > 0.
    """
    table, path, version = _source(system_dir, "all_reduce")
    rows = convert_all_reduce(table, path)
    rows = rows[rows["mode"] == "graph"]
    if not len(rows):
        raise ValueError(f"{path}: column backend: needs vllm_graph bf16 rows with latencies > 0")
    return (rows["num_gpus"].to_numpy(np.int64), rows["size_bytes"].to_numpy(np.float64),
            rows["time_s"].to_numpy(np.float64), version)


def gemm_terms(device: DeviceSpec, m, n, k, dtype_bytes: int = _BF16_BYTES) -> tuple[np.ndarray, np.ndarray]:
    """(compute s, memory s) of GEMMs at the device's full datasheet rates: 2 m n k /
    peak_flops(dtype_bytes) and (m k + k n + m n) × dtype_bytes / bandwidth, as
    `profiler.roofline.gemm_time_s` prices them."""
    m, n, k = (np.asarray(a, dtype=np.float64) for a in (m, n, k))
    return (2.0 * m * n * k / device.peak_flops(dtype_bytes),
            (m * k + k * n + m * n) * dtype_bytes / device.mem_bandwidth_bytes_per_s)


def ring_factor(tp) -> np.ndarray:
    """2 (n − 1) / n: the fraction of the buffer each link carries in a ring all-reduce."""
    tp = np.asarray(tp, dtype=np.float64)
    return 2.0 * (tp - 1.0) / tp


def fit_gemm(device: DeviceSpec, m, n, k, latency_s, dtype_bytes: int = _BF16_BYTES) -> tuple[float, float, float]:
    """(gemm_flops efficiency, memory_bandwidth efficiency, kernel_latency_s) minimising the
    squared log error of the roofline against the measured `latency_s` (arrays, seconds)."""
    from profiler.roofline_tuning import tune_roofline

    t_c, t_m = gemm_terms(device, m, n, k, dtype_bytes)
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


def physical_gemm_rows(system_dir: Path, device: DeviceSpec, gemm_dtype: str = "bfloat16"):
    """`read_gemm_rows` without the rows measured faster than the datasheet allows (latency below
    max(2 m n k / peak, bytes / bandwidth): weights served from L2 cache, as the collector reruns
    the same few GEMMs, or mis-timed): (m, n, k, latency_s, version, rows dropped)."""
    m, n, k, latency_s, version = read_gemm_rows(system_dir, gemm_dtype)
    t_c, t_m = gemm_terms(device, m, n, k, _DTYPE_BYTES[gemm_dtype])
    keep = latency_s >= np.maximum(t_c, t_m)
    return m[keep], n[keep], k[keep], latency_s[keep], version, int((~keep).sum())


def _has_gemm_dtype(system_dir: Path, gemm_dtype: str) -> bool:
    table, _, _ = _source(system_dir, "gemm")
    return bool((table["gemm_dtype"] == gemm_dtype).any())


def _fit_fp8_gemm(system_dir: Path, device: DeviceSpec) -> tuple[dict, dict]:
    """The `fp8_gemm` terms (flops, memory_bandwidth, kernel_latency_us) fitted on the per-tensor
    FP8 rows at the FP8 peak and 1-byte operands plus the activations' quantisation pass, as
    `profiler.roofline.gemm_time_s` prices them, and their errors."""
    from scipy.optimize import least_squares

    from profiler.roofline import FP8_ACTIVATION_QUANT_BYTES

    m, n, k, latency_s, _, dropped = physical_gemm_rows(system_dir, device, "fp8")
    t_c, t_m = gemm_terms(device, m, n, k, 1)
    t_quant = FP8_ACTIVATION_QUANT_BYTES * m * k / device.mem_bandwidth_bytes_per_s  # as gemm_time_s

    def fp8_time_s(p: np.ndarray) -> np.ndarray:
        return np.maximum(t_c / p[0], t_m / p[1]) + t_quant / p[1] + p[2]

    result = least_squares(lambda p: np.log(fp8_time_s(p) / latency_s), [0.5, 0.5, 5e-6],
                           bounds=([0.01, 0.01, 0.0], [1.0, 1.0, 1e-3]), x_scale=[0.1, 0.1, 1e-6])
    flops_eff, bw_eff, kernel_s = (float(v) for v in result.x)
    predicted = fp8_time_s(result.x)
    errors = {f"fp8_gemm_{key}": value for key, value in relative_errors(predicted, latency_s).items()}
    errors["fp8_gemm_rows_faster_than_datasheet"] = dropped
    return ({"flops": round(flops_eff, 4), "memory_bandwidth": round(bw_eff, 4),
             "kernel_latency_us": round(kernel_s * 1e6, 3)}, errors)


def physical_attention_rows(system_dir: Path, device: DeviceSpec, phase: str):
    """`read_attention_rows` without the rows faster than the datasheet allows (as
    `physical_gemm_rows`): (frame, rows dropped)."""
    frame = read_attention_rows(system_dir, phase)
    t_c, t_m = attention_terms(device, frame)
    keep = frame["time_s"].to_numpy() >= np.maximum(t_c, t_m)
    return frame[keep], int((~keep).sum())


def fit_system(system_dir: Path, device: DeviceSpec) -> dict:
    """The `roofline_fits.yaml` entry of one AIConfigurator system: efficiencies, latencies (µs),
    the per-TP all-reduce terms and the in-sample errors of each fit."""
    import pandas as pd

    m, n, k, gemm_s, version, gemm_dropped = physical_gemm_rows(system_dir, device)
    flops_eff, bw_eff, latency_s = fit_gemm(device, m, n, k, gemm_s)
    t_c, t_m = gemm_terms(device, m, n, k)
    predicted = np.maximum(t_c / flops_eff, t_m / bw_eff) + latency_s
    entry = {"system": system_dir.name, "engine": f"vLLM {version}",
             "gemm_flops": round(flops_eff, 4), "memory_bandwidth": round(bw_eff, 4),
             "kernel_latency_us": round(latency_s * 1e6, 3), "all_reduce": {}, "error": {}}
    entry["error"].update({f"gemm_{key}": value for key, value in relative_errors(predicted, gemm_s).items()})
    entry["error"]["gemm_rows_faster_than_datasheet"] = gemm_dropped
    if device.peak_fp8_flops is not None and _has_gemm_dtype(system_dir, "fp8"):
        entry["fp8_gemm"], fp8_errors = _fit_fp8_gemm(system_dir, device)
        entry["error"].update(fp8_errors)
    tps, num_bytes, ar_s, _ = read_all_reduce_rows(system_dir)
    for tp in sorted(set(tps.tolist())):
        rows = tps == tp
        ar_latency_s, link_eff = fit_all_reduce(device, tp, num_bytes[rows], ar_s[rows])
        entry["all_reduce"][tp] = {"latency_us": round(ar_latency_s * 1e6, 3), "link_bandwidth": round(link_eff, 4)}
        ar_pred = ar_latency_s + ring_factor(tp) * num_bytes[rows] / (device.interconnect_bandwidth_bytes_per_s * link_eff)
        entry["error"].update({f"all_reduce_tp{tp}_{key}": value
                               for key, value in relative_errors(ar_pred, ar_s[rows]).items()})
    frames = {}
    for phase in ("context", "generation"):
        frames[phase], entry["error"][f"{phase}_attention_rows_faster_than_datasheet"] = \
            physical_attention_rows(system_dir, device, phase)
    attention = fit_attention(device, pd.concat(list(frames.values())))
    entry["attention"] = {"flops": round(attention.flops_efficiency, 4),
                          "memory_bandwidth": round(attention.bandwidth_efficiency, 4),
                          "latency_us": round(attention.latency_s * 1e6, 3),
                          "per_sequence_us": round(attention.per_sequence_s * 1e6, 4)}
    rounded = AttentionFit(entry["attention"]["flops"], entry["attention"]["memory_bandwidth"],
                           entry["attention"]["latency_us"] / 1e6, entry["attention"]["per_sequence_us"] / 1e6)
    entry["error"].update(attention_errors(frames, dataclasses.replace(device, attention=rounded)))
    return entry


def read_attention_rows(system_dir: Path, phase: str):
    """Rows of a system's `<phase>_attention_perf` table (phase "context" or "generation") with a
    bf16 KV cache and no sliding window (the importer's `convert_context_attention` /
    `convert_decode_attention`): a pandas frame with num_heads, num_kv_heads, head_dim,
    batch_size, query_tokens, cached_tokens and time_s (seconds).

    Units (upstream `collector/vllm/collect_attn.py`): one vLLM attention backend call over
    batch_size sequences, latency in ms. Context rows: isl query tokens each, no cached context.
    Generation rows: one query token each over `step` cached tokens (the query attends to
    step + 1 keys).

    Raises:
        ValueError: the table is missing or lacks a column (naming the file).
    """
    if phase == "context":
        rows = convert_context_attention(_source(system_dir, "context_attention")[0])
        return rows.assign(cached_tokens=0)
    rows = convert_decode_attention(_source(system_dir, "decode_attention")[0])
    return rows.assign(query_tokens=1).rename(columns={"kv_tokens": "cached_tokens"})


def _attention_shapes(frame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(query tokens q, cached tokens c, sequences b) per row of `read_attention_rows`' frame."""
    return tuple(frame[k].to_numpy(np.float64) for k in ("query_tokens", "cached_tokens", "batch_size"))


def attention_terms(device: DeviceSpec, frame) -> tuple[np.ndarray, np.ndarray]:
    """(compute s, memory s) of each attention row at the datasheet rates (see `fit_attention`)."""
    q, c, b = _attention_shapes(frame)
    heads, kv_heads, d = (frame[k].to_numpy(np.float64) for k in ("num_heads", "num_kv_heads", "head_dim"))
    t_c = 4.0 * heads * d * b * (q * c + q * (q + 1) / 2) / device.peak_bf16_flops
    t_m = (2 * kv_heads * d * _BF16_BYTES * b * (c + q) + 2 * heads * d * _BF16_BYTES * b * q) / device.mem_bandwidth_bytes_per_s
    return t_c, t_m


def fit_attention(device: DeviceSpec, frame) -> AttentionFit:
    """The attention terms minimising the squared log error over both phases' rows: per call,
    max(4 H d × b (q c + q (q + 1) / 2) / (peak × flops), (2 KV d × 2 B × b (c + q) + 2 H d × 2 B
    × b q) / (bandwidth × memory_bandwidth)) + latency + per_sequence × b, as
    `RooflineCostModel._attention_group_s` prices one layer (H, KV: query and KV heads, d: head
    dim, bf16)."""
    from scipy.optimize import least_squares

    t_c, t_m = attention_terms(device, frame)
    _, _, b = _attention_shapes(frame)
    y = frame["time_s"].to_numpy()

    def log_error(p: np.ndarray) -> np.ndarray:
        return np.log((np.maximum(t_c / p[0], t_m / p[1]) + p[2] + p[3] * b) / y)

    result = least_squares(log_error, [0.5, 0.7, 5e-6, 1e-7], bounds=([0.01, 0.01, 0.0, 0.0], [1.0, 1.0, 1e-3, 1e-4]),
                           x_scale=[0.1, 0.1, 1e-6, 1e-7])
    return AttentionFit(*(float(v) for v in result.x))


def attention_errors(frames: dict, device: DeviceSpec) -> dict[str, float]:
    """The roofline's attention kernel (`RooflineCostModel._attention_group_s`, one layer at
    TP1, the device's attention terms) against measured attention rows (`frames`: phase ->
    rows); MAPE, median and p90 in percent per phase."""
    from profiler.model_spec import ModelSpec
    from profiler.roofline import RooflineCostModel

    errors: dict[str, float] = {}
    for phase, frame in frames.items():
        predicted = np.empty(len(frame))
        groups = frame.groupby(["num_heads", "num_kv_heads", "head_dim"]).indices
        for (heads, kv_heads, head_dim), index in groups.items():
            shape = ModelSpec("attention", 1, int(heads * head_dim), int(heads), int(kv_heads), int(head_dim),
                              1, 1, 1 << 20)
            cost = RooflineCostModel(shape, device)
            q, c, b = _attention_shapes(frame.iloc[index])
            predicted[index] = [cost._attention_group_s(bi * (qi * ci + qi * (qi + 1) / 2), bi * (ci + qi), bi * qi,
                                                        int(bi)) for bi, qi, ci in zip(b, q, c)]
        errors.update({f"{phase}_attention_{key}": value
                       for key, value in relative_errors(predicted, frame["time_s"].to_numpy()).items()})
    return errors


_HEADER = """\
# Roofline efficiencies per device, fitted to AIConfigurator's measured vLLM kernel tables by
# `python -m profiler.roofline_fit ../shared/profiles/aiconfigurator` (profiler/roofline_fit.py
# states the units and the formulas). Derived figures only; the tables are not shipped.
# Source: ai-dynamo/aiconfigurator, aic-core/src/aiconfigurator_core/systems/data/<system>/,
# commit 095f58a (2026-08-21); licence Apache-2.0. Engine: vLLM version per device below.
# Errors: in-sample, percent of the measured time.
"""


def main(argv: list[str]) -> int:
    """`python -m profiler.roofline_fit AIC_DIR [--out FILE]`: fit every known system found."""
    import yaml

    from profiler.atomic_write import write_text_whole
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
    write_text_whole(out, text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
