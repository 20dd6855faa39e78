"""A pool of a disaggregated cluster (`simulator.disaggregated`): its configuration (`Pool`), the
scheduler wrapper that holds KV for transfers, its instances (a DP engine's ranks together, in
lockstep for MoE) and its router. The semantics, with vLLM 0.19's code paths, are in
`simulator.disaggregated`'s docstring."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import simpy

from simulator.data_parallel import DataParallelGroup, DataParallelRank
from simulator.pricing import StepPricer
from simulator.records import RequestRecords
from simulator.replica import Replica
from simulator.router import ROUTERS, Router
from simulator.scheduler import BatchPlan, FinishedRequest, Scheduler, StepOutcome
from simulator.step_log import StepLog
from traces import Request


# vllm_dp balances the DP ranks of one engine, not a pool of instances.
POOL_ROUTERS = tuple(r for r in ROUTERS if r != "vllm_dp")


@dataclass
class Pool:
    """One pool's instances: a scheduler per instance, or per DP rank (same config), a pricer,
    a router policy.

    A pricer with `pipeline_stages` P > 1 makes each instance a pipeline of P stages, run as a
    colocated replica runs one (`simulator.replica.Replica`: up to P micro-batches in flight).
    `data_parallel_size` D > 1 makes each instance a DP engine of D ranks (module docstring):
    `schedulers` then holds instances × D, instance by instance (ranks 0..D-1 of the first,
    then of the second, ...); with a cost model that has `dp_step_s` (a mixture of experts) an
    instance's ranks step in lockstep, priced by it.

    Raises:
        ValueError: no schedulers, an unknown router, a scheduler count that is not a multiple of
            `data_parallel_size`, DP with pipeline stages or with the `prefix_aware` router (vLLM's
            DP balancer places a request on a rank without reading its prefix cache).
    """

    schedulers: list[Scheduler]
    pricer: StepPricer
    router: str = "round_robin"
    data_parallel_size: int = 1

    def __post_init__(self) -> None:
        if not self.schedulers:
            raise ValueError("a pool needs at least one replica")
        if self.router not in POOL_ROUTERS:
            raise ValueError(f"unknown router {self.router!r}; valid: {', '.join(POOL_ROUTERS)}")
        d = self.data_parallel_size
        if d < 1 or len(self.schedulers) % d:
            raise ValueError(f"a pool of data_parallel_size {d} needs a multiple of {d} schedulers "
                             f"(instances × DP ranks), got {len(self.schedulers)}")
        if d > 1 and self.pricer.pipeline_stages > 1:
            raise ValueError("a data-parallel pool with pipeline stages is not modelled")
        if d > 1 and self.router == "prefix_aware":
            raise ValueError("router prefix_aware over data-parallel instances is not modelled: vLLM's DP "
                             "balancer places a request on a rank without reading its prefix cache")

    @property
    def lockstep(self) -> bool:
        """Whether an instance's DP ranks step together (a mixture of experts' cost model)."""
        return self.data_parallel_size > 1 and hasattr(self.pricer.cost_model, "dp_step_s")


class PoolScheduler:
    """A pool instance's scheduler with KV held outside it for transfers (everything else delegated).

    A transfer's hold is a block-table entry under the key -1 - request_id in the scheduler's own
    block manager, so admissions and growth see those blocks as taken. With holds, the scheduler
    may have work it cannot schedule (every free block held); `Replica` takes an empty plan with
    nothing executing for a stall, so while holds exist and nothing executes `has_work` tries
    the next plan first and reports no work when it is empty: the replica then waits until
    `release` wakes it. The plan it tried is the one `schedule` returns (same time: the replica
    calls both at one instant; with pipeline stages too, as nothing executing leaves the first
    stage free). While micro-batches execute, a pipelined replica itself waits out an empty plan.
    """

    def __init__(self, inner: Scheduler, env: simpy.Environment):
        self.inner = inner
        self.env = env
        self.replica: PoolReplica | None = None
        self.on_step_end: Callable[[], None] | None = None
        self.transfer_waiting: Callable[[], bool] = lambda: False
        self.num_holds = 0
        self._tried: BatchPlan | None = None
        self._arriving: dict[int, FinishedRequest] = {}  # request id -> its prefill's record
        self.last_step_start_s = -math.inf  # start of the latest step (of the one completing, in complete_step)
        self._step_start_s: dict[int, float] = {}  # id(plan) -> its start, for micro-batches in flight

    def __getattr__(self, name):
        return getattr(self.inner, name)

    # ----- holds ------------------------------------------------------------------------------
    def hold(self, request_id: int, num_tokens: int) -> None:
        """Take blocks for `num_tokens` of a transfer's KV. Raises RuntimeError if they are not free."""
        self.inner.block_manager.grow_to(-1 - request_id, num_tokens)
        self.num_holds += 1

    def can_hold(self, num_tokens: int) -> bool:
        return self.inner.block_manager.can_admit(num_tokens)

    def release(self, request_id: int) -> None:
        self.inner.block_manager.free(-1 - request_id)
        self.num_holds -= 1
        self.replica.wake()

    # ----- the Scheduler API the replica calls ------------------------------------------------
    def expect(self, prefill: FinishedRequest) -> None:
        """The next `add_request` of this request id continues the prefill `prefill` recorded."""
        self._arriving[prefill.request_id] = prefill

    def add_request(self, request: Request) -> FinishedRequest | None:
        rejection = self.inner.add_request(request)
        prefill = self._arriving.pop(request.request_id, None)
        if rejection is None and prefill is not None:
            continue_after_prefill(self.inner, request.request_id, prefill)
        return rejection

    def has_work(self) -> bool:
        if self._tried is not None:
            return True
        inner = self.inner
        if not inner.has_work():
            return False
        if not self.num_holds or inner.num_executing or self.decode_window()[1] >= 2:
            return True
        # vllm_v1 ends its retry loop on a pass that schedules and preempts nothing
        # (`VllmV1Scheduler._build_plan`), as vLLM's engine idles until the transfer frees blocks.
        plan = inner.schedule(self.env.now)
        if plan.is_empty:
            return False  # every block it needs is held for a transfer: `release` wakes the replica
        self._tried = plan
        return True

    def decode_window(self):
        """No window while a transfer waits for this instance: it may start at any step
        boundary, and a window's steps take blocks it assumed free."""
        if self._tried is not None or self.transfer_waiting():
            return self.inner.running, 0
        return self.inner.decode_window()

    def schedule(self, now_s: float) -> BatchPlan:
        plan, self._tried = self._tried, None
        if plan is None:
            plan = self.inner.schedule(now_s)
        self.last_step_start_s = now_s
        if not plan.is_empty:
            self._step_start_s[id(plan)] = now_s
        if self.on_step_end is not None:  # admissions emptied `waiting`: a transfer may start (vLLM loop 2)
            self.on_step_end()
        return plan

    def complete_step(self, plan: BatchPlan, outcome: StepOutcome, now_s: float) -> list[FinishedRequest]:
        # The prefills this step finishes read their last step's start (a layer-pipelined transfer).
        self.last_step_start_s = self._step_start_s.pop(id(plan), self.last_step_start_s)
        finished = self.inner.complete_step(plan, outcome, now_s)
        self._after_step()
        return finished

    def advance_decodes(self, step_end_s: list[float]):
        result = self.inner.advance_decodes(step_end_s)
        self._after_step()
        return result

    def _after_step(self) -> None:
        """A step boundary: a queued transfer may start (it sees the state after the next plan,
        which the replica builds at this same instant)."""
        if self.on_step_end is not None:
            self.on_step_end()


def continue_after_prefill(scheduler: Scheduler, request_id: int, prefill: FinishedRequest) -> None:
    """Give the just-queued sequence of `request_id` the state its prefill left: the prompt's KV
    computed, the first token generated (at `prefill.first_token_s`), and the prefill's
    scheduling time, preemptions and prefix-cache hit. Its token list starts empty: the first
    token's time is the prefill's (added back to the records by `merge_first_tokens`)."""
    seq = next(s for s in scheduler.waiting if s.request_id == request_id)
    seq.num_computed_tokens = seq.request.prompt_tokens
    seq.num_generated_tokens = 1
    seq.first_token_s = prefill.first_token_s
    seq.first_scheduled_s = prefill.first_scheduled_s
    seq.num_preemptions = prefill.num_preemptions
    seq.recomputed_tokens = prefill.recomputed_tokens
    seq.num_cached_tokens = prefill.cached_tokens
    seq.resumed_cached_tokens = prefill.resumed_cached_tokens


class PoolReplica(Replica):
    """A `Replica` that a released KV hold can wake (a cluster's replicas take no windows:
    `simulate_disaggregated`)."""

    def wake(self) -> None:
        self._signal()


class LockstepRank(DataParallelRank):
    """A DP rank of a lockstep pool instance, as the cluster sees a `PoolReplica`: `submit`,
    `num_outstanding`, `replica_id`, records and steps, plus `wake` (a released hold)."""

    def __init__(self, group: "LockstepInstance", scheduler: "PoolScheduler", replica_id: int,
                 records: RequestRecords, steps: StepLog, on_finish: Callable[[FinishedRequest], None]):
        super().__init__(group, scheduler, replica_id, records, steps)
        self.on_finish = on_finish

    def wake(self) -> None:
        self.group.signal()


class LockstepInstance(DataParallelGroup):
    """A pool instance that is one MoE DP engine: `DataParallelGroup`'s lockstep loop over the
    ranks' `PoolScheduler`s (their holds and transfer hooks), each rank with its own replica id
    and finish callback (a prefill rank's names the rank whose blocks the transfer reads)."""

    def __init__(self, env: simpy.Environment, schedulers: list["PoolScheduler"], cost_model, outcome_fn,
                 replica_ids: list[int], on_finish: list[Callable[[FinishedRequest], None]],
                 records: list[RequestRecords], steps: list[StepLog]):
        super().__init__(env, schedulers, cost_model, outcome_fn, None, records, steps)
        self.ranks = [LockstepRank(self, *rank) for rank in zip(schedulers, replica_ids, records, steps, on_finish)]

    def record(self, rank: LockstepRank, finished: list[FinishedRequest]) -> None:
        rank.records.add(finished)
        for f in finished:
            rank.on_finish(f)


class Instance:
    """One instance of a pool as its router sees it: its DP ranks' members (replicas, or decode
    inboxes), outstanding requests summed over them (one member without DP)."""

    def __init__(self, members: list):
        self.members = members

    @property
    def num_outstanding(self) -> int:
        return sum(m.num_outstanding for m in self.members)


class PrefillRecords(RequestRecords):
    """A prefill rank's records: none kept (~110 bytes a request before). What it finishes is a
    one-token prefill the cluster continues (`_Cluster._prefilled`): the request's row is the
    decode pool's or the cluster's own."""

    def note_step_end(self, end_s: float) -> None:
        pass

    def note_step_ends(self, ends_s: list[float]) -> None:
        pass

    def add(self, finished: list[FinishedRequest]) -> None:
        pass


def instance_ranks(env: simpy.Environment, pool: Pool, schedulers: list[PoolScheduler], replica_ids: list[int],
                    outcome_fn, on_finish: list, records: list[RequestRecords], steps: list[StepLog]) -> list:
    """The ranks of one instance of `pool`, each set as its scheduler's `replica`: a
    `PoolReplica` per rank (one without DP; a dense model's independent DP ranks; no windows:
    `simulate_disaggregated`), or the `LockstepRank`s of one `LockstepInstance` (a mixture
    of experts' DP ranks)."""
    if pool.lockstep:
        ranks = LockstepInstance(env, schedulers, pool.pricer.cost_model, outcome_fn, replica_ids, on_finish,
                                  records, steps).ranks
    else:
        ranks = [PoolReplica(env, s, pool.pricer, outcome_fn, i, f, None, records=rec, steps=st)
                 for s, i, f, rec, st in zip(schedulers, replica_ids, on_finish, records, steps)]
    for s, rank in zip(schedulers, ranks):
        s.replica = rank
    return ranks


def pool_instances(members: list, data_parallel_size: int) -> list[Instance]:
    """The pool's instances over its per-rank members (replicas or inboxes), in rank order."""
    return [Instance(members[k:k + data_parallel_size]) for k in range(0, len(members), data_parallel_size)]


class PoolRouter:
    """`simulator.router.Router` over a pool's instances (`Instance`: a DP engine's ranks
    together), plus `prefix_aware`: the instance whose prefix cache holds the longest prefix of
    the request (`PrefixCachingBlockManager.lookup`), the least outstanding among equals (llm-d's
    and Dynamo's KV-aware routing, reduced to its core: cache hit first, then load). `schedulers`:
    each instance's first rank's, which `prefix_aware` reads (`Pool` refuses it with DP)."""

    def __init__(self, policy: str, members: list, schedulers: list[PoolScheduler], seed: int,
                 session_of: Callable[[int], int] | None = None):
        self.policy = policy
        self.members = members
        self.schedulers = schedulers
        self.router = Router("least_outstanding" if policy == "prefix_aware" else policy, members, seed,
                             session_of=session_of)

    def pick(self, request: Request) -> int:
        if len(self.members) == 1:
            return 0
        if self.policy != "prefix_aware" or not request.prefix_hash_ids:
            return self.router.pick(request)
        best, best_key = 0, None
        for index, (member, s) in enumerate(zip(self.members, self.schedulers)):
            bm = s.inner.block_manager
            lookup = getattr(bm, "lookup", None)
            hit = len(lookup(request, (request.prompt_tokens - 1) // bm.block_size)) if lookup else 0
            key = (-hit, member.num_outstanding)
            if best_key is None or key < best_key:
                best, best_key = index, key
        return best
