"""`cluster:`: prefill/decode disaggregation: the pools, their link, each pool's point as it runs
(`pool_point`) and the checks of the whole cluster (`check_cluster`)."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from experiments.config.base import _MAX_REPLICAS, _Strict, validation_problems
from experiments.config.engine import EngineConfig, check_router
from experiments.config.model_and_device import _check_parallel_layout, check_routing_skew, engine_gpus
from experiments.config.trace import SessionsTrace
from profiler import get_device_spec, get_model_spec
from profiler.unknown_key import unknown_key_message

# `SweepConfig` (experiments.config.sweep) is named in annotations only, as text: it imports this module.


class PoolConfig(_Strict):
    """One pool of a disaggregated cluster (`cluster.prefill` or `cluster.decode`): its replicas,
    device and router, and the `engine:` keys that differ for it (merged over the point's
    `engine:`, then checked as `engine:` is; errors name `cluster.<pool>.engine`). A pool's
    router is checked as a colocated one over the pool's engine (prefix_aware needs vllm_v1 with
    prefix caching); `engine.num_gpus` counts every pool's GPUs (replicas × DP × TP × PP). With
    `engine.data_parallel_size` D > 1 each instance is one vLLM engine of D DP ranks (with
    `enable_expert_parallel`, a wide-EP mixture of experts), requests spread over its ranks by
    vLLM's DP balancer as a colocated DP engine's are (simulator/disaggregated.py); DP with PP, and
    a mixture of experts' DP with swap or a draft model, are refused as colocated; router
    prefix_aware over DP instances is refused (the balancer reads no prefix cache). A pool's DP is
    its own key only: the point's `engine.data_parallel_size` > 1 beside `cluster:` is refused."""

    replicas: int = Field(default=1, ge=1, le=_MAX_REPLICAS)  # instances in the pool
    device: str | dict[str, Any] | None = None  # default: the point's device
    router: Literal["round_robin", "least_outstanding", "random", "prefix_aware",  # prefix_aware: cache hit first; session_affinity: a conversation's turns to one instance
                    "session_affinity"] = "least_outstanding"
    engine: dict[str, Any] = {}  # e.g. {tensor_parallel_size: 2, chunk_size: 2048} or {data_parallel_size: 4, enable_expert_parallel: true}; not replicas, router, router_overlap_weight, num_gpus


class LinkConfig(_Strict):
    """The KV link from a prefill instance into a decode instance (simulator/disaggregated.py:
    latency + bytes / bandwidth per transfer, one at a time into each decode instance)."""

    bandwidth_gb_s: float | Literal["device"] = (  # GB/s per TP rank (1e9 B/s), > 0; device: its GPU-to-GPU link
        "device")
    latency_s: float = Field(default=0.0, ge=0, le=60)  # per transfer
    layer_pipelined: bool = False  # stream each layer's KV as the last prefill step computes it

    @field_validator("bandwidth_gb_s", mode="before")
    @classmethod
    def _bandwidth(cls, value: Any) -> Any:
        # One message instead of pydantic's two union branches.
        if value == "device":
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise ValueError("must be a bandwidth > 0 in GB/s (a link of zero bandwidth moves no KV) or 'device'")
        return value


class ClusterConfig(_Strict):
    """Prefill/decode disaggregation (simulator/disaggregated.py): a request is prefilled in the
    prefill pool (TTFT ends there), its prompt's KV crosses the link, and it decodes in the decode
    pool. Without `cluster:` the point's replicas are colocated (`engine.replicas`)."""

    prefill: PoolConfig = PoolConfig()
    decode: PoolConfig = PoolConfig()
    link: LinkConfig = LinkConfig()


# ----- prefill/decode disaggregation (`cluster:`, simulator/disaggregated.py) -------------------
POOLS = ("prefill", "decode")


# Engine keys that hold for the whole point, never one pool: the pool sets its own replicas and
# router (`cluster.<pool>.replicas` / `.router`), no pool reads an overlap weight (its prefix_aware
# router picks the longest cached prefix, then the least outstanding: simulator/disaggregated.py
# `simulator.pool.PoolRouter`), and num_gpus checks every pool's GPUs together (`check_cluster`).
_POINT_ONLY_ENGINE_KEYS = ("replicas", "router", "router_overlap_weight", "num_gpus")


def pool_point(point: "SweepConfig", pool: str) -> "SweepConfig":
    """The point as one pool of its cluster runs it: the point's `engine:` keys (less
    `_POINT_ONLY_ENGINE_KEYS`), then the pool's `engine:` keys, its `replicas` and `router`; the
    pool's device (or the point's); no `cluster`.

    Raises:
        ValueError: the merged engine keys are invalid (named as `cluster.<pool>.engine: ...`).
    """
    spec = getattr(point.cluster, pool)
    keys = point.engine.model_dump(exclude_unset=True)
    for key in _POINT_ONLY_ENGINE_KEYS:
        keys.pop(key, None)
    keys.update(spec.engine)
    keys["replicas"] = spec.replicas
    try:
        engine = EngineConfig(**keys)
    except ValidationError as exc:
        problems = validation_problems(exc, root_key="engine", message=lambda e: (
            unknown_key_message(EngineConfig, e["loc"], _POINT_ONLY_ENGINE_KEYS) if e["type"] == "extra_forbidden"
            else e["msg"].removeprefix("Value error, ")))  # as every caller shows it (the xPyD search's layouts too)
        raise ValueError(f"cluster.{pool}.engine: {problems}") from None
    device = spec.device if spec.device is not None else point.device
    if engine.scheduler == "vllm_v1":  # vLLM's defaults for the pool's own card (experiments.vllm_defaults)
        from experiments.vllm_defaults import with_vllm_defaults
        from profiler import get_device_spec, get_model_spec
        try:
            engine = with_vllm_defaults(engine, get_device_spec(device), get_model_spec(point.model).max_model_len)
        except ValueError as exc:
            raise ValueError(f"cluster.{pool}.engine: {str(exc).removeprefix('Value error, ')}") from None
    # The pool's router, set after validation: `check_cluster` checks it under its own key.
    engine = engine.model_copy(update={"router": spec.router})
    return point.model_copy(update={"engine": engine, "device": device, "cluster": None})


def pool_points(point: "SweepConfig") -> dict[str, "SweepConfig"]:
    """Each pool of a `cluster:` point as `pool_point` makes it, by name in `POOLS` order: built
    once for the readers that take them (`pool_gpus`, `cluster_label`,
    `experiments.deployment.build_link`, ...).

    Raises:
        ValueError: as `pool_point` (not for a validated point)."""
    return {pool: pool_point(point, pool) for pool in POOLS}


def pool_gpus(point: "SweepConfig", pools: dict[str, "SweepConfig"] | None = None) -> dict[str, int]:
    """GPUs of each pool of a `cluster:` point: replicas × data_parallel_size × tensor_parallel_size
    × pipeline_parallel_size of its `pool_point` engine (`engine_gpus`: every DP rank's GPUs).
    `pools`: the point's `pool_points` where already built."""
    pools = pool_points(point) if pools is None else pools
    return {pool: engine_gpus(pools[pool].engine) for pool in POOLS}


def cluster_label(point: "SweepConfig", pools: dict[str, "SweepConfig"] | None = None) -> str:
    """The pools of a `cluster:` point by replicas and parallelism: "2P(TP1) 3D(TP2)", a pool's
    pipeline stages when > 1 ("1P(TP2 PP2) 2D(TP1)"), its DP ranks per instance and EP degree
    when > 1 ("1P(TP2) 2D(TP1 DP4 EP4)": two DP4 engines with expert parallelism). `pools`: the
    point's `pool_points` where already built."""
    pools = pool_points(point) if pools is None else pools
    parts = []
    for pool in POOLS:
        e = pools[pool].engine
        pp = f" PP{e.pipeline_parallel_size}" if e.pipeline_parallel_size > 1 else ""
        dp = f" DP{e.data_parallel_size}" if e.data_parallel_size > 1 else ""
        ep = f" EP{e.data_parallel_size * e.tensor_parallel_size}" if e.enable_expert_parallel else ""
        parts.append(f"{e.replicas}{pool[0].upper()}(TP{e.tensor_parallel_size}{pp}{dp}{ep})")
    return " ".join(parts)


_NO_POOL_WEIGHT = ("it applies only to a colocated engine.router: prefix_aware; a pool's prefix_aware router picks "
                   "the longest cached prefix, then the least outstanding, with no weight: remove it")


def check_cluster(point: "SweepConfig") -> None:
    """What `cluster:` must satisfy before anything runs (`SweepConfig._cluster_pools`).

    Raises:
        ValueError: `engine.replicas` set beside `cluster:` (`engine.router_overlap_weight` is refused
            before validation, `SweepConfig._no_weight_beside_cluster`), `engine.data_parallel_size`
            > 1 beside it (a pool's DP is `cluster.<pool>.engine.data_parallel_size`), or
            a pool engine's replicas, router, router_overlap_weight or num_gpus
            (`_POINT_ONLY_ENGINE_KEYS`: nothing reads them there); a pool's `session_affinity`
            router without a sessions trace; a pool engine that is invalid, or whose data / expert
            parallel settings are not modelled (`_check_parallel_layout`: DP with PP, EP on a dense
            model, ...; router prefix_aware over DP instances), a TP degree the model's heads do not split into or a PP degree
            above its layers (`experiments.planning.layouts.tp_pp_problem`), an unknown pool
            device; a pool's router the pool's engine cannot serve (`check_router`, as colocated:
            prefix_aware needs vllm_v1 with prefix caching); pools whose KV cache dtypes differ; `engine.num_gpus` other than every pool's GPUs together (`pool_gpus`).
            Each names the key.
    """
    if "replicas" in point.engine.model_fields_set:
        raise ValueError("engine.replicas is not read with cluster: set cluster.prefill.replicas and "
                         "cluster.decode.replicas")
    if point.engine.data_parallel_size > 1:  # else both pools inherit it, labelled as if one DP engine ran
        raise ValueError(f"engine.data_parallel_size {point.engine.data_parallel_size} beside cluster: a pool's "
                         "instance is a DP engine by its own key: set cluster.prefill.engine.data_parallel_size "
                         "and/or cluster.decode.engine.data_parallel_size, and engine.data_parallel_size 1")
    for pool in POOLS:
        for key in _POINT_ONLY_ENGINE_KEYS:
            if key in getattr(point.cluster, pool).engine:
                raise ValueError(f"cluster.{pool}.engine.{key} is not read: " + {
                    "replicas": f"set cluster.{pool}.replicas", "router": f"set cluster.{pool}.router",
                    "router_overlap_weight": _NO_POOL_WEIGHT,
                    "num_gpus": "engine.num_gpus checks the GPUs of the whole cluster (every pool's replicas × "
                                "data_parallel_size × tensor_parallel_size × pipeline_parallel_size)"}[key])
    for pool in POOLS:
        if getattr(point.cluster, pool).router == "session_affinity" and not isinstance(point.trace, SessionsTrace):
            raise ValueError(f"cluster.{pool}.router session_affinity sends a conversation's turns to one instance: "
                             f"it needs trace kind sessions, not {point.trace.kind}")
    from experiments.planning.layouts import tp_pp_problem  # the planning layer's: imported when used

    model = get_model_spec(point.model)
    pools = {}  # each pool's point, built once, pool by pool (a pool's errors before the next pool's)
    for pool in POOLS:
        pools[pool] = pool_point(point, pool)
        e = pools[pool].engine
        # A pool's instance may be a DP engine (`cluster.<pool>.engine.data_parallel_size`), checked as a
        # colocated one is, less the one-engine rule: the pool's replicas are its instances.
        _check_parallel_layout(e, model, check_num_gpus=False, key=f"cluster.{pool}.engine", pool=True)
        if e.data_parallel_size > 1 and e.router == "prefix_aware":
            raise ValueError(f"cluster.{pool}.router prefix_aware with cluster.{pool}.engine.data_parallel_size "
                             f"{e.data_parallel_size} is not modelled: vLLM's DP balancer places a request on a rank "
                             "without reading its prefix cache; use least_outstanding, round_robin or random")
        problem = tp_pp_problem(model, e.tensor_parallel_size, e.pipeline_parallel_size)
        if problem is not None:
            raise ValueError(f"cluster.{pool}.engine.{problem[0]}: {model.name}: {problem[1]}")
        device = getattr(point.cluster, pool).device
        if device is not None:
            try:
                get_device_spec(device)
            except ValueError as exc:
                raise ValueError(f"cluster.{pool}.device: {exc}") from None
        check_routing_skew(point.cost_model, model, get_device_spec(pools[pool].device), e, f"cluster.{pool}.engine")
        check_router(e.router, f"cluster.{pool}.router", e, f"cluster.{pool}.engine")
    dtypes = {pool: p.engine.kv_cache_dtype for pool, p in pools.items()}
    if len(set(dtypes.values())) > 1:
        raise ValueError(f"cluster: the pools' kv_cache_dtype differ ({dtypes}); the decode pool reads the "
                         "prefill pool's KV as it is, so set one kv_cache_dtype")
    num_gpus = point.engine.num_gpus
    gpus = pool_gpus(point, pools)
    if num_gpus is not None and num_gpus != sum(gpus.values()):
        shapes = " + ".join(f"{pool} {e.replicas} × {e.data_parallel_size} × {e.tensor_parallel_size} × "
                            f"{e.pipeline_parallel_size}"
                            for pool, e in ((pool, p.engine) for pool, p in pools.items()))
        raise ValueError(f"engine.num_gpus is {num_gpus} but the cluster's pools hold {sum(gpus.values())} GPUs "
                         f"(replicas × data_parallel_size × tensor_parallel_size × pipeline_parallel_size: {shapes}); "
                         "make them match")
