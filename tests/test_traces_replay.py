"""Replaying a recorded trace: time scaling, rate targeting, time windows and cuts (traces/replay.py)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traces import Request, cut, scale_to_qps, time_scale, time_window
from traces.trace_stats import gap_cv, mean_rate_qps, span_s


def at(*arrivals_s):
    return [Request(i, a, 10 + i, 5) for i, a in enumerate(arrivals_s)]


def arrivals(requests):
    return np.array([r.arrival_s for r in requests])


def test_scale_to_qps_sets_the_mean_rate_and_keeps_relative_gaps():
    trace = at(0.0, 1.0, 3.0, 4.0)  # 3 gaps over 4 s: 0.75 requests/s
    scaled = scale_to_qps(trace, 3.0)
    assert arrivals(scaled).tolist() == [0.0, 0.25, 0.75, 1.0]
    assert [(r.request_id, r.prompt_tokens) for r in scaled] == [(r.request_id, r.prompt_tokens) for r in trace]
    assert mean_rate_qps(arrivals(scaled)) == pytest.approx(3.0)
    assert gap_cv(arrivals(scaled)) == pytest.approx(gap_cv(arrivals(trace)))


@pytest.mark.parametrize("trace", [at(0.0, 0.0, 0.0), at(0.0), []])
def test_scale_to_qps_of_zero_span_says_rate_undefined(trace):
    with pytest.raises(ValueError, match="undefined"):
        scale_to_qps(trace, 2.0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0, 1e6, allow_subnormal=False), min_size=1, max_size=40),
    st.floats(1e-3, 1e3, allow_subnormal=False),
)
def test_time_scaling_by_k_divides_the_span_by_k_exactly(raw_arrivals, k):
    trace = at(*sorted(raw_arrivals))
    scaled = time_scale(trace, k)
    assert span_s(arrivals(scaled)) == span_s(arrivals(trace)) / k
    assert scaled[0].arrival_s == 0.0
    assert [r.prompt_tokens for r in scaled] == [r.prompt_tokens for r in trace]


def test_time_scale_rejects_a_bad_factor():
    with pytest.raises(ValueError, match="factor must be a finite number > 0"):
        time_scale(at(0.0, 1.0), 0.0)


def test_cut_by_count_and_by_half_open_duration():
    trace = at(0.0, 0.5, 1.0, 1.0, 2.5)
    assert [r.request_id for r in cut(trace, max_requests=2)] == [0, 1]
    assert [r.request_id for r in cut(trace, max_duration_s=1.0)] == [0, 1]
    assert [r.request_id for r in cut(trace, max_duration_s=1.1)] == [0, 1, 2, 3]
    assert [r.request_id for r in cut(trace, max_requests=3, max_duration_s=10)] == [0, 1, 2]
    assert cut(trace) == trace and cut([], max_duration_s=1.0) == []


def test_cut_rejects_unsorted_input_and_negative_limits():
    with pytest.raises(ValueError, match="sorted"):
        cut(at(1.0, 0.0), max_requests=1)
    with pytest.raises(ValueError, match="max_duration_s"):
        cut(at(0.0), max_duration_s=-1)
    with pytest.raises(ValueError, match="max_requests"):
        cut(at(0.0), max_requests=-1)


def test_time_window_keeps_half_open_interval_rebased_and_renumbered():
    trace = at(0.0, 0.5, 1.0, 1.0, 2.5, 3.0)
    window = time_window(trace, 1.0, 3.0)
    assert arrivals(window).tolist() == [0.0, 0.0, 1.5]
    assert [r.request_id for r in window] == [0, 1, 2]
    assert [r.prompt_tokens for r in window] == [12, 13, 14]  # the requests at 1.0, 1.0 and 2.5 s
    assert time_window(trace, 10.0, 20.0) == [] and time_window([], 0.0, 1.0) == []


@pytest.mark.parametrize("start_s, end_s", [(-1.0, 2.0), (2.0, 2.0), (3.0, 1.0), (float("nan"), 1.0)])
def test_time_window_rejects_empty_or_negative_windows(start_s, end_s):
    with pytest.raises(ValueError, match=r"window must be \[start_s, end_s\)"):
        time_window(at(0.0, 1.0), start_s, end_s)
