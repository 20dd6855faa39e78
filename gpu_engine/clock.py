"""The engine's clocks: when requests arrive and when a step ends, in seconds from the run's start.

- `WallClock` (real time): arrivals wait for the wall clock; a step ends when it ends.
- `FastClock` (as fast as possible): time is the sum of measured step durations and jumps over
  idle gaps to the next arrival, so a trace with long quiet periods replays quickly while every
  request still sees the queueing that the measured step times imply. A step is measured in
  wall time, or (`timing="cpu"`, for CPU runs) in the CPU time of the serving thread: on a shared
  machine that is what the step would take alone, and it is how the profiler times CPU ops.
  `timing="cpu-normalized"` also divides out the host's speed changes: each step's CPU time is
  scaled by reference / current time of a fixed probe step timed just before and just after it
  (`profiler.host_speed`), i.e. to the speed of the calibration that recorded the reference.
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

    host_probe_s = float("nan")  # no host-speed probe on the wall clock


TIMINGS = ("wall", "cpu", "cpu-normalized")


class FastClock:
    """Virtual time: advanced by each step's measured duration; idle gaps are skipped.

    Args:
        timing: `wall` (time.perf_counter around the step), `cpu` (time.thread_time: the
            serving thread's CPU time; only meaningful when the device is this CPU and torch
            computes on the calling thread, i.e. one intra-op thread) or `cpu-normalized` (the
            CPU time at the speed where the probe step took `reference_probe_s`).
        reference_probe_s: for `cpu-normalized`, the calibration's probe time (seconds;
            `profiler.host_speed`, the profile's `host_probe_s`).
        host_speed: for `cpu-normalized`, the tracker to use (default: a new `HostSpeedTracker`).

    Attributes:
        host_probe_s: the probe time the last step was scaled by (NaN unless `cpu-normalized`).

    Raises:
        ValueError: an unknown timing, or `cpu-normalized` without a positive reference.
    """

    def __init__(self, timing: str = "wall", *, reference_probe_s: float | None = None, host_speed=None) -> None:
        if timing not in TIMINGS:
            raise ValueError(f"timing {timing!r}: valid values are {', '.join(TIMINGS)}")
        self.timing = timing
        self._now_s = 0.0
        self.host_probe_s = float("nan")
        self.reference_probe_s = reference_probe_s
        self.host_speed = None
        if timing == "cpu-normalized":
            if not reference_probe_s or reference_probe_s <= 0:
                raise ValueError("timing cpu-normalized needs the calibration's probe time (reference_probe_s > 0)")
            from profiler.host_speed import HostSpeedTracker

            self.host_speed = host_speed or HostSpeedTracker()

    def now_s(self) -> float:
        return self._now_s

    def wait_until(self, t_s: float) -> None:
        self._now_s = max(self._now_s, t_s)

    def end_step(self, start_s: float, plan: BatchPlan, measured_s: float, measured_cpu_s: float = 0.0) -> float:
        if self.host_speed is None:
            measured = measured_cpu_s if self.timing == "cpu" else measured_s
        else:
            self.host_speed.maybe_probe()  # after the step was timed: the probe is in no step
            self.host_probe_s = self.host_speed.current_s()  # the probes around the step
            measured = measured_cpu_s * self.reference_probe_s / self.host_probe_s
        self._now_s = start_s + self._duration_s(plan, measured)
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
