"""The sweep report's CDF of time between tokens, drawn without holding every gap (issue 34, item 2).

The plot used to sort every TBT gap of a point (one per token: ~10 million at 50,000 requests)
and hand them all to matplotlib, whose line and its path copies took ~0.5 GB at 20,000 requests
on top of the requests frame read back whole with its token times. The curve is drawn instead
through the upper edges of the order-preserving bins `simulator.records_percentiles` counts by
(the top 20 bits of a value's IEEE 754 key: sign, exponent, 8 mantissa bits, so a bin is at most
0.4 % of its value wide): at each edge the fraction of gaps at or below it is exact, and the
first point is the smallest gap at 1/n and the last the largest at 1, as on the sorted curve;
only where a gap lies inside its bin is not shown (< 0.4 %, under a pixel on the log axis).
Memory: the bins a point's gaps fall in (a few thousand), whatever their number; the gaps are
read from the records a batch of requests at a time.

A source is a requests file (Parquet, as `requests.parquet`: `point_id` and `token_times_s`
columns) or a requests frame; a point's gaps are `simulator.metrics.gap_samples_s`'s TBT samples
of its requests (a request without token times has none).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from simulator.records_percentiles import _TOP_SHIFT, _ordered_keys
from simulator.records_sketch import gaps_of_flat

_BATCH_ROWS = 2048  # requests read (and their gaps computed) at a time


class BinnedCdf:
    """Per point id: TBT gap counts per key bin, with the count, smallest and largest gap."""

    def __init__(self) -> None:
        self._bins: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        self._extremes: dict[int, tuple[float, float]] = {}

    def add(self, point_id: int, times_s: np.ndarray, lengths: np.ndarray) -> None:
        """Count the TBT gaps of requests of `point_id` given as flat token times (float64) and
        tokens per request (`gaps_of_flat`'s arguments)."""
        tbt_s = gaps_of_flat(times_s, lengths)[0]
        if not tbt_s.size:
            return
        bins, counts = np.unique(_ordered_keys(tbt_s) >> np.uint64(_TOP_SHIFT), return_counts=True)
        self._bins.setdefault(point_id, []).append((bins, counts))
        low, high = float(tbt_s.min()), float(tbt_s.max())
        old = self._extremes.get(point_id, (low, high))
        self._extremes[point_id] = (min(low, old[0]), max(high, old[1]))

    def curve(self, point_id: int) -> tuple[np.ndarray, np.ndarray]:
        """(x in s, fraction of gaps ≤ x) of the point's CDF (module docstring); empty arrays
        when it has no gap."""
        parts = self._bins.get(point_id)
        if not parts:
            return np.zeros(0), np.zeros(0)
        bins, inverse = np.unique(np.concatenate([b for b, _ in parts]), return_inverse=True)
        counts = np.bincount(inverse, weights=np.concatenate([c for _, c in parts]).astype(np.float64))
        fraction = np.cumsum(counts) / counts.sum()
        low, high = self._extremes[point_id]
        edges = _key_value((bins << np.uint64(_TOP_SHIFT)) | np.uint64((1 << _TOP_SHIFT) - 1))
        edges[-1] = high  # the last bin's edge is past the largest gap: end the curve on it
        first = 1.0 / counts.sum()
        return np.r_[low, edges], np.r_[first, fraction]


def _key_value(keys: np.ndarray) -> np.ndarray:
    """The float64 values of order-preserving uint64 keys (inverse of `_ordered_keys`)."""
    top = keys >> np.uint64(63)
    bits = np.where(top == np.uint64(1), keys ^ np.uint64(1 << 63), ~keys)
    return bits.view(np.float64)


def binned_tbt_cdf(sources: list) -> BinnedCdf:
    """The TBT gaps of every source (a requests file's path or a requests frame, with
    `point_id` and `token_times_s`), binned per point id; sources without `token_times_s` add
    nothing."""
    cdf = BinnedCdf()
    for source in sources:
        if isinstance(source, pd.DataFrame):
            _add_frame(cdf, source)
        else:
            _add_file(cdf, Path(source))
    return cdf


def _add_frame(cdf: BinnedCdf, requests: pd.DataFrame) -> None:
    if "token_times_s" not in requests or not len(requests):
        return
    for point_id, times in requests.groupby("point_id", sort=True)["token_times_s"]:
        lists = times.dropna().tolist()
        for start in range(0, len(lists), _BATCH_ROWS):
            part = lists[start:start + _BATCH_ROWS]
            lengths = np.fromiter(map(len, part), np.int64, len(part))
            flat = np.concatenate([np.asarray(t, dtype=np.float64) for t in part]) if part else np.zeros(0)
            cdf.add(int(point_id), flat, lengths)


def _add_file(cdf: BinnedCdf, path: Path) -> None:
    import pyarrow.parquet as pq

    file = pq.ParquetFile(path, buffer_size=1 << 20, pre_buffer=False)
    if "token_times_s" not in file.schema_arrow.names:
        return
    for batch in file.iter_batches(batch_size=_BATCH_ROWS, columns=["point_id", "token_times_s"]):
        point_ids = batch.column(0).to_numpy()
        column = batch.column(1)
        lengths = np.diff(column.offsets.to_numpy())
        values = column.flatten().to_numpy()  # the batch's tokens (offsets start at offsets[0])
        for point_id in np.unique(point_ids):
            mine = point_ids == point_id
            cdf.add(int(point_id), values[np.repeat(mine, lengths)], lengths[mine])
