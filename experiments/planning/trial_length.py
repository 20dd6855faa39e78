"""How long a capacity trial is: requests per instance, scaled by the instances, lengthened up to a cap.

A fixed request count shared by one GPU and eight gives the eight-replica layout an eighth of the
time per replica to build a queue, so short trials favour layouts with many replicas (issue 29:
`search-xpyd` rated 4× TP1 at 81.5 QPS where a long sweep sustained 47.6 req/s). A trial here is
`requests_per_instance` × the point's instances: the engine instances that serve requests
side by side (a colocated point's replicas × data-parallel ranks, a `cluster:` point's over both
pools, each of which must be driven to its own steady state), so every instance sees the same
number of requests whatever the layout. A trial that cannot decide (`steady_state.Verdict.
UNDECIDED`) is run again once, from the same seed, at the cap: `max_scale` × the base length, at
most `MAX_TRIAL_REQUESTS`.

Why straight to the cap, not doubling (2,048 → 4,096 → 8,192, as until 2026-12-07): on the capacity
grid's 6-point subset (BENCHMARKS.md, "Sustained capacity") all 21 trials undecided at 2,048
requests were undecided at 4,096 too, and issue 29's case gave the same (23.42 QPS: 38 and 37
effectively independent delays at 2,048 and 4,096). Near capacity the queue's excursions outlast a
short window, and the batch-means estimate of its effective samples saturates near the number of
batches (`steady_state.ESS_BATCHES`), so a trial short of samples at the base length stays short at
twice it; the middle run cost 4,096 of every 14,336 requests such a trial ran (29 %) and decided none.

The longer trial draws the larger trace from the same seed; the trace generators draw every
arrival before any length (`traces.generators.synthetic_trace`), so it does not extend the shorter
trial request for request, it is another sample of the same workload. A file trace is cut to more
of its rows, and cannot be lengthened past its end (the search then says the file was too short).
"""
from __future__ import annotations

from dataclasses import dataclass

from experiments.config import SweepConfig, pool_points

MAX_TRIAL_REQUESTS = 10_000_000  # the largest trace a config may ask for (experiments.config._MAX_REQUESTS)
DEFAULT_MAX_SCALE = 4  # 2,048 → 8,192 requests per instance when undecided


def instances(point: SweepConfig) -> int:
    """Engine instances serving requests side by side: replicas × data_parallel_size, summed over a
    `cluster:` point's pools (each pool's own replicas and DP, `pool_points`)."""
    if point.cluster is None:
        return point.engine.replicas * point.engine.data_parallel_size
    return sum(p.engine.replicas * p.engine.data_parallel_size for p in pool_points(point).values())


@dataclass(frozen=True)
class TrialLength:
    """A search's trial lengths (requests): `base` for every first trial, `cap` for its rerun when undecided."""

    base: int
    cap: int
    requests_per_instance: int
    instances: int
    max_scale: int

    def next(self, num_requests: int) -> int | None:
        """The length after an undecided trial of `num_requests`: the cap, or None at it."""
        return None if num_requests >= self.cap else self.cap

    def text(self) -> str:
        """E.g. '2,048 requests per instance × 4 instances = 8,192 a trial, rerun at 32,768 when undecided
        (cap: 4× the first trial)'."""
        scale = (f"{self.requests_per_instance:,} requests per instance × {self.instances} instances = "
                 f"{self.base:,} a trial" if self.instances > 1 else f"{self.base:,} requests a trial")
        lengthened = (f", rerun at {self.cap:,} when undecided (cap: {self.max_scale}× the first trial)"
                      if self.cap > self.base else ", never lengthened (cap: 1×)")
        return scale + lengthened


def trial_length(point: SweepConfig, requests_per_instance: int, max_scale: int = DEFAULT_MAX_SCALE) -> TrialLength:
    """`TrialLength` of `point` for `requests_per_instance` (`search.num_requests`) and a cap of
    `max_scale` × the first trial (both ≤ `MAX_TRIAL_REQUESTS`).

    Raises:
        ValueError: requests_per_instance < 1 or max_scale < 1."""
    if requests_per_instance < 1 or max_scale < 1:
        raise ValueError(f"trial length needs requests per instance ≥ 1 and a cap ≥ 1×, got "
                         f"{requests_per_instance} and {max_scale}")
    count = instances(point)
    base = min(requests_per_instance * count, MAX_TRIAL_REQUESTS)
    return TrialLength(base, min(base * max_scale, MAX_TRIAL_REQUESTS), requests_per_instance, count, max_scale)
