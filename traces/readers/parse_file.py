"""Read, filter and validate any supported file into columns: the step shared by every reader."""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from traces.errors import TraceFormatError
from traces.readers import fields
from traces.readers.formats import TraceFormat, check_header, detect_format, format_by_name
from traces.readers.row_problems import RowProblems
from traces.readers.csv_table import read_csv_table
from traces.readers.jsonl_table import BAD_LIST_EXPECTED, bad_list_reason, read_jsonl_table
from traces.readers.parquet_table import read_parquet_table
from traces.readers.table import RawTable, check_regular_file, first_line

# column -> the values of that column to keep, e.g. {"Model": ["ChatGPT"]} for BurstGPT.
RowFilter = Mapping[str, Sequence[str]]


@dataclass(frozen=True)
class ParsedFile:
    """The valid rows of a file as numbers, and an account of every row that is not among them.

    Attributes:
        path: the file read.
        spec: its format (after auto-detection).
        columns: "prompt_tokens", "output_tokens", "priority" (int64) and, for formats with
            arrivals, "arrival_s" (float seconds, the file's origin); "prefix_block_tokens" (int64,
            512 where absent) for canonical JSON lines: valid rows only, file order.
        prefix_hash_ids: per valid row, its prefix-block hashes; None for formats without them.
        rejected_rows: reason -> row numbers (from 1) of rows that failed validation.
        filtered_rows: reason -> row numbers of valid-or-not rows that `where` left out.
        ignored_columns: columns (or JSON keys) the format does not define, ignored (lenient only).
        unused_columns: columns the format defines that the file has but the simulator does not
            read (`UNUSED_COLUMNS`: a canonical file's `request_id`).
    """

    path: Path
    spec: TraceFormat
    columns: dict[str, np.ndarray]
    prefix_hash_ids: list[tuple[int, ...]] | None
    rejected_rows: dict[str, list[int]]
    filtered_rows: dict[str, list[int]]
    ignored_columns: tuple[str, ...]
    unused_columns: tuple[str, ...] = ()

    def row_account(self) -> dict:
        """The keyword arguments of `RowAccount`: path, format and what was not loaded."""
        return dict(path=self.path, format=self.spec.name, rejected_rows=self.rejected_rows,
                    filtered_rows=self.filtered_rows, ignored_columns=self.ignored_columns,
                    unused_columns=self.unused_columns)


# Columns a format defines but the simulator does not read, said whenever a file has them: a
# canonical file's own request_id is not kept (requests are numbered 0..n-1 in arrival order,
# `traces.readers.read_trace`), so results joined back by the file's ids would pair wrong rows.
UNUSED_COLUMNS = ("request_id",)


def parse_file(
    path: str | os.PathLike,
    format: str = "auto",
    strict: bool = False,
    where: RowFilter | None = None,
    need_arrivals: bool = False,
) -> ParsedFile:
    """Read one file of any format in `traces.readers.formats.FORMATS` and validate every row.

    Rows left out by `where` are counted apart and not validated. In strict mode the first
    unknown column and then the first bad row raise; otherwise both are counted and skipped.

    Raises:
        FileNotFoundError: no file at `path`.
        IsADirectoryError: `path` is a folder.
        TraceFormatError: not a regular file (a FIFO, a device), unknown/incomplete header, not UTF-8, a `where` column the file lacks,
            a lengths-only file when `need_arrivals`; in strict mode an unknown column or a bad row.
        ValueError: an unknown `format` name.
    """
    path = Path(path)
    check_regular_file(path)  # before any open: a FIFO or /dev/zero would block or never end
    spec = detect_format(path) if format == "auto" else format_by_name(format)
    if need_arrivals and not spec.has_arrivals:
        raise TraceFormatError(
            path, field="header", value=first_line(path),
            expected="a trace with arrival times; this lengths-only file gives lengths to combine with an "
            "arrival process (trace kind lengths_file, or traces.read_lengths)",
        )
    check_header(path, spec)
    where = dict(where or {})
    table = _read_table(path, spec, list(where))
    ignored = _unknown_columns(path, spec, table, strict)
    table, filtered = _apply_where(path, table, where)
    problems = RowProblems(table.row_numbers, table.line_numbers if table.has_lines else None)
    columns = _parse_columns(spec, table, problems)
    error = problems.first_error(path)
    if strict and error is not None:
        raise error
    valid = problems.valid
    hashes = table.extra.get(spec.list_keys[0]) if spec.list_keys else None
    return ParsedFile(
        path, spec, {name: values[valid] for name, values in columns.items()},
        None if hashes is None else [ids for ids, ok in zip(hashes, valid) if ok],
        problems.rejected_rows(), filtered, ignored,
        tuple(c for c in UNUSED_COLUMNS if c in spec.optional and c in table.first_row_of_column),
    )


def _read_table(path: Path, spec: TraceFormat, where_columns: list[str]) -> RawTable:
    if spec.parquet:
        return read_parquet_table(path)
    if not spec.jsonl:
        return read_csv_table(path)
    columns = list(dict.fromkeys([*spec.required, *spec.optional, *where_columns]))
    return read_jsonl_table(path, columns, list(spec.list_keys))


def _unknown_columns(path: Path, spec: TraceFormat, table: RawTable, strict: bool) -> tuple[str, ...]:
    """Columns the format does not define; in strict mode the first one raises."""
    unknown = table.unknown_columns(spec.known)
    if strict and unknown:
        name = min(unknown, key=lambda key: table.first_row_of_column[key] or 0)
        row = table.first_row_of_column[name]
        raise TraceFormatError(
            path, row=row, field="header" if row is None else name,
            reason="unknown column" if row is None else "unknown field", value=name,
            expected=f"only the columns of format {spec.describe()} (strict mode; unknown columns are "
            "ignored and reported when strict is off)",
        )
    return tuple(unknown)


def _apply_where(path: Path, table: RawTable, where: dict[str, Sequence[str]]) -> tuple[RawTable, dict[str, list[int]]]:
    """Keep rows whose `column` text (stripped) is one of the given values, for every column.

    Malformed rows and rows with bad quoting in `column` are kept (and rejected later)."""
    filtered: dict[str, list[int]] = {}
    keep = np.ones(len(table.frame), dtype=bool)
    for column, values in where.items():
        if column not in table.first_row_of_column:
            raise TraceFormatError(
                path, field=column, reason="filter on a missing column",
                expected=f"a column of this file: {', '.join(table.first_row_of_column)}",
            )
        wanted = [str(value).strip() for value in values]
        match = table.frame[column].fillna("").astype(str).str.strip().isin(wanted).to_numpy()
        # A line that could not be split, or a field with a stray quote, has no value to filter
        # on: it stays, to be rejected for what is wrong with it.
        match = match | table.malformed | table.bad_quotes.get(column, False)
        dropped = keep & ~match
        if dropped.any():
            filtered[f"{column} not in {wanted}"] = table.row_numbers[dropped].tolist()
        keep &= match
    return (table if keep.all() else table.subset(keep)), filtered


def flag_line_problems(table: RawTable, problems: RowProblems) -> None:
    """Flag, first, what is wrong with a row before any field is read: a line that could not be
    split into fields ("malformed line"), a list key that is not a list of integers ("hash_ids not
    a list of integers", JSON lines), a stray quote ("bad quoting", CSV)."""
    for problem in pd.unique(table.line_problems[table.malformed]):
        problems.flag(table.line_problems == problem, fields.MALFORMED, "(whole line)", table.line_texts, problem)
    for key, texts in table.bad_lists.items():
        problems.flag(texts != "", bad_list_reason(key), key, texts, BAD_LIST_EXPECTED)
    for column, mask in table.bad_quotes.items():
        problems.flag(mask, fields.BAD_QUOTING, column, table.frame[column], fields.QUOTING_EXPECTED)


def _parse_columns(spec: TraceFormat, table: RawTable, problems: RowProblems) -> dict[str, np.ndarray]:
    """Parse the columns in check order (line, arrival, prompt, output, priority)."""
    frame = table.frame
    flag_line_problems(table, problems)
    columns = {}
    if spec.has_arrivals:
        columns["arrival_s"] = spec.parse_arrival_s(problems, frame[spec.arrival], spec.arrival)
    columns["prompt_tokens"] = fields.parse_tokens(problems, frame[spec.prompt], _label(spec.prompt, "prompt_tokens"), "prompt_tokens")
    columns["output_tokens"] = fields.parse_tokens(problems, frame[spec.output], _label(spec.output, "output_tokens"), "output_tokens")
    if "priority" in spec.optional and "priority" in frame.columns:
        columns["priority"] = fields.parse_priority(problems, frame["priority"], "priority")
    else:
        columns["priority"] = np.zeros(len(frame), dtype=np.int64)
    if "prefix_block_tokens" in spec.optional:  # tokens per prefix_hash_ids block; absent: Mooncake's 512
        texts = frame["prefix_block_tokens"].fillna("").astype(str)
        texts = texts.where(texts.str.strip() != "", "512")
        columns["prefix_block_tokens"] = fields.parse_tokens(problems, texts, "prefix_block_tokens", "prefix_block_tokens")
    return columns


def _label(column: str, canonical: str) -> str:
    # Errors name the column as the user's file spells it, and our name when that differs.
    return column if column == canonical else f"{column} ({canonical})"
