"""Reading the importers' source files the same way in every importer: a YAML sidecar that is not
YAML is named like a device file (`profiler/device_file.py`), a cell that is not a number is an
error naming the file, column and row, and a row of a NaN or non-positive time or size (a failed
or meaningless measurement) is dropped and counted in `meta["dropped_rows"]`.

Row numbers are 1-based data rows of the file as read (a CSV's header is row 0).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from profiler.measured.tables import MeasuredTableError, require_columns


def read_yaml_mapping(path: str | Path) -> dict:
    """The mapping in the YAML file `path` ({} for an empty file).

    Raises:
        MeasuredTableError: the file cannot be read, is not YAML ("PATH: not valid YAML: ..."), or
            holds something other than a mapping.
    """
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise MeasuredTableError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise MeasuredTableError(f"{path}: not valid YAML: {exc}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise MeasuredTableError(f"{path}: must hold a YAML mapping (key: value lines), got {type(raw).__name__}")
    return raw


def read_csv(path: str | Path, columns) -> pd.DataFrame:
    """The CSV file `path`, which must have every one of `columns`.

    Raises:
        MeasuredTableError: the file is missing, cannot be read or parsed, or lacks a column
            (naming the file, the missing columns and the ones it has).
    """
    path = Path(path)
    if not path.is_file():
        raise MeasuredTableError(f"{path}: missing")
    try:
        table = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise MeasuredTableError(f"{path}: empty (no header line)") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise MeasuredTableError(f"{path}: not a readable CSV ({exc})") from None
    return require_columns(table, columns, path)


def numeric_column(table: pd.DataFrame, column: str, path: str | Path, whole: bool = False) -> np.ndarray:
    """`table[column]` as float64 (empty cells NaN).

    Args:
        whole: the column counts something (tokens, heads, GPUs): a finite value must be a whole number.

    Raises:
        MeasuredTableError: a cell that is not a number (or, with `whole`, not a whole number),
            naming `path`, the column, the first such row and its value.
    """
    raw = table[column]
    if pd.api.types.is_bool_dtype(raw):
        raise MeasuredTableError(f"{path}: column {column!r} holds true/false values, not numbers")
    values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)
    bad = np.isnan(values) & raw.notna().to_numpy()
    if not bad.any() and whole:
        bad = np.isfinite(values) & (values != np.floor(values))
        what = "a whole number"
    else:
        what = "a number"
    if bad.any():
        row = int(np.argmax(bad))
        value = raw.iloc[row]
        shown = repr(value) if isinstance(value, str) else str(value)  # 'big', but 2.5 (not np.float64(2.5))
        raise MeasuredTableError(f"{path}: column {column!r} row {row + 1} is {shown}, not {what}")
    return values


def usable_rows(table: pd.DataFrame, path: str | Path, dropped: dict, times: tuple[str, ...] = (),
                positive: tuple[str, ...] = (), non_negative: tuple[str, ...] = ()) -> pd.DataFrame:
    """The rows of `table` with every time column finite and > 0, every `positive` count finite and
    > 0 and every `non_negative` count finite and >= 0 (those columns as numbers); the others are
    counted in `dropped[file name]`.

    Args:
        times: time columns (any unit).
        positive: whole-number columns that must be > 0 (GEMM m, n, k; tokens; heads; GPUs).
        non_negative: whole-number columns where 0 is meaningful (a mixed step's decodes).

    Raises:
        MeasuredTableError: a cell that is not a number or a count that is not whole
            (`numeric_column`), or no usable row; naming `path` and the column.
    """
    good = np.ones(len(table), dtype=bool)
    converted = {}
    for column in times:
        converted[column] = values = numeric_column(table, column, path)
        good &= np.isfinite(values) & (values > 0)
        if not good.any():
            raise MeasuredTableError(f"{path}: column {column!r} has no finite value > 0")
    for columns, floor, bound in ((positive, 1, "> 0"), (non_negative, 0, ">= 0")):
        for column in columns:
            converted[column] = values = numeric_column(table, column, path, whole=True)
            good &= np.isfinite(values) & (values >= floor)
            if not good.any():
                also = f" (among the rows with a finite {', '.join(times)} > 0)" if times else ""
                raise MeasuredTableError(f"{path}: column {column!r} has no value {bound}{also}")
    if (~good).any():
        name = Path(path).name
        dropped[name] = dropped.get(name, 0) + int((~good).sum())
    return table.assign(**converted)[good]


def drop_rows(table: pd.DataFrame, meaningless: np.ndarray, path: str | Path, dropped: dict) -> pd.DataFrame:
    """`table` without the rows flagged `meaningless` (a shape that measures nothing), counted in
    `dropped[file name]` as `usable_rows` counts its own.

    Raises:
        MeasuredTableError: every row flagged (naming `path`).
    """
    if meaningless.all():
        raise MeasuredTableError(f"{path}: no row with a meaningful size (every row was dropped)")
    if meaningless.any():
        name = Path(path).name
        dropped[name] = dropped.get(name, 0) + int(meaningless.sum())
    return table[~meaningless]


def refuse_conflicting_duplicates(table: pd.DataFrame, keys: list[str], time_column: str,
                                  path: str | Path) -> pd.DataFrame:
    """`table` with one row per `keys`: a row repeating an earlier one's keys and time is the same
    measurement and kept once; a repeat with another time leaves the lookup two answers for one
    shape (a column overwritten or mislabelled), so it is refused.

    Rows are named as read (`table`'s index + 1, the module's row numbers).

    Raises:
        MeasuredTableError: naming `path`, the first two rows of one key with different times,
            the key's values and both times.
    """
    repeated = table.duplicated(keys, keep=False).to_numpy()
    if not repeated.any():
        return table
    groups = table[repeated].groupby(keys, sort=False)[time_column]
    for key, times in groups:
        if times.nunique() > 1:
            first = times.index[0]
            other = next(i for i in times.index if times[i] != times[first])
            values = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"  # 16, not 16.0
                               for k, v in zip(keys, key if isinstance(key, tuple) else (key,)))
            raise MeasuredTableError(f"{path}: rows {first + 1} and {other + 1} measure the same shape ({values}) with "
                                     f"different {time_column} ({times[first]:g} and {times[other]:g}); each shape "
                                     "must be measured once")
    return table.drop_duplicates(keys)
