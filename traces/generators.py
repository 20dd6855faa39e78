"""Synthetic traces and transformations of existing ones (rescaling the rate, cutting a prefix).

All randomness comes from a `numpy.random.Generator` built from a seed by the caller, so the
same seed gives identical requests.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from traces.ordering import requests_in_arrival_order
from traces.request import Request
from traces.trace_stats import mean_rate_qps

# A length spec: an int is a fixed length, a (low, high) pair is uniform over low..high inclusive.
LengthSpec = int | tuple[int, int]


def poisson_arrivals(qps: float, num_requests: int, rng: np.random.Generator) -> np.ndarray:
    """Arrival times in seconds of a Poisson process at `qps` requests/s, shape (num_requests,).

    The first arrival is at 0.0 s (the convention of every reader here) and the n - 1 gaps that
    follow are exponential with mean 1 / qps, so the mean rate (n - 1) / span estimates qps.

    Raises:
        ValueError: qps not a finite number > 0, or num_requests < 0.
    """
    _check_positive(qps, "qps")
    _check_count(num_requests)
    gaps_s = rng.exponential(1.0 / qps, size=max(num_requests - 1, 0))
    return np.concatenate([[0.0], np.cumsum(gaps_s)])[:num_requests]


def fixed_lengths(n: int, tokens: int) -> np.ndarray:
    """`tokens` repeated n times, int64, shape (n,). ValueError unless tokens is an int >= 1."""
    _check_count(n)
    _check_tokens(tokens, "tokens")
    return np.full(n, tokens, dtype=np.int64)


def uniform_lengths(n: int, low: int, high: int, rng: np.random.Generator) -> np.ndarray:
    """Token counts uniform over low..high inclusive, int64, shape (n,).

    Raises:
        ValueError: low or high not an int >= 1, or low > high.
    """
    _check_count(n)
    _check_tokens(low, "low")
    _check_tokens(high, "high")
    if low > high:
        raise ValueError(f"low ({low}) must not exceed high ({high})")
    return rng.integers(low, high, size=n, endpoint=True, dtype=np.int64)


def synthetic_trace(
    num_requests: int,
    qps: float,
    prompt: LengthSpec = 512,
    output: LengthSpec = 128,
    seed: int = 0,
) -> list[Request]:
    """Poisson arrivals at `qps` with fixed or uniform lengths, as requests in arrival order.

    Args:
        num_requests: how many requests.
        qps: mean arrival rate in requests per second.
        prompt, output: tokens, an int (fixed) or a (low, high) pair (uniform, inclusive).
        seed: seeds `numpy.random.default_rng`; draws are arrivals, then prompts, then outputs.

    Returns:
        list[Request], the first at 0.0 s, ids 0..n-1.

    Raises:
        ValueError: bad qps, count or length spec.
    """
    rng = np.random.default_rng(seed)
    arrival_s = poisson_arrivals(qps, num_requests, rng)
    prompt_tokens = _lengths(prompt, num_requests, rng, "prompt")
    output_tokens = _lengths(output, num_requests, rng, "output")
    return requests_in_arrival_order(arrival_s, prompt_tokens, output_tokens)


def scale_to_qps(requests: Sequence[Request], qps: float) -> list[Request]:
    """Stretch or compress time so the mean rate (n - 1) / span becomes `qps` requests/s.

    Arrivals are measured from the first and multiplied by (current rate / qps); ids, lengths
    and order are unchanged, and the burstiness (relative gaps) is kept.

    Raises:
        ValueError: qps not a finite number > 0; or the rate of `requests` is undefined (fewer
            than two requests, or all at one instant: zero span), since no factor can change it.
    """
    _check_positive(qps, "qps")
    arrivals_s = np.array([request.arrival_s for request in requests], dtype=float)
    rate = mean_rate_qps(arrivals_s)
    if math.isnan(rate):
        raise ValueError(
            f"cannot scale to {qps} requests/s: the trace's mean rate is undefined "
            f"({len(arrivals_s)} requests spanning 0 s)"
        )
    factor = rate / qps
    start_s = arrivals_s.min()
    return [
        dataclasses.replace(request, arrival_s=float((request.arrival_s - start_s) * factor))
        for request in requests
    ]


def cut(
    requests: Sequence[Request], max_requests: int | None = None, max_duration_s: float | None = None
) -> list[Request]:
    """The leading part of a trace: at most `max_requests`, arriving within `max_duration_s`.

    A request is kept when it is among the first `max_requests` and its arrival is less than
    `max_duration_s` after the first arrival (a half-open window [first, first + max_duration_s)).
    None means no limit. Requests are returned unchanged, so ids stay 0..k-1 for reader output.

    Raises:
        ValueError: requests not sorted by arrival, max_requests < 0 or max_duration_s < 0.
    """
    arrivals_s = np.array([request.arrival_s for request in requests], dtype=float)
    if np.any(np.diff(arrivals_s) < 0):
        raise ValueError("cut needs requests sorted by arrival_s")
    keep = len(requests)
    if max_requests is not None:
        _check_count(max_requests, "max_requests")
        keep = min(keep, max_requests)
    if max_duration_s is not None:
        if not max_duration_s >= 0:
            raise ValueError(f"max_duration_s must be >= 0, got {max_duration_s}")
        if arrivals_s.size:
            keep = min(keep, int(np.searchsorted(arrivals_s, arrivals_s[0] + max_duration_s, side="left")))
    return list(requests[:keep])


def _lengths(spec: LengthSpec, n: int, rng: np.random.Generator, name: str) -> np.ndarray:
    if isinstance(spec, tuple) and len(spec) == 2:
        return uniform_lengths(n, spec[0], spec[1], rng)
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        return fixed_lengths(n, int(spec))
    raise ValueError(f"{name} must be an int or a (low, high) pair of ints, got {spec!r}")


def _check_positive(value: float, name: str) -> None:
    if not (isinstance(value, (int, float, np.number)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def _check_count(value: int, name: str = "num_requests") -> None:
    if not (isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 0):
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")


def _check_tokens(value: int, name: str) -> None:
    if not (isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 1):
        raise ValueError(f"{name} must be an int >= 1 (tokens), got {value!r}")
