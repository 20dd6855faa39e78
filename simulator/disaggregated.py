"""Prefill/decode disaggregation: a prefill pool and a decode pool of replicas joined by a KV link.

A request is prefilled in the prefill pool (chunked or whole, within that pool's token budget)
and produces its first token there; its prompt's KV cache then crosses the link into a decode
instance, which generates the rest. This is the flow of vLLM 0.19's disaggregated serving with a
KV connector (NixlConnector, `vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py`):

- the router sends the request to a prefill instance with `max_tokens=1` and
  `kv_transfer_params.do_remote_decode` (`tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`);
  that instance finishes it after one token (FINISHED_LENGTH_CAPPED) and, in
  `Scheduler._free_request` → `_connector_finished` → `NixlConnectorScheduler.request_finished`,
  keeps its KV blocks (`delay_free_blocks`) until the decode side has read them
  (`_update_from_kv_xfer_finished`: `finished_sending` → `_free_blocks`). So **the prompt's KV
  is held in the prefill pool until the transfer ends**;
- the decode instance allocates the blocks for the remote tokens when its scheduler admits the
  request from `waiting` (`get_num_new_matched_tokens` + `allocate_slots` in loop 2, behind the
  requests already waiting, under max_num_seqs), parks it in WAITING_FOR_REMOTE_KVS while the
  connector pulls the KV, and returns it to WAITING once received
  (`Scheduler._update_waiting_for_remote_kv`). So **the KV is held in the decode pool from the
  transfer's start**, and a decode pool that cannot allocate stops the transfers: back-pressure
  that reaches the prefill pool through its held blocks.

TTFT ends when the prefill instance produces the first token (the issue's definition; Dynamo
returns the prefill worker's token). vLLM's toy proxy instead streams from the decode instance,
whose first token comes after the transfer; here that wait shows in the request's first TBT gap.
vLLM's decode instance also recomputes the last prompt token when every prompt block arrived
(`num_computed_tokens -= 1` in `_update_waiting_for_remote_kv`); here the decode instance starts
with the prompt's KV and the first token, and its first step decodes token 2 (one step fewer).

KV bytes moved per request: prompt tokens × `ModelSpec.kv_bytes_per_token(kv dtype, tp)`
(2 × layers × KV heads per rank × head_dim × dtype bytes), with tp the smaller of the two pools'
tensor-parallel degrees: each rank's shard crosses its own link in parallel, and the side with
fewer ranks bounds it. The link into a decode instance carries one transfer at a time, FIFO
(the same total bandwidth as fair sharing; each transfer sees latency + bytes / bandwidth).

A closed-loop workload (`traces.ClosedLoopWorkload`, `traces.SessionWorkload`) is driven as the
colocated `simulator.simulate.simulate` drives it (the same dispatcher): a client's next request
is sent when its previous one ends, in the decode pool (its last token), in the prefill pool (a
one-token request) or at arrival (a rejection). A pool's instances may be pipelines of P stages
(the pricer's `pipeline_stages`), run by `Replica`'s own pipelined loop.

Layer-pipelined transfer (`KvLink.layer_pipelined`): a transfer that finds the link free and
room in the decode instance when its prefill ends is taken to have streamed from the start of
the prefill's last step (or the link's last use, if later), layer by layer, so it ends at
`KvLink.end_s`; its hold in the decode pool still starts at the prefill's end. What is not
modelled: the prefill instance's own outbound NIC limit; a decode
instance's running decodes taking, in the step a transfer ends, blocks vLLM would still hold
for it (the hold is released when the request joins the decode scheduler's `waiting`); with
prefix caching in the prefill pool, the held copy takes fresh blocks (the finished request's
cached blocks stay cached but evictable, where vLLM pins them).

Data parallelism inside a pool (`Pool.data_parallel_size` D > 1: each instance one vLLM engine
of D DP ranks, `--data-parallel-size`, e.g. a wide-EP MoE decode pool), modelled as a colocated
DP engine is (`simulator.data_parallel`): the pool's router picks an instance, and the instance's
DP load balancer picks a rank (`DPLBAsyncMPClient.get_core_engine_for_request`,
vllm/v1/engine/core_client.py: the request's `data_parallel_rank` is unset, so the balancer
chooses): the lowest 4 × waiting + running, the first rank on ties (`simulator.router`'s
`vllm_dp`). The decode request the proxy sends after the prefill is an ordinary request to the
decode engine's API server, so it goes through that same balancer; a decode rank's waiting count
includes the requests whose KV it is waiting for or pulling (vLLM keeps WAITING_FOR_REMOTE_KVS
requests in the scheduler's `waiting` queue: `Scheduler.schedule` re-queues them via
`skipped_waiting_requests`). Each DP rank is an engine core with its own scheduler, KV cache
and KV connector: `NixlConnectorScheduler.__init__` listens on
`VLLM_NIXL_SIDE_CHANNEL_PORT + data_parallel_rank`, and its `request_finished` returns that port
(and the rank's `engine_id`) in the prefill's `kv_transfer_params`, so the decode rank pulls the
KV from the very prefill rank that computed it, over that rank's own links. Here each rank holds
its own KV blocks (transfer holds included), has its own inbound link and transfer queue, and
moves `kv_bytes_per_token` per token (its TP shard). A mixture-of-experts instance (a cost model
with `dp_step_s`) steps its ranks in lockstep (`simulator.data_parallel.DataParallelGroup`: the
slowest rank's step, a dummy batch on a rank without work); a dense model's ranks run as
independent instances behind the balancer. Not modelled (beside what `simulator.data_parallel`
leaves out): the dummy steps vLLM runs while a rank's only request waits for its KV (the wave
keeps running, `_has_global_unfinished_reqs`); here the group idles until the KV arrives.
"""
from __future__ import annotations

import dataclasses
import math
from collections import deque
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import simpy

from simulator.data_parallel import DataParallelGroup, DataParallelRank
from simulator.metrics import percentile_stats, summarize
from simulator.pricing import StepPricer
from simulator.records import RequestRecords, requests_table
from simulator.records_parquet import ParquetTokenTimes
from simulator.records_sketch import GapSketch
from simulator.records_stream import RecordFiles, RequestsStream, join_step_files, remove_step_parts
from simulator.replica import Replica, wait_until
from simulator.router import ROUTERS, Router, vllm_dp_pick
from simulator.scheduler import COMPLETED, BatchPlan, FinishedRequest, Scheduler, StepOutcome
from simulator.simulate import SimulationResult, _Dispatcher, _sketch_window_s
from simulator.step_log import StepLog, StepStats
from traces import ClosedLoopWorkload, Request

# vllm_dp balances the DP ranks of one engine, not a pool of instances.
POOL_ROUTERS = tuple(r for r in ROUTERS if r != "vllm_dp")


@dataclass(frozen=True)
class KvLink:
    """The link a prompt's KV crosses from a prefill instance into a decode instance.

    Attributes:
        bandwidth_bytes_per_s: bytes per second one tensor-parallel rank's link moves
            (e.g. 50e9 for 400 Gb/s InfiniBand, 450e9 for NVLink 4 one way).
        latency_s: fixed cost per transfer (handshake, first byte), seconds.

    Raises:
        ValueError: a bandwidth that is not > 0 and finite, or a latency < 0.
    """

    bandwidth_bytes_per_s: float
    latency_s: float = 0.0
    layer_pipelined: bool = False
    num_layers: int = 1

    def __post_init__(self) -> None:
        if not (self.bandwidth_bytes_per_s > 0 and math.isfinite(self.bandwidth_bytes_per_s)):
            raise ValueError(f"link bandwidth must be > 0 bytes/s and finite, got {self.bandwidth_bytes_per_s!r}")
        if not (self.latency_s >= 0 and math.isfinite(self.latency_s)):
            raise ValueError(f"link latency must be >= 0 s and finite, got {self.latency_s!r}")
        if self.num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {self.num_layers}")

    def transfer_s(self, num_bytes: float) -> float:
        """Seconds to move `num_bytes`: latency + bytes / bandwidth."""
        return self.latency_s + num_bytes / self.bandwidth_bytes_per_s

    def end_s(self, num_bytes: float, start_s: float, prefill_end_s: float) -> float:
        """When a transfer begun at `start_s` ends. Layer-pipelined (each layer's KV sent as that
        layer of the last prefill step is computed, as LMCache's layerwise connector does), it
        can begin with that step and ends no earlier than one layer's share after the step:
        max(start + T, prefill end + latency + bytes / (layers × bandwidth)), T = `transfer_s`."""
        end_s = start_s + self.transfer_s(num_bytes)
        if self.layer_pipelined:
            last_layer_s = self.latency_s + num_bytes / (self.num_layers * self.bandwidth_bytes_per_s)
            end_s = max(end_s, prefill_end_s + last_layer_s)
        return end_s


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


class _PoolScheduler:
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
            _continue_after_prefill(self.inner, request.request_id, prefill)
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


def _continue_after_prefill(scheduler: Scheduler, request_id: int, prefill: FinishedRequest) -> None:
    """Give the just-queued sequence of `request_id` the state its prefill left: the prompt's KV
    computed, the first token generated (at `prefill.first_token_s`), and the prefill's
    scheduling time, preemptions and prefix-cache hit. Its token list starts empty: the first
    token's time is the prefill's (added back to the records by `_merge_first_tokens`)."""
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


class _LockstepRank(DataParallelRank):
    """A DP rank of a lockstep pool instance, as the cluster sees a `PoolReplica`: `submit`,
    `num_outstanding`, `replica_id`, records and steps, plus `wake` (a released hold)."""

    def __init__(self, group: "_LockstepInstance", scheduler: "_PoolScheduler", replica_id: int,
                 records: RequestRecords, steps: StepLog, on_finish: Callable[[FinishedRequest], None]):
        super().__init__(group, scheduler, replica_id, records, steps)
        self.on_finish = on_finish

    def wake(self) -> None:
        self.group.signal()


class _LockstepInstance(DataParallelGroup):
    """A pool instance that is one MoE DP engine: `DataParallelGroup`'s lockstep loop over the
    ranks' `_PoolScheduler`s (their holds and transfer hooks), each rank with its own replica id
    and finish callback (a prefill rank's names the rank whose blocks the transfer reads)."""

    def __init__(self, env: simpy.Environment, schedulers: list["_PoolScheduler"], cost_model, outcome_fn,
                 replica_ids: list[int], on_finish: list[Callable[[FinishedRequest], None]],
                 records: list[RequestRecords], steps: list[StepLog]):
        super().__init__(env, schedulers, cost_model, outcome_fn, None, records, steps)
        self.ranks = [_LockstepRank(self, *rank) for rank in zip(schedulers, replica_ids, records, steps, on_finish)]

    def record(self, rank: _LockstepRank, finished: list[FinishedRequest]) -> None:
        rank.records.add(finished)
        for f in finished:
            rank.on_finish(f)


class _Instance:
    """One instance of a pool as its router sees it: its DP ranks' members (replicas, or decode
    inboxes), outstanding requests summed over them (one member without DP)."""

    def __init__(self, members: list):
        self.members = members

    @property
    def num_outstanding(self) -> int:
        return sum(m.num_outstanding for m in self.members)


@dataclass
class _Transfer:
    request: Request
    prefill: FinishedRequest
    num_bytes: float
    source: _PoolScheduler
    last_step_start_s: float  # start of the prefill's last step: a layer-pipelined transfer may begin there


class _DecodeInbox:
    """The transfer queue and inbound link of one decode instance (FIFO, one transfer at a time).

    The head starts when the decode instance's scheduler would admit it in vLLM: at a step
    boundary (after the step's plan is built, as vLLM allocates remote-KV requests in loop 2 of
    `schedule()`) or at once when the instance is idle, if nothing waits before it, fewer than
    max_num_seqs run, and its prompt + one token fit the free blocks above the watermark. It
    then holds the prompt's blocks there while it crosses the link.
    """

    def __init__(self, env: simpy.Environment, target: _PoolScheduler, link: KvLink, log: "_TransferLog"):
        self.env, self.target, self.link, self.log = env, target, link, log
        self.queue: deque[_Transfer] = deque()
        self.in_flight_end_s = math.inf
        self.link_free_s = -math.inf  # end of the last transfer
        self._wake = env.event()
        target.on_step_end = self.poke
        target.transfer_waiting = lambda: bool(self.queue)
        env.process(self._run())

    @property
    def num_outstanding(self) -> int:
        """Requests routed here and not finished (the least-outstanding router reads it)."""
        return self.target.replica.num_outstanding + self.num_transfers

    @property
    def num_transfers(self) -> int:
        """Requests whose KV is queued for or crossing this link (in vLLM, waiting for remote KV)."""
        return len(self.queue) + (self.in_flight_end_s < math.inf)

    def put(self, transfer: _Transfer) -> None:
        self.queue.append(transfer)
        if not self.target.inner.has_work():
            self.poke()  # an idle instance admits it now; a busy one at its next step boundary

    def poke(self) -> None:
        if self.queue and not self._wake.triggered:
            self._wake.succeed()

    def _fits(self, transfer: _Transfer) -> bool:
        t = self.target
        return (not t.waiting and len(t.running) < t.config.max_num_seqs
                and t.can_hold(transfer.request.prompt_tokens + 1))

    def _run(self):
        while True:
            if not self.queue or not self._fits(self.queue[0]):
                self._wake = self.env.event()
                yield self._wake
                continue
            transfer = self.queue.popleft()
            rid = transfer.request.request_id
            self.target.hold(rid, transfer.request.prompt_tokens)
            start_s = self.env.now
            prefill_end_s = transfer.prefill.first_token_s
            if self.link.layer_pipelined and start_s == prefill_end_s:
                # Not queued: it streamed from its last prefill step on, once the link was free.
                start_s = min(start_s, max(transfer.last_step_start_s, self.link_free_s))
            end_s = self.link.end_s(transfer.num_bytes, start_s, prefill_end_s)
            self.in_flight_end_s = end_s
            yield from wait_until(self.env, end_s)
            self.in_flight_end_s = math.inf
            self.link_free_s = self.env.now
            self.log.add(transfer, start_s, self.env.now, self.target.replica.replica_id)
            transfer.source.release(rid)
            self.target.release(rid)
            self.target.expect(transfer.prefill)
            self.target.replica.submit(transfer.request, sent_at_s=start_s)


_TRANSFER_COLUMNS = {"request_id": np.int64, "prefill_replica_id": np.int64, "prefill_end_s": np.float64,
                     "kv_transfer_start_s": np.float64, "kv_transfer_end_s": np.float64, "decode_replica_id": np.int64}


class _TransferLog:
    """Per transferred request: prefill replica, prefill end (= first token), transfer start and
    end, decode replica; in typed columns at the end (`frame`), or taken as they come by a run
    that writes its records as it goes (`take`, `_ClusterRequestsStream`)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, float, float, float, int]] = []

    def take(self) -> list[tuple[int, int, float, float, float, int]]:
        """The rows logged since the last `take`, removed from the log."""
        rows, self.rows = self.rows, []
        return rows

    def add(self, transfer: _Transfer, start_s: float, end_s: float, decode_replica: int) -> None:
        prefill = transfer.prefill
        self.rows.append((prefill.request_id, transfer.source.replica.replica_id, prefill.first_token_s,
                          start_s, end_s, decode_replica))

    def frame(self) -> pd.DataFrame:
        if not self.rows:  # typed even when no request crossed the link (pandas would make them object)
            return pd.DataFrame({name: np.empty(0, dtype) for name, dtype in _TRANSFER_COLUMNS.items()})
        return pd.DataFrame(self.rows, columns=list(_TRANSFER_COLUMNS))


class _ClusterRequestsStream(RequestsStream):
    """A cluster's requests file written as the run goes (`simulator.records_stream`): each row
    group, and the scalar frame `close` returns, as `_merge_first_tokens` and `_with_transfers`
    make the in-memory frame's rows (the prefill's first token in front of a decoded request's
    token times, its TPOT over every token, and the transfer columns), value for value.

    A row is written once its request finished, in the decode pool or in the cluster; its
    transfer ended before its decode began, so its transfer columns are filed (by rank, from
    `transfers`, taken before each write) by then. Transfer columns take 32 bytes a request.
    The cluster's own rows (rejections, one-token requests: `cluster_records`, replica -1) are
    handed over whenever a rank hands over its own: staged until 4,096 of them, those few would
    hold back every row after them until the end.

    Raises (besides `RequestsStream`'s): RuntimeError: a transfer of a request id not in the
    run's (a bug: the records would be wrong).
    """

    def __init__(self, path, request_ids, keep_token_times: bool, constants: dict[str, int],
                 num_prefill: int, transfers: _TransferLog) -> None:
        super().__init__(path, request_ids, keep_token_times, constants)
        self.num_prefill, self.transfers = num_prefill, transfers
        self.cluster_records: RequestRecords | None = None  # set by the cluster, once made
        n = self.ids.size
        self.transfer_columns = {"prefill_replica_id": np.full(n, -1, np.int64),
                                 "kv_transfer_start_s": np.full(n, np.nan),
                                 "kv_transfer_end_s": np.full(n, np.nan),
                                 "decode_replica_id": np.full(n, -1, np.int64)}

    def add(self, replica_id: int, *rows) -> None:
        super().add(replica_id, *rows)
        if replica_id != -1 and self.cluster_records is not None:
            self.cluster_records.flush()

    def _file_transfers(self) -> None:
        rows = self.transfers.take()
        if not rows:
            return
        columns = dict(zip(_TRANSFER_COLUMNS, (np.array(c, dtype=dtype)
                                               for c, dtype in zip(zip(*rows), _TRANSFER_COLUMNS.values()))))
        ids = columns["request_id"]
        ranks = np.searchsorted(self.ids, ids)
        if (ranks >= self.ids.size).any() or (self.ids[np.minimum(ranks, self.ids.size - 1)] != ids).any():
            raise RuntimeError("a KV transfer's request id is not one of the run's: its records would be wrong")
        for name, column in self.transfer_columns.items():
            column[ranks] = columns[name]

    def rows_frame(self, start: int, end: int, tokens: pd.Series | None) -> pd.DataFrame:
        self._file_transfers()
        part = _merge_first_tokens(super().rows_frame(start, end, tokens), self.num_prefill)
        for name, column in self.transfer_columns.items():  # `_with_transfers`' columns, in its order
            part[name] = column[start:end]
        return part


@dataclass
class DisaggregatedResult(SimulationResult):
    """`SimulationResult` of a disaggregated run.

    `requests` has, besides the usual columns, `prefill_replica_id`, `kv_transfer_start_s`,
    `kv_transfer_end_s` and `decode_replica_id` (NaN / -1 for requests that never crossed the
    link: rejected, or done after one token); `replica_id` is the replica (the DP rank, in a
    data-parallel pool) that finished the request (prefill ids 0..P-1, decode ids P..P+D-1 over
    the pools' ranks, instance by instance; -1 for rejections and one-token requests, recorded by
    the cluster). `steps` holds both pools' steps under those replica ids.
    `summary` adds the keys of `pool_summary`.
    """

    num_prefill_replicas: int = 0


def simulate_disaggregated(
    requests: list[Request] | ClosedLoopWorkload,
    prefill: Pool,
    decode: Pool,
    link: KvLink,
    kv_bytes_per_token: float,
    outcome_fn: Callable[[BatchPlan], StepOutcome] | None = None,
    seed: int = 0,
    trim_fraction: float = 0.0,
    keep_token_times: bool = True,
    keep_steps: bool = True,
    fast_forward: bool = True,
    record_files: RecordFiles | None = None,
) -> DisaggregatedResult:
    """Run a trace through a prefill pool and a decode pool (module docstring).

    Args:
        requests: the trace, replayed in arrival order (stable for ties); or a closed-loop
            workload (`traces.ClosedLoopWorkload`, `traces.SessionWorkload`), driven as
            `simulator.simulate.simulate` drives one: a client's next request (a conversation's
            next turn) is sent `think_time_s` after its previous one ends, which is its last
            token in the decode pool (or its one token in the prefill pool, or its rejection).
        prefill, decode: the pools (`Pool`); replica ids are 0..P-1 and P..P+D-1, one per
            scheduler (an instance, or a DP rank of one).
        link: the KV link into each decode instance.
        kv_bytes_per_token: bytes of one prompt token's KV that one link moves
            (`ModelSpec.kv_bytes_per_token(kv dtype bytes, min(TP_prefill, TP_decode))`, the TP
            of a rank in a data-parallel pool).
        outcome_fn: tokens emitted per decode step (speculative acceptance); the prefill pool
            always emits one token per final chunk.
        seed: seeds the `random` routers.
        trim_fraction, keep_token_times, keep_steps: as `simulator.simulate.simulate`.
        fast_forward: no effect: a cluster's pools take every step one by one. Decode windows
            in the decode pool were not exact (found by a breaker, 2026-12-01): a transfer's KV
            hold released mid-window left the window's steps without the held blocks in
            `kv_blocks_used` (a 2P2D quickstart point's KV usage 0.03400 against 0.03435), and a
            prefill's end at the same instant as a window step's start made the transfer start a
            step late. Accepted so that callers of `simulate` pass it unchanged.
        The pools' `session_affinity` router sends every turn of a conversation to the instance
        that served its first (a sessions workload only).
        record_files: write the request and step records to these Parquet files a row group at
            a time as the run goes, as `simulate(record_files=)` does (closed loops included):
            the same files as the frames would give (`_ClusterRequestsStream`; each rank's step log its own part file, joined
            in replica order). The result's `requests` then has no `token_times_s` column and
            its `steps` no rows; the summary is the same.

    Returns:
        A `DisaggregatedResult`. Every request ends with one finish reason: rejected when it
        can never fit a pool (the decode pool's check on the whole request at arrival, the
        prefill pool's on its prompt), otherwise completed (or truncated) in the decode pool, or
        in the prefill pool when it asks for one token.

    Raises:
        ValueError: kv_bytes_per_token < 0; a request id repeated in the trace; keep_token_times=False with trim_fraction > 0 on a
            closed-loop workload (`simulate`'s rule); `session_affinity` without sessions.
    """
    if not (kv_bytes_per_token >= 0 and math.isfinite(kv_bytes_per_token)):
        raise ValueError(f"kv_bytes_per_token must be >= 0 and finite, got {kv_bytes_per_token!r}")
    closed_loop = requests if isinstance(requests, ClosedLoopWorkload) else None
    env = simpy.Environment()
    request_ids = _unique_request_ids(requests)
    cluster = _Cluster(env, prefill, decode, link, kv_bytes_per_token, outcome_fn or StepOutcome.without_speculation,
                       seed, _sketch_window_s(requests, closed_loop, keep_token_times, trim_fraction),
                       keep_token_times, keep_steps, getattr(closed_loop, "session_of", None),
                       record_files, request_ids)
    # The cluster is the one front door the dispatcher knows: it routes within its pools itself.
    dispatch = _Dispatcher(env, [cluster], router=None)
    if closed_loop:
        cluster.on_finish = dispatch.closed_loop_callback(closed_loop)
        dispatch.start_closed_loop(closed_loop)
    else:
        env.process(dispatch.replay(sorted(requests, key=lambda r: r.arrival_s)))  # stable for ties
    if cluster.stream is None:
        env.run()
        return cluster.result(trim_fraction)
    try:
        env.run()
        return cluster.streamed_result(trim_fraction)
    except BaseException:  # the caller removes its own files
        remove_step_parts(record_files, cluster.num_replicas)
        raise


def _unique_request_ids(requests) -> np.ndarray:
    """The request ids a run will finish (`RequestsStream.ids_if_streamable`: a closed loop's
    0..num_requests-1, a trace's own).

    Raises:
        ValueError: a trace repeating a request id (a cluster tracks a request across its pools
            by its id: its prefill's record, KV holds and transfer row would be mixed up)."""
    ids = RequestsStream.ids_if_streamable(requests if isinstance(requests, (ClosedLoopWorkload, list)) else list(requests))
    if ids is not None:
        return ids
    unique, counts = np.unique([r.request_id for r in requests], return_counts=True)
    raise ValueError(f"request id {int(unique[counts > 1][0])} appears {int(counts[counts > 1][0])} times in the "
                     "trace: a disaggregated run needs unique request ids (it follows each request across "
                     "its pools by its id)")


class _Cluster:
    """The two pools, their inboxes and routers, and the records of the run."""

    def __init__(self, env, prefill: Pool, decode: Pool, link: KvLink, kv_bytes_per_token: float, outcome_fn,
                 seed: int, window_s: tuple[float, float], keep_token_times: bool, keep_steps: bool,
                 session_of: Callable[[int], int] | None = None,
                 files: RecordFiles | None = None, request_ids: np.ndarray | None = None):
        self.env = env
        self.on_finish: Callable[[FinishedRequest], None] | None = None  # a closed loop's next request
        self.kv_bytes_per_token = kv_bytes_per_token
        self.keep_token_times = keep_token_times
        self.window_s = window_s
        self.transfers = _TransferLog()
        self.first_gaps = GapSketch()  # keep_token_times=False: each request's prefill → decode gap
        self.num_prefill = len(prefill.schedulers)  # prefill ranks: replica ids 0..num_prefill-1
        self.num_replicas = self.num_prefill + len(decode.schedulers)
        self.files = files
        self.stream = None if self.files is None else _ClusterRequestsStream(
            files.requests_path, request_ids, keep_token_times, files.constants, self.num_prefill, self.transfers)
        self.cluster_records = RequestRecords(-1, keep_token_times, window_s, self.stream)
        if self.stream is not None:
            self.stream.cluster_records = self.cluster_records
        self.prefill_pool = [_PoolScheduler(s, env) for s in prefill.schedulers]
        self.decode_pool = [_PoolScheduler(s, env) for s in decode.schedulers]
        self.prefill_replicas, self.decode_replicas, self.inboxes = [], [], []
        dp, n = prefill.data_parallel_size, self.num_prefill
        for k in range(0, n, dp):  # instance by instance, each of its DP ranks (one without DP)
            self.prefill_replicas += _instance_ranks(
                env, prefill, self.prefill_pool[k:k + dp], list(range(k, k + dp)), StepOutcome.without_speculation,
                [lambda f, i=i: self._prefilled(f, i) for i in range(k, k + dp)],
                [_PrefillRecords(i, False) for i in range(k, k + dp)], [self._step_log(i, keep_steps) for i in range(k, k + dp)])
        dp = decode.data_parallel_size
        for k in range(0, len(self.decode_pool), dp):
            ids = list(range(n + k, n + k + dp))
            inboxes = [_DecodeInbox(env, s, link, self.transfers) for s in self.decode_pool[k:k + dp]]
            self.decode_replicas += _instance_ranks(
                env, decode, self.decode_pool[k:k + dp], ids, outcome_fn, [self._decoded] * dp,
                [RequestRecords(i, keep_token_times, window_s, self.stream) for i in ids],
                [self._step_log(i, keep_steps) for i in ids])
            self.inboxes += inboxes
        self.prefill_instances = _instances(self.prefill_replicas, prefill.data_parallel_size)
        self.decode_instances = _instances(self.inboxes, decode.data_parallel_size)
        self.prefill_router = _PoolRouter(prefill.router, self.prefill_instances,
                                          self.prefill_pool[::prefill.data_parallel_size], seed, session_of)
        self.decode_router = _PoolRouter(decode.router, self.decode_instances,
                                         self.decode_pool[::decode.data_parallel_size], seed + 1, session_of)
        self.originals: dict[int, Request] = {}  # in the prefill pool: the request as it arrived

    def _step_log(self, replica_id: int, keep_steps: bool) -> StepLog:
        """Replica `replica_id`'s step log: with record files, writing its own part file
        (`RecordFiles.step_spool`), joined in replica order at the end."""
        if self.files is None:
            return StepLog(keep=keep_steps)
        return StepLog(keep=keep_steps, path=self.files.step_spool(replica_id, self.num_replicas),
                       constants=self.files.constants)

    def submit(self, request: Request, sent_at_s: float = -math.inf) -> None:
        """The dispatcher's entry (`simulator.simulate._Dispatcher`): a request arrives now."""
        self.arrive(request)

    def arrive(self, request: Request) -> None:
        """Reject a request the decode pool can never serve; else send its prefill (one output token)."""
        if request.output_tokens > 1:
            reason = _never_fits(self.decode_pool[0].inner, request)
            if reason is not None:
                self._record_in_cluster(FinishedRequest(request.request_id, request.arrival_s, request.prompt_tokens,
                                                        request.output_tokens, reason))
                return
        self.originals[request.request_id] = request
        index = self._rank(self.prefill_instances, self.prefill_router.pick(request), self.prefill_pool)
        self.prefill_replicas[index].submit(dataclasses.replace(request, output_tokens=1))

    def _rank(self, instances: list[_Instance], instance: int, schedulers: list[_PoolScheduler]) -> int:
        """The flat rank index of the request the pool's router sent to `instance`: its DP
        balancer's pick (`simulator.router.vllm_dp_pick`) over the instance's ranks, counting a decode rank's
        queued and in-flight transfers as waiting (vLLM's WAITING_FOR_REMOTE_KVS requests)."""
        members = instances[instance].members
        first = instance * len(members)
        if len(members) == 1:
            return first
        loads = [(len(schedulers[first + r].waiting) + getattr(m, "num_transfers", 0),
                  len(schedulers[first + r].running)) for r, m in enumerate(members)]
        return first + vllm_dp_pick(loads)

    def _prefilled(self, finished: FinishedRequest, index: int) -> None:
        """A prefill ended in prefill replica `index` (first token), or that replica rejected the prompt."""
        request = self.originals.pop(finished.request_id)
        if finished.finish_reason != COMPLETED:
            self._record_in_cluster(dataclasses.replace(finished, output_tokens=request.output_tokens))
            return
        if request.output_tokens == 1:
            self._record_in_cluster(finished)
            return
        source = self.prefill_pool[index]
        source.hold(request.request_id, request.prompt_tokens)  # vLLM's delay_free_blocks
        index = self._rank(self.decode_instances, self.decode_router.pick(request), self.decode_pool)
        self.inboxes[index].put(_Transfer(request, finished, request.prompt_tokens * self.kv_bytes_per_token, source,
                                          source.last_step_start_s))

    def _decoded(self, finished: FinishedRequest) -> None:
        """A request ended in the decode pool: a closed loop's client sends its next one. Without
        token times, the gap from the prefill's token to the first decode emission goes into the
        TBT/ITL sketch (the decode records only see the decode gaps)."""
        if self.on_finish is not None:
            self.on_finish(finished)
        if self.keep_token_times or not finished.generated_tokens or len(finished.token_times_s) == 0:
            return
        if not self.window_s[0] <= finished.arrival_s <= self.window_s[1]:
            return
        times = finished.token_times_s
        k = 1
        while k < len(times) and times[k] == times[0]:
            k += 1
        self.first_gaps.add(np.array([times[0] - finished.first_token_s]), np.array([k]))

    def _record_in_cluster(self, finished: FinishedRequest) -> None:
        """A request that ends outside the decode pool: rejected, or done after its one token."""
        if len(finished.token_times_s):
            self.cluster_records.note_step_end(self.env.now)  # its one token: now, a prefill step's end
        self.cluster_records.add([finished])
        if self.on_finish is not None:
            self.on_finish(finished)

    def _gap_sketch(self) -> GapSketch | None:
        """Without token times, the TBT/ITL sketch of every request's gaps (None with them)."""
        if self.keep_token_times:
            return None
        sketch = GapSketch()
        for records in [r.records for r in self.decode_replicas] + [self.cluster_records]:
            records.flush()
            sketch.merge(records.gap_sketch)
        sketch.merge(self.first_gaps)
        return sketch

    def _pools(self):
        return (("prefill", self.prefill_replicas), ("decode", self.decode_replicas))

    def result(self, trim_fraction: float) -> DisaggregatedResult:
        """The run's frames built in memory (no record files, or a trace with repeated ids)."""
        sketch = self._gap_sketch()
        frame = requests_table([r.records for r in self.decode_replicas] + [self.cluster_records])
        frame = _merge_first_tokens(frame, self.num_prefill)
        frame = _with_transfers(frame, self.transfers.frame())
        replicas = self.prefill_replicas + self.decode_replicas
        keep_steps = replicas[0].steps.keep
        steps = pd.concat([r.steps.to_frame() for r in replicas], ignore_index=True)
        pool_steps = None
        if keep_steps:  # each pool's rows, in replica order
            pool_steps = {}
            for name, pool in self._pools():
                mine = steps[steps["replica_id"].isin([r.replica_id for r in pool])]
                pool_steps[name] = (mine["duration_s"].to_numpy(), mine["kv_blocks_used"].to_numpy())
        summary = self._summary(frame, pool_steps, trim_fraction, sketch, None)
        return DisaggregatedResult(frame, steps, summary, self.num_prefill)

    def streamed_result(self, trim_fraction: float) -> DisaggregatedResult:
        """Finish a run that wrote its records as it went (`self.files`): the requests file closed
        (its scalar frame kept), each rank's step file closed and the parts joined, and the
        summary from what stayed in memory (the steps' `kv_blocks_used`, each pool's
        `duration_s` read back from its parts) and the token times read back: the numbers
        `result` gives."""
        sketch = self._gap_sketch()
        for records in [r.records for r in self.decode_replicas] + [self.cluster_records]:
            records.flush()
        frame = self.stream.close()
        replicas = self.prefill_replicas + self.decode_replicas
        keep_steps = replicas[0].steps.keep
        for r in replicas:
            r.steps.stats()  # every staged row into the log (and its file) before it closes
            r.steps.close_file()
        pool_steps = None
        if keep_steps:
            pool_steps = {name: tuple(np.concatenate(c) for c in zip(*(self._step_columns(r) for r in pool)))
                          for name, pool in self._pools()}
            join_step_files(self.files, self.num_replicas)
        token_times = ParquetTokenTimes(self.files.requests_path) if self.keep_token_times else None
        summary = self._summary(frame, pool_steps, trim_fraction, sketch, token_times)
        return DisaggregatedResult(frame, StepLog(keep=False).to_frame(), summary, self.num_prefill)

    def _step_columns(self, replica) -> tuple[np.ndarray, np.ndarray]:
        """A rank's steps' `duration_s` and `kv_blocks_used`: read back from the part file its
        log wrote (one column), or from the log itself when it kept its rows in memory."""
        part = self.files.step_spool(replica.replica_id, self.num_replicas)
        if part is None:
            frame = replica.steps.to_frame()
            return frame["duration_s"].to_numpy(), frame["kv_blocks_used"].to_numpy()
        return pq.read_table(part, columns=["duration_s"]).column(0).to_numpy(), replica.steps.kv_blocks_used()

    def _summary(self, frame: pd.DataFrame, pool_steps: dict | None, trim_fraction: float,
                 sketch: GapSketch | None, token_times: ParquetTokenTimes | None) -> dict:
        """`summarize` over the decode pool (its steps' KV usage), `num_steps` of both pools,
        and `pool_summary`; `pool_steps` as `pool_summary` takes them (None: no step table)."""
        stats = StepStats.merge([r.steps.stats() for r in self.decode_replicas])
        decode_steps = stats if pool_steps is None else pd.DataFrame({"kv_blocks_used": pool_steps["decode"][1]})
        summary = summarize(frame, decode_steps, self.decode_pool[0].config.num_gpu_blocks, trim_fraction,
                            gaps=sketch, token_times=token_times)
        summary["num_steps"] = sum(r.steps.stats().num_steps for r in self.prefill_replicas + self.decode_replicas)
        summary.update(pool_summary(frame, pool_steps, self, summary["makespan_s"]))
        return summary


class _PrefillRecords(RequestRecords):
    """A prefill rank's records: none kept (~110 bytes a request before). What it finishes is a
    one-token prefill the cluster continues (`_Cluster._prefilled`): the request's row is the
    decode pool's or the cluster's own."""

    def note_step_end(self, end_s: float) -> None:
        pass

    def note_step_ends(self, ends_s: list[float]) -> None:
        pass

    def add(self, finished: list[FinishedRequest]) -> None:
        pass


def _instance_ranks(env: simpy.Environment, pool: Pool, schedulers: list[_PoolScheduler], replica_ids: list[int],
                    outcome_fn, on_finish: list, records: list[RequestRecords], steps: list[StepLog]) -> list:
    """The ranks of one instance of `pool`, each set as its scheduler's `replica`: a
    `PoolReplica` per rank (one without DP; a dense model's independent DP ranks; no windows:
    `simulate_disaggregated`), or the `_LockstepRank`s of one `_LockstepInstance` (a mixture
    of experts' DP ranks)."""
    if pool.lockstep:
        ranks = _LockstepInstance(env, schedulers, pool.pricer.cost_model, outcome_fn, replica_ids, on_finish,
                                  records, steps).ranks
    else:
        ranks = [PoolReplica(env, s, pool.pricer, outcome_fn, i, f, None, records=rec, steps=st)
                 for s, i, f, rec, st in zip(schedulers, replica_ids, on_finish, records, steps)]
    for s, rank in zip(schedulers, ranks):
        s.replica = rank
    return ranks


def _instances(members: list, data_parallel_size: int) -> list[_Instance]:
    """The pool's instances over its per-rank members (replicas or inboxes), in rank order."""
    return [_Instance(members[k:k + data_parallel_size]) for k in range(0, len(members), data_parallel_size)]


def _never_fits(scheduler: Scheduler, request: Request) -> str | None:
    """The decode pool's own admission-time rejection of the whole request (too long for
    max_model_len, or more KV than its pool holds alone), checked at arrival so no prefill is
    spent on it. The scheduler's rules, not a second copy of them."""
    return scheduler._rejection_reason(request, scheduler._output_limit(request))


def _merge_first_tokens(frame: pd.DataFrame, num_prefill: int) -> pd.DataFrame:
    """Requests finished in the decode pool: put the prefill's first token back in front of their
    token times, and TPOT over every token: (completion − first token) / (generated − 1)."""
    decoded = (frame["replica_id"].to_numpy() >= num_prefill) & (frame["generated_tokens"].to_numpy() > 0)
    if "token_times_s" in frame:
        times = list(frame["token_times_s"])
        first = frame["first_token_s"].to_numpy()
        for row in np.flatnonzero(decoded):
            times[row] = np.r_[first[row], times[row]]
        frame["token_times_s"] = pd.Series(times, index=frame.index, dtype=object)
    generated = frame["generated_tokens"].to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = (frame["completion_s"].to_numpy() - frame["first_token_s"].to_numpy()) / (generated - 1)
    frame["tpot_s"] = np.where(decoded & (generated > 1), tpot, frame["tpot_s"].to_numpy())
    return frame


def _with_transfers(frame: pd.DataFrame, transfers: pd.DataFrame) -> pd.DataFrame:
    merged = frame.merge(transfers.drop(columns="prefill_end_s"), on="request_id", how="left")
    for column in ("prefill_replica_id", "decode_replica_id"):
        merged[column] = merged[column].fillna(-1).astype(np.int64)
    return merged


def pool_summary(requests: pd.DataFrame, pool_steps: dict[str, tuple[np.ndarray, np.ndarray]] | None,
                 cluster: _Cluster, makespan_s: float) -> dict:
    """Per-pool and transfer metrics of a disaggregated run, from the requests' scalar columns
    and, per pool ("prefill", "decode"), its steps' `duration_s` and `kv_blocks_used` in replica
    order (`pool_steps`; None without the step table: the logs' `StepStats`).

    Keys: `prefill_utilization`, `decode_utilization` (busy step time / (ranks × makespan), a
    rank's dummy steps in a lockstep DP instance not counted; NaN without the step table); `prefill_kv_usage_mean/_max`, `decode_kv_usage_mean/_max`
    (blocks in use, transfer holds included, over each rank's blocks, per step);
    `kv_transfer_s_*` (link time per request: latency + bytes / bandwidth, seconds),
    `kv_transfer_queue_s_*` (from the first token to the transfer's start: waiting for the link
    and for room in the decode pool; 0 for a layer-pipelined transfer that streamed); percentiles
    as `simulator.metrics.percentile_stats`;
    `kv_transfer_bytes` (total moved per link). `kv_usage_mean/_max` of the summary are the
    decode pool's.
    """
    out: dict[str, float] = {}
    pools = (("prefill", cluster.prefill_replicas, cluster.prefill_pool),
             ("decode", cluster.decode_replicas, cluster.decode_pool))
    for name, replicas, schedulers in pools:
        blocks = schedulers[0].config.num_gpu_blocks
        if pool_steps is not None:
            durations_s, kv_blocks_used = pool_steps[name]
            busy_s = float(pd.Series(durations_s).sum())  # pandas' sum of the column, as the frame's
            out[f"{name}_utilization"] = busy_s / (len(replicas) * makespan_s) if makespan_s > 0 else math.nan
            usage = kv_blocks_used / blocks
            out[f"{name}_kv_usage_mean"] = float(usage.mean()) if usage.size else math.nan
            out[f"{name}_kv_usage_max"] = float(usage.max()) if usage.size else math.nan
        else:
            stats = StepStats.merge([r.steps.stats() for r in replicas])
            out[f"{name}_utilization"] = math.nan
            out[f"{name}_kv_usage_mean"] = (stats.kv_blocks_used_sum / stats.num_steps / blocks
                                            if stats.num_steps else math.nan)
            out[f"{name}_kv_usage_max"] = stats.kv_blocks_used_max / blocks if stats.num_steps else math.nan
    moved = requests["kv_transfer_start_s"].notna().to_numpy()
    start = requests["kv_transfer_start_s"].to_numpy()[moved]
    out.update(percentile_stats("kv_transfer_s", requests["kv_transfer_end_s"].to_numpy()[moved] - start))
    # A layer-pipelined transfer that streamed with its last prefill step began before its first token: 0 queued.
    queued_s = np.maximum(0.0, start - requests["first_token_s"].to_numpy()[moved])
    out.update(percentile_stats("kv_transfer_queue_s", queued_s))
    out["kv_transfer_bytes"] = float(requests["prompt_tokens"].to_numpy()[moved].sum() * cluster.kv_bytes_per_token)
    return out


class _PoolRouter:
    """`simulator.router.Router` over a pool's instances (`_Instance`: a DP engine's ranks
    together), plus `prefix_aware`: the instance whose prefix cache holds the longest prefix of
    the request (`PrefixCachingBlockManager.lookup`), the least outstanding among equals (llm-d's
    and Dynamo's KV-aware routing, reduced to its core: cache hit first, then load). `schedulers`:
    each instance's first rank's, which `prefix_aware` reads (`Pool` refuses it with DP)."""

    def __init__(self, policy: str, members: list, schedulers: list[_PoolScheduler], seed: int,
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
