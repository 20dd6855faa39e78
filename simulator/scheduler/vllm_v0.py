"""vLLM v0's default policy: prefill-prioritising, whole prompts, decodes stall."""
from __future__ import annotations

from simulator.scheduler.base import Scheduler
from simulator.scheduler.config import SchedulerConfig
from simulator.scheduler.plan import REJECTED_BUDGET
from simulator.scheduler.sequence import Sequence
from traces import Request


class VllmV0Scheduler(Scheduler):
    """The `vllm` baseline of Sarathi-Serve (`sarathi/core/scheduler/vllm_scheduler.py`; vLLM v0).

    If any waiting prompt fits, the step is prefill-only: whole prompts are admitted FCFS while
    their total stays within `max_num_batched_tokens` (default max_model_len), `max_num_seqs`
    allows and their blocks fit above the watermark; running decodes stall. Otherwise the step
    decodes every running request, preempting the newest when the KV pool is full.

    A prompt longer than the budget can never run: it is rejected with `rejected_budget`
    (vLLM v0 marks it FINISHED_IGNORED). A recompute after preemption (prompt + generated tokens)
    may exceed the budget; it runs alone in its step rather than being dropped, which vLLM v0
    would do — a deliberate deviation so no request is silently lost.
    """

    name = "vllm"

    def __init__(self, config: SchedulerConfig):
        super().__init__(config)
        self.token_budget = config.max_num_batched_tokens or config.max_model_len

    def _rejection_reason(self, request: Request) -> str | None:
        reason = super()._rejection_reason(request)
        if reason is None and request.prompt_tokens > self.token_budget:
            return REJECTED_BUDGET
        return reason

    def _build_plan(self, now_s: float) -> tuple[list[tuple[Sequence, int]], list[Sequence]]:
        scheduled: list[tuple[Sequence, int]] = []
        budget = self.token_budget
        while self.waiting:
            seq = self.waiting[0]
            n = seq.num_tokens
            over_budget = n > budget and not (not scheduled and seq.num_preemptions > 0)
            if over_budget or len(self.running) >= self.config.max_num_seqs:
                break
            if not self.block_manager.can_admit(n):
                break
            self._admit(seq, reserve_tokens=n)
            scheduled.append((seq, n))
            budget -= n
        if scheduled:
            return scheduled, []
        preempted: list[Sequence] = []
        return [(seq, 1) for seq in self._reserve_decode_slots(preempted)], preempted
