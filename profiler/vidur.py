"""Readers for Vidur's profiling CSVs (microsoft/vidur, `data/profiling/`), so measured GPU
profiles in that format can be fitted like our own.

- `compute/<gpu>/<org>/<model>/mlp.csv`: one row per (num_tokens, num_tensor_parallel_workers)
  with `time_stats.<op>.{min,max,mean,median,std}` in **milliseconds** for the non-attention ops
  of one layer, and the model's shape columns (n_head, n_kv_head, n_embd, n_expanded_embd,
  vocab_size). Vidur's op names map onto ours (`VIDUR_OPS`); both its layer norms are our
  `rmsnorm` (the same kernel), so a profile read from it has two rmsnorm rows per shape.
- `network/<gpu>_pairwise_nvlink/all_reduce.csv`: all-reduce time (ms) against `size` (float16
  elements, so bytes = 2 × size: Vidur's `GraphedCollective` allocates `size` fp16 elements) and
  `num_workers`.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from profiler.device_spec import BUILTIN_DEVICES
from profiler.model_spec import ModelSpec
from profiler.ops import OpCatalogue
from profiler.profile_data import TIME_COLUMNS, Profile, ProfileError, model_hash

VIDUR_OPS = {"emb": "embedding", "input_layernorm": "rmsnorm", "post_attention_layernorm": "rmsnorm",
             "attn_pre_proj": "qkv_proj", "attn_rope": "rotary_emb", "attn_post_proj": "o_proj",
             "mlp_up_proj": "gate_up_proj", "mlp_act": "silu_and_mul", "mlp_down_proj": "down_proj",
             "add": "residual_add"}
# Vidur's GPU folder names → built-in DeviceSpec keys.
VIDUR_DEVICES = {"a100": "a100-80gb", "h100": "h100-sxm", "a40": "a40"}
_STATS = ("median", "min", "max", "mean", "std")
_FP16_BYTES = 2


def _model_from_columns(table: pd.DataFrame, name: str, model: ModelSpec | None, path: Path) -> ModelSpec:
    """The ModelSpec of a Vidur mlp.csv: `model` when given (its shapes must match the columns),
    else one read from the columns (1 layer, max_model_len = the largest num_tokens)."""
    first = table.iloc[0]
    heads, hidden = int(first["n_head"]), int(first["n_embd"])
    from_columns = ModelSpec(name, 1, hidden, heads, int(first["n_kv_head"]), hidden // heads,
                             int(first["n_expanded_embd"]), int(first["vocab_size"]),
                             int(table["num_tokens"].max()))
    if model is None:
        return from_columns
    for field in ("hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size"):
        if getattr(model, field) != getattr(from_columns, field):
            raise ProfileError(f"{path}: {field} is {getattr(from_columns, field)} in the profile but "
                               f"{getattr(model, field)} in model {model.name!r}")
    return model


def read_vidur_mlp(path: str | Path, tensor_parallel_size: int = 1, model: ModelSpec | None = None,
                   device: str | None = None, table: pd.DataFrame | None = None) -> Profile:
    """A `Profile` of the rows of one tensor-parallel degree of a Vidur `mlp.csv`.

    Args:
        path: the mlp.csv.
        tensor_parallel_size: which `num_tensor_parallel_workers` rows to keep.
        model: the model profiled (its layer count and vocabulary are not in the file); default
            one read from the shape columns.
        device: built-in device key; default from the `<gpu>` folder (`VIDUR_DEVICES`). Its
            datasheet peaks scale the roofline features (`rates`).
        table: the file's rows, already read and checked (profiler/importers/vidur.py); default: read `path`.

    Raises:
        ProfileError: a missing column, no rows at that tp, shapes that contradict `model`, or a
            device that cannot be told; the message names the file.
    """
    path = Path(path)
    table = pd.read_csv(path) if table is None else table
    needed = ["num_tokens", "num_tensor_parallel_workers", "n_head", "n_kv_head", "n_embd",
              "n_expanded_embd", "vocab_size"]
    absent = [c for c in needed if c not in table]
    if absent:
        raise ProfileError(f"{path}: missing columns {absent}")
    table = table[table["num_tensor_parallel_workers"] == tensor_parallel_size]
    if table.empty:
        raise ProfileError(f"{path}: no rows with num_tensor_parallel_workers = {tensor_parallel_size}")
    spec = _model_from_columns(table, path.parent.name, model, path)
    gpu = path.parts[-4] if len(path.parts) >= 4 else ""
    device = device or VIDUR_DEVICES.get(gpu)
    if device not in BUILTIN_DEVICES:
        raise ProfileError(f"{path}: cannot tell the device from folder {gpu!r}; pass device= one of "
                           f"{sorted(BUILTIN_DEVICES)}")
    rows = []
    for vidur_op, op in VIDUR_OPS.items():
        if f"time_stats.{vidur_op}.median" not in table:
            continue
        part = pd.DataFrame({"op": op, "num_tokens": table["num_tokens"].to_numpy()})
        for stat in _STATS:
            part[f"time_{stat}_s"] = table[f"time_stats.{vidur_op}.{stat}"].to_numpy() * 1e-3
        rows.append(part)
    elementwise_ops = {"embedding", "rmsnorm", "rotary_emb", "silu_and_mul", "residual_add"}
    all_rows = pd.concat(rows, ignore_index=True)
    tables = {"linear": all_rows[~all_rows["op"].isin(elementwise_ops)].reset_index(drop=True),
              "elementwise": all_rows[all_rows["op"].isin(elementwise_ops)].reset_index(drop=True)}
    spec_device = BUILTIN_DEVICES[device]
    meta = {
        "source": f"vidur:{path}", "device": {"kind": "cuda", "name": gpu, "spec_name": device},
        "dtype": "float16", "dtype_bytes": _FP16_BYTES, "kv_dtype_bytes": _FP16_BYTES,
        "model": spec.to_fields(), "model_hash": model_hash(spec),
        "tensor_parallel_size": tensor_parallel_size,
        "rates": {"peak_flops": spec_device.peak_bf16_flops,
                  "mem_bandwidth_bytes_per_s": spec_device.mem_bandwidth_bytes_per_s,
                  "rates_source": f"datasheet ({device})"},
    }
    return Profile(meta, tables)


def read_vidur_all_reduce(path: str | Path, table: pd.DataFrame | None = None) -> pd.DataFrame:
    """Vidur's all_reduce.csv as rows (num_workers, size_bytes, time_*_s) in seconds (`table`: its
    rows, already read and checked; default: read `path`).

    Raises:
        ProfileError: a missing column (the message names the file).
    """
    path = Path(path)
    table = pd.read_csv(path) if table is None else table
    needed = ["num_workers", "size", *(f"time_stats.all_reduce.{s}" for s in _STATS)]
    absent = [c for c in needed if c not in table]
    if absent:
        raise ProfileError(f"{path}: missing columns {absent}")
    out = pd.DataFrame({"num_workers": table["num_workers"].astype(int),
                        "size_bytes": table["size"].astype(np.int64) * _FP16_BYTES})
    for stat in _STATS:
        out[f"time_{stat}_s"] = table[f"time_stats.all_reduce.{stat}"] * 1e-3
    return out[["num_workers", "size_bytes", *TIME_COLUMNS]]


# The ops of Vidur's mlp.csv that run once or twice in every layer (Vidur's `emb` runs once a step).
LAYER_OPS = ("rmsnorm", "qkv_proj", "rotary_emb", "o_proj", "gate_up_proj", "silu_and_mul",
             "down_proj", "residual_add")


def layer_time_s(catalogue: OpCatalogue, op_time_s, num_tokens: np.ndarray) -> np.ndarray:
    """Per-layer non-attention time (s) at each step size: Σ over `LAYER_OPS` of the op's calls
    per layer (`Op.per_layer`: rmsnorm and residual_add twice) × `op_time_s(op, num_tokens)`."""
    tokens = np.asarray(num_tokens)
    return sum(catalogue.op(name).per_layer * np.asarray(op_time_s(name, tokens), dtype=np.float64)
               for name in LAYER_OPS)


def measured_op_time_s(profile: Profile, statistic: str = "median"):
    """`op_time_s(op, num_tokens)` looking up a profile's measured times (mean of duplicate rows).

    Raises (when called):
        KeyError: a token count the op was not profiled at.
    """
    def op_time_s(name: str, num_tokens: np.ndarray) -> np.ndarray:
        rows = profile.rows(name).groupby("num_tokens")[f"time_{statistic}_s"].mean()
        return rows.loc[np.asarray(num_tokens)].to_numpy()
    return op_time_s
