"""Time one op on a device: warm up, then several samples; the median and spread per call.

Clocks: the calling thread's CPU time (`time.thread_time`, CLOCK_THREAD_CPUTIME_ID) for CPU ops
run on one intra-op thread — it does not count time the thread spends preempted, so other
processes on a shared machine do not inflate the timings (measured on the 2-core CI machine under
load: a 128×256×1376 GEMM's median over six runs varied by 2-6 % on this clock and 30-65 % on the
wall clock); the host's `time.perf_counter` (CPU ops on several threads, whose CPU times would add
up); and CUDA events recorded on the current stream (GPU kernels; the CUDA programming guide's
recommended way to time device work without counting launch gaps). torch is imported lazily,
only for CUDA.

Calls shorter than the clock resolves well are batched: a sample times `calls_per_sample` calls
and is divided by that count (as `timeit` and `triton.testing.do_bench` do), so a 5 µs op is timed
over about `min_sample_s` per sample rather than once at timer resolution.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

# Assumptions (settings, not measurements): a sample lasts at least 200 µs, well above
# perf_counter's sub-microsecond resolution and CUDA events' ~0.5 µs; 3 warm-up calls take
# allocator and cache effects out of the first samples; 7 samples give a median that one
# preempted sample cannot move.
MIN_SAMPLE_S = 200e-6
WARMUP_CALLS = 3
NUM_SAMPLES = 7


@dataclass(frozen=True)
class Timing:
    """Per-call seconds of one op at one shape: statistics over `num_samples` samples.

    Attributes:
        median_s, min_s, max_s, mean_s, std_s: per-call time statistics, seconds.
        num_samples: samples taken; calls_per_sample: calls each sample averaged.
        per_call_s: the samples themselves (seconds per call).
    """

    median_s: float
    min_s: float
    max_s: float
    mean_s: float
    std_s: float
    num_samples: int
    calls_per_sample: int
    per_call_s: tuple = field(default=(), compare=False, repr=False)

    def as_row(self) -> dict[str, float]:
        """Columns of a profile CSV row (`time_*_s`, `num_samples`, `calls_per_sample`)."""
        return {"time_median_s": self.median_s, "time_min_s": self.min_s, "time_max_s": self.max_s,
                "time_mean_s": self.mean_s, "time_std_s": self.std_s, "num_samples": self.num_samples,
                "calls_per_sample": self.calls_per_sample}

    @classmethod
    def from_samples(cls, per_call_s: np.ndarray, calls_per_sample: int) -> "Timing":
        """Statistics of per-call sample times (seconds)."""
        per_call = np.asarray(per_call_s, dtype=np.float64)
        return cls(float(np.median(per_call)), float(per_call.min()), float(per_call.max()),
                   float(per_call.mean()), float(per_call.std()), len(per_call), calls_per_sample,
                   tuple(per_call.tolist()))


def host_clock(fn: Callable[[], object], calls: int) -> float:
    """Seconds `calls` calls of `fn` take on the host's monotonic clock."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return time.perf_counter() - start


def thread_cpu_clock(fn: Callable[[], object], calls: int) -> float:
    """CPU seconds the calling thread spends in `calls` calls of `fn` (`time.thread_time`).

    Equals the op's wall time on an idle core when the op runs entirely in the calling thread
    (torch with one intra-op thread); excludes time preempted by other processes.
    """
    start = time.thread_time()
    for _ in range(calls):
        fn()
    return time.thread_time() - start


def cuda_event_clock(fn: Callable[[], object], calls: int) -> float:
    """Seconds `calls` calls of `fn` take on the current CUDA stream (start/end events).

    Synchronises on the end event, so the sample includes every kernel the calls queued.
    """
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e-3  # elapsed_time is in milliseconds


def cuda_host_clock(fn: Callable[[], object], calls: int) -> float:
    """Host seconds of `calls` calls including the device work they queue (synchronised at both
    ends): for host-side ops such as input preparation, whose cost is the CPU's wall time."""
    import torch

    torch.cuda.synchronize()
    elapsed = host_clock(fn, calls)
    torch.cuda.synchronize()
    return elapsed


def time_op(fn: Callable[[], object], clock: Callable[[Callable[[], object], int], float] = host_clock,
            *, warmup_calls: int = WARMUP_CALLS, num_samples: int = NUM_SAMPLES,
            min_sample_s: float = MIN_SAMPLE_S) -> Timing:
    """Warm `fn` up, size the samples, and time `num_samples` samples of it.

    Args:
        fn: runs the op once (inputs bound in).
        clock: `thread_cpu_clock`, `host_clock`, `cuda_event_clock` or `cuda_host_clock`.
        warmup_calls: untimed calls first; the last one also sizes the samples.
        num_samples: timed samples.
        min_sample_s: target duration of one sample; short calls are batched to reach it.

    Returns:
        The per-call `Timing`.

    Raises:
        ValueError: warmup_calls or num_samples below 1.
    """
    if warmup_calls < 1 or num_samples < 1:
        raise ValueError(f"warmup_calls and num_samples must be >= 1, got {warmup_calls}, {num_samples}")
    for _ in range(warmup_calls - 1):
        fn()
    one_call_s = max(clock(fn, 1), 1e-9)
    calls = max(1, int(np.ceil(min_sample_s / one_call_s * (1 - 1e-9))))  # exact ratios stay exact
    per_call = np.array([clock(fn, calls) / calls for _ in range(num_samples)])
    return Timing.from_samples(per_call, calls)
