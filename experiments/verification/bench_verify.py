"""`verify --against-bench`: a point simulated under the load a benchmark tool sent, stage by stage,
compared with what the tool measured, each metric computed on the simulation by the tool's own
definition (`experiments.verification.client_metrics`)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from experiments.verification.bench_runs import BenchRun
from experiments.verification.client_metrics import simulated_client_summary
from experiments.verification.verify import signed_error_pct
from traces.prompt_pool import check_block_size

# The headline of each stage: the P50 of these client quantities.
HEADLINE_QUANTITIES = ("ttft_s", "tpot_s", "e2e_s")


def simulate_stage(point, plan, cost_model, seed: int = 0) -> dict[str, float]:
    """Simulate `plan` (a `LoadPlan`) on `point`'s deployment, from an idle engine, with
    `cost_model`; the client quantities (`simulated_client_summary`) of the requests the tool
    measured (its warm-up left out: `LoadPlan.measured_mask`) and the whole run's summary. A
    warm-up phase (`LoadPlan.warmup_before`) is simulated alone to find when it ends, then again
    ahead of the measured requests, which start then (the same engine state up to that time).

    Raises:
        ValueError: a prompt pool on a KV block size it cannot name exactly
            (`traces.prompt_pool.check_block_size`), or the simulator's errors.
    """
    from experiments.deployment import build_outcome_fn, build_pricer, build_scheduler_config, build_schedulers
    from simulator.simulate import simulate

    if plan.pool is not None:
        check_block_size(point.engine.block_size)

    def run(workload):
        schedulers = build_schedulers(point, build_scheduler_config(point))
        return simulate(workload, schedulers, build_pricer(point, cost_model), outcome_fn=build_outcome_fn(point),
                        router=point.engine.router, seed=point.engine.seed,
                        data_parallel=point.engine.data_parallel_size > 1, keep_token_times=True)

    warmup = plan.warmup_plan()
    after = None
    if warmup is not None:  # the warm-up alone first: the measured phase starts when its last request is done
        warm = warmup.requests(seed + 1)
        after = (warm, float(run(warmup.build(seed + 1)).requests["completion_s"].max()))
    result = run(plan.build(seed, after))
    frame = result.requests
    measured = frame[plan.measured_mask(frame["request_id"].to_numpy(), frame["arrival_s"].to_numpy())]
    return {**result.summary, **simulated_client_summary(measured)}


def compare_bench(point, run: BenchRun, cost_model) -> pd.DataFrame:
    """One row per measured value of every stage of `run`: stage, metric (the tool's name and
    statistic), quantity, predicted, measured, error_pct (signed, % of measured), definition.

    Raises:
        ValueError: as `simulate_stage`.
    """
    rows = []
    for stage in run.stages:
        predicted = simulate_stage(point, stage.plan, cost_model)
        for m in stage.measured:
            value = predicted.get(m.key, np.nan)
            rows.append({"stage": stage.name, "metric": f"{stage.name}: {m.metric} {m.stat}".rstrip(),
                         "quantity": m.key, "predicted": float(value), "measured": m.value,
                         "error_pct": float(signed_error_pct(value, m.value)), "definition": m.definition})
    return pd.DataFrame(rows, columns=["stage", "metric", "quantity", "predicted", "measured", "error_pct",
                                       "definition"])


def bench_headline(table: pd.DataFrame) -> dict[str, float]:
    """|error| in % of each stage's P50 TTFT, TPOT and E2E (`<stage> <quantity>_p50`) that the tool
    measured; the first of a stage's metrics of one quantity when several share it."""
    out = {}
    for _, row in table.iterrows():
        for quantity in HEADLINE_QUANTITIES:
            key = f"{row['stage']} {quantity}_p50"
            if row["quantity"] == f"{quantity}_p50" and key not in out and not np.isnan(row["error_pct"]):
                out[key] = abs(float(row["error_pct"]))
    return out


def plan_notes(run: BenchRun) -> str:
    """The replay's notes (what it cannot reproduce of the tool's load), one per stage, joined."""
    return "; ".join(f"{stage.name}: {note}" for stage in run.stages for note in stage.plan.notes)
