"""How long a plan takes on a replica: the cost model, plus draft-model steps, KV swaps and
pipeline-parallel stage split."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profiler.cost_model import CostModel
from simulator.scheduler import BatchPlan


@dataclass
class StepPricer:
    """Prices one step of a replica.

    Attributes:
        cost_model: the target model's `CostModel` (already sharded by tensor parallelism).
        draft_cost_model: split-N with a draft model: a smaller model's `CostModel`. Each step it
            processes the step's prefill chunks (its own KV cache) and then, for the verifying
            sequences, one decode step per draft position. None for `ngram` (≈0 GPU time).
        swap_s_per_token: seconds to move one token's KV between GPU and host (swap preemption):
            KV bytes per token / host-link bandwidth.
        pipeline_stages: pipeline-parallel degree P. The layers are split evenly, so one stage
            takes 1/P of the step's compute (the slowest stage is taken as the average; the LM
            head's extra work on the last stage is not modelled).
        p2p_s_per_token: seconds to send one token's activations to the next stage
            (hidden × dtype bytes / link bandwidth), paid once per stage boundary.
    """

    cost_model: CostModel
    draft_cost_model: CostModel | None = None
    swap_s_per_token: float = 0.0
    pipeline_stages: int = 1
    p2p_s_per_token: float = 0.0

    def __post_init__(self) -> None:
        # A cost model that prices a scheduler's plan from its counts (the measured tables').
        self._predict_scheduled = getattr(self.cost_model, "predict_scheduled_step_s", None)

    def step_s(self, plan: BatchPlan) -> float:
        """Whole-step time (one pass through every stage), seconds."""
        return self.stage_s(plan) * self.pipeline_stages

    def stage_s(self, plan: BatchPlan) -> float:
        """Time one micro-batch spends in one pipeline stage, seconds (= step time when P = 1)."""
        columns = plan.columns  # lists: the roofline sums a step's few dozen entries in plain Python
        compute_s = self.compute_s(columns.query_tokens, columns.context_tokens, columns.is_prefill, plan.counts,
                                   plan.num_plain_decodes)
        if self.draft_cost_model is not None and plan.num_draft_tokens:
            compute_s += self._draft_s(plan)
        swap_s = (plan.swap_in_tokens + plan.swap_out_tokens) * self.swap_s_per_token
        if self.pipeline_stages == 1:
            return compute_s + swap_s
        send_s = sum(columns.query_tokens) * self.p2p_s_per_token
        return (compute_s + swap_s) / self.pipeline_stages + send_s

    def compute_s(self, query_tokens: list[int], context_tokens: list[int], is_prefill: list[bool],
                  counts: tuple[int, int, int, int] | None, num_plain_decodes: int) -> float:
        """The cost model's time (s) of a step's aligned columns, without drafts, swaps or stages:
        from the scheduler's `counts` (prefill tokens, prefill sequences, draft tokens, query
        tokens; `num_plain_decodes` leading plain decodes) when the cost model prices a plan from
        them, else `predict_step_s`. The one place a plan's columns become a price (`stage_s`,
        and a replica's prefill windows, which price steps they never build a plan for)."""
        if counts is not None and self._predict_scheduled is not None:  # the scheduler's plan, counted
            return self._predict_scheduled(query_tokens, context_tokens, is_prefill, counts[3], counts[1],
                                           num_plain_decodes)
        return self.cost_model.predict_step_s(query_tokens, context_tokens, is_prefill)

    def _draft_s(self, plan: BatchPlan) -> float:
        """Draft model: the step's prefill chunks, then one step per draft position for the
        sequences drafting at least that many tokens (context grows by one each position)."""
        q, c, prefill = plan.query_tokens, plan.context_tokens, plan.is_prefill
        drafts = np.array(plan.columns.draft_tokens, dtype=np.int64)
        total_s = self.draft_cost_model.predict_step_s(q[prefill], c[prefill], prefill[prefill]) if prefill.any() else 0.0
        for k in range(int(drafts.max())):
            drafting = drafts > k
            n = int(drafting.sum())
            total_s += self.draft_cost_model.predict_step_s(
                np.ones(n, np.int64), c[drafting] + k, np.zeros(n, bool))
        return total_s
