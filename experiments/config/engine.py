"""`engine:`: the serving engine of a point (scheduler, budgets, KV pool, parallelism, routing,
speculative decoding), the keys only some schedulers read (`SCHEDULER_KEYS`) and the router rule
shared with a cluster's pools (`check_router`). How the engine's parallel layout, KV pool and
context fit the model and device is checked in `model_and_device.py`."""
from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from experiments.config.base import MAX_KV_BLOCKS, _MAX_REPLICAS, _MAX_STEP_TOKENS, _Seed, _StepTokens, _Strict
from experiments.config.kv_offload import KvOffloadConfig, check_kv_offload
from profiler.quantization import ENGINE_QUANTIZATIONS
from simulator.scheduler import SCHEDULERS


# Keys that only some schedulers read; every other engine key applies to all of them.
CHUNKING_SCHEDULERS = ("sarathi", "vllm_v1", "simple_chunking", "fastgen")
SCHEDULER_KEYS: dict[str, set[str]] = {
    **{name: {"chunk_size"} for name in CHUNKING_SCHEDULERS},
    **{name: {"max_num_batched_tokens"} for name in ("vllm", "orca", "faster_transformer")},
}
SCHEDULER_KEYS["vllm_v1"] = {"chunk_size", "long_prefill_token_threshold", "enable_prefix_caching", "async_scheduling",
                             "max_num_batched_tokens"}
_SCHEDULER_SPECIFIC = set().union(*SCHEDULER_KEYS.values())
# Another spelling of a scheduler's key, mapped onto it before validation: vLLM users write the
# token budget as max_num_batched_tokens (vLLM's --max-num-batched-tokens).
KEY_ALIASES: dict[str, dict[str, str]] = {"vllm_v1": {"max_num_batched_tokens": "chunk_size"}}


class DraftModel(_Strict):
    """Split-N with a draft model: the named (smaller) model's steps are priced by the cost model."""

    model: str


class AcceptanceFile(_Strict):
    """Measured (proposed, accepted) pairs per verify step: a CSV with those two columns."""

    file: str


class EngineConfig(_Strict):
    """Serving-engine settings of one point (DESIGN.md's `engine:` block)."""

    scheduler: str = "sarathi"
    chunk_size: _StepTokens = 512  # the step's token budget; vllm_v1 unset: vLLM 0.19's for the card, 8192 on >= 70 GiB non-A100 cards, else 2048 (experiments/vllm_defaults.py)
    max_num_batched_tokens: _StepTokens | None = None  # vllm_v1: another name of chunk_size (vLLM's --max-num-batched-tokens)
    long_prefill_token_threshold: _StepTokens | None = None
    max_num_seqs: _StepTokens = 128  # vllm_v1 unset: vLLM 0.19's for the card, 1024 on >= 70 GiB non-A100 cards, else 256 (at most the budget)
    max_model_len: int | None = Field(default=None, ge=2, le=_MAX_STEP_TOKENS)
    block_size: int = Field(default=16, ge=1, le=256)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    num_gpu_blocks: int | None = Field(default=None, ge=1, le=MAX_KV_BLOCKS)  # and what the device holds
    # The activations' dtype (vLLM --dtype); quantised weights are `quantization` (vLLM
    # --quantization) or the checkpoint's quantization_config (profiler/quantization.py).
    dtype: Literal["bf16"] = "bf16"
    quantization: Literal[ENGINE_QUANTIZATIONS] | None = None  # vLLM --quantization: fp8 quantises a BF16 checkpoint at load; others must match the checkpoint's quant_method
    kv_cache_dtype: Literal["auto", "bf16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"] = "bf16"  # vLLM --kv-cache-dtype; bf16 = auto (a ModelOpt checkpoint's FP8 KV, else the model's BF16); bfloat16 always BF16
    tensor_parallel_size: int = Field(default=1, ge=1)
    pipeline_parallel_size: int = Field(default=1, ge=1)
    replicas: int = Field(default=1, ge=1, le=_MAX_REPLICAS)
    router: Literal["round_robin", "least_outstanding", "random", "prefix_aware", "session_affinity"] = "round_robin"
    router_overlap_weight: float = Field(default=1.0, ge=0, le=1e6)  # read by router prefix_aware only: weight of uncached prompt blocks against active blocks (simulator/router.py; Dynamo's --kv-overlap-score-weight); with kv_offload a prompt block the replica's CPU tier holds counts as max(0, 1 - its load time / its recompute time) of a cached one
    # vLLM's --data-parallel-size and --enable-expert-parallel (simulator/data_parallel.py,
    # profiler/moe_cost.py); expert_routing_skew: power-law exponent of expert popularity (0: uniform);
    # num_gpus: optional check that replicas × data_parallel_size × tensor_parallel_size × pipeline_parallel_size match it
    # (with cluster:, every pool's replicas × data_parallel_size × tensor_parallel_size × pipeline_parallel_size together).
    data_parallel_size: int = Field(default=1, ge=1, le=1024)
    enable_expert_parallel: bool = False
    expert_routing_skew: float = Field(default=0.0, ge=0, le=4)
    num_gpus: int | None = Field(default=None, ge=1)
    preemption: Literal["recompute", "swap"] = "recompute"
    policy: Literal["fcfs", "priority"] = "fcfs"
    split_n: int = Field(default=0, ge=0, le=64)
    acceptance: Annotated[float, Field(ge=0, le=1)] | list[Annotated[float, Field(ge=0, le=1)]] | AcceptanceFile = 0.7
    draft: Literal["ngram"] | DraftModel = "ngram"
    seed: _Seed = 0
    on_too_long: Literal["reject", "truncate"] = "reject"  # prompt + output > max_model_len
    enable_prefix_caching: bool = True  # vllm_v1 only, on as in vLLM V1 (simulator/scheduler/prefix_cache.py)
    kv_offload: KvOffloadConfig | None = None  # KV tier in host memory (vLLM --kv-offloading-size), vllm_v1 only
    enforce_eager: bool = False  # vLLM --enforce-eager: no CUDA graphs (no padding to capture sizes, eager all-reduces; profiler/cuda_graphs.py)
    cpu_offload_gb: float = Field(default=0.0, ge=0, le=1e6, allow_inf_nan=False)  # GiB of weights per GPU in host memory, read over the host link every step (vLLM --cpu-offload-gb; profiler/weight_offload.py); dense BF16 models
    # experiments.deployment.async_scheduling_on resolves null; simulator/replica.py models it
    async_scheduling: bool | None = None  # vllm_v1 only: vLLM's --async-scheduling; null: as vLLM >= 0.14 (on; off with pipeline_parallel_size > 1, split_n on draft ngram)

    @field_validator("acceptance", mode="before")
    @classmethod
    def _acceptance_shape(cls, value: Any) -> Any:
        # Checked here so the error names what is valid instead of pydantic's union branches.
        valid = "a probability α in [0, 1], a list [α_1, ..., α_N] of them, or {file: CSV with proposed,accepted}"
        if isinstance(value, dict):
            return value
        values = value if isinstance(value, list) else [value]
        if not values or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1
                             for v in values):
            raise ValueError(f"acceptance must be {valid}")  # _validate adds what it got
        return value

    @field_validator("dtype", mode="before")
    @classmethod
    def _activation_dtype(cls, value: Any) -> Any:
        if value == "fp8":
            raise ValueError("engine.dtype is the activations' dtype (bf16); FP8 weights are engine.quantization: fp8 "
                             "(vLLM --quantization fp8) or an FP8 checkpoint's config.json")
        return value

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data: Any) -> Any:
        # vllm_v1's max_num_batched_tokens is its chunk_size (KEY_ALIASES); both given must agree.
        if not isinstance(data, dict) or not isinstance(data.get("scheduler"), str):
            return data  # a scheduler that is no name is refused by its own validator
        for alias, key in KEY_ALIASES.get(data["scheduler"], {}).items():
            if alias in data:
                if key in data and data[key] != data[alias]:
                    raise ValueError(f"engine.{alias} ({data[alias]}) and engine.{key} ({data[key]}) are one "
                                     f"setting for scheduler {data['scheduler']} (vLLM's --max-num-batched-tokens, "
                                     "the step's token budget): give one")
                data = {k: v for k, v in data.items() if k != alias} | {key: data[alias]}
        return data

    @field_validator("scheduler", mode="before")
    @classmethod
    def _known_scheduler(cls, value: Any) -> str:
        if not isinstance(value, str):  # a mapping or list in a config file: one message naming the choices
            raise ValueError(f"must be the name of one scheduler ({', '.join(sorted(SCHEDULERS))}), got {value!r}")
        if value not in SCHEDULERS:
            raise ValueError(f"unknown scheduler {value!r}; valid: {', '.join(sorted(SCHEDULERS))}")
        return value

    @model_validator(mode="after")
    def _supported(self) -> "EngineConfig":
        for key in self.model_fields_set & _SCHEDULER_SPECIFIC:
            if key not in SCHEDULER_KEYS[self.scheduler]:
                users = [s for s, keys in SCHEDULER_KEYS.items() if key in keys]
                raise ValueError(
                    f"engine.{key} is not used by scheduler {self.scheduler!r} (only by {', '.join(users)})"
                )
        check_router(self.router, "engine.router", self, "engine")
        check_kv_offload(self)
        if self.split_n and isinstance(self.acceptance, list) and len(self.acceptance) != self.split_n:
            raise ValueError(f"engine.acceptance lists {len(self.acceptance)} per-position probabilities but "
                             f"split_n is {self.split_n}: give exactly one per draft position")
        if self.async_scheduling:  # vLLM raises for these (vllm/config/vllm.py, VllmConfig.__post_init__)
            if self.pipeline_parallel_size > 1:
                raise ValueError("engine.async_scheduling true with pipeline_parallel_size > 1 is not modelled "
                                 "(vLLM turns async scheduling off with pipeline parallelism): set it false or leave it unset")
            if self.kv_offload is not None and self.kv_offload.cpu_gib > 0:
                raise ValueError("engine.async_scheduling true with engine.kv_offload: async scheduling beside the KV "
                                 "offload tier's loads is not modelled; set it false or remove kv_offload")
            if self.split_n and self.draft == "ngram":
                raise ValueError("engine.async_scheduling true with split_n and draft ngram: vLLM refuses async "
                                 "scheduling with its CPU n-gram drafter (only EAGLE/MTP, draft models and ngram_gpu); "
                                 "set it false, leave it unset, or give draft: {model: ...}")
        # vllm_v1 with either unset: vLLM's defaults for the card come later (experiments.vllm_defaults).
        defaults_pending = self.scheduler == "vllm_v1" and not {"chunk_size", "max_num_seqs"} <= self.model_fields_set
        if self.scheduler in CHUNKING_SCHEDULERS and self.max_num_seqs > self.chunk_size and not defaults_pending:
            raise ValueError(
                f"max_num_seqs ({self.max_num_seqs}) must be <= chunk_size ({self.chunk_size}): "
                "each decode takes one token of the budget"
            )
        return self

    @property
    def token_budget(self) -> int | None:
        """Per-step token budget: chunk_size (chunking) or max_num_batched_tokens (None = max_model_len)."""
        return self.chunk_size if self.scheduler in CHUNKING_SCHEDULERS else self.max_num_batched_tokens

    def used_settings(self) -> dict[str, Any]:
        """The settings this point's scheduler and router actually read, as table cells (for
        CSV/Parquet columns: lists and mappings such as `acceptance` or `draft` become JSON text;
        `router_overlap_weight` only beside router prefix_aware, the one that reads it)."""
        return {k: json.dumps(v) if isinstance(v, (dict, list)) else v
                for k, v in self.model_dump(mode="json").items()
                if (k not in _SCHEDULER_SPECIFIC or k in SCHEDULER_KEYS[self.scheduler])
                and k not in KEY_ALIASES.get(self.scheduler, {})
                and (k != "router_overlap_weight" or self.router == "prefix_aware")
                and (k != "kv_offload" or self.kv_offload is not None)
                and (k != "cpu_offload_gb" or self.cpu_offload_gb > 0)
                and (k != "enforce_eager" or self.enforce_eager)}


def check_router(router: str, router_key: str, e: EngineConfig, engine_key: str) -> None:
    """The router checks of a colocated engine (`engine.router` over `engine:`) and of a cluster
    pool (`cluster.<pool>.router` over the pool's merged engine, `check_cluster`): one rule for
    both. `router_key` / `engine_key` name where the user sets them.

    Raises:
        ValueError: router prefix_aware without scheduler vllm_v1 and enable_prefix_caching true
            (it routes by each replica's prefix cache, simulator/router.py); router_overlap_weight
            set explicitly beside another router (only prefix_aware reads it: the default, 1,
            is no setting and passes).
    """
    if router == "prefix_aware" and not (e.scheduler == "vllm_v1" and e.enable_prefix_caching):
        raise ValueError(f"{router_key} prefix_aware routes by each replica's prefix cache: it needs "
                         f"{engine_key}.scheduler vllm_v1 with {engine_key}.enable_prefix_caching true (got scheduler "
                         f"{e.scheduler!r}, enable_prefix_caching {e.enable_prefix_caching})")
    if "router_overlap_weight" in e.model_fields_set and router != "prefix_aware":
        raise ValueError(f"{engine_key}.router_overlap_weight applies only to router: prefix_aware (its weight of "
                         f"uncached prompt blocks against load); {router_key} {router} does not read it: remove it "
                         f"or set {router_key}: prefix_aware")
