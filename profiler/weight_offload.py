"""Weight offload to host memory (`vllm serve --cpu-offload-gb`): which bytes leave the GPU, and
what a step pays to read them.

vLLM 0.19 (`vllm/model_executor/offloader/uva.py` `UVAOffloader._maybe_offload_to_cpu`, at
vllm-project/vllm 00593fa; wrapped around each decoder layer by `make_layers`,
`vllm/model_executor/models/utils.py` at d30d0c1):

- the budget is `cpu_offload_gb` GiB **per GPU** (`OffloadConfig.uva.cpu_offload_gb`);
- decoder layers are visited in order from the stage's first; within a layer its parameters
  in registration order; a parameter is moved to pinned host memory whole while the bytes moved
  so far are below the budget (checked before each one), so the last one moved may overshoot
  it; the embedding, final norm and LM head are not in `make_layers` and never move;
- the moved parameters are read by the GPU in place over the host link (UVA zero-copy: a CUDA
  view of pinned host memory; no copy to the GPU, nothing cached between steps). So every
  forward pass reads every moved byte across the link.

Priced here (stated approximations):
- a step pays `offloaded bytes / host link bandwidth` (the device file's PCIe per direction)
  on top of its time on the GPU: each moved weight is read once per step. A lower bound: a
  GEMM whose rows span several output tiles may read a weight tile more than once over the
  link, and zero-copy reads rarely reach the link's peak; so offloaded steps are at least this
  slow;
- the moved bytes leave the weights vLLM's memory profile counts (`GPUModelRunner.load_model`
  measures the allocator's gain while loading), so the KV pool grows by them;
- a layer's parameters, per tensor-parallel rank, in the order vLLM's Llama/Qwen decoder layer
  registers them: `qkv_proj` (weight, then bias where the model has one), `o_proj`,
  `gate_up_proj`, `down_proj`, then the layer's norms (two RMSNorms; Qwen3's q/k norms) —
  the norms' order inside the layer moves at most a few KiB across the budget's edge.

Not modelled (refused by the caller): mixture-of-experts layers (their expert tensors are
split over DP × TP and EP), quantised weights (bytes per parameter differ per tensor), and
vLLM's prefetch offloader (`--offload-group-size`, copies overlapped with compute).
"""
from __future__ import annotations

from profiler.model_spec import ModelSpec

GIB = 2**30


def layer_parameter_bytes(model: ModelSpec, tensor_parallel_size: int, dtype_bytes: int = 2) -> list[int]:
    """The bytes of one decoder layer's parameters on one TP rank, in vLLM's registration order
    (module docstring): the four fused GEMM weights (`ModelSpec.layer_gemm_shapes`), the qkv
    bias where `model.qkv_bias`, then the norms.

    Raises:
        ValueError: a mixture-of-experts model (not modelled here), or as
            `ModelSpec.layer_gemm_shapes` for a tp that does not split the model."""
    if model.moe is not None:
        raise ValueError(f"model {model.name!r} is a mixture of experts: weight offload of its expert layers is "
                         "not modelled")
    sizes = []
    for name, in_dim, out_dim in model.layer_gemm_shapes(tensor_parallel_size):
        sizes.append(in_dim * out_dim * dtype_bytes)
        if name == "qkv_proj" and getattr(model, "qkv_bias", False):
            sizes.append(out_dim * dtype_bytes)
    sizes += [model.hidden_size * dtype_bytes] * 2  # input and post-attention RMSNorm
    if model.qk_norm:
        sizes += [model.head_dim * dtype_bytes] * 2
    return sizes


def offloaded_weight_bytes(model: ModelSpec, tensor_parallel_size: int, num_layers: int, cpu_offload_gb: float,
                           dtype_bytes: int = 2) -> int:
    """Bytes of weights one GPU keeps in host memory under `--cpu-offload-gb` (module docstring).

    Args:
        model: the model's shapes (BF16 weights; see `layer_parameter_bytes`).
        tensor_parallel_size: TP degree (each rank holds its shard and its own budget).
        num_layers: decoder layers on this GPU (a pipeline stage's).
        cpu_offload_gb: vLLM's flag, GiB per GPU, ≥ 0.

    Returns:
        The bytes moved: 0 for a budget of 0; never more than the stage's layers hold.

    Raises:
        ValueError: as `layer_parameter_bytes`.
    """
    budget = cpu_offload_gb * GIB
    if budget <= 0:
        return 0
    per_layer = layer_parameter_bytes(model, tensor_parallel_size, dtype_bytes)
    layer_total = sum(per_layer)
    whole_layers = min(int(budget // layer_total), num_layers)  # layers moved whole
    moved = whole_layers * layer_total
    if whole_layers == num_layers:
        return moved
    for size in per_layer:  # the next layer's parameters while below the budget
        if moved >= budget:
            break
        moved += size
    return moved


def offload_read_s_per_step(offloaded_bytes: int, host_link_bytes_per_s: float) -> float:
    """Seconds a forward pass spends reading the offloaded weights over the host link (module
    docstring: a lower bound)."""
    return offloaded_bytes / host_link_bytes_per_s if offloaded_bytes else 0.0
