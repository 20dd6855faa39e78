"""Held-out error of log-space interpolation on a measured table: each interior grid point is left
out in turn and predicted from its two neighbours along one axis, as `LogGrid` would interpolate
it if the grid were half as dense there. It bounds the error of pricing a shape between measured
points (the cost model interpolates between neighbours twice as close).

Only points measured on both sides count (no filled cell takes part).
"""
from __future__ import annotations

import numpy as np

from profiler.measured.grid import LogGrid


def heldout_errors(grid: LogGrid) -> dict[int, np.ndarray]:
    """Per axis, the absolute relative errors |predicted / measured − 1| of every interior point
    predicted from its neighbours on that axis (log time linear in log or log1p key).

    Returns:
        axis index → 1-D array of errors (empty where the axis has no interior point).
    """
    out = {}
    log_t, measured = grid.log_times, ~grid.filled
    for axis, values in enumerate(grid.axes):
        coords = np.log1p(values) if values[0] <= 0 else np.log(values)
        if coords.size < 3:
            out[axis] = np.array([])
            continue
        t = np.moveaxis(log_t, axis, -1)
        ok = np.moveaxis(measured, axis, -1)
        w = (coords[1:-1] - coords[:-2]) / (coords[2:] - coords[:-2])
        predicted = t[..., :-2] * (1 - w) + t[..., 2:] * w
        valid = ok[..., :-2] & ok[..., 1:-1] & ok[..., 2:]
        out[axis] = np.abs(np.exp(predicted - t[..., 1:-1]) - 1.0)[valid]
    return out


def mape(errors: np.ndarray) -> float:
    """Mean of absolute relative errors, in percent (NaN when empty)."""
    return float(100.0 * errors.mean()) if errors.size else float("nan")


def heldout_errors_by_class(frame, keys: list[str], classes) -> dict[int, np.ndarray]:
    """`heldout_errors` of the grid over `keys` within each class of `frame`'s rows, pooled per axis:
    each point predicted from its neighbours of the same class, as the cost model reads a table whose
    first key steps between classes (`profiler.measured.table_grids._m_class_curve`).

    Args:
        frame: the table's rows (`keys` columns and time_s).
        classes: one label per row (array-like of len(frame)); a class with a single row is skipped.

    Returns:
        axis index → 1-D array of errors, every class's pooled.
    """
    labels = np.asarray(classes)
    pooled: dict[int, list[np.ndarray]] = {axis: [] for axis in range(len(keys))}
    for label in np.unique(labels):
        rows = frame[labels == label]
        if len(rows) < 2:
            continue
        for axis, errors in heldout_errors(LogGrid.from_frame(rows, keys)).items():
            pooled[axis].append(errors)
    return {axis: np.concatenate(v) if v else np.array([]) for axis, v in pooled.items()}
