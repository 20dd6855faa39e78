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
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import simpy

from simulator.disaggregated_records import (
    ClusterRequestsStream, DisaggregatedResult, merge_first_tokens, pool_summary, with_transfers,
)
from simulator.kv_link import DecodeInbox, KvLink, Transfer, TransferLog
from simulator.metrics import summarize
from simulator.pool import (
    POOL_ROUTERS, Instance, Pool, PoolRouter, PoolScheduler, PrefillRecords, instance_ranks, pool_instances,
)
from simulator.records import RequestRecords, requests_table
from simulator.records_parquet import ParquetTokenTimes
from simulator.records_sketch import GapSketch
from simulator.records_stream import RecordFiles, RequestsStream, join_step_files, remove_step_parts
from simulator.router import vllm_dp_pick
from simulator.scheduler import COMPLETED, BatchPlan, FinishedRequest, Scheduler, StepOutcome
from simulator.simulate import _Dispatcher, _sketch_window_s
from simulator.step_log import StepLog, StepStats
from traces import ClosedLoopWorkload, Request


__all__ = ["KvLink", "Pool", "POOL_ROUTERS", "DisaggregatedResult", "pool_summary", "simulate_disaggregated"]


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
            the same files as the frames would give (`ClusterRequestsStream`; each rank's step log its own part file, joined
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
        self.transfers = TransferLog()
        self.first_gaps = GapSketch()  # keep_token_times=False: each request's prefill → decode gap
        self.num_prefill = len(prefill.schedulers)  # prefill ranks: replica ids 0..num_prefill-1
        self.num_replicas = self.num_prefill + len(decode.schedulers)
        self.files = files
        self.stream = None if self.files is None else ClusterRequestsStream(
            files.requests_path, request_ids, keep_token_times, files.constants, self.num_prefill, self.transfers)
        self.cluster_records = RequestRecords(-1, keep_token_times, window_s, self.stream)
        if self.stream is not None:
            self.stream.cluster_records = self.cluster_records
        self.prefill_pool = [PoolScheduler(s, env) for s in prefill.schedulers]
        self.decode_pool = [PoolScheduler(s, env) for s in decode.schedulers]
        self.prefill_replicas, self.decode_replicas, self.inboxes = [], [], []
        dp, n = prefill.data_parallel_size, self.num_prefill
        for k in range(0, n, dp):  # instance by instance, each of its DP ranks (one without DP)
            self.prefill_replicas += instance_ranks(
                env, prefill, self.prefill_pool[k:k + dp], list(range(k, k + dp)), StepOutcome.without_speculation,
                [lambda f, i=i: self._prefilled(f, i) for i in range(k, k + dp)],
                [PrefillRecords(i, False) for i in range(k, k + dp)], [self._step_log(i, keep_steps) for i in range(k, k + dp)])
        dp = decode.data_parallel_size
        for k in range(0, len(self.decode_pool), dp):
            ids = list(range(n + k, n + k + dp))
            inboxes = [DecodeInbox(env, s, link, self.transfers) for s in self.decode_pool[k:k + dp]]
            self.decode_replicas += instance_ranks(
                env, decode, self.decode_pool[k:k + dp], ids, outcome_fn, [self._decoded] * dp,
                [RequestRecords(i, keep_token_times, window_s, self.stream) for i in ids],
                [self._step_log(i, keep_steps) for i in ids])
            self.inboxes += inboxes
        self.prefill_instances = pool_instances(self.prefill_replicas, prefill.data_parallel_size)
        self.decode_instances = pool_instances(self.inboxes, decode.data_parallel_size)
        self.prefill_router = PoolRouter(prefill.router, self.prefill_instances,
                                          self.prefill_pool[::prefill.data_parallel_size], seed, session_of)
        self.decode_router = PoolRouter(decode.router, self.decode_instances,
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

    def _rank(self, instances: list[Instance], instance: int, schedulers: list[PoolScheduler]) -> int:
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
        self.inboxes[index].put(Transfer(request, finished, request.prompt_tokens * self.kv_bytes_per_token, source,
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
        frame = merge_first_tokens(frame, self.num_prefill)
        frame = with_transfers(frame, self.transfers.frame())
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


def _never_fits(scheduler: Scheduler, request: Request) -> str | None:
    """The decode pool's own admission-time rejection of the whole request (too long for
    max_model_len, or more KV than its pool holds alone), checked at arrival so no prefill is
    spent on it. The scheduler's rules, not a second copy of them."""
    return scheduler._rejection_reason(request, scheduler._output_limit(request))
