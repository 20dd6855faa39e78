"""Synthetic traces: an open-loop arrival process joined with prompt and output lengths.

All randomness comes from `numpy.random.default_rng(seed)`, so the same seed gives identical
requests. Draws happen in a fixed order: arrivals, then lengths (`sample_lengths`).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from traces.arrivals import arrival_times_s
from traces.length_distributions import length_distribution, sample_lengths
from traces.ordering import requests_in_arrival_order
from traces.request import Request


def synthetic_trace(
    num_requests: int,
    qps: float,
    prompt: Any = 512,
    output: Any = 128,
    seed: int = 0,
    arrival: str = "poisson",
    burstiness: float | None = None,
) -> list[Request]:
    """`num_requests` requests with `arrival` arrivals at `qps` and lengths from two distributions.

    Args:
        num_requests: how many requests.
        qps: mean arrival rate in requests per second.
        prompt, output: length specs for `traces.length_distributions.length_distribution`: an
            int (fixed), a (low, high) pair (uniform, inclusive), a mapping {dist: ...} or a
            `LengthDistribution`. Two empirical specs of one source are drawn jointly.
        seed: seeds `numpy.random.default_rng`; draws are arrivals, then prompts, then outputs.
        arrival, burstiness: "poisson", "gamma" (with burstiness γ) or "constant"
            (`traces.arrivals.arrival_times_s`).

    Returns:
        list[Request], the first at 0.0 s, ids 0..n-1.

    Raises:
        ValueError: bad qps, count, arrival process or length spec.
    """
    prompt_dist = length_distribution(prompt, "prompt")
    output_dist = length_distribution(output, "output")
    rng = np.random.default_rng(seed)
    arrival_s = arrival_times_s(arrival, qps, num_requests, rng, burstiness)
    prompt_tokens, output_tokens = sample_lengths(prompt_dist, output_dist, num_requests, rng)
    return requests_in_arrival_order(arrival_s, prompt_tokens, output_tokens)


def lengths_with_arrivals(
    prompt_tokens: np.ndarray,
    output_tokens: np.ndarray,
    qps: float,
    seed: int = 0,
    arrival: str = "poisson",
    burstiness: float | None = None,
) -> list[Request]:
    """Requests with the given lengths, in the given order, arriving by an arrival process.

    For lengths-only files (`read_lengths`): row i becomes request i, arriving at the i-th time
    of `arrival_times_s(arrival, qps, n, default_rng(seed), burstiness)`.

    Args:
        prompt_tokens, output_tokens: validated lengths (>= 1), shape (n,) each.
        qps, seed, arrival, burstiness: as `synthetic_trace`.

    Raises:
        ValueError: the two arrays differ in length; bad qps, process or burstiness.
    """
    if len(prompt_tokens) != len(output_tokens):
        raise ValueError(f"{len(prompt_tokens)} prompt lengths but {len(output_tokens)} output lengths")
    arrival_s = arrival_times_s(arrival, qps, len(prompt_tokens), np.random.default_rng(seed), burstiness)
    return requests_in_arrival_order(arrival_s, prompt_tokens, output_tokens)
