"""The unit of work that arrives at a serving system."""
from __future__ import annotations

from dataclasses import dataclass, field, fields


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


# The slot of each field, in declaration order: `requests_from_columns` sets them directly.
_FIELDS = tuple(f.name for f in fields(Request))
_SLOT_SETTERS = tuple(Request.__dict__[name].__set__ for name in _FIELDS)
assert _FIELDS == ("request_id", "arrival_s", "prompt_tokens", "output_tokens", "priority", "prefix_hash_ids",
                   "prefix_block_tokens"), "a new Request field: add it to requests_from_columns"


def requests_from_columns(request_id, arrival_s, prompt_tokens, output_tokens, priority, prefix_hash_ids,
                          prefix_block_tokens) -> list[Request]:
    """`[Request(*row) for row in zip(request_id, arrival_s, ...)]`: one iterable per field, in
    the order of `Request`'s fields, of equal length (the shortest ends the list, as `zip`).

    The same objects as the constructor's (every field the value given, prefix ids checked as
    `__post_init__` checks them), at about two thirds of its cost: each slot is set by its
    descriptor instead of the frozen dataclass's `object.__setattr__` per field (a trace of
    millions of requests is built this way twice: read, then time-scaled).

    Raises:
        ValueError: as `Request`.
    """
    new = object.__new__
    set_id, set_arrival, set_prompt, set_output, set_priority, set_hashes, set_block = _SLOT_SETTERS
    out = []
    append = out.append
    for rid, arrival, prompt, output, prio, hashes, block in zip(request_id, arrival_s, prompt_tokens, output_tokens,
                                                                   priority, prefix_hash_ids, prefix_block_tokens):
        request = new(Request)
        set_id(request, rid)
        set_arrival(request, arrival)
        set_prompt(request, prompt)
        set_output(request, output)
        set_priority(request, prio)
        set_hashes(request, hashes)
        set_block(request, block)
        if hashes:
            _check_prefix_ids(request)
        append(request)
    return out
