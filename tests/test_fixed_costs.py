"""A run's fixed costs cut without changing a value (issue 17): the summary's percentiles sorted
in place, a grid's unmeasured cells filled all lines at once, `Request`s built slot by slot, and
the gaps' one-token counts as a view. Each worked by hand and against the plain path."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from profiler.measured.grid import _fill_proportional
from simulator.metrics import PERCENTILES, percentile_stats
from simulator.records_percentiles import percentiles_of_sorted
from simulator.records_sketch import GapSketch, gaps_of_flat
from traces.replay import time_scale
from traces.request import Request, requests_from_columns


def test_percentile_stats_in_place_by_hand_and_equal_to_the_copying_path():
    values = np.array([4.0, 1.0, math.nan, 3.0, 2.0])
    # Without the NaN: 1, 2, 3, 4; mean 2.5; p90 at virtual index 3 · 0.9 = 2.7 → 3 + 0.7 · (4 − 3).
    out = percentile_stats("x_s", values)
    assert out["x_s_mean"] == 2.5 and out["x_s_p50"] == 2.5 and out["x_s_p90"] == pytest.approx(3.7)
    assert np.isnan(values[2]) and values[[0, 1, 3, 4]].tolist() == [4.0, 1.0, 3.0, 2.0]  # caller's array kept
    rng = np.random.default_rng(0)
    samples = rng.exponential(0.02, 10_001)
    plain = percentile_stats("tbt_s", samples.copy())
    scratch = samples.copy()
    assert percentile_stats("tbt_s", scratch, scratch=True) == plain  # bit for bit, mean included
    assert plain["tbt_s_mean"] == float(samples.mean())
    assert [plain[f"tbt_s_p{p:g}"] for p in (50, 90, 95, 99, 99.9)] == np.percentile(samples, (50, 90, 95, 99, 99.9)).tolist()
    assert sorted(scratch.tolist()) == sorted(samples.tolist())  # reordered, nothing lost
    empty = percentile_stats("y_s", np.array([math.nan]), scratch=True)
    assert all(math.isnan(v) for v in empty.values())


def test_percentiles_of_sorted_by_hand_and_bit_for_bit_numpys():
    # Four values: p50 at virtual index 1.5 → 2 + 0.5 · (3 − 2); p99.9 at 2.997 → 3 + 0.997 · (4 − 3).
    assert percentiles_of_sorted(np.array([1.0, 2.0, 3.0, 4.0]), (50, 99.9, 100, 0)) == [2.5, pytest.approx(3.997), 4.0, 1.0]
    assert percentiles_of_sorted(np.array([7.0]), PERCENTILES) == [7.0] * 5
    assert all(math.isnan(v) for v in percentiles_of_sorted(np.zeros(0), PERCENTILES))
    rng = np.random.default_rng(5)
    for n in (1, 2, 3, 5, 10, 1001, 20_000):
        for values in (rng.exponential(0.02, n), np.round(rng.exponential(0.02, n), 3), rng.normal(0, 1, n)):
            want = np.percentile(values, PERCENTILES)
            assert np.array(percentiles_of_sorted(np.sort(values), PERCENTILES)).tobytes() == want.tobytes()
            assert np.array([percentile_stats("x_s", values.copy(), scratch=True)[f"x_s_p{p:g}"]
                             for p in PERCENTILES]).tobytes() == want.tobytes()


def test_signed_zeros_keep_numpys_pick():
    # -0.0 and 0.0 are equal, so which lands at a rank depends on the algorithm: with a sign bit
    # set, the in-place path is numpy.percentile's own, whose pick the copying path gives too.
    values = np.array([0.0, -0.0, 0.0, -0.0, 1.0, -0.0])
    got = percentile_stats("x_s", values.copy(), scratch=True)
    assert np.array([got[f"x_s_p{p:g}"] for p in PERCENTILES]).tobytes() == np.percentile(values, PERCENTILES).tobytes()


def test_fill_proportional_by_hand():
    times = np.array([[math.nan, 2.0, math.nan, math.nan, 8.0],
                      [math.nan, math.nan, math.nan, math.nan, math.nan]])
    axis = np.array([0.0, 2.0, 4.0, 8.0, 16.0])  # keys below 1 count as 1
    filled = _fill_proportional(times, axis, axis=1)
    # Cell 0 has no measured cell below: from cell 1, 2 · 1 / 2; cells 2 and 3 from cell 1 (the
    # lower neighbour is preferred over cell 4): 2 · 4 / 2, 2 · 8 / 2. A line with no measured cell stays NaN.
    assert filled[0].tolist() == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert np.isnan(filled[1]).all() and np.isnan(times[0, 0])  # the input is not changed
    scale = np.array([[3.0, 6.0], [1.0, 5.0], [2.0, 4.0]])  # a roofline's time per cell
    grid = np.array([[math.nan, 1.5], [2.0, math.nan], [math.nan, math.nan]])
    down = _fill_proportional(grid, np.array([1.0, 2.0, 4.0]), axis=0, scale=scale)
    # Along axis 0: column 0 from row 1 (t' · R / R' = 2 · 3 / 1 above, 2 · 2 / 1 below), column 1 from row 0.
    assert down.tolist() == [[6.0, 1.5], [2.0, 1.5 * 5 / 6], [4.0, 1.5 * 4 / 6]]


def _fill_one_cell_at_a_time(times, axis_values, axis, scale=None):
    """The definition, cell by cell: each NaN from the nearest measured cell along `axis` (the
    lower one preferred) times the ratio of `scale` (default the keys, at least 1)."""
    out = times.copy()
    x = np.broadcast_to(np.maximum(axis_values, 1.0).reshape([-1 if d == axis else 1 for d in range(times.ndim)]),
                        times.shape) if scale is None else scale
    for index in zip(*np.nonzero(~np.isfinite(times))):
        line = list(index)
        measured = [j for j in range(times.shape[axis]) if np.isfinite(times[tuple(line[:axis] + [j] + line[axis + 1:])])]
        if not measured:
            continue
        below = [j for j in measured if j < index[axis]]
        ref = tuple(line[:axis] + [below[-1] if below else measured[0]] + line[axis + 1:])
        out[index] = times[ref] * x[index] / x[ref]
    return out


def test_fill_proportional_equals_the_cell_by_cell_definition_bit_for_bit():
    rng = np.random.default_rng(7)
    for _ in range(300):
        shape = tuple(rng.integers(1, 6, rng.integers(1, 4)))
        times = rng.lognormal(-8, 2, shape)
        times[rng.random(shape) < rng.random()] = math.nan
        axis = int(rng.integers(0, len(shape)))
        keys = np.sort(rng.choice([0.0, 0.5, 1.0, 2.0, 16.0, 100.0, 4096.0], shape[axis]))
        scale = rng.lognormal(-8, 2, shape) if rng.random() < 0.5 else None
        got, want = _fill_proportional(times, keys, axis, scale), _fill_one_cell_at_a_time(times, keys, axis, scale)
        assert got.tobytes() == want.tobytes()


def _fields(r: Request) -> tuple:
    return tuple(getattr(r, f.name) for f in dataclasses.fields(Request))  # compare=False ones too


def test_requests_from_columns_are_the_constructors_requests():
    rows = [(0, 0.0, 5, 1, 0, (), 512), (1, 0.5, 1, 7, -2, (11, 12), 16), (2, 2.25, 300, 2, 3, (4,), 512)]
    built = requests_from_columns(*zip(*rows))
    assert [_fields(r) for r in built] == rows and built == [Request(*row) for row in rows]
    assert hash(built[1]) == hash(Request(*rows[1]))
    with pytest.raises(dataclasses.FrozenInstanceError):
        built[0].arrival_s = 1.0
    with pytest.raises(ValueError, match="request 3: prefix_hash_ids must be a tuple of integers"):
        requests_from_columns([3], [0.0], [4], [4], [0], [("a",)], [512])  # checked as __post_init__ does
    with pytest.raises(ValueError, match="prefix_block_tokens must be an int >= 1, got 0"):
        requests_from_columns([3], [0.0], [4], [4], [0], [(1,)], [0])


def test_time_scale_keeps_every_field_and_divides_from_the_first_arrival():
    trace = [Request(0, 10.0, 5, 2, 1, (7, 8), 16), Request(1, 13.0, 6, 3), Request(2, 16.0, 1, 1, -1)]
    scaled = time_scale(trace, 3.0)
    assert [r.arrival_s for r in scaled] == [0.0, 1.0, 2.0]  # (13 − 10) / 3, (16 − 10) / 3
    assert [_fields(r)[2:] for r in scaled] == [_fields(r)[2:] for r in trace]
    assert [r.request_id for r in scaled] == [0, 1, 2]


def test_one_token_gaps_come_as_a_read_only_view_with_the_same_sketch():
    times, lengths = np.array([0.0, 1.0, 3.0, 10.0, 10.5]), np.array([3, 2])
    tbt, tokens, itl = gaps_of_flat(times, lengths)
    assert tbt.tolist() == [1.0, 2.0, 0.5] and itl is tbt and tokens.tolist() == [1, 1, 1]
    assert not tokens.flags.writeable
    viewed, counted = GapSketch(), GapSketch()
    viewed.add(tbt, tokens)
    counted.add(tbt.copy(), np.ones(3, dtype=np.int64))
    for name in ("tbt_s", "itl_s"):
        assert viewed.counts[name].tolist() == counted.counts[name].tolist()
        assert viewed.moments[name] == counted.moments[name] == [3, 3.5, 0.5, 2.0]
