"""Synthetic traces, rate rescaling and cutting (traces/generators.py)."""
from __future__ import annotations

import numpy as np
import pytest

from traces import Request, cut, scale_to_qps, synthetic_trace
from traces.generators import fixed_lengths, poisson_arrivals, uniform_lengths
from traces.trace_stats import mean_rate_qps


def at(*arrivals_s):
    return [Request(i, a, 10, 5) for i, a in enumerate(arrivals_s)]


def test_poisson_arrivals_start_at_zero_with_mean_gap_one_over_qps():
    arrival_s = poisson_arrivals(4.0, 40_000, np.random.default_rng(0))
    assert arrival_s.shape == (40_000,) and arrival_s[0] == 0.0
    assert np.all(np.diff(arrival_s) >= 0)
    gaps = np.diff(arrival_s)
    assert gaps.mean() == pytest.approx(0.25, rel=0.02)
    assert gaps.std() == pytest.approx(0.25, rel=0.02)  # exponential: std = mean
    assert poisson_arrivals(4.0, 0, np.random.default_rng(0)).shape == (0,)


@pytest.mark.parametrize("qps", [0, -1, float("inf"), float("nan")])
def test_poisson_arrivals_reject_bad_rates(qps):
    with pytest.raises(ValueError, match="qps"):
        poisson_arrivals(qps, 3, np.random.default_rng(0))


def test_length_samplers():
    assert fixed_lengths(3, 7).tolist() == [7, 7, 7]
    lengths = uniform_lengths(10_000, 2, 4, np.random.default_rng(1))
    assert set(lengths.tolist()) == {2, 3, 4}  # both ends included
    with pytest.raises(ValueError, match="tokens"):
        fixed_lengths(3, 0)
    with pytest.raises(ValueError, match="must not exceed"):
        uniform_lengths(3, 5, 4, np.random.default_rng(1))


def test_synthetic_trace_is_reproducible_and_shaped_as_asked():
    trace = synthetic_trace(500, qps=10.0, prompt=(100, 200), output=32, seed=7)
    assert trace == synthetic_trace(500, qps=10.0, prompt=(100, 200), output=32, seed=7)
    assert trace != synthetic_trace(500, qps=10.0, prompt=(100, 200), output=32, seed=8)
    assert [r.request_id for r in trace] == list(range(500))
    assert trace[0].arrival_s == 0.0
    assert all(100 <= r.prompt_tokens <= 200 and r.output_tokens == 32 for r in trace)
    assert mean_rate_qps(np.array([r.arrival_s for r in trace])) == pytest.approx(10.0, rel=0.15)


def test_synthetic_trace_rejects_bad_length_spec():
    with pytest.raises(ValueError, match="prompt"):
        synthetic_trace(5, 1.0, prompt="long")


def test_scale_to_qps_sets_the_mean_rate_exactly_and_keeps_relative_gaps():
    trace = at(0.0, 1.0, 3.0, 4.0)  # 3 gaps over 4 s: 0.75 requests/s
    scaled = scale_to_qps(trace, 3.0)
    assert [r.arrival_s for r in scaled] == [0.0, 0.25, 0.75, 1.0]
    assert [(r.request_id, r.prompt_tokens) for r in scaled] == [(r.request_id, r.prompt_tokens) for r in trace]
    assert mean_rate_qps(np.array([r.arrival_s for r in scaled])) == pytest.approx(3.0)


@pytest.mark.parametrize("trace", [at(0.0, 0.0, 0.0), at(0.0), []])
def test_scale_to_qps_of_zero_span_says_rate_undefined(trace):
    with pytest.raises(ValueError, match="undefined"):
        scale_to_qps(trace, 2.0)


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
