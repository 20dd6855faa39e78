"""Capacity search of a sweep: per point and seed, bisect QPS against the percentile SLOs."""
from __future__ import annotations

from typing import Any

import numpy as np

from experiments.capacity import confidence_interval, default_slo, find_capacity
from experiments.config import ClosedLoopTrace, FileTrace, SweepConfig
from experiments.point import run_point
from profiler import get_model_spec

TRIAL_COLUMNS = ("point_id", "label", "seed", "trial_qps", "passed", "offered_qps", "throughput_rps",
                 "ttft_s_p50", "ttft_s_p90", "ttft_s_p99", "tbt_s_p50", "tbt_s_p99", "tpot_s_p50",
                 "e2e_s_p50", "scheduling_delay_s_p50", "num_preemptions", "completed", "rejected")


def search_slo(point: SweepConfig) -> dict[str, float]:
    """The point's percentile SLOs, or Sarathi-Serve's strict defaults for its model size."""
    return point.slo or default_slo(get_model_spec(point.model).num_params)


def trial_config(point: SweepConfig, qps: float, seed: int) -> SweepConfig:
    """The point at `qps` with `seed` (trace sampling and acceptance) and the search's trial size.

    Raises:
        ValueError: a closed-loop trace (its load is a number of clients, not a QPS).
    """
    search = point.search
    if isinstance(point.trace, ClosedLoopTrace):
        raise ValueError("capacity search sets a QPS; a closed-loop trace is sized by its clients instead")
    update: dict[str, Any] = {"qps": qps}
    if isinstance(point.trace, FileTrace):
        update["max_requests"] = search.num_requests
    else:
        update.update(num_requests=search.num_requests, seed=seed)
    trace = point.trace.model_copy(update=update)
    engine = point.engine.model_copy(update={"seed": seed})
    return point.model_copy(update={"trace": trace, "engine": engine, "slo": search_slo(point)})


def search_capacity(point: SweepConfig, point_id: int, seed: int) -> tuple[float, list[dict]]:
    """Bisection for one point and seed; returns (capacity QPS, one row per trial)."""
    search = point.search
    rows: list[dict] = []

    def passes(qps: float) -> bool:
        row = run_point(trial_config(point, qps, seed), point_id, trim_fraction=search.trim_fraction).row
        passed = bool(row["slo_met"])
        rows.append({**{k: row.get(k, np.nan) for k in TRIAL_COLUMNS}, "seed": seed, "trial_qps": qps,
                     "passed": passed})
        return passed

    low, high = search.qps
    result = find_capacity(passes, low, high, search.precision, max_qps=high, max_trials=search.max_trials)
    return result.capacity_qps, rows


def capacity_row(label: str, point_id: int, capacities: list[float], max_qps: float) -> dict:
    """Mean capacity over seeds with its 95 % Student-t interval; `capacity_at_bound` when a seed
    passed at the top of the searched range (the true capacity may be higher)."""
    mean, low, high = confidence_interval(capacities)
    return {"point_id": point_id, "label": label, "capacity_qps": mean, "capacity_ci_low": low,
            "capacity_ci_high": high, "capacity_by_seed": ", ".join(f"{c:.4g}" for c in capacities),
            "capacity_at_bound": any(c >= max_qps for c in capacities)}
