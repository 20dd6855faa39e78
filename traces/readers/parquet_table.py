"""Read a canonical Parquet trace (what `trace convert --to x.parquet` writes) into a `RawTable`.

Each column becomes the text a canonical CSV would hold, so the rows are validated by the very
checks the CSV's are (`traces.readers.parse_file`): a float as Python's shortest round-trip repr
(read back as the same float), an integer in decimal, a null or NaN as "" (a missing field),
text as stored. A type with no such text (a list, a struct, a date) is shown as Python prints it
and rejected by its field's check. Rows are numbered from 1 in file order; a Parquet file has no
lines, so errors name the row only.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from traces.errors import TraceFormatError
from traces.readers.table import RawTable


def parquet_columns(path: Path) -> list[str]:
    """The column names of a Parquet file's schema (the file's data is not read).

    Raises:
        TraceFormatError: the file is not Parquet that pyarrow can read (truncated, corrupt).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return list(pq.read_schema(path).names)
    except (pa.ArrowException, OSError) as exc:
        raise _unreadable(path, exc) from None


def read_parquet_table(path: Path) -> RawTable:
    """Every column of a Parquet file as text (module docstring), rows numbered from 1.

    Raises:
        TraceFormatError: not readable as Parquet, or a column name given twice.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise _unreadable(path, exc) from None
    names = table.column_names
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise TraceFormatError(path, field="header", value=",".join(names),
                               expected=f"each column once ({', '.join(twice)} appears more than once)")
    frame = pd.DataFrame({name: _as_text(table.column(name).to_pandas()) for name in names}, columns=names)
    n = len(frame)
    rows = np.arange(1, n + 1, dtype=np.int64)
    return RawTable(frame, rows, rows.copy(), np.full(n, "", dtype=object), np.full(n, "", dtype=object), {}, {},
                    {name: None for name in names}, has_lines=False)


def _as_text(values: pd.Series) -> pd.Series:
    """A column as the text a canonical CSV would hold ("" for null/NaN)."""
    missing = values.isna().to_numpy()
    if pd.api.types.is_float_dtype(values.dtype):
        text = pd.Series([repr(float(v)) for v in values.to_numpy(dtype=float)], dtype=object)
    else:
        text = pd.Series([str(v) for v in values.to_numpy(dtype=object)], dtype=object)
    text[missing] = ""
    return text


def _unreadable(path: Path, exc: Exception) -> TraceFormatError:
    return TraceFormatError(path, field="header", value="PAR1...",
                            expected=f"a Parquet file pyarrow can read ({type(exc).__name__}: {exc})")
