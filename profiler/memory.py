"""The KV pool vLLM 0.19 computes at start-up, term by term, and the blocks it holds.

vLLM sizes its paged KV cache once, after a profile run, from what is left of the memory it was
allowed (read from vLLM 0.19.0's source; the paths below are in that release):

    requested  = ceil(total_memory × gpu_memory_utilization)
        `vllm/v1/worker/utils.py` `request_memory`, called by `Worker.init_device`
        (`vllm/v1/worker/gpu_worker.py`); `total_memory` is `cudaMemGetInfo`'s total
        (`vllm/utils/mem_utils.py` `MemorySnapshot.measure`), a little under the marketed size.
    available  = requested − weights − torch_peak_increase − non_torch_increase − cudagraph
        `Worker.determine_available_memory` (`gpu_worker.py`) with `memory_profiling`
        (`mem_utils.py`): the terms are, per rank,
        - weights: what the caching allocator gained while loading (`GPUModelRunner.load_model`,
          `DeviceMemoryProfiler`): the parameters and the rotary cos/sin cache;
        - torch_peak_increase: the allocator's peak during `GPUModelRunner.profile_run` above what
          it held before (`torch_peak_increase = profile_torch_peak − before_profile.torch_peak`);
        - non_torch_increase: device memory used outside PyTorch that appeared between the
          snapshot taken in `init_device` (after NCCL is initialised, so the CUDA context and
          NCCL's set-up are *not* charged) and the end of profiling: lazily loaded kernels, and
          with tensor parallelism on NVLink Hopper/Blackwell the all-reduce machinery;
        - cudagraph: 0 in 0.19 — `VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS` defaults to 0
          (`vllm/envs.py`), so the graphs are captured after the KV cache is allocated and live
          in the (1 − gpu_memory_utilization) margin (the default flips to 1 in v0.21).
    num_blocks = available // page_bytes // num_layers,   GPU KV cache size = num_blocks × block_size
        `vllm/v1/core/kv_cache_utils.py` `get_num_blocks` and `_report_kv_cache_config` (one
        uniform full-attention group; `page_bytes` = `FullAttentionSpec.page_size_bytes` =
        2 × block_size × KV heads per rank × head_dim × KV dtype bytes); with several workers
        the smallest count wins (`get_kv_cache_configs`). A model with windowed layers under the
        hybrid KV cache manager divides by the layers of one KV cache group instead
        (`profiler.kv_cache_groups`): each block is one group's.

The profile run (`GPUModelRunner.profile_run`, `_dummy_run`, `_dummy_sampler_run`) is one
forward pass of T = max_num_batched_tokens tokens split over R = min(T, max_num_seqs) dummy
requests, attention skipped (no metadata), then the sampler on the R last positions with
top-k = vocab − 1, top-p 0.9 and temperature 0.5 (`vllm/v1/sample/sampler.py`,
`ops/topk_topp_sampler.py` `forward_native`, `ops/topk_topp_triton.py`). Its peak is the larger of

    forward:  T × 2 bytes × (3 × intermediate / tp + 4 × hidden)
              (gate_up output and its activated half, the MLP being the widest point, and four
              hidden-wide buffers — residual, normed input, layer output, down projection; the 4 is
              read off the two forward-bound vLLM 0.19.0 H100 logs, CodeLlama-7B and
              granite-3.1-8b, which leave 4.2–4.3 hidden widths beside the MLP's 3 × ffn)
    sampler:  R × vocab × (model-dtype logits + 4 fp32 copy + 4 probs + 4 exponential noise)
              + the Triton top-k/top-p scratch, min(next_pow2(min(SMs, R)), SMs) × vocab × 4
              + the step's hidden states kept alive, T × hidden × 2, and 2 × R × hidden × 2
              (the gathered last positions and their `rand_like` stand-in)

plus `WORKSPACE_BYTES`. Logits are gathered to the full vocabulary on every rank, so the sampler
term does not shrink with tp (the logs show the same peak at TP 1, 2 and 4).

The per-card constants (the device files' `cuda_total_memory_gib`, `NUM_SMS`) and the non-torch figures come from
the sources named where they are defined; tests/data/vllm_kv_pool_points.csv holds the vLLM logs
this model is checked against (tests/test_profiler_memory.py: within 3 % of every pool).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from profiler.device_spec import DeviceSpec
from profiler.kv_cache_groups import KVCacheGroups
from profiler.model_spec import ModelSpec
from profiler.moe_memory import moe_forward_peak_bytes, weight_bytes_per_rank

GIB = 2**30

# cudaMemGetInfo's total per card is each device file's `cuda_total_memory_gib`
# (profiler/data/devices/*.yaml, each citing the public vLLM or PyTorch log it is read from);
# a device without one uses `memory_gib` (`DeviceSpec.cuda_total_source` says so).

# Streaming multiprocessors (AMD: compute units), from each part's datasheet / architecture
# whitepaper (CUDA cores ÷ 128 on Ada/Hopper/Blackwell, ÷ 64 on Ampere). They size the Triton
# top-k/top-p scratch buffer only (at most ~0.1 GiB); a device not listed is taken as 132 (H100 SXM).
NUM_SMS: dict[str, int] = {
    "h100-sxm": 132, "h100-pcie": 114, "h200": 132, "b200": 148, "a100-80gb": 108, "a100-40gb": 108,
    "a40": 84, "l40s": 142, "l4": 58, "rtx-4090": 128, "rtx-pro-6000": 188, "mi300x": 304,
}
_DEFAULT_NUM_SMS = 132

# Non-torch memory that appears during vLLM 0.19's profiling, per rank. One GPU: 0.25 GiB
# (0.24–0.27 GiB in the 30 single-GPU vLLM 0.19.0 H100 logs of llm-d-planner @ d3121e05; kernels
# loaded lazily on first use). Tensor parallel on NVLink Hopper/Blackwell: 2.1 GiB (2.06–2.21 GiB
# in its 17 TP 2/4 logs): vLLM 0.19 enables the torch symmetric-memory all-reduce only for compute
# capability 9.0 and 10.0 (`vllm/distributed/device_communicators/all_reduce_utils.py`
# `SYMM_MEM_ALL_REDUCE_MAX_SIZES`) and sets up FlashInfer's all-reduce fusion workspace after the
# snapshot. Other cards with tp > 1: no public figure; taken at the one-GPU value.
NON_TORCH_ONE_GPU_BYTES = int(0.25 * GIB)
NON_TORCH_NVLINK_TP_BYTES = int(2.1 * GIB)
_NVLINK_SYMM_MEM_DEVICES = frozenset({"h100-sxm", "h200", "b200"})

# Allocated during the profile run beyond the tensors listed in the module docstring: 31–39 MB in
# the five sampler-bound vLLM 0.19.0 H100 logs (Llama-3.1-8B, Qwen2.5-7B, Qwen3-8B, gemma-2-2b,
# phi-4; llm-d-planner @ d3121e05), consistent with cuBLAS's 32 MiB Hopper workspace. One constant.
WORKSPACE_BYTES = 32 * 2**20

# vLLM computes activations and logits in the model dtype (bf16) also for FP8 weights.
_ACTIVATION_BYTES = 2
_FP32_BYTES = 4
# `apply_top_k_top_p` (topk_topp_sampler.py) uses the Triton kernel from 8 rows up, below that a
# full sort: fp32 values and int64 indices.
_TRITON_MIN_ROWS = 8
_SORT_BYTES_PER_LOGIT = 4 + 8


@dataclass(frozen=True)
class KVPoolBreakdown:
    """Every term of one rank's KV pool, bytes (blocks for `num_blocks`), as vLLM 0.19 adds them up.

    `available_bytes` = `requested_bytes` − `weights_bytes` − `activation_peak_bytes` −
    `non_torch_bytes` − `cudagraph_bytes`; `num_blocks` = available // `block_bytes`, where
    `block_bytes` is one block of `block_size` tokens over all layers of the rank.
    """

    requested_bytes: int
    weights_bytes: int
    activation_peak_bytes: int
    non_torch_bytes: int
    cudagraph_bytes: int
    available_bytes: int
    block_bytes: int
    num_blocks: int


def cuda_total_memory_bytes(device: DeviceSpec) -> int:
    """cudaMemGetInfo's total for `device` (bytes): its `cuda_total_memory_gib` where the device
    file gives one (every built-in with a public figure does), else `device.memory_gib`."""
    total = device.cuda_total_memory_gib
    return int((device.memory_gib if total is None else total) * GIB)


def weights_memory_bytes(model: ModelSpec, tensor_parallel_size: int = 1, dtype_bytes: int = 2,
                         data_parallel_size: int = 1, enable_expert_parallel: bool = False) -> int:
    """What vLLM's "Model loading took" counts on one rank (bytes): the parameters at
    `dtype_bytes`, split over tp (norms are replicated: < 1 MB, not counted), plus the rotary
    cos/sin cache, max_position_embeddings × head_dim in the activation dtype, held once per rank
    (`vllm/model_executor/layers/rotary_embedding/base.py`, `cos_sin_cache`). A mixture of
    experts holds its total (not active) weights, the routed experts over DP × TP GPUs
    (`profiler.moe_memory.weight_params_per_rank`)."""
    rotary = model.max_model_len * (model.qk_rope_head_dim or model.head_dim) * _ACTIVATION_BYTES  # MLA: rope dims
    if model.moe is not None:
        return weight_bytes_per_rank(model, tensor_parallel_size, data_parallel_size, enable_expert_parallel,
                                     dtype_bytes) + rotary
    return model.weight_bytes(dtype_bytes) // tensor_parallel_size + rotary


def profile_run_peak_bytes(model: ModelSpec, device: DeviceSpec, max_num_batched_tokens: int,
                           max_num_seqs: int, tensor_parallel_size: int = 1, data_parallel_size: int = 1,
                           enable_expert_parallel: bool = False) -> int:
    """`torch_peak_increase` of vLLM 0.19's profile run on one rank (bytes): max(forward,
    sampler) + `WORKSPACE_BYTES`, each term as the module docstring derives it.

    Args:
        max_num_batched_tokens: T, the tokens of the dummy forward pass.
        max_num_seqs: bounds R = min(T, max_num_seqs), the dummy requests the sampler runs on.
    """
    tokens, hidden, vocab = max_num_batched_tokens, model.hidden_size, model.vocab_size
    rows = min(tokens, max_num_seqs)
    forward = tokens * _ACTIVATION_BYTES * (3 * model.intermediate_size // tensor_parallel_size + 4 * hidden)
    if model.moe is not None:  # the fused-MoE buffers instead of the MLP's (profiler/moe_memory.py)
        forward = moe_forward_peak_bytes(model, tokens, tensor_parallel_size, data_parallel_size, enable_expert_parallel)
    logits = rows * vocab * (_ACTIVATION_BYTES + 3 * _FP32_BYTES)
    if rows >= _TRITON_MIN_ROWS:
        sms = NUM_SMS.get(device.card, _DEFAULT_NUM_SMS)
        programs = min(sms, rows)
        scratch = min(1 << (programs - 1).bit_length(), sms) * vocab * _FP32_BYTES
    else:
        scratch = rows * vocab * _SORT_BYTES_PER_LOGIT
    kept_hidden = (tokens + 2 * rows) * hidden * _ACTIVATION_BYTES
    sampler = logits + scratch + kept_hidden
    return max(forward, sampler) + WORKSPACE_BYTES


def non_torch_increase_bytes(device: DeviceSpec, tensor_parallel_size: int = 1) -> int:
    """`non_torch_increase` of vLLM 0.19's profiling on one rank (bytes): see
    `NON_TORCH_ONE_GPU_BYTES` and `NON_TORCH_NVLINK_TP_BYTES` for the figures and their logs."""
    if tensor_parallel_size > 1 and device.card in _NVLINK_SYMM_MEM_DEVICES:
        return NON_TORCH_NVLINK_TP_BYTES
    return NON_TORCH_ONE_GPU_BYTES


def vllm_kv_pool(
    model: ModelSpec,
    device: DeviceSpec,
    *,
    gpu_memory_utilization: float,
    block_size: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    tensor_parallel_size: int = 1,
    dtype_bytes: int = 2,
    kv_dtype_bytes: int = 2,
    data_parallel_size: int = 1,
    enable_expert_parallel: bool = False,
    kv_groups: KVCacheGroups | None = None,
    offloaded_weight_bytes: int = 0,
    draft_weight_bytes: int = 0,
) -> KVPoolBreakdown:
    """One rank's KV pool as vLLM 0.19 computes it (module docstring), every term kept.

    Args:
        model: the shapes of the rank's layers (a pipeline stage passes its own layer count).
        gpu_memory_utilization: vLLM's flag, a fraction of cudaMemGetInfo's total.
        block_size: tokens per KV block.
        max_num_batched_tokens, max_num_seqs: the scheduler limits the profile run is shaped by.
        dtype_bytes: bytes per unquantised parameter (2: bf16); a quantised model's linear layers
            take `model.quantization.bytes_per_param` (`ModelSpec.weight_bytes`).
        kv_dtype_bytes: KV-cache bytes per element.
        data_parallel_size: DP ranks of a mixture of experts (its experts are split over DP × TP
            GPUs: `profiler.moe_memory`); no effect on a dense model.
        enable_expert_parallel: a mixture of experts split by expert (the busiest rank's share).
        kv_groups: the KV cache groups (`profiler.kv_cache_groups`); None: one group of all layers.
        offloaded_weight_bytes: weights kept in host memory (`--cpu-offload-gb`,
            `profiler.weight_offload.offloaded_weight_bytes`): not on the GPU when vLLM profiles.
        draft_weight_bytes: a draft model's weights on the rank (split-N with `draft: {model}`):
            vLLM loads the drafter beside the target before it profiles (its KV per token is not
            counted here: a pool a little larger than vLLM's).

    Returns:
        The breakdown; `num_blocks` is 0 (and `available_bytes` may be negative) when nothing fits.

    Raises:
        ValueError: as `ModelSpec.kv_heads_per_rank` for a tp vLLM cannot split the heads by.
    """
    tp = tensor_parallel_size
    requested = math.ceil(cuda_total_memory_bytes(device) * gpu_memory_utilization)
    weights = weights_memory_bytes(model, tp, dtype_bytes, data_parallel_size, enable_expert_parallel) \
        - offloaded_weight_bytes + draft_weight_bytes
    activation = profile_run_peak_bytes(model, device, max_num_batched_tokens, max_num_seqs, tp, data_parallel_size,
                                        enable_expert_parallel)
    non_torch = non_torch_increase_bytes(device, tp)
    cudagraph = 0  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 in 0.19 (module docstring)
    available = requested - weights - activation - non_torch - cudagraph
    block_bytes = block_size * model.kv_bytes_per_token(kv_dtype_bytes, tp)
    if kv_groups is not None:  # one block of one group: group_size layers
        block_bytes = block_bytes // model.num_layers * kv_groups.group_size
    return KVPoolBreakdown(
        requested_bytes=requested, weights_bytes=weights, activation_peak_bytes=activation,
        non_torch_bytes=non_torch, cudagraph_bytes=cudagraph, available_bytes=available,
        block_bytes=block_bytes, num_blocks=max(available, 0) // block_bytes)


def kv_pool_blocks(
    model: ModelSpec,
    device: DeviceSpec,
    *,
    gpu_memory_utilization: float,
    block_size: int,
    max_num_batched_tokens: int,
    tensor_parallel_size: int = 1,
    dtype_bytes: int = 2,
    kv_dtype_bytes: int = 2,
    max_num_seqs: int = 128,
    data_parallel_size: int = 1,
    enable_expert_parallel: bool = False,
    kv_groups: KVCacheGroups | None = None,
    offloaded_weight_bytes: int = 0,
    draft_weight_bytes: int = 0,
) -> int:
    """KV-cache blocks of `block_size` tokens that fit on each GPU: `vllm_kv_pool(...).num_blocks`.

    Args:
        gpu_memory_utilization: fraction of the device's CUDA-visible memory the engine may use.
        block_size: tokens per KV block.
        max_num_batched_tokens: the step token budget; shapes the profile run.
        max_num_seqs: most sequences in a step; the profile run's sampler rows (DESIGN.md default 128).
        offloaded_weight_bytes, draft_weight_bytes: as `vllm_kv_pool`.

    Returns:
        The block count (≥ 1).

    Raises:
        ValueError: the weights, profile-run peak and non-torch memory leave less than one KV
            block; the message names the model, device, tp and every term in GiB. Also as
            `ModelSpec.kv_heads_per_rank` for an unsplittable tp.
    """
    pool = vllm_kv_pool(model, device, gpu_memory_utilization=gpu_memory_utilization,
                        block_size=block_size, max_num_batched_tokens=max_num_batched_tokens,
                        max_num_seqs=max_num_seqs, tensor_parallel_size=tensor_parallel_size,
                        dtype_bytes=dtype_bytes, kv_dtype_bytes=kv_dtype_bytes, data_parallel_size=data_parallel_size,
                        enable_expert_parallel=enable_expert_parallel, kv_groups=kv_groups,
                        offloaded_weight_bytes=offloaded_weight_bytes, draft_weight_bytes=draft_weight_bytes)
    if pool.num_blocks < 1:
        raise ValueError(
            f"{model.name}{' and its draft model' if draft_weight_bytes else ''} does not fit on {device.name} with "
            f"tensor_parallel_size={tensor_parallel_size}: "
            f"requested {pool.requested_bytes / GIB:.2f} GiB ({cuda_total_memory_bytes(device) / GIB:.2f} GiB × "
            f"{gpu_memory_utilization}) minus weights {pool.weights_bytes / GIB:.2f} GiB, profile-run peak "
            f"{pool.activation_peak_bytes / GIB:.2f} GiB and non-torch memory {pool.non_torch_bytes / GIB:.2f} GiB "
            f"leaves {pool.available_bytes / GIB:.2f} GiB, less than one KV block ({pool.block_bytes} bytes); "
            "raise tensor_parallel_size or use a larger device")
    return pool.num_blocks
