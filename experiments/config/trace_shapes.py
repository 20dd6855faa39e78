"""The load-shape blocks of `trace:` that several kinds share: `stages:` items (`StageConfig`),
`prompts:` (`PromptPoolConfig`, a finite prompt pool) and `max_concurrency:` (`_Pooled`); the kinds
themselves are in experiments/config/trace.py."""
from __future__ import annotations

from typing import Any, Literal, Union

import numpy as np
from pydantic import Field, model_validator

from experiments.config.base import _Requests, _Strict
from traces import Request
from traces.concurrency import ScheduledConcurrency
from traces.generators import pooled_trace
from traces.prompt_pool import MAX_POOL_PROMPTS, PromptPool
from traces.stages import LoadStage
from traces.time_bounds import MAX_QPS, MAX_SPAN_S, MIN_BURSTINESS

# A length: an int (fixed), [low, high] (uniform, inclusive) or {dist: NAME, ...} with min/max
# (traces.length_distributions: fixed, uniform, normal, lognormal, zipf, empirical).
LengthSpec = Union[int, tuple[int, int], dict[str, Any]]


class StageConfig(_Strict):
    """One stage of `kind: stages` (traces.stages.LoadStage): `rate` requests/s for `duration_s`
    seconds, or a linear ramp to `rate_end`; `arrival` / `burstiness` override the trace's."""

    rate: float = Field(gt=0, le=MAX_QPS)
    duration_s: float = Field(gt=0, le=MAX_SPAN_S)
    rate_end: float | None = Field(default=None, gt=0, le=MAX_QPS)
    arrival: Literal["poisson", "gamma", "constant"] | None = None
    burstiness: float | None = Field(default=None, ge=MIN_BURSTINESS)

    def stage(self) -> LoadStage:
        """The `traces.stages.LoadStage` (raises ValueError as it does)."""
        return LoadStage(self.rate, self.duration_s, self.rate_end, self.arrival, self.burstiness)


class PromptPoolConfig(_Strict):
    """`trace.prompts`: `groups` system prompts of `system_tokens`, `per_group` questions of
    `question_tokens` each, sent again and again (`order`: cycle | shuffled_cycle | random), with
    token identity for the prefix cache (traces.prompt_pool); each prompt's output length is
    drawn once from the trace's `output_tokens`."""

    groups: int = Field(ge=1, le=MAX_POOL_PROMPTS)
    per_group: int = Field(ge=1, le=MAX_POOL_PROMPTS)
    system_tokens: LengthSpec = 0
    question_tokens: LengthSpec = 64
    order: Literal["cycle", "shuffled_cycle", "random"] = "cycle"

    def pool(self, output_tokens: LengthSpec, seed: int) -> PromptPool:
        """The pool (raises ValueError on a bad size or length spec)."""
        return PromptPool(self.groups, self.per_group, self.system_tokens, self.question_tokens, output_tokens,
                          self.order, seed)


class _Pooled(_Strict):
    """`prompts:` (a finite prompt pool instead of per-request prompt lengths) and
    `max_concurrency:` (at most N requests in flight over the send schedule, traces.concurrency)."""

    prompts: PromptPoolConfig | None = None
    max_concurrency: _Requests | None = None

    @model_validator(mode="after")
    def _pool_replaces_prompt_lengths(self) -> "_Pooled":
        if self.prompts is None:
            return self
        clash = sorted(k for k in ("prompt_tokens", "shared_prefix_tokens") if k in self.model_fields_set)
        if clash:
            raise ValueError(f"trace.prompts gives every prompt (system_tokens + question_tokens); leave out "
                             f"{', '.join('trace.' + k for k in clash)}")
        self.prompts.pool(self.output_tokens, self.seed)  # ValueError now, when the config loads
        if self.prompts.order != "random" and self.prompts.groups * self.prompts.per_group > self.request_count():
            raise ValueError(f"trace.prompts holds {self.prompts.groups * self.prompts.per_group} prompts but the trace "
                             f"sends about {self.request_count():g} requests: no prompt would be sent twice, so the pool "
                             "would not repeat as a benchmark client's does; lower groups or per_group (a prompt "
                             "each request, with a shared system prompt, is trace.shared_prefix_tokens)")
        return self

    def request_count(self) -> float:
        return self.num_requests

    def pooled(self, arrival_s: np.ndarray) -> list[Request]:
        """Requests at `arrival_s` (seconds, shape (n,)) with the pool's prompts (traces.pooled_trace)."""
        return pooled_trace(arrival_s, self.prompts.pool(self.output_tokens, self.seed))

    def capped(self, requests: list[Request]):
        """`requests`, or the `ScheduledConcurrency` that sends them with at most max_concurrency in flight."""
        return requests if self.max_concurrency is None else ScheduledConcurrency(requests, self.max_concurrency)
