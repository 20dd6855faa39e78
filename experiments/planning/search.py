"""Capacity search of a sweep: per point and seed, bisect QPS against the percentile SLOs."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from experiments.planning.capacity import confidence_interval, default_slo, find_capacity
from experiments.planning.repetitions import trial_point
from experiments.config import POOLS, ClosedLoopTrace, SweepConfig
from experiments.deployment import cluster_gpus
from experiments.point import run_point
from profiler import get_model_spec

TRIAL_COLUMNS = ("point_id", "label", "seed", "trial_qps", "passed", "offered_qps", "throughput_rps",
                 "output_throughput_tps",
                 "ttft_s_p50", "ttft_s_p90", "ttft_s_p99", "tbt_s_p50", "tbt_s_p99", "tpot_s_p50",
                 "e2e_s_p50", "scheduling_delay_s_p50", "num_preemptions", "completed", "rejected",
                 "cost_model_label", "cost_model_steps_out_of_range")
# A `cluster:` point's trials also keep each pool's cost model (`simulate_cluster`), for its
# capacity row (`cost_model_summary`); a colocated point's trials have no such columns.
POOL_COST_COLUMNS = tuple(f"{pool}_{key}" for pool in POOLS
                          for key in ("cost_model_label", "cost_model_steps_out_of_range"))


def search_slo(point: SweepConfig) -> dict[str, float]:
    """The point's percentile SLOs, or Sarathi-Serve's strict defaults for its model size."""
    return point.slo or default_slo(get_model_spec(point.model).num_params)


def trial_config(point: SweepConfig, qps: float, seed: int) -> SweepConfig:
    """The point at `qps` as repetition `seed` runs it (its trace's and engine's seeds + `seed`,
    `experiments.planning.repetitions.repetition_point`, as the xPyD search's repetitions) with the
    search's trial size; repetition 0 is the point's own seeds.

    Raises:
        ValueError: a closed-loop trace (its load is a number of clients, not a QPS), or a seed +
            `seed` above the largest seed.
    """
    search = point.search
    if isinstance(point.trace, ClosedLoopTrace):
        raise ValueError("capacity search sets a QPS; a closed-loop trace is sized by its clients instead")
    return trial_point(point, seed, qps, search.num_requests).model_copy(update={"slo": search_slo(point)})


def search_capacity(point: SweepConfig, point_id: int, seed: int) -> tuple[float, list[dict]]:
    """Bisection for one point and seed; returns (capacity QPS, one row per trial)."""
    search = point.search
    rows: list[dict] = []

    served: dict[float, float] = {}

    def passes(qps: float) -> bool:
        row = run_point(trial_config(point, qps, seed), point_id, trim_fraction=search.trim_fraction).row
        passed = bool(row["slo_met"])
        rows.append({**{k: row.get(k, np.nan) for k in TRIAL_COLUMNS},
                     **{k: row[k] for k in POOL_COST_COLUMNS if k in row}, "seed": seed, "trial_qps": qps,
                     "passed": passed})
        served[qps] = row.get("throughput_rps", np.nan)
        return passed

    low, high = search.qps
    result = find_capacity(passes, low, high, search.precision, max_qps=high, max_trials=search.max_trials,
                           served_qps=lambda qps: served.get(qps) if served.get(qps, 0) > 0 else None)
    return result.capacity_qps, rows


def capacity_row(label: str, point_id: int, capacities: list[float], max_qps: float) -> dict:
    """Mean capacity over seeds with its 95 % Student-t interval; `capacity_at_bound` when a seed
    passed at the top of the searched range (the true capacity may be higher).

    A seed whose lowest rate already failed (capacity NaN: below the searched range) counts 0 in
    the mean and the interval, which understates the capacity and never overstates it (dropping
    it would report the other seeds' mean as if every seed had met the SLOs);
    `seeds_below_lowest_rate` counts them and `capacity_by_seed` names them "below". The capacity
    is NaN only when every seed is below the range."""
    below = sum(math.isnan(c) for c in capacities)
    mean, low, high = confidence_interval(_below_as_zero(capacities))
    return {"point_id": point_id, "label": label, "capacity_qps": math.nan if below == len(capacities) else mean,
            "capacity_ci_low": low, "capacity_ci_high": high,
            "capacity_by_seed": ", ".join("below" if math.isnan(c) else f"{c:.4g}" for c in capacities),
            "capacity_at_bound": any(c >= max_qps for c in capacities), "seeds_below_lowest_rate": below}


def _below_as_zero(capacities: list[float]) -> list[float]:
    """Seeds below the searched range as 0 (see `capacity_row`), unless every seed is."""
    if all(math.isnan(c) for c in capacities):
        return list(capacities)
    return [0.0 if math.isnan(c) else c for c in capacities]


def cost_model_summary(trials: list[dict]) -> dict:
    """A capacity row's cost model: the label its trials were priced with (one point has one cost
    model) and their steps outside the measured grids, summed; {} for trials cached before the
    label was recorded. A `cluster:` point's (the unprefixed ones its decode pool's) come with
    each pool's, `prefill_` / `decode_` prefixed, where its trials recorded them."""
    summary = {}
    for prefix in ("", *(f"{pool}_" for pool in POOLS)):
        label_key, out_key = f"{prefix}cost_model_label", f"{prefix}cost_model_steps_out_of_range"
        labels = [t.get(label_key) for t in trials if isinstance(t.get(label_key), str)]
        if labels:
            summary[label_key] = labels[0]
            summary[out_key] = sum(int(t.get(out_key) or 0) for t in trials)
    return summary


def per_gpu_row(point: SweepConfig, capacity_qps: float) -> dict:
    """A capacity row's per-GPU columns, so layouts on different GPU counts compare (a 2P3D
    cluster against one TP2 replica): `num_gpus` (`cluster_gpus`: replicas × TP × PP × DP, or
    the pools' sum) and `capacity_per_gpu_qps`: `capacity_row`'s mean capacity over seeds (a seed
    below the searched range counted 0; NaN when every seed is) / GPUs, DistServe's "goodput per
    GPU" (Zhong et al., OSDI'24 §2.1) with the search's percentile SLOs as the bar."""
    gpus = cluster_gpus(point)
    return {"num_gpus": gpus, "capacity_per_gpu_qps": capacity_qps / gpus}


def fleet_row(point: SweepConfig, capacity_qps: float, trials: list[dict]) -> dict:
    """Copies of this point's deployment needed for the fleet's target QPS (`fleet_replicas`:
    replicas of a one-replica point, whole xPyD clusters of a `cluster:` point), their GPUs
    (copies × `cluster_gpus`), and cost per million output tokens. Assumes copies behind a
    router add capacity linearly (no cross-copy contention). `capacity_qps` is `capacity_row`'s
    mean, which counts a seed below the searched range as 0: the copies are then an upper bound,
    which the report's fleet line says (`report._fleet_lines`, from `seeds_below_lowest_rate`).
    """
    fleet = point.fleet
    if fleet is None or not capacity_qps > 0:
        return {}
    replicas = math.ceil(fleet.target_qps / capacity_qps)
    row = {"fleet_replicas": replicas, "fleet_gpus": replicas * cluster_gpus(point)}
    passing = [t for t in trials if t["passed"] and t["throughput_rps"] > 0]
    if fleet.gpu_hour_usd is not None and passing:
        tokens_per_request = float(np.mean([t["output_throughput_tps"] / t["throughput_rps"] for t in passing]))
        usd_per_hour = row["fleet_gpus"] * fleet.gpu_hour_usd
        tokens_per_hour = fleet.target_qps * tokens_per_request * 3600
        row["usd_per_million_output_tokens"] = usd_per_hour / tokens_per_hour * 1e6
    return row


LOAD_COLUMNS = ("point_id", "label", "trial_qps", "slo_met", "throughput_rps", "output_throughput_tps",
                "goodput_rps", "tbt_s_p99", "ttft_s_p90", "tpot_s_p50", "scheduling_delay_s_p50")


def load_row(point: SweepConfig, point_id: int, qps: float, run=run_point) -> dict:
    """One point at one QPS of the `search.loads` grid (repetition 0: the point's own seeds; trimmed
    as the trials); `run` is
    `run_point` or one with its signature (the sweep's, which reuses cached simulations)."""
    row = run(trial_config(point, qps, seed=0), point_id, trim_fraction=point.search.trim_fraction).row
    out = {k: row.get(k, np.nan) for k in LOAD_COLUMNS}
    out.update(trial_qps=qps, slo_met=bool(row["slo_met"]))
    return out


def policy_table(loads: pd.DataFrame) -> pd.DataFrame:
    """For each QPS of the grid, the point with the best goodput among those meeting every SLO
    (throughput when no goodput thresholds are set); consecutive loads with the same winner are
    merged into one band. Loads where no point meets the SLOs say so."""
    rows = []
    metric = "goodput_rps" if loads["goodput_rps"].notna().any() else "throughput_rps"
    for qps, group in loads.groupby("trial_qps", sort=True):
        meeting = group[group["slo_met"]]
        best = meeting.loc[meeting[metric].idxmax(), "label"] if len(meeting) else "none meets the SLOs"
        if rows and rows[-1]["best point"] == best:
            rows[-1]["QPS to"] = qps
        else:
            rows.append({"QPS from": qps, "QPS to": qps, "best point": best})
    return pd.DataFrame(rows)


def pareto_frontier(loads: pd.DataFrame) -> pd.DataFrame:
    """Rows not dominated in (higher throughput, lower P99 TBT), sorted by throughput."""
    rows = loads.dropna(subset=["throughput_rps", "tbt_s_p99"]).sort_values(
        ["throughput_rps", "tbt_s_p99"], ascending=[False, True])
    frontier, best_tbt = [], float("inf")
    for index, row in rows.iterrows():
        if row["tbt_s_p99"] < best_tbt:
            frontier.append(index)
            best_tbt = row["tbt_s_p99"]
    return rows.loc[frontier].sort_values("throughput_rps")
