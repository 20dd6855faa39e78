"""DeepSpeed-FastGen's Dynamic SplitFuse: decodes plus prompt chunks filling a fixed forward size."""
from __future__ import annotations

from simulator.scheduler.base import Entry, Scheduler
from simulator.scheduler.sequence import Sequence


class FastGenScheduler(Scheduler):
    """Dynamic SplitFuse (DeepSpeed-FastGen blog, REFERENCE.md §3).

    Every forward pass targets exactly `chunk_size` tokens: all running decodes (1 each, plus
    granted drafts), then prompt tokens split from running and waiting prompts — long prompts
    are split across passes, short ones fused — until the pass is full. KV is allocated as
    tokens are scheduled (per chunk, like DeepSpeed-MII's ragged batching) rather than for the
    whole prompt at admission, which is what separates it from `sarathi` here.
    """

    name = "fastgen"
    chunked = True

    def _admission_tokens(self, seq: Sequence, num_query_tokens: int) -> int:
        return seq.num_computed_tokens + num_query_tokens

    def _build_plan(self, now_s: float) -> tuple[list[Entry], list[Sequence]]:
        preempted: list[Sequence] = []
        decodes = self._reserve_decodes(preempted)
        entries, budget = self._grant_drafts(decodes, max(0, self.token_budget - len(decodes)))
        budget = self._partial_prefills(entries, budget, per_chunk_kv=True)
        self._admit_chunks(entries, budget)
        return entries, preempted
