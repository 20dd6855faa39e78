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
from traces.request import Request, requests_from_columns
from traces.shared_prefix import GENERATED_BLOCK_TOKENS


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


def staged_trace(
    stages: list,
    prompt: Any = 512,
    output: Any = 128,
    seed: int = 0,
    arrival: str = "poisson",
    burstiness: float | None = None,
    pool: Any = None,
    restart_pool_per_stage: bool = False,
) -> tuple[list[Request], np.ndarray]:
    """Requests of a staged load profile (`traces.stages`) and the stage of each.

    Args:
        stages: `traces.stages.LoadStage`s, back to back from 0 s.
        prompt, output: length specs, as `synthetic_trace` (unused with `pool`).
        seed: seeds `numpy.random.default_rng`: arrivals stage by stage, then lengths.
        arrival, burstiness: the profile's process, which a stage may override.
        pool: a `traces.prompt_pool.PromptPool` giving each request its prompt, output and token
            identity; None: lengths drawn per request.
        restart_pool_per_stage: the pool's cycle starts again at each stage (inference-perf).

    Returns:
        (requests in arrival order, ids 0..n-1, the first at 0.0 s only when stage 0 has an
        arrival at its start: times are kept as the profile places them, not re-based; stage of
        each request, int64 shape (n,)).

    Raises:
        ValueError: bad stages, process, burstiness or length spec.
    """
    from traces.stages import staged_arrivals

    rng = np.random.default_rng(seed)
    arrival_s, stage = staged_arrivals(stages, rng, arrival, burstiness)
    if pool is not None:
        restarts = np.flatnonzero(np.diff(stage)) + 1 if restart_pool_per_stage else None
        prompt_tokens, output_tokens, ids = pool.columns(pool.assignment(len(arrival_s), restarts))
        requests = requests_from_columns(range(len(arrival_s)), arrival_s.tolist(), prompt_tokens.tolist(),
                                         output_tokens.tolist(), [0] * len(arrival_s), ids,
                                         [GENERATED_BLOCK_TOKENS] * len(arrival_s))
        return requests, stage
    prompt_tokens, output_tokens = sample_lengths(length_distribution(prompt, "prompt"),
                                                  length_distribution(output, "output"), len(arrival_s), rng)
    requests = requests_from_columns(range(len(arrival_s)), arrival_s.tolist(), prompt_tokens.tolist(),
                                     output_tokens.tolist(), [0] * len(arrival_s), [()] * len(arrival_s),
                                     [512] * len(arrival_s))
    return requests, stage


def pooled_trace(arrival_s: np.ndarray, pool: Any) -> list[Request]:
    """Requests arriving at `arrival_s` (non-decreasing seconds, shape (n,)) whose prompts, outputs
    and token identity come from `pool` (`traces.prompt_pool.PromptPool`) in its order."""
    prompt_tokens, output_tokens, ids = pool.columns(pool.assignment(len(arrival_s)))
    n = len(arrival_s)
    return requests_from_columns(range(n), np.asarray(arrival_s, dtype=float).tolist(), prompt_tokens.tolist(),
                                 output_tokens.tolist(), [0] * n, ids, [GENERATED_BLOCK_TOKENS] * n)
