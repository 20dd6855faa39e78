"""Replay a trace through one or more replicas and collect their records."""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Callable

import pandas as pd
import simpy

from profiler.cost_model import CostModel
from simulator.metrics import requests_frame, summarize
from simulator.pricing import StepPricer
from simulator.replica import Replica, delay_until_s
from simulator.router import Router
from simulator.scheduler import BatchPlan, Scheduler, StepOutcome
from traces import ClosedLoopWorkload, Request


@dataclass
class SimulationResult:
    """Records of one simulated run.

    Attributes:
        requests: one row per request (`simulator.metrics.requests_frame`), with `replica_id`.
        steps: one row per step of every replica (`simulator.step_log.STEP_COLUMNS`).
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
        router: `round_robin`, `least_outstanding` or `random` (seeded by `seed`).
        trim_fraction: warm-up and drain trimmed from the latency statistics (`summarize`).
        fast_forward: take runs of plain decode steps in one go (`Replica`); the records are
            the same either way (tests check it), False only for such checks.

    Simulated time depends only on the inputs and seeds (no wall clock), so a run is
    reproducible. Requests that can never be served are rejected with a finish reason and
    counted; the run still completes.
    """
    schedulers = scheduler if isinstance(scheduler, list) else [scheduler]
    pricer = cost if isinstance(cost, StepPricer) else StepPricer(cost)
    env = simpy.Environment()
    closed_loop = requests if isinstance(requests, ClosedLoopWorkload) else None
    placement: dict[int, int] = {}
    replicas: list[Replica] = []
    dispatch = _Dispatcher(env, replicas, Router(router, replicas, seed), placement)
    on_finish = dispatch.closed_loop_callback(closed_loop) if closed_loop else None
    next_arrival = dispatch.next_arrival_s if fast_forward else None
    replicas += [Replica(env, s, pricer, outcome_fn or StepOutcome.without_speculation, i, on_finish, next_arrival)
                 for i, s in enumerate(schedulers)]
    if closed_loop:
        for request in closed_loop.initial_requests():
            dispatch.submit(request)
    else:
        env.process(dispatch.replay(sorted(requests, key=lambda r: r.arrival_s)))  # stable for ties
    env.run()  # ends when no event is left: all arrivals submitted, every replica idle
    req_frame = requests_frame([f for r in replicas for f in r.finished])
    req_frame["replica_id"] = req_frame["request_id"].map(placement).astype("int64")
    step_frame = pd.concat([r.steps.to_frame() for r in replicas], ignore_index=True)
    summary = summarize(req_frame, step_frame, schedulers[0].config.num_gpu_blocks, trim_fraction)
    return SimulationResult(req_frame, step_frame, summary)


class _Dispatcher:
    """Hands arriving requests to replicas through the router, recording where each went."""

    def __init__(self, env: simpy.Environment, replicas: list[Replica], router: Router, placement: dict):
        self.env, self.replicas, self.router, self.placement = env, replicas, router, placement
        self._replay_s: list[float] = []  # open loop: arrival times, submitted up to _replay_next
        self._replay_next = 0
        self._deliveries_s: list[float] = []  # closed loop: heap of scheduled arrival times

    def next_arrival_s(self) -> float:
        """The earliest arrival not yet submitted (inf when none); any replica may get it."""
        upcoming = self._replay_s[self._replay_next] if self._replay_next < len(self._replay_s) else math.inf
        return min(upcoming, self._deliveries_s[0]) if self._deliveries_s else upcoming

    def submit(self, request: Request, sent_at_s: float = -math.inf) -> None:
        index = self.router.pick() if len(self.replicas) > 1 else 0
        self.placement[request.request_id] = index
        self.replicas[index].submit(request, sent_at_s)

    def replay(self, requests: list[Request]):
        """Open loop: submit each request at its arrival time."""
        self._replay_s = [r.arrival_s for r in requests]
        for index, request in enumerate(requests):
            if request.arrival_s > self.env.now:
                yield self.env.timeout(delay_until_s(self.env.now, request.arrival_s))
            self._replay_next = index + 1
            self.submit(request)

    def closed_loop_callback(self, workload: ClosedLoopWorkload):
        """on_finish for replicas: the finished request's client sends its next one."""

        def on_finish(finished) -> None:
            request = workload.next_request(workload.client_of(finished.request_id), self.env.now)
            if request is not None:
                # A process, not a direct call: a rejection would otherwise recurse.
                heapq.heappush(self._deliveries_s, request.arrival_s)
                self.env.process(self._deliver(request, self.env.now))

        return on_finish

    def _deliver(self, request: Request, sent_at_s: float):
        yield self.env.timeout(delay_until_s(self.env.now, request.arrival_s))
        heapq.heappop(self._deliveries_s)  # deliveries happen in time order: this one is the earliest
        self.submit(request, sent_at_s)
