"""Sarathi-Serve: chunked prefills and stall-free hybrid batching inside one token budget."""
from __future__ import annotations

from simulator.scheduler.base import Entry, Scheduler
from simulator.scheduler.sequence import Sequence


class SarathiScheduler(Scheduler):
    """Stall-free batching (Agrawal et al., OSDI'24; `sarathi/core/scheduler/sarathi_scheduler.py`).

    Each step, within a budget of `chunk_size` tokens (each decode counts 1):
      A. every running decode gets its token, preempting the newest request when KV is full
         (decodes are never skipped for budget); with split-N, drafts are granted next;
      B. partial prefills get min(remaining prompt, remaining budget);
      C. new requests are admitted from the head of `waiting`, strictly in order, while the whole
         prompt's blocks fit above the watermark, `max_num_seqs` allows, and budget is left.
    The remaining budget is clamped at 0 (Sarathi-Serve's code does not clamp; Vidur's port does).
    """

    name = "sarathi"
    chunked = True
    prefill_windows = True

    def _build_plan(self, now_s: float) -> tuple[list[Entry], list[Sequence]]:
        preempted: list[Sequence] = []
        decodes = self._reserve_decodes(preempted)
        entries, budget = self._grant_drafts(decodes, max(0, self.token_budget - len(decodes)))
        budget = self._partial_prefills(entries, budget)
        self._admit_chunks(entries, budget)
        return entries, preempted
