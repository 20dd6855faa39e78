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
        prefix_hash_ids: hashes of prompt prefix blocks (Mooncake traces), kept for prefix caching.
    """

    request_id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    priority: int = 0
    prefix_hash_ids: tuple[int, ...] = field(default=(), compare=False)

    @property
    def total_tokens(self) -> int:
        """prompt_tokens + output_tokens."""
        return self.prompt_tokens + self.output_tokens
