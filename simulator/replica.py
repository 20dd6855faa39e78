"""One serving replica as a SimPy process: schedule, price the plan, advance time, complete."""
from __future__ import annotations

from typing import Callable

import numpy as np
import simpy

from simulator.pricing import StepPricer
from simulator.scheduler import BatchPlan, FinishedRequest, Scheduler, StepOutcome
from simulator.step_log import StepLog
from traces import Request


class SimulationStalled(RuntimeError):
    """The scheduler holds work but can schedule nothing with nothing executing: a scheduler bug."""


class Replica:
    """A replica: one scheduler, one pricer, SimPy's clock.

    The loop is per step, not per token (DESIGN.md, "one scheduler, two clocks"):
    `plan = scheduler.schedule(now)`, `yield timeout(pricer.step_s(plan))`,
    `scheduler.complete_step(plan, outcome, now)`. With pipeline parallelism (P stages) up to P
    micro-batches are in flight (Sarathi-Serve `base_scheduler.py`): a new one is scheduled as
    soon as the first stage is free, and each completes after passing every stage.

    Args:
        env: the SimPy environment.
        scheduler: a `simulator.scheduler.Scheduler`.
        pricer: a `StepPricer`.
        outcome_fn: turns a plan into the tokens it emitted (speculative acceptance models plug
            in here); defaults to one token per emitting sequence.
        replica_id: written into the step records.
        on_finish: called with each `FinishedRequest` (completed or rejected) as it ends; the
            closed-loop driver sends the client's next request from here.
        next_arrival_s: the time of the next request that may still reach this replica (inf when
            none). Given it, runs of plain decode steps between arrivals and completions are
            taken in one go (`Scheduler.decode_window`): the same steps, times and records,
            without scheduling each; None turns this off.
    """

    def __init__(
        self,
        env: simpy.Environment,
        scheduler: Scheduler,
        pricer: StepPricer,
        outcome_fn: Callable[[BatchPlan], StepOutcome] = StepOutcome.without_speculation,
        replica_id: int = 0,
        on_finish: Callable[[FinishedRequest], None] | None = None,
        next_arrival_s: Callable[[], float] | None = None,
    ):
        self.env = env
        self.scheduler = scheduler
        self.pricer = pricer
        self.outcome_fn = outcome_fn
        self.replica_id = replica_id
        self.on_finish = on_finish
        self.next_arrival_s = next_arrival_s
        self.finished: list[FinishedRequest] = []
        self.steps = StepLog()
        self.num_outstanding = 0  # submitted and not finished (the least-outstanding router reads it)
        self._wake: simpy.Event = env.event()
        stages = pricer.pipeline_stages
        self._stages = [simpy.Resource(env, capacity=1) for _ in range(stages)]
        self.process = env.process(self._run() if stages == 1 else self._run_pipelined())

    def submit(self, request: Request) -> None:
        """Hand an arriving request to the scheduler (called at its arrival time)."""
        rejection = self.scheduler.add_request(request)
        if rejection is not None:
            self._record([rejection])
            return
        self.num_outstanding += 1
        self._signal()

    def _signal(self) -> None:
        if not self._wake.triggered:
            self._wake.succeed()

    def _wait(self):
        self._wake = self.env.event()
        return self._wake

    def _complete(self, plan: BatchPlan) -> None:
        finished = self.scheduler.complete_step(plan, self.outcome_fn(plan), self.env.now)
        self.num_outstanding -= len(finished)
        self._record(finished)

    def _record(self, finished: list[FinishedRequest]) -> None:
        self.finished.extend(finished)
        if self.on_finish is not None:
            for f in finished:
                self.on_finish(f)

    def _run(self):
        while True:
            if not self.scheduler.has_work():
                yield self._wait()
                continue
            if self.next_arrival_s is not None:
                running, window = self.scheduler.decode_window()
                if window >= 2:
                    yield from self._decode_window(running, window)
                    continue
            start_s = self.env.now
            plan = self.scheduler.schedule(start_s)
            if plan.is_empty:
                raise SimulationStalled(self._stall_message(start_s))
            duration_s = self.pricer.step_s(plan)
            yield self.env.timeout(duration_s)
            self._complete(plan)
            self.steps.append(start_s, duration_s, plan, self.replica_id)

    def _decode_window(self, running: list, max_steps: int):
        """Up to `max_steps` plain decode steps of every running sequence, each priced as its
        plan would be and each its own SimPy timeout (so the clock adds the same floats), ending
        before the first step that would start at or after the next arrival."""
        batch = len(running)
        query = np.ones(batch, dtype=np.int64)
        context = np.array([seq.num_computed_tokens for seq in running], dtype=np.int64)
        prefill = np.zeros(batch, dtype=bool)
        next_arrival = self.next_arrival_s()
        starts, durations, ends = [], [], []
        for j in range(max_steps):
            start = self.env.now
            if j and start >= next_arrival:
                break
            duration = self.pricer.cost_model.predict_step_s(query, context + j, prefill)
            yield self.env.timeout(duration)
            starts.append(start)
            durations.append(duration)
            ends.append(self.env.now)
        kv_used, finished = self.scheduler.advance_decodes(ends)
        self.num_outstanding -= len(finished)
        self._record(finished)
        self.steps.extend_decodes(starts, durations, batch, kv_used, self.replica_id)

    def _run_pipelined(self):
        first_stage = self._stages[0]
        while True:
            if not self.scheduler.has_work():
                yield self._wait()
                continue
            request = first_stage.request()
            yield request  # the first stage is free: a new micro-batch may enter
            plan = self.scheduler.schedule(self.env.now)
            if plan.is_empty:
                first_stage.release(request)
                if self.scheduler.num_executing == 0:
                    raise SimulationStalled(self._stall_message(self.env.now))
                yield self._wait()  # everything schedulable is in flight: wait for a completion
                continue
            self.env.process(self._micro_batch(plan, request))

    def _micro_batch(self, plan: BatchPlan, first_request):
        start_s = self.env.now
        stage_s = self.pricer.stage_s(plan)
        held = first_request
        for index, stage in enumerate(self._stages):
            if index:
                held = stage.request()
                yield held
            yield self.env.timeout(stage_s)
            stage.release(held)
        self._complete(plan)
        self.steps.append(start_s, self.env.now - start_s, plan, self.replica_id)
        self._signal()

    def _stall_message(self, now_s: float) -> str:
        return (f"{self.scheduler.name}: {len(self.scheduler.waiting)} waiting and "
                f"{len(self.scheduler.running)} running requests but nothing schedulable at t={now_s:.6f}s")
