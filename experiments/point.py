"""Run one point of a sweep: build its trace and deployment, simulate, summarise against the SLOs."""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from experiments.config import (POOLS, ClosedLoopTrace, StagesTrace, SweepConfig, TraceConfig, cluster_label,
                                describe_point, pool_point, pool_points, slo_summary_key)
from experiments.outputs import TEMP_PREFIX, write_atomic
from experiments.bench_tool_columns import point_client_columns
from experiments.stage_metrics import stage_columns
from experiments.deployment import (DTYPE_BYTES, async_scheduling_on, build_frontend, build_link, build_outcome_fn,
                                    build_pricer, build_scheduler_config, build_schedulers, build_step_variance,
                                    cluster_gpus,
                                    host_s_per_seq, kv_bytes_per_element, served_context_tokens, served_model,
                                    weight_offload_bytes)
from profiler import CostModel, RooflineCostModel, get_device_spec
from profiler.cuda_graphs import cudagraph_capture_sizes
from profiler.weight_offload import offload_read_s_per_step
from simulator.disaggregated import Pool, simulate_disaggregated
from simulator.gc_pause import paused_gc
from simulator.metrics import goodput_count, kv_offload_stats
from simulator.records_stream import RecordFiles
from simulator.simulate import simulate
from traces.trace_stats import mean_rate_qps
from traces import Request


@dataclass
class PointResult:
    """One point's outputs: a summary row, per-request and per-step records.

    `files` names the point's `requests.parquet` / `steps.parquet` when the run wrote its records
    there (`run_point(records_dir=)`): `requests` then holds no `token_times_s` column and
    `steps` no rows (they are in the files)."""

    row: dict
    requests: pd.DataFrame
    steps: pd.DataFrame
    files: dict[str, Path] = field(default_factory=dict)


def load_requests(trace: TraceConfig, max_context_tokens: int | None = None) -> tuple[list[Request], dict]:
    """Build the request list a trace config describes (each kind's `load()` in experiments/config/trace.py).
    `max_context_tokens`: the engine's max_model_len, bounding the prefix ids of a sessions
    trace's turns (no served request holds more; `traces.sessions.SessionWorkload`).

    Returns:
        (requests sorted by arrival, info dict with the trace's source and rejected rows).

    Raises:
        ValueError / traces.TraceFormatError: a missing path or a bad file, with the file named;
            a closed-loop trace returns its `ClosedLoopWorkload`, which the simulator drives.
    """
    if isinstance(trace, ClosedLoopTrace):
        workload = trace.workload(max_context_tokens) if trace.kind == "sessions" else trace.workload()
        return workload, {"trace_source": _closed_loop_source(trace, workload), "trace_rows_rejected": 0,
                          # a sessions file's unknown columns; a generated closed loop has none
                          "trace_ignored_columns": ", ".join(getattr(workload, "ignored_columns", ()))}
    requests, info = trace.load()
    if not requests and info.get("trace_rows_rejected"):
        raise ValueError(f"{info['trace_source']}: every row was rejected, nothing to simulate "
                         f"({info.get('trace_rows_rejected_detail', '')}); check the file's format and columns")
    return requests, info


def _closed_loop_source(trace: ClosedLoopTrace, workload) -> str:
    """The trace_source cell of a closed loop: its clients, or a sessions file and its conversations."""
    if getattr(trace, "path", None) is not None:  # with the turns file's unknown columns, as a trace file's account says them
        columns = workload.ignored_columns
        ignored = f"; ignored unknown columns: {', '.join(columns)}" if columns else ""
        return f"{trace.path} (sessions, {workload.num_clients} conversations, {workload.num_requests} turns{ignored})"
    if trace.kind == "sessions":
        return f"sessions, {trace.clients} conversations x {trace.turns} turns"
    return f"closed loop, {trace.clients} clients"


def device_name(point: SweepConfig) -> str:
    """The `device` cell of a point's row: a built-in, file or inline device by its name
    (`profiler.get_device_spec(...).name`), so every row, failed points included, holds a string
    (an inline mapping is unhashable for the report's grouping and no parquet column type). A
    `cluster:` point's is its decode pool's, as every unprefixed column of its row is
    (`simulate_cluster` gives `prefill_device` and `decode_device`).

    Raises:
        ValueError: an unknown device (a validated config has none)."""
    if point.cluster is not None:
        point = pool_point(point, "decode")
    return get_device_spec(point.device).name


def build_cost_model(point: SweepConfig) -> CostModel:
    """The point's cost model: `profile:DIR` fits (or loads the fit of) that measured profile, plus
    the engine's per-step overhead that `sarathi-sim calibrate` measured there
    (`engine_overhead.json`, if any); `auto` does the same with `profiler/data/<device>/<model>/`
    when it is shipped, else uses the roofline, as does `roofline` (`profiler.shipped`). The
    measured and roofline models add a synchronous vllm_v1 engine's host time per sequence
    (`experiments.deployment.host_s_per_seq`; 0 with async scheduling); the fitted and
    mixture-of-experts models do not.

    One cost model for every command: what `sweep` and `simulate` predict with a calibration is
    what `verify` checks against the engine (the capacity a sweep finds is the one verify's loads
    refer to).

    A profile prices only the device it was measured on: the point's `device:` must be the
    profile's (`profiler.shipped.check_device`: a CPU profile once priced an H100 at a P99 TBT of
    159 s); a CPU profile prices a device named `cpu`, the host described as a device
    (tests/data/engine/tiny_engine.yaml).

    Raises:
        ValueError (`ProfileError`): a profile of another model, tp or device, or too thin to fit."""
    e = point.engine
    from profiler.engine_overhead import EngineOverhead, WithEngineOverhead
    from profiler.shipped import load_fitted, profile_dir_for  # scikit-learn: imported only when needed

    model = served_model(point)  # quantised weights: config.json or engine.quantization
    device = get_device_spec(point.device)
    kv_bytes = kv_bytes_per_element(point)
    cost_model_name = roofline_only_cost_model(point.cost_model, model)
    # Weights in host memory are read over the host link every step (profiler/weight_offload.py).
    offloaded = weight_offload_bytes(point)
    step_overhead_s = (device.step_overhead_s + offload_read_s_per_step(offloaded, device.host_link_bandwidth_bytes_per_s)
                       if offloaded else None)
    # vLLM's largest CUDA-graph capture size for these flags (`profiler.cuda_graphs`, cited there);
    # 0 with --enforce-eager: no graphs, so no padding and eager all-reduces.
    graph_max = 0 if e.enforce_eager else max(cudagraph_capture_sizes(e.max_num_seqs, e.chunk_size, e.split_n),
                                              default=0)
    if model.moe is not None:  # issue 18: experts priced by profiler/moe_cost.py
        from profiler.moe_cost import build_moe_cost_model

        return build_moe_cost_model(cost_model_name, model, device, e.tensor_parallel_size, e.data_parallel_size,
                                    e.enable_expert_parallel, e.expert_routing_skew, DTYPE_BYTES[e.dtype],
                                    kv_bytes, cuda_graph_max_tokens=graph_max)
    directory = profile_dir_for(point.cost_model, device, point.model)
    if directory is not None and (model.quantization is not None or kv_bytes != 2):
        raise ValueError(f"cost_model {point.cost_model}: the profile {directory} times BF16 weights and KV cache; "
                         f"this point serves {model.quantization.label if model.quantization else 'BF16 weights'} "
                         f"with kv_cache_dtype {e.kv_cache_dtype}: use cost_model auto, roofline or measured:DIR")
    if directory is not None and offloaded:
        raise ValueError(f"engine.cpu_offload_gb: the profile {directory} was fitted with every weight on the GPU; "
                         "price weight offload with cost_model auto, roofline or measured:DIR")
    if directory is not None:
        fitted = load_fitted(directory, model, e.tensor_parallel_size, device=device.name)
        overhead = EngineOverhead.load(directory)
        return WithEngineOverhead(fitted, overhead) if overhead is not None else fitted
    if cost_model_name == "auto" or cost_model_name.startswith("measured:"):
        from profiler.measured.shipped import build_measured  # shipped or imported kernel tables

        measured = build_measured(point.cost_model, model, device, e.tensor_parallel_size, DTYPE_BYTES[e.dtype],
                                  kv_bytes, cuda_graph_max_tokens=graph_max,
                                  host_s_per_seq=host_s_per_seq(point), step_overhead_s=step_overhead_s)
        if measured is not None:
            return measured
    return RooflineCostModel(model, device, tensor_parallel_size=e.tensor_parallel_size,
                             dtype_bytes=DTYPE_BYTES[e.dtype], kv_dtype_bytes=kv_bytes,
                             host_s_per_seq=host_s_per_seq(point), step_overhead_s=step_overhead_s)


def roofline_only_cost_model(cost_model: str, model) -> str:
    """`cost_model` for a model whose attention only the roofline prices: sliding-window layers,
    attention sinks, logit soft-capping or MLA (the measured and fitted tables time full GQA attention
    over every context token), or a mixture of experts with dense layers. `auto` becomes `roofline` (the label says why); other values pass.

    Raises:
        ValueError: `measured:DIR` or `profile:DIR` for such a model (names the model's fields)."""
    features = [text for present, text in (
        (model.num_sliding_layers, f"{model.num_sliding_layers} sliding-window layers (window {model.sliding_window})"),
        (model.attention_sinks, "attention sinks"),
        (model.attn_logit_softcapping, f"logit soft-capping ({model.attn_logit_softcapping:g})"),
        (model.kv_lora_rank, f"MLA (kv_lora_rank {model.kv_lora_rank})"),
        (model.num_dense_layers, f"{model.num_dense_layers} dense layers among its experts")) if present]
    if not features:
        return cost_model
    if cost_model in ("auto", "roofline"):
        return "roofline"
    raise ValueError(f"cost_model {cost_model}: model {model.name!r} has {', '.join(features)}; measured and fitted "
                     "tables time full GQA attention and uniform expert layers only: use cost_model auto or roofline")


def cost_model_columns(point: SweepConfig, cost_model) -> dict:
    """`cost_model_label` (what priced the steps: a measured model's tables and sources, the
    roofline and why, or the `cost_model` value) and `cost_model_steps_out_of_range` (steps a
    fitted model extrapolated or a measured model priced off its grids) of a point after its run."""
    # A fitted model counts the steps it priced beyond its profiled shapes (extrapolated).
    out_of_range = getattr(cost_model, "out_of_range", None)
    columns = {"cost_model_steps_out_of_range": sum(out_of_range.values()) if out_of_range is not None else 0}
    if hasattr(cost_model, "describe"):  # a measured model: its provenance, and steps off its grids
        described = cost_model.describe()
        columns.update(cost_model_label=described["label"], cost_model_steps_out_of_range=described["out_of_grid_steps"])
    elif isinstance(cost_model, RooflineCostModel):  # `auto` without measured tables says so
        model = cost_model.model
        windowed = (model.num_sliding_layers or model.attention_sinks or model.attn_logit_softcapping or model.kv_lora_rank
                    or model.num_dense_layers)
        columns["cost_model_label"] = "roofline" + (
            " (sliding-window/sink/soft-capped/latent attention: priced by the roofline only)"
            if windowed and point.cost_model == "auto"
            else " (no measured tables for this device and dtype)" if point.cost_model == "auto" else "")
        if cost_model.model.quantization is not None:  # what the weights' GEMMs were priced as
            columns["cost_model_label"] += f"; weights {cost_model.model.quantization.label}"
        if cost_model.kv_dtype_bytes == 1:
            columns["cost_model_label"] += "; fp8 KV cache"
    else:
        columns["cost_model_label"] = point.cost_model
    offloaded = weight_offload_bytes(point)
    if offloaded:  # what every step pays on top (profiler/weight_offload.py)
        link = get_device_spec(point.device).host_link_bandwidth_bytes_per_s
        columns["cost_model_label"] += (f"; {offloaded / 2**30:.2f} GiB of weights per GPU read from host memory every "
                                        f"step (+{offload_read_s_per_step(offloaded, link) * 1e3:.1f} ms at "
                                        f"{link / 1e9:g} GB/s, a lower bound)")
    if point.engine.enforce_eager:  # only the padding is modelled (profiler/cuda_graphs.py)
        columns["cost_model_label"] += ("; enforce_eager: no CUDA-graph padding, but eager kernel-launch overhead is "
                                        "not modelled, so step times are a lower bound")
    return columns


@paused_gc()  # trace loading, the run and its summary without collector passes (simulator/gc_pause.py)
def run_point(point: SweepConfig, point_id: int = 0, trim_fraction: float = 0.0,
              records_dir: Path | None = None, temporary: bool = False,
              cost_model: CostModel | None = None) -> PointResult:
    """Simulate one point; the row holds its settings, summary metrics, SLO verdicts and goodput.

    `trim_fraction` drops warm-up and drain from the latency statistics (capacity trials).
    `records_dir`: write the point's `requests.parquet` and `steps.parquet` (with `point_id`;
    no steps file with `output.steps: false`) there as the run goes, each whole or not at all
    (`write_atomic`), so its token times and steps never all sit in memory
    (`simulator.records_stream`); `PointResult.files` names them. `temporary`: under temporary
    names of the folder instead (`TEMP_PREFIX`: a sweep's per-point files, which it joins and
    removes; a killed run's are removed at the folder's next claim), written in place and
    removed when the run fails. `cost_model`: `build_cost_model(point)`'s model, already built
    (a capacity search's trials share one, `experiments.planning.trial_reuse`); None builds it.
    """
    requests, info = load_requests(point.trace, served_context_tokens(point))

    def run(files: RecordFiles | None):
        if point.cluster is not None:  # prefill/decode disaggregation: the decode pool's pool and cost model label the row
            return simulate_cluster(point, requests, trim_fraction, files)  # files written as it runs
        sched_config = build_scheduler_config(point)
        model = cost_model if cost_model is not None else build_cost_model(point)
        schedulers = build_schedulers(point, sched_config)
        result = simulate(requests, schedulers, build_pricer(point, model),
                          outcome_fn=build_outcome_fn(point), router=point.engine.router, seed=point.engine.seed,
                          router_overlap_weight=point.engine.router_overlap_weight,
                          trim_fraction=trim_fraction, keep_token_times=point.output.token_times,
                          keep_steps=point.output.steps, data_parallel=point.engine.data_parallel_size > 1,
                          record_files=files, async_scheduling=async_scheduling_on(point),
                          frontend=build_frontend(point), step_variance=build_step_variance(point))
        tiers = [s.kv_offload for s in schedulers if s.kv_offload is not None]
        return result, sched_config, model, kv_offload_stats(result.requests, tiers) if tiers else {}

    write_files = _with_temporary_files if temporary else _with_record_files
    (result, sched_config, cost_model, cluster_row), files = write_files(records_dir, point_id, point.output.steps, run)

    # A cluster's row is labelled by its decode pool (its device, KV pool and cost model too);
    # prefill_* / decode_* columns hold each pool's own settings (simulate_cluster).
    row = {"point_id": point_id, "label": describe_point(point), **settings_columns(point)}
    row.update(cluster_row)
    row.update(serving_columns(point))
    row.update(num_gpu_blocks=sched_config.num_gpu_blocks, max_model_len=sched_config.max_model_len,
               trace_qps=getattr(point.trace, "qps", None),  # the configured load: a sweep axis is a load, not a config
               offered_qps=mean_rate_qps(result.requests["arrival_s"].to_numpy()), **info)
    row.update(result.summary)
    row.update(cost_model_columns(point, cost_model))
    row.update(report_columns(row, result.requests, point))
    row.update(point_client_columns(point.output.client_metrics, result.requests, files.get("requests")))
    if isinstance(point.trace, StagesTrace):  # per-stage load and latencies (experiments/stage_metrics.py)
        row.update(stage_columns(result.requests, point.trace.stage_starts_s()))
    result.requests.insert(0, "point_id", point_id)
    result.steps.insert(0, "point_id", point_id)
    return PointResult(row, result.requests, result.steps, files)


class _RunFailed(Exception):
    """Carries the run's own exception through `write_atomic` (which would name an OSError of the
    run, e.g. a missing file, as the output's failure)."""


def _with_record_files(records_dir: Path | None, point_id: int, keep_steps: bool,
                       run: Callable[[RecordFiles | None], tuple]) -> tuple[tuple, dict[str, Path]]:
    """(run(files), {"requests": path, "steps": path}): the files temporaries in `records_dir`
    renamed into place when `run` returns (`write_atomic`: each whole or not at all, removed when
    it raises); (run(None), {}) without a folder."""
    if records_dir is None:
        return run(None), {}
    paths = {"requests": Path(records_dir) / "requests.parquet"}
    if keep_steps:
        paths["steps"] = Path(records_dir) / "steps.parquet"
    out = {}

    def call(requests_tmp: Path, steps_tmp: Path | None) -> None:
        try:
            out["value"] = run(RecordFiles(requests_tmp, steps_tmp, {"point_id": point_id}))
        except Exception as exc:
            raise _RunFailed() from exc

    def requests_written(requests_tmp: Path) -> None:
        if keep_steps:
            write_atomic(paths["steps"], lambda steps_tmp: call(requests_tmp, steps_tmp))
        else:
            call(requests_tmp, None)

    try:
        write_atomic(paths["requests"], requests_written)
    except _RunFailed as failed:
        raise failed.__cause__ from None
    return out["value"], paths


def _with_temporary_files(records_dir: Path | None, point_id: int, keep_steps: bool,
                          run: Callable[[RecordFiles | None], tuple]) -> tuple[tuple, dict[str, Path]]:
    """As `_with_record_files`, the files under fresh temporary names of `records_dir`, left
    where they are (removed when `run` raises)."""
    if records_dir is None:
        return run(None), {}
    paths = {}
    try:
        for name in ("requests", "steps") if keep_steps else ("requests",):
            paths[name] = temporary_record_file(records_dir, point_id, name)
        return run(RecordFiles(paths["requests"], paths.get("steps"), {"point_id": point_id})), paths
    except BaseException:
        for path in paths.values():
            path.unlink(missing_ok=True)
        raise


# Engine settings a pool does not hold for itself: the cluster's GPUs are `num_gpus`; a pool's
# router reads no overlap weight (experiments.config._POINT_ONLY_ENGINE_KEYS).
_CLUSTER_WIDE_COLUMNS = ("num_gpus", "router_overlap_weight")


def settings_columns(point: SweepConfig) -> dict:
    """A row's `model`, `device` and engine settings (`EngineConfig.used_settings`); a `cluster:`
    point's are its decode pool's (`pool_point`), as every unprefixed column of its row is
    (README; `cluster_columns` gives each pool's)."""
    shown = pool_point(point, "decode") if point.cluster is not None else point  # built once, for both
    return {"model": point.model, "device": device_name(shown), **shown.engine.used_settings()}


def serving_columns(point: SweepConfig) -> dict:
    """What a vllm_v1 point ran with beyond its settings: async scheduling as resolved
    (`experiments.deployment.async_scheduling_on`) and, behind a front end, its delays
    (`frontend_request_ms`, `frontend_tokenize_us_per_token`, `frontend_output_ms`); nothing for
    other schedulers (their rows are unchanged); with step-time variance its `step_variance_cv`
    and `step_variance_seed`."""
    out: dict = {}
    if point.engine.scheduler == "vllm_v1" and point.cluster is None:
        out["async_scheduling"] = async_scheduling_on(point)
    frontend = build_frontend(point)
    if frontend is not None:
        out.update(frontend_request_ms=point.frontend.request_ms,
                   frontend_tokenize_us_per_token=point.frontend.tokenize_us_per_token,
                   frontend_output_ms=point.frontend.output_ms)
    if point.step_variance.cv > 0:
        out.update(step_variance_cv=point.step_variance.cv, step_variance_seed=point.engine.seed)
    return out


def cluster_columns(point: SweepConfig) -> dict:
    """The settings columns `simulate_cluster` gives a `cluster:` point's row, without running it
    (a capacity row, whose trials ran it): `cluster`, `num_gpus`, and per pool `<pool>_<key>`
    for each engine setting it reads, `<pool>_num_gpu_blocks` and `<pool>_device`; {} for a
    colocated point.

    Raises:
        ValueError: a pool whose weights do not fit its device (`build_scheduler_config`).
    """
    if point.cluster is None:
        return {}
    merged = pool_points(point)  # each pool's point, built once
    row = _cluster_head(point, merged)
    for name in POOLS:
        pool = merged[name]
        row.update(_pool_columns(name, pool, build_scheduler_config(pool)))
    return row


def _cluster_head(point: SweepConfig, merged: dict[str, SweepConfig]) -> dict:
    return {"cluster": cluster_label(point, merged), "num_gpus": cluster_gpus(point, merged)}


def _pool_columns(name: str, pool: SweepConfig, config) -> dict:
    """One pool's columns: `<name>_<key>` for its engine settings (less `_CLUSTER_WIDE_COLUMNS`),
    its KV blocks as `config` (its SchedulerConfig) sized them, and its device."""
    columns = {f"{name}_{key}": value for key, value in pool.engine.used_settings().items()
               if key not in _CLUSTER_WIDE_COLUMNS}
    columns[f"{name}_num_gpu_blocks"] = config.num_gpu_blocks
    columns[f"{name}_device"] = device_name(pool)
    return columns


def simulate_cluster(point: SweepConfig, requests: list[Request], trim_fraction: float,
                     record_files: RecordFiles | None = None):
    """A `cluster:` point (simulator/disaggregated.py): each pool built as `pool_point` makes it;
    `record_files`: its records written there as it runs (`simulate_disaggregated(record_files=)`).

    Returns:
        (result, the decode pool's SchedulerConfig, its cost model, the row's cluster columns:
        `cluster` (`cluster_label`, e.g. "4P(TP1) 4D(TP2)"), `num_gpus`, and per pool
        `<pool>_<key>` for every engine setting the pool reads (`EngineConfig.used_settings` of
        its `pool_point`: replicas, router, TP, PP, enable_prefix_caching, ...), its KV blocks
        (`<pool>_num_gpu_blocks`, as the memory model sized them), its device (`<pool>_device`,
        `device_name`) and what priced its steps (`<pool>_cost_model_label`,
        `<pool>_cost_model_steps_out_of_range`: `cost_model_columns` of its cost model after the run)).
    """
    merged = pool_points(point)  # each pool's point, built once
    pools, row = {}, _cluster_head(point, merged)
    for name in POOLS:
        pool = merged[name]
        config = build_scheduler_config(pool)
        cost_model = build_cost_model(pool)
        pools[name] = (Pool(build_schedulers(pool, config), build_pricer(pool, cost_model),
                            getattr(point.cluster, name).router, pool.engine.data_parallel_size), config, cost_model)
        row.update(_pool_columns(name, pool, config))
    link, kv_bytes_per_token = build_link(point, merged)
    result = simulate_disaggregated(requests, pools["prefill"][0], pools["decode"][0], link, kv_bytes_per_token,
                                    outcome_fn=build_outcome_fn(merged["decode"]),
                                    seed=point.engine.seed, trim_fraction=trim_fraction,
                                    keep_token_times=point.output.token_times, keep_steps=point.output.steps,
                                    record_files=record_files)
    for name in POOLS:  # after the run: a measured model counts the steps it priced off its grids
        row.update({f"{name}_{key}": value for key, value in cost_model_columns(merged[name], pools[name][2]).items()})
    return result, pools["decode"][1], pools["decode"][2], row


def report_columns(row: dict, requests: pd.DataFrame, point: SweepConfig) -> dict:
    """The columns that only `slo:` and `goodput:` decide, from a point's summary row and its
    requests: `slo_verdicts`, `goodput_rps` (requests/s meeting every goodput threshold) and
    `goodput_rps_per_gpu` (over the point's `cluster_gpus`: layouts of one model on different GPU
    counts compared, issue 18). A sweep re-derives them from a cached simulation when only those
    keys changed."""
    columns = slo_verdicts(row, point.slo)
    if point.goodput:
        good = goodput_count(requests, point.goodput)
        columns["goodput_rps"] = good / row["makespan_s"] if row["makespan_s"] > 0 else 0.0
        columns["goodput_rps_per_gpu"] = columns["goodput_rps"] / cluster_gpus(point)
    return columns


def slo_verdicts(summary: dict, slo: dict[str, float]) -> dict:
    """`slo_<key>` per SLO (an undefined, NaN metric fails) and `slo_met` (NaN when no SLO is set)."""
    verdicts = {f"slo_{key}": bool(summary[slo_summary_key(key)] <= limit) for key, limit in slo.items()}
    verdicts["slo_met"] = all(verdicts.values()) if slo else np.nan
    return verdicts


def temporary_record_file(folder: Path, point_id: int, name: str) -> Path:
    """A fresh empty temporary file of `folder` (created if missing) for a point's `name` records
    ("requests" or "steps"), under `TEMP_PREFIX` so a killed run's are removed at the folder's next
    claim: `run_point(temporary=True)`'s files, a cached point's copies and a Ray worker's shipped
    files (experiments/planning/records_spool.py) are all named so.

    Raises:
        OSError: the folder cannot be created or written."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    fd, path = tempfile.mkstemp(dir=folder, prefix=f"{TEMP_PREFIX}point-{point_id}-", suffix=f"-{name}.parquet")
    os.close(fd)
    return Path(path)
