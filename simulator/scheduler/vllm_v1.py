"""vLLM v1's scheduler: running requests first, chunked within one budget, KV per chunk."""
from __future__ import annotations

from simulator.scheduler.base import Entry, Scheduler
from simulator.scheduler.sequence import Sequence


class VllmV1Scheduler(Scheduler):
    """vLLM v1 (`vllm/v1/core/sched/scheduler.py`, REFERENCE.md §2.1).

    Loop 1 walks the running requests in order (oldest first under FCFS) while budget is left:
    each gets min(pending, budget, long_prefill_token_threshold) tokens — a decode 1 plus its
    granted drafts — with KV allocated for just those tokens; when allocation fails the last
    running request (or the max (priority, arrival) one) is preempted and its KV dropped
    (v1 preemption is recompute). Unlike Sarathi, a running partial prefill may take the whole
    remaining budget before later decodes. Loop 2 admits waiting requests in order, only if
    nothing was preempted in this step, each with a first chunk whose KV is allocated now.
    The budget is `chunk_size` (vLLM's --max-num-batched-tokens).
    """

    name = "vllm_v1"
    chunked = True

    def _decodes_all_run(self, num_decodes: int) -> bool:
        return num_decodes <= self.token_budget  # loop 1 stops when the budget is spent

    def _admission_tokens(self, seq: Sequence, num_query_tokens: int) -> int:
        return seq.num_computed_tokens + num_query_tokens

    def _build_plan(self, now_s: float) -> tuple[list[Entry], list[Sequence]]:
        preempted: list[Sequence] = []
        entries: list[Entry] = []
        budget = self.token_budget
        threshold = self.config.long_prefill_token_threshold
        for seq in self._idle_running():
            if budget <= 0:
                break
            if seq.request_id not in self._in_flight:  # preempted earlier in this loop
                continue
            n = min(seq.num_pending_tokens, budget, threshold or budget)
            if not self._ensure_kv(seq, seq.num_computed_tokens + n, preempted):
                continue
            drafts = 0 if seq.is_prefill else self._drafts_for(seq, budget - n)
            entries.append((seq, n + drafts, drafts))
            budget -= n + drafts
        if not preempted:
            self._admit_chunks(entries, budget, max_chunk=threshold)
        return entries, preempted
