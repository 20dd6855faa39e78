"""TBT and ITL samples from flat token times, and a mergeable histogram of them for huge runs.

`gaps_of_flat` is the one definition of the samples (simulator/metrics.py's docstring: TBT = the
gap between consecutive emissions after the first token, one sample per emitting step; ITL = each
gap over the k tokens it delivered, repeated k times), computed for many requests at once from
their concatenated token times.

`GapSketch` keeps them without keeping the samples, for runs that drop per-token records
(`output.token_times: false`): counts in log-spaced bins of ratio r = 1.002 from 1e-7 s to 1e5 s
(13,838 bins, plus one below and one above), the exact count, sum, min and max. A percentile is
numpy's linear interpolation (`numpy.percentile`'s default) between the two order statistics it
needs, each replaced by the geometric centre of its bin, clamped to [min, max]. Bound: a sample
x in [1e-7 s, 1e5 s] is within a factor sqrt(r) of its bin's centre, so each order statistic —
and hence their interpolation, a weighted mean with non-negative weights — is within a relative
sqrt(r) − 1 = 0.09995 % of numpy's value (0.1 %, with the rounding of the bin index at an edge);
below 1e-7 s the error is at most 1e-7 s absolute, above 1e5 s (an hour-long gap) up to the max.
Means are exact to rounding (the sum of chunk sums over the count). Sketches merge by adding
counts (`merge`), so replicas and chunks combine in any order with the same result.
"""
from __future__ import annotations

import math

import numpy as np

from simulator.records_percentiles import _lerp

SKETCH_RATIO = 1.002
SKETCH_MIN_S = 1e-7
SKETCH_MAX_S = 1e5
_LOG_RATIO = math.log(SKETCH_RATIO)
_NUM_BINS = math.ceil(math.log(SKETCH_MAX_S / SKETCH_MIN_S) / _LOG_RATIO)  # log-spaced bins


def gaps_of_flat(times_s: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TBT gaps of many requests from their concatenated token times.

    Args:
        times_s: float64, every request's token times in turn (non-decreasing within a request;
            an emission of k tokens repeats its time k times).
        lengths: int, tokens per request (sum = times_s.size).

    Returns:
        (tbt_s, tokens, itl_s): the gaps in request order, the tokens each gap delivered (a
        read-only array), and the per-token ITL samples (each gap / its tokens, repeated that
        many times; `tbt_s` itself when every gap delivered one token).
    """
    if times_s.size == 0:
        return np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0)
    steps = np.diff(times_s)
    within = np.ones(steps.size, dtype=bool)  # the step from token i to i + 1 stays in one request
    ends = np.cumsum(lengths)[:-1]
    within[ends[(ends > 0) & (ends < times_s.size)] - 1] = False
    gaps = steps[within]
    if gaps.all():  # no emission of several tokens: every token is an emission (the usual case)
        # one token per gap: a read-only view of a single 1, not an array of millions of them
        return gaps, np.broadcast_to(np.ones(1, dtype=np.int64), gaps.shape), gaps
    owner = np.repeat(np.arange(lengths.size), lengths)  # request index of each token
    first_of_request = np.r_[True, owner[1:] != owner[:-1]]
    starts = np.flatnonzero(first_of_request | np.r_[True, np.diff(times_s) != 0])  # emission starts
    counts = np.diff(np.r_[starts, times_s.size])
    same_request = owner[starts[1:]] == owner[starts[:-1]]  # gap i is between emissions i and i + 1
    gaps = np.diff(times_s[starts])[same_request]
    tokens = counts[1:][same_request]
    return gaps, tokens, np.repeat(gaps / tokens, tokens)


class GapSketch:
    """Log-binned histograms of TBT samples and of per-token ITL samples (module docstring: bins,
    error bound). `add` takes the output of `gaps_of_flat`; `stats` gives the summary keys."""

    def __init__(self) -> None:
        self.counts = {"tbt_s": np.zeros(_NUM_BINS + 2, dtype=np.int64),
                       "itl_s": np.zeros(_NUM_BINS + 2, dtype=np.int64)}
        self.moments = {name: [0, 0.0, math.inf, -math.inf] for name in self.counts}  # n, sum, min, max

    def add(self, tbt_s: np.ndarray, tokens: np.ndarray) -> None:
        """Add gaps (seconds) and the tokens each delivered (its ITL, gap / tokens, counts `tokens` times)."""
        if tbt_s.size == 0:
            return
        itl = tbt_s / tokens
        for name, values, weights in (("tbt_s", tbt_s, None), ("itl_s", itl, tokens)):
            counts = self.counts[name]
            counts += np.bincount(_bin_of(values), weights=weights, minlength=counts.size).astype(np.int64)
            m = self.moments[name]
            m[0] += int(values.size if weights is None else weights.sum())
            m[1] += float(values.sum() if weights is None else (values * weights).sum())
            m[2], m[3] = min(m[2], float(values.min())), max(m[3], float(values.max()))

    def merge(self, other: "GapSketch") -> None:
        """Add another sketch's samples to this one."""
        for name in self.counts:
            self.counts[name] += other.counts[name]
            m, o = self.moments[name], other.moments[name]
            m[0], m[1], m[2], m[3] = m[0] + o[0], m[1] + o[1], min(m[2], o[2]), max(m[3], o[3])

    def stats(self, name: str, percentiles) -> tuple[int, float, list[float]]:
        """(count, mean, [value per percentile]) of `tbt_s` or `itl_s`; NaN when empty."""
        n, total, lo, hi = self.moments[name]
        if n == 0:
            return 0, float("nan"), [float("nan")] * len(percentiles)
        q = np.true_divide(np.asanyarray(percentiles, dtype=np.float64), 100)
        virtual = (n - 1) * q
        previous = np.floor(virtual)
        low_rank = np.minimum(previous, n - 1).astype(np.int64)
        high_rank = np.minimum(previous + 1, n - 1).astype(np.int64)
        cumulative = np.cumsum(self.counts[name])
        centres = _bin_centres_s()
        value = lambda ranks: np.clip(centres[np.searchsorted(cumulative, ranks, side="right")], lo, hi)  # noqa: E731
        return n, total / n, _lerp(value(low_rank), value(high_rank), virtual - previous).tolist()


def _bin_of(values_s: np.ndarray) -> np.ndarray:
    """Bin index: 0 below SKETCH_MIN_S, 1 + floor(log_r(x / min)) inside, the last above the max."""
    with np.errstate(divide="ignore"):
        inside = np.floor(np.log(np.maximum(values_s, SKETCH_MIN_S * 0.5) / SKETCH_MIN_S) / _LOG_RATIO)
    return np.clip(inside + 1, 0, _NUM_BINS + 1).astype(np.int64)


def _bin_centres_s() -> np.ndarray:
    """A representative value per bin: the geometric centre inside; min/2 below; the max above
    (clamped to the observed range by the caller)."""
    k = np.arange(_NUM_BINS, dtype=np.float64)
    inside = SKETCH_MIN_S * np.exp((k + 0.5) * _LOG_RATIO)
    return np.r_[SKETCH_MIN_S * 0.5, inside, np.inf]
