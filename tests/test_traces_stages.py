"""Staged load profiles (traces/stages.py) and finite prompt pools (traces/prompt_pool.py)."""
from __future__ import annotations

import numpy as np
import pytest

from traces.generators import staged_trace
from traces.prompt_pool import POOL_ID_BASE, PromptPool
from traces.shared_prefix import BLOCKS_PER_STREAM
from traces.stages import LoadStage, staged_arrivals, vllm_ramp_times


def test_two_constant_stages_give_exact_arrival_times():
    # 2 req/s for 3 s, then 4 req/s for 1 s: i / 2 from 0, then 3 + i / 4.
    arrival_s, stage = staged_arrivals([LoadStage(2, 3), LoadStage(4, 1)], np.random.default_rng(0), "constant")
    assert arrival_s.tolist() == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.25, 3.5, 3.75]
    assert stage.tolist() == [0] * 6 + [1] * 4


def test_the_issue_profile_8_then_20_per_second():
    arrival_s, stage = staged_arrivals([LoadStage(8, 600), LoadStage(20, 600)], np.random.default_rng(0), "constant")
    assert len(arrival_s) == 8 * 600 + 20 * 600
    assert arrival_s[4799] == pytest.approx(4799 / 8) and arrival_s[4800] == 600.0
    assert arrival_s[-1] == pytest.approx(600 + 11999 / 20)


def test_a_stage_can_override_the_arrival_process():
    arrival_s, stage = staged_arrivals([LoadStage(10, 100, arrival="poisson"), LoadStage(1, 3)],
                                       np.random.default_rng(1), "constant")
    first = arrival_s[stage == 0]
    assert 850 < first.size < 1150 and first[0] > 0 and first[-1] < 100  # a Poisson count, inside the stage
    assert arrival_s[stage == 1].tolist() == [100.0, 101.0, 102.0]


def test_a_linear_ramp_places_constant_arrivals_at_the_inverse_intensity():
    # r(t) = 1 + t over 2 s: Λ(t) = t + t²/2 = 4 at the end, so u = 0, 1, 2, 3 -> t = -1 + sqrt(1 + 2u).
    arrival_s, _ = staged_arrivals([LoadStage(1, 2, rate_end=3)], np.random.default_rng(0), "constant")
    np.testing.assert_allclose(arrival_s, [0.0, np.sqrt(3) - 1, np.sqrt(5) - 1, np.sqrt(7) - 1])


def test_a_poisson_ramp_has_the_ramps_mean_count():
    counts = [staged_arrivals([LoadStage(10, 100, rate_end=30)], np.random.default_rng(s), "poisson")[0].size
              for s in range(5)]
    assert 1900 < np.mean(counts) < 2100  # (10 + 30) / 2 × 100


def test_gamma_stages_are_seeded_and_keep_their_rate():
    a, _ = staged_arrivals([LoadStage(50, 200)], np.random.default_rng(3), "gamma", burstiness=0.5)
    b, _ = staged_arrivals([LoadStage(50, 200)], np.random.default_rng(3), "gamma", burstiness=0.5)
    assert np.array_equal(a, b) and 9000 < a.size < 11000
    gaps = np.diff(a)
    assert gaps.std() / gaps.mean() == pytest.approx(2 ** 0.5, rel=0.1)  # CV 1 / sqrt(γ)


@pytest.mark.parametrize("stage, message", [
    (dict(rate=0, duration_s=10), "rate must be a finite number > 0"),
    (dict(rate=1, duration_s=0), "duration_s must be a finite number > 0"),
    (dict(rate=1, duration_s=-5), "duration_s must be a finite number > 0"),
    (dict(rate=1, duration_s=1, arrival="uniform"), "unknown arrival 'uniform'"),
    (dict(rate=1e6, duration_s=1e6), "more than the 50,000,000 a stage may hold"),
])
def test_bad_stages_are_clear_errors(stage, message):
    with pytest.raises(ValueError, match=message):
        LoadStage(**stage)


def test_burstiness_on_a_non_gamma_stage_is_an_error():
    with pytest.raises(ValueError, match="stage 1: burstiness applies to the gamma"):
        staged_arrivals([LoadStage(1, 1), LoadStage(1, 1, burstiness=2.0)], np.random.default_rng(0), "constant")
    with pytest.raises(ValueError, match="at least one stage"):
        staged_arrivals([], np.random.default_rng(0))


def test_vllm_ramp_up_changes_the_rate_per_request_index():
    # 5 requests from 1 to 5 req/s linearly: rates 1, 2, 3, 4, 5; delays 1, 1/2, ...; cumulative.
    np.testing.assert_allclose(vllm_ramp_times(5, 1, 5), np.cumsum([1, 1 / 2, 1 / 3, 1 / 4, 1 / 5]))
    np.testing.assert_allclose(vllm_ramp_times(3, 1, 4, "exponential"), np.cumsum([1, 1 / 2, 1 / 4]))


def test_pool_ids_share_the_system_prompt_then_name_each_prompt():
    pool = PromptPool(groups=2, per_group=3, system_tokens=40, question_tokens=10, output_tokens=7)
    prompt_tokens, output_tokens, ids = pool.prompt(4)  # group 1, prompt 4
    assert (prompt_tokens, output_tokens) == (50, 7)
    group, own = POOL_ID_BASE + 1 * BLOCKS_PER_STREAM, POOL_ID_BASE + (2 + 4) * BLOCKS_PER_STREAM
    # 40 system tokens: blocks 0, 1 wholly system (32 tokens); blocks 2, 3 hold question tokens.
    assert ids == (group, group + 1, own + 2, own + 3)
    assert pool.prompt(3)[2][:2] == ids[:2] and pool.prompt(3)[2][2:] != ids[2:]
    assert pool.assignment(8).tolist() == [0, 1, 2, 3, 4, 5, 0, 1]


def test_pool_orders():
    pool = PromptPool(groups=2, per_group=2, order="shuffled_cycle", seed=4)
    first = pool.assignment(8).tolist()
    assert sorted(first[:4]) == [0, 1, 2, 3] and first[4:] == first[:4]
    restarted = pool.assignment(6, restarts=np.array([3])).tolist()
    assert restarted[3:] == first[:3]
    drawn = PromptPool(groups=2, per_group=2, order="random").assignment(1000)
    assert set(drawn.tolist()) == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="unknown order 'sorted'"):
        PromptPool(groups=1, per_group=1, order="sorted")
    with pytest.raises(ValueError, match="groups must be >= 1"):
        PromptPool(groups=0, per_group=1)


@pytest.mark.parametrize("block_size, system_tokens, first_hit, repeat_hit", [
    (16, 40, 32, 64),    # 40 // 16 = 2 system blocks; (70 - 1) // 16 = 4 blocks
    (32, 70, 64, 96),    # 70 // 32 = 2 system blocks; (100 - 1) // 32 = 3 blocks
])
def test_cycled_pool_hits_the_prefix_cache_as_computed_by_hand(block_size, system_tokens, first_hit, repeat_hit):
    """G = 2 groups × U = 3 prompts, S system + Q = 30 question tokens, KV blocks of block_size,
    one request per second (each done before the next): the first G × U requests hit their
    group's full system blocks except the first of each group (0); the next G × U repeat whole
    prompts and hit every full block but the one holding the last token."""
    from simulator.scheduler import SchedulerConfig, make_scheduler
    from simulator.simulate import simulate
    from tests.conftest import ConstantCostModel

    pool = PromptPool(groups=2, per_group=3, system_tokens=system_tokens, question_tokens=30, output_tokens=4)
    requests, stage = staged_trace([LoadStage(1.0, 12)], seed=0, arrival="constant", pool=pool)
    scheduler = make_scheduler("vllm_v1", SchedulerConfig(num_gpu_blocks=400, max_model_len=1024, chunk_size=512,
                                                          block_size=block_size, enable_prefix_caching=True))
    frame = simulate(requests, scheduler, ConstantCostModel(0.01)).requests.sort_values("request_id")
    assert frame["cached_tokens"].tolist() == [0, first_hit, first_hit, 0, first_hit, first_hit] + [repeat_hit] * 6
