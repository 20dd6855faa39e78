"""The engine's sparse MoE blocks: Mixtral's (a router and top-k SwiGLU experts) and gpt-oss's.

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


class GptOssMoE(nn.Module):
    """gpt-oss's MoE block: x (T, hidden) → (T, hidden) through the top-k of its biased experts.

    As transformers' `GptOssMLP` (`GptOssTopKRouter`, `GptOssExperts`, models/gpt_oss/modeling_gpt_oss.py,
    5.x) and vLLM's `gpt_oss.py` compute it: router logits = x · routerᵀ + bias; the top-k logits,
    softmaxed among themselves, weight the experts; an expert computes gate_up = x · gate_up_proj +
    bias, gate = its even columns clamped to ≤ limit, up = its odd columns clamped to [−limit, limit],
    out = ((up + 1) · gate · sigmoid(alpha · gate)) · down_proj + bias. The weights are kept in
    Hugging Face's layout (experts, hidden, 2 × width) and (experts, width, hidden), so a checkpoint
    loads as it is. Experts are applied in ascending order and summed into zeros, as transformers does.

    Args:
        swiglu_alpha, swiglu_limit: config.json's `swiglu_alpha` (1.702) and `swiglu_limit` (7.0).
    """

    def __init__(self, hidden_size: int, moe: MoESpec, swiglu_alpha: float, swiglu_limit: float):
        super().__init__()
        self.top_k, self.alpha, self.limit = moe.num_experts_per_tok, swiglu_alpha, swiglu_limit
        experts, width = moe.num_experts, moe.expert_intermediate_size
        self.router = nn.Linear(hidden_size, experts)
        self.experts = nn.Module()
        self.experts.gate_up_proj = nn.Parameter(torch.empty(experts, hidden_size, 2 * width))
        self.experts.gate_up_proj_bias = nn.Parameter(torch.empty(experts, 2 * width))
        self.experts.down_proj = nn.Parameter(torch.empty(experts, width, hidden_size))
        self.experts.down_proj_bias = nn.Parameter(torch.empty(experts, hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        top, experts = torch.topk(self.router(x), self.top_k, dim=-1)
        weights = F.softmax(top, dim=-1)
        e = self.experts
        out = torch.zeros_like(x)
        for expert in torch.unique(experts).tolist():
            token, slot = torch.where(experts == expert)
            gate_up = x[token] @ e.gate_up_proj[expert] + e.gate_up_proj_bias[expert]
            gate = gate_up[..., ::2].clamp(max=self.limit)
            up = gate_up[..., 1::2].clamp(min=-self.limit, max=self.limit)
            y = ((up + 1) * gate * torch.sigmoid(gate * self.alpha)) @ e.down_proj[expert] + e.down_proj_bias[expert]
            out.index_add_(0, token, (y * weights[token, slot, None]).to(out.dtype))
        return out
