"""Run every point of a config in parallel (local processes or Ray) and write the tables.

Outputs in the run directory:
  points.csv, points.parquet   one row per point (settings, summary metrics, SLO verdicts)
  requests.parquet             per-request records of every point (with point_id)
  steps.parquet                per-step records of every point (with point_id)
  config.yaml                  the config as run (after --set overrides)
A point that fails is kept as a row with its error message; the other points still finish.
"""
from __future__ import annotations

import os
import shutil
from concurrent.futures import as_completed
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import yaml

from experiments.planning.backends import make_pool
from experiments.config import SweepConfig, describe_point, point_labels
from experiments.point import PointResult, run_point
from experiments.planning.results_cache import ResultsCache, cache_key
from experiments.planning.search import capacity_row, fleet_row, load_row, search_capacity
from experiments.planning.vllm_flags import vllm_serve_command, vllm_serve_flags


OUTPUT_FILES = ("points.csv", "points.parquet", "requests.parquet", "steps.parquet", "trials.csv", "loads.csv",
                "trials.parquet", "config.yaml", "report.md", "report.html")


def run_sweep(points: list[dict[str, Any]], jobs: int | None = None,
              on_done: Callable[[int, dict], None] | None = None, cache_dir: Path | None = None,
              backend: str = "local", ray_address: str | None = None) -> list[PointResult]:
    """Simulate each point dict (validated here); results in point order, whatever the finish order.

    Args:
        points: point dicts from `experiments.config.load_config`.
        jobs: worker processes (default: one per CPU, at most one per point); 1 runs inline.
        on_done: called with (point_id, row) as each point finishes (progress bars).
        cache_dir: results cache folder (`experiments.planning.results_cache`): finished points are
            loaded from it instead of recomputed (their row says `cached`); None disables it.
        backend, ray_address: where points run (`experiments.planning.backends.make_pool`).
    """
    configs = [SweepConfig.model_validate(p) for p in points]
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(configs)))
    results: dict[int, PointResult] = {}
    if jobs == 1 and backend == "local":
        for i, config in enumerate(configs):
            results[i] = _safe_run(config, i, cache_dir)
            if on_done:
                on_done(i, results[i].row)
    else:
        with make_pool(backend, jobs, ray_address) as pool:
            futures = {pool.submit(_safe_run, config, i, cache_dir): i for i, config in enumerate(configs)}
            for future in as_completed(futures):
                i = futures[future]
                results[i] = future.result()
                if on_done:
                    on_done(i, results[i].row)
    ordered = [results[i] for i in range(len(configs))]
    for result, label in zip(ordered, point_labels(configs)):
        result.row["label"] = label
    _unique_labels([r.row for r in ordered])
    return ordered


def run_capacity_sweep(points: list[dict[str, Any]], jobs: int | None = None,
                       on_done: Callable[[int, dict], None] | None = None,
                       cache_dir: Path | None = None, backend: str = "local",
                       ray_address: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Capacity search for every point and seed (config `search:`), in parallel processes or on
    a Ray cluster (`backend`, `ray_address`: `experiments.planning.backends.make_pool`).

    Returns:
        (one row per point: settings, capacity mean and 95 % interval over seeds, vLLM flags, or
        `error`; one row per trial: point, seed, QPS, pass/fail and its metrics; one row per point
        and QPS of `search.loads` (empty without it), for the policy table and Pareto frontier).
    """
    configs = [SweepConfig.model_validate(p) for p in points]
    labels = point_labels(configs)
    tasks = [(i, seed) for i, c in enumerate(configs) for seed in range(c.search.seeds)]
    done: dict[tuple[int, int], tuple[float, list[dict]] | str] = {}
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    with make_pool(backend, jobs, ray_address) as pool:
        futures = {pool.submit(_safe_search, configs[i], i, seed, cache_dir): (i, seed) for i, seed in tasks}
        for future in as_completed(futures):
            done[futures[future]] = future.result()
            if on_done:
                on_done(futures[future][0], {})
    grid = [(i, qps) for i, c in enumerate(configs) for qps in c.search.loads]
    load_rows: dict[tuple[int, float], dict | str] = {}
    if grid:
        with make_pool(backend, max(1, min(jobs, len(grid))), ray_address) as pool:
            futures = {pool.submit(_safe_load_row, configs[i], i, qps): (i, qps) for i, qps in grid}
            for future in as_completed(futures):
                load_rows[futures[future]] = future.result()
    loads = pd.DataFrame([r for r in load_rows.values() if isinstance(r, dict)])
    if len(loads):
        loads = loads.sort_values(["point_id", "trial_qps"]).reset_index(drop=True)
    rows, trials = [], []
    for i, config in enumerate(configs):
        outcomes = [done[(i, seed)] for seed in range(config.search.seeds)]
        errors = [o for o in outcomes if isinstance(o, str)]
        row = {"point_id": i, "label": labels[i], "model": config.model, "device": config.device,
               **config.engine.used_settings(), "vllm_flags": vllm_serve_flags(config),
               "vllm_command": _vllm_command(config),
               "burstiness": getattr(config.trace, "burstiness", None) or 1.0}  # gamma shape; Poisson = 1
        if errors:
            row["error"] = errors[0]
        else:
            row.update(capacity_row(labels[i], i, [o[0] for o in outcomes], config.search.qps[1]))
            point_trials = [t for o in outcomes for t in o[1]]
            row.update(fleet_row(config, row["capacity_qps"], point_trials))
            trials += point_trials
        rows.append(row)
    _unique_labels(rows)
    final = {r["point_id"]: r["label"] for r in rows}
    for trial in trials:
        trial["label"] = final[trial["point_id"]]
    if len(loads):
        loads["label"] = loads["point_id"].map(final)
    return rows_frame(rows), pd.DataFrame(trials), loads


# A point's own failure (bad input, a model that does not fit) becomes its error text, so the
# other points still finish; anything else is a bug and propagates.
POINT_ERRORS = (ValueError, OSError, RuntimeError)


def _error_text(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


def _vllm_command(config: SweepConfig) -> str | None:
    """`vllm serve MODEL FLAGS` of a point; None for a model with no known repository."""
    try:
        return vllm_serve_command(config)
    except ValueError:
        return None


def _safe_load_row(config: SweepConfig, point_id: int, qps: float):
    try:
        return load_row(config, point_id, qps)
    except POINT_ERRORS as exc:
        return _error_text(exc)


def _safe_search(config: SweepConfig, point_id: int, seed: int, cache_dir: Path | None = None):
    cache = ResultsCache(cache_dir)
    try:
        result, _ = cache.get_or_compute(cache_key("capacity", config, seed),
                                         lambda: search_capacity(config, point_id, seed))
        return result
    except POINT_ERRORS as exc:
        return _error_text(exc)


def _unique_labels(rows: list[dict]) -> None:
    """Points that differ only in settings the label omits get '#<point_id>' appended."""
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["label"]] = counts.get(row["label"], 0) + 1
    for row in rows:
        if counts[row["label"]] > 1:
            row["label"] = f"{row['label']} #{row['point_id']}"


def _safe_run(config: SweepConfig, point_id: int, cache_dir: Path | None = None) -> PointResult:
    cache = ResultsCache(cache_dir)
    try:
        result, cached = cache.get_or_compute(cache_key("point", config, point_id),
                                              lambda: run_point(config, point_id))
    except POINT_ERRORS as exc:
        row = {"point_id": point_id, "label": describe_point(config), "model": config.model, "device": config.device,
               "error": _error_text(exc)}
        return PointResult(row, pd.DataFrame({"point_id": []}), pd.DataFrame({"point_id": []}))
    result.row["cached"] = cached
    return result


def rows_frame(rows: list[dict]) -> pd.DataFrame:
    """One row per point; a column whose values are all integers stays integer (nullable Int64)
    where some points lack it (a failed point, a key another scheduler does not read), so
    points.csv writes 512, not 512.0."""
    frame = pd.DataFrame(rows)
    for column in frame.columns:
        values = [r[column] for r in rows if column in r and r[column] is not None]
        if values and all(pd.api.types.is_integer(v) for v in values) \
                and frame[column].dtype.kind == "f":
            frame[column] = frame[column].astype("Int64")
    return frame


def clear_outputs(out_dir: Path) -> None:
    """Remove an earlier run's outputs from `out_dir`, so none is left beside this run's."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in OUTPUT_FILES:
        (out_dir / name).unlink(missing_ok=True)
    shutil.rmtree(out_dir / "plots", ignore_errors=True)


def write_capacity_results(points: pd.DataFrame, trials: pd.DataFrame, out_dir: Path, raw_config: dict,
                           loads: pd.DataFrame | None = None) -> None:
    """points.csv/.parquet (capacity per point), trials.csv/.parquet (every bisection trial) and
    loads.csv (each point at each QPS of `search.loads`)."""
    clear_outputs(out_dir)
    if loads is not None and len(loads):
        loads.to_csv(out_dir / "loads.csv", index=False)
    points.to_csv(out_dir / "points.csv", index=False)
    points.to_parquet(out_dir / "points.parquet", index=False)
    trials.to_csv(out_dir / "trials.csv", index=False)
    trials.to_parquet(out_dir / "trials.parquet", index=False)
    (out_dir / "config.yaml").write_text(yaml.safe_dump(raw_config, sort_keys=False))


def write_results(results: list[PointResult], out_dir: Path, raw_config: dict | None = None) -> pd.DataFrame:
    """Write the tables of a sweep to `out_dir`; return the points table."""
    clear_outputs(out_dir)
    points = rows_frame([r.row for r in results])
    points.to_csv(out_dir / "points.csv", index=False)
    points.to_parquet(out_dir / "points.parquet", index=False)
    requests = [r.requests for r in results if len(r.requests)]
    steps = [r.steps for r in results if len(r.steps)]
    if requests:
        pd.concat(requests, ignore_index=True).to_parquet(out_dir / "requests.parquet", index=False)
    if steps:
        pd.concat(steps, ignore_index=True).to_parquet(out_dir / "steps.parquet", index=False)
    if raw_config is not None:
        (out_dir / "config.yaml").write_text(yaml.safe_dump(raw_config, sort_keys=False))
    return points
