"""What a scheduler hands out (`BatchPlan`) and what comes back from executing it (`StepOutcome`).

These types are the contract between the pure scheduler and its two clocks: the SimPy replica
(which prices a plan with a `CostModel`) and the real engine (which runs it on a device).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import compress
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


class PlanColumns(NamedTuple):
    """A plan's sequences as aligned lists (one entry per scheduled sequence, in order): the
    `ScheduledSequence` fields column-wise. The simulator's hot loop reads these; building one
    tuple per sequence per step only happens when something asks for `BatchPlan.sequences`.
    A scheduler's `block_tables` is a `simulator.scheduler.block_manager.BlockTables` (a
    read-only sequence of lists, looked up when first read)."""

    request_ids: list[int]
    query_tokens: list[int]
    context_tokens: list[int]
    is_prefill: list[bool]
    emits_token: list[bool]
    draft_tokens: list[int]
    block_tables: list[Sequence[int]]


class BatchPlan:
    """One iteration of the serving engine (DESIGN.md, "Core types and interfaces").

    Attributes:
        sequences: scheduled sequences (`ScheduledSequence`) in scheduling order.
        columns: the same as aligned lists (`PlanColumns`).
        preempted_ids: request ids preempted (blocks freed) while building this plan.
        kv_blocks_used: KV blocks allocated in the pool after this plan's allocations.
        swap_in_tokens: KV tokens copied back from host memory for swapped requests admitted in
            this step (swap preemption); the step pays host-link time for them.
        swap_out_tokens: KV tokens copied to host memory for requests preempted in this step.

    Build one from `ScheduledSequence`s (`BatchPlan(sequences, ...)`, as the plan log reader
    does) or from columns (`BatchPlan.from_columns`, as the scheduler does once per step); either
    view is derived from the other on first use. Treat a plan as immutable.
    """

    __slots__ = ("_sequences", "_columns", "_arrays", "counts", "preempted_ids", "kv_blocks_used",
                 "swap_in_tokens", "swap_out_tokens", "scheduled", "num_plain_decodes")

    def __init__(self, sequences: tuple[ScheduledSequence, ...] = (), preempted_ids: tuple[int, ...] = (),
                 kv_blocks_used: int = 0, swap_in_tokens: int = 0, swap_out_tokens: int = 0):
        self._sequences = tuple(sequences)
        self._columns: PlanColumns | None = None
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        # (prefill tokens, prefill seqs, draft tokens, all query tokens) when the scheduler counted them
        self.counts: tuple[int, int, int, int] | None = None
        self.preempted_ids = tuple(preempted_ids)
        self.kv_blocks_used = kv_blocks_used
        self.swap_in_tokens = swap_in_tokens
        self.swap_out_tokens = swap_out_tokens
        self.scheduled: list | None = None  # the scheduler's own sequence objects, aligned (its fast path)
        self.num_plain_decodes = 0  # leading entries that are plain decodes (q 1, no drafts), when known

    @classmethod
    def from_columns(cls, columns: PlanColumns, scheduled: list | None = None, preempted_ids: tuple[int, ...] = (),
                     kv_blocks_used: int = 0, swap_in_tokens: int = 0, swap_out_tokens: int = 0,
                     counts: tuple[int, int, int, int] | None = None, num_plain_decodes: int = 0) -> "BatchPlan":
        """A plan from aligned lists the scheduler already holds (no per-sequence tuples); the
        other fields as the constructor's (`preempted_ids` already a tuple). `counts`: the
        plan's (num_prefill_tokens, num_prefill_seqs, num_draft_tokens, num_tokens) when the
        caller counted them while building the columns (else they are counted on first use).
        `num_plain_decodes`: how many leading entries are running decodes of one query token
        and no drafts (`scheduled` required; `Scheduler.complete_step` takes them in one pass)."""
        plan = cls.__new__(cls)  # the fields set directly: one plan per simulated step
        plan._sequences = None
        plan._columns = columns
        plan._arrays = None
        plan.counts = counts
        plan.preempted_ids = preempted_ids
        plan.kv_blocks_used = kv_blocks_used
        plan.swap_in_tokens = swap_in_tokens
        plan.swap_out_tokens = swap_out_tokens
        plan.scheduled = scheduled
        plan.num_plain_decodes = num_plain_decodes
        return plan

    @property
    def sequences(self) -> tuple[ScheduledSequence, ...]:
        if self._sequences is None:
            self._sequences = tuple(map(ScheduledSequence, *self._columns))
        return self._sequences

    @property
    def columns(self) -> PlanColumns:
        if self._columns is None:
            seqs = self._sequences
            self._columns = PlanColumns(*(list(column) for column in zip(*seqs))) if seqs else PlanColumns(
                [], [], [], [], [], [], [])
        return self._columns

    def __len__(self) -> int:
        return len(self.columns.request_ids)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BatchPlan):
            return NotImplemented
        return (self.sequences, self.preempted_ids, self.kv_blocks_used, self.swap_in_tokens,
                self.swap_out_tokens) == (other.sequences, other.preempted_ids, other.kv_blocks_used,
                                          other.swap_in_tokens, other.swap_out_tokens)

    __hash__ = None  # mutable caches inside; equality is by value

    def __repr__(self) -> str:
        return (f"BatchPlan(sequences={self.sequences!r}, preempted_ids={self.preempted_ids!r}, "
                f"kv_blocks_used={self.kv_blocks_used}, swap_in_tokens={self.swap_in_tokens}, "
                f"swap_out_tokens={self.swap_out_tokens})")

    @property
    def is_empty(self) -> bool:
        return len(self) == 0

    def _step_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._arrays is None:
            c = self.columns
            self._arrays = (np.array(c.query_tokens, dtype=np.int64), np.array(c.context_tokens, dtype=np.int64),
                            np.array(c.is_prefill, dtype=bool))
        return self._arrays

    @property
    def query_tokens(self) -> np.ndarray:
        """int64 array, shape (num_seqs,): query tokens per sequence, for `CostModel`."""
        return self._step_arrays()[0]

    @property
    def context_tokens(self) -> np.ndarray:
        """int64 array, shape (num_seqs,): KV-cache tokens before the step, for `CostModel`."""
        return self._step_arrays()[1]

    @property
    def is_prefill(self) -> np.ndarray:
        """bool array, shape (num_seqs,)."""
        return self._step_arrays()[2]

    @property
    def num_prefill_tokens(self) -> int:
        if self.counts is not None:  # counted by the scheduler: the step log reads this every step
            return self.counts[0]
        c = self.columns
        return sum(compress(c.query_tokens, c.is_prefill))

    @property
    def num_tokens(self) -> int:
        """Query tokens of every sequence (the step's token count)."""
        if self.counts is not None:
            return self.counts[3]
        return sum(self.columns.query_tokens)

    @property
    def num_decode_tokens(self) -> int:
        return self.num_tokens - self.num_prefill_tokens

    @property
    def num_prefill_seqs(self) -> int:
        if self.counts is not None:
            return self.counts[1]
        return sum(self.columns.is_prefill)

    @property
    def num_draft_tokens(self) -> int:
        if self.counts is not None:
            return self.counts[2]
        return sum(self.columns.draft_tokens)


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
        emits = plan.columns.emits_token
        try:  # bytes() of Python bools is a C-level pass giving ints 0/1 (the plan the scheduler built)
            return cls(tuple(bytes(emits)))
        except TypeError:  # numpy bools (a plan built from read-back sequences)
            return cls(tuple(map(int, emits)))


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

    `cached_tokens`: prompt tokens served from the prefix cache at the first admission (vLLM's
    `num_cached_tokens`); `resumed_cached_tokens`: tokens hit at re-admissions after recompute
    preemptions; `recomputed_tokens`: tokens computed again after preemptions (dropped and not
    hit). With a KV offload tier: `cpu_hit_tokens` loaded from host memory (every admission),
    `kv_load_wait_s` spent waiting for those loads before being scheduled. `token_times_s` holds one entry per produced token; a speculative emission of k tokens repeats
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
    cached_tokens: int = 0
    resumed_cached_tokens: int = 0
    cpu_hit_tokens: int = 0
    kv_load_wait_s: float = 0.0
    token_times_s: list[float] = field(default_factory=list)
