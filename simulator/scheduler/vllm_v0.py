"""vLLM v0's default policy: prefill-prioritising, whole prompts, decodes stall."""
from __future__ import annotations

from simulator.scheduler.base import Entry, Scheduler
from simulator.scheduler.sequence import Sequence


class VllmV0Scheduler(Scheduler):
    """The `vllm` baseline of Sarathi-Serve (`sarathi/core/scheduler/vllm_scheduler.py`; vLLM v0).

    If any waiting prompt fits, the step is prefill-only: whole prompts are admitted in order
    while their total stays within `max_num_batched_tokens` (default max_model_len),
    `max_num_seqs` allows and their blocks fit above the watermark; running decodes stall.
    Otherwise the step decodes every running request, preempting the newest when the KV pool is
    full. A prompt longer than the budget can never run: `rejected_budget`. A request admitted
    with its prompt already computed (a disaggregated decode pool's hand-over) is not a prefill:
    it decodes with the running requests in the same step.
    """

    name = "vllm"
    chunked = False

    def _build_plan(self, now_s: float) -> tuple[list[Entry], list[Sequence]]:
        entries: list[Entry] = []
        self._admit_whole_prompts(entries, self.token_budget)
        # A request handed over from a prefill pool arrives with its prompt computed (one
        # pending decode token): it joins the running decodes instead of taking a step alone.
        if any(seq.is_prefill for seq, _, _ in entries):
            return entries, []
        preempted: list[Sequence] = []
        decodes = self._reserve_decodes(preempted)
        entries, _ = self._grant_drafts(decodes, max(0, self.token_budget - len(decodes)))
        return entries, preempted
