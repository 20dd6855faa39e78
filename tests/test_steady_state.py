"""Sustained load (issue 29): the steady-state tests of a capacity trial, its lengthening, and the
trial length scaled by instances. Hand-made request frames with hand-worked values."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from experiments.config import SweepConfig
from experiments.planning.capacity import find_capacity
from experiments.planning.steady_state import (COMPLETION_TOLERANCE, MIN_EFFECTIVE_SAMPLES, Verdict, check_window,
                                               drift_floor_s, effective_samples, judge, rule_text, run_until_decided)
from experiments.planning.trial_length import instances, trial_length


def frame(arrival_s, delay_s, completion_s=None, finish="completed") -> pd.DataFrame:
    arrival_s = np.asarray(arrival_s, dtype=float)
    completion_s = arrival_s + 1.0 if completion_s is None else np.asarray(completion_s, dtype=float)
    return pd.DataFrame({"arrival_s": arrival_s, "scheduling_delay_s": np.asarray(delay_s, dtype=float),
                         "completion_s": completion_s, "finish_reason": finish})


def test_a_flat_queue_is_steady_and_completions_count_inside_the_window():
    # 1,001 arrivals at 0..1000 s; trim 10 %: window [100, 900], 801 arrivals; each completes 1 s later,
    # so completions inside the window are those of arrivals 99..899: 801.
    arrival = np.arange(1001.0)
    check = check_window(frame(arrival, np.zeros(1001)), 0.1, 0.2)
    assert check.window_s == 800.0 and check.arrivals == 801 and check.completions == 801
    assert check.completion_ratio == 1.0 and check.delay_rise_s == 0.0
    assert check.effective_samples == 801  # delays that do not vary: every sample independent
    assert check.steady and check.why_not_steady() == ""


def test_a_growing_queue_drifts_by_its_fitted_rise():
    # Delay = 0.01 s per second of arrival time: across the 800 s window the batch means rise 8 s exactly,
    # plus a small alternating jitter so the fit is not exact (t finite and large).
    arrival = np.arange(1001.0)
    delay = 0.01 * arrival + 0.001 * (np.arange(1001) % 2)
    check = check_window(frame(arrival, delay), 0.1, 0.2)
    assert check.delay_rise_s == pytest.approx(8.0, abs=0.01)
    assert check.drifting and check.drift_t > 100
    assert "queueing delay rises 8 s across the 800 s window" in check.why_not_steady()
    assert judge(True, check) is Verdict.UNDECIDED and judge(False, check) is Verdict.FAILED


def test_a_rise_under_the_floor_is_no_drift():
    arrival = np.arange(1001.0)
    delay = 0.0001 * arrival + 0.001 * (np.arange(1001) % 2)  # rises 0.08 s over the window: under 0.2 s
    assert not check_window(frame(arrival, delay), 0.1, 0.2).drifting


def test_completions_short_of_arrivals():
    # Only the even arrivals complete at once (the rest 10,000 s later): those of 100, 102, ..., 898 inside the
    # window [100, 900]: 400 of 801.
    arrival = np.arange(1001.0)
    completion = np.where(np.arange(1001) % 2 == 0, arrival + 1, arrival + 10_000)
    check = check_window(frame(arrival, np.zeros(1001), completion), 0.1, 0.2)
    assert check.completions == 400 and check.completion_ratio == pytest.approx(400 / 801)
    assert check.short_of_offered and f"(< {1 - COMPLETION_TOLERANCE:.0%})" in check.why_not_steady()


def test_effective_samples_of_independent_and_of_blocky_series():
    rng = np.random.default_rng(0)
    independent = rng.exponential(1.0, 3200)
    assert effective_samples(independent) == pytest.approx(3200, rel=0.6)
    # 32 blocks of 100 equal values: the batch means are the values; with S their summed squared
    # deviation, τ = 100 × (S / 31) / (100 S / 3199) = 3199 / 31, n / τ = 3200 × 31 / 3199.
    blocky = np.repeat(rng.exponential(1.0, 32), 100)
    assert effective_samples(blocky) == pytest.approx(3200 * 31 / 3199)
    assert effective_samples(np.full(3200, 0.5)) == 3200  # flat: no queue


def test_drift_floor_is_a_tenth_of_the_tightest_queue_sensitive_slo():
    assert drift_floor_s({"ttft_p99_s": 2.0, "tpot_p99_s": 0.1}) == pytest.approx(0.2)
    assert drift_floor_s({"tbt_p99_s": 0.1, "scheduling_delay_p50_s": 2.0, "e2e_p90_s": 1.5}) == pytest.approx(0.15)
    assert drift_floor_s({"tbt_p99_s": 0.1}) == 0.25
    assert "no upward drift" in rule_text({"ttft_p99_s": 2.0}) and "0.2 s" in rule_text({"ttft_p99_s": 2.0})


class _Result:
    def __init__(self, requests: pd.DataFrame, slo_met: bool):
        self.requests, self.slo_met = requests, slo_met


def _runs(kinds: dict[int, str]):
    """run(n) for run_until_decided: 'steady', 'drift' or 'mixing' (few effective samples) windows of n requests."""
    seen = []

    def run(n: int) -> _Result:
        seen.append(n)
        arrival = np.arange(float(n))
        kind = kinds[n]
        if kind == "drift":
            delay = 0.01 * arrival + 0.001 * (np.arange(n) % 2)
        elif kind == "mixing":  # 32 long excursions: n / τ = 32 effective samples, no trend
            delay = np.repeat(np.tile([0.0, 1.0], 16), n // 32)
        else:
            delay = np.zeros(n)
        return _Result(frame(arrival, delay), True)
    return run, seen


def test_an_undecided_trial_is_doubled_until_it_decides():
    run, seen = _runs({3200: "drift", 6400: "mixing", 12800: "steady"})
    trials = []
    assert run_until_decided(run, lambda r: r.slo_met, 3200, lambda n: 2 * n if n < 25600 else None, 0.1, 0.2,
                             trials.append)
    assert seen == [3200, 6400, 12800]
    assert [t.verdict for t in trials] == [Verdict.UNDECIDED, Verdict.UNDECIDED, Verdict.PASSED]
    assert not any(t.at_cap for t in trials)


def test_at_the_cap_a_drifting_trial_fails_and_one_short_of_samples_is_judged_on_its_slos():
    run, seen = _runs({3200: "mixing", 6400: "drift"})
    trials = []
    assert not run_until_decided(run, lambda r: r.slo_met, 3200, lambda n: 6400 if n < 6400 else None, 0.1, 0.2,
                                 trials.append)
    assert seen == [3200, 6400] and trials[-1].at_cap and trials[-1].verdict is Verdict.FAILED
    run, seen = _runs({3200: "mixing", 6400: "mixing"})
    trials = []
    assert run_until_decided(run, lambda r: r.slo_met, 3200, lambda n: 6400 if n < 6400 else None, 0.1, 0.2,
                             trials.append)
    assert trials[-1].at_cap and trials[-1].verdict is Verdict.PASSED
    assert trials[-1].check.effective_samples < MIN_EFFECTIVE_SAMPLES


def test_a_file_trace_at_its_end_is_not_lengthened():
    calls = []

    def run(n: int) -> _Result:  # a 4,000-row file: a trial of 6,400 gets 4,000
        calls.append(n)
        rows = min(n, 4000)
        return _Result(frame(np.arange(float(rows)), np.repeat(np.tile([0.0, 1.0], 16), 125)[:rows]), True)
    trials = []
    run_until_decided(run, lambda r: r.slo_met, 3200, lambda n: 2 * n, 0.1, 0.2, trials.append)
    assert calls == [3200, 6400] and trials[-1].at_cap


def _point(**engine) -> SweepConfig:
    return SweepConfig.model_validate({"model": "llama-3-8b", "trace": {"kind": "poisson", "qps": 1},
                                       "engine": {"scheduler": "vllm_v1", **engine}})


def test_trial_length_scales_with_instances():
    assert instances(_point()) == 1 and instances(_point(replicas=4)) == 4
    assert instances(_point(data_parallel_size=2)) == 2
    length = trial_length(_point(replicas=4), 2048, 4)
    assert (length.base, length.cap) == (8192, 32768)
    # An undecided trial is rerun once, at the cap (4 × 8,192), not doubled through 16,384.
    assert length.next(8192) == 32768 and length.next(32768) is None
    assert length.text() == ("2,048 requests per instance × 4 instances = 8,192 a trial, rerun at 32,768 when "
                             "undecided (cap: 4× the first trial)")
    assert trial_length(_point(), 2048, 1).text() == "2,048 requests a trial, never lengthened (cap: 1×)"
    cluster = SweepConfig.model_validate({
        "model": "llama-3-8b", "trace": {"kind": "poisson", "qps": 1}, "engine": {"scheduler": "sarathi"},
        "cluster": {"prefill": {"replicas": 1}, "decode": {"replicas": 3}}})
    assert instances(cluster) == 4
    with pytest.raises(ValueError, match="requests per instance ≥ 1"):
        trial_length(_point(), 0)


@pytest.mark.parametrize("true_capacity, served, expected_trials", [
    # served 10: 0.95 μ = 9.5 fails, 0.85 μ = 8.5 fails, 0.7 μ = 7 passes, then bisection in [7, 8.5]
    # (0.5 QPS, the lowest rate, is implied by 7 passing: never run).
    (8.0, 10.0, [16.0, 9.5, 8.5, 7.0, 7.75]),
    # served 10: 9.5 passes, 1.1 μ = 11 fails, bisection in [9.5, 11].
    (10.2, 10.0, [16.0, 9.5, 11.0, 10.25]),
])
def test_saturation_guesses_step_down_after_a_failure(true_capacity, served, expected_trials):
    result = find_capacity(lambda q: q <= true_capacity, 0.5, 16.0, precision=0.025, served_qps=lambda q: served)
    assert [q for q, _ in result.trials][:len(expected_trials)] == pytest.approx(expected_trials)
    assert true_capacity * (1 - 0.025) <= result.capacity_qps <= true_capacity
    assert not math.isnan(result.capacity_qps)
