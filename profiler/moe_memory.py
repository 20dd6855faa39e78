"""Memory of a mixture-of-experts model on one GPU: its share of the weights (total, not active,
parameters) and the fused-MoE buffers of vLLM's profile run, under TP, EP and DP (issue 18).

vLLM splits the MoE layers over all DP × TP GPUs (`FusedMoEParallelConfig.make`,
vllm/model_executor/layers/fused_moe/config.py): by expert with `enable_expert_parallel`, by
expert width without it; either way each GPU holds 1 / (DP × TP) of the routed experts, while the
attention block, router, shared expert, embedding and LM head are split over TP only and
replicated across DP ranks.
"""
from __future__ import annotations

from profiler.model_spec import ModelSpec

_ACTIVATION_BYTES = 2


def weight_params_per_rank(model: ModelSpec, tensor_parallel_size: int = 1, data_parallel_size: int = 1) -> int:
    """Parameters one GPU holds (elements): the routed experts over DP × TP GPUs, everything else
    over TP (module docstring); a dense model's `num_params // tp`."""
    if model.moe is None:
        return model.num_params // tensor_parallel_size
    experts = model.expert_params()
    return ((model.num_params - experts) // tensor_parallel_size
            + experts // (tensor_parallel_size * data_parallel_size))


def moe_forward_peak_bytes(model: ModelSpec, max_num_batched_tokens: int, tensor_parallel_size: int = 1,
                           data_parallel_size: int = 1) -> int:
    """The forward term of vLLM's profile-run peak for an MoE model (bytes; the dense model's is in
    `profiler.memory.profile_run_peak_bytes`): the three intermediate caches of `fused_experts`
    (vllm/model_executor/layers/fused_moe/fused_moe.py: (M, top-k, 2 N), (M × top-k, N),
    (M, top-k, hidden), N the expert width per rank) for the M = DP × T tokens every rank's MoE
    layer receives in the profile run, plus four hidden-wide buffers of the rank's own T tokens."""
    moe = model.moe
    width = moe.expert_intermediate_size // (tensor_parallel_size * data_parallel_size)
    tokens_moe = max_num_batched_tokens * data_parallel_size
    caches = tokens_moe * moe.num_experts_per_tok * (3 * width + model.hidden_size)
    return (caches + 4 * max_num_batched_tokens * model.hidden_size) * _ACTIVATION_BYTES
