"""Read a CSV trace into a `RawTable`: one row per physical line, quotes checked field by field.

Quote characters are not given to a CSV parser: a stray `"` would make it read every later line
as one field (silently dropping the rest of the file), and Python's csv module drops a line
with a field over 131,072 characters. Instead every physical line (ended by \\n, \\r\\n or \\r)
is one row, split at every comma, and a field is either free of double quotes or wholly inside
a pair of them (`"ChatGPT"`, with `""` for a quote inside); any other quote is a row error
("bad quoting") naming its field. Trace fields are numbers and labels, so a comma inside quotes
is not supported: that line has too many fields ("malformed line"). So the rows loaded,
rejected and filtered always add up to the file's non-blank data lines.

pandas' C parser, with quoting off, reads the common well-formed file fast; whenever its rows
do not match the file's lines one for one (too many fields, a blank line), a plain split of
each line takes over.
"""
from __future__ import annotations

import csv
import io
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from traces.errors import TraceFormatError
from traces.readers.table import RawTable, csv_header, read_text

_LINE_END = re.compile(r"\r\n|\r|\n")
# A field wholly inside double quotes, inner quotes doubled; spaces around the quotes allowed.
_QUOTED = r'\s*"(?:[^"]|"")*"\s*'


def read_csv_table(path: Path) -> RawTable:
    """Every column of a CSV file as text, with data rows numbered from 1 (file line 2).

    Raises:
        TraceFormatError: the file is not UTF-8, or its header names a column twice.
    """
    header = _unique_header(path)
    text = read_text(path)
    frame = _fast_frame(text, header)
    if frame is None:
        frame, row_numbers, line_texts, line_problems = _split_lines(_LINE_END.split(text), header)
    else:
        row_numbers = np.arange(1, len(frame) + 1)
        blank = _blank_lines(frame, text)
        if blank.any():
            frame, row_numbers = frame.loc[~blank].reset_index(drop=True), row_numbers[~blank]
        line_texts = line_problems = np.full(len(frame), "", dtype=object)
    frame, bad_quotes = _unquote(frame)
    columns = {name: None for name in header}
    return RawTable(frame, row_numbers, row_numbers + 1, line_texts, line_problems, bad_quotes, {}, columns)


def _unique_header(path: Path) -> list[str]:
    # A trailing comma leaves a column without a name: it gets one, for messages and reports.
    header = [name or f"(unnamed column {number})" for number, name in enumerate(csv_header(path), start=1)]
    seen = set()
    for name in header:
        if name in seen:
            raise TraceFormatError(path, field="header", value=name, reason="column named twice",
                                   expected="each column named once")
        seen.add(name)
    return header


def _fast_frame(text: str, header: list[str]) -> pd.DataFrame | None:
    """The data lines as a frame of str, or None when its rows may not be the file's lines."""
    try:
        with warnings.catch_warnings():
            # pandas only warns when the first data line has too many fields, and drops the extras.
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(io.StringIO(text), dtype=str, na_filter=False, skip_blank_lines=False,
                                index_col=False, quoting=csv.QUOTE_NONE, engine="c")
    except (pd.errors.ParserError, pd.errors.ParserWarning):
        return None
    if len(frame.columns) != len(header) or len(frame) != _count_data_lines(text):
        return None
    frame.columns = header
    return frame.fillna("")


def _count_data_lines(text: str) -> int:
    """Physical lines after the header (a last line without its line end counts)."""
    ends = text.count("\n") + text.count("\r") - text.count("\r\n")
    lines = ends + (1 if text and text[-1] not in "\r\n" else 0)
    return max(lines - 1, 0)


def _blank_lines(frame: pd.DataFrame, text: str) -> np.ndarray:
    """Mask, shape (n,), of the frame's rows that are blank lines (spaces only, no comma).

    Row i of the frame is physical line i + 1 (0-based; `_fast_frame` checked the count). Only
    rows whose first field is empty can be blank, so the lines are split only when one is.
    """
    candidates = np.flatnonzero(frame.iloc[:, 0].str.strip().eq("").to_numpy()) if len(frame) else []
    blank = np.zeros(len(frame), dtype=bool)
    if len(candidates):
        lines = _LINE_END.split(text)
        blank[candidates] = [not lines[i + 1].strip() for i in candidates]
    return blank


def _split_lines(lines: list[str], header: list[str]) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, np.ndarray]:
    """Split each non-blank data line at its commas: (frame, row numbers, line texts, line problems).

    A line with more fields than the header keeps its place with empty fields, its text and
    what was expected; a line with fewer is padded with empty fields (a missing field).
    """
    width = len(header)
    too_many = (f"no more fields than the header's {width} (trace fields are numbers and labels: a comma "
                "inside quotes is not supported)")
    rows, numbers, texts, problems = [], [], [], []
    for number, line in enumerate(lines[1:], start=1):
        if not line.strip():
            continue  # blank: skipped, and the rows after it keep their numbers
        fields = line.split(",")
        bad = len(fields) > width
        rows.append([""] * width if bad else fields + [""] * (width - len(fields)))
        numbers.append(number)
        texts.append(line if bad else "")
        problems.append(too_many if bad else "")
    frame = pd.DataFrame(rows, columns=header, dtype=str) if rows else pd.DataFrame(columns=header, dtype=str)
    return (frame, np.asarray(numbers, dtype=np.int64), np.asarray(texts, dtype=object),
            np.asarray(problems, dtype=object))


def _unquote(frame: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """Fields wholly in quotes lose them ("" -> "); other fields with a quote are flagged per column."""
    bad_quotes = {}
    for column in frame.columns:
        values = frame[column]
        has_quote = values.str.contains('"', regex=False).to_numpy()
        if not has_quote.any():
            continue
        quoted = has_quote & values.str.fullmatch(_QUOTED).to_numpy()
        if quoted.any():
            frame.loc[quoted, column] = values[quoted].str.strip().str.slice(1, -1).str.replace('""', '"')
        if (has_quote & ~quoted).any():
            bad_quotes[column] = has_quote & ~quoted
    return frame, bad_quotes
