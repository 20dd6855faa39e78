"""Turn a point's engine settings into simulator objects: the KV pool, the schedulers of its
replicas, the step pricer (tensor/pipeline parallel, draft model, swap) and the speculative
acceptance model."""
from __future__ import annotations

import dataclasses
from typing import Callable

from experiments.config import (CHUNKING_SCHEDULERS, MAX_KV_BLOCKS, POOLS, SCHEDULER_KEYS, AcceptanceFile, DraftModel,
                                SweepConfig, engine_gpus, pool_gpus, pool_points)
from profiler import RooflineCostModel, get_device_spec, get_model_spec, kv_pool_blocks
from profiler.cost_model import CostModel
from profiler.kv_cache_groups import kv_cache_groups
from profiler.memory import weights_memory_bytes
from profiler.model_spec import ModelSpec
from profiler.quantization import kv_cache_dtype_bytes, resolved_kv_cache_dtype
from profiler.weight_offload import offloaded_weight_bytes
from simulator.acceptance import EmpiricalAcceptance, PositionalAcceptance, speculative_outcome_fn
from simulator.disaggregated import KvLink
from simulator.frontend import FrontEnd
from simulator.step_variance import StepVariance
from simulator.pricing import StepPricer
from simulator.scheduler import BatchPlan, Scheduler, SchedulerConfig, StepOutcome, make_scheduler
from simulator.scheduler.kv_offload import KvOffload, offload_blocks

DTYPE_BYTES = {"bf16": 2}  # engine.dtype (the activations') → bytes per element


def served_model(point: SweepConfig) -> ModelSpec:
    """The point's model as vLLM serves it: its config.json's quantization, or a BF16 checkpoint
    quantised at load by `engine.quantization` (`ModelSpec.served`).

    Raises:
        ValueError: an unknown model, or a quantization vLLM would refuse for the checkpoint.
    """
    return get_model_spec(point.model).served(point.engine.quantization)


def kv_bytes_per_element(point: SweepConfig) -> int:
    """Bytes per KV-cache element of the point's `engine.kv_cache_dtype` as vLLM resolves it
    (`auto`: the checkpoint's KV quantisation where a ModelOpt checkpoint names one;
    `profiler.quantization.resolved_kv_cache_dtype`) on its device (auto/bf16 2, fp8* 1; FP8
    refused on a card without FP8)."""
    kv_cache_dtype = resolved_kv_cache_dtype(point.engine.kv_cache_dtype, served_model(point).quantization)
    return kv_cache_dtype_bytes(kv_cache_dtype, get_device_spec(point.device))


def served_context_tokens(point: SweepConfig) -> int:
    """The longest prompt + output a replica of `point` serves: `engine.max_model_len`, else the
    model's context (vLLM's default); of a `cluster:` point, the longest of its pools'."""
    model_len = get_model_spec(point.model).max_model_len
    if point.cluster is not None:  # a pool's engine keys over the point's, as `pool_point` merges them (not built here)
        return max(getattr(point.cluster, pool).engine.get("max_model_len", point.engine.max_model_len) or model_len
                   for pool in POOLS)
    return point.engine.max_model_len or model_len


def weight_offload_bytes(point: SweepConfig) -> int:
    """Bytes of weights each GPU of the point keeps in host memory under `engine.cpu_offload_gb`
    (vLLM `--cpu-offload-gb`; `profiler.weight_offload`): 0 without it; a pipeline stage's
    layers only (each GPU has its own budget over the layers it holds).

    Raises:
        ValueError: naming `engine.cpu_offload_gb`: quantised weights or a mixture of experts
            (not modelled), or more GiB than the device file's host memory per GPU."""
    e = point.engine
    if not e.cpu_offload_gb:
        return 0
    model = served_model(point)
    device = get_device_spec(point.device)
    if model.quantization is not None:
        raise ValueError(f"engine.cpu_offload_gb: weight offload of quantised weights ({model.quantization.label}) "
                         "is not modelled; use BF16 weights or set cpu_offload_gb: 0")
    if device.host_memory_gib is not None and e.cpu_offload_gb > device.host_memory_gib:
        raise ValueError(f"engine.cpu_offload_gb: {e.cpu_offload_gb:g} GiB per GPU exceeds the {device.host_memory_gib:g} "
                         f"GiB of host memory per GPU of device {device.name!r}")
    layers = -(-model.num_layers // e.pipeline_parallel_size)
    try:
        moved = offloaded_weight_bytes(model, e.tensor_parallel_size, layers, e.cpu_offload_gb, DTYPE_BYTES[e.dtype])
    except ValueError as exc:
        raise ValueError(f"engine.cpu_offload_gb: {exc}") from None
    _check_host_memory_shared(e, device, moved)
    return moved


def _check_host_memory_shared(e, device, moved_bytes_per_gpu: int) -> None:
    """The moved weights and the KV offload tier share a replica's host memory (device file's
    `host_memory_gib` per GPU × TP × PP × DP): each GPU's `moved_bytes_per_gpu` plus each DP
    rank's `kv_offload.cpu_gib` tier must fit it (each alone is checked where it is read).

    Raises:
        ValueError: naming `engine.cpu_offload_gb` and `engine.kv_offload.cpu_gib`: together over it."""
    tier_gib = e.kv_offload.cpu_gib if e.kv_offload is not None else 0.0
    if device.host_memory_gib is None or not tier_gib:
        return
    gpus = e.tensor_parallel_size * e.pipeline_parallel_size * e.data_parallel_size
    weights_gib = moved_bytes_per_gpu * gpus / 2**30
    host_gib = device.host_memory_gib * gpus
    if weights_gib + tier_gib * e.data_parallel_size > host_gib:
        raise ValueError(f"engine.cpu_offload_gb with engine.kv_offload.cpu_gib: {weights_gib:.2f} GiB of offloaded "
                         f"weights and {tier_gib:g} GiB of KV tier x {e.data_parallel_size} DP rank(s) exceed the "
                         f"{host_gib:g} GiB of host memory of a replica's {gpus} GPU(s) ({device.host_memory_gib:g} GiB "
                         f"each, device {device.name!r}); lower one of them")


def draft_weight_bytes(point: SweepConfig) -> int:
    """Bytes of a draft model's weights on each GPU of the point (split-N with `draft: {model}`;
    0 otherwise): vLLM loads the drafter on the target's GPUs, split over the same tensor-parallel
    ranks, before it profiles memory (`profiler.memory.weights_memory_bytes` of the draft's spec).
    Counted on every pipeline stage (conservative: vLLM runs the drafter on one)."""
    e = point.engine
    if not (e.split_n > 0 and isinstance(e.draft, DraftModel)):
        return 0
    return weights_memory_bytes(get_model_spec(e.draft.model), e.tensor_parallel_size, DTYPE_BYTES[e.dtype])


def build_scheduler_config(point: SweepConfig) -> SchedulerConfig:
    """The scheduler knobs of a point, with the KV pool from the memory model unless overridden.

    With pipeline parallelism each GPU holds ceil(layers / P) layers' weights and KV, so the
    pool (in tokens per replica) is computed for one stage; the embedding and LM head are counted
    on every stage (slightly conservative). For vllm_v1 the pool is one block smaller than the
    one vLLM logs (its null block).
    """
    e = point.engine
    model = served_model(point)
    max_model_len = served_context_tokens(point)
    budget = e.token_budget or max_model_len
    pp = e.pipeline_parallel_size
    stage_model = dataclasses.replace(model, num_layers=-(-model.num_layers // pp),
                                      num_sliding_layers=-(-model.num_sliding_layers // pp))
    # vLLM V1's hybrid KV cache manager groups windowed and full layers (profiler/kv_cache_groups.py);
    # the other schedulers keep every layer's KV, as one group.
    kv_groups = kv_cache_groups(stage_model, hybrid=e.scheduler == "vllm_v1")
    # Computed even when num_gpu_blocks overrides it: it raises when the weights do not fit.
    fitting_blocks = kv_pool_blocks(
        stage_model, get_device_spec(point.device),
        gpu_memory_utilization=e.gpu_memory_utilization, block_size=e.block_size,
        max_num_batched_tokens=budget, tensor_parallel_size=e.tensor_parallel_size,
        dtype_bytes=DTYPE_BYTES[e.dtype], kv_dtype_bytes=kv_bytes_per_element(point),
        max_num_seqs=e.max_num_seqs, data_parallel_size=e.data_parallel_size,
        enable_expert_parallel=e.enable_expert_parallel, kv_groups=kv_groups,
        offloaded_weight_bytes=weight_offload_bytes(point), draft_weight_bytes=draft_weight_bytes(point))
    num_blocks = e.num_gpu_blocks or fitting_blocks
    if num_blocks > MAX_KV_BLOCKS:  # before any pool is allocated (a pool costs ~40-58 bytes a block)
        device = get_device_spec(point.device).name
        raise ValueError(f"engine.block_size: {device}'s memory holds {num_blocks:,} KV blocks of {e.block_size} tokens "
                         f"of {model.name}, more than the {MAX_KV_BLOCKS:,} one pool may hold "
                         "in the simulator; use a larger block_size or cap the pool with engine.num_gpu_blocks")
    if e.scheduler == "vllm_v1":
        # vLLM V1 takes block 0 as its null block and never hands it out (vllm/v1/core/block_pool.py
        # `BlockPool.__init__`: `self.null_block = self.free_block_queue.popleft()`; `get_usage`
        # divides by num_gpu_blocks - 1), so of the "# GPU blocks" it logs one fewer serve requests.
        if num_blocks < 2:
            raise ValueError(f"engine.num_gpu_blocks {num_blocks} leaves vllm_v1 no KV block: vLLM keeps block 0 "
                             "as its null block; give at least 2")
        num_blocks -= 1
    chunked = e.scheduler in CHUNKING_SCHEDULERS
    return SchedulerConfig(
        num_gpu_blocks=num_blocks, block_size=e.block_size, max_model_len=max_model_len,
        max_num_seqs=e.max_num_seqs,
        chunk_size=e.chunk_size if chunked else None,
        max_num_batched_tokens=None if chunked else e.max_num_batched_tokens,
        policy=e.policy, preemption=e.preemption, split_n=e.split_n,
        # A draft model keeps its drafts' KV: vLLM reserves num_speculative_tokens lookahead slots
        # (simulator/scheduler/config.py); n-gram proposes from the tokens, none.
        num_lookahead_tokens=e.split_n if e.scheduler == "vllm_v1" and isinstance(e.draft, DraftModel) else 0,
        draft_proposals=(tuple(EmpiricalAcceptance.from_file(e.acceptance.file).proposed.tolist())
                         if drafts_as_proposed(e) else ()),
        proposal_seed=e.seed,
        long_prefill_token_threshold=e.long_prefill_token_threshold, on_too_long=e.on_too_long,
        enable_prefix_caching=e.enable_prefix_caching if "enable_prefix_caching" in SCHEDULER_KEYS[e.scheduler] else None,
        kv_groups=((kv_groups.num_full_groups, kv_groups.num_sliding_groups, kv_groups.sliding_window)
                   if kv_groups.num_sliding_groups else None))


def async_scheduling_on(point: SweepConfig) -> bool:
    """Whether the point's replicas run vLLM V1's async scheduling (`simulator.replica.Replica`).

    `engine.async_scheduling` when set; unset, as vLLM decides (`VllmConfig.__post_init__`,
    vllm/config/vllm.py at vllm-project/vllm 000fc94; default since vLLM 0.14): on for scheduler
    vllm_v1, off with pipeline parallelism (the batch queue then holds the pipeline's
    micro-batches), with split-N on the CPU n-gram drafter (vLLM keeps async scheduling only for
    EAGLE/MTP, draft models and `ngram_gpu`), beside a KV offload tier and for a cluster's pools
    (neither modelled here); off for every other scheduler. A mixture-of-experts model's DP ranks
    stepped in lockstep run it too (`simulator.data_parallel.DataParallelGroup`), as vLLM does
    (`VllmConfig.__post_init__` keeps it with MoE DP and turns off NCCL for the DP synchronisation).

    Raises:
        ValueError: async_scheduling true beside a KV offload tier (the config checks the rest)."""
    e = point.engine
    offload = getattr(e.kv_offload, "cpu_gib", 0) > 0  # a KV offload tier (its loads): not modelled with async
    if e.async_scheduling is not None:
        if e.async_scheduling and offload:
            raise ValueError("engine.async_scheduling true with engine.kv_offload: async scheduling beside the KV "
                             "offload tier's loads is not modelled; set it false or remove kv_offload")
        return e.async_scheduling
    return (e.scheduler == "vllm_v1" and e.pipeline_parallel_size == 1 and not (e.split_n and e.draft == "ngram")
            and not offload and point.cluster is None)


def host_s_per_seq(point: SweepConfig) -> float:
    """Host time per running sequence per step that the point's GPU waits for (s): the device's
    `sync_host_s_per_seq` (49 µs by default, profiler/device_file.py) for scheduler vllm_v1 without
    async scheduling, where vLLM's engine core schedules, prepares inputs and processes outputs
    between GPU steps (`EngineCore.step`: schedule -> execute_model -> update_from_output, serial);
    0 with async scheduling, where that work of one step overlaps the GPU's next step
    (`EngineCore.step_with_batch_queue`; hidden while it is shorter than a step: 49 µs × 128
    sequences = 6.3 ms against H100 steps of 13 ms and more on the handed grid), and for the other
    schedulers (their engines' host times are in their calibrations or not modelled)."""
    if point.engine.scheduler != "vllm_v1" or async_scheduling_on(point):
        return 0.0
    return get_device_spec(point.device).sync_host_s_per_seq


def build_frontend(point: SweepConfig) -> FrontEnd | None:
    """The point's serving front end (`simulator.frontend.FrontEnd`), or None when the trace's
    arrivals are the engine's: `frontend.enabled` when set, else on for scheduler vllm_v1
    (vLLM's OpenAI API server) without a cluster."""
    f = point.frontend
    on = f.enabled if f.enabled is not None else (point.engine.scheduler == "vllm_v1" and point.cluster is None)
    if not on:
        return None
    return FrontEnd.from_config_units(f.request_ms, f.tokenize_us_per_token, f.output_ms)


def build_step_variance(point: SweepConfig) -> StepVariance | None:
    """The point's step-time variance (`simulator.step_variance.StepVariance`, seeded by
    `engine.seed`), or None with `step_variance.cv` 0."""
    cv = point.step_variance.cv
    return StepVariance(cv, point.engine.seed) if cv > 0 else None


def build_schedulers(point: SweepConfig, config: SchedulerConfig) -> list[Scheduler]:
    """One scheduler (with its own KV pool) per DP rank of each replica: replicas ×
    `data_parallel_size`, replica by replica (a colocated DP engine is one replica; a cluster
    pool's instances may each be a DP engine, `simulator.disaggregated.Pool`). With
    `engine.kv_offload` each gets its own offload tier (`build_kv_offload`)."""
    e = point.engine
    schedulers = [make_scheduler(e.scheduler, config) for _ in range(e.replicas * e.data_parallel_size)]
    if e.kv_offload is not None and e.kv_offload.cpu_gib > 0:
        for scheduler in schedulers:
            scheduler.attach_kv_offload(build_kv_offload(point))
    return schedulers


def kv_offload_block_bytes(point: SweepConfig) -> tuple[float, float]:
    """(bytes of one KV block on one rank, bytes of one block over every rank of a replica) of
    a point: `ModelSpec.kv_bytes_per_token(kv dtype, TP)` × block_size for the ceil(layers / PP)
    layers of a pipeline stage, and that × TP × PP (vLLM `CPUOffloadingSpec`: page size ×
    layers × world size, so replicated KV heads count on every rank)."""
    e = point.engine
    model = get_model_spec(point.model)
    layers = -(-model.num_layers // e.pipeline_parallel_size)
    rank = model.kv_bytes_per_token(DTYPE_BYTES[e.kv_cache_dtype], e.tensor_parallel_size) * layers \
        / model.num_layers * e.block_size
    return rank, rank * e.tensor_parallel_size * e.pipeline_parallel_size


def build_kv_offload(point: SweepConfig) -> KvOffload:
    """The offload tier of one replica (`simulator.scheduler.kv_offload`): `engine.kv_offload.cpu_gib`
    GiB (vLLM `--kv-offloading-size`, `cpu_bytes_to_use = size * (1 << 30)` over all ranks) in
    blocks of the pool's size, moved over the device's host link (each rank its own shard over
    its own link, at `host_link_bandwidth_bytes_per_s` each way)."""
    e = point.engine
    device = get_device_spec(point.device)
    rank_bytes, replica_bytes = kv_offload_block_bytes(point)
    blocks = offload_blocks(e.kv_offload.cpu_gib * 2**30, replica_bytes)
    link = device.host_link_bandwidth_bytes_per_s
    return KvOffload(blocks, e.block_size, rank_bytes, link, link)


def build_pricer(point: SweepConfig, cost_model: CostModel) -> StepPricer:
    """The step pricer: `cost_model` (sharded by TP), pipeline stages with activation sends,
    draft-model steps for split-N with `draft: {model: NAME}`, and KV swap over the host link."""
    e = point.engine
    model = served_model(point)
    device = get_device_spec(point.device)
    dtype_bytes = DTYPE_BYTES[e.dtype]
    kv_dtype_bytes = kv_bytes_per_element(point)
    draft = None
    if isinstance(e.draft, DraftModel) and e.split_n > 0:
        draft = RooflineCostModel(get_model_spec(e.draft.model), device, tensor_parallel_size=e.tensor_parallel_size,
                                  dtype_bytes=dtype_bytes, kv_dtype_bytes=kv_dtype_bytes)
    kv_bytes = model.kv_bytes_per_token(kv_dtype_bytes, e.tensor_parallel_size)
    return StepPricer(
        cost_model,
        draft_cost_model=draft,
        swap_s_per_token=kv_bytes / device.host_link_bandwidth_bytes_per_s,
        pipeline_stages=e.pipeline_parallel_size,
        # Each stage boundary sends the step's hidden states: tokens × hidden × dtype bytes.
        p2p_s_per_token=model.hidden_size * dtype_bytes / device.interconnect_bandwidth_bytes_per_s,
    )


def build_acceptance_model(point: SweepConfig) -> PositionalAcceptance | EmpiricalAcceptance:
    """The point's acceptance model (scalar α, per-position α_k, or measured (proposed, accepted)
    pairs from a file), seeded by engine.seed. Shared by the simulator and the engine's forced mode."""
    e = point.engine
    if isinstance(e.acceptance, AcceptanceFile):
        return EmpiricalAcceptance.from_file(e.acceptance.file, seed=e.seed, given_proposals=drafts_as_proposed(e))
    return PositionalAcceptance(e.acceptance, seed=e.seed)


def drafts_as_proposed(e) -> bool:
    """Whether the scheduler draws each step's n-gram proposal from the acceptance file and
    schedules only those drafts, as vLLM does (`SchedulerConfig.draft_proposals`): vllm_v1 with
    split-N, `draft: ngram` and an acceptance file (whose `proposed` column is what the proposer
    found). A draft model always proposes N; with scalar or per-position α the proposal lengths
    are unknown and taken as N (the assumption DESIGN.md's Split-N states)."""
    return (e.scheduler == "vllm_v1" and e.split_n > 0 and e.draft == "ngram"
            and isinstance(e.acceptance, AcceptanceFile))


def build_outcome_fn(point: SweepConfig) -> Callable[[BatchPlan], StepOutcome]:
    """Tokens emitted per step: one per emitting sequence, or, with split-N, drawn from the
    point's acceptance model."""
    if point.engine.split_n == 0:
        return StepOutcome.without_speculation
    return speculative_outcome_fn(build_acceptance_model(point))


# ----- prefill/decode disaggregation (`cluster:`, simulator/disaggregated.py) -------------------
def build_link(point: SweepConfig, pools: dict[str, SweepConfig] | None = None) -> tuple[KvLink, float]:
    """The cluster's KV link and the bytes of one prompt token's KV that one link moves: each
    rank's shard crosses on its own link, so the busiest rank of either side bounds it (a DP
    rank's: each DP rank holds the whole KV of its own requests, sharded over its TP ranks, and
    pulls it over its own links, simulator/disaggregated.py): per pool,
    `ModelSpec.kv_bytes_per_token(kv dtype, TP)` of its ceil(layers / PP) layers (vLLM's
    pipeline stages take layers / PP, the first ones one more when it does not divide;
    `vllm.distributed.utils.get_pp_indices`); the larger of the two pools' bytes. With PP 1
    that is the KV of the smaller TP degree. The link's layers (`KvLink.num_layers`, for a
    layer-pipelined transfer's last-layer share) are that rank's (the prefill rank's on a tie). `bandwidth_gb_s: device` is
    the prefill device's GPU-to-GPU bandwidth per direction (`interconnect_bandwidth_bytes_per_s`,
    same node). `pools`: the point's `pool_points` where already built."""
    link = point.cluster.link
    pools = pool_points(point) if pools is None else pools
    prefill, decode = pools["prefill"], pools["decode"]
    if link.bandwidth_gb_s == "device":
        bandwidth = get_device_spec(prefill.device).interconnect_bandwidth_bytes_per_s
    else:
        bandwidth = link.bandwidth_gb_s * 1e9
    model = get_model_spec(point.model)
    dtype_bytes = kv_bytes_per_element(prefill)

    def busiest_rank(pool: SweepConfig) -> tuple[float, int]:  # (KV bytes of one token, layers)
        e = pool.engine
        layers = -(-model.num_layers // e.pipeline_parallel_size)
        return model.kv_bytes_per_token(dtype_bytes, e.tensor_parallel_size) * layers / model.num_layers, layers

    sending, receiving = busiest_rank(prefill), busiest_rank(decode)
    kv_bytes, layers = sending if sending[0] >= receiving[0] else receiving  # a tie: the prefill's layers stream
    return KvLink(bandwidth, link.latency_s, link.layer_pipelined, layers), float(kv_bytes)


def cluster_gpus(point: SweepConfig, pools: dict[str, SweepConfig] | None = None) -> int:
    """GPUs of a point: replicas × TP × PP × DP, or, with `cluster:`, the sum over its pools
    (`pool_gpus`: each pool's replicas × DP × TP × PP; `pools`: its `pool_points` where already built)."""
    if point.cluster is None:
        return engine_gpus(point.engine)  # the count engine.num_gpus is checked against
    return sum(pool_gpus(point, pools).values())
