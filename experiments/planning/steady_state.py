"""Sustained load: is a capacity trial in steady state over its measured window?

A trial that meets its percentile SLOs may still be overloaded: near saturation the queue grows
slowly, and a trial that ends before the queue is long enough leaves its percentiles under the
limits (issue 29: 2,048-request trials passed 26.9 QPS where 8,192-request ones found ≈ 23). A
load passes only when, over the measured window (the arrivals left after `trim_fraction` of the
arrival span is cut at each end: warm-up, when the system fills, and drain, when it empties,
excluded as the latency statistics exclude them, `simulator.metrics.summarize`):

1. **No upward drift of the backlog.** The window is cut into `DRIFT_BATCHES` equal spans of
   arrival time; the mean queueing delay (`scheduling_delay_s`: arrival to first scheduled) of each
   span's arrivals is regressed on the span's mid-time (batch means, so that the strongly
   correlated delays of neighbouring requests count as one observation per span). The backlog
   drifts when the slope is positive at one-sided 95 % (Student t, spans − 2 degrees of freedom)
   AND the fitted rise across the window (slope × window length) exceeds a floor: 10 % of the
   tightest queue-sensitive SLO limit (a TTFT, E2E or scheduling-delay percentile), or
   `DEFAULT_DRIFT_FLOOR_S` without one. The floor keeps statistically visible but harmless rises
   (tens of milliseconds) from costing longer trials.
2. **The window covers many relaxations of the queue.** The queueing delays of the window's
   arrivals, in arrival order, must hold ≥ `MIN_EFFECTIVE_SAMPLES` effectively independent
   samples: n / τ, with τ the integrated autocorrelation time from `ESS_BATCHES` batch means
   (τ = batch size × variance of the batch means / variance of the delays; Law §9.5.3, the
   batch-means variance estimator). Near saturation the queue's excursions last long (τ grows
   as 1 / (1 − ρ)², Kingman's heavy-traffic limit), and a trial of a few of them measures its
   P99 on the excursions it happened to see: issue 29's 2,048-request trials passed loads whose
   8,192-request trials failed. Delays that hardly vary (standard deviation under
   `FLAT_DELAY_S`: no queue) count as independent.
3. **Completions keep up with arrivals.** Requests completed inside the window / requests that
   arrived in it ≥ 1 − `COMPLETION_TOLERANCE`. In steady state the two differ only by the change
   of the number in the system between the window's ends; an overloaded system serves its own
   rate μ < λ, a ratio near μ / λ.

A trial whose window misses an SLO fails. One that meets every SLO but drifts, or falls short of
the offered rate, is too short to decide: the caller lengthens it (`TrialLength`) and runs it
again. At the cap a trial that still drifts or falls short fails (a growing backlog is never a
capacity); one whose only fault is few effective samples is judged on its SLOs, measured on the
longest trial allowed (the result names the cap). Drift and the completion check are the tests of Welch-style steady-state detection
in simulation output analysis (Law, *Simulation Modeling and Analysis*, 5th ed., §9.5.1: warm-up
deletion and batch means), applied as a pass/fail rule.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Callable

import numpy as np
import pandas as pd

DRIFT_BATCHES = 10
DRIFT_CONFIDENCE = 0.95  # one-sided
DRIFT_FLOOR_FRACTION = 0.1  # of the tightest queue-sensitive SLO limit
DEFAULT_DRIFT_FLOOR_S = 0.25  # without one (e.g. a TBT-only SLO)
COMPLETION_TOLERANCE = 0.05
ESS_BATCHES = 32
MIN_EFFECTIVE_SAMPLES = 150
FLAT_DELAY_S = 1e-3
# SLO metrics whose value grows with the queue: their limit sets the drift floor.
QUEUE_SENSITIVE_PREFIXES = ("ttft_", "e2e_", "scheduling_delay_")


class Verdict(str, Enum):
    """A trial's outcome: `passed` (SLOs met in steady state), `failed` (an SLO missed), or
    `undecided` (SLOs met, but the backlog drifts or completions fall short: lengthen it)."""

    PASSED = "passed"
    FAILED = "failed"
    UNDECIDED = "undecided"


@dataclass(frozen=True)
class WindowCheck:
    """The steady-state tests of one trial's measured window.

    Attributes:
        window_s: length of the measured window (s of arrival time).
        arrivals, completions: requests that arrived / completed inside it.
        completion_ratio: completions / arrivals (NaN with no arrivals).
        delay_rise_s: fitted rise of the batch-mean queueing delay across the window (s).
        drift_t: the slope's t statistic (NaN when under 3 batches had arrivals or the batch means
            are exactly on a line).
        drift_floor_s: the rise below which no drift is called (s).
        drifting: the slope is significantly positive and the rise exceeds the floor.
        effective_samples: the window's queueing delays over their autocorrelation time (n / τ).
        short_of_offered: completion_ratio < 1 − COMPLETION_TOLERANCE.
    """

    window_s: float
    arrivals: int
    completions: int
    completion_ratio: float
    delay_rise_s: float
    drift_t: float
    drift_floor_s: float
    drifting: bool
    effective_samples: float
    short_of_offered: bool

    @property
    def too_few_samples(self) -> bool:
        return self.effective_samples < MIN_EFFECTIVE_SAMPLES

    @property
    def steady(self) -> bool:
        return not (self.drifting or self.too_few_samples or self.short_of_offered)

    def why_not_steady(self) -> str:
        """What kept the window from steady state, e.g. 'queueing delay rises 3.1 s across the
        window (t = 5.2)'; '' when it is steady."""
        reasons = []
        if self.drifting:
            reasons.append(f"queueing delay rises {self.delay_rise_s:.3g} s across the {self.window_s:.0f} s window "
                           f"(t = {self.drift_t:.2f}, floor {self.drift_floor_s:.3g} s)")
        if self.too_few_samples:
            reasons.append(f"{self.effective_samples:.0f} effectively independent queueing delays "
                           f"(< {MIN_EFFECTIVE_SAMPLES}: the queue's excursions are long for the window)")
        if self.short_of_offered:
            reasons.append(f"completions {self.completion_ratio:.1%} of arrivals in the window "
                           f"(< {1 - COMPLETION_TOLERANCE:.0%})")
        return "; ".join(reasons)


def drift_floor_s(slo: dict[str, float]) -> float:
    """`DRIFT_FLOOR_FRACTION` of the tightest queue-sensitive SLO limit (keys such as
    `ttft_p99_s`, `scheduling_delay_p50_s`, `e2e_p90_s`), else `DEFAULT_DRIFT_FLOOR_S` (s)."""
    limits = [limit for key, limit in slo.items() if key.startswith(QUEUE_SENSITIVE_PREFIXES)]
    return DRIFT_FLOOR_FRACTION * min(limits) if limits else DEFAULT_DRIFT_FLOOR_S


def rule_text(slo: dict[str, float]) -> str:
    """The sustained-load rule as the reports print it."""
    return (f"a load passes only in steady state: over the measured window (warm-up and drain trimmed), the queueing "
            f"delay's batch means ({DRIFT_BATCHES} spans of arrival time) show no upward drift (slope > 0 at one-sided "
            f"{DRIFT_CONFIDENCE:.0%} with a fitted rise over {drift_floor_s(slo):.3g} s across the window), the delays "
            f"hold ≥ {MIN_EFFECTIVE_SAMPLES} effectively independent samples (n / autocorrelation time, "
            f"{ESS_BATCHES} batch means), and completions reach ≥ {1 - COMPLETION_TOLERANCE:.0%} of arrivals in it. "
            "A trial meeting the SLOs without all three is rerun once at the cap's length (same seed); "
            "there it fails if it still drifts or falls short, and one short only of samples is judged on its SLOs")


def check_window(requests: pd.DataFrame, trim_fraction: float, floor_s: float) -> WindowCheck:
    """The steady-state tests (module docstring) of a trial's requests.

    Args:
        requests: the trial's requests frame (`arrival_s`, `completion_s`, `finish_reason`,
            `scheduling_delay_s`; NaN delay or completion for requests never scheduled or rejected).
        trim_fraction: share of the arrival span cut at each end (0 ≤ f < 0.5), as the trial's
            latency statistics were trimmed.
        floor_s: `drift_floor_s` of the trial's SLOs.
    """
    arrival = requests["arrival_s"].to_numpy(dtype=float)
    if arrival.size == 0:
        return WindowCheck(0.0, 0, 0, math.nan, 0.0, math.nan, floor_s, False, 0.0, False)
    first, last = float(arrival.min()), float(arrival.max())
    margin = trim_fraction * (last - first)
    low, high = first + margin, last - margin
    inside = (arrival >= low) & (arrival <= high)
    completion = requests["completion_s"].to_numpy(dtype=float)
    completed = (requests["finish_reason"].to_numpy() == "completed") & (completion >= low) & (completion <= high)
    arrivals, completions = int(inside.sum()), int(completed.sum())
    ratio = completions / arrivals if arrivals else math.nan
    delay_s = requests["scheduling_delay_s"].to_numpy(dtype=float)[inside]
    rise_s, t, dof = _delay_drift(arrival[inside], delay_s, low, high)
    significant = math.isnan(t) or t > _t_critical(dof)  # an exact line: the rise alone decides
    drifting = bool(rise_s > floor_s and significant)
    return WindowCheck(high - low, arrivals, completions, ratio, rise_s, t, floor_s, drifting,
                       effective_samples(delay_s[np.argsort(arrival[inside], kind="stable")]),
                       bool(ratio < 1 - COMPLETION_TOLERANCE))


def effective_samples(values: np.ndarray) -> float:
    """n / τ of a series (NaNs dropped): τ = batch size × variance of `ESS_BATCHES` batch means /
    variance of the values, at least 1; n when the values vary by under `FLAT_DELAY_S` or are
    too few for two per batch."""
    values = values[~np.isnan(values)]
    size = values.size // ESS_BATCHES
    if size < 2 or values.std() < FLAT_DELAY_S:
        return float(values.size)
    means = values[:size * ESS_BATCHES].reshape(ESS_BATCHES, size).mean(axis=1)
    tau = size * means.var(ddof=1) / values.var(ddof=1)
    return values.size / max(tau, 1.0)


def _delay_drift(arrival: np.ndarray, delay_s: np.ndarray, low: float,
                 high: float) -> tuple[float, float, int]:
    """(fitted rise of the batch-mean delay across [low, high] in s, the slope's t statistic, its
    degrees of freedom): OLS of each batch's mean delay on its mid-time. No rise when under 3
    batches have delays; NaN t when the fit is exact (zero residual: then the rise alone decides)."""
    if high <= low:
        return 0.0, math.nan, 0
    keep = ~np.isnan(delay_s)
    batch = np.minimum(((arrival[keep] - low) / (high - low) * DRIFT_BATCHES).astype(int), DRIFT_BATCHES - 1)
    counts = np.bincount(batch, minlength=DRIFT_BATCHES)
    sums = np.bincount(batch, weights=delay_s[keep], minlength=DRIFT_BATCHES)
    used = counts > 0
    if used.sum() < 3:
        return 0.0, math.nan, 0
    x = (np.flatnonzero(used) + 0.5) / DRIFT_BATCHES * (high - low)
    y = sums[used] / counts[used]
    x_centered = x - x.mean()
    sxx = float((x_centered ** 2).sum())
    slope = float((x_centered * (y - y.mean())).sum() / sxx)
    residuals = y - y.mean() - slope * x_centered
    dof = int(used.sum()) - 2
    se = math.sqrt(float((residuals ** 2).sum()) / dof / sxx)
    rise_s = slope * (high - low)
    return rise_s, (slope / se if se > 0 else math.nan), dof


def _t_critical(dof: int) -> float:
    from scipy import stats  # slow to import; only capacity searches need it

    return float(stats.t.ppf(DRIFT_CONFIDENCE, dof))


def judge(slo_met: bool, check: WindowCheck) -> Verdict:
    """A trial's verdict: failed when an SLO is missed in the window, else passed when the window is
    steady, else undecided (lengthen it)."""
    if not slo_met:
        return Verdict.FAILED
    return Verdict.PASSED if check.steady else Verdict.UNDECIDED


@dataclass(frozen=True)
class Trial:
    """One run of a trial: its length (requests), the window's checks and its verdict;
    `at_cap`: it was undecided with no longer trial left, and its verdict is `at_cap`'s;
    `result` is the run's `PointResult`."""

    num_requests: int
    check: WindowCheck
    verdict: Verdict
    at_cap: bool
    result: object

    @property
    def passed(self) -> bool:
        return self.verdict is Verdict.PASSED


def run_until_decided(run: Callable[[int], object], slo_met: Callable[[object], bool], first: int,
                      lengthen: Callable[[int], int | None], trim_fraction: float, floor_s: float,
                      on_trial: Callable[[Trial], None] | None = None) -> bool:
    """Run a trial of `first` requests (`run(num_requests)` → a `PointResult`), judge it
    (`judge` of `slo_met(result)` and `check_window`), and while it is undecided run it again at
    `lengthen(num_requests)` requests; True only for a passed trial. At the cap (`lengthen` gives
    None, or the trace did not grow: a file trace at its end) an undecided trial is decided by
    `at_cap`. `on_trial` sees every run, the undecided ones too."""
    num_requests = first
    while True:
        result = run(num_requests)
        check = check_window(result.requests, trim_fraction, floor_s)
        verdict = judge(slo_met(result), check)
        longer = lengthen(num_requests) if verdict is Verdict.UNDECIDED else None
        if longer is not None and len(result.requests) < num_requests:  # a file trace ran out of rows
            longer = None
        capped = verdict is Verdict.UNDECIDED and longer is None
        trial = Trial(num_requests, check, at_cap(check) if capped else verdict, capped, result)
        if on_trial is not None:
            on_trial(trial)
        if longer is None:
            return trial.passed
        num_requests = longer


def at_cap(check: WindowCheck) -> Verdict:
    """The verdict of a trial at the cap that met its SLOs but was not steady: failed when its
    backlog drifts or its completions fall short (not sustainable, however long the trial);
    passed when only its effective samples are few (the longest trial allowed measured its
    percentiles; the result names the cap)."""
    return Verdict.FAILED if check.drifting or check.short_of_offered else Verdict.PASSED
