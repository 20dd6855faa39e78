"""Exact percentiles of samples too large to hold at once, read as a stream of chunks.

A run of millions of requests has hundreds of millions of TBT samples (one per emission):
holding them as float64 arrays to call `numpy.percentile` would take more memory than the rest of
the run. The samples can be regenerated from the compact token-time records, so this module finds
the exact order statistics a percentile needs in a few passes over the stream (a selection by
histogram refinement): the first pass counts every sample into bins by the top 20 bits of its
IEEE 754 bit pattern made order-preserving (sign, exponent and 8 mantissa bits: bins of 0.4 %
of the value) while taking count and sum; the next collects the values of the bins that hold a
wanted rank and selects it among them (`np.partition`); a bin holding too many values to
collect is split 4,096-fold (12 more bits) by another pass first. Several samples (TBT and ITL) share each pass. The
order statistics are then interpolated exactly as `numpy.percentile`'s default ("linear",
Hyndman & Fan type 7) does, with the same floating-point operations (numpy
`lib/_function_base_impl.py`: `_QuantileMethods["linear"]` gives the virtual index (n − 1)·q,
`_lerp` the interpolation), so the result equals `numpy.percentile` of the concatenated stream
bit for bit (tests/test_records.py checks it). Bins come from the bits, not from a logarithm, so they are
ordered by value exactly.
"""
from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

# A fresh pass over the samples, chunk by chunk: each chunk a tuple of arrays, one per sample.
Chunks = Callable[[], Iterable[tuple[np.ndarray, ...]]]

_TOP_SHIFT = 44  # first pass: bins by the top 20 bits of the ordered key (sign, exponent, 8 mantissa bits)
_SPLIT_BITS = 12  # each refinement pass: 12 more bits
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
    for s, ((n, total), bins) in enumerate(zip(moments, counts)):
        if n == 0:
            plans.append(None)
            continue
        low, high, gamma = _linear_ranks(n, q)
        plans.append((low, high, gamma))
        cumulative = np.cumsum(bins)
        for r in set(low.tolist()) | set(high.tolist()):
            i = int(np.searchsorted(cumulative, r, side="right"))  # the bin holding rank r
            pending[(s, r)] = (_TOP_SHIFT, i, int(cumulative[i - 1]) if i else 0, int(bins[i]))
    found = _select(chunks, pending)
    for s, plan in enumerate(plans):
        if plan is None:
            results.append((0, float("nan"), [float("nan")] * len(percentiles)))
            continue
        low, high, gamma = plan
        a = np.array([found[(s, r)] for r in low.tolist()])
        b = np.array([found[(s, r)] for r in high.tolist()])
        n, total = moments[s]
        results.append((n, total / n, _lerp(a, b, gamma).tolist()))
    return results


def percentiles_of_sorted(values: np.ndarray, percentiles) -> list[float]:
    """`numpy.percentile(values, percentiles)` (its default "linear" method) of a sorted, NaN-free
    1-D array, read at the order statistics it needs, with the same floating-point operations
    (module docstring): the value at each rank is the same order statistic however the array
    was brought in order. Empty: NaN each."""
    n = values.size
    if n == 0:
        return [float("nan")] * len(percentiles)
    low, high, gamma = _linear_ranks(n, np.true_divide(np.asanyarray(percentiles, dtype=np.float64), 100))
    return _lerp(values[low], values[high], gamma).tolist()


def _linear_ranks(n: int, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lower rank, upper rank, weight of the upper) of each quantile `q` of n values, as
    numpy's "linear" method: virtual index (n − 1)·q, both ranks the last one at or above it."""
    virtual = (n - 1) * q
    previous = np.floor(virtual)
    above = virtual >= n - 1
    low = np.where(above, n - 1, previous).astype(np.int64)
    high = np.where(above, n - 1, previous + 1).astype(np.int64)
    return low, high, virtual - previous


def _ordered_keys(values: np.ndarray) -> np.ndarray:
    """uint64 keys in the order of the float64 values (IEEE 754: flip the sign bit of a
    positive value, every bit of a negative one), so a key's top bits are a bin of values."""
    bits = values.view(np.uint64)
    return np.where(bits >> np.uint64(63), ~bits, bits | np.uint64(1 << 63))


def _first_pass(chunks: Chunks, num_samples: int):
    """Count and sum of each sample, and its counts per bin (the top bits of its keys)."""
    moments = [[0, 0.0] for _ in range(num_samples)]
    counts = [np.zeros(1 << (64 - _TOP_SHIFT), dtype=np.int64) for _ in range(num_samples)]
    for chunk in chunks():
        for s, values in enumerate(chunk):
            if values.size:
                moments[s][0] += values.size
                moments[s][1] += float(values.sum())
                bins = (_ordered_keys(values) >> np.uint64(_TOP_SHIFT)).astype(np.int64)
                counts[s] += np.bincount(bins, minlength=counts[s].size)
    return [tuple(m) for m in moments], counts


def _select(chunks: Chunks, pending: dict) -> dict:
    """The value of each (sample, rank): its bin is the keys whose top bits (key >> shift)
    equal `prefix`, with `below` values in lower bins and `inside` in it. Ranks in the same bin
    share one collection (or one split) of it."""
    found = {}
    while pending:
        for key, (shift, prefix, below, inside) in list(pending.items()):
            if shift == 0:  # one key: one value
                found[key] = float(np.array([prefix ^ (1 << 63) if prefix >> 63 else ~prefix & ((1 << 64) - 1)],
                                            dtype=np.uint64).view(np.float64)[0])
                del pending[key]
        bins: dict[tuple, list] = {}  # (sample, shift, prefix) -> the ranks' keys in that bin
        for key, (shift, prefix, _, _) in pending.items():
            bins.setdefault((key[0], shift, prefix), []).append(key)
        collect = {b: keys for b, keys in bins.items() if pending[keys[0]][3] <= _COLLECT_VALUES}
        split = {b: keys for b, keys in bins.items() if pending[keys[0]][3] > _COLLECT_VALUES}
        parts = {b: [] for b in collect}
        split_counts = {b: np.zeros(1 << _SPLIT_BITS, dtype=np.int64) for b in split}
        if pending:
            for chunk in chunks():
                ordered = {}
                for b in bins:
                    sample, shift, prefix = b
                    if sample not in ordered:
                        ordered[sample] = _ordered_keys(chunk[sample])
                    inside = (ordered[sample] >> np.uint64(shift)) == np.uint64(prefix)
                    if b in collect:
                        parts[b].append(chunk[sample][inside])
                    else:
                        low_shift = np.uint64(max(0, shift - _SPLIT_BITS))
                        sub = (ordered[sample][inside] >> low_shift) & np.uint64((1 << (shift - int(low_shift))) - 1)
                        split_counts[b] += np.bincount(sub.astype(np.int64), minlength=1 << _SPLIT_BITS)
        for b, keys in collect.items():
            values = np.concatenate(parts.pop(b))
            below = pending[keys[0]][2]
            ranks = sorted({key[1] - below for key in keys})
            values = np.partition(values, ranks)  # each wanted rank in its sorted place
            for key in keys:
                found[key] = float(values[key[1] - below])
                del pending[key]
        for b, keys in split.items():
            sample, shift, prefix = b
            cumulative = np.cumsum(split_counts[b])
            low_shift = max(0, shift - _SPLIT_BITS)
            for key in keys:
                below = pending[key][2]
                i = int(np.searchsorted(cumulative, key[1] - below, side="right"))
                pending[key] = (low_shift, (prefix << (shift - low_shift)) | i,
                                below + (int(cumulative[i - 1]) if i else 0), int(split_counts[b][i]))
    return found


def _lerp(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    """numpy's `_lerp`: a + (b − a)·t, computed from b's side when t >= 0.5 (same operations)."""
    diff_b_a = b - a
    out = np.add(a, diff_b_a * t)
    np.subtract(b, diff_b_a * (1 - t), out=out, where=t >= 0.5)
    return out
