"""One serving replica as a SimPy process: schedule, price with the cost model, advance time."""
from __future__ import annotations

from typing import Callable

import simpy

from profiler.cost_model import CostModel
from simulator.scheduler import BatchPlan, FinishedRequest, Scheduler, StepOutcome
from simulator.step_log import StepLog
from traces import Request


class SimulationStalled(RuntimeError):
    """The scheduler holds work but can schedule nothing: a scheduler bug, never expected."""


class Replica:
    """A replica: one scheduler, one cost model, one clock (SimPy's).

    The loop is per step, not per token (DESIGN.md, "one scheduler, two clocks"):
    `plan = scheduler.schedule(now)`, `yield timeout(cost_model.predict_step_s(plan))`,
    `scheduler.complete_step(plan, outcome, now)`.

    Args:
        env: the SimPy environment.
        scheduler: a `simulator.scheduler.Scheduler`.
        cost_model: anything with `predict_step_s(query_tokens, context_tokens, is_prefill)`.
        outcome_fn: turns a plan into the tokens it emitted (speculative acceptance models plug
            in here); defaults to one token per emitting sequence.
    """

    def __init__(
        self,
        env: simpy.Environment,
        scheduler: Scheduler,
        cost_model: CostModel,
        outcome_fn: Callable[[BatchPlan], StepOutcome] = StepOutcome.without_speculation,
    ):
        self.env = env
        self.scheduler = scheduler
        self.cost_model = cost_model
        self.outcome_fn = outcome_fn
        self.finished: list[FinishedRequest] = []
        self.steps = StepLog()
        self._idle: simpy.Event | None = None
        self.process = env.process(self._run())

    def submit(self, request: Request) -> None:
        """Hand an arriving request to the scheduler (called at its arrival time)."""
        rejection = self.scheduler.add_request(request)
        if rejection is not None:
            self.finished.append(rejection)
        elif self._idle is not None and not self._idle.triggered:
            self._idle.succeed()

    def _run(self):
        while True:
            if not self.scheduler.has_work():
                self._idle = self.env.event()
                yield self._idle
                continue
            start_s = self.env.now
            plan = self.scheduler.schedule(start_s)
            if plan.is_empty:
                raise SimulationStalled(
                    f"{self.scheduler.name}: {len(self.scheduler.waiting)} waiting and "
                    f"{len(self.scheduler.running)} running requests but nothing schedulable at t={start_s:.6f}s"
                )
            duration_s = self.cost_model.predict_step_s(plan.query_tokens, plan.context_tokens, plan.is_prefill)
            yield self.env.timeout(duration_s)
            self.finished.extend(self.scheduler.complete_step(plan, self.outcome_fn(plan), self.env.now))
            self.steps.append(start_s, duration_s, plan)
