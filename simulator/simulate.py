"""Replay a trace through one replica and collect its records."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pandas as pd
import simpy

from profiler.cost_model import CostModel
from simulator.metrics import requests_frame, summarize
from simulator.replica import Replica
from simulator.scheduler import BatchPlan, Scheduler, StepOutcome
from traces import Request


@dataclass
class SimulationResult:
    """Records of one simulated run.

    Attributes:
        requests: one row per request (`simulator.metrics.requests_frame`).
        steps: one row per step (`simulator.step_log.STEP_COLUMNS`).
        summary: flat dict from `simulator.metrics.summarize`.
    """

    requests: pd.DataFrame
    steps: pd.DataFrame
    summary: dict


def simulate(
    requests: list[Request],
    scheduler: Scheduler,
    cost_model: CostModel,
    outcome_fn: Callable[[BatchPlan], StepOutcome] | None = None,
) -> SimulationResult:
    """Run `requests` (sorted by arrival_s) through one replica until every request has finished.

    Simulated time depends only on the inputs (no wall clock), so a run is reproducible.
    Requests that can never be served are rejected with a finish reason and counted; the run
    still completes.
    """
    env = simpy.Environment()
    replica = Replica(env, scheduler, cost_model, outcome_fn or StepOutcome.without_speculation)
    ordered = sorted(requests, key=lambda r: r.arrival_s)  # stable: file order for ties
    env.process(_arrivals(env, ordered, replica))
    env.run()  # ends when no event is left: all arrivals submitted, replica idle
    req_frame = requests_frame(replica.finished)
    step_frame = replica.steps.to_frame()
    return SimulationResult(req_frame, step_frame, summarize(req_frame, step_frame, scheduler.config.num_gpu_blocks))


def _arrivals(env: simpy.Environment, requests: list[Request], replica: Replica):
    for request in requests:
        delay = request.arrival_s - env.now
        if delay > 0:
            yield env.timeout(delay)
        replica.submit(request)
