"""Orca: iteration-level scheduling of whole prompts with decodes, KV reserved for max_model_len."""
from __future__ import annotations

from simulator.scheduler.base import Entry, Scheduler
from simulator.scheduler.sequence import Sequence


class OrcaScheduler(Scheduler):
    """Orca (Yu et al., OSDI'22) as Sarathi-Serve's baseline (`sarathi/core/scheduler/orca_scheduler.py`).

    Each iteration runs every running decode and admits whole waiting prompts, in order, while
    they fit the remaining `max_num_batched_tokens`; there is no paging, so each admitted
    request reserves `max_model_len` tokens of KV, and the pool bounds the batch. A request is
    rejected (`rejected_kv_capacity`) when even that one reservation exceeds the usable pool.
    """

    name = "orca"
    chunked = False

    def _admission_tokens(self, seq: Sequence, num_query_tokens: int) -> int:
        return self.config.max_model_len

    def _reserved_floor_tokens(self, seq: Sequence) -> int:
        return self.config.max_model_len

    def _peak_kv_tokens(self, final_kv_tokens: int) -> int:
        return self.config.max_model_len

    def _build_plan(self, now_s: float) -> tuple[list[Entry], list[Sequence]]:
        preempted: list[Sequence] = []
        decodes = self._reserve_decodes(preempted)  # never short: max_model_len is reserved
        entries, budget = self._grant_drafts(decodes, max(0, self.token_budget - len(decodes)))
        self._admit_whole_prompts(entries, budget)
        return entries, preempted
