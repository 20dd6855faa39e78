"""Replay a trace through the engine: arrivals on a clock, one plan executed per step, records.

The loop mirrors the simulator's replica (`simulator/replica.py`) with the device in place of
the cost model: `plan = schedule(now)`, execute it, `complete_step(plan, outcome, end)`.
"""
from __future__ import annotations

import time
from collections import deque
from typing import Callable

import pandas as pd

from gpu_engine.clock import FastClock
from gpu_engine.engine import Engine
from gpu_engine.records import DRAFT_COLUMNS, EngineRun, draft_rows, plan_record
from simulator.metrics import requests_frame, summarize
from simulator.scheduler import FinishedRequest
from simulator.step_log import StepLog
from traces import Request


class EngineStalled(RuntimeError):
    """The scheduler holds work but schedules nothing: a scheduler bug, never expected."""


def run_trace(engine: Engine, requests: list[Request], clock=None,
              prompts: dict[int, list[int]] | None = None,
              on_finished: Callable[[FinishedRequest], None] | None = None) -> EngineRun:
    """Serve `requests` (entering at their `arrival_s` on `clock`) until every one has finished.

    Args:
        engine: the engine (its scheduler holds no work yet).
        requests: the trace; sorted by arrival here (stable, file order for ties).
        clock: `WallClock` (real time), `FastClock` (default: as fast as possible) or `PricedClock`.
        prompts: explicit prompt ids per request id; others get seeded random ids.
        on_finished: called with each finished or rejected request (e.g. a progress bar).

    Returns:
        The run's records; a step's `duration_s` is measured from `schedule()` to its sampled
        tokens (the cost-model price under a `PricedClock`).

    Raises:
        EngineStalled: work is queued but the scheduler returns an empty plan.
    """
    clock = clock or FastClock()
    scheduler = engine.scheduler
    pending = deque(sorted(requests, key=lambda r: r.arrival_s))
    finished: list[FinishedRequest] = []
    steps, plans, drafts = StepLog(), [], []

    def done(records: list[FinishedRequest]) -> None:
        finished.extend(records)
        engine.release(records)
        for record in records if on_finished else ():
            on_finished(record)

    engine.warm_up()  # before the clock matters: the first steps would otherwise be slow once
    while pending or scheduler.has_work():
        start_s = clock.now_s()
        while pending and pending[0].arrival_s <= start_s:
            request = pending.popleft()
            rejection = engine.add_request(request, (prompts or {}).get(request.request_id))
            done([rejection] if rejection else [])
        if not scheduler.has_work():
            if pending:
                clock.wait_until(pending[0].arrival_s)
            continue
        t0, cpu0 = time.perf_counter(), time.thread_time()
        plan = scheduler.schedule(start_s)
        if plan.is_empty:
            raise EngineStalled(f"{scheduler.name}: {len(scheduler.waiting)} waiting and {len(scheduler.running)} "
                                f"running requests but nothing schedulable at t={start_s:.6f}s")
        result = engine.execute(plan)
        measured_s, measured_cpu_s = time.perf_counter() - t0, time.thread_time() - cpu0
        end_s = clock.end_step(start_s, plan, measured_s, measured_cpu_s)
        # Recorded before complete_step, which may shrink the live block tables the plan shares.
        plans.append(plan_record(len(steps), start_s, end_s - start_s, measured_s, plan, result, measured_cpu_s,
                                 clock.host_probe_s))
        done(scheduler.complete_step(plan, result.outcome, end_s))
        drafts += draft_rows(len(steps), plan, result)
        steps.append(start_s, end_s - start_s, plan)

    request_frame, step_frame = requests_frame(finished), steps.to_frame()
    request_frame["replica_id"] = 0  # one replica; the column as `simulator.simulate` writes it
    summary = summarize(request_frame, step_frame, scheduler.config.num_gpu_blocks)
    return EngineRun(request_frame, step_frame, summary, plans, pd.DataFrame(drafts, columns=DRAFT_COLUMNS),
                     dict(engine.outputs))
