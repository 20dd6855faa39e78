"""vLLM V1's speculative-decoding scheduling, case by case from its own tests and code
(vllm-project/vllm: tests/v1/core/test_scheduler.py @ 619e4b31 and
vllm/v1/core/sched/scheduler.py @ 00024d31; the cases are rewritten here, not copied).

- Drafts as proposed: a running request schedules `num_tokens_with_spec - num_computed_tokens`
  = 1 + the drafts its proposer found (n-gram: often fewer than N, sometimes none), so the budget
  left for prefills is what the drafts did not take (`test_schedule_spec_decoding_stats`).
- Lookahead: a draft model / EAGLE / MTP proposer writes its next drafts' KV, so every running
  request's `allocate_slots` reserves `num_lookahead_tokens` = N slots beyond the scheduled tokens
  (`Scheduler.__init__`: `if speculative_config.use_eagle() ... uses_draft_model(): self.num_lookahead_tokens = self.num_spec_tokens`);
  n-gram reserves none.
"""
from __future__ import annotations

import pytest

from experiments.config import SweepConfig
from experiments.deployment import build_acceptance_model, build_scheduler_config, drafts_as_proposed
from simulator.acceptance import EmpiricalAcceptance
from simulator.scheduler import SchedulerConfig, StepOutcome, make_scheduler
from traces import Request


def _v1(**cfg) -> object:
    config = {"num_gpu_blocks": 100, "block_size": 16, "max_model_len": 512, "chunk_size": 64, "max_num_seqs": 8,
              "split_n": 3, **cfg}
    return make_scheduler("vllm_v1", SchedulerConfig(**config))


def _first_decode(scheduler, prompts, output_tokens=50):
    """Admit the prompts, run their prefill step; return the next (decode) plan."""
    for i, prompt in enumerate(prompts):
        scheduler.add_request(Request(i, 0.0, prompt, output_tokens))
    plan = scheduler.schedule(0.0)
    scheduler.complete_step(plan, StepOutcome.without_speculation(plan), 0.01)
    return scheduler.schedule(0.01)


@pytest.mark.parametrize("proposals, scheduled", [
    ((2, 1), [(3, 2), (2, 1)]),  # vLLM's [[1, 2], [3]] case: 2 and 1 drafts, 5 tokens in all (not 2 x (1 + 2))
    ((0, 0), [(1, 0), (1, 0)]),  # its [[]] case: no draft proposed, one token scheduled
    ((3, 3), [(4, 3), (4, 3)]),  # its [[1, 2, 3]] case: every draft proposed
])
def test_schedule_spec_decoding_stats_drafts_as_proposed(proposals, scheduled):
    # vLLM's test drafts [[1, 2], [3]] for two one-token requests with num_speculative_tokens 2 and
    # expects num_scheduled_tokens 3 and 2. Here each request's scheduler draws from a one-value
    # proposal list, so its draw is that value.
    split_n = max(max(proposals), 1)
    plans = [_first_decode(_v1(split_n=split_n, draft_proposals=(p,)), [1]).sequences[0] for p in proposals]
    assert [(e.num_query_tokens, e.num_draft_tokens) for e in plans] == scheduled


def test_drafts_not_proposed_leave_their_budget_to_a_prefill():
    # Budget 8, proposals drawn from (1, 0) with seed 0: random.Random(0).choice gives 0, 0, 1, 0.
    # Step 2: both decodes proposed 0 -> 1 token each. Step 3: 1 and 0 drafts -> 2 + 1 tokens, and
    # a new 100-token prompt takes the 5 left (vLLM's loop 2 takes what loop 1 left); with N = 3
    # always proposed it would have got 8 - 4 - 4 = 0.
    scheduler = _v1(chunk_size=8, draft_proposals=(1, 0))
    plan = _first_decode(scheduler, [1, 1])
    assert [(e.num_query_tokens, e.num_draft_tokens) for e in plan.sequences] == [(1, 0), (1, 0)]
    scheduler.complete_step(plan, StepOutcome((1, 1), (0, 0)), 0.02)
    scheduler.add_request(Request(9, 0.02, 100, 5))
    plan = scheduler.schedule(0.02)
    assert [(e.request_id, e.num_query_tokens, e.num_draft_tokens) for e in plan.sequences] == [
        (0, 2, 1), (1, 1, 0), (9, 5, 0)]


def test_lookahead_slots_for_a_draft_model():
    # A 10-token prompt, N = 3: after the prefill (10 computed), the decode schedules 1 + 3 tokens
    # and reserves 3 lookahead slots: 10 + 4 + 3 = 17 tokens -> 2 blocks of 16 (n-gram: 14 -> 1).
    for lookahead, blocks in ((3, 2), (0, 1)):
        scheduler = _v1(num_lookahead_tokens=lookahead)
        plan = _first_decode(scheduler, [10])
        assert plan.sequences[0].num_query_tokens == 4
        assert scheduler.block_manager.blocks_held(0) == blocks
        # None accepted: 11 computed; the lookahead slots stay held (11 + 3 = 14 -> 1 block), as
        # vLLM keeps a running request's blocks; the rejected drafts' slots go back.
        scheduler.complete_step(plan, StepOutcome((1,), (3,)), 0.02)
        assert scheduler.block_manager.blocks_held(0) == 1


def test_lookahead_preempts_when_the_pool_is_short():
    # 2 blocks of 16, two requests of 14-token prompts and 3 output tokens (each fits one block:
    # 14 + 3 - 1 = 16). The first decode schedules its token and 1 draft (3 - 1 - 1 left to
    # generate), 16 tokens, plus 3 lookahead slots: 19 -> 2 blocks, so the last running request
    # is preempted for it (vLLM: allocate_slots fails -> self.running.pop()).
    scheduler = _v1(num_gpu_blocks=2, num_lookahead_tokens=3)
    plan = _first_decode(scheduler, [14, 14], output_tokens=3)
    assert [(e.request_id, e.num_query_tokens) for e in plan.sequences] == [(0, 2)]
    assert [s.request_id for s in scheduler.waiting.items] == [1] and scheduler.block_manager.blocks_held(0) == 2
    plain = _v1(num_gpu_blocks=2)
    assert [e.request_id for e in _first_decode(plain, [14, 14], output_tokens=3).sequences] == [0, 1]


def _point(tmp_path, **engine):
    (tmp_path / "acc.csv").write_text("proposed,accepted\n3,2\n0,0\n1,1\n")
    trace = {"kind": "synthetic", "qps": 1, "prompt_tokens": 10, "output_tokens": 10, "num_requests": 4}
    return SweepConfig(trace=trace, engine={"scheduler": "vllm_v1", "chunk_size": 512, "split_n": 3,
                                            "acceptance": {"file": str(tmp_path / "acc.csv")}, **engine})


def test_the_deployment_draws_ngram_proposals_from_the_acceptance_file(tmp_path):
    point = _point(tmp_path)
    assert drafts_as_proposed(point.engine)
    config = build_scheduler_config(point)
    assert (config.draft_proposals, config.num_lookahead_tokens) == ((3, 0, 1), 0)
    model = build_acceptance_model(point)
    assert isinstance(model, EmpiricalAcceptance) and model.given_proposals
    # a verify of 1 draft draws among the rows that proposed >= 1: (3, 2) or (1, 1) -> accepted 1
    accepted, proposed = model.sample_lists([1] * 50)
    assert set(accepted) == {1} and set(proposed) == {1}
    drafted = build_scheduler_config(_point(tmp_path, draft={"model": "llama-2-7b"}))
    assert (drafted.draft_proposals, drafted.num_lookahead_tokens) == ((), 3)
