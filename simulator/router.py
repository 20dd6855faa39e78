"""Global routing of arriving requests across replicas (Vidur's global schedulers, and the
KV-cache-aware routers of llm-d and NVIDIA Dynamo)."""
from __future__ import annotations

from typing import Callable, Protocol

import numpy as np

from traces import Request

ROUTERS = ("round_robin", "least_outstanding", "random", "vllm_dp", "prefix_aware", "session_affinity")


class _HasOutstanding(Protocol):
    num_outstanding: int


class Router:
    """Picks the replica for each arriving request.

    Policies (Vidur `vidur/scheduler/global_scheduler/`): `round_robin` (request i to replica
    i mod R), `least_outstanding` (fewest submitted-but-unfinished requests; lowest index on
    ties; Vidur's `lor`), `random` (uniform, seeded); `vllm_dp`: vLLM's data-parallel load balancer
    (`DPLBAsyncMPClient.get_core_engine_for_request`, vllm/v1/engine/core_client.py): the lowest
    waiting × 4 + running of each replica's scheduler, the lowest index on ties.

    `prefix_aware`: NVIDIA Dynamo's KV router (ai-dynamo/dynamo docs/design_docs/router_design.md,
    "Cost formula": `cost = overlap_score_weight * prefill_blocks + decode_blocks`, lowest cost
    wins, `--kv-overlap-score-weight` default 1). Per replica, in KV blocks of its block size:
      prefill_blocks = ceil(prompt_tokens / block_size) - the leading prompt blocks its prefix
                       cache holds (`PrefixCachingBlockManager.num_cached_prefix_blocks`, what
                       admission would hit now: Dynamo's KvIndexer `find_matches_for_request`,
                       here read exactly from the replica instead of from KV events);
      decode_blocks  = blocks its running requests hold (free cached blocks excluded) + the
                       prompt blocks of its waiting ones (Dynamo's "active blocks" of the
                       requests routed to a worker and not finished).
    A replica with a KV offload tier (`engine.kv_offload`, `simulator.scheduler.kv_offload`)
    also counts the prompt blocks after its GPU hit that the tier holds (`KvOffload.num_hit_blocks`),
    each as the share of its recompute a load saves: prefill_blocks −= w × tier blocks, with
    w = max(0, 1 − load time of a block over the host link / its recompute time), the recompute
    time being the replica's cost model's price of a token-budget-sized prefill chunk on an
    empty batch per token (so a tier block counts nearly as a GPU hit on a fast link, and not at all
    where loading is slower than computing). This weighting is the simulator's own: Dynamo's
    formula counts the GPU overlap only.
    So score = overlap_weight × cached blocks − load, up to a term equal on every replica;
    llm-d's scheduler (llm-d-inference-scheduler: prefix-cache scorer weighted against its
    queue and KV-utilisation scorers) combines the same two signals. The lowest index wins ties
    (deterministic: Dynamo's `router_temperature` 0). A replica without prefix caching holds 0
    cached blocks, so the policy then balances load only. Cost per arrival: one prefix lookup
    (O(hit blocks)) and one pass over the waiting queue per replica; nothing per step.

    `session_affinity`: every turn of a conversation goes to the replica that served its
    previous turn (a sticky session, as llm-d's session-affinity scorer keeps one by a header);
    a conversation's first turn goes to the least outstanding replica (lowest index on ties).

    Args:
        policy: one of `ROUTERS`.
        replicas: the replicas (`num_outstanding`; `scheduler` for `vllm_dp` and `prefix_aware`).
        seed: seeds `random`.
        overlap_weight: `prefix_aware`'s weight of the prefill blocks (>= 0; 0: load only).
        session_of: request id -> its conversation (`traces.SessionWorkload.session_of`), for
            `session_affinity`.

    Raises:
        ValueError: unknown policy (lists the valid ones); `session_affinity` without
            `session_of`; a negative or non-finite overlap_weight.
    """

    def __init__(self, policy: str, replicas: list[_HasOutstanding], seed: int = 0, overlap_weight: float = 1.0,
                 session_of: Callable[[int], int] | None = None):
        if policy not in ROUTERS:
            raise ValueError(f"unknown router {policy!r}; valid: {', '.join(ROUTERS)}")
        if policy == "session_affinity" and session_of is None:
            raise ValueError("router session_affinity needs requests that belong to conversations "
                             "(a sessions workload, trace kind sessions)")
        if not (0 <= overlap_weight < float("inf")):
            raise ValueError(f"overlap_weight must be a finite number >= 0, got {overlap_weight!r}")
        self.policy = policy
        self.replicas = replicas
        self.overlap_weight = float(overlap_weight)
        self.session_of = session_of
        self._count = 0
        self._rng = np.random.default_rng(seed)
        self._replica_of_session: dict[int, int] = {}
        self._tier_weights: dict[int, float] = {}  # replica index -> `_tier_weight`

    def pick(self, request: Request | None = None) -> int:
        """Index of the replica for the next request (`request` is needed by `prefix_aware` and
        `session_affinity`).

        Raises:
            ValueError: `prefix_aware` or `session_affinity` without the request.
        """
        n = len(self.replicas)
        if self.policy in ("prefix_aware", "session_affinity") and request is None:
            raise ValueError(f"router {self.policy} needs the request to pick a replica")
        if self.policy == "round_robin":
            index = self._count % n
        elif self.policy == "least_outstanding":
            index = self._least_outstanding()
        elif self.policy == "vllm_dp":
            index = vllm_dp_pick([(len(r.scheduler.waiting), len(r.scheduler.running)) for r in self.replicas])
        elif self.policy == "prefix_aware":
            index = min(range(n), key=lambda i: (self.prefix_cost(i, request), i))
        elif self.policy == "session_affinity":
            session = self.session_of(request.request_id)
            index = self._replica_of_session.get(session)
            if index is None:
                index = self._replica_of_session[session] = self._least_outstanding()
        else:
            index = int(self._rng.integers(n))
        self._count += 1
        return index

    def _least_outstanding(self) -> int:
        return min(range(len(self.replicas)), key=lambda i: self.replicas[i].num_outstanding)

    def prefix_cost(self, index: int, request: Request) -> float:
        """Dynamo's cost of sending `request` to replica `index` (class docstring), in KV blocks:
        overlap_weight × prompt blocks not cached there + blocks its requests hold or wait for."""
        scheduler = self.replicas[index].scheduler
        bm = scheduler.block_manager
        size = bm.block_size
        cached = bm.num_cached_prefix_blocks(request) if hasattr(bm, "num_cached_prefix_blocks") else 0
        prefill_blocks = -(-request.prompt_tokens // size) - cached
        offload = getattr(scheduler, "kv_offload", None)
        if offload is not None:
            tier_blocks = offload.num_hit_blocks(request, cached)
            if tier_blocks:
                prefill_blocks -= self._tier_weight(index) * tier_blocks
        waiting_blocks = sum(-(-seq.request.prompt_tokens // size) for seq in scheduler.waiting)
        return self.overlap_weight * prefill_blocks + bm.num_used + waiting_blocks

    def _tier_weight(self, index: int) -> float:
        """max(0, 1 - a block's load time / its recompute time) on replica `index` (class
        docstring), computed once per replica.

        Raises:
            ValueError: the replica has no cost model to price a recompute (`pricer`).
        """
        weight = self._tier_weights.get(index)
        if weight is None:
            replica = self.replicas[index]
            pricer = getattr(replica, "pricer", None)
            if pricer is None:
                raise ValueError(f"router prefix_aware with a KV offload tier needs replica {index}'s cost model "
                                 "to weigh a load against a recompute")
            scheduler = replica.scheduler
            chunk = scheduler.token_budget  # a step's prefill tokens at most (`chunk_size`)
            chunk_s = pricer.cost_model.predict_step_s(np.array([chunk]), np.array([0]), np.array([True]))
            recompute_s = chunk_s / chunk * scheduler.kv_offload.block_size
            weight = self._tier_weights[index] = max(0.0, 1.0 - scheduler.kv_offload.load_s_per_block / recompute_s)
        return weight


def vllm_dp_pick(loads: list[tuple[int, int]]) -> int:
    """vLLM's DP load balancer: the rank with the lowest 4 × waiting + running of each rank's
    (waiting, running), the first on ties (`DPLBAsyncMPClient.get_core_engine_for_request`,
    vllm/v1/engine/core_client.py). `Router`'s `vllm_dp` and the DP instances of a disaggregated
    pool (`simulator.disaggregated`) both pick by it."""
    return min(range(len(loads)), key=lambda i: 4 * loads[i][0] + loads[i][1])
