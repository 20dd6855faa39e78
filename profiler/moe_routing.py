"""Expected load of the busiest expert-parallel rank under top-k routing with a popularity skew.

Routing model. Expert i (0-based, hottest first) has popularity p_i ∝ (i + 1)^−skew, Σ p_i = 1
(`expert_popularity`; skew 0 is uniform routing): the share of the token–expert pairs it would get
if nothing limited it. A token's router picks k *distinct* experts (vLLM `fused_topk`,
vllm/model_executor/layers/fused_moe/router/fused_topk_router.py: the `topk_softmax` kernel takes
the k highest of the token's expert scores, k different indices), so one token gives one expert at
most one pair: q_i, the probability expert i is in one token's top-k set, is at most 1 and Σ q_i =
k. `topk_inclusion_probabilities` takes q_i = min(1, c · p_i) with c the one constant that makes Σ
q_i = k: proportional to popularity where it can be, capped at one pair per token where it cannot,
the overflow shared by the others in proportion to their popularity. These are exact inclusion
probabilities of a fixed-size sample of k distinct experts: systematic πps sampling (Madow, Ann.
Math. Statist. 20:333–354, 1949) lays the q_i end to end on [0, k), draws u ~ U[0, 1) and takes the
experts under u, u + 1, …, u + k − 1 — k distinct experts (every q_i ≤ 1) with P(i taken) = q_i
exactly. The cap is the same one AIConfigurator's power-law routing applies to its per-expert token
counts (ai-dynamo/aiconfigurator collector/helper.py `_generate_power_law_distribution`: each
expert's count clamped to num_tokens, "each token can select an expert at most once"; it hands the
overflow to the least-loaded experts, here it goes in proportion to popularity).

Tokens route independently, so over T tokens a rank holding experts S gets T · Σ_{i∈S} q_i pairs
(expected) and Σ_{i∈S} 1 − (1 − q_i)^T distinct active experts (expected; exact, no Poisson
approximation). Uniform routing gives q_i = k / E, the closed form of
`MoESpec.expected_active_experts`.

Placement (vLLM `determine_expert_map`, vllm/model_executor/layers/fused_moe/layer.py, linear
placement): rank r holds ⌊E / EP⌋ experts, one more when r < E mod EP, rank 0 the first. With
the hottest experts first, rank 0 holds the most experts and each of its experts is at least as
popular as any other rank's, so it has the most pairs *and* the most active experts: it is the
busiest rank every other rank waits for at the combine.

What skew does to it: its pairs, T · Σ_{i<E_0} q_i, never fall as the skew grows (the hottest
experts' share only grows; checked over skew 0–4 in tests/test_moe_routing.py). Its active experts
can fall: at extreme skew every token takes the same k experts, so at T tokens the rank streams
about k experts' weights instead of E_0 · (1 − (1 − k/E)^T) — fewer when T is large enough that
uniform routing touches more than k of them. The weight-bound time of a small batch can so fall
at high skew; AIConfigurator's measured power-law rows show it too (H100 SXM, Qwen3-30B-A3B's
experts at EP 4: 32–64 tokens take 115–128 µs at power_law_1.01 / 1.2 against 129–133 µs
balanced; from 256 tokens on power-law is slower).
"""
from __future__ import annotations

import numpy as np


def expert_popularity(num_experts: int, skew: float) -> np.ndarray:
    """p_i ∝ (i + 1)^−skew over `num_experts` experts, hottest first, summing to 1 (module docstring).

    Returns:
        float64 array (num_experts,).
    """
    weights = np.arange(1, num_experts + 1, dtype=np.float64) ** -float(skew)
    return weights / weights.sum()


def topk_inclusion_probabilities(popularity: np.ndarray, top_k: int) -> np.ndarray:
    """q_i = min(1, c · p_i) with Σ q_i = top_k: the probability that expert i is among one
    token's `top_k` distinct experts (module docstring). Exact; O(E log E).

    Args:
        popularity: (E,) non-negative shares, at least `top_k` of them positive.
        top_k: experts per token, 1 ≤ top_k ≤ E.

    Raises:
        ValueError: `top_k` outside [1, E] or fewer than `top_k` experts with positive popularity.
    """
    p = np.asarray(popularity, dtype=np.float64)
    if not 1 <= top_k <= len(p) or np.count_nonzero(p > 0) < top_k:
        raise ValueError(f"top-{top_k} routing needs at least {top_k} of the {len(p)} experts with positive popularity")
    order = np.argsort(-p, kind="stable")
    ranked = p[order]
    tail = np.cumsum(ranked[::-1])[::-1]  # tail[m] = Σ_{j ≥ m} ranked[j]
    q_ranked = np.ones_like(ranked)
    for capped in range(top_k):  # the m hottest capped at 1, the rest scaled to carry k − m
        scale = (top_k - capped) / tail[capped]
        if scale * ranked[capped] <= 1.0:
            q_ranked[capped:] = np.minimum(1.0, scale * ranked[capped:])
            break
    q = np.empty_like(q_ranked)
    q[order] = q_ranked
    return q


def rank_expert_counts(num_experts: int, expert_parallel_size: int) -> list[int]:
    """Experts each EP rank holds under vLLM's linear placement (module docstring): ⌊E / EP⌋,
    plus one on the first E mod EP ranks."""
    base, remainder = divmod(num_experts, expert_parallel_size)
    return [base + (rank < remainder) for rank in range(expert_parallel_size)]


def busiest_rank_inclusion(num_experts: int, top_k: int, expert_parallel_size: int, skew: float) -> np.ndarray:
    """q_i of the experts on rank 0, the busiest EP rank (module docstring): (⌈E / EP⌉,) array.

    Raises:
        ValueError: as `topk_inclusion_probabilities`.
    """
    q = topk_inclusion_probabilities(expert_popularity(num_experts, skew), top_k)
    return q[:rank_expert_counts(num_experts, expert_parallel_size)[0]]


def rank_load(inclusion: np.ndarray, tokens: float) -> tuple[float, float]:
    """(expected token–expert pairs, expected distinct active experts) on a rank whose experts
    have top-k inclusion probabilities `inclusion`, for `tokens` tokens routed independently:
    (T · Σ q_i, Σ 1 − (1 − q_i)^T); (0, 0) for no tokens."""
    if tokens <= 0:
        return 0.0, 0.0
    return float(tokens * inclusion.sum()), float(np.sum(1.0 - (1.0 - inclusion) ** tokens))
