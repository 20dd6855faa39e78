"""What loading a file produced: the valid rows, and an account of every row that was not loaded."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from traces.request import Request
from traces.trace_stats import mean_rate_qps, span_s

# Rows listed per reason in `summary()`; the full lists stay in `rejected_rows`.
_ROWS_SHOWN = 5


@dataclass(frozen=True, kw_only=True)
class RowAccount:
    """Which rows of a file were not loaded, and why (shared by trace and lengths results).

    Attributes:
        path: the file read.
        format: the format name used (after auto-detection).
        rejected_rows: reason -> row numbers (from 1 for the first data row = CSV file line 2;
            JSON-lines rows are file lines). Each rejected row appears under one reason, its
            first failed check, e.g. "prompt_tokens < 1", "output_tokens < 1", "missing field",
            "non-numeric", "negative arrival", "bad timestamp", "malformed line", "bad quoting",
            "arrival too large", "arrival far from the others", "timestamp out of range", "hash_ids not
            a list of integers" (`prefix_hash_ids` of canonical JSON lines likewise). Loaded,
            rejected and filtered rows add up to the file's non-blank data lines.
        filtered_rows: reason -> row numbers left out on purpose by a `where` filter
            ("Model not in ['ChatGPT']"); neither loaded nor rejected.
        ignored_columns: columns (JSON keys) the format does not define, ignored in lenient mode.
        unused_columns: columns the format defines that the file has but the simulator does not
            read: a canonical file's `request_id` (requests are numbered 0..n-1 in arrival order).
    """

    path: Path
    format: str
    rejected_rows: dict[str, list[int]]
    filtered_rows: dict[str, list[int]] = field(default_factory=dict)
    ignored_columns: tuple[str, ...] = ()
    unused_columns: tuple[str, ...] = ()

    @property
    def num_rejected(self) -> int:
        """Number of rows rejected, over all reasons."""
        return sum(len(rows) for rows in self.rejected_rows.values())

    def report_lines(self) -> list[str]:
        """One indented line per rejection reason and filter (a few rows each), and the ignored columns."""
        lines = [f"  rejected {len(rows)} x {reason}: rows {_shown(rows)}" for reason, rows in self.rejected_rows.items()]
        lines += [f"  filtered out {len(rows)} x {reason}: rows {_shown(rows)}" for reason, rows in self.filtered_rows.items()]
        if self.ignored_columns:
            lines.append(f"  ignored unknown columns: {', '.join(self.ignored_columns)}")
        if self.unused_columns:
            lines.append(f"  not used: {', '.join(self.unused_columns)} ({UNUSED_NOTE})")
        return lines


# Why a defined column is not used (RowAccount.unused_columns).
UNUSED_NOTE = "requests are numbered 0..n-1 in arrival order, file order among ties"


@dataclass(frozen=True, kw_only=True)
class TraceLoadResult(RowAccount):
    """The outcome of `read_trace`: `requests`, valid and sorted by arrival (stable), first at
    0.0 s, ids 0..n-1; and the `RowAccount` of what was not loaded."""

    requests: list[Request]

    def summary(self) -> str:
        """A few lines for people: counts, span, mean rate ("n/a" when undefined), rejections."""
        arrivals_s = np.array([request.arrival_s for request in self.requests])
        rate = mean_rate_qps(arrivals_s)
        rate_text = "n/a" if math.isnan(rate) else f"{rate:.4g} requests/s"
        lines = [
            f"{self.path} ({self.format}): loaded {len(self.requests)}, rejected {self.num_rejected}",
            f"  span {span_s(arrivals_s):.3f} s, mean rate {rate_text}",
        ]
        return "\n".join(lines + self.report_lines())


@dataclass(frozen=True, kw_only=True)
class LengthsLoadResult(RowAccount):
    """The outcome of `read_lengths`: `prompt_tokens`, `output_tokens` of the valid rows in file
    order (int64, shape (n,) each); and the `RowAccount` of what was not loaded."""

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    def summary(self) -> str:
        """A few lines for people: counts and every rejection, filter and ignored column."""
        head = f"{self.path} ({self.format}, lengths only): loaded {self.prompt_tokens.size}, rejected {self.num_rejected}"
        return "\n".join([head, *self.report_lines()])


def _shown(rows: list[int]) -> str:
    return ", ".join(map(str, rows[:_ROWS_SHOWN])) + (", ..." if len(rows) > _ROWS_SHOWN else "")
