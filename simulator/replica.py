"""One serving replica as a SimPy process: schedule, price the plan, advance time, complete."""
from __future__ import annotations

import math
from bisect import bisect_left
from itertools import accumulate
from operator import attrgetter
from typing import Callable

import numpy as np
import simpy

from simulator.pricing import StepPricer
from simulator.records import RequestRecords
from simulator.scheduler import BatchPlan, FinishedRequest, Scheduler, StepOutcome
from simulator.step_log import StepLog
from simulator.step_variance import StepFactors
from traces import Request


# Steps priced per call in a decode window (`Replica._decode_window`).
_WINDOW_CHUNK_STEPS = 16
_NUM_COMPUTED_TOKENS = attrgetter("num_computed_tokens")


def note_schedule_wait(scheduler: Scheduler, records: RequestRecords, running_before: int, plan: BatchPlan,
                       decided_s: float, start_s: float) -> None:
    """Async scheduling: note `start_s − decided_s` (the step in flight when vLLM decided) as the
    schedule wait of each request first scheduled in the step starting now (the records'
    `schedule_wait_s`). `vllm_v1` appends admissions to the tail of `running`
    (`running_in_admission_order`), so they are its last `len(running) − running_before +
    preempted` sequences (`running_before`: its length before `schedule`); of these, the ones first
    scheduled by this decision (a resumed request's stamp is older). A request admitted by an
    earlier decision at the same instant (the step after an idle engine's first is decided at that
    step's start) keeps its note."""
    running = scheduler.running
    admitted = len(running) - running_before + len(plan.preempted_ids)
    if admitted > 0:
        waits = records.schedule_wait_s
        for seq in running[-admitted:]:
            if seq.first_scheduled_s == decided_s:
                waits.setdefault(seq.request_id, start_s - decided_s)


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
        records: where finished requests go (`simulator.records.RequestRecords`, compact
            columns; token times as indices into this replica's step ends); a fresh one by default.
        steps: the step log (`StepLog()` by default; `StepLog(keep=False)` keeps only its stats).
        arrivals_bounded: `next_arrival_s()`, read during `submit`, is no later than any arrival
            still to come, even one scheduled later (an open-loop trace's dispatcher). Then every
            window is planned knowing every arrival that could change its steps (none comes
            before its last step begins, or its steps leave nothing to admit), so an arrival
            during it never interrupts it (`submit`): an interrupt's second timeout would be
            queued after events the step-by-step path queues after that step's end.
        arrival_due_at: `t -> whether a request still to come arrives exactly at t`, for an
            open loop (`arrivals_bounded`). Given it (with `next_arrival_s`, one pipeline stage, a cost model that
            does not count as it prices), the steps finishing a running prompt next to plain
            decodes are taken in one go (`Scheduler.prefill_window`); arrivals during them
            change none of those steps, and none is let land on such a window's end, where
            SimPy's same-time order would decide whether the next step sees it. A window of
            any kind that ends exactly at an arrival queues its end when its last step begins,
            as the step-by-step path does (`_wait_window`).
        chain_admissions: a prefill window's last step may admit the head of `waiting`
            (`Scheduler.prefill_window`): False when the router reads the queues' lengths at
            arrivals (`vllm_dp` over several replicas), which the window changes only at its end.
        async_scheduling: vLLM V1's async scheduling (`--async-scheduling`, on by default since
            vLLM 0.14): each step is scheduled while the GPU runs the step before it, so a
            request reaches the scheduler one step later than in a synchronous engine
            (`_take_visible`). One pipeline stage only.
        step_factors: step-time variance (`simulator.step_variance`): each step's priced time is
            multiplied by the stream's next factor. Step by step only (`next_arrival_s` None),
            one pipeline stage.
        sole_replica: no other replica shares the arrivals, so no router reads this one's
            queues while a window runs (`_chunk_window` under async scheduling).

    Async scheduling as vLLM V1 runs it (read at vllm-project/vllm 00080ee, the 0.19 line):
    `EngineCore.step_with_batch_queue` (vllm/v1/engine/core.py; batch queue of
    `max_concurrent_batches` = 2 with async scheduling) schedules step k+1 and hands it to the
    executor without blocking, then blocks on step k's result and runs `update_from_output(k)`;
    the busy loop (`run_busy_loop` -> `_process_input_queue`) adds new requests just before each
    `schedule()`. So when step k starts on the GPU, step k+1 is already being scheduled from the
    requests that arrived before that moment (the start of step k), and the outputs of step k
    reach the front end when it ends (`update_from_output` overlaps step k+1's GPU time). A
    request arriving while step k runs is first scheduled in step k+2: TTFT gains about one step
    over a synchronous engine; TPOT and ITL do not change (one token per running sequence per
    step). `AsyncScheduler._update_after_schedule` (vllm/v1/core/sched/async_scheduler.py) books
    one output placeholder per running request, so a running sequence decodes every step, and
    `Scheduler.schedule` skips a request whose placeholders already reach `max_tokens` ("Avoid
    scheduling an extra step"): no step is wasted past the last token, as here. With an idle
    engine the request is scheduled at once (`step_with_batch_queue` returns without blocking
    while the queue is short). The scheduler's stamp `first_scheduled_s` is when vLLM decided
    (its `scheduled_ts`: the start of the step before). Modelled approximately: KV blocks of the
    requests that finish in step k are free when step k+1 is planned here, one step earlier than
    in vLLM (`update_from_output(k)` runs after `schedule(k+1)`); drafts are granted from step k's
    accepted tokens, where vLLM schedules placeholder drafts.
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
        records: RequestRecords | None = None,
        steps: StepLog | None = None,
        arrivals_bounded: bool = False,
        arrival_due_at: Callable[[float], bool] | None = None,
        chain_admissions: bool = True,
        async_scheduling: bool = False,
        step_factors: StepFactors | None = None,
        sole_replica: bool = False,
    ):
        if async_scheduling and pricer.pipeline_stages > 1:
            raise ValueError("async scheduling with pipeline parallelism is not modelled (vLLM turns it off there)")
        if step_factors is not None and (pricer.pipeline_stages > 1 or next_arrival_s is not None):
            raise ValueError("step-time variance runs step by step with one pipeline stage (no windows: "
                             "simulator/step_variance.py)")
        if async_scheduling and not scheduler.running_in_admission_order:
            raise ValueError(f"async scheduling is modelled for vLLM V1's scheduler (vllm_v1) only, not "
                             f"{type(scheduler).__name__}")
        self.env = env
        self.scheduler = scheduler
        self.pricer = pricer
        self.outcome_fn = outcome_fn
        # The default outcome is left to `complete_step` (outcome=None): no StepOutcome a step.
        self._default_outcome = outcome_fn == StepOutcome.without_speculation
        self.replica_id = replica_id
        self.on_finish = on_finish
        self.next_arrival_s = next_arrival_s
        self.records = records if records is not None else RequestRecords(replica_id)
        self.steps = steps if steps is not None else StepLog()
        self.num_outstanding = 0  # submitted and not finished (the least-outstanding router reads it)
        self._wake: simpy.Event = env.event()
        self._window_open = False  # inside a decode window's timeout (`_decode_window`)
        self.arrivals_bounded = arrivals_bounded
        # A window prices its steps before it knows how many will run (it stops at the next
        # arrival, or an interrupt cuts it), and a cost model's step counts (`num_predictions`,
        # the out-of-grid counts of a measured model, a fitted model's extrapolations) must be
        # the step-by-step path's: "tally" models defer their counts (`count_priced`, the
        # measured tables'), "free" ones count nothing (the roofline); any other is "counted" as
        # it prices, so its windows price one step at a time, only steps sure to run: none in a
        # closed loop (interrupts), and no prefill windows (they drop priced steps).
        cost_model = pricer.cost_model
        self._pricing = ("tally" if hasattr(cost_model, "count_priced") else
                         "free" if getattr(cost_model, "prices_without_counting", False) else "counted")
        if self._pricing == "counted" and not arrivals_bounded:
            self.next_arrival_s = None
        self.chain_admissions = chain_admissions
        # An open loop's arrival times (windows end so that SimPy orders an arrival at their end as
        # step by step), and the prefill windows they allow (`_prefill_window`).
        self._arrival_at = arrival_due_at if arrivals_bounded and self.next_arrival_s is not None else None
        self.arrival_due_at = (self._arrival_at if pricer.pipeline_stages == 1 and self._pricing != "counted"
                               and not async_scheduling else None)  # prefill windows stamp admissions now
        self.async_scheduling = async_scheduling
        self._step_factors = step_factors  # step-time variance: one factor a step (simulator/step_variance.py)
        self.sole_replica = sole_replica
        # vLLM V1's steps whose chunk takes the whole budget (`Scheduler.chunk_window`): certain
        # whatever arrives, so an open loop takes them at once, async scheduling or not.
        self._chunk_windows = (getattr(scheduler, "chunk_windows", False) and self._arrival_at is not None
                               and pricer.pipeline_stages == 1 and self._pricing != "counted")
        # Async scheduling: requests submitted while the replica steps, with their arrival times,
        # not yet seen by the scheduler (`_take_visible`); and whether the replica waits idle.
        self._unseen: list[tuple[float, Request]] = []
        self._idle = True
        self._woke = True  # the next step is scheduled now, not at the start of the step before
        self._arrival_sent_at_s = -math.inf  # send time of the arrival that interrupted a window
        self._last_step_start_s = -math.inf  # start of the latest step begun
        self._window_step_s = 0.0  # the last step a window priced (s): sizes the next window's first chunk
        stages = pricer.pipeline_stages
        self._stages = [simpy.Resource(env, capacity=1) for _ in range(stages)]
        self.process = env.process(self._run() if stages == 1 else self._run_pipelined())

    def submit(self, request: Request, sent_at_s: float = -math.inf) -> None:
        """Hand an arriving request to the scheduler (called at its arrival time).

        `sent_at_s`: when the arrival was scheduled (a closed-loop client's send time); it
        decides, for a decode window interrupted exactly at a step boundary, which of the two
        same-instant events SimPy would have processed first on the step-by-step path.

        With async scheduling a request submitted while the replica steps waits in `_unseen`
        until a step is scheduled after its arrival (`_take_visible`).
        """
        if self.async_scheduling and not self._idle:
            self._unseen.append((self.env.now, request))  # counted outstanding: the router sees it
        else:
            rejection = self.scheduler.add_request(request)
            if rejection is not None:
                self._record([rejection])
                return
        self.num_outstanding += 1
        if self._window_open and not self.arrivals_bounded:  # the scheduler must see it after the step under way
            self._window_open = False
            self._arrival_sent_at_s = sent_at_s
            self.process.interrupt("arrival")
        self._signal()

    def _signal(self) -> None:
        if not self._wake.triggered:
            self._wake.succeed()

    def _wait(self):
        self._wake = self.env.event()
        return self._wake

    def _complete(self, plan: BatchPlan) -> None:
        self.records.note_step_end(self.env.now)  # the time its tokens get (before they are recorded)
        finished = self.scheduler.complete_step(plan, None if self._default_outcome else self.outcome_fn(plan),
                                                self.env.now)
        if finished:  # most steps finish nothing
            self.num_outstanding -= len(finished)
            self._record(finished)

    def _record(self, finished: list[FinishedRequest]) -> None:
        self.records.add(finished)
        if self.on_finish is not None:
            for f in finished:
                self.on_finish(f)

    def _take_visible(self) -> float:
        """Async scheduling: hand the scheduler the requests that vLLM's scheduling of the step
        beginning now has seen, and return the time it was scheduled (`first_scheduled_s`).

        vLLM schedules the step beginning now at the start of the step before it (the moment the
        step before that one ended), from the requests that had arrived by then
        (`EngineCore.step_with_batch_queue`, class docstring): those with an arrival at or before
        `_last_step_start_s`. When nothing else can run, vLLM's next `schedule()` comes at the
        end of the step under way and sees every request that arrived by now. A visibility rule
        on times alone, so decode windows (taken only when no request is unseen) and the
        step-by-step path give the same steps.
        """
        now_s = self.env.now
        decided_s = now_s if self._woke else self._last_step_start_s
        self._woke = False
        if self._unseen:
            seen = [r for t, r in self._unseen if t <= decided_s]
            if not seen and not self.scheduler.has_work():  # the step before scheduled nothing
                decided_s = now_s
                seen = [r for _, r in self._unseen]
            self._hand_over(seen)
        return decided_s

    def _note_schedule_wait(self, running_before: int, plan: BatchPlan, decided_s: float, start_s: float) -> None:
        note_schedule_wait(self.scheduler, self.records, running_before, plan, decided_s, start_s)

    def _hand_over(self, seen: list[Request]) -> None:
        """Hand the first len(seen) requests of `_unseen` (`seen`, in arrival order) to the scheduler."""
        if seen:
            self._unseen = self._unseen[len(seen):]  # in arrival order: the seen ones lead
            for request in seen:
                self._admit_seen(request)

    def _admit_seen(self, request: Request) -> None:
        """Hand a request held in `_unseen` to the scheduler (counted outstanding already)."""
        rejection = self.scheduler.add_request(request)
        if rejection is not None:
            self.num_outstanding -= 1
            self._record([rejection])

    def _run(self):
        decided_s = 0.0
        while True:
            if self.async_scheduling:
                decided_s = self._take_visible()
            if not self.scheduler.has_work():
                self._idle = True
                yield self._wait()
                # Woken from idle: vLLM's engine core was blocked on its input queue and
                # schedules at once (the requests were handed to the scheduler on submit).
                self._idle, self._woke = False, True
                continue
            if self.next_arrival_s is not None and self._unseen:
                # A request the step beginning now does not see (async scheduling) may be admitted
                # by the next: only this step can be a window (its plan built without `schedule`).
                running, window = self.scheduler.decode_window()
                if window >= 1:
                    yield from self._decode_window(running, 1)
                    continue
            elif self.next_arrival_s is not None:
                running, window = self.scheduler.decode_window()
                if window >= 2:
                    yield from self._decode_window(running, window)
                    continue
                if self.arrival_due_at is not None:
                    prefill = self.scheduler.prefill_window(self.chain_admissions)
                    if prefill is not None and (yield from self._prefill_window(prefill)):
                        continue
                    # The admission step now (none with an arrival due at this instant, which
                    # SimPy may hand the scheduler first) and its prompt's steps after it.
                    admission = (self.scheduler.admission_window(self.env.now, self.chain_admissions) if prefill is None
                                 and self.next_arrival_s() > self.env.now else None)
                    if admission is not None:
                        yield from self._prefill_window(admission, keep_first=True)
                        continue
            if self._chunk_windows:
                chunk = self.scheduler.chunk_window()
                if chunk is not None and (yield from self._chunk_window(chunk)):
                    continue
            start_s = self.env.now
            if self.async_scheduling:
                running_before = len(self.scheduler.running)
                plan = self.scheduler.schedule(decided_s)
                if decided_s < start_s:
                    self._note_schedule_wait(running_before, plan, decided_s, start_s)
            else:
                plan = self.scheduler.schedule(start_s)
            self._last_step_start_s = start_s
            if not plan.columns.request_ids:  # `plan.is_empty`, without two property calls per step
                if (yield from self._wait_for_kv_load()):
                    continue
                raise SimulationStalled(self._stall_message(start_s))
            duration_s = self.pricer.step_s(plan)
            if self._step_factors is not None:
                duration_s *= self._step_factors.next()
            yield self.env.timeout(duration_s)
            self._complete(plan)
            self.steps.append(start_s, duration_s, plan, self.replica_id)

    def _wait_for_kv_load(self):
        """Nothing to run but requests waiting for their KV loads from an offload tier: wait
        until the first is done, or an arrival (vLLM's engine polls them with empty steps,
        `simulator.scheduler.kv_offload`). Returns False when no load is in flight."""
        done_s = self.scheduler.next_load_done_s()
        if done_s <= self.env.now:  # done and still not schedulable: stalled
            return False
        if done_s == math.inf and self.scheduler.config.policy == "fcfs":
            # None in flight: an arrival queues behind the waiting head that fits nowhere (vLLM's
            # waiting loop stops at the first it cannot allocate), so nothing can change: stalled
            # now (it waited for a timeout at inf: the stall was reported at t=inf, after the run).
            return False
        self._idle = True  # vLLM polls with empty steps: an arrival meanwhile is seen at once (async scheduling)
        yield self.env.any_of([self.env.timeout(delay_until_s(self.env.now, done_s)), self._wait()])
        self._idle, self._woke = False, True
        return True

    def _decode_window(self, running: list, max_steps: int):
        """Up to `max_steps` plain decode steps of every running sequence as one SimPy timeout,
        ending before the first step that would start at or after the next arrival.

        Each step is priced as its plan would be and the clock adds the same floats in the same
        order, so the step times equal the step-by-step path's. A request submitted to this
        replica mid-window (a closed-loop client served by another replica) interrupts it: the
        step under way runs to its end and the window stops there, as the step-by-step loop
        would have scheduled the newcomer at that step's end.
        """
        batch = len(running)  # `running` is the scheduler's list: finishes shrink it
        starts, durations, ends, tallies = [], [], [], []
        self._price_decode_steps(self._window_pricer(running), self.env.now, max_steps, starts, durations, ends,
                                 tallies)
        steps = yield from self._wait_window(starts, ends)
        self._count_priced(tallies, steps)
        if not steps:
            return
        self.records.note_step_ends(ends[:steps])
        kv_used, finished = self.scheduler.advance_decodes(ends[:steps])
        if finished:
            self.num_outstanding -= len(finished)
            self._record(finished)
        self.steps.extend_decodes(starts[:steps], durations[:steps], batch, kv_used, self.replica_id)

    def _price_decode_steps(self, price, now_s: float, max_steps: int, starts: list[float], durations: list[float],
                            ends: list[float], tallies: list) -> None:
        """Append to `starts`, `durations`, `ends` up to `max_steps` plain decode steps priced by
        `price` ((first step, steps) -> (durations, tally)) from the clock `now_s`, stopping before
        the first that would start at or after the next arrival (the window's first step always
        begins: a step is under way at its start); `tallies` gets (tally, steps begun) per priced
        chunk, for `_count_priced`."""
        next_arrival_s = self.next_arrival_s()
        chunk_steps = 1 if self._pricing == "counted" else _WINDOW_CHUNK_STEPS
        # The first chunk: the steps the last priced step's duration says fit before the next
        # arrival, and two more (steps of the same batch grow slowly), so that few steps are
        # priced and not run; then `chunk_steps` at a time. Any chunk sizes give the same steps.
        first = chunk_steps
        if self._window_step_s > 0.0 and next_arrival_s < math.inf:
            first = min(chunk_steps, max(2, int((next_arrival_s - now_s) / self._window_step_s) + 2))
        done = 0
        while done < max_steps and not (starts and now_s >= next_arrival_s):
            # Priced a few steps at a time: the next arrival usually ends a window long before
            # its last possible step.
            chunk = min(first if not done else chunk_steps, max_steps - done)
            chunk_s, tally = price(done, chunk)
            self._window_step_s = chunk_s[-1]
            # SimPy's clock arithmetic, step by step (`accumulate` adds in order: the same
            # floats): step t of the chunk starts at clock[t] and is begun unless the next
            # arrival is due by then. The clock never runs backwards, so the first step not
            # begun is found by bisection.
            clock = list(accumulate(chunk_s, initial=now_s))
            begun = bisect_left(clock, next_arrival_s, 0 if starts else 1, chunk)
            starts += clock[:begun]
            durations += chunk_s[:begun]
            ends += clock[1:begun + 1]
            tallies.append((tally, begun))
            done += begun
            now_s = clock[begun]

    def _wait_window(self, starts: list[float], ends: list[float]):
        """Wait for a window's steps (`starts`, `ends`) to end; return how many ran. In a closed
        loop an arrival submitted to this replica during it cuts it after the step under way
        (`submit`, `_steps_begun`); an open loop's run to their end."""
        steps = len(starts)
        previous_start_s = self._last_step_start_s
        self._window_open = True
        try:
            if len(starts) > 1 and self._arrival_at is not None and self._arrival_at(ends[-1]):
                # A request arrives exactly at the window's end: the step-by-step path queues that
                # end when the last step begins, so SimPy orders it after the arrival's last
                # wait (queued then or earlier) and before anything queued later; so does this.
                yield from wait_until(self.env, starts[-1])
            yield from wait_until(self.env, ends[-1])
        except simpy.Interrupt:
            steps = self._steps_begun(starts, previous_start_s)
            if steps:
                yield from wait_until(self.env, ends[steps - 1])
        self._window_open = False
        self._last_step_start_s = starts[steps - 1] if steps else previous_start_s
        return steps

    def _prefill_window(self, window, keep_first: bool = False):
        """The steps of a `Scheduler.prefill_window` as one SimPy timeout: every decode's token and
        the prompt's next chunks, priced and clocked as the step-by-step path would. Returns
        whether any step ran (else the caller schedules one).

        An open loop's only (`arrival_due_at`). A last step whose budget has room for an
        admission is kept only if it begins before the next arrival (the window's first step
        always does, as in `_decode_window`). Without such a step no arrival can change the
        window's steps, and it ends before any step whose end an arrival is due at (SimPy's
        same-time order there depends on when that arrival's event was queued), but for its
        first step with `keep_first` (an admission window's, already admitted): one step begun
        now is timed, and ordered among same-time events, as the step-by-step path's step would
        be. A last step that admits the head of `waiting` (`window.admit`) does so only if it runs.
        """
        partial, decodes, chunks, last_has_leftover, admit = window
        durations, tally = self._prefill_window_prices(partial, decodes, chunks, admit)
        clock = list(accumulate(durations, initial=self.env.now))
        steps = len(chunks)
        if last_has_leftover and steps > 1 and clock[steps - 1] >= self.next_arrival_s():
            steps -= 1  # an arrival comes before it: it may be admitted there
            last_has_leftover = False
        if not last_has_leftover:
            while steps > keep_first and self.arrival_due_at(clock[steps]):
                steps -= 1
        if not steps:
            return False
        if steps < len(chunks):
            admit = None  # its step is left out
        prefill_steps = steps
        starts, ends, durations = clock[:steps], clock[1:steps + 1], durations[:steps]
        tallies = [(tally, steps)]
        if last_has_leftover:  # the prompt's last chunk runs: its sequence decodes with the others next
            more = self.scheduler.decode_steps_after_prefill(partial, decodes, steps)
            if more:
                context = [seq.num_computed_tokens + steps for seq in decodes] + [partial.prefill_target_tokens]
                self._price_decode_steps(self._pricer_of_contexts(context), ends[-1], more, starts, durations, ends,
                                         tallies)
        steps = yield from self._wait_window(starts, ends)
        self._count_priced(tallies, steps)
        if steps:
            self._apply_prefill_window(partial, decodes, chunks, prefill_steps, steps, starts, durations, ends,
                                       admit if steps >= prefill_steps else None)
        return True

    def _chunk_window(self, window):
        """The steps of a `Scheduler.chunk_window` (vLLM V1: the decodes and a running prompt's
        chunks) as one SimPy timeout, priced and clocked as the step-by-step path would. Only a
        last chunk that leaves budget could admit: it is kept only if no request arrives before
        it starts (none unseen either, async scheduling), so arrivals change none of the steps;
        the window ends before any step whose end an arrival is due at (SimPy's same-time order
        there, as `_prefill_window`). Returns whether any step ran (else the caller schedules one).

        With async scheduling the step-by-step path hands the scheduler, as each step after the
        first is scheduled, the requests that arrived by the start of the step before
        (`_take_visible`): a rejected one is recorded then, before the finishes of the window's
        last step, so those up to its second-to-last step's start are handed over first here.
        """
        partial, decodes, chunks = window.partial, window.decodes, window.chunks
        durations, tally = self._prefill_window_prices(partial, decodes, chunks)
        clock = list(accumulate(durations, initial=self.env.now))
        steps = len(chunks)
        if window.last_has_leftover and (self._unseen or clock[steps - 1] >= self.next_arrival_s()):
            steps -= 1  # a request may reach the waiting queue before it: it could be admitted there
        while steps and self._arrival_at(clock[steps]):
            steps -= 1
        if self.async_scheduling and not self.sole_replica and steps > 1:
            # Another replica's router may read this one's queues at an arrival (`vllm_dp`: the
            # waiting requests; `least_outstanding`: a rejection's count): no request handed over
            # mid-window, so none that arrived by a step's start may be followed by two more steps.
            steps = min(steps, 1 if self._unseen else 1 + bisect_left(clock, self.next_arrival_s(), 0, steps))
        if not steps:
            return False
        starts, ends = clock[:steps], clock[1:steps + 1]
        steps = yield from self._wait_window(starts, ends)
        self._count_priced([(tally, steps)], steps)
        if self.async_scheduling and steps > 1 and self._unseen:
            decided_s = starts[steps - 2]
            self._hand_over([r for t, r in self._unseen if t <= decided_s])
        self._apply_prefill_window(partial, decodes, chunks, steps, steps, starts, durations, ends, None)
        return True

    def _apply_prefill_window(self, partial, decodes: list, chunks: list[int], prefill_steps: int, steps: int,
                              starts: list[float], durations: list[float], ends: list[float], admit) -> None:
        """Apply the first `steps` steps of a prefill window: its first `prefill_steps` carry the
        prompt's chunks (the last also admitting `admit`'s head, if given), the rest are plain
        decodes of every running sequence."""
        chunk_steps = min(steps, prefill_steps)
        del chunks[chunk_steps:]
        self.records.note_step_ends(ends[:steps])
        batch = len(self.scheduler.running)  # the decode steps' batch: the decodes and the prompt's sequence
        kv_used, finished = self.scheduler.advance_prefill_window(partial, decodes, chunks, ends[:steps], admit,
                                                                  starts[chunk_steps - 1])
        self.steps.extend_prefill_chunks(starts[:chunk_steps], durations[:chunk_steps], chunks, len(decodes),
                                         kv_used[:chunk_steps], self.replica_id, admit[1] if admit else 0)
        if steps > chunk_steps:
            self.steps.extend_decodes(starts[chunk_steps:steps], durations[chunk_steps:steps], batch,
                                      kv_used[chunk_steps:], self.replica_id)
        if finished:
            self.num_outstanding -= len(finished)
            self._record(finished)

    def _prefill_window_prices(self, partial, decodes: list, chunks: list[int], admit=None
                               ) -> tuple[list[float], list | None]:
        """(durations (s), tally) of a prefill window's steps: each priced from the columns its
        plan would have (the decodes' one token each at their growing contexts, then the chunk;
        an admitted head's first chunk after it in the last) as `stage_s` prices a plan (no
        swaps, drafts or stages here); a "tally" cost model from the contexts' totals, counting
        nothing yet (`_count_priced`), a "free" one by `StepPricer.compute_s` (it counts nothing)."""
        if admit is not None:  # the last step, with its two chunks, from its columns
            durations, tally = self._prefill_window_prices(partial, decodes, chunks[:-1])
            last = len(chunks) - 1
            k = len(decodes)
            head, first = admit
            queries = [1] * k + [chunks[-1], first]
            contexts = [seq.num_computed_tokens + last for seq in decodes]
            contexts += [partial.num_computed_tokens + sum(chunks[:-1]), head.num_computed_tokens]
            prefills = [False] * k + [True, True]
            counts = (chunks[-1] + first, 2, 0, k + chunks[-1] + first)
            swap_s = (0 + 0) * self.pricer.swap_s_per_token
            if self._pricing == "tally":
                t, out = self.pricer.cost_model.price_scheduled_step(queries, contexts, prefills, counts[3], 2, k)
                return durations + [t + swap_s], tally + [out]
            return durations + [self.pricer.compute_s(queries, contexts, prefills, counts, k) + swap_s], None
        k = len(decodes)
        chunk_context = partial.num_computed_tokens
        swap_s = (0 + 0) * self.pricer.swap_s_per_token  # `stage_s`'s swap term of a step that swaps nothing
        if self._pricing == "tally":  # the measured tables' prices from the contexts' totals
            durations, tally = self.pricer.cost_model.price_chunk_steps(
                k, sum(map(_NUM_COMPUTED_TOKENS, decodes)), chunk_context, chunks)
            return [t + swap_s for t in durations], tally
        context = [seq.num_computed_tokens for seq in decodes]
        queries, prefills = [1] * k + [0], [False] * k + [True]
        compute_s = self.pricer.compute_s
        durations = []
        for j, q in enumerate(chunks):
            queries[k] = q
            contexts = [c + j for c in context]
            contexts.append(chunk_context)
            durations.append(compute_s(queries, contexts, prefills, (q, 1, 0, k + q), k) + swap_s)
            chunk_context += q
        return durations, None

    def _window_pricer(self, running: list) -> Callable[[int, int], tuple[list[float], list | None]]:
        """`(first_step, num_steps) -> (durations, tally)` of a decode window of `running` (as
        `decode_steps_s`): a "tally" cost model (the measured tables') prices from the contexts'
        total, summed once, counting nothing yet (`_count_priced`); any other as
        `decode_steps_s` (tally None: it counted what it priced, or counts nothing)."""
        return self._pricer_of_contexts([seq.num_computed_tokens for seq in running])

    def _pricer_of_contexts(self, context: list[int]) -> Callable[[int, int], tuple[list[float], list | None]]:
        """`_window_pricer` of sequences holding `context` KV tokens each at step 0."""
        cost_model = self.pricer.cost_model
        if self._pricing == "tally":
            batch, total = len(context), sum(context)
            by_total = cost_model.price_decode_steps_total
            return lambda first_step, num_steps: by_total(batch, total, num_steps, first_step)
        return lambda first_step, num_steps: (decode_steps_s(cost_model, context, first_step, num_steps), None)

    def _count_priced(self, tallies: list[tuple[list | None, int]], steps: int) -> None:
        """Count the first `steps` steps a window priced and ran (a "tally" cost model's
        `count_priced`, chunk by chunk: (tally, steps begun in it)); nothing for the others."""
        if self._pricing != "tally":
            return
        count = self.pricer.cost_model.count_priced
        for tally, begun in tallies:
            used = min(begun, steps)
            if used:
                count(tally, used)
            steps -= used

    def _steps_begun(self, starts: list[float], previous_start_s: float) -> int:
        """Steps of an interrupted window that the step-by-step path would have begun before
        the arrival reached the scheduler: those starting before now, and the one starting
        exactly now if its start event was queued first. That event was queued when the step
        before it began (SimPy breaks same-time ties by queueing order), the arrival's when it
        was sent: a client answering a completion at once (think time 0) sends at that instant,
        after the replica queued its next step, so the newcomer waits a step."""
        now_s = self.env.now
        steps = bisect_left(starts, now_s)
        if steps < len(starts) and starts[steps] == now_s:
            predecessor_start_s = starts[steps - 1] if steps else previous_start_s
            if self._arrival_sent_at_s >= predecessor_start_s:
                steps += 1
        return steps

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
                    if (yield from self._wait_for_kv_load()):
                        continue
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
        message = (f"{self.scheduler.name}: {len(self.scheduler.waiting)} waiting and "
                   f"{len(self.scheduler.running)} running requests but nothing schedulable at t={now_s:.6f}s")
        if self.scheduler.kv_offload is not None and not self.scheduler.running:
            held = sum(self.scheduler.block_manager.blocks_held(s.request_id) for s in self.scheduler.waiting)
            if held:
                message += (f": waiting requests hold {held} of {self.scheduler.block_manager.num_blocks} KV blocks "
                            "for their loads from the offload tier and none fits beside the others (vLLM allocates "
                            "a load's blocks when it starts and never preempts for a waiting request): the KV pool "
                            "is too small for these prompts with offload; give more KV blocks")
        return message


def decode_steps_s(cost_model, context_tokens: list[int], first_step: int, num_steps: int) -> list[float]:
    """Durations (s) of plain-decode steps `first_step` .. `first_step + num_steps - 1` of
    sequences whose KV contexts are `context_tokens` at step 0 (growing by one per step): the
    cost model's `predict_decode_steps_s` when it has one, else one `predict_step_s` per step."""
    vectorised = getattr(cost_model, "predict_decode_steps_s", None)
    if vectorised is not None:
        return vectorised(context_tokens, num_steps, first_step)
    # Lists, not arrays: the cost models take either, and a measured model reads lists without
    # converting them (the same Python ints either way).
    context = list(map(int, context_tokens))
    query, prefill = [1] * len(context), [False] * len(context)
    predict = cost_model.predict_step_s
    return [predict(query, [c + j for c in context] if j else context, prefill)
            for j in range(first_step, first_step + num_steps)]


def delay_until_s(now_s: float, at_s: float) -> float:
    """A delay d >= 0 with now_s + d == at_s in floating point when a sum within a few ulps of
    the first guess lands there, and otherwise the first d with now_s + d > at_s; 0 when at_s is
    not in the future.

    SimPy adds a delay to its clock, and now + (at − now) can fall an ulp short (a request would
    be on the device before it arrived) or an ulp long (a decode window would end off the time
    the step-by-step path reaches).
    """
    if at_s <= now_s:
        return 0.0
    delay = at_s - now_s
    for _ in range(8):
        total = now_s + delay
        if total == at_s:
            return delay
        delay = math.nextafter(delay, math.inf if total < at_s else -math.inf)
    while now_s + delay < at_s:  # never before at_s
        delay = math.nextafter(delay, math.inf)
    return delay


def delay_legs_s(now_s: float, at_s: float) -> list[float]:
    """Delays whose running sum from `now_s`, added one by one as SimPy's clock adds them,
    reaches `at_s` exactly; one delay when a single one lands there (always when at_s <= 2 now_s).

    A single delay cannot always land exactly: when at_s > 2 now_s the floats now_s + d skip
    some values (0.0801768 + d never equals 0.2224047 − 1 ulp), and a step or arrival would then
    happen an ulp after the time the step-by-step path reaches, which can reorder events at that
    instant (a closed-loop client would wait a step). Legs to 2·now (or to at_s / 2) are exact by
    Sterbenz's lemma (m − c is exact for c ≤ m ≤ 2c), so at most log2(at_s / now_s) + 1 legs.
    """
    legs: list[float] = []
    cur_s = now_s
    while True:
        delay = delay_until_s(cur_s, at_s)
        if cur_s + delay == at_s or at_s <= cur_s:
            legs.append(delay)
            return legs
        # Inexact only while cur_s < at_s / 2 (else at_s − cur_s is exact), so 0 < cur_s here.
        mid_s = at_s / 2 if 2 * cur_s >= at_s / 2 else 2 * cur_s
        legs.append(mid_s - cur_s)
        cur_s = mid_s


def wait_until(env: simpy.Environment, at_s: float):
    """SimPy process fragment (`yield from wait_until(env, t)`): wake exactly at `at_s`
    (`delay_legs_s`); an interrupt during any leg propagates to the caller."""
    for delay in delay_legs_s(env.now, at_s):
        yield env.timeout(delay)
