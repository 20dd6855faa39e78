"""Sarathi-Serve: chunked prefills and stall-free hybrid batching inside one token budget."""
from __future__ import annotations

from simulator.scheduler.base import Scheduler
from simulator.scheduler.config import SchedulerConfig
from simulator.scheduler.sequence import Sequence


class SarathiScheduler(Scheduler):
    """Stall-free batching (Agrawal et al., OSDI'24; `sarathi/core/scheduler/sarathi_scheduler.py`).

    Each step, within a budget of `chunk_size` tokens (each decode counts 1):
      A. every running decode gets its token, preempting the newest request when KV is full
         (decodes are never skipped for budget);
      B. partial prefills get min(remaining prompt, remaining budget);
      C. new requests are admitted from the head of `waiting`, strictly FCFS, while the whole
         prompt's blocks fit above the watermark, `max_num_seqs` allows, and budget is left.
    The remaining budget is clamped at 0 (Sarathi-Serve's code does not clamp; Vidur's port does),
    so `max_num_seqs >= chunk_size` cannot produce negative chunks.
    """

    name = "sarathi"

    def __init__(self, config: SchedulerConfig):
        if config.chunk_size is None or config.chunk_size < 1:
            raise ValueError(f"sarathi needs chunk_size >= 1, got {config.chunk_size}")
        super().__init__(config)

    def _build_plan(self, now_s: float) -> tuple[list[tuple[Sequence, int]], list[Sequence]]:
        preempted: list[Sequence] = []
        scheduled = [(seq, 1) for seq in self._reserve_decode_slots(preempted)]
        budget = max(0, self.config.chunk_size - len(scheduled))

        for seq in [s for s in self.running if s.is_prefill]:  # pass B: partial prefills
            if budget == 0:
                break
            n = min(seq.num_pending_tokens, budget)
            scheduled.append((seq, n))
            budget -= n

        while self.waiting and budget > 0:  # pass C: new prefills, head of line only
            seq = self.waiting[0]
            if len(self.running) >= self.config.max_num_seqs or not self.block_manager.can_admit(seq.num_tokens):
                break
            # Sarathi reserves the whole prompt (and, after recompute, the generated tokens) now.
            self._admit(seq, reserve_tokens=seq.num_tokens)
            n = min(seq.num_pending_tokens, budget)
            scheduled.append((seq, n))
            budget -= n
        return scheduled, preempted
