"""Host speed on a shared CPU: a fixed reference step, timed now and then, to express CPU times at
one reference speed.

Why: on the shared 2-core CI machine the speed of a core changes by up to 2× from one second to
the next (another tenant on the physical core), for every process on that core and for pure
Python as much as for torch. Thread CPU time (`timing.thread_cpu_clock`) removes preemption but
not this. Measured there (BENCHMARKS.md, "host speed"): over 90 s in two processes, the engine's
own 8-sequence decode step took 1.7–3.9 ms, while its ratio to this probe, timed alternately in
the same thread, stayed within 1.03–1.08. So a step's CPU time divided by the probe's current
time, times the probe's time during the calibration, is the step's time at the calibration's
speed: what the profile and the cost model fitted on it describe.

The probe is the engine's own forward (`gpu_engine`, imported lazily as `profiler.torch_ops`
does) of a fixed reference model: the 2-layer, 64-wide Llama of the test data, seeded random
weights, float32, a 2-sequence decode at contexts 20 and 30. It is the same for every model and
every calibration, so probe times from different days are comparable too (the ledger records
them). A generic torch probe (matmuls and softmax without the engine's Python) tracked the engine
steps to ±10 % only: the probe must do the same mix of Python and small kernels as a step.
Only meaningful on a CPU with one torch thread (the clocks here are the calling thread's).
"""
from __future__ import annotations

import statistics
import time

from profiler.model_spec import ModelSpec

# The reference model (tests/data/engine/tiny/config.json) and its fixed step: (context tokens,
# block table) per decoding sequence, blocks of 4 tokens.
REFERENCE_MODEL = ModelSpec("host-speed-probe", 2, 64, 4, 2, 16, 128, 256, 256)
_BLOCK_SIZE = 4
_PROBE_SEQUENCES = ((20, tuple(range(0, 6))), (30, tuple(range(6, 14))))
_WARMUP_CALLS = 5
# Probe after every timed piece of work and scale it by the mean of the probes just before and just
# after it (the median of a window of 2). The speed changes on the scale of a step: on the CI
# machine (BENCHMARKS.md, "host speed"), alternating two fixed steps with the probe for 60 s, the
# steps' dispersion around their medians was 23.5 % raw; 4.6 % scaled this way; 6.0 % by the probe
# before alone; 8.3-10.6 % probing every 3-6 steps with a window of 3. A probe costs about one
# small step of wall time (not of the engine's clock).
PROBE_INTERVAL_S = 0.0
PROBE_WINDOW = 2


class HostSpeedProbe:
    """Times the reference step (`measure_s`, thread CPU seconds of one forward pass).

    Builds the reference model on the CPU on construction (about 0.1 s; torch imported here).
    """

    def __init__(self) -> None:
        import torch

        from gpu_engine.build import build_model
        from gpu_engine.inputs import SequenceWork
        from gpu_engine.model import ModelArgs
        from gpu_engine.runner import ModelRunner

        model = build_model(ModelArgs(REFERENCE_MODEL), dtype=torch.float32, device="cpu", seed=0, attention="torch")
        self._runner = ModelRunner(model, num_blocks=16, block_size=_BLOCK_SIZE)
        self._work = [SequenceWork(i, [1], context, list(blocks), 1)
                      for i, (context, blocks) in enumerate(_PROBE_SEQUENCES)]
        for _ in range(_WARMUP_CALLS):
            self._runner.run(self._work)

    def measure_s(self) -> float:
        """Thread CPU seconds of one reference step (only the calling thread's time counts)."""
        start = time.thread_time()
        self._runner.run(self._work)
        return time.thread_time() - start


class HostSpeedTracker:
    """The host's current speed, as the reference step's recent time.

    Call `maybe_probe` after each timed piece of work (never inside one): it times the probe when
    `interval_s` of the thread's CPU time has passed since the last probe (with the default 0,
    always). `current_s` is the median of the last `window` probe times (by default the mean of
    the probes just before and just after the work); `scale(reference_s)` converts a CPU time
    measured now into one at the speed where the probe took `reference_s`. Construction takes the
    first probe.

    Args:
        probe: a `HostSpeedProbe` (or anything with `measure_s()`).
        interval_s: thread CPU seconds between probes.
        window: probes in the running median.
    """

    def __init__(self, probe=None, interval_s: float = PROBE_INTERVAL_S, window: int = PROBE_WINDOW):
        self.probe = probe or HostSpeedProbe()
        self.interval_s = interval_s
        self.window = window
        self.samples_s: list[float] = []  # every probe time, in order
        self._last_cpu_s = float("-inf")
        self.maybe_probe()

    def maybe_probe(self) -> None:
        """Time the probe if `interval_s` of thread CPU time has passed since the last one."""
        now = time.thread_time()
        if now - self._last_cpu_s >= self.interval_s:
            self.samples_s.append(self.probe.measure_s())
            self._last_cpu_s = time.thread_time()

    def current_s(self) -> float:
        """Median of the latest `window` probe times, seconds."""
        return statistics.median(self.samples_s[-self.window:])

    def scale(self, reference_s: float) -> float:
        """Factor that turns a CPU time measured now into one at the reference speed:
        reference_s / current_s (below 1 while the host is slower than at the reference)."""
        return reference_s / self.current_s()

    def median_s(self) -> float:
        """Median over every probe so far, seconds: the reference a calibration records."""
        return statistics.median(self.samples_s)

    def summary(self) -> dict:
        """What the records keep of the probes: their median, min and max (seconds) and count."""
        return {"median_s": self.median_s(), "min_s": min(self.samples_s), "max_s": max(self.samples_s),
                "probes": len(self.samples_s)}


def seconds_or_none(value, allow_zero: bool = False) -> float | None:
    """`value` as seconds if it is a finite number > 0 (≥ 0 with `allow_zero`), else None (also
    for a bool, which Python counts as an int). Checks probe and step times read from files."""
    import math

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and (value > 0 or (allow_zero and value == 0)) else None


def calibration_probe_s(cost_model: str) -> float | None:
    """The probe time a calibration recorded (`host_probe_s` in its profile.json), for a cost model
    spelled `profile:DIR` (`~` expanded, as everywhere a cost model is read); None for any other
    cost model or a profile taken without a probe (on CUDA, on several threads, or before the
    probe existed).

    Raises:
        ValueError: DIR's profile.json is unreadable or not a JSON object, or its `host_probe_s`
            is not a finite positive number (names the file).
    """
    from pathlib import Path

    from profiler.json_object import read_json_object
    from profiler.profile_data import SIDECAR
    from profiler.shipped import PROFILE_PREFIX

    if not cost_model.startswith(PROFILE_PREFIX):
        return None
    path = Path(cost_model[len(PROFILE_PREFIX):]).expanduser() / SIDECAR
    sidecar = read_json_object(path, "cannot read the calibration's profile sidecar",
                               "not a JSON object (is this a `sarathi-sim profile` directory?)")
    value = sidecar.get("host_probe_s")
    if value is None:
        return None
    seconds = seconds_or_none(value)
    if seconds is None:
        raise ValueError(f"{path}: host_probe_s must be a finite positive number of seconds, got {value!r}")
    return seconds
