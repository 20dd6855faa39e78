"""Simple chunking: chunked prefills without hybrid batches (Sarathi-Serve's ablation)."""
from __future__ import annotations

from simulator.scheduler.base import Entry, Scheduler
from simulator.scheduler.config import SchedulerConfig
from simulator.scheduler.sequence import Sequence


class SimpleChunkingScheduler(Scheduler):
    """Alternates chunked-prefill-only and decode-only steps (`simple_chunking_scheduler.py`).

    On a prefill turn, running partial prefills and then new admissions (whole prompt reserved,
    as sarathi) fill up to `chunk_size` tokens; on a decode turn, every running decode runs.
    A turn with nothing of its kind to do runs the other kind, so no step is wasted.
    """

    name = "simple_chunking"
    chunked = True

    def __init__(self, config: SchedulerConfig):
        super().__init__(config)
        self._prefill_turn = True

    def _after_decode_window(self) -> None:
        self._prefill_turn = True  # as after any decode-only step

    def _build_plan(self, now_s: float) -> tuple[list[Entry], list[Sequence]]:
        preempted: list[Sequence] = []
        entries: list[Entry] = []
        if self._prefill_turn:
            budget = self._partial_prefills(entries, self.token_budget)
            self._admit_chunks(entries, budget)
        if not entries:
            decodes = self._reserve_decodes(preempted)
            entries, _ = self._grant_drafts(decodes, max(0, self.token_budget - len(decodes)))
            if not entries and not self._prefill_turn:  # nothing to decode: prefill instead
                budget = self._partial_prefills(entries, self.token_budget)
                self._admit_chunks(entries, budget)
        self._prefill_turn = not any(seq.is_prefill for seq, _, _ in entries)
        return entries, preempted
