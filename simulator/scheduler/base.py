"""What every scheduler shares: queues, admission-time rejections, step completion, preemption.

A subclass only decides *which* sequences run in a step (`_build_plan`). The scheduler has no
clock: time is passed in, so the SimPy replica and the real engine drive the same object.
"""
from __future__ import annotations

from bisect import insort
from collections import deque

from simulator.scheduler.block_manager import BlockManager, blocks_for
from simulator.scheduler.config import SchedulerConfig
from simulator.scheduler.plan import (
    COMPLETED,
    REJECTED_KV_CAPACITY,
    REJECTED_TOO_LONG,
    BatchPlan,
    FinishedRequest,
    ScheduledSequence,
    StepOutcome,
)
from simulator.scheduler.sequence import Sequence
from traces import Request


def _age_key(seq: Sequence) -> tuple[float, int]:
    # FCFS priority: older arrival first, file order for ties.
    return (seq.request.arrival_s, seq.request_id)


class Scheduler:
    """Base replica scheduler. API (DESIGN.md): add_request, schedule, complete_step, has_work."""

    name = "base"

    def __init__(self, config: SchedulerConfig):
        self.config = config
        self.block_manager = BlockManager(config.num_gpu_blocks, config.block_size, config.watermark_fraction)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # kept sorted oldest first
        self._in_flight: dict[int, Sequence] = {}

    # ----- public API ---------------------------------------------------------------------
    def add_request(self, request: Request) -> FinishedRequest | None:
        """Queue a request, or reject it at once if it can never be served.

        Returns:
            None when queued; a `FinishedRequest` with a `rejected_*` finish reason otherwise.
        """
        reason = self._rejection_reason(request)
        if reason is not None:
            return FinishedRequest(
                request.request_id, request.arrival_s, request.prompt_tokens, request.output_tokens, reason
            )
        self.waiting.append(Sequence(request))
        return None

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self, now_s: float) -> BatchPlan:
        """Build the next step's plan at time `now_s` (allocates its KV blocks)."""
        scheduled, preempted = self._build_plan(now_s)
        for seq, _ in scheduled:
            if seq.first_scheduled_s != seq.first_scheduled_s:  # NaN: first time on the device
                seq.first_scheduled_s = now_s
        return BatchPlan(
            tuple(self._as_scheduled(seq, q) for seq, q in scheduled),
            tuple(s.request_id for s in preempted),
            self.block_manager.num_used,
        )

    def complete_step(self, plan: BatchPlan, outcome: StepOutcome, now_s: float) -> list[FinishedRequest]:
        """Apply a step's outcome at its end time `now_s`; return the requests that finished."""
        finished = []
        for item, emitted in zip(plan.sequences, outcome.tokens_emitted):
            seq = self._in_flight[item.request_id]
            rejected_drafts = item.num_draft_tokens - max(0, emitted - 1) if emitted else 0
            seq.num_computed_tokens += item.num_query_tokens - rejected_drafts
            if rejected_drafts:
                self.block_manager.shrink_to(seq.request_id, seq.num_computed_tokens)
            if emitted:
                self._record_tokens(seq, emitted, now_s)
            if seq.is_finished:
                finished.append(self._finish(seq, now_s))
        return finished

    # ----- for subclasses -----------------------------------------------------------------
    def _build_plan(self, now_s: float) -> tuple[list[tuple[Sequence, int]], list[Sequence]]:
        """Return [(sequence, query tokens)] in scheduling order and the sequences preempted."""
        raise NotImplementedError

    def _rejection_reason(self, request: Request) -> str | None:
        """Finish reason for a request that can never be served alone, else None."""
        if request.prompt_tokens + request.output_tokens > self.config.max_model_len:
            return REJECTED_TOO_LONG
        final_kv_tokens = request.prompt_tokens + request.output_tokens - 1
        if blocks_for(final_kv_tokens, self.config.block_size) > self.block_manager.usable_blocks:
            return REJECTED_KV_CAPACITY
        return None

    def _admit(self, seq: Sequence, reserve_tokens: int) -> None:
        """Move the head of `waiting` to `running`, reserving KV for `reserve_tokens`."""
        assert self.waiting[0] is seq
        self.waiting.popleft()
        self.block_manager.grow_to(seq.request_id, reserve_tokens)
        insort(self.running, seq, key=_age_key)
        self._in_flight[seq.request_id] = seq

    def _preempt(self, seq: Sequence) -> None:
        """Recompute preemption: free the blocks, put the request at the front of `waiting`."""
        self.running.remove(seq)
        del self._in_flight[seq.request_id]
        self.block_manager.free(seq.request_id)
        seq.reset_for_recompute()
        self.waiting.appendleft(seq)

    def _reserve_decode_slots(self, preempted: list[Sequence]) -> list[Sequence]:
        """Give every running decode a KV slot for its next token, oldest first.

        When the pool is full, preempt the newest running request (the tail); if the sequence
        itself is the newest, it is preempted (Sarathi-Serve pass A, REFERENCE.md §1.1). An
        older request is never preempted for a younger one.

        Returns:
            The decodes that got their slot, oldest first.
        """
        decodes = []
        for seq in [s for s in self.running if not s.is_prefill]:
            if seq.request_id not in self._in_flight:  # preempted as a victim earlier in this loop
                continue
            needed_tokens = seq.num_computed_tokens + 1
            while not self.block_manager.try_grow_to(seq.request_id, needed_tokens):
                victim = self.running[-1]
                self._preempt(victim)
                preempted.append(victim)
                if victim is seq:
                    break
            else:
                decodes.append(seq)
        return decodes

    # ----- internals ----------------------------------------------------------------------
    def _as_scheduled(self, seq: Sequence, num_query_tokens: int) -> ScheduledSequence:
        return ScheduledSequence(
            request_id=seq.request_id,
            num_query_tokens=num_query_tokens,
            num_context_tokens=seq.num_computed_tokens,
            is_prefill=seq.is_prefill,
            emits_token=num_query_tokens == seq.num_pending_tokens,
            block_table=self.block_manager.block_table(seq.request_id),
        )

    @staticmethod
    def _record_tokens(seq: Sequence, emitted: int, now_s: float) -> None:
        emitted = min(emitted, seq.request.output_tokens - seq.num_generated_tokens)
        if seq.num_generated_tokens == 0:
            seq.first_token_s = now_s
        seq.num_generated_tokens += emitted
        seq.token_times_s.extend([now_s] * emitted)

    def _finish(self, seq: Sequence, now_s: float) -> FinishedRequest:
        self.running.remove(seq)
        del self._in_flight[seq.request_id]
        self.block_manager.free(seq.request_id)
        r = seq.request
        return FinishedRequest(
            request_id=r.request_id,
            arrival_s=r.arrival_s,
            prompt_tokens=r.prompt_tokens,
            output_tokens=r.output_tokens,
            finish_reason=COMPLETED,
            generated_tokens=seq.num_generated_tokens,
            first_scheduled_s=seq.first_scheduled_s,
            first_token_s=seq.first_token_s,
            completion_s=now_s,
            num_preemptions=seq.num_preemptions,
            recomputed_tokens=seq.recomputed_tokens,
            token_times_s=seq.token_times_s,
        )
