"""`model:`, `device:` and `cost_model:`, and how a point's engine fits them: the model and
device named, the TP / PP / DP / EP layout the model can take (`_check_parallel_layout`), a KV
pool override one GPU can hold, a measured profile that covers the point, the draft model and
acceptance file of split-N, and `engine.max_model_len` within the model's context
(`check_deployment`, run by `SweepConfig` before any point runs)."""
from __future__ import annotations

import math

from experiments.config.engine import AcceptanceFile, DraftModel, EngineConfig
from experiments.config.kv_offload import check_kv_offload_host
from experiments.config.trace import ClosedLoopTrace, StagesTrace
from profiler import get_device_spec, get_model_spec

# `SweepConfig` (experiments.config.sweep) is named in annotations only, as text: it imports this module.


def _check_profile(cost_model: str, model, tensor_parallel_size: int, device_name: str) -> None:
    """ValueError (naming `cost_model`) unless the `profile:DIR` profile was measured for this
    model, tp and device and can be fitted (`profiler.shipped.checked_profile`): when the config
    loads, not as a failure of each point at run time. A cluster's pools and a mixture of experts
    price their own way (`experiments.point.build_cost_model`) and are checked when they run."""
    from profiler.shipped import checked_profile  # the fit-coverage check imports scikit-learn

    try:
        checked_profile(cost_model.removeprefix("profile:"), model, tensor_parallel_size, device_name)
    except ValueError as exc:
        raise ValueError(f"cost_model: {exc}") from None


def _check_quantization(model, device, e: EngineConfig) -> None:
    """The point's weights and KV cache can be priced on its device (profiler/quantization.py):
    engine.quantization against the checkpoint's, the device's kernel for the format, an FP8 KV
    cache on a card with FP8.

    Raises:
        ValueError: naming engine.quantization / engine.kv_cache_dtype and what is valid.
    """
    from profiler.quantization import block_fp8_shape_problem, kernel_for, kv_cache_dtype_bytes, resolved_kv_cache_dtype

    try:
        served = model.served(e.quantization)
        if served.quantization is not None:
            kernel_for(served.quantization, device)
    except ValueError as exc:
        raise ValueError(f"engine.quantization: {exc}") from None
    moe_tp = 1 if e.enable_expert_parallel else e.tensor_parallel_size * e.data_parallel_size
    problem = block_fp8_shape_problem(served, e.tensor_parallel_size, moe_tp)
    if problem:
        raise ValueError(f"engine.tensor_parallel_size: {problem}")
    # Its message names engine.kv_cache_dtype (an `auto` resolved to the checkpoint's FP8 included).
    kv_cache_dtype_bytes(resolved_kv_cache_dtype(e.kv_cache_dtype, served.quantization), device)


def _check_kv_pool_override(e: EngineConfig, model, device) -> None:
    """ValueError unless `engine.num_gpu_blocks` could be held by one GPU of `device`.

    The bound is the device's whole memory (`memory_gib`, not × gpu_memory_utilization) as KV of
    one pipeline stage's layers at the smallest KV dtype (fp8, 1 byte a value), with no weights:
    a generous ceiling, so an override may still model a pool larger than vLLM would size, but
    not one no GPU of this kind could allocate (vLLM's --num-gpu-blocks-override would fail).
    """
    stage_layers = -(-model.num_layers // e.pipeline_parallel_size)
    block_bytes = e.block_size * model.kv_bytes_per_token(1, e.tensor_parallel_size) // model.num_layers * stage_layers
    most_blocks = int(device.memory_gib * 2**30 // block_bytes)
    if e.num_gpu_blocks > most_blocks:
        raise ValueError(
            f"engine.num_gpu_blocks: {e.num_gpu_blocks} blocks are more KV than one {device.name} holds: blocks of "
            f"{e.block_size} tokens of {model.name} take {block_bytes:,} bytes each even at 1 byte a value, so its "
            f"{device.memory_gib:g} GiB hold at most {most_blocks:,} (with no weights)")


_KV_DTYPE_BYTES = {"bf16": 2, "fp8": 1}  # as experiments.deployment.DTYPE_BYTES (which imports this package)


def _check_kv_offload(point: "SweepConfig", model, device) -> None:
    """`engine.kv_offload` against the device's host memory (`check_kv_offload_host`, a block's
    bytes as `experiments.deployment.kv_offload_block_bytes`); not with `cluster:` (pools and a
    host tier are not modelled together)."""
    e = point.engine
    if point.cluster is not None:
        raise ValueError("engine.kv_offload with cluster: is not modelled (prefill/decode pools with a host tier); "
                         "remove one of them")
    layers = -(-model.num_layers // e.pipeline_parallel_size)
    rank_bytes = model.kv_bytes_per_token(_KV_DTYPE_BYTES[e.kv_cache_dtype], e.tensor_parallel_size) * layers \
        / model.num_layers * e.block_size
    check_kv_offload_host(e, device, rank_bytes * e.tensor_parallel_size * e.pipeline_parallel_size)


def engine_gpus(e: EngineConfig) -> int:
    """GPUs of a colocated engine: replicas × data_parallel_size × tensor_parallel_size ×
    pipeline_parallel_size (what `engine.num_gpus` is checked against and points.csv's
    `num_gpus` says, `experiments.deployment.cluster_gpus`; a cluster pool's, `pool_gpus`)."""
    return e.replicas * e.data_parallel_size * e.tensor_parallel_size * e.pipeline_parallel_size


def _check_parallel_layout(e: EngineConfig, model, check_num_gpus: bool = True, key: str = "engine",
                           pool: bool = False) -> None:
    """Data / expert parallel settings the simulator can model (simulator/data_parallel.py).
    `check_num_gpus` False: `num_gpus` counts a cluster's pools (`check_cluster`), not this engine.
    `key` names the engine in the errors; `pool`: a cluster pool's merged engine, whose replicas
    may each be a DP engine (`cluster.<pool>.replicas`, simulator/disaggregated.py).

    Raises:
        ValueError: num_gpus not DP × TP × PP (with `check_num_gpus`); expert parallelism or
            routing skew on a dense model; an EP degree above the number of experts (`profiler.moe_cost.MoELayout`); DP with
            pipeline parallelism, or with replicas outside a pool (not modelled). Each names the key and what is valid.
    """
    gpus = engine_gpus(e)
    if check_num_gpus and e.num_gpus is not None and e.num_gpus != gpus:
        raise ValueError(f"engine.num_gpus is {e.num_gpus} but replicas × data_parallel_size × tensor_parallel_size × "
                         f"pipeline_parallel_size = {e.replicas} × {e.data_parallel_size} × {e.tensor_parallel_size} × "
                         f"{e.pipeline_parallel_size} = {gpus}; make them match")
    if model.moe is None:
        for name, value in (("enable_expert_parallel", e.enable_expert_parallel), ("expert_routing_skew", e.expert_routing_skew)):
            if value:
                raise ValueError(f"{key}.{name}: {model.name} is a dense model (no experts); only a mixture of "
                                 "experts reads it")
    else:
        from profiler.moe_cost import MoELayout

        MoELayout(model.moe, e.tensor_parallel_size, e.data_parallel_size, e.enable_expert_parallel,
                  key_prefix=f"{key}.")  # a pool's keys are cluster.<pool>.engine.<key>
    if e.data_parallel_size > 1 and e.pipeline_parallel_size > 1:
        raise ValueError(f"{key}.data_parallel_size > 1 with pipeline_parallel_size > 1 is not modelled; "
                         "set one of them to 1")
    if e.data_parallel_size > 1 and model.moe is not None and (e.preemption == "swap" or isinstance(e.draft, DraftModel)):
        raise ValueError(f"{key}.data_parallel_size > 1 of a mixture of experts with preemption: swap or a draft model "
                         "is not modelled; use preemption: recompute and draft: ngram")
    if e.data_parallel_size > 1 and e.replicas > 1 and not pool:
        raise ValueError("engine.data_parallel_size > 1 with replicas > 1 is not modelled; use one data-parallel "
                         "group (replicas: 1)")


def check_routing_skew(cost_model: str, model, device, e: EngineConfig, key: str = "engine") -> None:
    """ValueError (naming `<key>.expert_routing_skew`) when a mixture of experts' skew is not one
    of the routings the measured MoE tables hold (`profiler.moe_cost.MEASURED_SKEWS`) and the
    point's experts would be priced from such a table: when the config loads, not as a failure of
    each point at run time. Builds the point's MoE cost model only for a skew outside those."""
    from profiler.moe_cost import MEASURED_SKEWS, build_moe_cost_model

    if model.moe is None or cost_model.startswith("profile:") or any(
            math.isclose(e.expert_routing_skew, skew) for skew in MEASURED_SKEWS):
        return
    try:
        build_moe_cost_model(cost_model, model, device, e.tensor_parallel_size, e.data_parallel_size,
                             e.enable_expert_parallel, e.expert_routing_skew)
    except ValueError as exc:
        if str(exc).startswith("engine.expert_routing_skew"):
            routings = ", ".join(f"{skew:g} ({name})" for skew, name in MEASURED_SKEWS.items())
            raise ValueError(f"{key}.expert_routing_skew: {e.expert_routing_skew:g} is no routing of the measured MoE "
                             f"tables that price this point's experts ({routings}); choose one of them, or "
                             "cost_model: roofline for another exponent") from None


def check_deployment(point: "SweepConfig") -> None:
    """Names and shapes checked before any point runs (`SweepConfig._deployment_fits`): model,
    device, TP split, PP depth, the parallel layout, a KV pool override, a measured profile's
    coverage, split-N's acceptance file and draft model, a closed loop beside a search, context.

    Raises:
        ValueError: leading with the key (`model: ...`, `engine.tensor_parallel_size: ...`).
    """
    try:
        model = get_model_spec(point.model)
    except (ValueError, OSError) as exc:
        raise ValueError(f"model: {exc}") from None
    try:
        device = get_device_spec(point.device)
    except ValueError as exc:
        raise ValueError(f"device: {exc}") from None
    e = point.engine
    try:
        model.kv_heads_per_rank(e.tensor_parallel_size)
    except ValueError as exc:
        raise ValueError(f"engine.tensor_parallel_size: {exc}") from None
    _check_quantization(model, device, e)
    if e.pipeline_parallel_size > model.num_layers:
        raise ValueError(f"engine.pipeline_parallel_size ({e.pipeline_parallel_size}) exceeds "
                         f"{model.name}'s {model.num_layers} layers")
    _check_parallel_layout(e, model, check_num_gpus=point.cluster is None)  # a cluster's: check_cluster
    if point.cluster is None:  # a cluster's pools: check_cluster
        check_routing_skew(point.cost_model, model, device, e)
    if e.kv_offload is not None:
        _check_kv_offload(point, model, device)
    if e.num_gpu_blocks is not None:
        _check_kv_pool_override(e, model, device)
    if point.cost_model.startswith("profile:") and model.moe is None and point.cluster is None:
        _check_profile(point.cost_model, model, e.tensor_parallel_size, device.name)
    if e.split_n and isinstance(e.acceptance, AcceptanceFile):
        from simulator.acceptance import EmpiricalAcceptance
        try:
            EmpiricalAcceptance.from_file(e.acceptance.file)
        except ValueError as exc:
            raise ValueError(f"engine.acceptance.file: {exc}") from None
    if e.split_n and isinstance(e.draft, DraftModel):
        try:
            get_model_spec(e.draft.model)
        except (ValueError, OSError) as exc:
            raise ValueError(f"engine.draft.model: {exc}") from None
    if point.search is not None and isinstance(point.trace, StagesTrace):
        raise ValueError("search: a staged trace sets each stage's rate; search capacity with a single-rate "
                         "trace (synthetic, profile, file)")
    if point.search is not None and isinstance(point.trace, ClosedLoopTrace):
        raise ValueError("search: a closed-loop trace sets a number of clients, not a QPS; "
                         "search capacity with an open-loop trace (profile, synthetic, file)")
    if e.max_model_len is not None and e.max_model_len > model.max_model_len:
        raise ValueError(f"engine.max_model_len ({e.max_model_len}) exceeds {model.name}'s context of "
                         f"{model.max_model_len} tokens (vLLM refuses this too)")
