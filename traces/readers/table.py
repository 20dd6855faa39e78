"""A trace file as a table of raw text, keeping every row's true number in the file.

Row numbers matter more than speed here: an error must point at the line a user will open, so
blank lines are skipped without renumbering and lines that cannot be split into fields stay in
place, flagged, instead of being dropped or shifting the rows after them. The CSV reader lives
in `traces.readers.csv_table`, the JSON-lines one in `traces.readers.jsonl_table`.
"""
from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from traces.errors import TraceFormatError


@dataclass(frozen=True)
class RawTable:
    """A trace as text, one row per non-blank data line.

    Attributes:
        frame: one str column per file column (JSON values as text; no value -> "").
        row_numbers: data-row number of each row, from 1 (CSV: file line - 1; JSONL: file line).
        line_numbers: file line of each row, from 1.
        line_texts: the line as read for rows that could not be split into fields (too many
            fields, not a JSON object), "" for the others; shape (n,) of str.
        line_problems: for those rows, what a valid line would have been, in words (the
            `expected` of their error); "" for the others; shape (n,) of str.
        bad_quotes: column -> mask, shape (n,), of rows whose field in that column has a stray
            double quote (CSV only; the field keeps its text as read).
        extra: per-row objects that are not text (Mooncake `hash_ids`), by key.
        first_row_of_column: every column (CSV header) or JSON key the file holds -> the first
            row that has it (CSV: None, the header holds it).
        has_lines: False for a binary file (Parquet), whose rows are not lines: errors then name
            the row only.
        bad_lists: key -> the value as JSON text, shape (n,) of str, for rows whose list key
            (`extra`) is not a list of integers; "" for the others (JSON lines only).
    """

    frame: pd.DataFrame
    row_numbers: np.ndarray
    line_numbers: np.ndarray
    line_texts: np.ndarray
    line_problems: np.ndarray
    bad_quotes: dict[str, np.ndarray]
    extra: dict[str, list]
    first_row_of_column: dict[str, int | None]
    has_lines: bool = True
    bad_lists: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def malformed(self) -> np.ndarray:
        """Boolean mask, shape (n,), of rows that could not be split into fields."""
        return self.line_problems != ""

    def subset(self, keep: np.ndarray) -> RawTable:
        """The rows where `keep` (bool, shape (n,)) is True, with their numbers and extras."""
        keep = np.asarray(keep, dtype=bool)
        index = np.flatnonzero(keep)
        return RawTable(
            self.frame.loc[keep].reset_index(drop=True),
            self.row_numbers[keep],
            self.line_numbers[keep],
            self.line_texts[keep],
            self.line_problems[keep],
            {column: mask[keep] for column, mask in self.bad_quotes.items()},
            {key: [values[i] for i in index] for key, values in self.extra.items()},
            self.first_row_of_column,
            self.has_lines,
            {key: texts[keep] for key, texts in self.bad_lists.items()},
        )

    def unknown_columns(self, known) -> list[str]:
        """The columns (JSON keys) the file holds that are not in `known`, in file order."""
        return [name for name in self.first_row_of_column if name not in known]


# Parquet files begin (and end) with these 4 bytes (Apache Parquet format specification).
_PARQUET_MAGIC = b"PAR1"
# What `stat` calls each kind of file that is not a regular one, for messages.
_FILE_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def check_regular_file(path: Path) -> None:
    """Raise unless `path` is a regular file (after symlinks), without opening it: a FIFO waits
    for a writer forever and /dev/zero never ends, so neither is read.

    Raises:
        FileNotFoundError: nothing at `path`.
        IsADirectoryError: a folder.
        TraceFormatError: anything else that is not a regular file (FIFO, device, socket).
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "trace file not found", str(path)) from None
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "a folder, not a trace file", str(path))
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _FILE_KINDS if test(mode)), "a special file")
        raise TraceFormatError(path, reason="not a regular file",
                               expected=f"a trace file (a regular file); this is {kind}, which is not opened "
                               "(reading it could wait forever or never end)")


def is_parquet(path: Path) -> bool:
    """True when the file begins with Parquet's magic bytes."""
    with path.open("rb") as handle:
        return handle.read(len(_PARQUET_MAGIC)) == _PARQUET_MAGIC


def first_line(path: Path) -> str:
    """The first line of the file without its newline or a UTF-8 byte-order mark.

    Raises:
        TraceFormatError: the file is not UTF-8 text (a Parquet file is named as such).
    """
    if is_parquet(path):
        raise TraceFormatError(path, field="header", value="PAR1...",
                               expected="a CSV or JSON-lines file for this format; this is a Parquet file (read "
                               "it with format auto or canonical_parquet: the canonical columns as Parquet)")
    try:
        with path.open(encoding="utf-8-sig") as handle:
            return handle.readline().rstrip("\r\n")
    except UnicodeDecodeError as error:
        raise not_utf8(path, error) from None


def csv_header(path: Path) -> list[str]:
    """Column names of a CSV file's header line, stripped of spaces and double quotes."""
    return [name.strip().strip('"') for name in first_line(path).split(",")]


def read_text(path: Path) -> str:
    """The whole file as text, line ends as written (newline=""), without a byte-order mark."""
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            return handle.read()
    except UnicodeDecodeError as error:
        raise not_utf8(path, error) from None


def not_utf8(path: Path, error: UnicodeDecodeError) -> TraceFormatError:
    """The error for a file that is not UTF-8 text, naming the byte where decoding failed."""
    return TraceFormatError(path, expected=f"UTF-8 text ({error.reason} at byte {error.start})")
