"""The unit of work that arrives at a serving system."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Request:
    """One inference request as it arrives (DESIGN.md, "Core types").

    Attributes:
        request_id: unique within a trace; readers number rows from 0 in file order.
        arrival_s: arrival time in seconds from the start of the trace (>= 0).
        prompt_tokens: number of prompt (input) tokens, >= 1.
        output_tokens: number of tokens the request will generate (the trace's true length), >= 1.
        priority: lower is served first under the `priority` policy (vLLM's convention); 0 by default.
        prefix_hash_ids: the token identity of the request's stream (prompt, then output) for
            prefix caching: id k names the stream's tokens up to the end of its
            prefix_block_tokens-token block k, so equal ids mean an equal prefix up to there
            (Mooncake's `hash_ids` are such chained ids of 512-token blocks). An id on the
            block holding the last prompt token names the prompt's part of it only; ids after
            it name output tokens (a session turn's answer, which the next turn's prompt
            repeats). Tokens no id names are the request's own; empty: all of them
            (`simulator.scheduler.prefix_cache.named_tokens`).
        prefix_block_tokens: tokens per `prefix_hash_ids` block (512: Mooncake's); the KV block
            size of the engine need not match (`simulator.scheduler.prefix_cache.block_keys`).

    Raises:
        ValueError: prefix ids that are not integers, or a prefix_block_tokens < 1. (Ids past
            the stream's end name nothing.)
    """

    request_id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    priority: int = 0
    prefix_hash_ids: tuple[int, ...] = field(default=(), compare=False)
    prefix_block_tokens: int = field(default=512, compare=False)

    def __post_init__(self) -> None:
        if self.prefix_hash_ids:
            _check_prefix_ids(self)

    @property
    def total_tokens(self) -> int:
        """prompt_tokens + output_tokens."""
        return self.prompt_tokens + self.output_tokens


def _check_prefix_ids(request: Request) -> None:
    size = request.prefix_block_tokens
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"request {request.request_id}: prefix_block_tokens must be an int >= 1, got {size!r}")
    ids = request.prefix_hash_ids
    if not isinstance(ids, tuple) or any(isinstance(h, bool) or not hasattr(type(h), "__index__") for h in ids):
        raise ValueError(f"request {request.request_id}: prefix_hash_ids must be a tuple of integers, got {ids!r}")
