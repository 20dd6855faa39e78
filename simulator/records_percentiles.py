"""Exact percentiles of samples too large to hold at once, read as a stream of chunks.

A run of millions of requests has hundreds of millions of TBT samples (one per emission):
holding them as float64 arrays to call `numpy.percentile` would take more memory than the rest of
the run. The samples can be regenerated from the compact token-time records, so this module finds
the exact order statistics a percentile needs in a few passes over the stream (a selection by
histogram refinement): the first pass counts every sample into fixed log-spaced bins (ratio
1.01) while taking count, sum, min and max; the next collects the values of the bins that hold
a wanted rank and selects it among them (`np.partition`); a bin holding too many values to collect
is split 4,096-fold by another pass first. Several samples (TBT and ITL) share each pass. The
order statistics are then interpolated exactly as `numpy.percentile`'s default ("linear",
Hyndman & Fan type 7) does, with the same floating-point operations (numpy
`lib/_function_base_impl.py`: `_QuantileMethods["linear"]` gives the virtual index (n − 1)·q,
`_lerp` the interpolation), so the result equals `numpy.percentile` of the concatenated stream
bit for bit (tests/test_records.py checks it). Bins are found with `np.searchsorted` on explicit
edges, so they are ordered by value by construction.
"""
from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

# A fresh pass over the samples, chunk by chunk: each chunk a tuple of arrays, one per sample.
Chunks = Callable[[], Iterable[tuple[np.ndarray, ...]]]

_LOG_EDGES = np.r_[-np.logspace(9, -12, 2 * 21 * 116 + 1), 0.0, np.logspace(-12, 9, 21 * 232 + 1)]  # ~1 % bins
_SPLIT_BINS = 4096
_COLLECT_VALUES = 1 << 22  # a bin holding at most this many values is selected among in memory


def streamed_percentiles(chunks: Callable[[], Iterable[np.ndarray]], percentiles) -> tuple[int, float, list[float]]:
    """(count, mean, [value per percentile]) of one stream of arrays; see `streamed_percentiles_of`."""
    return streamed_percentiles_of(lambda: ((c,) for c in chunks()), 1, percentiles)[0]


def streamed_percentiles_of(chunks: Chunks, num_samples: int, percentiles) -> list[tuple[int, float, list[float]]]:
    """Per sample of the stream: (count, mean, [value per percentile]), each percentile exactly
    as `numpy.percentile(values, percentiles)` gives it; the mean is the sum of the chunk sums
    over the count (equal to `numpy.mean` to rounding, ~1e-16 relative). NaNs must not occur.
    An empty sample gives (0, nan, [nan, ...])."""
    moments, counts = _first_pass(chunks, num_samples)
    q = np.true_divide(np.asanyarray(percentiles, dtype=np.float64), 100)
    pending, plans, results = {}, [], []
    for s, ((n, total, lo, hi), bins) in enumerate(zip(moments, counts)):
        if n == 0:
            plans.append(None)
            continue
        virtual = (n - 1) * q  # numpy's "linear" method
        previous = np.floor(virtual)
        above = virtual >= n - 1
        low = np.where(above, n - 1, previous).astype(np.int64)
        high = np.where(above, n - 1, previous + 1).astype(np.int64)
        plans.append((low, high, virtual - previous))
        cumulative = np.cumsum(bins)
        for r in set(low.tolist()) | set(high.tolist()):
            k = int(np.searchsorted(cumulative, r, side="right"))
            a = max(lo, _edge(k - 1)) if k else lo
            b = min(float(np.nextafter(hi, np.inf)), _edge(k)) if k < _LOG_EDGES.size else float(np.nextafter(hi, np.inf))
            pending[(s, r)] = (a, b, int(cumulative[k - 1]) if k else 0, int(bins[k]))
    found = _select(chunks, pending)
    for s, plan in enumerate(plans):
        if plan is None:
            results.append((0, float("nan"), [float("nan")] * len(percentiles)))
            continue
        low, high, gamma = plan
        a = np.array([found[(s, r)] for r in low.tolist()])
        b = np.array([found[(s, r)] for r in high.tolist()])
        n, total = moments[s][0], moments[s][1]
        results.append((n, total / n, _lerp(a, b, gamma).tolist()))
    return results


def _edge(k: int) -> float:
    return float(_LOG_EDGES[k])


def _first_pass(chunks: Chunks, num_samples: int):
    """Count, sum, min, max and log-bin counts of each sample (bin k: [edge k−1, edge k))."""
    moments = [[0, 0.0, np.inf, -np.inf] for _ in range(num_samples)]
    counts = [np.zeros(_LOG_EDGES.size + 1, dtype=np.int64) for _ in range(num_samples)]
    for chunk in chunks():
        for s, values in enumerate(chunk):
            if values.size:
                m = moments[s]
                m[0] += values.size
                m[1] += float(values.sum())
                m[2], m[3] = min(m[2], float(values.min())), max(m[3], float(values.max()))
                counts[s] += np.bincount(np.searchsorted(_LOG_EDGES, values, side="right"), minlength=counts[s].size)
    return [tuple(m) for m in moments], counts


def _select(chunks: Chunks, pending: dict) -> dict:
    """The value of each (sample, rank) from its half-open value interval [a, b), the count of
    values below a, and the count inside."""
    found = {}
    while pending:
        for key, (a, b, below, inside) in list(pending.items()):
            if np.nextafter(a, np.inf) >= b:  # only one representable value left
                found[key] = a
                del pending[key]
        collect = {key: v for key, v in pending.items() if v[3] <= _COLLECT_VALUES}
        split = {key: v for key, v in pending.items() if v[3] > _COLLECT_VALUES}
        edges = {key: np.unique(np.linspace(a, b, _SPLIT_BINS + 1)) for key, (a, b, _, _) in split.items()}
        parts = {key: [] for key in collect}
        split_counts = {key: np.zeros(e.size - 1, dtype=np.int64) for key, e in edges.items()}
        if collect or split:
            for chunk in chunks():
                for key, (a, b, _, _) in collect.items():
                    values = chunk[key[0]]
                    parts[key].append(values[(values >= a) & (values < b)])
                for key, (a, b, _, _) in split.items():
                    values = chunk[key[0]]
                    inside = values[(values >= a) & (values < b)]
                    if inside.size:
                        split_counts[key] += np.bincount(np.searchsorted(edges[key], inside, side="right") - 1,
                                                         minlength=split_counts[key].size)
        for key, (a, b, below, _) in collect.items():
            values = np.concatenate(parts[key])
            found[key] = float(np.partition(values, key[1] - below)[key[1] - below])
            del pending[key]
        for key, (a, b, below, _) in split.items():
            cumulative = np.cumsum(split_counts[key])
            k = int(np.searchsorted(cumulative, key[1] - below, side="right"))
            start = below + (int(cumulative[k - 1]) if k else 0)
            pending[key] = (float(edges[key][k]), float(edges[key][k + 1]), start, int(split_counts[key][k]))
    return found


def _lerp(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    """numpy's `_lerp`: a + (b − a)·t, computed from b's side when t >= 0.5 (same operations)."""
    diff_b_a = b - a
    out = np.add(a, diff_b_a * t)
    np.subtract(b, diff_b_a * (1 - t), out=out, where=t >= 0.5)
    return out
