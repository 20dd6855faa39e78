"""Import Vidur's profiling CSVs (microsoft/vidur, MIT, `data/profiling/`; copies in
../shared/profiles/vidur/) as measured tables, through the readers of `profiler/vidur.py`
(which state the files' units: `time_stats.<op>.*` in milliseconds, all-reduce `size` in fp16
elements).

- `compute/<gpu>/<org>/<model>/mlp.csv` at one TP degree → layer_ops: the median of each op,
  named as the measured cost model reads them (`qkv_proj`, `o_proj`, `gate_up_proj`, `down_proj`,
  `layernorm` for both of Vidur's RMSNorms, `rotary_emb`, `act_fn`, `residual_add` — Sarathi-Serve's
  kernels do not fuse the residual add into the norm — and `embedding`).
- `network/<gpu>_pairwise_nvlink/all_reduce.csv` (optional) → all_reduce, mode `graph` (Vidur
  times a CUDA-graph-captured collective, `GraphedCollective`).

The engine is Sarathi-Serve's (fp16), not vLLM: `engine` says so.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from profiler.importers.source_device import recorded_device, resolve_device
from profiler.importers.source_files import numeric_column, read_csv, usable_rows
from profiler.measured.tables import MeasuredTableError, MeasuredTables
from profiler.model_spec import ModelSpec
from profiler.profile_data import ProfileError
from profiler.vidur import VIDUR_DEVICES, VIDUR_OPS, read_vidur_all_reduce, read_vidur_mlp

SOURCE = {"name": "vidur", "repository": "microsoft/vidur", "path": "data/profiling/", "commit": "7d47513"}
LICENCE = "MIT"
# profiler/vidur.py's op names → the measured tables' layer op names.
_OPS = {"qkv_proj": "qkv_proj", "o_proj": "o_proj", "gate_up_proj": "gate_up_proj", "down_proj": "down_proj",
        "rmsnorm": "layernorm", "rotary_emb": "rotary_emb", "silu_and_mul": "act_fn",
        "residual_add": "residual_add", "embedding": "embedding"}
_STATS = ("min", "max", "mean", "median", "std")  # profiler/vidur.py reads all five of each op
_SHAPE_COLUMNS = ("num_tensor_parallel_workers", "n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size")
_ALL_REDUCE_TIMES = tuple(f"time_stats.all_reduce.{s}" for s in _STATS)


def import_vidur(mlp_csv: str | Path, model: ModelSpec | None = None, tensor_parallel_size: int = 1,
                 device: str | None = None, all_reduce_csv: str | Path | None = None) -> MeasuredTables:
    """Measured tables of one Vidur mlp.csv at one TP degree (and optionally its all_reduce.csv).

    Rows are checked before `profiler.vidur` reads them: every op of `profiler.vidur.VIDUR_OPS`
    must have its `time_stats.<op>.{min,max,mean,median,std}` columns (each of Vidur's files has
    all ten ops; an op left out would be priced by the roofline without a word), a cell that is not
    a number is an error naming the file, column and row, and the rows at this TP degree with
    num_tokens ≤ 0 (or empty), and each op's rows with a NaN or non-positive median, are dropped and
    counted in `meta["dropped_rows"]` (by file name; one per op row for mlp.csv). The same for
    all_reduce.csv (num_workers and size > 0, median > 0).

    Args:
        mlp_csv: the model's mlp.csv.
        model: the profiled model (its layer count and context are not in the file); default
            the shapes in the file's columns.
        tensor_parallel_size: which `num_tensor_parallel_workers` rows to read.
        device: built-in device key, for a file outside Vidur's `compute/<gpu>/` folders
            (`profiler.vidur.VIDUR_DEVICES`); by default the one of its `<gpu>` folder.
        all_reduce_csv: Vidur's all_reduce.csv for the same GPU (`network/<gpu>_pairwise_nvlink/`).

    Raises:
        MeasuredTableError: as `profiler.vidur.read_vidur_mlp` / `read_vidur_all_reduce` (missing
            columns, no rows at that TP, shapes that contradict `model`), an op's columns missing,
            a cell that is not a number, no usable row, a `device` that contradicts the `<gpu>`
            folder, or an all_reduce.csv of another GPU or without a usable row; naming the file.
    """
    path = Path(mlp_csv)
    gpu = path.parts[-4] if len(path.parts) >= 4 and path.parts[-4] in VIDUR_DEVICES else ""
    recorded = recorded_device([(f"folder {gpu}", gpu, VIDUR_DEVICES[gpu])], str(path)) if gpu else None
    device = resolve_device(device, recorded, str(path), "cannot tell the device from the path (Vidur's compute/"
                            f"<gpu>/<org>/<model>/mlp.csv, <gpu> one of {sorted(VIDUR_DEVICES)}); pass --device")
    dropped: dict = {}
    table = _mlp_rows(path, tensor_parallel_size, dropped)
    try:
        profile = read_vidur_mlp(path, tensor_parallel_size, model, device, table=table)
    except ProfileError as exc:
        raise MeasuredTableError(str(exc)) from exc
    tables = {"layer_ops": _layer_ops(profile, path, dropped)}
    origins = {"layer_ops": {"from": str(path)}}
    if all_reduce_csv is not None:
        tables["all_reduce"] = _all_reduce(Path(all_reduce_csv), device, dropped)
        origins["all_reduce"] = {"from": str(all_reduce_csv)}
    meta = {
        "source": SOURCE, "licence": LICENCE, "engine": "sarathi-serve (vidur profiling)", "engine_version": "7d47513",
        "device": {"name": gpu or device, "key": device},
        "dtype": "float16", "units": {"time_s": "seconds (source: milliseconds)",
                                      "size_bytes": "bytes (source: size in fp16 elements)"},
        "model": profile.model.to_fields(), "tensor_parallel_size": tensor_parallel_size, "dropped_rows": dropped,
        "tables": origins,
    }
    return MeasuredTables(meta, tables)


def _mlp_rows(path: Path, tensor_parallel_size: int, dropped: dict) -> pd.DataFrame:
    """mlp.csv's rows at `tensor_parallel_size` with num_tokens > 0, every op's columns present and
    every time and shape cell a number (errors name the row of the file)."""
    columns = [f"time_stats.{vidur_op}.{stat}" for vidur_op in VIDUR_OPS for stat in _STATS]
    table = read_csv(path, ["num_tokens", *_SHAPE_COLUMNS])
    absent = {vidur_op: [c for c in columns if c.startswith(f"time_stats.{vidur_op}.") and c not in table]
              for vidur_op in VIDUR_OPS}
    absent = {op: cols for op, cols in absent.items() if cols}
    if absent:
        named = "; ".join(f"{op} ({VIDUR_OPS[op]}): {cols}" for op, cols in absent.items())
        raise MeasuredTableError(f"{path}: missing the columns of ops {named}; Vidur's mlp.csv times every "
                                 f"one of {list(VIDUR_OPS)}")
    checked = table.assign(**{c: numeric_column(table, c, path) for c in columns},
                           **{c: numeric_column(table, c, path, whole=True) for c in _SHAPE_COLUMNS})
    at_tp = checked[checked["num_tensor_parallel_workers"] == tensor_parallel_size]
    if at_tp.empty:
        return at_tp  # read_vidur_mlp names the TP degree
    usable = usable_rows(at_tp, path, dropped, positive=("num_tokens",))
    return usable.astype({c: np.int64 for c in ("num_tokens", *_SHAPE_COLUMNS)})


def _layer_ops(profile, path: Path, dropped: dict) -> pd.DataFrame:
    """layer_ops rows (op, num_tokens, time_s: the median of each op's rows at a token count); op
    rows of a NaN or non-positive median are dropped and counted in `dropped[path name]`."""
    rows = []
    for name, op in _OPS.items():
        part = profile.rows(name)
        median_s = part["time_median_s"].to_numpy(dtype=np.float64)
        good = np.isfinite(median_s) & (median_s > 0)
        if (~good).any():
            dropped[path.name] = dropped.get(path.name, 0) + int((~good).sum())
        if not good.any():
            raise MeasuredTableError(f"{path}: no row of op {name} has a finite median time > 0 "
                                     f"(columns time_stats.*.median)")
        median = part[good].groupby("num_tokens")["time_median_s"].median()
        rows.append(pd.DataFrame({"op": op, "num_tokens": median.index.astype(np.int64),
                                  "time_s": median.to_numpy(dtype=np.float64)}))
    return pd.concat(rows, ignore_index=True)


def _all_reduce(path: Path, device: str, dropped: dict) -> pd.DataFrame:
    """all_reduce rows (num_gpus, mode graph, size_bytes, time_s) of an all_reduce.csv measured on
    `device` (its `network/<gpu>_pairwise_nvlink/` folder, where it has one, must say so)."""
    folder = path.parent.name
    gpu = folder.split("_pairwise")[0] if "_pairwise" in folder else ""
    recorded = VIDUR_DEVICES.get(gpu)
    if recorded is not None and recorded != device:
        raise MeasuredTableError(f"{path}: measured on {recorded} (folder {folder}), but the compute tables are of "
                                 f"{device}: one import holds the kernel times of one GPU; use "
                                 f"network/<gpu>_pairwise_nvlink/all_reduce.csv of {device}")
    table = read_csv(path, ["num_workers", "size", *_ALL_REDUCE_TIMES])
    if table.empty:
        raise MeasuredTableError(f"{path}: no rows (only the header); an all_reduce.csv times sizes at each "
                                 "num_workers")
    table = table.assign(**{c: numeric_column(table, c, path) for c in _ALL_REDUCE_TIMES})
    usable = usable_rows(table, path, dropped, times=("time_stats.all_reduce.median",),
                         positive=("num_workers", "size"))
    try:
        all_reduce = read_vidur_all_reduce(path, table=usable.astype({"num_workers": np.int64, "size": np.int64}))
    except ProfileError as exc:
        raise MeasuredTableError(str(exc)) from exc
    return pd.DataFrame({"num_gpus": all_reduce["num_workers"].astype(np.int64).to_numpy(), "mode": "graph",
                         "size_bytes": all_reduce["size_bytes"].to_numpy(),
                         "time_s": all_reduce["time_median_s"].to_numpy(dtype=np.float64)})
