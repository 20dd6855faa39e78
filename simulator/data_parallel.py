"""A data-parallel group of a mixture-of-experts model: DP ranks with their own schedulers and KV
pools that step in lockstep, because every MoE layer exchanges tokens between all of them.

vLLM 0.19 (`vllm/v1/engine/core.py`, `DPEngineCoreProc.run_busy_loop`): each DP rank is an engine
core with its own scheduler; a rank with no request of its own, while the group's wave is running
(`engines_running`, kept true by `_has_global_unfinished_reqs`, an all-reduce of the ranks'
unfinished flags every 32 steps), calls `execute_dummy_batch`, a one-token forward pass, so that
the collectives of its MoE layers meet the other ranks'. Every step therefore lasts as long as
the slowest rank's, and ranks without work still run (and are priced for) a dummy batch. When no
rank has work the wave ends and the group waits for the next arrival. The model runner pads or
not every rank to the same token count (`coordinate_batch_across_dp`, vllm/v1/worker/dp_utils.py;
priced by `profiler.moe_cost.MoECostModel.dp_step_s`).

Requests reach a rank through vLLM's DP load balancer (`DPLBAsyncMPClient.get_core_engine_for_request`,
vllm/v1/engine/core_client.py): the rank with the lowest waiting × 4 + running, the first on ties
(`simulator.router`, policy `vllm_dp`). vLLM's balancer sees counts the coordinator publishes
every 100 ms and adds its own pending assignments; here it sees the schedulers' counts at the
arrival (the staleness is not modelled).

Not modelled: pipeline parallelism, KV swaps and draft models inside a DP group (the config
refuses them), and the dummy steps after the last request finishes (they serve no request).
"""
from __future__ import annotations

import math
from typing import Callable

import simpy

from simulator.records import RequestRecords
from simulator.replica import SimulationStalled, note_schedule_wait
from simulator.scheduler import BatchPlan, FinishedRequest, Scheduler, StepOutcome
from simulator.step_log import StepLog
from traces import Request


class DataParallelRank:
    """One DP rank as the dispatcher and router see it: `submit`, `num_outstanding`, and the
    scheduler, records and step log of the rank (same attributes as `simulator.replica.Replica`)."""

    def __init__(self, group: "DataParallelGroup", scheduler: Scheduler, replica_id: int,
                 records: RequestRecords, steps: StepLog):
        self.group, self.scheduler, self.replica_id = group, scheduler, replica_id
        self.records, self.steps = records, steps
        self.num_outstanding = 0
        self.unseen: list[tuple[float, Request]] = []  # async scheduling: arrived, not yet seen by a decision

    def submit(self, request: Request, sent_at_s: float = -math.inf) -> None:
        """Hand an arriving request to this rank's scheduler (called at its arrival time); with async
        scheduling, while the group steps, hold it until a decision sees it (`DataParallelGroup`)."""
        if self.group.async_scheduling and not self.group.idle:
            self.unseen.append((self.group.env.now, request))  # counted outstanding: the balancer sees it
            self.num_outstanding += 1
            return
        rejection = self.scheduler.add_request(request)
        if rejection is not None:
            self.group.record(self, [rejection])
            return
        self.num_outstanding += 1
        self.group.signal()

    def take_visible(self, decided_s: float, now_s: float) -> float:
        """Async scheduling: hand the scheduler the held requests the rank's decision at `decided_s`
        sees (arrived by then) and return the decision's time; a rank that scheduled nothing for the
        step now ending decides again at its end (`now_s`) and sees them all, as
        `simulator.replica.Replica._take_visible`."""
        if not self.unseen:
            return decided_s
        seen = [r for t, r in self.unseen if t <= decided_s]
        if not seen and not self.scheduler.has_work():
            decided_s, seen = now_s, [r for _, r in self.unseen]
        self.unseen = self.unseen[len(seen):]  # in arrival order: the seen ones lead
        for request in seen:
            rejection = self.scheduler.add_request(request)
            if rejection is not None:
                self.num_outstanding -= 1
                self.group.record(self, [rejection])
        return decided_s


class DataParallelGroup:
    """The lockstep loop of one DP group (module docstring) as a SimPy process.

    Args:
        env: the SimPy environment.
        schedulers: one per DP rank.
        cost_model: prices a synchronised step: `dp_step_s(batches)` with one (query_tokens,
            context_tokens, is_prefill) triple of lists per rank (`profiler.moe_cost.MoECostModel`).
        outcome_fn: tokens emitted per plan (as `Replica`).
        on_finish: called with each finished request (closed-loop clients).
        records, steps: per rank, its `RequestRecords` and `StepLog`.
        step_factors: step-time variance (`simulator.step_variance.StepFactors`): one factor per
            lockstep step, on the synchronised step's time; None: the priced time.
        async_scheduling: vLLM V1's async scheduling on every rank (`_take_visible`).

    Attributes:
        ranks: the `DataParallelRank`s, in rank order (what `simulate` routes requests to).
    """

    def __init__(self, env: simpy.Environment, schedulers: list[Scheduler], cost_model,
                 outcome_fn: Callable[[BatchPlan], StepOutcome] = StepOutcome.without_speculation,
                 on_finish: Callable[[FinishedRequest], None] | None = None,
                 records: list[RequestRecords] | None = None, steps: list[StepLog] | None = None,
                 step_factors=None, async_scheduling: bool = False):
        self.env, self.cost_model, self.outcome_fn, self.on_finish = env, cost_model, outcome_fn, on_finish
        self._step_factors = step_factors  # step-time variance (`simulator.step_variance.StepFactors`)
        if async_scheduling and not all(s.running_in_admission_order for s in schedulers):
            raise ValueError("async scheduling is modelled for vLLM V1's scheduler (vllm_v1) only")
        self.async_scheduling = async_scheduling
        self.idle = True  # waiting for work: an arrival is scheduled at once (async scheduling)
        self._woke = True  # the next step is decided now, not at the start of the step before
        self._last_step_start_s = -math.inf
        self.ranks = [DataParallelRank(self, s, i, records[i] if records else RequestRecords(i),
                                       steps[i] if steps else StepLog()) for i, s in enumerate(schedulers)]
        self._wake: simpy.Event = env.event()
        self.num_steps = 0
        self.process = env.process(self._run())

    def signal(self) -> None:
        if not self._wake.triggered:
            self._wake.succeed()

    def _take_visible(self) -> list[float]:
        """Async scheduling, each rank as `simulator.replica.Replica` (its docstring; vLLM 0.19 runs it
        with MoE DP, `VllmConfig.__post_init__` turning off NCCL for the DP synchronisation instead,
        vllm/config/vllm.py at vllm-project/vllm 00080ee): every rank's engine core decides the step
        beginning now at the start of the step before (at once when the group was idle), from the
        requests that reached it by then. Returns each rank's decision time (`first_scheduled_s`)."""
        now_s = self.env.now
        decided_s = now_s if self._woke else self._last_step_start_s
        self._woke = False
        return [rank.take_visible(decided_s, now_s) for rank in self.ranks]

    def _schedule_async(self, rank: DataParallelRank, decided_s: float, start_s: float) -> BatchPlan | None:
        """A rank's plan for the step starting at `start_s`, decided at `decided_s`; its schedule
        waits noted (`simulator.replica.note_schedule_wait`)."""
        scheduler = rank.scheduler
        if not scheduler.has_work():
            return None
        running_before = len(scheduler.running)
        plan = scheduler.schedule(decided_s)
        if decided_s < start_s:
            note_schedule_wait(scheduler, rank.records, running_before, plan, decided_s, start_s)
        return plan

    def record(self, rank: DataParallelRank, finished: list[FinishedRequest]) -> None:
        rank.records.add(finished)
        if self.on_finish is not None:
            for f in finished:
                self.on_finish(f)

    def _run(self):
        while True:
            if self.async_scheduling:
                decided = self._take_visible()
            if not any(r.scheduler.has_work() for r in self.ranks):
                self.idle = True
                self._wake = self.env.event()
                yield self._wake
                self.idle, self._woke = False, True
                continue
            start_s = self.env.now
            if self.async_scheduling:
                plans = [self._schedule_async(r, d, start_s) for r, d in zip(self.ranks, decided)]
            else:
                plans = [r.scheduler.schedule(start_s) if r.scheduler.has_work() else None for r in self.ranks]
            self._last_step_start_s = start_s
            if all(p is None or p.is_empty for p in plans):
                busy = [r for r in self.ranks if r.scheduler.has_work()]
                raise SimulationStalled(f"data-parallel ranks {[r.replica_id for r in busy]} hold work but none "
                                        f"could schedule anything at t={start_s:.6f}s")
            batches = [([], [], []) if p is None or p.is_empty else
                       (p.columns.query_tokens, p.columns.context_tokens, p.columns.is_prefill) for p in plans]
            duration_s = self.cost_model.dp_step_s(batches)
            if self._step_factors is not None:
                duration_s *= self._step_factors.next()
            yield self.env.timeout(duration_s)
            self.num_steps += 1
            for rank, plan in zip(self.ranks, plans):
                if plan is None or plan.is_empty:
                    continue
                rank.records.note_step_end(self.env.now)
                finished = rank.scheduler.complete_step(plan, self.outcome_fn(plan), self.env.now)
                rank.num_outstanding -= len(finished)
                self.record(rank, finished)
                rank.steps.append(start_s, duration_s, plan, rank.replica_id)
