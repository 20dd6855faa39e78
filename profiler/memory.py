"""How many KV-cache blocks fit on one GPU once the weights and a step's activations are placed.

The formula is DESIGN.md "Files" (KV pool), the same budget vLLM computes after its profile run
(`gpu_memory_utilization` of the device, minus weights and peak activation memory):

    blocks = floor((memory × utilization − weights / tp − peak activations − runtime reserve)
                   / (block_size × KV bytes per token / tp))
"""
from __future__ import annotations

from profiler.device_spec import DeviceSpec
from profiler.model_spec import ModelSpec

# Assumption (not measured): CUDA context, captured CUDA graphs, NCCL buffers and allocator
# fragmentation together take about 1 GiB per GPU outside the weights and activations.
RUNTIME_RESERVE_BYTES = 1 << 30
# Logits are materialised in fp32 for sampling.
_LOGIT_BYTES = 4


def peak_activation_bytes(model: ModelSpec, num_tokens: int, num_logit_rows: int,
                          tensor_parallel_size: int = 1, dtype_bytes: int = 2) -> int:
    """Estimated peak activation memory (bytes) of one step of `num_tokens` tokens on one rank.

    An estimate, not a trace of the allocator: per token, four hidden-wide buffers (residual
    stream, normed input, attention output, QKV output ≤ 1.5 hidden) plus the gate_up output
    (2 × intermediate / tp) live together in the MLP; plus fp32 logits of `num_logit_rows` rows
    (one per sampled sequence) over the full vocabulary (gathered on the sampling rank).
    """
    per_token_elements = 4 * model.hidden_size + 2 * model.intermediate_size // tensor_parallel_size
    logits = num_logit_rows * model.vocab_size * _LOGIT_BYTES
    return num_tokens * per_token_elements * dtype_bytes + logits


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
) -> int:
    """KV-cache blocks of `block_size` tokens that fit on each GPU (DESIGN.md "Files").

    Args:
        gpu_memory_utilization: fraction of `device.memory_gib` the engine may use (vLLM flag).
        block_size: tokens per KV block.
        max_num_batched_tokens: the step token budget; sizes the peak activations.
        max_num_seqs: most sequences in a step; bounds the logit rows (DESIGN.md default 128).

    Returns:
        The block count (≥ 0).

    Raises:
        ValueError: the weights, activations and runtime reserve do not fit in the usable memory;
            the message names the model, device, tp and the byte figures. Also as
            `ModelSpec.kv_heads_per_rank` for an unsplittable tp.
    """
    tp = tensor_parallel_size
    usable_bytes = device.memory_gib * 2**30 * gpu_memory_utilization
    weights_bytes = model.weight_bytes(dtype_bytes) / tp
    activation_bytes = peak_activation_bytes(model, max_num_batched_tokens,
                                             min(max_num_seqs, max_num_batched_tokens), tp, dtype_bytes)
    free_bytes = usable_bytes - weights_bytes - activation_bytes - RUNTIME_RESERVE_BYTES
    block_bytes = block_size * model.kv_bytes_per_token(kv_dtype_bytes, tp)
    if free_bytes < block_bytes:
        raise ValueError(
            f"{model.name} does not fit on {device.name} with tensor_parallel_size={tp}: usable "
            f"{usable_bytes / 2**30:.1f} GiB ({device.memory_gib} GiB × {gpu_memory_utilization}) "
            f"minus weights {weights_bytes / 2**30:.1f} GiB, activations "
            f"{activation_bytes / 2**30:.2f} GiB and runtime reserve "
            f"{RUNTIME_RESERVE_BYTES / 2**30:.0f} GiB leaves {free_bytes / 2**30:.2f} GiB, less "
            f"than one KV block ({block_bytes} bytes); raise tensor_parallel_size or use a larger device")
    return int(free_bytes // block_bytes)
