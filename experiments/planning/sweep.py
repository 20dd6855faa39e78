"""Run every point of a config in parallel (local processes or Ray) and write the tables.

Outputs in the run directory:
  points.csv, points.parquet   one row per point (settings, summary metrics, SLO verdicts)
  requests.parquet             per-request records of every point (with point_id)
  steps.parquet                per-step records of every point (with point_id)
  config.yaml                  the config as run (after --set overrides)
A point that fails is kept as a row with its error message; the other points still finish.
Each file is written whole or not at all into a claimed run folder (`experiments.outputs`); one
that cannot be written is listed in the folder's `failed`, the others are still written.
Finished work is cached (`results_cache`) without the keys that only shape the report: a change
of `slo:` or `goodput:` (or, for a search, `goodput:`, `fleet:`, `search.loads`) re-derives the
rows from the cached simulations.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
from concurrent.futures import as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from experiments.planning.backends import make_pool
from experiments.planning.layouts import LAYOUT_KEYS
from experiments.config import SweepConfig, describe_point, point_labels
from experiments.deployment import cluster_gpus
from experiments.outputs import RunFolder, write_atomic, write_csv, write_parquet, write_text
from experiments.point import (PointResult, cluster_columns, device_name, report_columns, run_point,
                               settings_columns)
from experiments.planning.records_spool import RecordsSpool, Shipped, land, records_spool, ship
from experiments.planning.results_cache import RecordsFolder, ResultsCache, cache_key
from experiments.planning.fleet import fleet_row
from experiments.planning.search import (capacity_row, cost_model_summary, load_row, lowest_rate_verdict, per_gpu_row,
                                         search_capacity, sustained_summary, trial_config)
from experiments.planning.vllm_flags import vllm_serve_command, vllm_serve_flags
from simulator.records_parquet import (concat_files, num_rows, rewrites_as_itself, same_columns, source_schema,
                                      write_in_row_groups)


def run_sweep(points: list[dict[str, Any]], jobs: int | None = None,
              on_done: Callable[[int, dict], None] | None = None, cache_dir: Path | None = None,
              backend: str = "local", ray_address: str | None = None,
              point_ids: list[int] | None = None, records_dir: Path | None = None) -> list[PointResult]:
    """Simulate each point dict (validated here); results in point order, whatever the finish order.

    Args:
        points: point dicts from `experiments.config.load_config`.
        jobs: worker processes (default: one per CPU, at most one per point); 1 runs inline.
        on_done: called with (point_id, row) as each point finishes (progress bars).
        cache_dir: results cache folder (`experiments.planning.results_cache`): finished points are
            loaded from it instead of recomputed (their row says `cached`); None disables it.
        backend, ray_address: where points run (`experiments.planning.backends.make_pool`).
        point_ids: each point's number in its config (rows, requests, steps); default 0, 1, ...
            (`simulate --point K` runs point K alone and numbers it K).
        records_dir: each point writes its requests and steps there as it runs, under
            temporary names (`run_point(temporary=True)`, `PointResult.files`; a cached one
            has them copied from its entry), so its token times and steps leave memory as it
            goes and are not sent back from the worker; `write_results` joins the files,
            `remove_point_files` removes them. A Ray worker that cannot see the folder sends
            its files back as bytes, which land there as the point arrives
            (`experiments.planning.records_spool`).
    """
    configs = [SweepConfig.model_validate(p) for p in points]
    ids = list(range(len(configs))) if point_ids is None else list(point_ids)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(configs)))
    results: dict[int, PointResult] = {}
    with records_spool(records_dir, backend) as spool:
        calls = {i: (_safe_run, (config, ids[i], cache_dir, spool)) for i, config in enumerate(configs)}
        for i, value in _run_all(calls, jobs, backend, ray_address):
            results[i] = result = _landed(value, configs[i], ids[i], records_dir)
            if on_done:
                on_done(i, result.row)
    ordered = [results[i] for i in range(len(configs))]
    for result, label in zip(ordered, point_labels(configs)):
        result.row["label"] = label
    _unique_labels([r.row for r in ordered])
    return ordered


def run_capacity_sweep(points: list[dict[str, Any]], jobs: int | None = None,
                       on_done: Callable[[int, dict], None] | None = None,
                       cache_dir: Path | None = None, backend: str = "local",
                       ray_address: str | None = None,
                       point_ids: list[int] | None = None) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Capacity search for every point and seed (config `search:`), in parallel processes or on
    a Ray cluster (`backend`, `ray_address`: `experiments.planning.backends.make_pool`); points
    numbered by `point_ids` as in `run_sweep`.

    Returns:
        (one row per point: settings, capacity mean and 95 % interval over seeds, vLLM flags, or
        `error`; one row per trial: point, seed, QPS, pass/fail and its metrics; one row per point
        and QPS of `search.loads` (empty without it), for the policy table and Pareto frontier).
    """
    configs = [SweepConfig.model_validate(p) for p in points]
    labels = point_labels(configs)
    ids = list(range(len(configs))) if point_ids is None else list(point_ids)
    tasks = [(i, seed) for i, c in enumerate(configs) for seed in range(c.search.seeds)]
    done: dict[tuple[int, int], SearchOutcome | str] = {}
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    calls = {(i, seed): (_safe_search, (configs[i], ids[i], seed, cache_dir)) for i, seed in tasks}
    for task, outcome in _run_all(calls, jobs, backend, ray_address):
        done[task] = outcome
        if on_done:
            on_done(task[0], {"trials": len(outcome.trials)} if isinstance(outcome, SearchOutcome) else {})
    grid = {(i, qps): (_safe_load_row, (c, ids[i], qps, cache_dir)) for i, c in enumerate(configs)
            for qps in c.search.loads}
    load_rows = dict(_run_all(grid, max(1, min(jobs, len(grid))), backend, ray_address)) if grid else {}
    loads = pd.DataFrame([r for r in load_rows.values() if isinstance(r, dict)])
    if len(loads):
        loads = loads.sort_values(["point_id", "trial_qps"]).reset_index(drop=True)
    rows, trials = [], []
    for i, config in enumerate(configs):
        outcomes = [done[(i, seed)] for seed in range(config.search.seeds)]
        errors = [o for o in outcomes if isinstance(o, str)]
        # A cluster's unprefixed settings are its decode pool's, prefill_* / decode_* each pool's, as in points.csv
        row = {"point_id": ids[i], "label": labels[i], **settings_columns(config), **_cluster_columns(config),
               "vllm_flags": vllm_serve_flags(config),
               "vllm_command": _vllm_command(config),
               "burstiness": getattr(config.trace, "burstiness", None) or 1.0}  # gamma shape; Poisson = 1
        if errors:
            row["error"] = errors[0]
        else:
            row.update(capacity_row(labels[i], ids[i], [o.capacity_qps for o in outcomes], config.search.qps[1]))
            point_trials = [{**t, "point_id": ids[i]} for o in outcomes for t in o.trials]
            row.update(cost_model_summary(point_trials))
            row.update(sustained_summary(config, point_trials))
            row["lowest_rate_verdict"] = lowest_rate_verdict(config, point_trials)
            row.update(per_gpu_row(config, row["capacity_qps"]))
            row.update(fleet_row(config, row, point_trials), cached=all(o.cached for o in outcomes))
            cache_errors = [o.cache_error for o in outcomes if o.cache_error]
            if cache_errors:
                row["cache_error"] = cache_errors[0]
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


def _run_all(calls: dict[Any, tuple[Callable, tuple]], jobs: int, backend: str, ray_address: str | None):
    """Yield (key, fn(*args)) for each `key: (fn, args)` as they finish: inline with one local
    job, else in a pool (`make_pool`)."""
    if jobs == 1 and backend == "local":
        for key, (fn, args) in calls.items():
            yield key, fn(*args)
        return
    with make_pool(backend, jobs, ray_address) as pool:
        futures = {pool.submit(fn, *args): key for key, (fn, args) in calls.items()}
        for future in as_completed(futures):
            yield futures.pop(future), future.result()  # popped: a result is not kept once handed over


def _cluster_columns(config: SweepConfig) -> dict:
    """`cluster_columns` of a point, or its error text as `error` (a pool whose weights do not
    fit: its trials failed too, with the same error)."""
    try:
        return cluster_columns(config)
    except POINT_ERRORS as exc:
        return {"error": _error_text(exc)}


def _vllm_command(config: SweepConfig) -> str | None:
    """`vllm serve MODEL FLAGS` of a point; None for a model with no known repository."""
    try:
        return vllm_serve_command(config)
    except ValueError:
        return None


def _safe_load_row(config: SweepConfig, point_id: int, qps: float, cache_dir: Path | None = None):
    cache = ResultsCache(cache_dir)
    try:
        return load_row(config, point_id, qps, run=partial(simulate_cached, cache=cache))
    except POINT_ERRORS as exc:
        return _error_text(exc)


@dataclass
class SearchOutcome:
    """One point × seed capacity search: its capacity (QPS), trial rows, whether it came from the
    cache, and why it could not be stored there (None when it was)."""

    capacity_qps: float
    trials: list[dict]
    cached: bool
    cache_error: str | None = None


def search_cache_key(config: SweepConfig, seed: int) -> str:
    """The cache key of one point × seed bisection: the config as its trials see it (`trial_config`
    at a placeholder QPS: the QPS, trial size and seeds the search sets itself, and the effective
    SLOs, Sarathi-Serve's defaults when `slo:` is empty), without the keys it does not read
    (`results_cache.REPORT_ONLY`).

    Raises:
        ValueError: a closed-loop trace (`trial_config`)."""
    return cache_key("capacity", trial_config(config, 1.0, seed), seed)


def _safe_search(config: SweepConfig, point_id: int, seed: int, cache_dir: Path | None = None):
    """The search through the cache (`search_cache_key`); its error text when it fails."""
    cache = ResultsCache(cache_dir)
    try:
        (capacity, trials), cached = cache.get_or_compute(search_cache_key(config, seed),
                                                          lambda: search_capacity(config, point_id, seed),
                                                          _is_search_result)
    except POINT_ERRORS as exc:
        return _error_text(exc)
    return SearchOutcome(capacity, trials, cached, cache.write_error)


def _is_search_result(value) -> bool:
    """A cache entry of `search_capacity`'s shape: (capacity QPS, trial rows)."""
    return isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], (int, float)) \
        and isinstance(value[1], list) and all(isinstance(t, dict) for t in value[1])


def simulate_cached(config: SweepConfig, point_id: int, trim_fraction: float = 0.0, *,
                    cache: ResultsCache, records_dir: Path | None = None) -> PointResult:
    """`run_point` through the cache: the simulation is stored without the columns `slo:` and
    `goodput:` decide (and keyed without those keys: `results_cache.REPORT_ONLY`), which are then
    derived for `config` (`report_columns`), so a change of SLOs or goodput re-uses it. The row
    says whether it was `cached`, and `cache_error` when it could not be stored. `records_dir`:
    a point computed writes its records there as it runs (`run_point(temporary=True)`), and one
    from the cache has its files copied there (`results_cache.RecordsFolder`), so either comes
    back with `PointResult.files` and no token times or steps in memory."""
    bare = config.model_copy(update={"slo": {}, "goodput": {}})
    raw, cached = cache.get_or_compute(cache_key("point", config, trim_fraction),
                                       lambda: run_point(bare, point_id, trim_fraction, records_dir, temporary=True),
                                       lambda value: isinstance(value, PointResult),
                                       RecordsFolder(Path(records_dir), point_id) if records_dir is not None else None)
    try:
        derived = report_columns(raw.row, raw.requests, bare)
        row = {k: v for k, v in raw.row.items() if k not in derived}
        row.update(point_id=point_id, label=describe_point(config), num_gpus=cluster_gpus(config))  # every GPU of the point
        row.update(report_columns(row, raw.requests, config), cached=cached)
    except BaseException:  # the point's record files go with it, never left as temporaries
        remove_point_files([raw])
        raise
    if cache.write_error:
        row["cache_error"] = cache.write_error
    raw.requests["point_id"] = point_id
    raw.steps["point_id"] = point_id
    return PointResult(row, raw.requests, raw.steps, raw.files)


def _unique_labels(rows: list[dict]) -> None:
    """Points that differ only in settings the label omits get '#<point_id>' appended."""
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["label"]] = counts.get(row["label"], 0) + 1
    for row in rows:
        if counts[row["label"]] > 1:
            row["label"] = f"{row['label']} #{row['point_id']}"


def _safe_run(config: SweepConfig, point_id: int, cache_dir: Path | None = None,
              spool: RecordsSpool | None = None) -> PointResult | Shipped:
    """A point in a worker: its result, or its error row; with `spool`, its records written
    into the run folder, or shipped back as bytes when this worker cannot see it
    (`records_spool.ship`)."""
    folder = spool.visible_path() if spool is not None else None
    if spool is not None and folder is None:
        return ship(partial(_point_or_error, config, point_id, cache_dir))
    return _point_or_error(config, point_id, cache_dir, folder)


def _point_or_error(config: SweepConfig, point_id: int, cache_dir: Path | None,
                    records_dir: Path | None) -> PointResult:
    try:
        return simulate_cached(config, point_id, cache=ResultsCache(cache_dir), records_dir=records_dir)
    except POINT_ERRORS as exc:
        return _failed_point(config, point_id, exc)


def _failed_point(config: SweepConfig, point_id: int, exc: Exception) -> PointResult:
    row = {"point_id": point_id, "label": describe_point(config), "model": config.model,
           "device": device_name(config), "error": _error_text(exc)}
    return PointResult(row, pd.DataFrame({"point_id": []}), pd.DataFrame({"point_id": []}))


def _landed(value: PointResult | Shipped, config: SweepConfig, point_id: int, records_dir: Path | None) -> PointResult:
    """A worker's result in the driver (`records_spool.land`); a point whose shipped files
    cannot be written into the run folder fails with that error, as in a worker."""
    try:
        return land(value, records_dir, point_id)
    except OSError as exc:
        return _failed_point(config, point_id, exc)


def rows_frame(rows: list[dict]) -> pd.DataFrame:
    """One row per point; a column whose values are all integers stays integer (nullable Int64)
    where some points lack it (a failed point, a key another scheduler does not read), so
    points.csv writes 512, not 512.0. A column mixing text and numbers (`acceptance`: 0.6 in one
    point, a file's JSON in another) holds them all as text, as JSON (0.6 -> "0.6", the same cell
    in points.csv), so points.parquet can be written: it once ended the sweep in ArrowInvalid."""
    frame = pd.DataFrame(rows)
    for column in frame.columns:
        values = [r[column] for r in rows if column in r and r[column] is not None]
        if values and all(pd.api.types.is_integer(v) for v in values) \
                and frame[column].dtype.kind == "f":
            frame[column] = frame[column].astype("Int64")
        elif any(isinstance(v, str) for v in values) and not all(isinstance(v, str) for v in values):
            frame[column] = [v if isinstance(v, str) or v is None or v is pd.NA or (isinstance(v, float) and v != v)
                             else json.dumps(v) for v in frame[column]]
    return frame


def write_capacity_results(points: pd.DataFrame, trials: pd.DataFrame, folder: RunFolder, raw_config: dict,
                           loads: pd.DataFrame | None = None) -> None:
    """points.csv/.parquet (capacity per point), trials.csv/.parquet (every bisection trial),
    loads.csv (each point at each QPS of `search.loads`) and config.yaml, each written whole or
    not at all; a file that cannot be written is listed in `folder.failed` and the others still are."""
    _write_frames(folder, {"loads.csv": loads if loads is not None and len(loads) else None, "points.csv": points,
                           "points.parquet": points, "trials.csv": trials, "trials.parquet": trials})
    folder.attempt(write_text, folder.path / "config.yaml", yaml.safe_dump(raw_config, sort_keys=False))


def write_results(results: list[PointResult], folder: RunFolder, raw_config: dict | None = None) -> pd.DataFrame:
    """Write the tables of a sweep to the run folder, each whole or not at all (a file that cannot
    be written is listed in `folder.failed`; the others still are); return the points table."""
    points = rows_frame([r.row for r in results])
    if any(r.files for r in results):  # points that wrote their records as they ran: joined file by file
        _write_frames(folder, {"points.csv": points, "points.parquet": points})
        for name in ("requests", "steps"):
            sources = _record_sources(results, name)
            if sum(map(num_rows, sources)):
                folder.attempt(write_atomic, folder.path / f"{name}.parquet", partial(_join_records, sources))
    else:
        _write_frames(folder, {"points.csv": points, "points.parquet": points,
                               "requests.parquet": sweep_requests(results),
                               "steps.parquet": _concat([r.steps for r in results])})
    if raw_config is not None:
        folder.attempt(write_text, folder.path / "config.yaml", yaml.safe_dump(raw_config, sort_keys=False))
    return points


@contextmanager
def one_run_only(folder: RunFolder):
    """A block writing a run's outputs into `folder`: when anything raises in it (an error no
    `attempt` expects, Ctrl-C), the files an earlier run listed there that this one has not
    rewritten are removed before it propagates (`RunFolder.remove_stale`, as a finished run
    does), so the folder never holds this run's tables beside another run's report."""
    try:
        yield
    except BaseException:
        folder.attempt(folder.remove_stale)  # its manifest may not be writable either
        raise


def config_as_run(base: SweepConfig) -> dict:
    """The config as run (after --set), as config.yaml records it: loadable again (engine keys
    only where the scheduler reads them, which `load_config` insists on; paths absolute)."""
    tree = base.model_dump(mode="json")
    tree["engine"] = base.engine.model_dump(mode="json", include=set(base.engine.used_settings()))
    from experiments.vllm_defaults import DEFAULTED_KEYS
    if base.engine.scheduler == "vllm_v1":  # vLLM's per-card defaults stay unset: a variant's card resolves its own
        for key in set(DEFAULTED_KEYS) - base.engine.model_fields_set:
            tree["engine"].pop(key, None)
    if base.cluster is not None:  # each pool sets its own; check_cluster refuses them beside cluster:
        for key in ("replicas", "router_overlap_weight"):
            tree["engine"].pop(key, None)
    owned = {f"engine.{key}" for key in LAYOUT_KEYS}
    if any(owned & set(variant) for variant in tree.get("variants", [])):  # layouts already expanded (after --set)
        tree["layouts"] = None
    return tree


_FRAME_WRITERS = {".csv": write_csv, ".parquet": write_parquet}


def _write_frames(folder: RunFolder, frames: dict[str, pd.DataFrame | None]) -> None:
    """Each frame that is not None as the file it is named by (.csv or .parquet)."""
    for name, frame in frames.items():
        if frame is not None:
            folder.attempt(_FRAME_WRITERS[Path(name).suffix], folder.path / name, frame)


def sweep_requests(results: list[PointResult], token_times: bool = True) -> pd.DataFrame | None:
    """Every point's requests in one frame (`point_id` tells them apart); None when none ran. A
    point that wrote its records (`PointResult.files`) is read back from its file.
    `token_times` False: without the `token_times_s` column (the report reads them from
    `requests_sources` a batch at a time: a frame holding every token time of a large run takes
    gigabytes).

    Raises:
        OSError: a point's file cannot be read back (its name as `filename`, so the run folder's
            `attempt` lists it among what could not be written)."""
    frames = [_read_back(r.files["requests"], token_times) if "requests" in r.files else r.requests for r in results]
    if not token_times:
        frames = [f.drop(columns="token_times_s", errors="ignore") for f in frames]
    return _concat(frames)


def requests_sources(results: list[PointResult]) -> list:
    """Each point's requests, in point order: its file (`PointResult.files`), or its frame."""
    return _record_sources(results, "requests")


def _read_back(path: Path, token_times: bool = True) -> pd.DataFrame:
    try:
        columns = None
        if not token_times:
            columns = [name for name in pq.read_schema(path).names if name != "token_times_s"]
        return pd.read_parquet(path, columns=columns)
    except (OSError, pa.ArrowException) as exc:
        raise OSError(errno.EIO, f"cannot read it back ({exc})", str(path)) from exc


def _record_sources(results: list[PointResult], name: str) -> list:
    """Each point's `name` records ("requests" or "steps"), in point order: its file, or its frame."""
    return [r.files[name] if name in r.files else getattr(r, name) for r in results
            if name in r.files or len(getattr(r, name))]


def _join_records(sources: list, path: Path) -> None:
    """The sources' rows into `path`: row group by row group when every source has the same
    columns and types (the rows of `pd.concat` of them), else through `pd.concat` itself (its
    union of columns, e.g. a point without token times beside one with). One file that
    `concat_files` would rewrite byte for byte (`rewrites_as_itself`: a `simulate` run's) is
    copied instead of decoded and encoded again."""
    if len(sources) == 1 and not isinstance(sources[0], pd.DataFrame) and rewrites_as_itself(sources[0]):
        shutil.copyfile(sources[0], path)
    elif same_columns([source_schema(s) for s in sources]):
        concat_files(sources, path)
    else:
        write_in_row_groups(_concat([s if isinstance(s, pd.DataFrame) else pd.read_parquet(s) for s in sources]), path)


def remove_point_files(results: list[PointResult]) -> None:
    """Remove the points' own record files (`run_sweep(records_dir=)`), once joined."""
    for result in results:
        for path in result.files.values():
            Path(path).unlink(missing_ok=True)


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame | None:
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else None
