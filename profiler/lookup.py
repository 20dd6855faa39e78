"""Precomputed lookup tables, so that pricing a step is a few array look-ups, not a model call.

`LineTable`: a function of one integer count (step tokens, sequences), exact on every integer up
to `dense_up_to`, then on a geometric grid (1 % apart) up to `max_value`, linearly interpolated;
past `max_value` it scales in proportion (op times are linear in the count there).

`GridTable`: a function of two counts on a log-spaced grid, bilinearly interpolated in log space
and clamped to the grid's edges (used for the fitted model's tree corrections, which are constant
beyond the profiled range anyway).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

_GEOMETRIC_STEP = 1.01  # 1 % between grid points past the dense part: interpolation error ≪ 1 %


class LineTable:
    """f(n) for integer n ≥ 1, tabulated once.

    Args:
        fn: vectorised f, takes an int array (n,) and returns float seconds (n,).
        max_value: the last tabulated count.
        dense_up_to: counts tabulated one by one.
    """

    def __init__(self, fn: Callable[[np.ndarray], np.ndarray], max_value: int, dense_up_to: int = 1024):
        dense = np.arange(1, min(dense_up_to, max_value) + 1)
        num_geometric = max(0, int(np.ceil(np.log(max_value / dense[-1]) / np.log(_GEOMETRIC_STEP))))
        sparse = np.geomspace(dense[-1], max_value, num_geometric + 1)[1:] if num_geometric else []
        self.x = np.unique(np.concatenate((dense, np.round(sparse)))).astype(np.float64)
        self.y = np.asarray(fn(self.x.astype(np.int64)), dtype=np.float64)
        self.max_value = float(self.x[-1])
        self._dense = self.y[:len(dense)].tolist()  # f(1..len) as floats, for integer look-ups

    def __call__(self, n: float) -> float:
        """f(n) (interpolated between grid points; in proportion to n beyond the grid)."""
        if n > self.max_value:
            return float(self.y[-1] * n / self.max_value)
        if n <= len(self._dense) and n == int(n) and n >= 1:
            return self._dense[int(n) - 1]
        return float(np.interp(n, self.x, self.y))


class GridTable:
    """g(a, b) for counts a ≥ 1, b ≥ 0 on a log grid over [1, a_max] × [0, b_max].

    Args:
        fn: vectorised g(a, b) over flattened grid arrays (n,), returns (n,).
        a_max, b_max: the grid's upper corners (values past them are clamped).
        points: grid points per axis.
    """

    def __init__(self, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], a_max: float, b_max: float,
                 points: int = 33):
        self.log_a = np.linspace(0.0, np.log(max(a_max, 1.0)) + 1e-9, points)
        self.log_b = np.linspace(0.0, np.log1p(max(b_max, 0.0)) + 1e-9, points)
        a, b = np.meshgrid(np.exp(self.log_a), np.expm1(self.log_b), indexing="ij")
        self.values = np.asarray(fn(a.ravel(), b.ravel()), dtype=np.float64).reshape(a.shape)
        self._rows = self.values.tolist()  # the same values as floats, for scalar look-ups

    def __call__(self, a, b):
        """g at each (a[i], b[i]): arrays (n,) in and out, or two scalars in and a float out;
        bilinear in (log a, log(1 + b)), clamped to the grid."""
        if np.ndim(a) == 0:
            return float(self._at(self._scalar_position(self.log_a, math.log(max(a, 1.0))),
                                  self._scalar_position(self.log_b, math.log1p(max(b, 0.0)))))
        u = self._position(self.log_a, np.log(np.maximum(np.asarray(a, dtype=np.float64), 1.0)))
        v = self._position(self.log_b, np.log1p(np.maximum(np.asarray(b, dtype=np.float64), 0.0)))
        return self._at(u, v)

    def _at(self, u, v):
        if np.ndim(u) == 0:
            g = self._rows
            i, j = min(int(u), len(g) - 2), min(int(v), len(g[0]) - 2)
        else:
            g = self.values
            i = np.minimum(u.astype(int), g.shape[0] - 2)
            j = np.minimum(v.astype(int), g.shape[1] - 2)
        fu, fv = u - i, v - j
        if np.ndim(u) == 0:
            return ((1 - fu) * (1 - fv) * g[i][j] + fu * (1 - fv) * g[i + 1][j]
                    + (1 - fu) * fv * g[i][j + 1] + fu * fv * g[i + 1][j + 1])
        return ((1 - fu) * (1 - fv) * g[i, j] + fu * (1 - fv) * g[i + 1, j]
                + (1 - fu) * fv * g[i, j + 1] + fu * fv * g[i + 1, j + 1])

    @staticmethod
    def _scalar_position(axis: np.ndarray, x: float) -> float:
        """`_position` of one float, without numpy's per-call overhead."""
        return min(max((x - axis[0]) / (axis[1] - axis[0]), 0.0), len(axis) - 1.0)

    @staticmethod
    def _position(axis: np.ndarray, x):
        """Fractional index of x (scalar or array) on an evenly spaced axis, clamped to [0, len − 1]."""
        step = axis[1] - axis[0]
        return np.clip((x - axis[0]) / step, 0.0, len(axis) - 1.0)
