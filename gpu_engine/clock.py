"""The engine's clocks: when requests arrive and when a step ends, in seconds from the run's start.

- `WallClock` (real time): arrivals wait for the wall clock; a step ends when it ends.
- `FastClock` (as fast as possible): time is the sum of measured step durations and jumps over
  idle gaps to the next arrival, so a trace with long quiet periods replays quickly while every
  request still sees the queueing that the measured step times imply. A step is measured in
  wall time, or (`timing="cpu"`, for CPU runs) in the CPU time of the serving thread: on a shared
  machine that is what the step would take alone, and it is how the profiler times CPU ops.
- `PricedClock`: steps take what a cost model predicts (measured times are still recorded in the
  plan log). The engine then makes exactly the simulator's plans, step for step.
"""
from __future__ import annotations

import time

from simulator.pricing import StepPricer
from simulator.scheduler import BatchPlan


class WallClock:
    """Real time from construction (`time.perf_counter`)."""

    def __init__(self) -> None:
        self._origin_s = time.perf_counter()

    def now_s(self) -> float:
        return time.perf_counter() - self._origin_s

    def wait_until(self, t_s: float) -> None:
        """Sleep until the clock reads `t_s` (an arrival)."""
        delay_s = t_s - self.now_s()
        if delay_s > 0:
            time.sleep(delay_s)

    def end_step(self, start_s: float, plan: BatchPlan, measured_s: float, measured_cpu_s: float = 0.0) -> float:
        """The step's end time: now."""
        return self.now_s()


TIMINGS = ("wall", "cpu")


class FastClock:
    """Virtual time: advanced by each step's measured duration; idle gaps are skipped.

    Args:
        timing: `wall` (time.perf_counter around the step) or `cpu` (time.thread_time: the
            serving thread's CPU time; only meaningful when the device is this CPU and torch
            computes on the calling thread, i.e. one intra-op thread).
    """

    def __init__(self, timing: str = "wall") -> None:
        if timing not in TIMINGS:
            raise ValueError(f"timing {timing!r}: valid values are {', '.join(TIMINGS)}")
        self.timing = timing
        self._now_s = 0.0

    def now_s(self) -> float:
        return self._now_s

    def wait_until(self, t_s: float) -> None:
        self._now_s = max(self._now_s, t_s)

    def end_step(self, start_s: float, plan: BatchPlan, measured_s: float, measured_cpu_s: float = 0.0) -> float:
        self._now_s = start_s + self._duration_s(plan, measured_cpu_s if self.timing == "cpu" else measured_s)
        return self._now_s

    def _duration_s(self, plan: BatchPlan, measured_s: float) -> float:
        return measured_s


class PricedClock(FastClock):
    """Virtual time advanced by the simulator's price of each executed plan (seconds).

    Args:
        cost: a `CostModel` or a `simulator.pricing.StepPricer` (swap and draft-model time too),
            as `simulator.simulate` takes it.
    """

    def __init__(self, cost) -> None:
        super().__init__()
        self.pricer = cost if isinstance(cost, StepPricer) else StepPricer(cost)

    def _duration_s(self, plan: BatchPlan, measured_s: float) -> float:
        return self.pricer.step_s(plan)
