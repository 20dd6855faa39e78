"""Replay a trace through one or more replicas and collect their records."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pandas as pd
import simpy

from profiler.cost_model import CostModel
from simulator.metrics import requests_frame, summarize
from simulator.pricing import StepPricer
from simulator.replica import Replica
from simulator.router import Router
from simulator.scheduler import BatchPlan, Scheduler, StepOutcome
from traces import Request


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
    requests: list[Request],
    scheduler: Scheduler | list[Scheduler],
    cost: CostModel | StepPricer,
    outcome_fn: Callable[[BatchPlan], StepOutcome] | None = None,
    router: str = "round_robin",
    seed: int = 0,
) -> SimulationResult:
    """Run `requests` through the replicas (one scheduler each) until every request has finished.

    Args:
        requests: the trace; replayed in arrival order (stable for ties).
        scheduler: one scheduler, or one per replica behind a global `router`.
        cost: a `CostModel` (priced as is) or a `StepPricer` (drafts, swaps, pipeline stages).
        outcome_fn: tokens emitted per step (speculative acceptance); default one per sequence.
        router: `round_robin`, `least_outstanding` or `random` (seeded by `seed`).

    Simulated time depends only on the inputs and seeds (no wall clock), so a run is
    reproducible. Requests that can never be served are rejected with a finish reason and
    counted; the run still completes.
    """
    schedulers = scheduler if isinstance(scheduler, list) else [scheduler]
    pricer = cost if isinstance(cost, StepPricer) else StepPricer(cost)
    env = simpy.Environment()
    replicas = [Replica(env, s, pricer, outcome_fn or StepOutcome.without_speculation, i)
                for i, s in enumerate(schedulers)]
    ordered = sorted(requests, key=lambda r: r.arrival_s)  # stable: file order for ties
    placement: dict[int, int] = {}
    env.process(_arrivals(env, ordered, replicas, Router(router, replicas, seed), placement))
    env.run()  # ends when no event is left: all arrivals submitted, every replica idle
    req_frame = requests_frame([f for r in replicas for f in r.finished])
    req_frame["replica_id"] = req_frame["request_id"].map(placement).astype("int64")
    step_frame = pd.concat([r.steps.to_frame() for r in replicas], ignore_index=True)
    summary = summarize(req_frame, step_frame, schedulers[0].config.num_gpu_blocks)
    return SimulationResult(req_frame, step_frame, summary)


def _arrivals(env, requests: list[Request], replicas: list[Replica], router: Router, placement: dict):
    for request in requests:
        delay = request.arrival_s - env.now
        if delay > 0:
            yield env.timeout(delay)
        index = router.pick() if len(replicas) > 1 else 0
        placement[request.request_id] = index
        replicas[index].submit(request)
