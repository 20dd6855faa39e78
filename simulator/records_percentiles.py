"""Exact percentiles of a sample too large to hold at once, read as a stream of chunks.

A run of millions of requests has billions of TBT samples (one per emission): holding them as one
float64 array to call `numpy.percentile` would take more memory than the rest of the run. The
samples can be regenerated cheaply from the compact token-time records, so this module finds the
exact order statistics a percentile needs by a few passes over the stream (a selection by
histogram refinement: each pass narrows the value interval holding each wanted rank 4,096-fold,
until it holds few enough values to select among them directly), then interpolates between
them exactly as `numpy.percentile`'s default ("linear", Hyndman & Fan type 7) does, with the
same floating-point operations (numpy `lib/_function_base_impl.py`: `_QuantileMethods["linear"]`
gives the virtual index (n − 1)·q, `_lerp` the interpolation). The result equals
`numpy.percentile` of the concatenated stream bit for bit (tests/test_records.py checks it).
"""
from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

Chunks = Callable[[], Iterable[np.ndarray]]  # a fresh pass over the sample, chunk by chunk

_BINS = 4096
_COLLECT_VALUES = 1 << 20  # an interval holding at most this many values is selected in memory


def stream_moments(chunks: Chunks) -> tuple[int, float, float, float]:
    """(count, sum, min, max) of the stream; the sum adds each chunk's numpy sum in order.

    For an empty stream: (0, 0.0, nan, nan).
    """
    n, total, lo, hi = 0, 0.0, np.inf, -np.inf
    for chunk in chunks():
        if chunk.size:
            n += chunk.size
            total += float(chunk.sum())
            lo, hi = min(lo, float(chunk.min())), max(hi, float(chunk.max()))
    return (n, total, lo, hi) if n else (0, 0.0, float("nan"), float("nan"))


def order_statistics(chunks: Chunks, ranks: list[int], n: int, lo: float, hi: float) -> dict[int, float]:
    """The values of the given 0-based ranks in the sorted stream of `n` values in [lo, hi].

    Raises:
        ValueError: a rank outside [0, n).
    """
    if any(r < 0 or r >= n for r in ranks):
        raise ValueError(f"ranks {ranks} outside [0, {n})")
    # Each pending rank: a half-open value interval [a, b) and the count of values below a.
    pending = {r: (lo, float(np.nextafter(hi, np.inf)), 0) for r in set(ranks)}
    found: dict[int, float] = {}
    while pending:
        for r, (a, b, below) in list(pending.items()):
            if np.nextafter(a, np.inf) >= b:  # only one representable value left
                found[r] = a
                del pending[r]
        if not pending:
            break
        edges = {r: np.unique(np.linspace(a, b, _BINS + 1)) for r, (a, b, _) in pending.items()}
        counts = {r: np.zeros(e.size - 1, dtype=np.int64) for r, e in edges.items()}
        for chunk in chunks():
            for r, (a, b, _) in pending.items():
                inside = chunk[(chunk >= a) & (chunk < b)]
                if inside.size:
                    bins = np.searchsorted(edges[r], inside, side="right") - 1
                    counts[r] += np.bincount(bins, minlength=counts[r].size)
        collect = {}
        for r, (a, b, below) in pending.items():
            cumulative = np.cumsum(counts[r])
            k = int(np.searchsorted(cumulative, r - below, side="right"))  # bin holding rank r
            start = below + (int(cumulative[k - 1]) if k else 0)
            pending[r] = (float(edges[r][k]), float(edges[r][k + 1]), start)
            if counts[r][k] <= _COLLECT_VALUES:
                collect[r] = pending[r]
        if collect:
            parts = {r: [] for r in collect}
            for chunk in chunks():
                for r, (a, b, _) in collect.items():
                    parts[r].append(chunk[(chunk >= a) & (chunk < b)])
            for r, (a, b, below) in collect.items():
                values = np.concatenate(parts[r])
                found[r] = float(np.partition(values, r - below)[r - below])
                del pending[r]
    return found


def streamed_percentiles(chunks: Chunks, percentiles) -> tuple[int, float, list[float]]:
    """(count, mean, [value per percentile]) of the stream, each percentile exactly as
    `numpy.percentile(values, percentiles)` gives it; the mean is the sum of the chunk sums over
    the count (equal to `numpy.mean` to rounding, ~1e-16 relative). NaNs must not occur.

    An empty stream gives (0, nan, [nan, ...]).
    """
    n, total, lo, hi = stream_moments(chunks)
    if n == 0:
        return 0, float("nan"), [float("nan")] * len(percentiles)
    q = np.true_divide(np.asanyarray(percentiles, dtype=np.float64), 100)
    virtual = (n - 1) * q  # numpy's "linear" method
    previous = np.floor(virtual)
    above = virtual >= n - 1
    low_rank = np.where(above, n - 1, previous).astype(np.int64)
    high_rank = np.where(above, n - 1, previous + 1).astype(np.int64)
    gamma = virtual - previous
    stats = order_statistics(chunks, sorted(set(low_rank.tolist()) | set(high_rank.tolist())), n, lo, hi)
    a = np.array([stats[r] for r in low_rank.tolist()])
    b = np.array([stats[r] for r in high_rank.tolist()])
    return n, total / n, _lerp(a, b, gamma).tolist()


def _lerp(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    """numpy's `_lerp`: a + (b − a)·t, computed from b's side when t >= 0.5 (same operations)."""
    diff_b_a = b - a
    out = np.add(a, diff_b_a * t)
    np.subtract(b, diff_b_a * (1 - t), out=out, where=t >= 0.5)
    return out
