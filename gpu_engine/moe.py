"""A Mixtral-style sparse MoE block for the engine: a router and top-k SwiGLU experts.

As transformers' `MixtralSparseMoeBlock` (`MixtralTopKRouter`, `MixtralExperts`,
models/mixtral/modeling_mixtral.py, 5.x) and vLLM's `MixtralMoE` compute it: router logits =
x · gateᵀ; probabilities = softmax of the logits in float32; the top-k probabilities renormalised
to sum to 1; each token's output = Σ over its k experts of weight × down(silu(gate(x)) · up(x)).
The experts are stored fused as vLLM's `FusedMoE` holds them: `w13` (experts, 2 × width, hidden),
gate rows then up rows, and `w2` (experts, hidden, width); `gpu_engine.checkpoint` maps
Hugging Face's per-expert `w1` (gate), `w3` (up), `w2` (down) onto them. Experts are applied in
ascending order and summed into zeros, as transformers does, so float64 outputs match it.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from profiler.moe import MoESpec


class SparseMoE(nn.Module):
    """x (T, hidden) → (T, hidden) through the top-k of `moe.num_experts` experts per token."""

    def __init__(self, hidden_size: int, moe: MoESpec):
        super().__init__()
        self.num_experts, self.top_k, self.width = moe.num_experts, moe.num_experts_per_tok, moe.expert_intermediate_size
        self.gate = nn.Linear(hidden_size, moe.num_experts, bias=False)
        self.w13 = nn.Parameter(torch.empty(moe.num_experts, 2 * self.width, hidden_size))
        self.w2 = nn.Parameter(torch.empty(moe.num_experts, hidden_size, self.width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = F.softmax(self.gate(x).float(), dim=-1)
        weights, experts = torch.topk(probs, self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(x)
        for expert in torch.unique(experts).tolist():
            token, slot = torch.where(experts == expert)
            gate, up = F.linear(x[token], self.w13[expert]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.w2[expert]) * weights[token, slot, None]
            out.index_add_(0, token, y.to(out.dtype))
        return out
