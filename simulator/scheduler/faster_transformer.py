"""FasterTransformer: request-level batching (a batch runs until all of it finishes)."""
from __future__ import annotations

from simulator.scheduler.base import Entry, Scheduler
from simulator.scheduler.sequence import Sequence


class FasterTransformerScheduler(Scheduler):
    """Request-level batching, as Sarathi-Serve's `faster_transformer` baseline
    (`sarathi/core/scheduler/faster_transformer_scheduler.py`).

    New requests are admitted only when nothing is running: whole prompts, in order, within
    `max_num_batched_tokens` and `max_num_seqs`, prefilled together; then the batch decodes
    until every request in it has finished. KV as vLLM: the prompt at admission, a slot per token.
    """

    name = "faster_transformer"
    chunked = False

    def _build_plan(self, now_s: float) -> tuple[list[Entry], list[Sequence]]:
        entries: list[Entry] = []
        if not self.running:
            self._admit_whole_prompts(entries, self.token_budget)
            return entries, []
        preempted: list[Sequence] = []
        decodes = self._reserve_decodes(preempted)
        entries, _ = self._grant_drafts(decodes, max(0, self.token_budget - len(decodes)))
        return entries, preempted
