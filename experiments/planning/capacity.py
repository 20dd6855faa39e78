"""Capacity: the highest QPS at which a point meets its percentile SLOs, found by bisection.

Method (Sarathi-Serve `sarathi/benchmark/capacity_search/capacity_search.py`, REFERENCE.md §1.6):
each trial simulates a fixed-size trace at one QPS; a trial passes when every percentile SLO holds
on the trimmed statistics. Start from [low, high]; while `high` passes, double it (up to
`max_qps`); optionally try 0.95 and 1.1 times the rate the overloaded `high` trial served (our
addition: a cheap first guess); then bisect until (high − low) / high ≤ precision. Capacity = the
highest passing QPS. The trial at `low` runs only when no higher one has passed by the time the
bisection needs it (our addition, `find_capacity`): every bisection assumes pass/fail monotone in
the load, under which a passing higher rate implies it, and at a low rate it is the costliest
trial of a search (the most steps per request: few requests share each step).
Repeating the search with other seeds gives a confidence interval.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

# Sarathi-Serve's strict P99 TBT SLOs by model size (REFERENCE.md §1.5, osdi-experiments
# figure-5-6 configs): Mistral-7B 0.1 s, Yi-34B 0.2 s, LLaMA2-70B / Falcon-180B 1.0 s; and its
# capacity-search default P50 scheduling delay of 2 s.
SCHEDULING_DELAY_P50_SLO_S = 2.0


# Trials shorter than this rarely build the growing queue that marks overload, so their capacities
# may be overstated (Sarathi-Serve's capacity search runs 2,048 requests a trial, REFERENCE.md §1.6).
SHORT_TRIAL_REQUESTS = 1000


def short_trials_warning(num_requests: int, key: str = "search.num_requests") -> str | None:
    """The caution for trials of fewer than `SHORT_TRIAL_REQUESTS` requests (None otherwise),
    shared by the sweep's capacity report and the xPyD search; `key` is the setting that sizes
    them (e.g. `--num-requests`)."""
    if num_requests >= SHORT_TRIAL_REQUESTS:
        return None
    return (f"Caution: trials of {num_requests} requests are short. Overload shows as a growing queue (scheduling "
            "delay), which short trials rarely build, so these capacities may be overstated; Sarathi-Serve uses "
            f"2,048 requests per trial (raise {key} to at least {SHORT_TRIAL_REQUESTS:,}).")


def default_slo(num_params: float) -> dict[str, float]:
    """Sarathi-Serve's strict SLOs for a model of `num_params` parameters."""
    if num_params <= 10e9:
        tbt_s = 0.1
    elif num_params <= 40e9:
        tbt_s = 0.2
    else:
        tbt_s = 1.0
    return {"tbt_p99_s": tbt_s, "scheduling_delay_p50_s": SCHEDULING_DELAY_P50_SLO_S}


@dataclass
class CapacityResult:
    """One bisection: the capacity (QPS, NaN when even `low` fails), every trial run (QPS, passed),
    and `at_cap`: the trials still undecided at the trial-length cap, as (QPS, their verdict there:
    'passed' or 'failed', `experiments.planning.steady_state.at_cap`), filled by callers that
    lengthen trials."""

    capacity_qps: float
    trials: list[tuple[float, bool]] = field(default_factory=list)
    at_cap: list[tuple[float, str]] = field(default_factory=list)


def find_capacity(passes: Callable[[float], bool], low_qps: float, high_qps: float,
                  precision: float = 0.025, max_qps: float | None = None, max_trials: int = 24,
                  served_qps: Callable[[float], float | None] | None = None) -> CapacityResult:
    """Bisection for the highest QPS at which `passes(qps)` is True.

    Args:
        passes: runs one trial at a QPS; True when every SLO holds.
        low_qps, high_qps: the starting bracket (0 < low < high).
        precision: stop when (high − low) / high ≤ precision (relative; 2.5 % as Sarathi-Serve).
        max_qps: `high` is doubled while it passes, up to this (default 64 × high_qps).
        max_trials: a hard cap on trials.
        served_qps: given the QPS of a trial already run, the request rate it actually served
            (completed / makespan), or None. After the first failing trial, an overloaded one, that
            rate μ is about the most the point can serve; the search then tries 0.95 μ and 1.1 μ
            before bisecting, which usually brackets the capacity within ~15 % in two trials
            instead of five or six. The bracket is still only narrowed by trials that pass or fail,
            so a wrong guess costs at most two trials and never the result.

    Returns:
        `CapacityResult`; capacity is NaN when `low_qps` already fails (say so, don't guess),
        and `max_qps` when even that passes.

    The trial at `low_qps` is deferred: it runs after `high` and the saturation guesses, and only
    when none of them passed (a passing higher rate implies it under the monotone pass/fail every
    bisection assumes). Each later trial is at the rate, and in the order, it would have been
    with `low_qps` tried first, which counts against `max_trials` whether it ran or not, so the
    capacity is the same; only `low_qps`'s trial is left out of `trials` when implied. At 2 QPS
    that trial cost 16 % of the CPU of issue 29's capacity-grid subset (most steps per request).
    """
    if not 0 < low_qps < high_qps:
        raise ValueError(f"capacity search needs 0 < low < high, got [{low_qps}, {high_qps}]")
    max_qps = max_qps or 64 * high_qps
    result = CapacityResult(float("nan"))
    ran_low = False

    def trial(qps: float) -> bool:
        ok = bool(passes(qps))
        result.trials.append((qps, ok))
        return ok

    def spent() -> int:  # trials run, low_qps's counted whether it ran or was implied
        return len(result.trials) + (0 if ran_low else 1)

    low, high = low_qps, high_qps
    while trial(high):
        low = high
        if high >= max_qps or spent() >= max_trials:
            result.capacity_qps = high
            return result
        high = min(2 * high, max_qps)
    if served_qps is not None:
        low, high = _narrow_by_saturation(trial, low, high, served_qps(high), max_trials - spent())
    if not any(ok for _, ok in result.trials):  # nothing higher passed: the lowest rate decides
        ran_low = True
        if not trial(low_qps):
            return result
    while (high - low) / high > precision and spent() < max_trials:
        # Geometric midpoint while the bracket spans orders of magnitude, then arithmetic.
        mid = (low * high) ** 0.5 if high > 4 * low else (low + high) / 2
        if trial(mid):
            low = mid
        else:
            high = mid
    result.capacity_qps = low
    return result


def _narrow_by_saturation(trial: Callable[[float], bool], low: float, high: float, served: float | None,
                          trials_left: int) -> tuple[float, float]:
    """Try 0.95 μ (μ = `served`, the rate an overloaded trial at `high` served), then 1.1 μ when it
    passes or 0.85 μ and 0.7 μ when it fails, where they fall inside (low, high); each trial moves
    one end of the bracket, as bisection would. A sustained capacity is often below μ (a queue
    near saturation is not steady), so after a failing guess the next steps down, not up."""
    if served is None or not served > 0:
        return low, high
    factor = 0.95
    while factor is not None:
        guess = factor * served
        if trials_left <= 0 or (high - low) / high <= SATURATION_MIN_BRACKET:
            break
        if guess <= low or guess >= high:  # known already: below a passing rate passes, above a failing one fails
            passed = guess <= low
        else:
            trials_left -= 1
            passed = trial(guess)
            low, high = (guess, high) if passed else (low, guess)
        factor = _NEXT_GUESS.get((factor, passed))
    return low, high


# The saturation guesses: (factor of μ, passed) → the next factor (none: bisect).
_NEXT_GUESS = {(0.95, True): 1.1, (0.95, False): 0.85, (0.85, False): 0.7}
# Below this relative bracket width plain bisection is as quick as guessing from saturation.
SATURATION_MIN_BRACKET = 0.2


def confidence_interval(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high) of a Student-t interval over repeated-seed capacities; NaN-safe.

    With one value the interval is undefined (NaN bounds), never zero-width. The low bound is
    clipped at 0 (a capacity is never negative; with two seeds t = 12.7 makes intervals wide).
    """
    data = np.asarray([v for v in values if not math.isnan(v)], dtype=float)
    if data.size == 0:
        return float("nan"), float("nan"), float("nan")
    mean = float(data.mean())
    if data.size < 2:
        return mean, float("nan"), float("nan")
    from scipy import stats  # slow to import; only capacity reports need it

    half = stats.t.ppf(0.5 + level / 2, data.size - 1) * data.std(ddof=1) / math.sqrt(data.size)
    return mean, max(0.0, mean - half), mean + half
