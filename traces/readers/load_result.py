"""What loading a trace produced: the valid requests and a count of every rejected row."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from traces.request import Request
from traces.trace_stats import mean_rate_qps, span_s

# Rows listed per reason in `summary()`; the full lists stay in `rejected_rows`.
_ROWS_SHOWN = 5


@dataclass(frozen=True)
class TraceLoadResult:
    """The outcome of `read_trace`.

    Attributes:
        requests: valid requests sorted by arrival (stable), first at 0.0 s, ids 0..n-1.
        rejected_rows: reason -> row numbers (from 1 for the first data row = CSV file line 2;
            JSON-lines rows are file lines). Each rejected row appears under one reason, its
            first failed check, e.g. "prompt_tokens < 1", "output_tokens < 1", "missing field",
            "non-numeric", "negative arrival", "bad timestamp", "malformed line".
        path: the file read.
        format: the format name used (after auto-detection).
    """

    requests: list[Request]
    rejected_rows: dict[str, list[int]]
    path: Path
    format: str

    @property
    def num_rejected(self) -> int:
        """Number of rows rejected, over all reasons."""
        return sum(len(rows) for rows in self.rejected_rows.values())

    def summary(self) -> str:
        """A few lines for people: counts, span, mean rate ("n/a" when undefined), rejections."""
        arrivals_s = np.array([request.arrival_s for request in self.requests])
        rate = mean_rate_qps(arrivals_s)
        rate_text = "n/a" if math.isnan(rate) else f"{rate:.4g} requests/s"
        lines = [
            f"{self.path} ({self.format}): loaded {len(self.requests)}, rejected {self.num_rejected}",
            f"  span {span_s(arrivals_s):.3f} s, mean rate {rate_text}",
        ]
        for reason, rows in self.rejected_rows.items():
            shown = ", ".join(map(str, rows[:_ROWS_SHOWN])) + (", ..." if len(rows) > _ROWS_SHOWN else "")
            lines.append(f"  rejected {len(rows)} x {reason}: rows {shown}")
        return "\n".join(lines)
