"""Read a trace file into a table of raw text, keeping every row's true number in the file.

Row numbers matter more than speed here: an error must point at the line a user will open, so
blank lines are skipped without renumbering and lines with too many fields stay in place,
flagged, instead of being dropped or shifting the rows after them.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from traces.errors import TraceFormatError

# Fills a line that has more fields than the header, so it keeps its place and can be flagged.
_MALFORMED_MARK = "\x00malformed"


@dataclass(frozen=True)
class RawTable:
    """A trace as text, one row per non-blank data line.

    Attributes:
        frame: one str column per file column (JSON values as text; no value -> "").
        row_numbers: data-row number of each row, from 1 (CSV: file line - 1; JSONL: file line).
        line_numbers: file line of each row, from 1.
        line_texts: the line as read for rows that could not be split into fields (too many
            fields, not a JSON object), "" for the others; shape (n,) of str.
        extra: per-row objects that are not text (Mooncake `hash_ids`), by key.
        first_row_of_column: every column (CSV header) or JSON key the file holds -> the first
            row that has it (CSV: None, the header holds it).
    """

    frame: pd.DataFrame
    row_numbers: np.ndarray
    line_numbers: np.ndarray
    line_texts: np.ndarray
    extra: dict[str, list]
    first_row_of_column: dict[str, int | None]

    @property
    def malformed(self) -> np.ndarray:
        """Boolean mask, shape (n,), of rows that could not be split into fields."""
        return self.line_texts != ""

    def subset(self, keep: np.ndarray) -> RawTable:
        """The rows where `keep` (bool, shape (n,)) is True, with their numbers and extras."""
        keep = np.asarray(keep, dtype=bool)
        index = np.flatnonzero(keep)
        return RawTable(
            self.frame.loc[keep].reset_index(drop=True),
            self.row_numbers[keep],
            self.line_numbers[keep],
            self.line_texts[keep],
            {key: [values[i] for i in index] for key, values in self.extra.items()},
            self.first_row_of_column,
        )


def first_line(path: Path) -> str:
    """The first line of the file without its newline or a UTF-8 byte-order mark."""
    try:
        with path.open(encoding="utf-8-sig") as handle:
            return handle.readline().rstrip("\r\n")
    except UnicodeDecodeError as error:
        raise _not_utf8(path, error) from None


def csv_header(path: Path) -> list[str]:
    """Column names of a CSV file's header line, stripped of spaces and double quotes."""
    return [name.strip().strip('"') for name in first_line(path).split(",")]


def read_csv_table(path: Path) -> RawTable:
    """Every column of a CSV file as text, with data rows numbered from 1 (file line 2).

    pandas' C parser reads the common, well-formed file fast; only when it meets a line with
    too many fields does the slower Python parser run, which can keep that line in place.
    """
    options = dict(
        dtype=str, keep_default_na=False, skip_blank_lines=False, index_col=False, encoding="utf-8-sig"
    )
    try:
        try:
            frame = pd.read_csv(path, **options)
        except pd.errors.ParserError:
            frame = pd.read_csv(path, engine="python", on_bad_lines=_mark_malformed, **options)
    except UnicodeDecodeError as error:
        raise _not_utf8(path, error) from None
    frame.columns = [str(name).strip() for name in frame.columns]
    frame = frame.fillna("")
    first = frame.iloc[:, 0].astype(str)
    malformed = first.str.startswith(_MALFORMED_MARK).to_numpy()
    line_texts = np.where(malformed, first.str.slice(len(_MALFORMED_MARK)).to_numpy(dtype=object), "")
    keep = ~_blank_rows(frame) | malformed
    row_numbers = np.arange(1, len(frame) + 1)[keep]
    frame = frame.loc[keep].reset_index(drop=True)
    columns = {name: None for name in frame.columns}
    return RawTable(frame, row_numbers, row_numbers + 1, line_texts[keep], {}, columns)


def _mark_malformed(fields: list[str]) -> list[str]:
    # Called by pandas for a line with more fields than the header. pandas pads the short
    # replacement with empty fields, so the line keeps its place holding only the mark and
    # its own text (for the error message).
    return [_MALFORMED_MARK + ",".join(fields)]


def _not_utf8(path: Path, error: UnicodeDecodeError) -> TraceFormatError:
    return TraceFormatError(path, expected=f"UTF-8 text ({error.reason} at byte {error.start})")


def _blank_rows(frame: pd.DataFrame) -> np.ndarray:
    """Rows whose every field is empty or spaces: blank lines, skipped without renumbering."""
    if frame.empty:
        return np.zeros(len(frame), dtype=bool)
    return frame.apply(lambda column: column.str.strip() == "").all(axis=1).to_numpy()


def read_jsonl_table(path: Path, columns: list[str], list_keys: list[str]) -> RawTable:
    """Selected keys of a JSON-lines file as text, rows numbered by file line (from 1).

    Args:
        columns: keys read as text (absent or null -> "").
        list_keys: keys holding lists of integers, returned in `extra` as tuples ((), if absent).
    """
    texts: dict[str, list[str]] = {key: [] for key in columns}
    extra: dict[str, list] = {key: [] for key in list_keys}
    first_row_of_key: dict[str, int | None] = {}
    lines, line_texts = [], []
    try:
        with path.open(encoding="utf-8-sig") as handle:
            for line_number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                record = _json_object(line)
                lines.append(line_number)
                line_texts.append(line.strip() if record is None else "")
                record = record or {}
                for key in record.keys() - first_row_of_key.keys():
                    first_row_of_key[key] = line_number
                for key in columns:
                    value = record.get(key)
                    texts[key].append("" if value is None else str(value))
                for key in list_keys:
                    extra[key].append(_int_tuple(record.get(key)))
    except UnicodeDecodeError as error:
        raise _not_utf8(path, error) from None
    line_numbers = np.asarray(lines, dtype=np.int64)
    frame = pd.DataFrame(texts, dtype=str)
    return RawTable(frame, line_numbers, line_numbers, np.asarray(line_texts, dtype=object), extra, first_row_of_key)


def json_keys(line: str) -> list[str]:
    """Keys of the JSON object on `line`; [] when it is not one."""
    return list(_json_object(line) or {})


def _json_object(line: str) -> dict | None:
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def _int_tuple(value: object) -> tuple[int, ...]:
    # Prefix hashes only feed prefix caching; an unusable list is dropped rather than failing the row.
    # set(map(type, ...)) runs in C (a generator of isinstance calls was half the load time); bools are not ints.
    if isinstance(value, list) and (not value or set(map(type, value)) == {int}):
        return tuple(value)
    return ()
