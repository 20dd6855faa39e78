"""Synthetic traces (traces/generators.py): arrivals joined with lengths, seeded."""
from __future__ import annotations

import numpy as np
import pytest

from traces import lengths_with_arrivals, load_profile, synthetic_trace
from traces.trace_stats import gap_cv, mean_rate_qps


def arrivals(requests):
    return np.array([r.arrival_s for r in requests])


def test_synthetic_trace_is_reproducible_and_shaped_as_asked():
    trace = synthetic_trace(500, qps=10.0, prompt=(100, 200), output=32, seed=7)
    assert trace == synthetic_trace(500, qps=10.0, prompt=(100, 200), output=32, seed=7)
    assert trace != synthetic_trace(500, qps=10.0, prompt=(100, 200), output=32, seed=8)
    assert [r.request_id for r in trace] == list(range(500))
    assert trace[0].arrival_s == 0.0
    assert all(100 <= r.prompt_tokens <= 200 and r.output_tokens == 32 for r in trace)
    assert mean_rate_qps(arrivals(trace)) == pytest.approx(10.0, rel=0.15)


def test_synthetic_trace_with_gamma_arrivals_and_distribution_specs():
    trace = synthetic_trace(20_000, qps=5.0, arrival="gamma", burstiness=0.25, seed=1,
                            prompt={"dist": "lognormal", "mean": 800, "std": 400, "max": 4096},
                            output={"dist": "zipf", "theta": 1.0, "max": 512})
    assert gap_cv(arrivals(trace)) == pytest.approx(2.0, rel=0.05)
    assert mean_rate_qps(arrivals(trace)) == pytest.approx(5.0, rel=0.05)
    prompts = np.array([r.prompt_tokens for r in trace])
    assert prompts.max() <= 4096 and prompts.mean() == pytest.approx(800, rel=0.03)
    assert max(r.output_tokens for r in trace) <= 512


def test_constant_arrivals_are_evenly_spaced():
    assert arrivals(synthetic_trace(4, qps=2.0, arrival="constant")).tolist() == [0.0, 0.5, 1.0, 1.5]


def test_profile_lengths_through_synthetic_trace_equal_the_profile_sample():
    # The quickstart's trace: the same draws whichever way it is asked for.
    profile = load_profile("azure-conv")
    spec = {"dist": "empirical", "profile": "azure-conv"}
    assert synthetic_trace(300, 16.0, spec, spec, seed=0) == profile.sample(300, qps=16.0, seed=0)


def test_synthetic_trace_rejects_bad_length_spec():
    with pytest.raises(ValueError, match="prompt length must be an int"):
        synthetic_trace(5, 1.0, prompt="long")


def test_lengths_with_arrivals_keeps_row_order():
    trace = lengths_with_arrivals(np.array([5, 6, 7]), np.array([1, 2, 3]), qps=1.0, arrival="constant")
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in trace] == [(0.0, 5, 1), (1.0, 6, 2), (2.0, 7, 3)]
    with pytest.raises(ValueError, match="3 prompt lengths but 2 output lengths"):
        lengths_with_arrivals(np.array([5, 6, 7]), np.array([1, 2]), qps=1.0)
