"""Replay a trace through one or more replicas and collect their records."""
from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
import simpy

from profiler.cost_model import CostModel
from simulator.metrics import summarize
from simulator.pricing import StepPricer
from simulator.records import RequestRecords, requests_table
from simulator.records_parquet import ParquetTokenTimes
from simulator.records_stream import RecordFiles, RequestsStream, join_step_files, remove_step_parts, write_frames
from simulator.data_parallel import DataParallelGroup
from simulator.frontend import FrontEnd, engine_arrival_s
from simulator.step_variance import StepVariance
from simulator.gc_pause import paused_gc
from simulator.records_sketch import GapSketch
from simulator.replica import Replica, wait_until
from simulator.router import Router
from simulator.scheduler import BatchPlan, Scheduler, StepOutcome
from simulator.step_log import StepLog, StepStats
from traces import ClosedLoopWorkload, Request


@dataclass
class SimulationResult:
    """Records of one simulated run.

    Attributes:
        requests: one row per request (`simulator.metrics.requests_frame`), with `replica_id`;
            no `token_times_s` column when the run did not keep token times.
        steps: one row per step of every replica (`simulator.step_log.STEP_COLUMNS`); empty
            (with the columns) when the run did not keep them.
        summary: flat dict from `simulator.metrics.summarize`.
    """

    requests: pd.DataFrame
    steps: pd.DataFrame
    summary: dict


def simulate(
    requests: list[Request] | ClosedLoopWorkload,
    scheduler: Scheduler | list[Scheduler],
    cost: CostModel | StepPricer,
    outcome_fn: Callable[[BatchPlan], StepOutcome] | None = None,
    router: str = "round_robin",
    seed: int = 0,
    trim_fraction: float = 0.0,
    fast_forward: bool = True,
    keep_token_times: bool = True,
    keep_steps: bool = True,
    data_parallel: bool = False,
    router_overlap_weight: float = 1.0,
    record_files: RecordFiles | None = None,
    async_scheduling: bool = False,
    frontend: FrontEnd | None = None,
    step_variance: StepVariance | None = None,
) -> SimulationResult:
    """Run `requests` through the replicas (one scheduler each) until every request has finished.

    Args:
        requests: the trace, replayed in arrival order (stable for ties); or a closed-loop
            workload: each client sends its next request `think_time_s` after its previous one
            ends (completed or rejected), so exactly `num_clients` are outstanding while requests
            remain.
        scheduler: one scheduler, or one per replica behind a global `router`.
        cost: a `CostModel` (priced as is) or a `StepPricer` (drafts, swaps, pipeline stages).
        outcome_fn: tokens emitted per step (speculative acceptance); default one per sequence.
        router: a `simulator.router.ROUTERS` policy (`random` seeded by `seed`; `session_affinity`
            needs a sessions workload, `traces.SessionWorkload`).
        trim_fraction: warm-up and drain trimmed from the latency statistics (`summarize`).
        fast_forward: take runs of plain decode steps, and the steps finishing a running prompt
            beside them (open loop), in one go (`Replica`); the records are the same either way
            (tests check it), False only for such checks. Off for `prefix_aware` over several
            replicas (its router reads state a window updates only at its end) and for closed
            loops over several replicas (same-instant completions' order).
        keep_token_times: keep every token's time (the `token_times_s` column; 4 bytes a token
            while running). False: the TBT/ITL percentiles come from a sketch within 0.1 %
            (simulator/records_sketch.py) and memory no longer grows with output length; with
            `trim_fraction` > 0 this needs an open-loop trace (the window is known up front).
        keep_steps: keep the step table (88 bytes a step); False keeps only what the summary
            needs of it (`StepStats`).
        data_parallel: the schedulers are the DP ranks of one vLLM engine (`data_parallel_size`):
            requests go through vLLM's DP load balancer (router `vllm_dp`), and a mixture-of-experts
            cost model (one with `dp_step_s`) steps the ranks in lockstep
            (`simulator.data_parallel.DataParallelGroup`); a dense model's ranks run independently.
        router_overlap_weight: the `prefix_aware` router's weight of uncached prompt blocks.
        record_files: write the request and step records to these Parquet files, a row group at
            a time as the run goes (`simulator.records_stream`, closed loops included; at the
            end only for a trace with repeated request ids):
            the result's `requests` then has no `token_times_s` column and its `steps` no rows
            (they are in the files, with the same values); the summary is the same.
        async_scheduling: vLLM V1's async scheduling in every replica (`Replica`) or lockstep DP
            rank (`DataParallelGroup`).
        frontend: the serving front end (`simulator.frontend.FrontEnd`): each request reaches
            the engine `frontend.in_s(prompt)` after the trace's (the client's) arrival, its tokens
            reach the client `frontend.output_s` after their steps (a closed-loop client sends its
            next request from then), and the records carry client and engine terms
            (`simulator.records.records_frame`). None: the trace's arrivals are the engine's.
        step_variance: seeded step-time variance (`simulator.step_variance.StepVariance`): replica
            (or lockstep DP group) r multiplies each step's priced time by its stream r's next
            factor; such a run goes step by step (no windows), one pipeline stage. None: priced times.

    Raises:
        ValueError: keep_token_times=False with trim_fraction > 0 on a closed-loop workload.

    Simulated time depends only on the inputs and seeds (no wall clock), so a run is
    reproducible. Requests that can never be served are rejected with a finish reason and
    counted; the run still completes.
    """
    schedulers = scheduler if isinstance(scheduler, list) else [scheduler]
    pricer = cost if isinstance(cost, StepPricer) else StepPricer(cost)
    env = simpy.Environment()
    closed_loop = requests if isinstance(requests, ClosedLoopWorkload) else None
    replicas: list[Replica] = []
    dispatch = _Dispatcher(env, replicas, Router("vllm_dp" if data_parallel else router, replicas, seed,
                                                 router_overlap_weight, getattr(closed_loop, "session_of", None)),
                           frontend)
    on_finish = dispatch.closed_loop_callback(closed_loop) if closed_loop else None
    # The prefix_aware router reads every replica's blocks in use and cached prefixes at each
    # arrival, while a window applies its steps' growth and caching only at its end: with several
    # replicas it would read a window's start where the step-by-step path has moved on (its
    # points differed: prefix-cache hit rate 0.597 vs 0.613), so those runs go step by step.
    # A closed loop over several replicas: a window's end event is queued at its start, the
    # step-by-step path's at its last step's start, and when replicas finish at the same instant
    # (think time 0, equal step times) that order decides which client sends first, hence the
    # next request ids and routes; those runs go step by step too.
    windows = fast_forward and step_variance is None and not (router == "prefix_aware" and len(schedulers) > 1) \
        and not (closed_loop is not None and len(schedulers) > 1)
    next_arrival = dispatch.next_arrival_s if windows else None
    window_s = _sketch_window_s(requests, closed_loop, keep_token_times, trim_fraction)
    stream = _requests_stream(requests, keep_token_times, record_files, frontend)
    records = [RequestRecords(i, keep_token_times, window_s, stream) for i in range(len(schedulers))]
    step_logs = [StepLog(keep=keep_steps, path=record_files.step_spool(i, len(schedulers)) if stream else None,
                         constants=record_files.constants if stream else None) for i in range(len(schedulers))]
    if data_parallel and hasattr(pricer.cost_model, "dp_step_s"):  # MoE: DP ranks in lockstep
        replicas += DataParallelGroup(env, schedulers, pricer.cost_model, outcome_fn or StepOutcome.without_speculation,
                                      on_finish, records, step_logs,
                                      step_variance.factors(0) if step_variance is not None else None,
                                      async_scheduling).ranks
    else:
        replicas += [Replica(env, s, pricer, outcome_fn or StepOutcome.without_speculation, i, on_finish, next_arrival,
                             records=records[i], steps=step_logs[i], arrivals_bounded=closed_loop is None,
                             arrival_due_at=dispatch.arrives_at if closed_loop is None else None,
                             chain_admissions=len(schedulers) == 1 or dispatch.router.policy != "vllm_dp",
                             async_scheduling=async_scheduling, sole_replica=len(schedulers) == 1,
                             step_factors=step_variance.factors(i) if step_variance is not None else None)
                     for i, s in enumerate(schedulers)]
    if closed_loop:
        dispatch.start_closed_loop(closed_loop)
    else:
        env.process(dispatch.replay(requests))
    try:
        with paused_gc():  # no collector passes over the run's live objects (simulator/gc_pause.py)
            env.run()  # ends when no event is left: all arrivals submitted, every replica idle
        sketch = None
        if not keep_token_times:
            sketch = GapSketch()
            for r in replicas:
                r.records.flush()
                sketch.merge(r.records.gap_sketch)
        if stream is not None:
            return _streamed_result(stream, replicas, record_files, keep_steps, schedulers[0].config.num_gpu_blocks,
                                    trim_fraction, sketch)
    except BaseException:
        if stream is not None:  # the caller removes its own files
            remove_step_parts(record_files, len(schedulers))
        raise
    req_frame = requests_table([r.records for r in replicas], frontend)
    stats = StepStats.merge([r.steps.stats() for r in replicas])
    frames = [r.steps.to_frame() for r in replicas]
    step_frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    del frames
    summary = summarize(req_frame, step_frame if keep_steps else stats, schedulers[0].config.num_gpu_blocks,
                        trim_fraction, gaps=sketch)
    if record_files is not None:  # not streamable (repeated request ids): written now
        write_frames(record_files, req_frame, step_frame if keep_steps else None)
        req_frame, step_frame = req_frame.drop(columns="token_times_s", errors="ignore"), step_frame.iloc[:0]
    return SimulationResult(req_frame, step_frame, summary)


def _requests_stream(requests, keep_token_times: bool, files: RecordFiles | None,
                     frontend: FrontEnd | None = None) -> RequestsStream | None:
    """The stream a run writes its requests file through, or None (no files, or repeated ids)."""
    ids = RequestsStream.ids_if_streamable(requests) if files is not None else None
    return None if ids is None else RequestsStream(files.requests_path, ids, keep_token_times, files.constants,
                                                   frontend=frontend)


def _streamed_result(stream: RequestsStream, replicas: list[Replica], files: RecordFiles, keep_steps: bool,
                     num_gpu_blocks: int, trim_fraction: float, sketch: GapSketch | None) -> SimulationResult:
    """Finish a run that wrote its records as it went: the files closed (the replicas' step files
    joined), the summary from the in-memory columns and the token times read back."""
    for r in replicas:
        r.records.flush()
    req_frame = stream.close()
    stats = StepStats.merge([r.steps.stats() for r in replicas])
    kv_blocks_used = np.concatenate([r.steps.kv_blocks_used() for r in replicas])
    for r in replicas:
        r.steps.close_file()
    if keep_steps:
        join_step_files(files, len(replicas))
    token_times = ParquetTokenTimes(files.requests_path) if stream.keep_token_times else None
    summary = summarize(req_frame, pd.DataFrame({"kv_blocks_used": kv_blocks_used}) if keep_steps else stats,
                        num_gpu_blocks, trim_fraction, gaps=sketch,
                        token_times=token_times)
    return SimulationResult(req_frame, StepLog(keep=False).to_frame(), summary)


def _sketch_window_s(requests, closed_loop, keep_token_times: bool, trim_fraction: float) -> tuple[float, float]:
    """The arrivals whose requests enter the TBT/ITL sketch: those `summarize` would measure
    (its trim window over every request's arrival, rejected ones included)."""
    if keep_token_times or trim_fraction <= 0:
        return -math.inf, math.inf
    if closed_loop is not None:
        raise ValueError("a closed-loop run with trim_fraction > 0 must keep token times "
                         "(output.token_times: true): its measurement window is only known at its end")
    if not requests:
        return -math.inf, math.inf
    first = min(r.arrival_s for r in requests)
    last = max(r.arrival_s for r in requests)
    margin = trim_fraction * (last - first)
    return first + margin, last - margin


class _Dispatcher:
    """Hands arriving requests to replicas through the router (each replica's records say which it served)."""

    def __init__(self, env: simpy.Environment, replicas: list[Replica], router: Router,
                 frontend: FrontEnd | None = None):
        self.env, self.replicas, self.router = env, replicas, router
        self.frontend = frontend
        self._replay_s: list[float] = []  # open loop: arrival times, submitted up to _replay_next
        self._replay_next = 0
        self._deliveries_s: list[float] = []  # closed loop: heap of scheduled arrival times

    def next_arrival_s(self) -> float:
        """The earliest arrival not yet submitted (inf when none); any replica may get it."""
        upcoming = self._replay_s[self._replay_next] if self._replay_next < len(self._replay_s) else math.inf
        return min(upcoming, self._deliveries_s[0]) if self._deliveries_s else upcoming

    def arrives_at(self, t_s: float) -> bool:
        """Whether an open-loop request not yet submitted arrives exactly at `t_s`."""
        times = self._replay_s
        i = bisect_left(times, t_s, self._replay_next)
        return i < len(times) and times[i] == t_s

    def submit(self, request: Request, sent_at_s: float = -math.inf) -> None:
        index = self.router.pick(request) if len(self.replicas) > 1 else 0
        self.replicas[index].submit(request, sent_at_s)

    def replay(self, requests: list[Request]):
        """Open loop: submit each request when it reaches the engine (its arrival, plus the front
        end's delay when there is one), in that order (stable for ties)."""
        due = [engine_arrival_s(r.arrival_s, r.prompt_tokens, self.frontend) for r in requests]
        order = sorted(range(len(requests)), key=due.__getitem__)
        self._replay_s = [due[i] for i in order]
        for index, i in enumerate(order):
            if due[i] > self.env.now:
                yield from wait_until(self.env, due[i])
            self._replay_next = index + 1
            self.submit(requests[i])

    def start_closed_loop(self, workload: ClosedLoopWorkload) -> None:
        """Submit each client's first request: now, or at its start time (sessions' session_qps);
        behind a front end, when it reaches the engine."""
        for request in workload.initial_requests():
            if request.arrival_s > 0 or self.frontend is not None:  # a staggered start, or the front end's delay
                self.deliver_later(request, 0.0)
            else:
                self.submit(request)

    def closed_loop_callback(self, workload: ClosedLoopWorkload):
        """on_finish for replicas: the finished request's client sends its next one."""

        out_s = 0.0 if self.frontend is None else self.frontend.output_s

        def on_finish(finished) -> None:
            # The client sees the end `out_s` after the engine (a rejection: at once).
            seen_s = self.env.now + out_s if finished.generated_tokens else self.env.now
            request = workload.next_request(workload.client_of(finished.request_id), seen_s)
            if request is not None:
                # A process, not a direct call: a rejection would otherwise recurse.
                self.deliver_later(request, self.env.now)

        return on_finish

    def deliver_later(self, request: Request, sent_at_s: float) -> None:
        """Submit `request` when it reaches the engine: at its arrival time, plus the front end's
        delay when there is one (a closed-loop request sent at `sent_at_s`)."""
        due_s = engine_arrival_s(request.arrival_s, request.prompt_tokens, self.frontend)
        heapq.heappush(self._deliveries_s, due_s)
        self.env.process(self._deliver(request, sent_at_s, due_s))

    def _deliver(self, request: Request, sent_at_s: float, due_s: float):
        yield from wait_until(self.env, due_s)
        heapq.heappop(self._deliveries_s)  # deliveries happen in time order: this one is the earliest
        self.submit(request, sent_at_s)
