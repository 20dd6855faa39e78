"""Capacity search of a sweep: per point and seed, bisect QPS against the percentile SLOs."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from experiments.planning.capacity import confidence_interval, default_slo, find_capacity
from experiments.planning.repetitions import trial_point
from experiments.planning.steady_state import Trial, drift_floor_s, run_until_decided
from experiments.planning.trial_length import trial_length
from experiments.planning.trial_reuse import shared_cost_model
from experiments.config import POOLS, ClosedLoopTrace, SweepConfig, slo_summary_key
from experiments.deployment import cluster_gpus
from experiments.point import run_point
from profiler import get_model_spec

TRIAL_COLUMNS = ("point_id", "label", "seed", "trial_qps", "passed", "offered_qps", "throughput_rps",
                 "output_throughput_tps",
                 "ttft_s_p50", "ttft_s_p90", "ttft_s_p99", "tbt_s_p50", "tbt_s_p99", "tpot_s_p50",
                 "e2e_s_p50", "scheduling_delay_s_p50", "num_preemptions", "completed", "rejected",
                 "cost_model_label", "cost_model_steps_out_of_range", "num_steps")
# A `cluster:` point's trials also keep each pool's cost model (`simulate_cluster`), for its
# capacity row (`cost_model_summary`); a colocated point's trials have no such columns.
POOL_COST_COLUMNS = tuple(f"{pool}_{key}" for pool in POOLS
                          for key in ("cost_model_label", "cost_model_steps_out_of_range"))


def search_slo(point: SweepConfig) -> dict[str, float]:
    """The point's percentile SLOs, or Sarathi-Serve's strict defaults for its model size."""
    return point.slo or default_slo(get_model_spec(point.model).num_params)


def trial_config(point: SweepConfig, qps: float, seed: int, num_requests: int | None = None) -> SweepConfig:
    """The point at `qps` as repetition `seed` runs it (its trace's and engine's seeds + `seed`,
    `experiments.planning.repetitions.repetition_point`, as the xPyD search's repetitions) with
    `num_requests` (default: the first trial's, `search_length`); repetition 0 is the point's own seeds.

    Raises:
        ValueError: a closed-loop trace (its load is a number of clients, not a QPS), or a seed +
            `seed` above the largest seed.
    """
    search = point.search
    if isinstance(point.trace, ClosedLoopTrace):
        raise ValueError("capacity search sets a QPS; a closed-loop trace is sized by its clients instead")
    size = search_length(point).base if num_requests is None else num_requests
    return trial_point(point, seed, qps, size).model_copy(update={"slo": search_slo(point)})


def search_length(point: SweepConfig):
    """The point's `experiments.planning.trial_length.TrialLength`: `search.num_requests` per
    instance, lengthened up to `search.max_trial_scale` ×."""
    return trial_length(point, point.search.num_requests, point.search.max_trial_scale)


def search_capacity(point: SweepConfig, point_id: int, seed: int) -> tuple[float, list[dict]]:
    """Bisection for one point and seed; returns (capacity QPS, one row per trial run: an
    undecided trial and its lengthened runs each have a row). A QPS passes only when its trial
    meets every SLO in steady state (`experiments.planning.steady_state.run_until_decided`)."""
    search = point.search
    rows: list[dict] = []
    length = search_length(point)
    slo = search_slo(point)
    floor_s = drift_floor_s(slo)
    slo_columns = [slo_summary_key(key) for key in slo]  # every SLO metric, for the report's plots
    served: dict[float, float] = {}
    cost_model = shared_cost_model()  # one for every trial, its counters zeroed for each

    def run(qps: float, num_requests: int):
        config = trial_config(point, qps, seed, num_requests)
        return run_point(config, point_id, trim_fraction=search.trim_fraction, cost_model=cost_model(config))

    def passes(qps: float) -> bool:
        def record(trial: Trial) -> None:
            row = trial.result.row
            rows.append({**{k: row.get(k, np.nan) for k in (*TRIAL_COLUMNS, *slo_columns)},
                         **{k: row[k] for k in POOL_COST_COLUMNS if k in row}, "seed": seed, "trial_qps": qps,
                         **trial_columns(trial)})
            served[qps] = row.get("throughput_rps", np.nan)

        return run_until_decided(
            lambda n: run(qps, n),
            lambda result: bool(result.row["slo_met"]), length.base, length.next, search.trim_fraction, floor_s,
            record)

    low, high = search.qps
    result = find_capacity(passes, low, high, search.precision, max_qps=high, max_trials=search.max_trials,
                           served_qps=lambda qps: served.get(qps) if served.get(qps, 0) > 0 else None)
    return result.capacity_qps, rows


# `trial_columns`' keys, beside TRIAL_COLUMNS in every trial row; `sustained_summary`'s in every capacity row.
STEADY_COLUMNS = ("passed", "verdict", "undecided_at_cap", "trial_requests", "completion_ratio", "delay_rise_s",
                  "drift_t", "effective_samples", "sustained_throughput_rps", "not_steady", "overloaded")
SUSTAINED_COLUMNS = ("trial_requests_first", "trial_requests_cap", "trials_lengthened", "trials_at_cap", "at_cap_qps",
                     "sustained_throughput_rps")


def trial_columns(trial: Trial) -> dict:
    """A trial row's steady-state columns: `passed`, `verdict` (passed / failed / undecided),
    `undecided_at_cap`, `trial_requests`, `completion_ratio`, `delay_rise_s`, `drift_t`,
    `effective_samples`, `sustained_throughput_rps` (completions inside the measured window / its length: the rate
    served with warm-up and drain left out), `not_steady` (why, '' when steady) and `overloaded` (the backlog
    drifts upward or completions fall short of arrivals: more load than the point serves)."""
    check = trial.check
    return {"passed": trial.passed, "verdict": trial.verdict.value, "undecided_at_cap": trial.at_cap,
            "trial_requests": trial.num_requests, "completion_ratio": check.completion_ratio,
            "delay_rise_s": check.delay_rise_s, "drift_t": check.drift_t,
            "effective_samples": check.effective_samples, "sustained_throughput_rps": check.completions / check.window_s if check.window_s > 0 else np.nan,
            "not_steady": check.why_not_steady(), "overloaded": check.drifting or check.short_of_offered}


def sustained_summary(point: SweepConfig, trials: list[dict]) -> dict:
    """A capacity row's trial-length and steady-state columns: `trial_requests_first` and
    `trial_requests_cap` (`search_length`), `trials_lengthened` (runs undecided and run again
    longer), `trials_at_cap` (undecided at the cap, decided by `steady_state.at_cap`) and
    `at_cap_qps` (their QPS and verdict, e.g. '21.7 passed'), and `sustained_throughput_rps`: the
    mean over seeds of the completions per second inside the measured window of each seed's last
    passing trial at its capacity (NaN without one)."""
    length = search_length(point)
    capped = [t for t in trials if t.get("undecided_at_cap")]
    at_capacity = {}
    for t in trials:  # each seed's highest passing QPS, its longest run
        if t.get("passed"):
            best = at_capacity.get(t["seed"])
            if best is None or (t["trial_qps"], t.get("trial_requests", 0)) >= (best["trial_qps"],
                                                                               best.get("trial_requests", 0)):
                at_capacity[t["seed"]] = t
    sustained = [t.get("sustained_throughput_rps", np.nan) for t in at_capacity.values()]
    return {"trial_requests_first": length.base, "trial_requests_cap": length.cap,
            "trials_lengthened": sum(t.get("verdict") == "undecided" for t in trials), "trials_at_cap": len(capped),
            "at_cap_qps": ", ".join(f"{t['trial_qps']:.4g} {t['verdict']}" for t in capped),
            "sustained_throughput_rps": float(np.nanmean(sustained)) if sustained and not np.isnan(sustained).all()
            else np.nan}


def lowest_rate_verdict(point: SweepConfig, trials: list[dict]) -> str | None:
    """Why a point's lowest searched rate failed, for a point with a seed below the searched range
    (no passing trial): from that seed's deciding trial at `search.qps[0]` (its last run), either

    - 'at 1 QPS (seed 0) the load already overloads it (…why…): lower search.qps to find its
      capacity' when that trial was overloaded (`trial_columns`' `overloaded`: its backlog drifts
      upward or its completions fall short), so a lower load may pass; or
    - 'at 1 QPS (seed 0), in steady state (no growing backlog): tbt_p99_s 0.0123 > 0.001; a lower
      load shortens queues, not service times, so no load may meet these SLOs: relax them or serve
      faster (lower search.qps to check)' when it missed an SLO (each missed key with its value;
      an undefined value as NaN) without a growing backlog.

    None when every seed met the SLOs at some rate. The seed named is the first below the range."""
    seeds = {t["seed"] for t in trials}
    below = sorted(seed for seed in seeds if not any(t.get("passed") for t in trials if t["seed"] == seed))
    if not below:
        return None
    low = point.search.qps[0]
    runs = [t for t in trials if t["seed"] == below[0] and t["trial_qps"] == low]
    if not runs:
        return None
    last = runs[-1]
    where = f"at {low:g} QPS (seed {below[0]})"
    if last.get("overloaded"):
        return f"{where} the load already overloads it ({last.get('not_steady')}): lower search.qps to find its capacity"
    values = {key: _number(last.get(slo_summary_key(key))) for key in search_slo(point)}
    missed = [f"{key} {values[key]:.3g} > {limit:g}" for key, limit in search_slo(point).items()
              if not values[key] <= limit]
    return (f"{where}, in steady state (no growing backlog): {', '.join(missed) or 'the SLOs missed'}; a lower load "
            "shortens queues, not service times, so no load may meet these SLOs: relax them or serve faster (lower "
            "search.qps to check)")


def _number(value) -> float:
    """A trial row's metric as a float, NaN where it is missing."""
    return math.nan if value is None else float(value)


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
    if "cost_model_label" in summary:  # the steps they were out of (a cluster's: the decode pool's)
        steps = [t.get("num_steps") for t in trials]
        known = all(isinstance(n, (int, float, np.integer, np.floating)) and not math.isnan(n) for n in steps)
        summary["cost_model_steps"] = int(sum(steps)) if known else np.nan  # cached before steps were kept: unknown
    return summary


def per_gpu_row(point: SweepConfig, capacity_qps: float) -> dict:
    """A capacity row's per-GPU columns, so layouts on different GPU counts compare (a 2P3D
    cluster against one TP2 replica): `num_gpus` (`cluster_gpus`: replicas × TP × PP × DP, or
    the pools' sum) and `capacity_per_gpu_qps`: `capacity_row`'s mean capacity over seeds (a seed
    below the searched range counted 0; NaN when every seed is) / GPUs, DistServe's "goodput per
    GPU" (Zhong et al., OSDI'24 §2.1) with the search's percentile SLOs as the bar."""
    gpus = cluster_gpus(point)
    return {"num_gpus": gpus, "capacity_per_gpu_qps": capacity_qps / gpus}


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
