"""Memory of a mixture-of-experts model on one GPU: its share of the weights (total, not active,
parameters) and the fused-MoE buffers of vLLM's profile run, under TP, EP and DP (issue 18).

vLLM splits the MoE layers over all DP × TP GPUs (`FusedMoEParallelConfig.make`,
vllm/model_executor/layers/fused_moe/config.py): by expert with `enable_expert_parallel` (the
busiest GPU holds ⌈E / (DP × TP)⌉ whole experts: `MoESpec.experts_per_rank`, vLLM
`determine_expert_map`), by expert width without it (each GPU 1 / (DP × TP) of every expert),
while the attention block, router, shared expert, embedding and LM head are split over TP only
and replicated across DP ranks.
"""
from __future__ import annotations

from profiler.model_spec import ModelSpec

_ACTIVATION_BYTES = 2


def weight_params_per_rank(model: ModelSpec, tensor_parallel_size: int = 1, data_parallel_size: int = 1,
                           enable_expert_parallel: bool = False) -> int:
    """Parameters the busiest GPU holds (elements): the routed experts over DP × TP GPUs (by
    expert with `enable_expert_parallel`: ⌈E / EP⌉ of them; else by width), everything else over
    TP (module docstring); a dense model's `num_params // tp`.

    Raises:
        ValueError: as `MoESpec.experts_per_rank` for an EP degree above the experts.
    """
    if model.moe is None:
        return model.num_params // tensor_parallel_size
    experts = model.expert_params()
    gpus = tensor_parallel_size * data_parallel_size
    if enable_expert_parallel:
        local = experts // model.moe.num_experts * model.moe.experts_per_rank(gpus)
    else:
        local = experts // gpus
    return (model.num_params - experts) // tensor_parallel_size + local


def moe_forward_peak_bytes(model: ModelSpec, max_num_batched_tokens: int, tensor_parallel_size: int = 1,
                           data_parallel_size: int = 1, enable_expert_parallel: bool = False) -> int:
    """The forward term of vLLM's profile-run peak for an MoE model (bytes; the dense model's is in
    `profiler.memory.profile_run_peak_bytes`): the three intermediate caches of `fused_experts`
    (vllm/model_executor/layers/fused_moe/fused_moe.py: (M, top-k, 2 N), (M × top-k, N),
    (M, top-k, hidden), N the expert width per rank: the whole width with `enable_expert_parallel`,
    MoE TP 1, else 1 / (DP × TP) of it) for the M = DP × T tokens every rank's MoE layer receives
    in the profile run, plus four hidden-wide buffers of the rank's own T tokens."""
    moe = model.moe
    width = moe.expert_intermediate_size // (1 if enable_expert_parallel else tensor_parallel_size * data_parallel_size)
    tokens_moe = max_num_batched_tokens * data_parallel_size
    caches = tokens_moe * moe.num_experts_per_tok * (3 * width + model.hidden_size)
    return (caches + 4 * max_num_batched_tokens * model.hidden_size) * _ACTIVATION_BYTES
