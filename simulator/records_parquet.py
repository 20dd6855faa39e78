"""Write a large records frame to Parquet a row group at a time.

`DataFrame.to_parquet` first converts the whole frame to one Arrow table: for a requests frame
that copies every token time (8 bytes a token) while the frame still holds them, doubling the
run's peak memory at its very end. Converting and writing a slice of rows at a time bounds that
copy to one row group. Reading the file back (`pandas.read_parquet`) gives the same frame as
`to_parquet`'s file does.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

ROW_GROUP_ROWS = 1 << 14


def write_in_row_groups(frame: pd.DataFrame, path: str | Path, row_group_rows: int = ROW_GROUP_ROWS) -> None:
    """Write `frame` (no index) to `path` in row groups of `row_group_rows` rows.

    The schema is inferred first from a few rows that hold a value in every object column
    (`_schema`), so a slice whose list column holds only missing values (a point that kept no
    token times, concatenated with one that did) is written with the same column types.

    Raises:
        OSError: the file cannot be written; pyarrow.ArrowInvalid: a column Arrow cannot store.
    """
    schema = _schema(frame)
    with pq.ParquetWriter(path, schema) as writer:
        if frame.empty:
            writer.write_table(pa.Table.from_pandas(frame, schema=schema, preserve_index=False))
        for start in range(0, len(frame), row_group_rows):
            part = frame.iloc[start:start + row_group_rows]
            writer.write_table(pa.Table.from_pandas(part, schema=schema, preserve_index=False),
                               row_group_size=row_group_rows)


def _schema(frame: pd.DataFrame) -> pa.Schema:
    """The Arrow schema of `frame`, inferred from its first row and, for each object column, the
    first row where it has a value (`pa.Schema.from_pandas` of the whole frame would convert
    every token time just to learn the column is a list of doubles)."""
    rows = {0} if len(frame) else set()
    for name in frame.columns:
        if frame[name].dtype == object:
            present = frame[name].notna().to_numpy()
            if present.any():
                rows.add(int(present.argmax()))
    return pa.Schema.from_pandas(frame.iloc[sorted(rows)], preserve_index=False)
