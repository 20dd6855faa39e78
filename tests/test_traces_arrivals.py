"""Open-loop arrival processes (traces/arrivals.py): rates, burstiness, seeding; property tests."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traces.arrivals import arrival_times_s, constant_arrivals, gamma_arrivals, poisson_arrivals
from traces.trace_stats import gap_cv, mean_rate_qps

N = 20_000
rates = st.floats(0.05, 500.0)
seeds = st.integers(0, 2**32 - 1)


def test_poisson_arrivals_start_at_zero_with_mean_gap_one_over_qps():
    arrival_s = poisson_arrivals(4.0, 40_000, np.random.default_rng(0))
    assert arrival_s.shape == (40_000,) and arrival_s[0] == 0.0
    gaps = np.diff(arrival_s)
    assert np.all(gaps >= 0)
    assert gaps.mean() == pytest.approx(0.25, rel=0.02)
    assert gaps.std() == pytest.approx(0.25, rel=0.02)  # exponential: std = mean
    assert poisson_arrivals(4.0, 0, np.random.default_rng(0)).shape == (0,)
    assert poisson_arrivals(4.0, 1, np.random.default_rng(0)).tolist() == [0.0]


def test_constant_arrivals_are_exactly_i_over_qps():
    assert constant_arrivals(4.0, 5).tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert constant_arrivals(3.0, 4).tolist() == [0.0, 1 / 3, 2 / 3, 1.0]
    assert gap_cv(constant_arrivals(7.0, 100)) == pytest.approx(0.0, abs=1e-12)


def test_gamma_with_burstiness_one_is_the_poisson_trace():
    assert np.array_equal(gamma_arrivals(3.0, 500, 1.0, np.random.default_rng(5)),
                          poisson_arrivals(3.0, 500, np.random.default_rng(5)))


@pytest.mark.parametrize("burstiness, cv", [(0.25, 2.0), (4.0, 0.5)])
def test_gamma_gap_cv_is_one_over_sqrt_burstiness(burstiness, cv):
    arrival_s = gamma_arrivals(10.0, 100_000, burstiness, np.random.default_rng(1))
    assert gap_cv(arrival_s) == pytest.approx(cv, rel=0.03)
    assert np.diff(arrival_s).mean() == pytest.approx(0.1, rel=0.03)


@pytest.mark.parametrize("qps", [0, -1, float("inf"), float("nan"), True])
def test_bad_rates_are_refused(qps):
    with pytest.raises(ValueError, match="qps must be a finite number > 0"):
        poisson_arrivals(qps, 3, np.random.default_rng(0))


def test_arrival_times_by_name_and_its_errors():
    rng = np.random.default_rng(0)
    assert arrival_times_s("constant", 2.0, 3, rng).tolist() == [0.0, 0.5, 1.0]
    with pytest.raises(ValueError, match="unknown arrival process 'bursty'; valid: poisson, gamma, constant"):
        arrival_times_s("bursty", 2.0, 3, rng)
    with pytest.raises(ValueError, match="burstiness applies to the gamma arrival process only"):
        arrival_times_s("poisson", 2.0, 3, rng, burstiness=0.5)
    with pytest.raises(ValueError, match="burstiness must be a finite number > 0"):
        arrival_times_s("gamma", 2.0, 3, rng, burstiness=0.0)
    with pytest.raises(ValueError, match="num_requests must be an int >= 0"):
        arrival_times_s("poisson", 2.0, -1, rng)


@settings(max_examples=25, deadline=None)
@given(qps=rates, burstiness=st.floats(0.2, 5.0), seed=seeds)
def test_generated_mean_rate_is_within_statistical_tolerance(qps, burstiness, seed):
    # The mean of N - 1 gaps has relative standard error cv / sqrt(N - 1); allow 5 of them.
    arrival_s = gamma_arrivals(qps, N, burstiness, np.random.default_rng(seed))
    tolerance = 5 * (1 / math.sqrt(burstiness)) / math.sqrt(N - 1)
    assert mean_rate_qps(arrival_s) == pytest.approx(qps, rel=tolerance)


@settings(max_examples=25, deadline=None)
@given(qps=rates, burstiness=st.floats(0.05, 0.8), seed=seeds)
def test_gamma_below_one_is_burstier_than_poisson(qps, burstiness, seed):
    assert gap_cv(gamma_arrivals(qps, N, burstiness, np.random.default_rng(seed))) > 1.0


@settings(max_examples=25, deadline=None)
@given(process=st.sampled_from(["poisson", "gamma", "constant"]), qps=rates, seed=seeds, n=st.integers(0, 300))
def test_the_same_seed_gives_the_identical_arrivals(process, qps, seed, n):
    burstiness = 0.5 if process == "gamma" else None
    first = arrival_times_s(process, qps, n, np.random.default_rng(seed), burstiness)
    again = arrival_times_s(process, qps, n, np.random.default_rng(seed), burstiness)
    assert first.tobytes() == again.tobytes()
    assert first.shape == (n,) and (n == 0 or first[0] == 0.0) and np.all(np.diff(first) >= 0)
