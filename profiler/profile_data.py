"""A profile directory: one CSV per op family and a sidecar JSON (DESIGN.md "Files").

    DIR/profile.json           device, memory, versions, dtype, model spec and its hash, tp, date,
                               budget, the rates that scale the roofline features, skipped shapes
    DIR/linear.csv             qkv_proj, o_proj, gate_up_proj, down_proj (num_tokens), lm_head
    DIR/elementwise.csv        embedding, rmsnorm, rotary_emb, kv_cache_write, silu_and_mul,
                               residual_add (num_tokens), sampler (num_tokens = logit rows)
    DIR/attention_prefill.csv  (query_tokens, context_tokens), one prefill sequence
    DIR/attention_decode.csv   (batch_size, context_tokens), a batch of decodes
    DIR/cpu_overhead.csv       (num_tokens = sequences), the runner's per-step host work
    DIR/all_reduce.csv         (num_tokens) when measured (tp > 1)

Every CSV has columns `op`, the family's key columns, and `time_median_s, time_min_s, time_max_s,
time_mean_s, time_std_s` (seconds per call, one rank), `num_samples`, `calls_per_sample`. A family
with no rows has no file.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from profiler.atomic_write import write_text_whole, write_whole
from profiler.json_object import read_json_object
from profiler.model_spec import ModelSpec
from profiler.ops import FAMILIES, KEYS, OpCatalogue

SIDECAR = "profile.json"
FORMAT_VERSION = 1
TIME_COLUMNS = ("time_median_s", "time_min_s", "time_max_s", "time_mean_s", "time_std_s")
_REQUIRED_META = ("device", "dtype", "dtype_bytes", "kv_dtype_bytes", "model", "model_hash",
                  "tensor_parallel_size", "rates")


class ProfileError(ValueError):
    """A profile directory that cannot be read: the message names the file and what is wrong."""


def model_hash(model: ModelSpec) -> str:
    """First 16 hex digits of the SHA-256 of the spec's fields as sorted JSON."""
    return hashlib.sha256(json.dumps(model.to_fields(), sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class Profile:
    """Measured op timings of one model at one tensor-parallel degree on one device.

    Attributes:
        meta: the sidecar JSON (see the module docstring; `rates` holds `peak_flops` and
            `mem_bandwidth_bytes_per_s`, the scales of the fitted model's roofline features).
        tables: family → rows (columns as the module docstring).
    """

    meta: dict
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)

    @property
    def model(self) -> ModelSpec:
        """The profiled model's shapes (from the sidecar)."""
        return ModelSpec.from_fields(self.meta["model"])

    @property
    def catalogue(self) -> OpCatalogue:
        """The op catalogue the profile's shapes were drawn from."""
        return OpCatalogue(self.model, self.meta["tensor_parallel_size"], self.meta["dtype_bytes"],
                           self.meta["kv_dtype_bytes"])

    def rows(self, op_name: str) -> pd.DataFrame:
        """The rows of one op (empty when the profile has none)."""
        for table in self.tables.values():
            if "op" in table and (table["op"] == op_name).any():
                return table[table["op"] == op_name].reset_index(drop=True)
        return pd.DataFrame()

    @property
    def op_names(self) -> list[str]:
        """Ops with at least one row, in catalogue order."""
        present = {name for t in self.tables.values() for name in t["op"].unique()}
        return [op.name for op in self.catalogue.ops if op.name in present]

    def save(self, directory: str | Path) -> Path:
        """Write the CSVs and the sidecar into `directory` (created), each file whole or not at all
        (`profiler.atomic_write`: a failed write leaves the previous file); returns it.

        Raises:
            OutputWriteError: a file could not be written (named, with the system's reason).
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        files = {}
        for family, table in self.tables.items():
            if len(table):
                write_whole(directory / f"{family}.csv", lambda tmp, table=table: table.to_csv(tmp, index=False))
                files[family] = {"file": f"{family}.csv", "rows": len(table)}
        meta = {**self.meta, "format_version": FORMAT_VERSION, "families": files}
        write_text_whole(directory / SIDECAR, json.dumps(meta, indent=2, default=str) + "\n")
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> "Profile":
        """Read a profile directory written by `save` (or `sarathi-sim profile`).

        Raises:
            ProfileError: no sidecar, a sidecar key missing or its model not a model spec, a
                listed CSV missing, or a CSV without its family's columns; the message names the file.
        """
        directory = Path(directory)
        sidecar = directory / SIDECAR
        if not sidecar.is_file():
            raise ProfileError(f"{directory}: not a profile directory (no {SIDECAR}); "
                               "create one with `sarathi-sim profile`")
        meta = read_json_object(sidecar, error=ProfileError)
        missing = [k for k in _REQUIRED_META if k not in meta]
        if missing:
            raise ProfileError(f"{sidecar}: missing keys {missing}")
        try:
            ModelSpec.from_fields(meta["model"])
        except (TypeError, ValueError) as exc:  # unknown or missing shape keys, bad counts
            raise ProfileError(f"{sidecar}: model: not a model spec ({exc})") from None
        tables = {}
        for family, entry in meta.get("families", {}).items():
            path = directory / entry["file"]
            if family not in FAMILIES or not path.is_file():
                raise ProfileError(f"{sidecar}: family {family!r} lists {path.name}, which is "
                                   f"{'missing' if family in FAMILIES else 'not a known family'}")
            tables[family] = _read_table(path, family)
        profile = cls(meta, tables)
        _check_op_names(profile, directory)
        return profile


def _check_op_names(profile: Profile, directory: Path) -> None:
    """Every row's `op` is an op of its file's family in the profiled model's catalogue (a row of
    another op would be ignored by the fit without a word)."""
    try:
        ops = profile.catalogue.ops
    except (TypeError, ValueError) as exc:  # tensor_parallel_size or dtype widths unusable
        raise ProfileError(f"{directory / SIDECAR}: no op catalogue for it ({exc})") from None
    for family, table in profile.tables.items():
        known = sorted({op.name for op in ops if op.family == family})
        unknown = ~table["op"].isin(known).to_numpy()
        if unknown.any():
            row = int(unknown.argmax())
            raise ProfileError(f"{directory / (family + '.csv')}: row {row + 2}, column op: "
                               f"{table['op'].iloc[row]!r} is not an op of family {family!r} "
                               f"(valid: {', '.join(known)})")


def family_key(family: str) -> tuple[str, ...]:
    """The key columns of a family's CSV."""
    driver = {"attention_prefill": "prefill_seq", "attention_decode": "decode_batch"}.get(family, "tokens")
    return KEYS[driver]


# Columns beyond the keys and times: whole counts >= 1 when present.
_COUNT_COLUMNS = ("num_samples", "calls_per_sample", "rounds")
# Key columns that may be 0 (a prefill chunk with no cached tokens); every other key is >= 1.
_ZERO_KEYS = ("context_tokens",)


def _read_table(path: Path, family: str) -> pd.DataFrame:
    """One family's CSV, every cell checked: the keys are whole numbers (>= 1, `context_tokens`
    >= 0), the times finite seconds (> 0; `time_std_s` >= 0), the counts whole numbers >= 1.

    Raises:
        ProfileError: unreadable or empty CSV, a missing column, or a bad cell; the message names
            the file, the row (the CSV line, header = line 1), the column and what would be valid.
    """
    try:
        table = pd.read_csv(path, dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        raise ProfileError(f"{path}: empty file (no header row); re-run `sarathi-sim profile` or "
                           f"remove the {family!r} entry from {SIDECAR}") from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError) as exc:
        raise ProfileError(f"{path}: not a readable CSV ({type(exc).__name__}: {exc})") from None
    key = family_key(family)
    needed = ("op", *key, "time_median_s")
    absent = [c for c in needed if c not in table]
    if absent:
        raise ProfileError(f"{path}: missing columns {absent} (has {list(table.columns)})")
    if table.empty:
        raise ProfileError(f"{path}: no rows under the header")
    blank_op = table["op"].fillna("").str.strip() == ""
    if blank_op.any():
        raise ProfileError(f"{path}: row {int(blank_op.to_numpy().argmax()) + 2}, column op: empty")
    for column in key:
        table[column] = _numeric_column(path, table, column, whole=True,
                                        minimum=0 if column in _ZERO_KEYS else 1)
    for column in TIME_COLUMNS:
        if column in table:
            table[column] = _numeric_column(path, table, column, whole=False,
                                            minimum=0.0 if column == "time_std_s" else None)
    for column in _COUNT_COLUMNS:
        if column in table:
            table[column] = _numeric_column(path, table, column, whole=True, minimum=1)
    checked = {"op", *key, *TIME_COLUMNS, *_COUNT_COLUMNS}
    for column in (c for c in table.columns if c not in checked):  # other notes: numbers where they all are
        numbers = pd.to_numeric(table[column], errors="coerce")
        if numbers.notna().all():
            table[column] = numbers
    return table


def _numeric_column(path: Path, table: pd.DataFrame, column: str, whole: bool,
                    minimum: float | None) -> pd.Series:
    """`table[column]` (strings) as numbers; `minimum=None` means > 0. Raises ProfileError naming
    the first bad row."""
    text = table[column].str.strip()
    values = pd.to_numeric(text, errors="coerce")
    expected = ("a whole number" if whole else "a finite number of seconds") + \
        (f" >= {minimum:g}" if minimum is not None else " > 0")
    finite = np.isfinite(values.to_numpy(dtype=float))
    in_range = values >= minimum if minimum is not None else values > 0
    bad = ~finite | ~in_range.to_numpy()
    if whole:
        bad |= finite & (values.where(finite, 0) % 1 != 0).to_numpy()
    if bad.any():
        row = int(bad.argmax())
        cell = table[column].iloc[row]
        shown = "empty" if pd.isna(cell) or not str(cell).strip() else repr(cell)
        raise ProfileError(f"{path}: row {row + 2}, column {column}: {shown} is not {expected}")
    return values.astype("int64") if whole else values.astype(float)
