"""Take a profile: time every op of the catalogue over the shape grid within a time budget.

The budget is kept by estimating each shape's wall time before running it (the last timed shape
of the same op, scaled by the ratio of their roofline times at the device's measured rates) and
skipping what would not fit; skipped shapes are listed in the sidecar. Shapes come from
`shape_grid` in level order, so a short budget gives every op a coarse grid first.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import asdict
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable

import pandas as pd

from profiler.device_info import describe_device, measure_rates
from profiler.fitted import check_fit_coverage
from profiler.model_spec import ModelSpec
from profiler.ops import Op, OpCatalogue
from profiler.profile_data import Profile, model_hash
from profiler.shape_grid import GridLimits, default_limits, shape_grid
from profiler.timing import NUM_SAMPLES, Timing, cuda_event_clock, cuda_host_clock, host_clock, thread_cpu_clock, time_op

DTYPES = {"cpu": ("float32", 4), "cuda": ("bfloat16", 2)}
# Assumption: a shape costs its timed calls plus about 5 ms of setup (allocating and drawing its
# inputs); calls shorter than 20 µs are batched by `time_op` to about a 200 µs sample.
_SETUP_S = 5e-3
_MIN_CALL_S = 20e-6
# Fractions of the budget for the first timing of grid levels 0, 1, 2 (what a level leaves rolls
# over to the next). The rest re-times every shape in shuffled rounds (`_time_grid`).
LEVEL_SHARES = (0.35, 0.15, 0.1)


class _CostEstimator:
    """Predicts a shape's wall time from the last timed shape of the same op."""

    def __init__(self, catalogue: OpCatalogue, rates: dict):
        self.catalogue = catalogue
        self.flops_per_s = rates["peak_flops"]
        self.bytes_per_s = rates["mem_bandwidth_bytes_per_s"]
        self.last: dict[str, tuple[float, float]] = {}  # op → (roofline s, wall s)

    def roofline_s(self, op: Op, shape: dict[str, int]) -> float:
        flops, num_bytes = self.catalogue.work(op, {k: [v] for k, v in shape.items()})
        return max(float(flops[0]) / self.flops_per_s, float(num_bytes[0]) / self.bytes_per_s, _MIN_CALL_S)

    def estimate_s(self, op: Op, shape: dict[str, int]) -> float:
        if op.name not in self.last:
            return _SETUP_S
        roofline_then, wall_then = self.last[op.name]
        return wall_then * self.roofline_s(op, shape) / roofline_then

    def observe(self, op: Op, shape: dict[str, int], wall_s: float) -> None:
        self.last[op.name] = (self.roofline_s(op, shape), wall_s)


def clock_for(op: Op, device_kind: str, num_threads: int) -> Callable:
    """The clock an op is timed with (`timing`): thread CPU time on one CPU thread, the wall clock
    on several; CUDA events on a GPU, except the host-side `cpu_overhead` (synchronised wall)."""
    if device_kind == "cpu":
        return thread_cpu_clock if num_threads == 1 else host_clock
    return cuda_host_clock if op.family == "cpu_overhead" else cuda_event_clock


def run_profile(model: ModelSpec, device_kind: str, budget_s: float, out_dir: str | Path, *,
                tensor_parallel_size: int = 1, limits: GridLimits | None = None, block_size: int = 16,
                seed: int = 0, num_threads: int = 1, num_samples: int = NUM_SAMPLES,
                log: Callable[[str], None] = lambda message: None) -> Profile:
    """Profile `model`'s ops on this machine's CPU or first CUDA device and write `out_dir`.

    Args:
        model: the model (one rank's shard shapes at `tensor_parallel_size` are timed).
        device_kind: "cpu" (float32) or "cuda" (bf16).
        budget_s: wall-clock budget for the timing loop, seconds (device set-up not included).
        out_dir: the profile directory to write (see `profile_data`).
        limits: the largest shapes; default `default_limits` for the device kind.
        block_size: KV-cache block size of the attention shapes.
        seed: seeds inputs and the random shapes.
        num_threads: torch's intra-op threads on the CPU. With one (the default) ops are timed by
            the thread's CPU time, which other processes on a shared machine cannot inflate; run
            the engine on one thread too when comparing with it. Ignored on CUDA.
        num_samples: timed samples per shape (`timing.time_op`).
        log: receives one line per op family finished and a summary.

    Returns:
        The written `Profile`.

    Raises:
        ValueError: an unknown device kind, a non-positive budget, or CUDA requested without a GPU;
            `profile_data.ProfileError` (a ValueError) when the budget left a layer GEMM or an
            attention op with fewer shapes than a fit needs (`fitted.check_fit_coverage`): the
            directory is written (what was timed, and what was skipped) but cannot be fitted.
    """
    import torch

    if device_kind not in DTYPES:
        raise ValueError(f"unknown device {device_kind!r}; valid: cpu, cuda")
    if budget_s <= 0:
        raise ValueError(f"budget_s must be > 0, got {budget_s}")
    if device_kind == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch sees no CUDA device on this machine")
    from profiler.torch_ops import TorchOpBench

    if device_kind == "cpu":
        torch.set_num_threads(num_threads)

    dtype_name, dtype_bytes = DTYPES[device_kind]
    catalogue = OpCatalogue(model, tensor_parallel_size, dtype_bytes, dtype_bytes)
    limits = limits or default_limits(model.max_model_len, device_kind)
    rates = measure_rates(device_kind, dtype_name)
    bench = TorchOpBench(catalogue, device_kind, dtype_name, block_size, seed)
    ops = tuple(op for op in catalogue.ops if op.family != "all_reduce")
    host_speed = None
    if device_kind == "cpu" and num_threads == 1:  # thread CPU clocks: see profiler.host_speed
        from profiler.host_speed import HostSpeedTracker
        host_speed = HostSpeedTracker()
    rows, skipped, elapsed_s = _time_grid(bench, shape_grid(ops, limits, seed), catalogue, rates,
                                          device_kind, budget_s, num_samples, num_threads, seed, host_speed)
    bench.release()
    if tensor_parallel_size > 1:
        skipped.append({"op": "all_reduce", "reason": "needs tensor_parallel_size devices; "
                        "priced by the ring model (roofline.ring_all_reduce_time_s)"})
    tables = {family: pd.DataFrame(family_rows) for family, family_rows in rows.items()}
    meta = {
        "source": "sarathi-sim profile",
        "created_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": describe_device(device_kind), "dtype": dtype_name, "dtype_bytes": dtype_bytes,
        "kv_dtype_bytes": dtype_bytes, "model": model.to_fields(), "model_hash": model_hash(model),
        "tensor_parallel_size": tensor_parallel_size, "block_size": block_size, "rates": rates,
        "budget_s": budget_s, "elapsed_s": round(elapsed_s, 3), "limits": asdict(limits),
        "attention_backend": bench.attention_backend, "seed": seed, "num_samples": num_samples,
        "clock": sorted({clock_for(op, device_kind, num_threads).__name__ for op in ops}),
        "skipped": skipped,
        **_host_speed_meta(host_speed),
    }
    profile = Profile(meta, tables)
    profile.save(out_dir)
    counts = {family: len(t) for family, t in tables.items()}
    log(f"timed {sum(counts.values())} shapes {counts} in {elapsed_s:.1f} s; skipped {len(skipped)}")
    check_fit_coverage(profile, out_dir)
    return profile


def _host_speed_meta(host_speed) -> dict:
    """Sidecar keys of the host-speed probe: `host_probe_s` (the median probe time, the speed every
    timing was scaled to and the reference of `cpu-normalized` engine runs) and its spread."""
    if host_speed is None:
        return {}
    return {"host_probe_s": host_speed.median_s(),
            "host_probe": {**host_speed.summary(), "model": "profiler.host_speed.REFERENCE_MODEL"}}


def _time_grid(bench, grid: list[list], catalogue: OpCatalogue, rates: dict, device_kind: str,
               budget_s: float, num_samples: int, num_threads: int, seed: int = 0,
               host_speed=None) -> tuple[dict[str, list], list[dict], float]:
    """Time the grid level by level within the budget, then re-time it in rounds.

    First timing: level k may spend `LEVEL_SHARES[k]` of the budget plus what earlier levels
    left; within a level each op may spend an equal part of what remains, so a slow op cannot
    starve the next. A shape whose estimated wall time exceeds its op's remaining share is skipped.

    Rounds: the rest of the budget re-times every timed shape, in a new shuffled order each round,
    and pools the samples of all its rounds (column `rounds` counts them; `num_samples` is the
    pooled count). A busy machine's spells last longer than one shape's samples, so revisiting
    shapes at other moments, not more samples at once, is what averages them out; shuffling turns
    slow drift into noise rather than a bias between shapes timed early and late.

    With a `host_speed` tracker (CPU, one thread), the probe step is timed after every shape and
    each shape's samples are scaled by the probes around it to the speed of the median probe, so
    that a spell of a slow core (up to 2× on the shared CI machine, lasting seconds) does not end
    up in the profile.

    Returns:
        (family → rows, skipped entries {"op", "shape", "reason"}, seconds spent).
    """
    estimator = _CostEstimator(catalogue, rates)
    rows: dict[str, list] = defaultdict(list)
    skipped: list[dict] = []
    start = time.perf_counter()

    samples: dict[tuple[str, int], list[float]] = {}  # (family, row index) → per-call samples

    def timed_row(op: Op, shape: dict[str, int]) -> tuple[dict, tuple]:
        fn = bench.callable(op, shape)  # allocates the op's weights once: not part of the estimate
        began = time.perf_counter()
        timing = time_op(fn, clock_for(op, device_kind, num_threads), num_samples=num_samples)
        estimator.observe(op, shape, time.perf_counter() - began + _SETUP_S)
        per_call = timing.per_call_s
        if host_speed is not None:  # in units of the probes around the shape until the end
            host_speed.maybe_probe()
            per_call = tuple(t / host_speed.current_s() for t in per_call)
        return {"op": op.name, **shape, **timing.as_row(), "rounds": 1}, per_call

    def fits(op: Op, shape: dict[str, int], end_s: float) -> bool:
        return time.perf_counter() + estimator.estimate_s(op, shape) <= start + end_s

    for level, shapes in enumerate(grid):
        level_end = sum(LEVEL_SHARES[:level + 1]) * budget_s
        ops = list(dict.fromkeys(op for op, _ in shapes))
        for i, op in enumerate(ops):
            op_end = time.perf_counter() - start + (start + level_end - time.perf_counter()) / (len(ops) - i)
            for _, shape in (entry for entry in shapes if entry[0] is op):
                if fits(op, shape, op_end):
                    row, per_call = timed_row(op, shape)
                    samples[op.family, len(rows[op.family])] = list(per_call)
                    rows[op.family].append(row)
                else:
                    skipped.append({"op": op.name, "shape": shape, "reason": f"budget (level {level})"})
    _retime_rounds(rows, samples, catalogue, timed_row, lambda op, shape: fits(op, shape, budget_s), seed)
    if host_speed is not None:
        reference_s = host_speed.median_s()
        for (family, i), per_call in samples.items():
            row = rows[family][i]
            scaled = Timing.from_samples([t * reference_s for t in per_call], row["calls_per_sample"])
            rows[family][i] = {**row, **scaled.as_row()}
    return rows, skipped, time.perf_counter() - start


def _retime_rounds(rows: dict[str, list], samples: dict, catalogue: OpCatalogue, timed_row: Callable,
                   fits: Callable, seed: int) -> None:
    """Re-time every row in shuffled rounds while `fits`; pool each shape's samples over its rounds
    (the row's statistics are then over all of them)."""
    import numpy as np

    order = list(samples)
    rng = np.random.default_rng(seed)
    while order:
        for k in rng.permutation(len(order)):
            family, i = order[k]
            row = rows[family][i]
            op = catalogue.op(row["op"])
            shape = {key: row[key] for key in op.key}
            if not fits(op, shape):
                return
            again, per_call = timed_row(op, shape)
            samples[family, i].extend(per_call)
            pooled = Timing.from_samples(samples[family, i], row["calls_per_sample"])
            rows[family][i] = {**row, **pooled.as_row(), "rounds": row["rounds"] + 1}
