"""Write a large records frame to Parquet a row group at a time, and read token times back.

`DataFrame.to_parquet` first converts the whole frame to one Arrow table: for a requests frame
that copies every token time (8 bytes a token) while the frame still holds them, doubling the
run's peak memory at its very end. Converting and writing a slice of rows at a time bounds that
copy to one row group. Reading the file back (`pandas.read_parquet`) gives the same frame as
`to_parquet`'s file does. `RowGroupWriter` takes the slices one by one, so a run can write its
records as it goes (`simulator.records_stream`); `ParquetTokenTimes` reads a requests file's
token times back a row group at a time (the TBT/ITL percentiles of a run that wrote them).
"""
from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

ROW_GROUP_ROWS = 1 << 14


class RowGroupWriter:
    """A Parquet file written one frame slice (row group) at a time; the schema is the first
    slice's (`_schema`), so every slice must have its columns and dtypes.

    Args:
        path: the file (created or truncated at the first `write`, or at `close` when nothing
            was written).
        row_group_rows: the largest row group written (a longer slice is split).
        read_back_names: name list items "element", as a Parquet file reads back (pandas names
            them "item"): the file is then the very bytes `concat_files` makes of it, so a
            sweep's one point file is copied into the run folder, not re-encoded
            (`experiments.planning.sweep`).

    Raises (from `write`/`close`):
        OSError: the file cannot be written; pyarrow.ArrowInvalid: a column Arrow cannot store.
    """

    def __init__(self, path: str | Path, row_group_rows: int = ROW_GROUP_ROWS, read_back_names: bool = False) -> None:
        self.path, self.row_group_rows = path, row_group_rows
        self.read_back_names = read_back_names
        self._writer: pq.ParquetWriter | None = None
        self._schema: pa.Schema | None = None

    @property
    def started(self) -> bool:
        """Whether a first `write` gave the file its schema."""
        return self._writer is not None

    def write(self, part: pd.DataFrame) -> None:
        """Append the rows of `part` (its index is not written)."""
        if self._writer is None:
            self._schema = _schema(part)
            if self.read_back_names:
                self._schema = read_back_schema(self._schema)
            self._writer = pq.ParquetWriter(self.path, self._schema)
            if part.empty:
                self._writer.write_table(pa.Table.from_pandas(part, schema=self._schema, preserve_index=False))
        for start in range(0, len(part), self.row_group_rows):
            rows = part.iloc[start:start + self.row_group_rows]
            self._writer.write_table(pa.Table.from_pandas(rows, schema=self._schema, preserve_index=False),
                                     row_group_size=self.row_group_rows)

    def write_with_arrays(self, part: pd.DataFrame, arrays: dict[str, pa.Array]) -> None:
        """`write` of `part` with the columns `arrays` names given as Arrow arrays of the
        schema's types (not converted from pandas objects: a list column of numpy arrays costs a
        Python step per row); `part` has the other columns. Only after a first `write` fixed the
        schema. The file is the same as `write` of the whole frame gives."""
        schema = self._schema
        if schema is None:
            raise ValueError(f"{self.path}: write_with_arrays before a first write gave the schema")
        rest = pa.schema([f for f in schema if f.name not in arrays], metadata=schema.metadata)
        table = pa.Table.from_pandas(part, schema=rest, preserve_index=False)
        for name, array in arrays.items():
            position = schema.get_field_index(name)
            field = schema.field(position)
            table = table.add_column(position, field, array if array.type.equals(field.type) else array.cast(field.type))
        for start in range(0, table.num_rows, self.row_group_rows):
            self._writer.write_table(table.slice(start, self.row_group_rows), row_group_size=self.row_group_rows)

    def close(self, empty: pd.DataFrame | None = None) -> None:
        """Finish the file; when nothing was written, `empty` (a frame of no rows with the
        columns) gives it its schema."""
        if self._writer is None:
            if empty is None:
                raise ValueError(f"{self.path}: no rows were written and no empty frame gives the columns")
            self.write(empty)
        self._writer.close()


def write_in_row_groups(frame: pd.DataFrame, path: str | Path, row_group_rows: int = ROW_GROUP_ROWS) -> None:
    """Write `frame` (no index) to `path` in row groups of `row_group_rows` rows.

    The schema is inferred first from a few rows that hold a value in every object column
    (`_schema`), so a slice whose list column holds only missing values (a point that kept no
    token times, concatenated with one that did) is written with the same column types.

    Raises:
        OSError: the file cannot be written; pyarrow.ArrowInvalid: a column Arrow cannot store.
    """
    writer = RowGroupWriter(path, row_group_rows)
    writer.write(frame)
    writer.close()


def concat_files(sources: list, path: str | Path) -> None:
    """Write the rows of `sources` (Parquet files, or frames) into `path`, in order, a row group
    at a time, with the first source's schema and pandas metadata.

    Raises:
        ValueError: the sources' columns or types differ (`same_columns` says so beforehand);
        OSError: a file cannot be read or written.
    """
    schemas = [source_schema(source) for source in sources]
    if not same_columns(schemas):
        raise ValueError(f"{path}: the sources to join have different columns or types")
    writer = pq.ParquetWriter(path, schemas[0]) if schemas else None
    try:
        for source in sources:
            if isinstance(source, pd.DataFrame):
                for start in range(0, len(source), ROW_GROUP_ROWS):
                    writer.write_table(pa.Table.from_pandas(source.iloc[start:start + ROW_GROUP_ROWS],
                                                            schema=schemas[0], preserve_index=False))
                continue
            file = pq.ParquetFile(source)
            for i in range(file.num_row_groups):
                table = file.read_row_group(i).replace_schema_metadata(writer.schema.metadata)
                writer.write_table(table, row_group_size=max(1, table.num_rows))
    finally:
        if writer is not None:
            writer.close()


def copy_with_constants(source: str | Path, path: str | Path, constants: dict[str, int]) -> None:
    """Write the rows of the Parquet file `source` into `path`, row group by row group, with
    each column named in `constants` set to that value (of the column's type) in every row: a
    cached point's records given the `point_id` of the sweep that reads them. The schema and
    pandas metadata are the source's, so the file reads back as the source with those values.

    Raises:
        KeyError: a constant names no column; OSError: a file cannot be read or written.
    """
    file = pq.ParquetFile(source)
    schema = file.schema_arrow
    positions = {name: schema.get_field_index(name) for name in constants}
    missing = [name for name, position in positions.items() if position < 0]
    if missing:
        raise KeyError(f"{source}: no column {', '.join(missing)} to set")
    with pq.ParquetWriter(path, schema) as writer:
        for i in range(max(1, file.num_row_groups)):
            table = file.read_row_group(i) if file.num_row_groups else schema.empty_table()
            for name, position in positions.items():
                field = schema.field(position)
                table = table.set_column(position, field, pa.array(np.full(table.num_rows, constants[name]), field.type))
            writer.write_table(table, row_group_size=max(1, table.num_rows))


def source_schema(source) -> pa.Schema:
    """The Arrow schema of a Parquet file, or of a frame as `write_in_row_groups` writes it."""
    return _schema(source) if isinstance(source, pd.DataFrame) else pq.read_schema(source)


def read_back_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` with each list column's items named "element", as `pq.read_schema` gives the
    schema of a file written with it (pandas' conversion names them "item")."""
    for i, field in enumerate(schema):
        if pa.types.is_list(field.type) and field.type.value_field.name != "element":
            schema = schema.set(i, field.with_type(pa.list_(field.type.value_field.with_name("element"))))
    return schema


def rewrites_as_itself(path: str | Path) -> bool:
    """Whether `concat_files([path], out)` would write the very bytes of the Parquet file
    `path`: true of a file `RowGroupWriter` or `concat_files` wrote whose stored Arrow schema
    names list items as they read back ("element", `read_back_schema`). `concat_files` writes
    each row group again as one, with the schema and metadata read back, and Parquet's encoding
    is a function of them and the values; only the stored schema's list item names could differ
    (pandas writes "item", they read back as "element")."""
    stored = pq.read_metadata(path).metadata or {}
    if b"ARROW:schema" not in stored:
        return False
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(stored[b"ARROW:schema"])))
    return schema.equals(read_back_schema(schema), check_metadata=True)


def same_columns(schemas: list[pa.Schema]) -> bool:
    """Whether the schemas have the same columns, in order, of the same types (metadata aside)."""
    return all(schema.equals(schemas[0], check_metadata=False) for schema in schemas[1:])


def num_rows(source) -> int:
    """Rows of a frame or a Parquet file (its footer)."""
    return len(source) if isinstance(source, pd.DataFrame) else pq.ParquetFile(source).metadata.num_rows


class ParquetTokenTimes:
    """The `token_times_s` column of a requests file (rows in the file's order), read back a row
    group at a time: `chunks` gives the same (flat times, tokens per request) as
    `SeriesTokenTimes.chunks` of the frame the file was written from."""

    def __init__(self, path: str | Path) -> None:
        self.path = path

    def chunks(self, rows: np.ndarray, chunk_requests: int):
        """Yield (flat float64 times, int64 tokens per request) for `rows` (sorted row numbers),
        `chunk_requests` requests at a time (the last chunk may be shorter). The file is read
        in batches of `_READ_ROWS` rows, so a pass holds a few MB of it, not a row group."""
        pieces, held, start = [], 0, 0
        for batch in pq.ParquetFile(self.path, buffer_size=1 << 20, pre_buffer=False).iter_batches(batch_size=_READ_ROWS, columns=["token_times_s"]):
            end = start + batch.num_rows
            picked = rows[np.searchsorted(rows, start):np.searchsorted(rows, end)] - start
            if picked.size:
                column = batch.column(0)
                offsets = column.offsets.to_numpy()
                values = column.flatten().to_numpy()  # the batch's tokens (offsets start at offsets[0])
                lengths = np.diff(offsets)
                keep = np.zeros(lengths.size, dtype=bool)
                keep[picked] = True
                pieces.append((values[np.repeat(keep, lengths)], lengths[picked]))
                held += picked.size
                while held >= chunk_requests:
                    held -= chunk_requests
                    yield _take(pieces, chunk_requests)
            start = end
        if held:
            yield _take(pieces, held)


_READ_ROWS = 2048


def _take(pieces: list[tuple[np.ndarray, np.ndarray]], n: int) -> tuple[np.ndarray, np.ndarray]:
    """The first `n` requests of `pieces` (a list of (flat, lengths), consumed in place)."""
    flats, lengths, taken = [], [], 0
    while taken < n:
        flat, counts = pieces[0]
        use = min(n - taken, counts.size)
        tokens = int(counts[:use].sum())
        flats.append(flat[:tokens])
        lengths.append(counts[:use])
        if use == counts.size:
            pieces.pop(0)
        else:
            pieces[0] = (flat[tokens:], counts[use:])
        taken += use
    return np.concatenate(flats), np.concatenate(lengths)


class SeriesTokenTimes:
    """A frame's `token_times_s` column (one float64 sequence per row) as `ParquetTokenTimes`
    reads a file's."""

    def __init__(self, token_times: pd.Series) -> None:
        self.token_times = token_times

    def chunks(self, rows: np.ndarray, chunk_requests: int):
        for b0 in range(0, rows.size, chunk_requests):
            lists = self.token_times.iloc[rows[b0:b0 + chunk_requests]].tolist()
            lengths = np.fromiter(map(len, lists), np.int64, len(lists))
            flat = np.concatenate([np.asarray(t, dtype=np.float64) for t in lists]) if lists else np.zeros(0)
            yield flat, lengths


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
