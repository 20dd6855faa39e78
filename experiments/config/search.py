"""`search:`: the capacity search of each point (bisection on QPS), and the bound its repeated
seeds must stay within (`repetition_seed_problem`)."""
from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator

from experiments.config.base import _MAX_REQUESTS, _MAX_SEED, _Strict
from traces.arrivals import check_rate
from traces.time_bounds import MAX_QPS, short_number

# `SweepConfig` (experiments.config.sweep) is named in annotations only, as text: it imports this module.


class SearchConfig(_Strict):
    """Capacity search per point (experiments/planning/capacity.py): bisection on QPS within `qps`.

    Each trial simulates `num_requests` per instance (replicas × DP, over every pool of a
    `cluster:`) at one QPS, and passes only in steady state (experiments/planning/steady_state.py),
    lengthened up to `max_trial_scale` × when undecided; warm-up and drain (`trim_fraction` of the
    arrival span at each end) are left out of the latency statistics; the search repeats for
    `seeds` seeds for a confidence interval: repetition k runs the trace's `seed` + k (its
    sampling) and the engine's `seed` + k (speculative acceptance, random routers), as the xPyD
    search (experiments/planning/repetitions.py). A file trace is replayed the same every seed,
    so only the engine's draws vary: the report warns of it.
    """

    qps: tuple[float, float] = (0.5, 64.0)
    precision: float = Field(default=0.025, gt=0, lt=1)
    num_requests: int = Field(default=2048, ge=10, le=_MAX_REQUESTS)
    seeds: int = Field(default=3, ge=1, le=20)
    trim_fraction: float = Field(default=0.1, ge=0, lt=0.5)
    max_trials: int = Field(default=20, ge=2, le=60)
    # An undecided trial (SLOs met, backlog not steady) is rerun once with this many times the
    # first trial's requests (experiments/planning/trial_length.py); 1: never lengthened.
    max_trial_scale: int = Field(default=4, ge=1, le=64)
    loads: list[Annotated[float, Field(gt=0, le=MAX_QPS)]] = []  # QPS grid for the load-dependent policy table

    @field_validator("qps")
    @classmethod
    def _bracket(cls, qps: tuple[float, float]) -> tuple[float, float]:
        if not 0 < qps[0] < qps[1] < float("inf"):
            raise ValueError(f"search.qps must be [low, high] with 0 < low < high, got {list(qps)}")
        if qps[1] > MAX_QPS:
            raise ValueError(f"search.qps high ({qps[1]:g}) exceeds {short_number(MAX_QPS)} requests/s, "
                             "the highest rate a trace may be drawn at (traces.time_bounds.MAX_QPS)")
        return qps

    @model_validator(mode="after")
    def _low_rate_spans_a_trace(self) -> "SearchConfig":
        # The lowest trial draws num_requests at qps[0]; traces.check_rate bounds its span.
        try:
            check_rate(self.qps[0], self.num_requests)
        except ValueError as exc:
            raise ValueError(f"search.qps low: {exc}") from None
        return self


def repetition_seed_problem(point: "SweepConfig", seeds: int) -> str | None:
    """Why `seeds` repetitions of `point` cannot all run (repetition k runs its trace's and
    engine's seeds + k, experiments/planning/repetitions.py: one + seeds − 1 above `_MAX_SEED`,
    numpy's legacy RandomState bound), naming the key; None when they can."""
    for key, seed in (("trace.seed", getattr(point.trace, "seed", 0)), ("engine.seed", point.engine.seed)):
        if seed + seeds - 1 > _MAX_SEED:
            return (f"{key} {seed} + {seeds - 1} (repetition k uses seed + k) exceeds {_MAX_SEED}, the largest "
                    f"seed: lower {key} or the seeds")
    return None
