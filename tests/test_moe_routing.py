"""Distinct top-k routing under a popularity skew (profiler/moe_routing.py) and what it does to the
busiest EP rank's roofline: values worked by hand, a sampling check and properties (hypothesis)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiler import get_device_spec, get_model_spec
from profiler.moe import MoESpec
from profiler.moe_cost import MoEBlockCost, MoELayout
from profiler.moe_routing import (busiest_rank_inclusion, expert_popularity, rank_expert_counts, rank_load,
                                  topk_inclusion_probabilities)

QWEN = get_model_spec("qwen3-30b-a3b")


def test_uniform_top2_of_4_picks_each_expert_half_the_time():
    q = busiest_rank_inclusion(4, 2, 1, 0.0)
    assert q == pytest.approx([0.5] * 4)
    assert rank_load(q, 1) == pytest.approx((2.0, 2.0))  # one token: exactly k distinct experts
    assert rank_load(q, 2) == pytest.approx((4.0, 3.0))  # 4 · (1 − (1/2)²)
    # two ranks of 2: each holds half of the pairs, 2 · (1 − (1/2)^3) experts active at 3 tokens
    assert rank_load(busiest_rank_inclusion(4, 2, 2, 0.0), 3) == pytest.approx((3.0, 1.75))
    # the uniform closed form of MoESpec agrees
    assert rank_load(busiest_rank_inclusion(128, 8, 4, 0.0), 7)[1] == pytest.approx(
        MoESpec(128, 8, 768).expected_active_experts(7, 32))


def test_inclusion_probabilities_capped_at_one_pair_per_token_by_hand():
    # popularity (0.7, 0.1, 0.1, 0.1), top-2: 2p = 1.4 for the first is capped at 1; the other 1
    # pair goes to the rest in proportion, 1/3 each.
    assert topk_inclusion_probabilities(np.array([0.7, 0.1, 0.1, 0.1]), 2) == pytest.approx([1, 1 / 3, 1 / 3, 1 / 3])
    # skew 1 on 4 experts: p = (12, 6, 4, 3) / 25, 2p = (24, 12, 8, 6) / 25, all below 1: no cap.
    assert expert_popularity(4, 1.0) == pytest.approx(np.array([12, 6, 4, 3]) / 25)
    assert busiest_rank_inclusion(4, 2, 1, 1.0) == pytest.approx(np.array([24, 12, 8, 6]) / 25)
    # skew 2: p = (144, 36, 16, 9) / 205; 2 · 144/205 > 1 caps the first; the other pair over
    # 36 + 16 + 9 = 61: (1, 36/61, 16/61, 9/61).
    assert busiest_rank_inclusion(4, 2, 1, 2.0) == pytest.approx([1, 36 / 61, 16 / 61, 9 / 61])
    # order does not matter: the cap follows the popularity, not the position
    assert topk_inclusion_probabilities(np.array([0.1, 0.7, 0.1, 0.1]), 2) == pytest.approx([1 / 3, 1, 1 / 3, 1 / 3])
    with pytest.raises(ValueError, match=r"top-3 routing needs at least 3 of the 4 experts with positive popularity"):
        topk_inclusion_probabilities(np.array([0.5, 0.5, 0.0, 0.0]), 3)


def test_extreme_skew_routes_every_token_to_the_k_hottest_experts():
    q = busiest_rank_inclusion(8, 2, 2, 60.0)  # rank 0 holds experts 0–3
    assert q == pytest.approx([1.0, 1.0, 0.0, 0.0], abs=1e-9)  # (2/3)^60 = 3e-11 left to expert 2
    assert rank_load(q, 100) == pytest.approx((200.0, 2.0))


def test_one_token_lands_its_pairs_on_distinct_experts_at_any_skew():
    # The bug this replaces: at skew 4 one token's 8 pairs on rank 0 of 4 counted 1.51 active
    # experts (Σ 1 − exp(−8 p_i), picks with replacement). Top-k picks 8 distinct experts: the six
    # hottest always (q = 1), the other 2 pairs spread, 7.984 of them on rank 0, on 7.984 experts.
    q = busiest_rank_inclusion(128, 8, 4, 4.0)
    assert q[:6] == pytest.approx([1.0] * 6) and q[6] < 1
    pairs, active = rank_load(q, 1)
    assert active == pytest.approx(pairs) and pairs == pytest.approx(7.984, abs=5e-4)


def test_systematic_sampling_realises_the_inclusion_probabilities():
    # Madow's systematic πps sampling: the q_i end to end on [0, k), one u ~ U[0, 1), the experts
    # under u, u + 1, …: k distinct experts with P(i) = q_i; T independent tokens then activate
    # Σ 1 − (1 − q_i)^T of a rank's experts on average.
    rng = np.random.default_rng(7)
    q_all = topk_inclusion_probabilities(expert_popularity(16, 1.5), 4)
    edges = np.concatenate([[0.0], np.cumsum(q_all)])
    draws = 20_000
    picks = np.searchsorted(edges, rng.random((draws, 1)) + np.arange(4), side="right") - 1
    assert all(len(set(row)) == 4 for row in picks[:2000])
    freq = np.bincount(picks.ravel(), minlength=16) / draws
    assert freq == pytest.approx(q_all, abs=0.01)
    tokens = 5
    on_rank0 = picks.reshape(draws // tokens, tokens * 4)
    active = np.mean([len({e for e in row if e < 8}) for row in on_rank0])
    assert active == pytest.approx(rank_load(busiest_rank_inclusion(16, 4, 2, 1.5), tokens)[1], abs=0.05)


@settings(deadline=None, max_examples=60)
@given(experts=st.sampled_from([8, 16, 60, 64, 128]), top_k=st.sampled_from([1, 2, 4, 8]),
       ep=st.sampled_from([1, 2, 3, 4, 8]), tokens=st.integers(1, 4096),
       skews=st.lists(st.floats(0.0, 4.0), min_size=2, max_size=6))
def test_busiest_rank_pairs_never_fall_with_skew(experts, top_k, ep, tokens, skews):
    loads = [rank_load(busiest_rank_inclusion(experts, top_k, ep, s), tokens) for s in sorted(skews)]
    for (pairs, active), (next_pairs, _) in zip(loads, loads[1:]):
        assert next_pairs >= pairs * (1 - 1e-9)
    held = rank_expert_counts(experts, ep)[0]
    for pairs, active in loads:  # a token's pairs are on distinct experts; no more active than held or paired
        assert pairs / tokens * (1 - 1e-9) <= active <= min(held, pairs) * (1 + 1e-9)
        assert pairs <= tokens * min(top_k, held) * (1 + 1e-9)


@settings(deadline=None, max_examples=40)
@given(experts=st.integers(2, 200), top_k=st.integers(1, 16), skew=st.floats(0.0, 8.0))
def test_inclusion_probabilities_are_probabilities_summing_to_k(experts, top_k, skew):
    top_k = min(top_k, experts)
    q = topk_inclusion_probabilities(expert_popularity(experts, skew), top_k)
    assert q.sum() == pytest.approx(top_k)
    assert (q >= 0).all() and (q <= 1 + 1e-12).all()
    assert (np.diff(q) <= 1e-12).all()  # hotter experts are picked at least as often


def _busiest_rank_s(skew: float, tokens: int) -> float:
    block = MoEBlockCost(QWEN, get_device_spec("h100-sxm"), MoELayout(QWEN.moe, 1, 4, True), skew,
                         flops_efficiency=1.0, bandwidth_efficiency=1.0, kernel_latency_s=0.0)
    return block._experts_roofline_s(tokens)


def test_skew_raises_the_busiest_rank_where_the_measured_tables_do():
    # AIConfigurator's H100 tables at Qwen3-30B-A3B's experts, EP 4, rise over balanced /
    # power_law_1.01 / power_law_1.2 from 256 tokens on (146 / 155 / 159 µs at 256; 246 / 288 /
    # 308 µs at 2048); the roofline at skew 0 / 1.01 / 1.2 rises there too.
    for tokens in (256, 2048):
        times = [_busiest_rank_s(s, tokens) for s in (0.0, 1.01, 1.2)]
        assert times == sorted(times) and times[2] > times[0]
    # One decode: the 2 pairs rank 0 gets at uniform routing become 7.984 at skew 4, as many
    # experts' weights of 3 × 2048 × 768 bf16 values instead of 2.
    values_bytes = 3 * 2048 * 768 * 2
    bandwidth = get_device_spec("h100-sxm").mem_bandwidth_bytes_per_s
    assert _busiest_rank_s(0.0, 1) == pytest.approx((2 * values_bytes + 2 * (2 * 2048 + 3 * 768) * 2) / bandwidth)
    assert _busiest_rank_s(4.0, 1) == pytest.approx(7.984 / 2 * _busiest_rank_s(0.0, 1), rel=1e-4)


def test_extreme_skew_reads_fewer_experts_for_a_batch_of_decodes():
    # A deliberate non-monotonicity, not a bug: 16 decodes at uniform routing touch
    # 32 · (1 − (120/128)^16) = 20.6 of rank 0's 32 experts; at skew 4 every token takes nearly
    # the same experts and rank 0 streams about 15 experts' weights although it has 4 × the
    # pairs. (AIConfigurator's H100 EP 4 rows: 32–64 tokens are 5–11 % faster at power_law_1.2
    # than balanced.)
    uniform = rank_load(busiest_rank_inclusion(128, 8, 4, 0.0), 16)
    skewed = rank_load(busiest_rank_inclusion(128, 8, 4, 4.0), 16)
    assert uniform == pytest.approx((32.0, 32 * (1 - (120 / 128) ** 16)))
    assert skewed[0] == pytest.approx(16 * 7.984, abs=0.01) and skewed[1] == pytest.approx(15.0, abs=0.01)
    assert _busiest_rank_s(4.0, 16) < _busiest_rank_s(0.0, 16)


def test_repro_tpot_never_drops_below_uniform_routing():
    # breaker repro d14: Qwen3-30B-A3B DP 4 × EP 4 on the roofline, 60 requests at 8 QPS. With
    # picks counted with replacement TPOT P50 fell to 4.78 ms at skew 4 against 6.02 ms uniform;
    # with distinct top-k every skewed point's busiest rank streams more than the uniform one's
    # at these small decode batches.
    from experiments.config import SweepConfig
    from experiments.point import run_point

    def tpot_s(skew):
        point = SweepConfig.model_validate({
            "name": "skw", "model": "qwen3-30b-a3b", "device": "h100-sxm", "cost_model": "roofline",
            "trace": {"kind": "synthetic", "qps": 8.0, "num_requests": 60, "prompt_tokens": 1024,
                      "output_tokens": 64, "seed": 0},
            "engine": {"scheduler": "vllm_v1", "chunk_size": 2048, "data_parallel_size": 4,
                       "enable_expert_parallel": True, "expert_routing_skew": skew}})
        return run_point(point).row["tpot_s_p50"]

    uniform, at_1_2, at_4 = (tpot_s(s) for s in (0.0, 1.2, 4.0))
    assert at_1_2 > uniform * 1.1
    assert at_4 > uniform
