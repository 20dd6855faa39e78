"""The error raised for a trace file that cannot be read as its format says."""
from __future__ import annotations

from pathlib import Path


class TraceFormatError(ValueError):
    """A trace file holds something its format does not allow.

    The message names everything a user needs to find and fix the problem: the file, the row
    (rows are numbered from 1 for the first data row, so row 1 of a CSV is file line 2, as in
    `../shared/cases/README.md`), the field, the bad value and what would be valid. File-level
    problems (an unknown header, text that is not UTF-8) leave `row` as None.

    Attributes:
        path: the trace file.
        row: the data row, from 1; None for a problem with the file as a whole.
        line: the file line of that row (from 1), when it differs from what `row` implies.
        field: the column (or "header"), None when the whole row is at fault.
        reason: the failed check, as counted in `TraceLoadResult.rejected_rows` ("prompt_tokens < 1").
        value: the offending text, as it appears in the file (the message cuts it past 80 characters).
        expected: what would have been valid, in words.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        row: int | None = None,
        line: int | None = None,
        field: str | None = None,
        reason: str | None = None,
        value: object = None,
        expected: str,
    ) -> None:
        self.path = Path(path)
        self.row = row
        self.line = line
        self.field = field
        self.reason = reason
        self.value = value
        self.expected = expected
        super().__init__(self._message())

    def _message(self) -> str:
        where = [str(self.path)]
        if self.row is not None:
            where.append(f"row {self.row}" + (f" (file line {self.line})" if self.line is not None else ""))
        if self.field is not None:
            where.append(f"field {self.field!r}")
        if self.reason is not None:
            where.append(self.reason)
        got = "" if self.row is None and self.value is None else f"got {_shown(self.value)}; "
        return ": ".join(where) + f": {got}expected {self.expected}"


# Longest value quoted whole in a message; a longer one (a 200,000-character field) is cut.
_MAX_SHOWN_CHARS = 80


def _shown(value: object) -> str:
    """repr of the value, its middle elided past _MAX_SHOWN_CHARS, with its length."""
    text = repr(value)
    if len(text) <= _MAX_SHOWN_CHARS:
        return text
    length = len(value) if isinstance(value, str) else len(text)
    half = _MAX_SHOWN_CHARS // 2
    return f"{text[:half]}...{text[-half:]} ({length:,} characters)"
