"""Import AIConfigurator's per-system vLLM kernel tables (ai-dynamo/aiconfigurator, Apache-2.0,
`aic-core/src/aiconfigurator_core/systems/<system>/`; copies in ../shared/profiles/aiconfigurator/).

Layout read: `SYSTEM/system.yaml` and `SYSTEM/{gemm,attention,comm}/vllm/<version>/`:

- `gemm_perf.parquet`: columns m, n, k, gemm_dtype, latency. One vLLM `RowParallelLinear`
  forward (x of m × k, weight k → n, no bias, TP disabled) captured in a CUDA graph; `latency`
  is **milliseconds** per GEMM (collector `collector/vllm/collect_gemm.py`: `latency_ms` of the
  timed loop / the number of GEMMs in it). `gemm_dtype` bfloat16 → `gemm`; `fp8` → `gemm_fp8`
  (vLLM `Fp8Config` with per-tensor static scales: the activations' FP8 quantisation and CUTLASS
  `scaled_mm`, graph-captured); `fp8_block` → `gemm_fp8_block` (128 × 128 weight blocks, dynamic
  per-token-group activation quantisation, DeepGEMM forced, timed **without** a CUDA graph, one
  GEMM per timed call: small-m rows include launch overhead a graph-captured decode does not pay).
  Other dtypes (`nvfp4`) are not imported.
- `context_attention_perf.parquet`: batch_size, isl, num_heads, num_key_value_heads, head_dim,
  kv_cache_dtype, window_size, latency. vLLM's attention backend (`impl.forward`, the KV write
  included) over `batch_size` fresh prefills of `isl` tokens each (seq_lens = query_lens = isl,
  `collector/vllm/collect_attn.py`); **milliseconds** per call; heads are what one GPU runs.
- `generation_attention_perf.parquet`: the same columns plus `step`: `batch_size` decodes of one
  query token over sequences of `step` tokens (seq_lens = step, query_lens = 1: the new token is
  counted in `step`, which the collector records as s − 1 for its grid s = 2, 4, ..., 131072);
  **milliseconds**.
- `custom_allreduce_perf.parquet`: num_gpus, message_size, backend (vllm_graph | vllm_eager),
  allreduce_dtype, latency: vLLM's `tensor_model_parallel_all_reduce` of a bf16 tensor of
  `message_size` **elements** (the collector's `get_input_shape_and_comm_size` makes a
  [size / 4096, 4096] tensor), graph-captured or eager; **milliseconds** per all-reduce.
  Imported as size_bytes = 2 × message_size.

Imported: bf16, fp8 and fp8_block GEMMs; attention with a bf16 KV cache (`context_attention`,
`decode_attention`) and with an fp8 one (`*_fp8_kv`), no sliding window (window_size 0; some
systems' files have no window_size column: all their rows are full-window). Rows faster than the
datasheet roofline of system.yaml (`faster_than_datasheet`) are dropped and counted in
`meta["dropped_faster_than_datasheet"]`: h200_sxm's context attention from 1,536 tokens on runs
up to 2.6× under its compute bound (its H100 twin sits 1.3× and more over it), and L40S's and
RTX PRO 6000's small GEMMs and decodes read L2-resident operands; the cost model fills the holes
from measured neighbours by the roofline's ratio and counts steps that touch them.
Rows with NaN or non-positive latency or size (m, n, k, tokens, heads, GPUs: `_COUNTS`) are dropped
and counted (`meta["dropped_rows"]`); a missing column, a cell that is not a number (naming its row)
or a file without one usable row is an error naming the file and column. The device is the GPU the
files' `device` column or the folder name records; `--device` only names one they do not
(`profiler/importers/source_device.py`).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from profiler.importers.aiconfigurator_moe import SOURCE_COLUMNS as MOE_SOURCE_COLUMNS
from profiler.importers.aiconfigurator_moe import convert_moe, moe_faster_than_datasheet
from profiler.importers.source_device import GPU_NAMES, recorded_device, resolve_device
from profiler.importers.source_files import read_yaml_mapping, usable_rows
from profiler.measured.tables import MeasuredTableError, MeasuredTables, require_columns

SOURCE = {"name": "aiconfigurator", "repository": "ai-dynamo/aiconfigurator",
          "path": "aic-core/src/aiconfigurator_core/systems/", "commit": "095f58a"}
LICENCE = "Apache-2.0"
MS = 1e-3  # the tables' latency unit (milliseconds) in seconds
BF16_BYTES = 2

# AIConfigurator system folder → built-in device key.
SYSTEMS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200",
           "rtx_pro_6000_server": "rtx-pro-6000", "l40s": "l40s", "a100_sxm": "a100-80gb"}

_FILES = {  # table → (folder, file, columns it needs)
    "gemm": ("gemm", "gemm_perf.parquet", ("m", "n", "k", "gemm_dtype", "latency")),
    "context_attention": ("attention", "context_attention_perf.parquet",
                          ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim",
                           "kv_cache_dtype", "latency")),
    "decode_attention": ("attention", "generation_attention_perf.parquet",
                         ("batch_size", "step", "num_heads", "num_key_value_heads", "head_dim",
                          "kv_cache_dtype", "latency")),
    "all_reduce": ("comm", "custom_allreduce_perf.parquet",
                   ("num_gpus", "message_size", "backend", "allreduce_dtype", "latency")),
    "moe": ("moe", "moe_perf.parquet", MOE_SOURCE_COLUMNS),  # profiler/importers/aiconfigurator_moe.py
}
_ATTENTION_COUNTS = ("batch_size", "num_heads", "num_key_value_heads", "head_dim")
_COUNTS = {  # table → its size columns: a row where one is 0 (or NaN) times nothing and is dropped
    "gemm": ("m", "n", "k"), "context_attention": ("isl", *_ATTENTION_COUNTS),
    "decode_attention": ("step", *_ATTENTION_COUNTS), "all_reduce": ("num_gpus", "message_size"),
    "moe": ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"),
}


def _version_dir(system: Path, folder: str) -> Path | None:
    """`SYSTEM/<folder>/vllm/<version>/`, the only (or newest) version there, or None."""
    root = system / folder / "vllm"
    versions = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    return versions[-1] if versions else None


def read_source_table(system: Path, name: str, dropped: dict | None = None) -> tuple[pd.DataFrame, Path] | None:
    """The rows of one source table (`name`: gemm, context_attention, decode_attention,
    all_reduce, moe) as AIConfigurator stores them, in its newest `SYSTEM/<folder>/vllm/<version>/`,
    without the rows of NaN or non-positive latency or size (`_COUNTS`: a GEMM of m = 0), and the
    file; None when the system has none.
    The one reader of these files: `import_aiconfigurator` and `profiler.roofline_fit` use it.

    Args:
        dropped: counts the left-out rows by file name (`meta["dropped_rows"]`), when given.

    Raises:
        MeasuredTableError: a column the table needs is missing, a latency or size cell is not a
            number (or a size not a whole number; naming the row), or no row is usable (naming the
            file and column).
    """
    folder, file, columns = _FILES[name]
    version_dir = _version_dir(Path(system), folder)
    path = version_dir / file if version_dir else None
    if path is None or not path.is_file():
        return None
    table = require_columns(pd.read_parquet(path), columns, path)
    dropped = {} if dropped is None else dropped
    return usable_rows(table, path, dropped, times=("latency",), positive=_COUNTS[name]), path


# measured table → gemm_dtype rows it holds; attention table suffix → kv_cache_dtype rows.
GEMM_DTYPES = {"gemm": "bfloat16", "gemm_fp8": "fp8", "gemm_fp8_block": "fp8_block"}
KV_DTYPES = {"": "bfloat16", "_fp8_kv": "fp8"}
_ELEMENT_BYTES = {"bfloat16": 2, "fp8": 1, "fp8_block": 1}


def convert_gemm(table: pd.DataFrame, dtype: str = "bfloat16") -> pd.DataFrame:
    """`dtype` rows of `gemm_perf` (bfloat16, fp8, fp8_block) as (m, n, k, time_s): latency ms → s."""
    rows = table[table["gemm_dtype"] == dtype]
    out = pd.DataFrame({c: rows[c].astype(np.int64).to_numpy() for c in ("m", "n", "k")})
    out["time_s"] = rows["latency"].to_numpy(dtype=np.float64) * MS
    return out.sort_values(["n", "k", "m"], kind="stable").reset_index(drop=True)


def _attention_rows(table: pd.DataFrame, kv_dtype: str = "bfloat16") -> pd.DataFrame:
    """`kv_dtype`-KV rows without a sliding window (files without `window_size` have none)."""
    full_window = table["window_size"] == 0 if "window_size" in table else True
    return table[(table["kv_cache_dtype"] == kv_dtype) & full_window]


def _convert_attention(table: pd.DataFrame, length_column: str, length_key: str,
                       kv_dtype: str = "bfloat16") -> pd.DataFrame:
    rows = _attention_rows(table, kv_dtype)
    out = pd.DataFrame({"num_heads": rows["num_heads"], "num_kv_heads": rows["num_key_value_heads"],
                        "head_dim": rows["head_dim"], "batch_size": rows["batch_size"],
                        length_key: rows[length_column]}).astype(np.int64)
    out["time_s"] = rows["latency"].to_numpy(dtype=np.float64) * MS
    return out.reset_index(drop=True)


def convert_context_attention(table: pd.DataFrame, kv_dtype: str = "bfloat16") -> pd.DataFrame:
    """`kv_dtype`-KV (bfloat16 | fp8), full-window rows of `context_attention_perf` as (heads, kv
    heads, head_dim, batch_size, query_tokens = isl, time_s): latency ms → s."""
    return _convert_attention(table, "isl", "query_tokens", kv_dtype)


def convert_decode_attention(table: pd.DataFrame, kv_dtype: str = "bfloat16") -> pd.DataFrame:
    """`kv_dtype`-KV (bfloat16 | fp8), full-window rows of `generation_attention_perf` as (heads,
    kv heads, head_dim, batch_size, kv_tokens = step, time_s): latency ms → s."""
    return _convert_attention(table, "step", "kv_tokens", kv_dtype)


def convert_all_reduce(table: pd.DataFrame, path: Path | str = "custom_allreduce_perf.parquet") -> pd.DataFrame:
    """bf16 rows of `custom_allreduce_perf` as (num_gpus, mode, size_bytes, time_s): message_size
    elements × 2 bytes, latency ms → s, backend vllm_graph → graph, vllm_eager → eager.

    Raises:
        MeasuredTableError: a backend other than vllm_graph / vllm_eager (naming the file).
    """
    rows = table[table["allreduce_dtype"] == "bfloat16"]
    modes = {"vllm_graph": "graph", "vllm_eager": "eager"}
    unknown = sorted(set(rows["backend"]) - set(modes))
    if unknown:
        raise MeasuredTableError(f"{path}: column 'backend' has {unknown}; expected vllm_graph, vllm_eager")
    out = pd.DataFrame({"num_gpus": rows["num_gpus"].astype(np.int64).to_numpy(),
                        "mode": rows["backend"].map(modes).to_numpy(),
                        "size_bytes": rows["message_size"].astype(np.int64).to_numpy() * BF16_BYTES})
    out["time_s"] = rows["latency"].to_numpy(dtype=np.float64) * MS
    return out.reset_index(drop=True)


_CONVERTERS = {"gemm": convert_gemm, "context_attention": convert_context_attention,
               "decode_attention": convert_decode_attention, "all_reduce": convert_all_reduce, "moe": convert_moe}


def import_aiconfigurator(system_dir: str | Path, device: str | None = None) -> MeasuredTables:
    """Measured tables of one AIConfigurator system folder (e.g. `.../aiconfigurator/h100_sxm`).

    Args:
        system_dir: the system folder (holds system.yaml).
        device: built-in device key, for a system whose GPU the source does not record in a way
            this project knows (`SYSTEMS`, `source_device.GPU_NAMES`); by default the one recorded.

    Raises:
        MeasuredTableError: no system.yaml, system.yaml not valid YAML, an unknown system
            without `device`, a `device` that contradicts the GPU the folder name or the files'
            `device` column record (`source_device.resolve_device`), a table's file
            missing a column or usable row, a latency unit that does not hold (the largest GEMMs
            beating the datasheet bf16 peak in system.yaml by 2×, or the largest decodes reading
            their KV cache at twice its bandwidth), or no table found; messages name the file and
            column.
    """
    system = Path(system_dir)
    system_yaml = system / "system.yaml"
    if not system_yaml.is_file():
        raise MeasuredTableError(f"{system}: not an AIConfigurator system folder (no system.yaml)")
    gpu = _datasheet(system_yaml)
    tables, origins, dropped, versions, device_names = {}, {}, {}, set(), {}
    for name in _FILES:
        found = read_source_table(system, name, dropped)
        if found is None:
            continue
        raw, path = found
        converted = convert_all_reduce(raw, path) if name == "all_reduce" else _CONVERTERS[name](raw)
        if converted.empty:
            raise MeasuredTableError(f"{path}: no bf16 rows (columns gemm_dtype / kv_cache_dtype / allreduce_dtype)")
        tables[name] = converted
        origins[name] = {"from": str(path.relative_to(system.parent))}
        for extra, rows in _quantized_tables(name, raw).items():  # fp8 GEMMs, fp8-KV attention
            tables[extra] = rows
            origins[extra] = {"from": str(path.relative_to(system.parent))}
        versions.add(path.parent.name)
        if "device" in raw:
            for gpu_name in raw["device"].astype(str).unique().tolist():
                device_names.setdefault(gpu_name, f"{path.name} column 'device'")
    if not tables:
        raise MeasuredTableError(f"{system}: no gemm, attention or comm table under */vllm/<version>/")
    records = [*((what, gpu_name, GPU_NAMES.get(gpu_name)) for gpu_name, what in device_names.items()),
               (f"folder {system.name}", system.name, SYSTEMS.get(system.name))]
    device = resolve_device(device, recorded_device(records, str(system)), str(system),
                            f"unknown system {system.name!r}; pass --device (known systems: {sorted(SYSTEMS)})")
    if "gemm" in tables and gpu.get("bfloat16_tc_flops"):
        _check_gemm_unit(tables["gemm"], float(gpu["bfloat16_tc_flops"]), system / _FILES["gemm"][1])
    if "decode_attention" in tables and gpu.get("mem_bw"):
        _check_decode_unit(tables["decode_attention"], float(gpu["mem_bw"]), system / _FILES["decode_attention"][1])
    too_fast = {}
    if gpu.get("bfloat16_tc_flops") and gpu.get("mem_bw"):
        for name in [t for t in tables if t.startswith(("gemm", "context_attention", "decode_attention"))]:
            fp8 = name != "gemm" and name.startswith("gemm")
            # FP8 GEMMs against the FP8 peak (system.yaml fp8_tc_flops; twice bf16 where absent).
            peak = float(gpu.get("fp8_tc_flops") or 2 * float(gpu["bfloat16_tc_flops"])) if fp8 else float(gpu["bfloat16_tc_flops"])
            family = "gemm" if name.startswith("gemm") else name.removesuffix("_fp8_kv")
            keep = ~faster_than_datasheet(family, tables[name], peak, float(gpu["mem_bw"]),
                                          element_bytes=1 if fp8 or name.endswith("_fp8_kv") else BF16_BYTES)
            if not keep.all():
                too_fast[name if name not in _FILES else _FILES[name][1]] = int((~keep).sum())
                tables[name] = tables[name][keep].reset_index(drop=True)
        for name in [t for t in tables if t.startswith("moe")]:
            fp8 = name != "moe"  # FP8 experts against the FP8 peak and 1-byte weights
            peak = float(gpu.get("fp8_tc_flops") or 2 * float(gpu["bfloat16_tc_flops"])) if fp8 else float(gpu["bfloat16_tc_flops"])
            keep = ~moe_faster_than_datasheet(tables[name], peak, float(gpu["mem_bw"]), 1 if fp8 else BF16_BYTES)
            if not keep.all():
                too_fast[name if fp8 else _FILES["moe"][1]] = int((~keep).sum())
                tables[name] = tables[name][keep].reset_index(drop=True)
    meta = {
        "source": SOURCE, "licence": LICENCE, "engine": "vllm", "engine_version": ", ".join(sorted(versions)),
        "device": {"name": ", ".join(sorted(device_names)) or system.name, "key": device, "system": system.name},
        "dtype": "bfloat16; gemm_fp8 / gemm_fp8_block: FP8 weights and activations; *_fp8_kv: FP8 KV cache",
        "units": {"time_s": "seconds (source: latency in milliseconds)",
                                       "size_bytes": "bytes (source: message_size in bf16 elements)"},
        "datasheet": {"bf16_flops": gpu.get("bfloat16_tc_flops"), "fp8_flops": gpu.get("fp8_tc_flops"),
                      "mem_bandwidth_bytes_per_s": gpu.get("mem_bw")},
        "dropped_rows": dropped, "dropped_faster_than_datasheet": too_fast, "tables": origins,
    }
    if _skipped_checks(gpu):
        meta["datasheet_checks_skipped"] = _skipped_checks(gpu)
    return MeasuredTables(meta, tables)


def _datasheet(system_yaml: Path) -> dict:
    """system.yaml's `gpu` figures this importer reads (`bfloat16_tc_flops`, `mem_bw`), as numbers.

    The latency-unit checks and the faster-than-datasheet filter are made against them: a file
    with neither (an empty system.yaml, or one without `gpu:`) is refused rather than imported
    unchecked; with one missing, the checks that need it are skipped and said
    (`_skipped_checks`, measured.json's `datasheet_checks_skipped`).

    Raises:
        MeasuredTableError: not valid YAML, `gpu` not a mapping, no figure at all, or one that is
            not a number > 0 (naming the file and key).
    """
    gpu = read_yaml_mapping(system_yaml).get("gpu") or {}
    if not isinstance(gpu, dict):
        raise MeasuredTableError(f"{system_yaml}: key 'gpu' must be a mapping, got {type(gpu).__name__}")
    figures = {}
    for key in ("bfloat16_tc_flops", "fp8_tc_flops", "mem_bw"):
        value = gpu.get(key)
        if value is None:
            continue
        try:  # PyYAML reads 989e12 (no dot) as a string: float() takes it
            number = float(value) if not isinstance(value, bool) else math.nan
        except (TypeError, ValueError):
            number = math.nan
        if not number > 0 or math.isinf(number):
            raise MeasuredTableError(f"{system_yaml}: gpu.{key} is {value!r}; expected a number > 0")
        figures[key] = value if isinstance(value, (int, float)) else number  # as written, for measured.json
    if not figures:
        raise MeasuredTableError(f"{system_yaml}: the file has no gpu figures (gpu.bfloat16_tc_flops in FLOP/s, "
                                 "gpu.mem_bw in bytes/s): the importer checks the tables' latency unit and drops rows "
                                 "faster than the datasheet against them; give AIConfigurator's system.yaml")
    return figures


def _skipped_checks(gpu: dict) -> list[str]:
    """The datasheet checks `import_aiconfigurator` cannot make for a figure system.yaml lacks."""
    skipped = []
    if "bfloat16_tc_flops" not in gpu:
        skipped.append("no gpu.bfloat16_tc_flops: GEMM latency-unit check and faster-than-datasheet filter not made")
    if "mem_bw" not in gpu:
        skipped.append("no gpu.mem_bw: decode-attention latency-unit check and faster-than-datasheet filter not made")
    return skipped


def _quantized_tables(name: str, raw: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The fp8 / fp8_block GEMM tables of a `gemm_perf` file and the fp8-KV attention tables of an
    attention file (`GEMM_DTYPES`, `KV_DTYPES`), those with rows."""
    out = {}
    if name == "gemm":
        for table, dtype in GEMM_DTYPES.items():
            if table != "gemm" and (raw["gemm_dtype"] == dtype).any():
                out[table] = convert_gemm(raw, dtype)
    elif name == "moe":
        for table, dtype in (("moe_fp8", "fp8"), ("moe_fp8_block", "fp8_block")):
            rows = convert_moe(raw, dtype)
            if not rows.empty:
                out[table] = rows
    elif name in ("context_attention", "decode_attention"):
        for suffix, kv_dtype in KV_DTYPES.items():
            if suffix and (raw["kv_cache_dtype"] == kv_dtype).any():
                rows = _CONVERTERS[name](raw, kv_dtype)
                if not rows.empty:
                    out[name + suffix] = rows
    return out


def faster_than_datasheet(name: str, table: pd.DataFrame, peak_flops: float, mem_bw: float,
                          element_bytes: int = BF16_BYTES) -> np.ndarray:
    """Rows measured faster than the datasheet roofline allows (max of FLOPs / peak and bytes /
    bandwidth, at 100 % of both): L2-resident operands (the collector repeats one small shape) or
    mis-timed rows, which a serving step, streaming every layer's weights and KV, does not see.

    `element_bytes` 1 for an FP8 GEMM (its weight and quantised input 1 byte, output bf16) or an
    FP8 KV cache (K and V 1 byte).
    FLOPs and bytes: a GEMM 2 m n k and 2 (m k + k n + m n) bf16 bytes; a batch of b fresh
    prefills of s tokens 4 h d b s (s + 1) / 2 (causal QKᵀ and PV) and b s (2 kv + 2 h) d × 2
    bytes (K, V written and Q, O moved); a batch of b decodes over s KV tokens b s × 2 kv d × 2
    bytes (K and V read). h, kv, d: heads, KV heads, head_dim per GPU.

    Returns:
        bool array (rows,): True where the row is faster than the bound.
    """
    t = table["time_s"].to_numpy(dtype=np.float64)
    if name == "gemm":
        m, n, k = (table[c].to_numpy(dtype=np.float64) for c in ("m", "n", "k"))
        bound = np.maximum(2 * m * n * k / peak_flops, (element_bytes * (m * k + k * n) + BF16_BYTES * m * n) / mem_bw)
    else:
        b, h, kv, d = (table[c].to_numpy(dtype=np.float64) for c in ("batch_size", "num_heads", "num_kv_heads", "head_dim"))
        if name == "context_attention":
            q = table["query_tokens"].to_numpy(dtype=np.float64)
            bound = np.maximum(4 * h * d * b * q * (q + 1) / 2 / peak_flops,
                               b * q * (2 * kv * element_bytes + 2 * h * BF16_BYTES) * d / mem_bw)
        else:
            s = table["kv_tokens"].to_numpy(dtype=np.float64)
            bound = b * s * 2 * kv * d * element_bytes / mem_bw
    return t < bound


def _check_gemm_unit(gemm: pd.DataFrame, peak_flops: float, path: Path) -> None:
    """A wrong time unit shows as GEMMs faster than the hardware: refuse if the median of the
    largest GEMMs' achieved rate exceeds twice the datasheet bf16 peak."""
    work = 2.0 * gemm["m"] * gemm["n"] * gemm["k"]
    big = gemm[work >= work.quantile(0.9)]
    rate = float(np.median(2.0 * big["m"] * big["n"] * big["k"] / big["time_s"]))
    if rate > 2 * peak_flops:
        raise MeasuredTableError(f"{path}: column 'latency' read as milliseconds gives {rate:.3g} FLOP/s, over "
                                 f"twice the bf16 peak {peak_flops:.3g} of system.yaml: the unit does not match")


def _check_decode_unit(decode: pd.DataFrame, mem_bw: float, path: Path) -> None:
    """A decode streams its KV cache: refuse if the largest decodes (top tenth by KV bytes, bf16 K
    and V) would read it at over twice the datasheet bandwidth of system.yaml (a wrong time unit,
    or `step` not the KV length). The six shipped systems read at 0.69–0.86 of it."""
    kv_bytes = decode["batch_size"] * decode["kv_tokens"] * decode["num_kv_heads"] * decode["head_dim"] * 2 * BF16_BYTES
    big = kv_bytes >= kv_bytes.quantile(0.9)
    rate = float(np.median(kv_bytes[big] / decode["time_s"][big]))
    if rate > 2 * mem_bw:
        raise MeasuredTableError(f"{path}: column 'latency' read as milliseconds (with step as the KV length) streams "
                                 f"the KV cache at {rate:.3g} B/s, over twice the {mem_bw:.3g} B/s of system.yaml: "
                                 "the unit does not match")
