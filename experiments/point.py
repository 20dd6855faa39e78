"""Run one point of a sweep: build its trace and deployment, simulate, summarise against the SLOs."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.config import FileTrace, PoissonTrace, ProfileTrace, SweepConfig, describe_point, slo_summary_key
from experiments.deployment import (DTYPE_BYTES, build_outcome_fn, build_pricer, build_scheduler_config,
                                    build_schedulers)
from profiler import RooflineCostModel, get_device_spec, get_model_spec
from simulator.metrics import goodput_count
from simulator.simulate import simulate
from traces import Request, cut, load_profile, read_trace, scale_to_qps, synthetic_trace


@dataclass
class PointResult:
    """One point's outputs: a summary row, per-request and per-step records."""

    row: dict
    requests: pd.DataFrame
    steps: pd.DataFrame


def load_requests(trace: ProfileTrace | FileTrace | PoissonTrace) -> tuple[list[Request], dict]:
    """Build the request list a trace config describes.

    Returns:
        (requests sorted by arrival, info dict with the trace's source and rejected rows).

    Raises:
        ValueError / traces.TraceFormatError: a missing path or a bad file, with the file named.
    """
    if isinstance(trace, ProfileTrace):
        requests = load_profile(trace.name).sample(trace.num_requests, trace.qps, seed=trace.seed)
        return requests, {"trace_source": f"profile {trace.name}", "trace_rows_rejected": 0}
    if isinstance(trace, PoissonTrace):
        requests = synthetic_trace(trace.num_requests, trace.qps, prompt=tuple_or_int(trace.prompt_tokens),
                                   output=tuple_or_int(trace.output_tokens), seed=trace.seed)
        return requests, {"trace_source": "poisson", "trace_rows_rejected": 0}
    if trace.path is None:
        raise ValueError("trace.path is not set: give it in the config or with --set trace.path=FILE")
    loaded = read_trace(Path(trace.path).expanduser(), format=trace.format, strict=trace.strict)
    requests = loaded.requests
    if trace.max_requests is not None:
        requests = cut(requests, max_requests=trace.max_requests)
    if trace.qps is not None:
        requests = scale_to_qps(requests, trace.qps)
    rejected = sum(len(rows) for rows in loaded.rejected_rows.values())
    return requests, {"trace_source": str(trace.path), "trace_rows_rejected": rejected}


def build_cost_model(point: SweepConfig) -> RooflineCostModel:
    """`cost_model: auto` is the roofline until measured profiles ship (calibration work)."""
    e = point.engine
    return RooflineCostModel(get_model_spec(point.model), get_device_spec(point.device),
                             tensor_parallel_size=e.tensor_parallel_size,
                             dtype_bytes=DTYPE_BYTES[e.dtype], kv_dtype_bytes=DTYPE_BYTES[e.kv_cache_dtype])


def tuple_or_int(value):
    return tuple(value) if isinstance(value, (list, tuple)) else value


def run_point(point: SweepConfig, point_id: int = 0) -> PointResult:
    """Simulate one point; the row holds its settings, summary metrics, SLO verdicts and goodput."""
    requests, info = load_requests(point.trace)
    sched_config = build_scheduler_config(point)
    result = simulate(requests, build_schedulers(point, sched_config), build_pricer(point, build_cost_model(point)),
                      outcome_fn=build_outcome_fn(point), router=point.engine.router, seed=point.engine.seed)

    row = {"point_id": point_id, "label": describe_point(point), "model": point.model, "device": point.device}
    row.update(point.engine.used_settings())
    row.update(num_gpu_blocks=sched_config.num_gpu_blocks, max_model_len=sched_config.max_model_len,
               offered_qps=_offered_qps(requests), **info)
    row.update(result.summary)
    met = True
    for key, limit in point.slo.items():
        value = result.summary[slo_summary_key(key)]
        ok = bool(value <= limit)  # NaN (undefined) fails the SLO
        row[f"slo_{key}"] = ok
        met &= ok
    row["slo_met"] = met if point.slo else np.nan
    if point.goodput:
        good = goodput_count(result.requests, point.goodput)
        row["goodput_rps"] = good / row["makespan_s"] if row["makespan_s"] > 0 else 0.0
    result.requests.insert(0, "point_id", point_id)
    result.steps.insert(0, "point_id", point_id)
    return PointResult(row, result.requests, result.steps)


def _offered_qps(requests: list[Request]) -> float:
    if len(requests) < 2 or requests[-1].arrival_s <= requests[0].arrival_s:
        return float("nan")  # a rate over a zero span is undefined
    return (len(requests) - 1) / (requests[-1].arrival_s - requests[0].arrival_s)
