"""`LogGrid`: measured kernel times on a regular grid of shape keys, interpolated in log space.

Kernel times follow power laws of their sizes over most of a grid (a GEMM's time ∝ m once it is
compute-bound, a decode's ∝ context once memory-bound), so interpolating log(time) linearly in
log(size) is exact on a power law and never goes negative. Axes that contain 0 (a prefill chunk's
context, a step without decodes) use log(1 + x) instead.

A query outside an axis's measured range is clamped to the edge and reported as such: the caller
scales the edge value with the roofline (`MeasuredCostModel`) and counts the step as out of grid.
Cells the source never measured (tables are not full products: AIConfigurator skips large
batch × length combinations; rows faster than the datasheet allows are dropped on import) are
filled before interpolation from the nearest measured cell along one axis (`fill_axis`; lines of
that axis with no measured cell, along the other axes in turn), scaled by the roofline's ratio
between the two cells when a roofline is given, else in proportion to the key, and flagged; a query
touching a filled cell is reported as out of grid too.
"""
from __future__ import annotations

import math
from bisect import bisect_right
from itertools import product
from typing import Callable

import numpy as np
import pandas as pd


_FIRST_AXIS_CACHE = 4096  # distinct first-axis values kept by `LogGrid.at2` before it starts over


class GridError(ValueError):
    """A table that cannot be put on a grid (no rows, non-positive times, unusable keys)."""


class LogGrid:
    """Multilinear interpolation of log(time) over log (or log1p) key axes.

    Args:
        axes: one sorted 1-D array of key values per dimension (≥ 2 values each, ≥ 0).
        times_s: array of shape (len(axes[0]), ..., len(axes[-1])), seconds, > 0 where measured,
            NaN where not.
        fill_axis: the dimension along which unmeasured cells are filled in proportion to the key
            (default the first).
        source: file/table name for error messages.
        roofline: vectorised time of a cell from its key values (one array per axis); when given,
            unmeasured cells are filled by its ratio to the measured neighbour's instead of the
            key ratio (right in both the memory- and the compute-bound regime).
        flat_below: per axis, whether a query below its smallest value reads the edge without
            being out of grid (kernel times are flat at the small end: launch-bound); default
            True for every axis.

    Raises:
        GridError: fewer than 2 values on an axis, no measured cell, or a non-positive time.
    """

    def __init__(self, axes: list[np.ndarray], times_s: np.ndarray, fill_axis: int = 0, source: str = "",
                 flat_below: list[bool] | None = None,
                 roofline: Callable[..., np.ndarray] | None = None) -> None:
        self.source = source
        self.flat_below = list(flat_below) if flat_below is not None else [True] * len(axes)
        self.axes = [np.asarray(a, dtype=np.float64) for a in axes]
        for i, a in enumerate(self.axes):
            if a.size < 2:
                raise GridError(f"{source}: axis {i} has {a.size} value(s); need at least 2 to interpolate")
        times = np.array(times_s, dtype=np.float64)
        measured = np.isfinite(times)
        if not measured.any():
            raise GridError(f"{source}: no measured cell")
        if (times[measured] <= 0).any():
            raise GridError(f"{source}: a time is not > 0")
        self.filled = ~measured
        # Along fill_axis first; a line with no measured cell at all is then filled along the others.
        scale = None
        if roofline is not None and self.filled.any():
            scale = np.asarray(roofline(*np.meshgrid(*self.axes, indexing="ij")), dtype=np.float64)
        for axis in (fill_axis, *(a for a in range(len(self.axes)) if a != fill_axis)):
            times = _fill_proportional(times, self.axes[axis], axis, scale)
        self._log1p = [bool(a[0] <= 0) for a in self.axes]
        self._coords = [(np.log1p(a) if lp else np.log(a)).tolist() for a, lp in zip(self.axes, self._log1p)]
        self.log_times = np.log(times)
        self._flat = self.log_times.ravel().tolist()
        self._filled_flat = self.filled.ravel().tolist()
        self._strides = [int(s // 8) for s in self.log_times.strides]
        self._corners = [(bits, sum(b * st for b, st in zip(bits, self._strides)))
                         for bits in product((0, 1), repeat=len(self.axes))]
        self.lower = [float(a[0]) for a in self.axes]
        self.upper = [float(a[-1]) for a in self.axes]
        # The first axis's (index, weight, out) per query value: a step's batch size or the
        # prefill grid's constant 1.0 repeat from step to step (bounded: `_FIRST_AXIS_CACHE`).
        self._first_axis: dict[float, tuple[int, float, bool]] = {}

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, keys: list[str], time_column: str = "time_s",
                   fill_axis: int = 0, source: str = "",
                   roofline: Callable[..., np.ndarray] | None = None) -> "LogGrid":
        """The grid over the distinct values of `keys` in `frame` (duplicates averaged in log).

        Raises:
            GridError: as the constructor, or `frame` is empty.
        """
        if frame.empty:
            raise GridError(f"{source}: no rows")
        log_t = np.log(frame[time_column].to_numpy(dtype=np.float64))
        grouped = pd.Series(log_t).groupby([frame[k].to_numpy() for k in keys]).mean()
        axes = [np.sort(frame[k].unique()).astype(np.float64) for k in keys]
        full = pd.MultiIndex.from_product(axes) if len(keys) > 1 else pd.Index(axes[0])
        values = np.exp(grouped.reindex(full).to_numpy()).reshape([a.size for a in axes])
        return cls(axes, values, fill_axis, source, roofline=roofline)

    def _position(self, axis: int, x: float) -> tuple[int, float, bool]:
        """(cell index, weight within the cell, clamped out of grid) of `x` on `axis`."""
        coords = self._coords[axis]
        out = False
        if x < self.lower[axis]:
            x, out = self.lower[axis], not self.flat_below[axis]
        elif x > self.upper[axis]:
            x, out = self.upper[axis], True
        u = math.log1p(x) if self._log1p[axis] else math.log(x)
        i = max(min(bisect_right(coords, u) - 1, len(coords) - 2), 0)
        return i, (u - coords[i]) / (coords[i + 1] - coords[i]), out

    def _cache_first_axis(self, x: float) -> tuple[int, float, bool]:
        """`_position(0, x)`, kept for the next look-ups of x (`at2`, `at2_many`)."""
        if len(self._first_axis) >= _FIRST_AXIS_CACHE:
            self._first_axis.clear()
        first = self._first_axis[x] = self._position(0, x)
        return first

    def at2(self, x: float, y: float) -> tuple[float, bool]:
        """`self(x, y)` of a 2-D grid, the same floats: the first axis's position is cached per
        value and the corner sum written out (the simulator prices every step's attention here)."""
        first = self._first_axis.get(x) or self._cache_first_axis(x)  # a hit is a non-empty tuple
        i, f, out = first
        # `_position(1, y)` written out (the second axis is a fresh value nearly every call)
        coords = self._coords[1]
        if y < self.lower[1]:
            y, out_y = self.lower[1], not self.flat_below[1]
        elif y > self.upper[1]:
            y, out_y = self.upper[1], True
        else:
            out_y = False
        u = math.log1p(y) if self._log1p[1] else math.log(y)
        j = bisect_right(coords, u) - 1
        if j > len(coords) - 2:
            j = len(coords) - 2
        if j < 0:
            j = 0
        g = (u - coords[j]) / (coords[j + 1] - coords[j])
        s0, s1 = self._strides
        a = i * s0 + j * s1
        b, c = a + s1, a + s0
        d = c + s1
        flat, filled = self._flat, self._filled_flat
        total = (1.0 - f) * ((1.0 - g) * flat[a] + g * flat[b]) + f * ((1.0 - g) * flat[c] + g * flat[d])
        return math.exp(total), out or out_y or filled[a] or filled[b] or filled[c] or filled[d]

    def at2_many(self, x: float, ys: list[float], base: float = 0.0, scale: float = 1.0) -> tuple[list[float], list[bool]]:
        """`at2(x, y)` for each y in `ys`, the same floats and flags, as two lists (times, out of
        grid): the first axis's position once, and the second axis's cell and corners kept while
        consecutive values stay in one cell (a decode window's mean contexts grow by one a step).
        Each time is given as `base + scale * t` (a decode step's other parts and its layers,
        without a second list; the defaults give t itself exactly, t being >= 0).
        """
        first = self._first_axis.get(x) or self._cache_first_axis(x)  # a hit is a non-empty tuple
        i, f, out_x = first
        coords = self._coords[1]
        lower, upper, flat_below, log1p = self.lower[1], self.upper[1], self.flat_below[1], self._log1p[1]
        last = len(coords) - 2
        s0, s1 = self._strides
        flat, filled = self._flat, self._filled_flat
        exp, log, log_1p = math.exp, math.log, math.log1p
        times, outs = [], []
        cell_low = cell_high = 0.0  # u in [cell_low, cell_high): the cell `bisect_right` picks for it
        j = -1
        for y in ys:
            if y < lower:
                y, out_y = lower, not flat_below
            elif y > upper:
                y, out_y = upper, True
            else:
                out_y = False
            u = log_1p(y) if log1p else log(y)
            if j < 0 or not cell_low <= u < cell_high:  # `at2`'s clamped bisection, and the cell's corners
                j = bisect_right(coords, u) - 1
                if j > last:
                    j = last
                if j < 0:
                    j = 0
                cell_low = coords[j] if j > 0 else -math.inf
                cell_high = coords[j + 1] if j < last else math.inf
                a = i * s0 + j * s1
                b, c = a + s1, a + s0
                d = c + s1
                va, vb, vc, vd = flat[a], flat[b], flat[c], flat[d]
                cell_out = bool(out_x or filled[a] or filled[b] or filled[c] or filled[d])
                cj, width = coords[j], coords[j + 1] - coords[j]
            g = (u - cj) / width
            times.append(base + scale * exp((1.0 - f) * ((1.0 - g) * va + g * vb) + f * ((1.0 - g) * vc + g * vd)))
            outs.append(out_y or cell_out)
        return times, outs

    def __call__(self, *point: float) -> tuple[float, bool]:
        """(time_s at `point`, whether it is out of grid): clamped to the axes' ranges; the flag is
        True when a coordinate was clamped above its range (or below, on an axis not
        `flat_below`) or an interpolation corner was a filled cell."""
        if len(point) == 2 and len(self._coords) == 2:
            return self.at2(*point)
        out = False
        index, weight = [], []
        for x, coords, lp, lo, hi, flat in zip(point, self._coords, self._log1p, self.lower, self.upper,
                                               self.flat_below):
            if x < lo:
                x, out = lo, out or not flat
            elif x > hi:
                x, out = hi, True
            u = math.log1p(x) if lp else math.log(x)
            i = min(bisect_right(coords, u) - 1, len(coords) - 2)
            i = max(i, 0)
            index.append(i)
            weight.append((u - coords[i]) / (coords[i + 1] - coords[i]))
        flat, filled = self._flat, self._filled_flat
        base = sum(i * s for i, s in zip(index, self._strides))
        if len(index) == 1:  # the common shapes, without the general corner loop
            f = weight[0]
            a, b = base, base + self._strides[0]
            return math.exp((1.0 - f) * flat[a] + f * flat[b]), out or filled[a] or filled[b]
        if len(index) == 2:
            f, g = weight
            s0, s1 = self._strides
            a, b, c, d = base, base + s1, base + s0, base + s0 + s1
            total = (1.0 - f) * ((1.0 - g) * flat[a] + g * flat[b]) + f * ((1.0 - g) * flat[c] + g * flat[d])
            return math.exp(total), out or filled[a] or filled[b] or filled[c] or filled[d]
        total = 0.0
        for bits, delta in self._corners:
            w = 1.0
            for c, f in zip(bits, weight):
                w *= f if c else 1.0 - f
            if w > 0.0:
                total += w * flat[base + delta]
                out = out or filled[base + delta]
        return math.exp(total), out

    def clamp(self, *point: float) -> tuple[float, ...]:
        """`point` clamped to the grid's ranges (where the edge value of `__call__` was read)."""
        return tuple(min(max(x, lo), hi) for x, lo, hi in zip(point, self.lower, self.upper))


def _fill_proportional(times: np.ndarray, axis_values: np.ndarray, axis: int,
                       scale: np.ndarray | None = None) -> np.ndarray:
    """NaN cells replaced by the nearest measured cell along `axis` scaled by the ratio of
    `scale` (the roofline's time of each cell: t = t' · R / R'), or without it by the key ratio
    (t = t' · x / x'); the lower neighbour preferred."""
    moved = np.moveaxis(times.copy(), axis, -1)
    flat = moved.reshape(-1, moved.shape[-1])
    if scale is None:
        x_rows = np.broadcast_to(np.maximum(axis_values, 1.0), flat.shape)
    else:
        x_rows = np.moveaxis(scale, axis, -1).reshape(-1, moved.shape[-1])
    # Every line at once: each cell's nearest measured cell at or below it along the line (its
    # index, -1 if none), else the nearest above (the line's length if none: a line with no
    # measured cell stays NaN). Measured values only are read, so a filled cell never feeds another.
    measured = np.isfinite(flat)
    index = np.arange(flat.shape[1])
    below = np.maximum.accumulate(np.where(measured, index, -1), axis=1)
    above = np.minimum.accumulate(np.where(measured, index, flat.shape[1])[:, ::-1], axis=1)[:, ::-1]
    ref = np.where(below >= 0, below, above)
    rows, cols = np.nonzero(~measured & (ref < flat.shape[1]))
    refs = ref[rows, cols]
    flat[rows, cols] = flat[rows, refs] * x_rows[rows, cols] / x_rows[rows, refs]  # t' · x / x', elementwise as before
    return np.moveaxis(flat.reshape(moved.shape), -1, axis)
