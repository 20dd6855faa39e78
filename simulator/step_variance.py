"""Step-time variance: real engine steps do not take exactly what a cost model prices.

A deterministic simulator gives every step its priced time, so it never sees the queueing that
varying step times cause near capacity (a deterministic server queues less than one with the same
mean and any spread). Modelled here as the simplest seeded model that has that effect: each step's
priced time is multiplied by an independent lognormal factor of mean 1 and coefficient of variation
`cv`, so mean step times (and mean TPOT) stay the cost model's and only the spread is added.
Independent from step to step: what a request's TPOT averages over its n − 1 decode steps then
varies by about cv / sqrt(n − 1) around the priced mean.

Fitting `cv` (`fit_cv_from_tpot`): the per-request residual of TPOT (log of measured over
simulated TPOT) of a recorded run, multiplied by its number of decode steps, estimates cv² when
every step's error is independent (var(log TPOT ratio) ≈ cv² / (n − 1)). It counts every
per-step error the cost model leaves (real jitter and mispriced step mixes alike) and counts a
per-request systematic error as variance too, so it is an upper bound on the independent part.

The factors come from one seeded numpy `Generator` (PCG64) per replica (seed, replica id), drawn
in blocks and used in step order, so the same seed gives the same steps. A run with variance
goes step by step (`simulator.simulate`: no decode or prefill windows, whose steps are priced
before it is known which of them run).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MAX_CV = 2.0  # a factor's coefficient of variation above 200 % is a unit mistake, not an engine
_BLOCK = 4096  # factors drawn per refill


@dataclass(frozen=True)
class StepVariance:
    """Seeded multiplicative noise on step times (module docstring).

    Attributes:
        cv: coefficient of variation of a step's time factor (0.1 = 10 %); the factor is
            lognormal with mean 1: log factor ~ N(−s²/2, s²), s² = ln(1 + cv²).
        seed: the run's seed (`engine.seed`); replica r draws from PCG64([seed, r]).

    Raises:
        ValueError: cv not a finite number in (0, MAX_CV], or seed not an int ≥ 0.
    """

    cv: float
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.cv, bool) or not isinstance(self.cv, (int, float)) or not math.isfinite(self.cv) \
                or not 0 < self.cv <= MAX_CV:
            raise ValueError(f"StepVariance.cv must be a finite number in (0, {MAX_CV:g}], got {self.cv!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise ValueError(f"StepVariance.seed must be an int >= 0, got {self.seed!r}")

    def factors(self, replica_id: int) -> "StepFactors":
        """The stream of step-time factors of replica `replica_id`."""
        return StepFactors(self.cv, self.seed, replica_id)


class StepFactors:
    """One replica's step-time factors, in step order (`next()`: one per step)."""

    def __init__(self, cv: float, seed: int, replica_id: int) -> None:
        s2 = math.log1p(cv * cv)
        self._mu, self._sigma = -s2 / 2.0, math.sqrt(s2)
        self._rng = np.random.Generator(np.random.PCG64([int(seed), int(replica_id)]))
        self._block: list[float] = []
        self._next = 0

    def next(self) -> float:
        """The factor of the next step (dimensionless, > 0, mean 1)."""
        if self._next == len(self._block):
            self._block = np.exp(self._rng.normal(self._mu, self._sigma, _BLOCK)).tolist()
            self._next = 0
        value = self._block[self._next]
        self._next += 1
        return value


def fit_cv_from_tpot(measured_tpot_s, simulated_tpot_s, output_tokens) -> float:
    """cv of independent step-time factors that the per-request TPOT residuals of a recorded run
    imply (module docstring): sqrt(mean over requests of (r_i − mean r)² (n_i − 1)), r_i = ln(measured
    / simulated TPOT), n_i output tokens; requests with fewer than 3 output tokens or a TPOT that is
    not a positive finite number on either side are left out. The lognormal's s² is converted to cv
    (cv² = exp(s²) − 1).

    Args:
        measured_tpot_s, simulated_tpot_s, output_tokens: aligned per-request arrays.

    Raises:
        ValueError: arrays of different lengths, or fewer than 10 usable requests.
    """
    measured = np.asarray(measured_tpot_s, dtype=float)
    simulated = np.asarray(simulated_tpot_s, dtype=float)
    tokens = np.asarray(output_tokens, dtype=float)
    if not measured.shape == simulated.shape == tokens.shape:
        raise ValueError(f"fit_cv_from_tpot: arrays of lengths {measured.size}, {simulated.size}, {tokens.size}")
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = (tokens >= 3) & np.isfinite(measured) & np.isfinite(simulated) & (measured > 0) & (simulated > 0)
    if ok.sum() < 10:
        raise ValueError(f"fit_cv_from_tpot: {int(ok.sum())} usable requests (need 10 with >= 3 output tokens)")
    r = np.log(measured[ok] / simulated[ok])
    s2 = float(np.mean((r - r.mean()) ** 2 * (tokens[ok] - 1)))
    return math.sqrt(math.expm1(s2))
