"""Per-request state inside the scheduler, vLLM-v1 style: one counter chased towards another."""
from __future__ import annotations

from dataclasses import dataclass, field

from traces import Request


@dataclass(slots=True, eq=False)
class Sequence:
    """A request being served.

    The scheduler brings `num_computed_tokens` (tokens whose KV is in the cache) up to
    `num_tokens` (prompt + generated). A prefill chunk, a decode and a verify are all "compute q
    more tokens over a context of `num_computed_tokens`"; the step that catches up samples the
    next token(s). The last generated token is never written to the cache, so a request's final
    KV footprint is prompt + output - 1 tokens.

    `prefill_target_tokens` is `num_tokens` at (re)admission: after a recompute preemption the
    prompt and every generated token are prefilled again. After a swap preemption the KV is kept
    in host memory (`swapped_tokens`) and copied back on re-admission, with no recompute.

    Prefix caching: `num_cached_tokens` is the hit at the first admission (vLLM's
    `Request.num_cached_tokens`; -1 before it), `resumed_cached_tokens` the hits of later
    re-admissions after recompute preemptions. A preemption drops `dropped_tokens` of KV; the
    re-admission recomputes those its hit does not cover (`recomputed_tokens`).

    KV offload (`simulator.scheduler.kv_offload`): `cpu_hit_tokens` were loaded from the host
    tier (at every admission, first or after a preemption), after `load_wait_s` seconds waiting
    for the loads; `load_started_s` is when the load under way began (NaN when none).
    """

    request: Request
    request_id: int = field(init=False)  # copied from the request: read several times per step
    max_output_tokens: int = 0  # what it will generate: output_tokens, or less when truncated
    num_computed_tokens: int = 0
    num_generated_tokens: int = 0
    prefill_target_tokens: int = 0
    swapped_tokens: int = 0
    first_scheduled_s: float = float("nan")
    first_token_s: float = float("nan")
    num_preemptions: int = 0
    recomputed_tokens: int = 0
    dropped_tokens: int = 0
    num_cached_tokens: int = -1
    resumed_cached_tokens: int = 0
    cpu_hit_tokens: int = 0
    load_wait_s: float = 0.0
    load_started_s: float = float("nan")
    token_times_s: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.request_id = self.request.request_id
        self.prefill_target_tokens = self.request.prompt_tokens
        self.max_output_tokens = self.max_output_tokens or self.request.output_tokens

    @property
    def num_tokens(self) -> int:
        """Prompt plus tokens generated so far."""
        return self.request.prompt_tokens + self.num_generated_tokens

    @property
    def num_pending_tokens(self) -> int:
        """Tokens still to compute before the next sample (>= 1 while running)."""
        return self.request.prompt_tokens + self.num_generated_tokens - self.num_computed_tokens

    @property
    def is_prefill(self) -> bool:
        return self.num_computed_tokens < self.prefill_target_tokens

    @property
    def final_kv_tokens(self) -> int:
        """KV entries held when the last token is sampled: prompt + output - 1."""
        return self.request.prompt_tokens + self.max_output_tokens - 1

    @property
    def remaining_output_tokens(self) -> int:
        return self.max_output_tokens - self.num_generated_tokens

    def reset_for_recompute(self) -> None:
        """Recompute preemption: drop the cache; prefill prompt + generated tokens again (what
        is recomputed is counted at re-admission, `record_admission`)."""
        self.dropped_tokens = self.num_computed_tokens
        self.num_computed_tokens = 0
        self.prefill_target_tokens = self.num_tokens
        self.num_preemptions += 1

    def record_admission(self, hit_tokens: int, loaded_tokens: int = 0) -> None:
        """Account an admission whose prefix-cache hit covered `hit_tokens` (0 without caching)
        and whose KV load from an offload tier `loaded_tokens` more."""
        if self.num_cached_tokens < 0:
            self.num_cached_tokens = hit_tokens
        else:
            self.resumed_cached_tokens += hit_tokens
        self.cpu_hit_tokens += loaded_tokens
        if self.dropped_tokens:
            self.recomputed_tokens += max(0, self.dropped_tokens - hit_tokens - loaded_tokens)
            self.dropped_tokens = 0

    def swap_out(self) -> None:
        """Swap preemption: the cache moves to host memory; nothing is recomputed."""
        self.swapped_tokens = self.num_computed_tokens
        self.num_preemptions += 1
