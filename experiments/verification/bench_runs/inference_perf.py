"""inference-perf: its config YAML and the per-stage lifecycle-metrics JSON it reports.

Read in kubernetes-sigs/inference-perf 7de5ef2:
- config (`inference_perf/config/loadgen/config.py`, `config/datagen/config.py`): `load.type`
  constant | poisson | concurrent; `load.stages`, each `{rate, duration}` (constant, poisson) or
  `{num_requests, concurrency_level}` (concurrent), or `load.sweep` (constant, poisson: stages
  generated at run time, each stage's rate read from its report, `_sweep_stage`); `trace_replay`
  and `trace_session_replay` are refused by name (their timing is in a trace file the report does
  not hold); `data.type` shared_prefix with
  `data.shared_prefix.{num_groups (alias num_unique_system_prompts), num_prompts_per_group
  (alias num_users_per_system_prompt), system_prompt_len, question_len, output_len}`, or random /
  synthetic with `data.input_distribution` and `data.output_distribution`
  `{mean, std_dev, min, max}`.
- report (`inference_perf/reportgen/base.py`): `stage_<k>_lifecycle_metrics.json` per stage,
  `load_summary.{count, requested_rate, achieved_rate, send_duration}` and
  `successes.{count, latency.<metric>.{mean, median, p90, p99, ...}, throughput.{requests_per_sec,
  output_tokens_per_sec}}`, latencies in seconds.

Each stage is replayed alone: inference-perf drains every stage before the next
(`load_generator.py` `run_stage` waits for all its requests) and the prompt cycle restarts at
each stage, so stage k's requests meet an idle engine (its prefix cache, still warm from the stage
before in the real run, starts cold here: said in the notes).
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import yaml

from experiments.verification.bench_runs.model import (BenchRun, BenchStage, LoadPlan, MeasuredMetric, dig,
                                                       finite_number, measured_latency)
from experiments.verification.client_metrics import TOOL_METRICS
from profiler.json_object import read_json_object
from traces.prompt_pool import PromptPool

TOOL = "inference-perf"
STAGE_FILE = re.compile(r"stage_(\d+)_lifecycle_metrics\.json$")
STATS = ("mean", "median", "p90", "p99")


def read_inference_perf(results: Path, config_path: Path | None) -> BenchRun:
    """Stages of an inference-perf run: `results` a `stage_<k>_lifecycle_metrics.json` or the
    folder holding them; `config_path` the run's config YAML (its load and data).

    Raises:
        ValueError: no config given, no stage file, a missing or non-numeric key, a stage the
            config does not have, a load type or data type not handled; the file and key named.
    """
    if config_path is None:
        raise ValueError(f"{results}: an inference-perf report holds no load; give the run's config YAML with "
                         "--bench-config FILE")
    files = sorted(results.glob("stage_*_lifecycle_metrics.json")) if results.is_dir() else [results]
    files = [f for f in files if STAGE_FILE.search(f.name)]
    if not files:
        raise ValueError(f"{results}: no stage_<k>_lifecycle_metrics.json (the summary file mixes stages; "
                         "give a stage file or the results folder)")
    config = _read_config(config_path)
    stages = []
    for path in sorted(files, key=lambda f: int(STAGE_FILE.search(f.name).group(1))):
        index = int(STAGE_FILE.search(path.name).group(1))
        stages.append(_stage(path, index, config, config_path))
    return BenchRun(TOOL, results, tuple(stages))


def _read_config(path: Path) -> dict:
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot read the inference-perf config ({type(exc).__name__}: {exc})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: expected a mapping (load:, data:, ...)")
    return config


def _stage(path: Path, index: int, config: dict, config_path: Path) -> BenchStage:
    data = read_json_object(path, "cannot read inference-perf lifecycle metrics", "expected a JSON object")
    count = int(finite_number(dig(data, ["successes", "count"], path), f"{path}: successes.count"))
    latency = dig(data, ["successes", "latency"], path)
    measured = []
    for metric in TOOL_METRICS[TOOL]:
        summary = latency.get(metric) if isinstance(latency, dict) else None
        if summary is None:  # inference-perf leaves out what a non-streamed run has no value of
            continue
        for stat in STATS:
            if stat not in summary:
                raise ValueError(f"{path}: no key successes.latency.{metric}.{stat}")
            measured.append(measured_latency(TOOL, metric, stat, summary[stat], 1.0,
                                             f"{path}: successes.latency.{metric}.{stat}"))
    throughput = dig(data, ["successes", "throughput"], path)
    for key, quantity in (("requests_per_sec", "throughput_rps"), ("output_tokens_per_sec", "output_throughput_tps")):
        value = finite_number(dig(throughput, [key], path), f"{path}: successes.throughput.{key}")
        measured.append(MeasuredMetric(key, "", quantity, value, f"successes.throughput.{key} (over the stage's "
                                                                 "send-to-drain time)"))
    plan = _plan(config, config_path, index, count, data, path)
    return BenchStage(f"stage {index}", plan, tuple(measured))


def _plan(config: dict, config_path: Path, index: int, count: int, data: dict, path: Path) -> LoadPlan:
    load_type = str(dig(config, ["load", "type"], config_path, required=False) or "constant")
    sweep = dig(config, ["load", "sweep"], config_path, required=False)
    lengths, notes = _lengths(config, config_path)
    notes = list(notes)
    if sweep is not None and load_type not in ("constant", "poisson"):
        raise ValueError(f"{config_path}: load.sweep with load.type {load_type!r}: inference-perf generates sweep "
                         "stages only for constant and poisson loads (its LoadConfig refuses the others)")
    if sweep is not None:
        stage, where = _sweep_stage(sweep, config_path, index, data, path)
        notes.append(f"stage {index} of a sweep: its rate is the run's (load_summary.requested_rate, generated "
                     "from the server's measured saturation), its duration load.sweep.stage_duration")
    else:
        stages = dig(config, ["load", "stages"], config_path)
        if not isinstance(stages, list) or not 0 <= index < len(stages):
            raise ValueError(f"{path}: stage {index}, but {config_path} load.stages has "
                             f"{len(stages) if isinstance(stages, list) else 0} stage(s)")
        stage, where = stages[index], f"{config_path}: load.stages[{index}]"
    if load_type in ("constant", "poisson"):
        rate = finite_number(dig(stage, ["rate"], config_path), f"{where}.rate")
        duration_s = finite_number(dig(stage, ["duration"], config_path), f"{where}.duration")
        requested = data.get("load_summary", {}).get("requested_rate")
        if isinstance(requested, (int, float)) and abs(requested - rate) > 1e-9 * max(rate, 1.0):
            raise ValueError(f"{path}: load_summary.requested_rate {requested} is not {where}.rate {rate}: "
                             "is this the config of that run?")
        sent = int(rate * duration_s)  # run_stage: num_requests = int(rate * duration)
        if sent == 0:
            raise ValueError(f"{where}: rate {rate:g} x duration {duration_s:g} s sends no request "
                             f"(inference-perf sends int(rate x duration)), but {path} reports {count} "
                             "successes: is this the config of that run?")
        if count != sent:
            notes.append(f"stage {index}: {sent} requests sent, {count} succeeded; all {sent} are replayed")
        notes.append(f"inference-perf's {load_type} timer ({'exponential gaps normalised to the duration' if load_type == 'constant' else 'a Poisson count per second, spread the same way'}, unseeded) is replayed as {sent} sorted uniform times over {duration_s:g} s")
        return LoadPlan(sent, rate=rate, arrival="uniform", duration_s=duration_s, notes=tuple(notes), **lengths)
    if load_type == "concurrent":
        num = int(finite_number(dig(stage, ["num_requests"], config_path), f"{where}.num_requests"))
        level = int(finite_number(dig(stage, ["concurrency_level"], config_path), f"{where}.concurrency_level"))
        notes.append("concurrency_level is split over worker processes in inference-perf; replayed as one limit")
        return LoadPlan(num, max_concurrency=level, notes=tuple(notes), **lengths)
    raise ValueError(f"{config_path}: load.type {load_type!r} is not replayed here; valid: constant, poisson, concurrent "
                     "(trace_replay / trace_session_replay time requests from a trace file the report does not "
                     "hold: replay that trace with trace.path instead)")


def _sweep_stage(sweep: Any, config_path: Path, index: int, data: dict, path: Path) -> tuple[dict, str]:
    """Stage `index` of a `load.sweep` run as a `{rate, duration}` stage and where its values come
    from. inference-perf generates a sweep's stages at run time from the server's measured
    saturation (`inference_perf/loadgen/saturation.py`, `config/loadgen/config.py` SweepConfig:
    `num_stages` stages of `stage_duration` s, default 180, rates spaced `linear` or `geometric`
    below the saturation rate), so the config holds no rate: each stage's is its report's
    `load_summary.requested_rate`. The saturation probe itself is not a reported stage.

    Raises:
        ValueError: `load.sweep` not a mapping, a non-positive or non-numeric `stage_duration`, or a
            stage file without `load_summary.requested_rate`; file and key named."""
    if not isinstance(sweep, dict):
        raise ValueError(f"{config_path}: load.sweep must be a mapping (type, num_stages, stage_duration, ...)")
    duration = sweep.get("stage_duration", 180)
    duration_s = finite_number(duration, f"{config_path}: load.sweep.stage_duration")
    if duration_s <= 0:
        raise ValueError(f"{config_path}: load.sweep.stage_duration must be > 0 seconds, got {duration}")
    rate = (data.get("load_summary") or {}).get("requested_rate")
    if rate is None:
        raise ValueError(f"{path}: no load_summary.requested_rate: a sweep's stage rates are only in its "
                         "reports (the config generates them at run time)")
    rate = finite_number(rate, f"{path}: load_summary.requested_rate")
    if rate <= 0:
        raise ValueError(f"{path}: load_summary.requested_rate must be > 0, got {rate}")
    return {"rate": rate, "duration": duration_s}, f"{path}: stage {index} (sweep)"


def _lengths(config: dict, config_path: Path) -> tuple[dict[str, Any], tuple[str, ...]]:
    data_type = str(dig(config, ["data", "type"], config_path))
    if data_type == "shared_prefix":
        sp = dig(config, ["data", "shared_prefix"], config_path)
        if not isinstance(sp, dict):
            raise ValueError(f"{config_path}: data.shared_prefix must be a mapping (num_groups, "
                             f"num_prompts_per_group, system_prompt_len, ...), got {sp!r}")
        groups = _first(sp, ("num_groups", "num_unique_system_prompts"), 10)
        per_group = _first(sp, ("num_prompts_per_group", "num_users_per_system_prompt"), 10)
        where = f"{config_path}: data.shared_prefix"
        counts = [int(finite_number(v, f"{where}.{k}")) for k, v in
                  (("num_groups", groups), ("num_prompts_per_group", per_group), ("seed", sp.get("seed") or 0))]
        lens = [_spec(sp.get(k, default), f"{where}.{k}")
                for k, default in (("system_prompt_len", 100), ("question_len", 50), ("output_len", 50))]
        try:
            pool = PromptPool(counts[0], counts[1], *lens, order="shuffled_cycle", seed=counts[2])
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        return {"pool": pool}, ("the shared-prefix pool is drawn with its own seed: the same sizes and reuse, "
                                "not the run's exact lengths where they were distributions",
                                "output_len is each request's max_tokens; the replay assumes every output reached it")
    if data_type in ("random", "synthetic", "mock"):
        lengths = {name: _spec(dig(config, ["data", key], config_path), f"{config_path}: data.{key}")
                   for name, key in (("prompt", "input_distribution"), ("output", "output_distribution"))}
        return lengths, ("lengths drawn from the config's distributions",)
    raise ValueError(f"{config_path}: data.type {data_type!r} is not replayed here; valid: shared_prefix, random, "
                     "synthetic (a dataset's prompts are not in the report)")


def _first(mapping: dict, names: tuple[str, ...], default: int) -> Any:
    return next((mapping[n] for n in names if n in mapping), default)


def _spec(value: Any, where: str) -> Any:
    """An inference-perf length (an int, or a Distribution {mean, std_dev, min, max}) as a length
    spec; ValueError naming `where` (file: key) for a missing or non-numeric mean / bound."""
    if isinstance(value, dict):
        mean = finite_number(value.get("mean"), f"{where}.mean")
        std = finite_number(value.get("std_dev", value.get("std", 0)), f"{where}.std_dev")
        spec = {"dist": "normal", "mean": mean, "std": std} if std else int(round(mean))
        if isinstance(spec, dict):
            spec.update({k: int(finite_number(value[k], f"{where}.{k}")) for k in ("min", "max") if k in value})
        return spec
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0
            or value != int(value)):
        raise ValueError(f"{where}: expected a token count (an integer >= 0) or a distribution "
                         f"{{mean, std_dev, min, max}}, got {value!r}")
    return int(value)  # 40.0 as inference-perf's pydantic config reads it: 40
