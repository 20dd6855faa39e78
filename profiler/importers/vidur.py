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

from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from profiler.measured.tables import MeasuredTableError, MeasuredTables
from profiler.model_spec import ModelSpec
from profiler.profile_data import ProfileError
from profiler.vidur import read_vidur_all_reduce, read_vidur_mlp

SOURCE = {"name": "vidur", "repository": "microsoft/vidur", "path": "data/profiling/", "commit": "7d47513"}
LICENCE = "MIT"
# profiler/vidur.py's op names → the measured tables' layer op names.
_OPS = {"qkv_proj": "qkv_proj", "o_proj": "o_proj", "gate_up_proj": "gate_up_proj", "down_proj": "down_proj",
        "rmsnorm": "layernorm", "rotary_emb": "rotary_emb", "silu_and_mul": "act_fn",
        "residual_add": "residual_add", "embedding": "embedding"}


def import_vidur(mlp_csv: str | Path, model: ModelSpec | None = None, tensor_parallel_size: int = 1,
                 device: str | None = None, all_reduce_csv: str | Path | None = None) -> MeasuredTables:
    """Measured tables of one Vidur mlp.csv at one TP degree (and optionally its all_reduce.csv).

    Args:
        mlp_csv: the model's mlp.csv.
        model: the profiled model (its layer count and context are not in the file); default
            the shapes in the file's columns.
        tensor_parallel_size: which `num_tensor_parallel_workers` rows to read.
        device: built-in device key; default from the `<gpu>` folder.
        all_reduce_csv: Vidur's all_reduce.csv for the same GPU.

    Raises:
        MeasuredTableError: as `profiler.vidur.read_vidur_mlp` / `read_vidur_all_reduce` (missing
            columns, no rows at that TP, shapes that contradict `model`), naming the file.
    """
    path = Path(mlp_csv)
    try:
        profile = read_vidur_mlp(path, tensor_parallel_size, model, device)
        all_reduce = read_vidur_all_reduce(all_reduce_csv) if all_reduce_csv else None
    except ProfileError as exc:
        raise MeasuredTableError(str(exc)) from exc
    rows = []
    for name, op in _OPS.items():
        part = profile.rows(name)
        if part.empty:
            continue
        median = part.groupby("num_tokens")["time_median_s"].median()
        rows.append(pd.DataFrame({"op": op, "num_tokens": median.index.astype(np.int64),
                                  "time_s": median.to_numpy(dtype=np.float64)}))
    tables = {"layer_ops": pd.concat(rows, ignore_index=True)}
    origins = {"layer_ops": {"from": str(path)}}
    if all_reduce is not None:
        tables["all_reduce"] = pd.DataFrame({"num_gpus": all_reduce["num_workers"].astype(np.int64),
                                             "mode": "graph", "size_bytes": all_reduce["size_bytes"],
                                             "time_s": all_reduce["time_median_s"]})
        origins["all_reduce"] = {"from": str(all_reduce_csv)}
    spec = profile.model
    meta = {
        "source": SOURCE, "licence": LICENCE, "engine": "sarathi-serve (vidur profiling)", "engine_version": "7d47513",
        "device": {"name": profile.meta["device"]["name"], "key": profile.meta["device"]["spec_name"]},
        "dtype": "float16", "units": {"time_s": "seconds (source: milliseconds)",
                                      "size_bytes": "bytes (source: size in fp16 elements)"},
        "model": asdict(spec), "tensor_parallel_size": tensor_parallel_size, "dropped_rows": {}, "tables": origins,
    }
    return MeasuredTables(meta, tables)
