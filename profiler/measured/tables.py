"""`MeasuredTables`: kernel times imported from a public database, in one documented format.

A measured-table directory (written by `sarathi-sim profile import`, shipped under
`profiler/data/measured/<device>/<source>/`):

    DIR/measured.json              source (project, repository, path, commit), licence, engine and
                                   its version, the device it was measured on (name as the source
                                   gives it, built-in key), dtype, units, the model and TP degree
                                   (model-specific tables only), rows dropped on import, and per
                                   table its file, rows and the source file it came from
    DIR/gemm.csv                   m, n, k, time_s: one (m × k) @ (k × n) bf16 GEMM
    DIR/context_attention.csv      num_heads, num_kv_heads, head_dim, batch_size, query_tokens,
                                   time_s: a batch of fresh prefills (query = sequence length)
    DIR/decode_attention.csv       num_heads, num_kv_heads, head_dim, batch_size, kv_tokens,
                                   time_s: a batch of one-token decodes over kv_tokens each
                                   (the new token included)
    DIR/gemm_fp8.csv,              m, n, k, time_s: one W8A8 FP8 GEMM as vLLM's Fp8LinearMethod runs it
    DIR/gemm_fp8_block.csv         (`gemm_fp8`: per-tensor scales; `gemm_fp8_block`: 128 × 128 weight
                                   blocks), the activations' dynamic FP8 quantisation included
    DIR/context_attention_fp8_kv.csv, decode_attention_fp8_kv.csv: as the two above, FP8 KV cache
    DIR/all_reduce.csv             num_gpus, mode (graph | eager), size_bytes, time_s
    DIR/layer_ops.csv              op, num_tokens, time_s: one call of one layer op of the model
                                   named in measured.json, at its TP degree (GEMMs and element-wise)
    DIR/sequence_ops.csv           op (lm_head | sampler), num_seqs, time_s
    DIR/mixed_attention.csv        prefill_tokens, prefill_context_tokens, num_decodes,
                                   decode_context_tokens, time_s: one attention layer call over a
                                   prefill chunk and a batch of decodes (either may be 0)
    DIR/moe.csv                    num_tokens, hidden_size, inter_size, topk, num_experts,
                                   moe_tp_size, moe_ep_size, distribution, time_s: one fused-MoE
                                   experts call on one rank for num_tokens tokens entering the
                                   layer (profiler/importers/aiconfigurator_moe.py)
    DIR/moe_block.csv              num_tokens, active_experts, time_s: one layer's whole sparse
                                   block (router, top-k, experts) of the model named in
                                   measured.json, every expert on the GPU, with exactly
                                   active_experts experts receiving tokens (LLMServingSim)
    DIR/moe_fp8.csv, moe_fp8_block.csv: as moe.csv, FP8 experts (per-tensor; 128 × 128 blocks)

A directory holds one import: importing again into it replaces its tables (those the new import
does not write are removed), and a directory holding anything else is refused
(`check_output_folder`).

Units: every `time_s` is seconds per call on one GPU (one TP rank); sizes are element counts
except `size_bytes`; heads are per rank. A table a source lacks has no file. Per-head attention
tables hold the KV cache in bf16 (the `*_fp8_kv` ones in fp8) and no sliding window.
"""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from profiler.atomic_write import TEMP_PREFIX, write_bytes_whole
from profiler.json_object import read_json_object
from profiler.model_spec import ModelSpec

SIDECAR = "measured.json"
FORMAT_VERSION = 1
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "gemm": ("m", "n", "k", "time_s"),
    "context_attention": ("num_heads", "num_kv_heads", "head_dim", "batch_size", "query_tokens", "time_s"),
    "decode_attention": ("num_heads", "num_kv_heads", "head_dim", "batch_size", "kv_tokens", "time_s"),
    "gemm_fp8": ("m", "n", "k", "time_s"),
    "gemm_fp8_block": ("m", "n", "k", "time_s"),
    "context_attention_fp8_kv": ("num_heads", "num_kv_heads", "head_dim", "batch_size", "query_tokens", "time_s"),
    "decode_attention_fp8_kv": ("num_heads", "num_kv_heads", "head_dim", "batch_size", "kv_tokens", "time_s"),
    "all_reduce": ("num_gpus", "mode", "size_bytes", "time_s"),
    "layer_ops": ("op", "num_tokens", "time_s"),
    "sequence_ops": ("op", "num_seqs", "time_s"),
    "mixed_attention": ("prefill_tokens", "prefill_context_tokens", "num_decodes", "decode_context_tokens",
                        "time_s"),
    "moe": ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size",
            "distribution", "time_s"),
    "moe_block": ("num_tokens", "active_experts", "time_s"),
    "moe_fp8": ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size",
                "distribution", "time_s"),
    "moe_fp8_block": ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size",
                      "distribution", "time_s"),
}
MODEL_TABLES = ("layer_ops", "sequence_ops", "mixed_attention", "moe_block")  # valid for one model at one TP degree
_REQUIRED_META = ("source", "licence", "engine", "engine_version", "device", "units")
UNITS = {"time_s": "seconds per call, one GPU", "size_bytes": "bytes",
         "m, n, k, num_tokens, num_seqs, *_tokens, batch_size, num_decodes": "counts (tokens, rows, sequences)",
         "num_heads, num_kv_heads": "heads per TP rank", "head_dim": "elements"}


class MeasuredTableError(ValueError):
    """A measured-table directory or source file that cannot be used: the message names the file
    and the column or key."""


@dataclass
class MeasuredTables:
    """One source's kernel times on one device (format: module docstring).

    Attributes:
        meta: the sidecar (provenance, units, model/tp for model-specific tables).
        tables: table name (a key of `TABLE_COLUMNS`) → rows.
    """

    meta: dict
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)

    @property
    def model(self) -> ModelSpec | None:
        """The model the model-specific tables were measured for, or None."""
        if not self.meta.get("model"):
            return None
        return ModelSpec.from_fields(self.meta["model"])

    @property
    def tensor_parallel_size(self) -> int | None:
        """The TP degree of the model-specific tables, or None."""
        return self.meta.get("tensor_parallel_size")

    @property
    def label(self) -> str:
        """`<source> <engine> <version> on <device>`, for reports."""
        m = self.meta
        return f"{m['source']['name']} ({m['engine']} {m['engine_version']}, {m['device']['name']})"

    def save(self, directory: str | Path, compress: bool = False) -> Path:
        """Write the CSVs and the sidecar into `directory`, each file atomically (a temporary file
        renamed into place), then remove the tables an earlier import into `directory` listed
        that this one does not write (so no old table sits beside the new sidecar); returns the
        directory. Every table is checked before anything is written.

        Args:
            compress: write `<table>.csv.gz` (gzip, no timestamp: the same bytes every time) for
                the shipped tables.

        Raises:
            MeasuredTableError: a table with a missing column, a NaN or a non-positive time, or a
                `directory` holding files of its own (`check_output_folder`).
            OutputWriteError: a file could not be written (named; the previous one is kept).
        """
        directory = Path(directory)
        files = {name: f"{name}.csv.gz" if compress else f"{name}.csv" for name in self.tables}
        for name, table in self.tables.items():
            check_table(table, name, f"table {name} (to be written to {directory / files[name]})")
        previous = check_output_folder(directory)
        directory.mkdir(parents=True, exist_ok=True)
        entries = {}
        for name, table in self.tables.items():
            text = table.to_csv(index=False, float_format="%.5g")
            data = gzip.compress(text.encode(), mtime=0) if compress else text.encode()
            write_bytes_whole(directory / files[name], data)
            entries[name] = {**self.meta.get("tables", {}).get(name, {}), "file": files[name], "rows": len(table)}
        meta = {**self.meta, "format_version": FORMAT_VERSION, "tables": entries}
        write_bytes_whole(directory / SIDECAR, (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode())
        for file in sorted(previous - set(files.values())):
            (directory / file).unlink(missing_ok=True)
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> "MeasuredTables":
        """Read a directory written by `save`.

        Raises:
            MeasuredTableError: no sidecar, one that is not a readable JSON object, a required
                sidecar key missing, another format version,
                a listed file missing,
                an unknown table, or a table with a missing column, a NaN or a non-positive time
                (the message names the file, column and row).
        """
        directory = Path(directory)
        sidecar = directory / SIDECAR
        if not sidecar.is_file():
            raise MeasuredTableError(f"{directory}: not a measured-table directory (no {SIDECAR}); "
                                     "create one with `sarathi-sim profile import`")
        meta = read_json_object(sidecar, error=MeasuredTableError)
        missing = [k for k in _REQUIRED_META if k not in meta]
        if missing:
            raise MeasuredTableError(f"{sidecar}: missing keys {missing}")
        if meta.get("format_version", FORMAT_VERSION) != FORMAT_VERSION:
            raise MeasuredTableError(f"{sidecar}: format_version {meta.get('format_version')!r}; this version reads "
                                     f"{FORMAT_VERSION} (re-run `sarathi-sim profile import`)")
        tables = {}
        for name, entry in meta.get("tables", {}).items():
            path = directory / entry["file"]
            if name not in TABLE_COLUMNS:
                raise MeasuredTableError(f"{sidecar}: unknown table {name!r}; valid: {sorted(TABLE_COLUMNS)}")
            if not path.is_file():
                raise MeasuredTableError(f"{sidecar}: table {name!r} lists {path.name}, which is missing")
            tables[name] = check_table(pd.read_csv(path), name, str(path))
        if any(t in tables for t in MODEL_TABLES) and not meta.get("model"):
            raise MeasuredTableError(f"{sidecar}: model-specific tables without a 'model' key")
        return cls(meta, tables)


def _table_files(sidecar: Path) -> set[str] | None:
    """The table files `sidecar` lists that `save` could have written (`<table>.csv[.gz]` of a
    known table: a name from elsewhere is never one to delete), or None when it is not a sidecar
    (not a JSON object with a `tables` mapping)."""
    try:
        meta = json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("tables"), dict):
        return None
    ours = {f"{name}{suffix}" for name in TABLE_COLUMNS for suffix in (".csv", ".csv.gz")}
    return {entry["file"] for entry in meta["tables"].values()
            if isinstance(entry, dict) and entry.get("file") in ours}


def check_output_folder(directory: str | Path) -> set[str]:
    """Refuse a `directory` to import into that holds anything but an earlier import (its sidecar,
    the tables it lists, temporaries of `profiler.atomic_write`), as run folders refuse foreign
    files (`experiments/outputs.py`): nothing of the user's is overwritten or deleted.

    Returns:
        the table files the earlier import's sidecar lists (empty for a new or empty folder).

    Raises:
        MeasuredTableError: `directory` is not a folder, or holds a file or folder that no earlier
            import wrote (naming one) or a sidecar that is not one.
    """
    directory = Path(directory)
    if not directory.exists():
        return set()
    if not directory.is_dir():
        raise MeasuredTableError(f"{directory}: not a folder; choose a new folder to import into")
    sidecar = directory / SIDECAR
    listed = _table_files(sidecar) if sidecar.is_file() else set()
    names = sorted(p.name for p in directory.iterdir())
    foreign = [n for n in names if n != SIDECAR and n not in (listed or ()) and not n.startswith(TEMP_PREFIX)]
    if listed is None:
        foreign.insert(0, SIDECAR)
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise MeasuredTableError(
            f"{directory}: holds {foreign[0]}{more}, which no earlier import wrote there (measured.json does not list "
            "it); so that nothing of yours is overwritten or deleted, import into a new folder or an empty one")
    return listed


def check_table(table: pd.DataFrame, name: str, path: str) -> pd.DataFrame:
    """`table` if it has `TABLE_COLUMNS[name]`, no NaN and times > 0; else raise.

    Raises:
        MeasuredTableError: naming `path`, the column and the first bad row (1-based data row).
    """
    require_columns(table, TABLE_COLUMNS[name], path)
    for column in TABLE_COLUMNS[name]:
        bad = table[column].isna().to_numpy()
        if bad.any():
            raise MeasuredTableError(f"{path}: column {column!r} is empty or NaN in row {int(np.argmax(bad)) + 1}")
    bad = ~(table["time_s"].to_numpy(dtype=np.float64) > 0)
    if bad.any():
        raise MeasuredTableError(f"{path}: column 'time_s' is not > 0 in row {int(np.argmax(bad)) + 1}")
    return table


def require_columns(table: pd.DataFrame, columns, path) -> pd.DataFrame:
    """`table` if it has every one of `columns`.

    Raises:
        MeasuredTableError: naming `path`, the missing columns and the ones it has.
    """
    absent = [c for c in columns if c not in table]
    if absent:
        raise MeasuredTableError(f"{path}: missing columns {absent} (has {list(table.columns)})")
    return table
