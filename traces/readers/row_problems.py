"""The first problem found in each row of a trace, gathered column by column without a Python loop."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from traces.errors import TraceFormatError


class RowProblems:
    """Records, per row, the first failed check: its reason, field, value and what was expected.

    Checks are applied in order (arrival, then prompt, then output; within a field: missing,
    non-numeric, out of range), and a row keeps only its first failure, so every rejected row is
    counted under exactly one reason.

    Args:
        row_numbers: the data-row number of each table row (from 1), shape (n,).
        line_numbers: the file line of each row (from 1), shape (n,); None for a file without
            lines (Parquet), whose errors name the row only.
    """

    def __init__(self, row_numbers: np.ndarray, line_numbers: np.ndarray | None) -> None:
        self.row_numbers = np.asarray(row_numbers, dtype=np.int64)
        self.line_numbers = None if line_numbers is None else np.asarray(line_numbers, dtype=np.int64)
        n = self.row_numbers.size
        self.bad = np.zeros(n, dtype=bool)
        self.reason = np.full(n, None, dtype=object)
        self.field = np.full(n, None, dtype=object)
        self.value = np.full(n, None, dtype=object)
        self.expected = np.full(n, None, dtype=object)

    def flag(self, mask: np.ndarray, reason: str, field: str, values: pd.Series, expected: str) -> None:
        """Mark rows in `mask` as failing `reason`, unless an earlier check already failed them."""
        new = np.asarray(mask, dtype=bool) & ~self.bad
        if not new.any():
            return
        self.bad |= new
        self.reason[new] = reason
        self.field[new] = field
        self.value[new] = np.asarray(values, dtype=object)[new]
        self.expected[new] = expected

    @property
    def valid(self) -> np.ndarray:
        """Boolean mask, shape (n,), of rows that passed every check."""
        return ~self.bad

    def rejected_rows(self) -> dict[str, list[int]]:
        """Reason -> ascending row numbers, reasons in the order of their first row."""
        reasons = self.reason[self.bad]
        rows = self.row_numbers[self.bad]
        return {reason: rows[reasons == reason].tolist() for reason in pd.unique(reasons)}

    def first_error(self, path: Path) -> TraceFormatError | None:
        """The error for the lowest-numbered bad row, or None when every row is valid."""
        bad_index = np.flatnonzero(self.bad)
        if bad_index.size == 0:
            return None
        i = bad_index[0]
        return TraceFormatError(
            path,
            row=int(self.row_numbers[i]),
            line=None if self.line_numbers is None else int(self.line_numbers[i]),
            field=self.field[i],
            reason=self.reason[i],
            value=self.value[i],
            expected=self.expected[i],
        )
