"""Open-loop arrival processes: when requests arrive, independent of how fast they are served.

Every process returns arrival times in seconds, shape (n,), non-decreasing, the first at 0.0 s
(the convention of every reader here), so n arrivals bound n - 1 gaps and the mean rate
(n - 1) / span estimates `qps`. Randomness comes from a `numpy.random.Generator` the caller
builds from a seed. The closed-loop process (a fixed number of clients) depends on completions
and lives in `traces.closed_loop`.
"""
from __future__ import annotations

import math

import numpy as np

ARRIVAL_PROCESSES = ("poisson", "gamma", "constant")


def poisson_arrivals(qps: float, num_requests: int, rng: np.random.Generator) -> np.ndarray:
    """Arrival times in seconds of a Poisson process at `qps` requests/s, shape (num_requests,).

    The gaps after the first arrival are exponential with mean 1 / qps (gap CV = 1).

    Raises:
        ValueError: qps not a finite number > 0, or num_requests not an int >= 0.
    """
    check_positive(qps, "qps")
    check_count(num_requests)
    gaps_s = rng.exponential(1.0 / qps, size=max(num_requests - 1, 0))
    return _from_gaps(gaps_s, num_requests)


def gamma_arrivals(qps: float, num_requests: int, burstiness: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times in seconds with gamma-distributed gaps, shape (num_requests,).

    Gaps ~ Gamma(shape = burstiness, scale = 1 / (qps * burstiness)): mean 1 / qps whatever the
    burstiness, coefficient of variation 1 / sqrt(burstiness). burstiness < 1 is burstier than
    Poisson, > 1 more regular. This is vLLM's `vllm bench serve --burstiness` (γ). At γ = 1 the
    gamma is the exponential, and the same draws as `poisson_arrivals` are used, so the two give
    the identical trace for a seed.

    Raises:
        ValueError: qps or burstiness not a finite number > 0, or num_requests not an int >= 0.
    """
    check_positive(burstiness, "burstiness")
    if burstiness == 1.0:
        return poisson_arrivals(qps, num_requests, rng)
    check_positive(qps, "qps")
    check_count(num_requests)
    gaps_s = rng.gamma(burstiness, 1.0 / (qps * burstiness), size=max(num_requests - 1, 0))
    return _from_gaps(gaps_s, num_requests)


def constant_arrivals(qps: float, num_requests: int) -> np.ndarray:
    """Arrival i at exactly i / qps seconds, shape (num_requests,): a constant rate, gap CV 0.

    Raises:
        ValueError: qps not a finite number > 0, or num_requests not an int >= 0.
    """
    check_positive(qps, "qps")
    check_count(num_requests)
    return np.arange(num_requests, dtype=float) / qps


def arrival_times_s(
    process: str, qps: float, num_requests: int, rng: np.random.Generator, burstiness: float | None = None
) -> np.ndarray:
    """Arrival times in seconds of the named process ("poisson", "gamma", "constant"), shape (n,).

    `burstiness` is read by "gamma" only (default 1.0, which is Poisson); giving it to another
    process is an error rather than a silently ignored setting.

    Raises:
        ValueError: an unknown process (the message lists the valid ones), burstiness given to a
            process other than gamma, or a bad qps / count / burstiness.
    """
    if process not in ARRIVAL_PROCESSES:
        raise ValueError(f"unknown arrival process {process!r}; valid: {', '.join(ARRIVAL_PROCESSES)}")
    if burstiness is not None and process != "gamma":
        raise ValueError(f"burstiness applies to the gamma arrival process only, not {process!r}")
    if process == "gamma":
        return gamma_arrivals(qps, num_requests, 1.0 if burstiness is None else burstiness, rng)
    if process == "constant":
        return constant_arrivals(qps, num_requests)
    return poisson_arrivals(qps, num_requests, rng)


def _from_gaps(gaps_s: np.ndarray, num_requests: int) -> np.ndarray:
    return np.concatenate([[0.0], np.cumsum(gaps_s)])[:num_requests]


def check_positive(value: float, name: str) -> None:
    """ValueError unless `value` is a finite real number > 0 (bools are not numbers here)."""
    if isinstance(value, bool) or not (
        isinstance(value, (int, float, np.number)) and math.isfinite(value) and value > 0
    ):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def check_count(value: int, name: str = "num_requests") -> None:
    """ValueError unless `value` is an int >= 0 (bools are not counts)."""
    if not (isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 0):
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
