"""What `sarathi-sim trace stats` reports about a trace or lengths file, as numbers and as text."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from traces.request import Request
from traces.trace_stats import gap_cv, mean_rate_qps, span_s

# Length percentiles reported, besides min, mean and max.
LENGTH_PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class TraceSummary:
    """Counts, arrival statistics and length percentiles of one trace.

    Attributes:
        num_requests: valid requests (rows).
        has_arrivals: False for a lengths-only file; its span, rate and CV are then NaN.
        span_s: first to last arrival, seconds (0.0 for fewer than two requests).
        mean_rate_qps: (n - 1) / span requests/s; NaN over a zero span.
        gap_cv: std / mean of inter-arrival gaps; NaN when undefined.
        prompt_tokens, output_tokens, total_tokens: "min", "mean", "p50", "p90", "p99", "max"
            of each length in tokens (NaN for an empty trace).
        max_model_len: the context limit checked, or None.
        num_over_max_model_len: requests with prompt + output > max_model_len (the simulator's
            `rejected_too_long`), or None without a limit.
    """

    num_requests: int
    has_arrivals: bool
    span_s: float
    mean_rate_qps: float
    gap_cv: float
    prompt_tokens: dict[str, float]
    output_tokens: dict[str, float]
    total_tokens: dict[str, float]
    max_model_len: int | None = None
    num_over_max_model_len: int | None = None

    def lines(self) -> list[tuple[str, str]]:
        """(label, value) pairs for people; undefined values read "n/a", never inf or nan."""
        rows = [("requests", str(self.num_requests))]
        if self.has_arrivals:
            rows += [
                ("span", _number(self.span_s, "s")),
                ("mean rate", _number(self.mean_rate_qps, "requests/s")),
                ("gap CV (burstiness; Poisson = 1)", _number(self.gap_cv, "")),
            ]
        else:
            rows.append(("arrivals", "none (lengths only: combine with an arrival process)"))
        for name, stats in (("prompt", self.prompt_tokens), ("output", self.output_tokens), ("total", self.total_tokens)):
            rows.append((f"{name} tokens", "  ".join(f"{key} {_number(value, '')}" for key, value in stats.items())))
        if self.max_model_len is not None:
            share = self.num_over_max_model_len / self.num_requests if self.num_requests else math.nan
            rows.append((
                f"prompt + output > {self.max_model_len}",
                f"{self.num_over_max_model_len} ({_number(round(100 * share, 1), '%')} of requests; "
                "rejected_too_long when simulated)",
            ))
        return rows


def summarize_lengths(
    prompt_tokens: np.ndarray,
    output_tokens: np.ndarray,
    arrivals_s: np.ndarray | None = None,
    max_model_len: int | None = None,
) -> TraceSummary:
    """Summarise lengths (shape (n,) each) and, when given, arrival times in seconds (shape (n,)).

    Raises:
        ValueError: max_model_len given and < 1.
    """
    prompt_tokens = np.asarray(prompt_tokens, dtype=np.int64)
    output_tokens = np.asarray(output_tokens, dtype=np.int64)
    total_tokens = prompt_tokens + output_tokens
    over = None
    if max_model_len is not None:
        if max_model_len < 1:
            raise ValueError(f"max_model_len must be >= 1, got {max_model_len}")
        over = int(np.sum(total_tokens > max_model_len))
    has_arrivals = arrivals_s is not None
    return TraceSummary(
        num_requests=int(prompt_tokens.size),
        has_arrivals=has_arrivals,
        span_s=span_s(arrivals_s) if has_arrivals else math.nan,
        mean_rate_qps=mean_rate_qps(arrivals_s) if has_arrivals else math.nan,
        gap_cv=gap_cv(arrivals_s) if has_arrivals else math.nan,
        prompt_tokens=_length_stats(prompt_tokens),
        output_tokens=_length_stats(output_tokens),
        total_tokens=_length_stats(total_tokens),
        max_model_len=max_model_len,
        num_over_max_model_len=over,
    )


def summarize_requests(requests: Sequence[Request], max_model_len: int | None = None) -> TraceSummary:
    """`summarize_lengths` of a list of requests, arrivals included."""
    return summarize_lengths(
        np.array([r.prompt_tokens for r in requests], dtype=np.int64),
        np.array([r.output_tokens for r in requests], dtype=np.int64),
        np.array([r.arrival_s for r in requests], dtype=float),
        max_model_len,
    )


def _length_stats(tokens: np.ndarray) -> dict[str, float]:
    if tokens.size == 0:
        return dict.fromkeys(["min", "mean", *(f"p{q}" for q in LENGTH_PERCENTILES), "max"], math.nan)
    stats = {"min": float(tokens.min()), "mean": float(tokens.mean())}
    stats.update({f"p{q}": float(v) for q, v in zip(LENGTH_PERCENTILES, np.percentile(tokens, LENGTH_PERCENTILES))})
    stats["max"] = float(tokens.max())
    return stats


def _number(value: float, unit: str) -> str:
    if not math.isfinite(value):
        return "n/a"
    text = f"{value:.0f}" if float(value).is_integer() and abs(value) < 1e15 else f"{value:.6g}"
    return f"{text} {unit}".rstrip() if unit != "%" else f"{text}%"
