"""Summary statistics of a trace: span, mean arrival rate, burstiness of gaps, rank correlation.

Statistics that are undefined for the input (a rate over a zero span, a CV with a zero mean
gap) are NaN, never inf and never an exception (`../shared/cases/README.md`, case 13).
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def span_s(arrivals_s: np.ndarray) -> float:
    """Seconds from the first to the last arrival; 0.0 for fewer than two arrivals.

    Args:
        arrivals_s: arrival times in seconds, shape (n,), any order.
    """
    arrivals_s = np.asarray(arrivals_s, dtype=float)
    if arrivals_s.size < 2:
        return 0.0
    return float(arrivals_s.max() - arrivals_s.min())


def mean_rate_qps(arrivals_s: np.ndarray) -> float:
    """Mean arrival rate in requests per second, (n - 1) / span: n arrivals bound n - 1 gaps.

    Returns NaN (undefined, never inf and never an exception) when there are fewer than two
    arrivals or they all share one instant (`../shared/cases/README.md`, case 13).

    Args:
        arrivals_s: arrival times in seconds, shape (n,).
    """
    span = span_s(arrivals_s)
    if span <= 0.0:
        return float("nan")
    return (np.asarray(arrivals_s).size - 1) / span


def gap_cv(arrivals_s: np.ndarray) -> float:
    """Coefficient of variation of the inter-arrival gaps, std / mean (population std).

    The burstiness measure of `trace stats`: 1 for a Poisson process, 0 for a constant rate,
    1 / sqrt(γ) for gamma gaps with shape γ, > 1 for bursty traffic. NaN when there are fewer
    than two gaps (one gap has no spread to measure: its CV is not 0, it is unknown) or the
    mean gap is 0 (all at one instant).

    Args:
        arrivals_s: arrival times in seconds, shape (n,), any order (sorted here).
    """
    gaps_s = np.diff(np.sort(np.asarray(arrivals_s, dtype=float)))
    if gaps_s.size < 2 or gaps_s.mean() <= 0.0:
        return float("nan")
    return float(gaps_s.std() / gaps_s.mean())


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation of two equal-length samples (ties get their average rank).

    Computed as the Pearson correlation of the ranks (Spearman 1904), with pandas' ranking so
    no scipy is needed. NaN when either sample is constant or shorter than two.
    """
    a_rank = pd.Series(np.asarray(a, dtype=float)).rank().to_numpy()
    b_rank = pd.Series(np.asarray(b, dtype=float)).rank().to_numpy()
    if a_rank.size < 2 or a_rank.std() == 0.0 or b_rank.std() == 0.0:
        return float("nan")
    return float(np.corrcoef(a_rank, b_rank)[0, 1])
