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

import math

from profiler.mla import mla_replicated_params
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
    local = _local_expert_params(model, tensor_parallel_size, data_parallel_size, enable_expert_parallel)
    return (model.num_params - experts) // tensor_parallel_size + local + _replicated_extra(model, tensor_parallel_size)


def _replicated_extra(model: ModelSpec, tensor_parallel_size: int) -> int:
    """What a rank holds beyond its 1/tp share of weights every rank keeps whole (MLA's down-projections,
    `profiler.mla.mla_replicated_params`)."""
    replicated = mla_replicated_params(model)
    return replicated - replicated // tensor_parallel_size


def _local_expert_params(model: ModelSpec, tensor_parallel_size: int, data_parallel_size: int,
                         enable_expert_parallel: bool) -> int:
    """Routed-expert weights on the busiest GPU (elements), as `weight_params_per_rank` splits them."""
    experts, gpus = model.expert_params(), tensor_parallel_size * data_parallel_size
    if enable_expert_parallel:
        return experts // model.moe.num_experts * model.moe.experts_per_rank(gpus)
    return experts // gpus


def weight_bytes_per_rank(model: ModelSpec, tensor_parallel_size: int = 1, data_parallel_size: int = 1,
                          enable_expert_parallel: bool = False, dtype_bytes: int = 2) -> int:
    """Bytes of `weight_params_per_rank`: `dtype_bytes` each, except, for a quantised model
    (`model.quantization`), its routed experts on this GPU and its attention linears and shared
    expert over TP at `quantization.bytes_per_param` (`ModelSpec.linear_params`; router,
    embedding, LM head and norms stay at `dtype_bytes`).

    Raises:
        ValueError: as `weight_params_per_rank`.
    """
    params = weight_params_per_rank(model, tensor_parallel_size, data_parallel_size, enable_expert_parallel)
    if model.quantization is None:
        return params * dtype_bytes
    local = _local_expert_params(model, tensor_parallel_size, data_parallel_size, enable_expert_parallel)
    quantized = (local + (model.linear_params() - model.expert_params()) // tensor_parallel_size
                 + _replicated_extra(model, tensor_parallel_size))
    return (params - quantized) * dtype_bytes + math.ceil(quantized * model.quantization.bytes_per_param)


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
