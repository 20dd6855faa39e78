"""`MoESpec`: the mixture-of-experts block of a decoder layer, its parameters and its expert-parallel split.

Every layer of the supported families replaces the dense SwiGLU MLP by a sparse block (transformers
`MixtralSparseMoeBlock`, `Qwen2MoeSparseMoeBlock`, `Qwen3MoeSparseMoeBlock`; vLLM
`vllm/model_executor/models/{mixtral,qwen2_moe,qwen3_moe}.py`):

- a router `gate`: Linear(hidden → num_experts), no bias, replicated on every rank;
- `num_experts` SwiGLU experts of width `expert_intermediate_size` (gate, up: hidden → width;
  down: width → hidden; no biases), of which each token uses `num_experts_per_tok` (top-k);
- Qwen2-MoE only: one always-on shared expert of width `shared_expert_intermediate_size` and its
  sigmoid gate Linear(hidden → 1) (`Qwen2MoeSparseMoeBlock.shared_expert`, `shared_expert_gate`).

Expert parallelism (vLLM `--enable-expert-parallel`): the experts are split over the EP ranks as
evenly as they go, the first E mod EP ranks holding one more (`FusedMoE` `determine_expert_map`,
vllm/model_executor/layers/fused_moe/layer.py: in the default linear placement rank r holds the
⌊E/EP⌋ (+1) experts from r·⌊E/EP⌋ + min(r, E mod EP)), and inside an expert tensor parallelism
splits the intermediate width.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class MoESpec:
    """Shapes of one sparse MoE block (module docstring); widths in elements.

    Raises:
        ValueError: a count not positive, top-k above the expert count, or a negative shared width.
    """

    num_experts: int
    num_experts_per_tok: int
    expert_intermediate_size: int
    shared_expert_intermediate_size: int = 0
    # Biases on the experts' projections (gate_up: 2 × width, down: hidden) and the router
    # (num_experts): gpt-oss (transformers `GptOssExperts.gate_up_proj_bias`, `down_proj_bias`,
    # `GptOssTopKRouter.bias`).
    bias: bool = False

    def __post_init__(self) -> None:
        for name in ("num_experts", "num_experts_per_tok", "expert_intermediate_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.num_experts_per_tok > self.num_experts:
            raise ValueError(f"num_experts_per_tok {self.num_experts_per_tok} must be <= num_experts {self.num_experts}")
        if self.shared_expert_intermediate_size < 0:
            raise ValueError(f"shared_expert_intermediate_size must be >= 0, got {self.shared_expert_intermediate_size}")

    def expert_params(self, hidden_size: int) -> int:
        """Weights of one routed expert: gate, up (hidden × width each) and down (width × hidden)."""
        return 3 * hidden_size * self.expert_intermediate_size + (
            2 * self.expert_intermediate_size + hidden_size if self.bias else 0)

    def router_params(self, hidden_size: int) -> int:
        """The router (hidden × num_experts) plus, with a shared expert, its gate (hidden × 1)."""
        return (hidden_size * self.num_experts + (hidden_size if self.shared_expert_intermediate_size else 0)
                + (self.num_experts if self.bias else 0))

    def shared_params(self, hidden_size: int) -> int:
        """Weights of the shared expert (0 without one)."""
        return 3 * hidden_size * self.shared_expert_intermediate_size

    def layer_params(self, hidden_size: int) -> int:
        """All weights of one MoE block: every expert, the shared expert and the router(s)."""
        return (self.num_experts * self.expert_params(hidden_size) + self.shared_params(hidden_size)
                + self.router_params(hidden_size))

    def active_layer_params(self, hidden_size: int) -> int:
        """Weights one token uses in one block: top-k experts, the shared expert and the router(s)."""
        return (self.num_experts_per_tok * self.expert_params(hidden_size) + self.shared_params(hidden_size)
                + self.router_params(hidden_size))

    def experts_per_rank(self, expert_parallel_size: int, key: str = "expert_parallel_size") -> int:
        """Routed experts the busiest EP rank holds: ⌈E / EP⌉. vLLM splits the experts as evenly
        as it can and gives the remainder to the first ranks (`determine_expert_map`,
        vllm/model_executor/layers/fused_moe/layer.py: `base_experts = global_num_experts // ep_size`,
        `local_num_experts = base_experts + 1 if ep_rank < remainder`; only EPLB, not modelled,
        asserts an even split), so 60 experts over EP 8 are 8, 8, 8, 8, 7, 7, 7, 7.

        Raises:
            ValueError: an EP degree below 1 or above the experts (a rank would hold none; the
                message names `key` and the valid degrees).
        """
        ep = expert_parallel_size
        if not 1 <= ep <= self.num_experts:
            raise ValueError(f"{key} {ep} must be from 1 to the model's {self.num_experts} experts "
                             "(every expert-parallel rank holds at least one expert)")
        return -(-self.num_experts // ep)

    def expected_active_experts(self, num_tokens: float, num_experts: int | None = None) -> float:
        """Expected distinct experts, of `num_experts` (default all) of this block, that at least
        one of `num_tokens` tokens routes to under uniform top-k routing: each token picks k of E
        experts without replacement, so a given expert is missed by one token with probability
        1 − k/E, and E_r · (1 − (1 − k/E)^T) of a rank's E_r experts are hit."""
        e_r = self.num_experts if num_experts is None else num_experts
        if num_tokens <= 0:
            return 0.0
        miss = 1.0 - self.num_experts_per_tok / self.num_experts
        return e_r * (1.0 - math.pow(miss, num_tokens))
