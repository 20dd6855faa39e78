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

from traces.time_bounds import MAX_QPS, MAX_SPAN_S, MIN_BURSTINESS, short_number

ARRIVAL_PROCESSES = ("poisson", "gamma", "constant")


def poisson_arrivals(qps: float, num_requests: int, rng: np.random.Generator) -> np.ndarray:
    """Arrival times in seconds of a Poisson process at `qps` requests/s, shape (num_requests,).

    The gaps after the first arrival are exponential with mean 1 / qps (gap CV = 1).

    Raises:
        ValueError: as `check_rate`, or num_requests not an int >= 0.
    """
    check_rate(qps, num_requests)
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
        ValueError: burstiness not a finite number in [MIN_BURSTINESS, inf) (`traces.time_bounds`:
            below it float64 draws collapse to 0), as `check_rate`, or num_requests not an int >= 0.
    """
    check_positive(burstiness, "burstiness")
    if burstiness < MIN_BURSTINESS:
        raise ValueError(f"burstiness must be >= {MIN_BURSTINESS:g} (gap CV <= {MIN_BURSTINESS ** -0.5:.3g}), got "
                         f"{burstiness!r}: below it float64 gamma draws are nearly all 0 and the trace loses its rate")
    if burstiness == 1.0:
        return poisson_arrivals(qps, num_requests, rng)
    check_rate(qps, num_requests)
    gaps_s = rng.gamma(burstiness, 1.0 / (qps * burstiness), size=max(num_requests - 1, 0))
    return _from_gaps(gaps_s, num_requests)


def constant_arrivals(qps: float, num_requests: int) -> np.ndarray:
    """Arrival i at exactly i / qps seconds, shape (num_requests,): a constant rate, gap CV 0.

    Raises:
        ValueError: as `check_rate`, or num_requests not an int >= 0.
    """
    check_rate(qps, num_requests)
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


def check_rate(qps: float, num_requests: int) -> None:
    """ValueError unless `qps` is a rate a trace of `num_requests` can have (`traces.time_bounds`).

    qps must be a finite number in (0, MAX_QPS] and the expected span (num_requests - 1) / qps
    at most MAX_SPAN_S: a rate of 1e-310 would make every arrival inf, one of 1e-6 with 2,048
    requests would span 65 years. num_requests must be an int >= 0.
    """
    check_positive(qps, "qps")
    check_count(num_requests)
    if qps > MAX_QPS:
        raise ValueError(f"qps must be <= {short_number(MAX_QPS)} requests/s, got {qps!r}: the mean gap would be under 1 us, "
                         "finer than any engine step the simulator prices")
    span_s = max(num_requests - 1, 0) / qps
    if span_s > MAX_SPAN_S:
        raise ValueError(f"qps {qps!r} is too low for {num_requests} requests: they would span {span_s:.3g} s, "
                         f"more than the {short_number(MAX_SPAN_S)} s (31.7 years) a trace may span")


def check_count(value: int, name: str = "num_requests") -> None:
    """ValueError unless `value` is an int >= 0 (bools are not counts)."""
    if not (isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 0):
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
