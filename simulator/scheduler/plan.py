"""What a scheduler hands out (`BatchPlan`) and what comes back from executing it (`StepOutcome`).

These types are the contract between the pure scheduler and its two clocks: the SimPy replica
(which prices a plan with a `CostModel`) and the real engine (which runs it on a device).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple, Sequence

import numpy as np


class ScheduledSequence(NamedTuple):
    """One sequence's share of a step: bring `num_computed_tokens` forward by `num_query_tokens`.

    Attributes:
        request_id: the request this sequence serves.
        num_query_tokens: tokens computed this step (prefill chunk, 1 for a decode, 1 + drafts
            for a speculative verify).
        num_context_tokens: tokens already in the KV cache before this step.
        is_prefill: True for a prompt chunk or a recompute chunk after preemption.
        emits_token: True when this step completes the sequence's pending tokens, so it samples
            at least one new token (final prefill chunk, decode, verify).
        num_draft_tokens: speculative draft tokens verified in this step (0 without split-N).
        block_table: physical KV block ids held by the sequence after this step's allocation.
            The block manager's own list, shared to keep scheduling per step cheap: read it before
            the next `schedule()` call and never modify it.

    A NamedTuple rather than a frozen dataclass: one is built per sequence per step, and tuple
    construction is several times cheaper.
    """

    request_id: int
    num_query_tokens: int
    num_context_tokens: int
    is_prefill: bool
    emits_token: bool
    num_draft_tokens: int = 0
    block_table: Sequence[int] = ()


@dataclass(frozen=True)
class BatchPlan:
    """One iteration of the serving engine (DESIGN.md, "Core types and interfaces").

    Attributes:
        sequences: scheduled sequences in scheduling order.
        preempted_ids: request ids preempted (blocks freed) while building this plan.
        kv_blocks_used: KV blocks allocated in the pool after this plan's allocations.
        swap_in_tokens: KV tokens copied back from host memory for swapped requests admitted in
            this step (swap preemption); the step pays host-link time for them.
        swap_out_tokens: KV tokens copied to host memory for requests preempted in this step.
    """

    sequences: tuple[ScheduledSequence, ...]
    preempted_ids: tuple[int, ...] = ()
    kv_blocks_used: int = 0
    swap_in_tokens: int = 0
    swap_out_tokens: int = 0

    def __len__(self) -> int:
        return len(self.sequences)

    @classmethod
    def with_arrays(cls, sequences: tuple[ScheduledSequence, ...], query_tokens: list[int],
                    context_tokens: list[int], is_prefill: list[bool], **fields) -> "BatchPlan":
        """A plan whose pricing arrays are built from lists the scheduler already holds (one
        `np.array` each), instead of re-reading every sequence: this runs once per step."""
        plan = cls(sequences, **fields)
        plan.__dict__.update(  # what the cached properties below would compute, filled in now
            query_tokens=np.array(query_tokens, dtype=np.int64),
            context_tokens=np.array(context_tokens, dtype=np.int64),
            is_prefill=np.array(is_prefill, dtype=bool),
        )
        return plan

    @property
    def is_empty(self) -> bool:
        return not self.sequences

    @cached_property
    def query_tokens(self) -> np.ndarray:
        """int64 array, shape (num_seqs,): query tokens per sequence, for `CostModel`."""
        return np.fromiter((s.num_query_tokens for s in self.sequences), np.int64, len(self.sequences))

    @cached_property
    def context_tokens(self) -> np.ndarray:
        """int64 array, shape (num_seqs,): KV-cache tokens before the step, for `CostModel`."""
        return np.fromiter((s.num_context_tokens for s in self.sequences), np.int64, len(self.sequences))

    @cached_property
    def is_prefill(self) -> np.ndarray:
        """bool array, shape (num_seqs,)."""
        return np.fromiter((s.is_prefill for s in self.sequences), bool, len(self.sequences))

    @property
    def num_prefill_tokens(self) -> int:
        return sum(s.num_query_tokens for s in self.sequences if s.is_prefill)

    @property
    def num_decode_tokens(self) -> int:
        return sum(s.num_query_tokens for s in self.sequences if not s.is_prefill)

    @property
    def num_draft_tokens(self) -> int:
        return sum(s.num_draft_tokens for s in self.sequences)


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """What executing a plan produced, aligned with `BatchPlan.sequences`.

    Attributes:
        tokens_emitted: per sequence, tokens emitted this step: 0 for a non-final prefill chunk,
            1 for a final chunk or plain decode, 1..num_draft_tokens+1 for a verify.
        drafts_proposed: per sequence, draft tokens actually proposed (split-N; n-gram drafting
            may propose fewer than granted). Empty when no sequence verified drafts.
    """

    tokens_emitted: tuple[int, ...]
    drafts_proposed: tuple[int, ...] = ()

    @classmethod
    def without_speculation(cls, plan: BatchPlan) -> "StepOutcome":
        """Outcome of a plan with no draft tokens: one token per sequence that emits."""
        return cls(tuple(1 if s.emits_token else 0 for s in plan.sequences))


# Finish reasons (DESIGN.md): exactly one per request.
COMPLETED = "completed"
REJECTED_TOO_LONG = "rejected_too_long"
REJECTED_KV_CAPACITY = "rejected_kv_capacity"
REJECTED_BUDGET = "rejected_budget"
TRUNCATED = "truncated"
FINISH_REASONS = (COMPLETED, REJECTED_TOO_LONG, REJECTED_KV_CAPACITY, REJECTED_BUDGET, TRUNCATED)


@dataclass(slots=True)
class FinishedRequest:
    """The per-request record (DESIGN.md, "Records"). Times are in seconds on the run's clock.

    `token_times_s` holds one entry per produced token; a speculative emission of k tokens repeats
    its time k times. Times are NaN where they never happened (a rejected request).
    """

    request_id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    finish_reason: str
    generated_tokens: int = 0
    first_scheduled_s: float = float("nan")
    first_token_s: float = float("nan")
    completion_s: float = float("nan")
    num_preemptions: int = 0
    recomputed_tokens: int = 0
    token_times_s: list[float] = field(default_factory=list)
