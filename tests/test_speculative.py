"""Split-N speculative decoding: acceptance models, draft grants within the budget, records."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simulator.acceptance import (EmpiricalAcceptance, PositionalAcceptance, expected_tokens_per_step,
                                  speculative_outcome_fn)
from simulator.metrics import emissions
from simulator.scheduler import SchedulerConfig, StepOutcome, make_scheduler
from simulator.simulate import simulate
from tests.conftest import ConstantCostModel
from traces import Request


def test_expected_tokens_formula_matches_reference_table():
    # REFERENCE.md §4: α = 0.8, N = 4 -> 3.36; α = 0.6, N = 1 -> 1.60; α = 0.9, N = 8 -> 6.13.
    assert expected_tokens_per_step(0.8, 4) == pytest.approx(3.3616)
    assert expected_tokens_per_step(0.6, 1) == pytest.approx(1.6)
    assert expected_tokens_per_step(0.9, 8) == pytest.approx(6.13, abs=0.005)


def test_scalar_acceptance_mean_tokens_per_verify_is_3_36():
    accepted, proposed = PositionalAcceptance(0.8, seed=1).sample(np.full(200_000, 4))
    assert (proposed == 4).all() and accepted.min() == 0 and accepted.max() == 4
    # Standard error of the mean ≈ 1.2 / sqrt(2e5) ≈ 0.003; allow 5 of them.
    assert (accepted + 1).mean() == pytest.approx(3.3616, abs=0.015)


def test_per_position_acceptance():
    # α_1 = 1, α_2 = 0: exactly one draft is ever accepted when 2+ are granted.
    accepted, _ = PositionalAcceptance([1.0, 0.0], seed=0).sample(np.array([0, 1, 2, 4]))
    assert accepted.tolist() == [0, 1, 1, 1]


def test_empirical_acceptance_caps_to_granted(tmp_path):
    path = tmp_path / "acc.csv"
    pd.DataFrame({"proposed": [4, 4, 0], "accepted": [4, 2, 0]}).to_csv(path, index=False)
    model = EmpiricalAcceptance.from_file(path, seed=3)
    accepted, proposed = model.sample(np.full(3000, 2))
    assert set(proposed.tolist()) <= {0, 2} and (accepted <= proposed).all()
    assert set(accepted.tolist()) == {0, 2}
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"proposed": [1], "accepted": [2]}).to_csv(bad, index=False)
    with pytest.raises(ValueError, match="bad.csv.*accepted <= proposed"):
        EmpiricalAcceptance.from_file(bad)


@pytest.mark.parametrize("text, said", [
    ("proposed,accepted\n3,1\n3,1.9\n2,2\n", "line 3: accepted 1.9 is not a whole number"),
    ("proposed,accepted\n3,1\n2.5,1\n", "line 3: proposed 2.5 is not a whole number"),
    ("proposed,accepted\n3,\n", "line 2: accepted nan is not a whole number"),
    ("proposed,accepted\nthree,1\n", "line 2: proposed three is not a whole number"),
    ("proposed,accepted\n1e20,1\n", "line 2: proposed 1e+20 is not a whole number of draft tokens up to 2,147,483,647"),
])
def test_an_acceptance_file_of_counts_that_are_not_whole_names_the_line(tmp_path, text, said):
    # accepted = 1.9 was read as 1: results byte-identical to a file of 1s (issue 30 item 5).
    path = tmp_path / "acc.csv"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        EmpiricalAcceptance.from_file(path)
    assert str(info.value).startswith(f"{path}: {said}")


def run(requests, split_n, alpha=0.8, seed=0, **cfg):
    cfg.setdefault("chunk_size", 256)
    cfg.setdefault("max_num_seqs", 16)
    config = SchedulerConfig(num_gpu_blocks=2000, max_model_len=8192, split_n=split_n, **cfg)
    outcome = speculative_outcome_fn(PositionalAcceptance(alpha, seed=seed))
    return simulate(requests, make_scheduler("sarathi", config), ConstantCostModel(0.01), outcome_fn=outcome)


def test_verify_steps_emit_1_to_n_plus_1_tokens_and_exact_output():
    result = run([Request(0, 0.0, 100, 500)], split_n=4)
    times = result.requests.loc[0, "token_times_s"]
    assert len(times) == 500 and result.requests.loc[0, "generated_tokens"] == 500
    _, counts = emissions(times)
    assert counts.max() <= 5 and counts[0] == 1  # the final prefill chunk emits one token
    # Mean tokens per verify near 3.36 (the last verify may be capped by the remaining output).
    assert counts[1:-1].mean() == pytest.approx(3.36, abs=0.25)
    assert result.steps["num_draft_tokens"].max() == 4


def test_split_n_zero_is_identical_to_the_plain_path():
    requests = [Request(i, 0.05 * i, 50 + 7 * i, 20 + i) for i in range(10)]
    config = SchedulerConfig(num_gpu_blocks=2000, max_model_len=8192, chunk_size=64, max_num_seqs=16)
    plain = simulate(requests, make_scheduler("sarathi", config), ConstantCostModel(0.01))
    spec = run(requests, split_n=0, chunk_size=64)
    pd.testing.assert_frame_equal(plain.requests, spec.requests)
    pd.testing.assert_frame_equal(plain.steps, spec.steps)


def test_drafts_are_granted_within_the_remaining_budget_in_order():
    # chunk 8, three decodes: each gets its token (3), then drafts in order from the 5 left:
    # N = 4 -> 4 for the first, 1 for the second, 0 for the third.
    scheduler = make_scheduler("sarathi", SchedulerConfig(num_gpu_blocks=100, max_model_len=512, chunk_size=8,
                                                          max_num_seqs=4, split_n=4))
    for i in range(3):
        scheduler.add_request(Request(i, 0.0, 1, 50))
    plan = scheduler.schedule(0.0)  # three 1-token prompts
    scheduler.complete_step(plan, StepOutcome.without_speculation(plan), 0.01)
    plan = scheduler.schedule(0.01)
    assert [(s.num_query_tokens, s.num_draft_tokens) for s in plan.sequences] == [(5, 4), (2, 1), (1, 0)]
    assert sum(s.num_query_tokens for s in plan.sequences) == 8
    # Rejected draft slots are released: accept nothing -> 1 token each, KV back to 2 tokens/seq.
    scheduler.complete_step(plan, StepOutcome((1, 1, 1), (4, 1, 0)), 0.02)
    assert [scheduler.block_manager.blocks_held(i) for i in range(3)] == [1, 1, 1]
    assert [s.num_computed_tokens for s in scheduler.running] == [2, 2, 2]


def test_draft_model_costs_time_ngram_does_not():
    from profiler import RooflineCostModel, get_device_spec, get_model_spec
    from simulator.pricing import StepPricer
    device = get_device_spec("h100-sxm")
    target = RooflineCostModel(get_model_spec("llama-2-13b"), device)
    draft = RooflineCostModel(get_model_spec("llama-2-7b"), device)
    scheduler = make_scheduler("sarathi", SchedulerConfig(num_gpu_blocks=1000, max_model_len=4096, chunk_size=64,
                                                          max_num_seqs=4, split_n=3))
    scheduler.add_request(Request(0, 0.0, 10, 50))
    plan = scheduler.schedule(0.0)
    scheduler.complete_step(plan, StepOutcome.without_speculation(plan), 0.01)
    plan = scheduler.schedule(0.01)
    assert plan.sequences[0].num_draft_tokens == 3
    ngram_s = StepPricer(target).step_s(plan)
    with_draft_s = StepPricer(target, draft_cost_model=draft).step_s(plan)
    three_draft_steps = sum(draft.predict_step_s(np.array([1]), np.array([10 + k]), np.array([False]))
                            for k in range(3))
    assert with_draft_s == pytest.approx(ngram_s + three_draft_steps)


def test_list_and_array_sampling_draw_the_same_acceptances():
    # The simulator samples on lists, the engine's forced acceptance on arrays: with the same seed
    # they must agree exactly, step after step, or engine and simulator runs would diverge.
    rng = np.random.default_rng(4)
    for alphas in (0.7, [0.9, 0.5, 0.2], [1.0, 0.0]):
        on_arrays, on_lists = PositionalAcceptance(alphas, seed=3), PositionalAcceptance(alphas, seed=3)
        for _ in range(50):
            drafts = rng.integers(0, 6, int(rng.integers(1, 30)))
            accepted, proposed = on_arrays.sample(drafts)
            assert on_lists.sample_lists(drafts.tolist()) == (accepted.tolist(), proposed.tolist())
            assert (accepted <= drafts).all()
