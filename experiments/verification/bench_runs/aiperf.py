"""AIPerf's `profile_export_aiperf.json` and genai-perf's `profile_export_genai_perf.json`.

Read in ai-dynamo/aiperf db4f639: `aiperf/exporters/json_exporter.py` writes `JsonExportData`
(`aiperf/common/models/export_models.py`, "designed to mimic the structure of the GenAI-Perf JSON
output"): per metric `{unit, avg, p1 ... p99, min, max, std}` (`JsonMetricResult`), e.g.
`time_to_first_token`, `inter_token_latency`, `request_latency` (unit "ms") and
`request_throughput` ("requests/sec"), `output_token_throughput` ("tokens/sec"); and
`input_config`, the run's `UserConfig`: `loadgen.{concurrency, request_rate, request_rate_mode,
request_count, warmup_request_count}` (`aiperf/common/config/loadgen_config.py`) and
`input.prompt.{input_tokens, output_tokens}.{mean, stddev}` (`prompt_config.py`). genai-perf's
`input_config` is flat: `concurrency`, `request_rate`, `synthetic_input_tokens_mean/stddev`,
`output_tokens_mean/stddev`, `request_count` or `num_prompts`.

Warm-up requests (`warmup_request_count`) run as a phase of their own before the profiling
phase and are not in the metrics (`aiperf/timing/credit_issuing_strategy.py` `_execute_phases`:
the profiling phase starts once the warm-up's credits have returned); the replay does the same
(`LoadPlan.warmup_before`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.verification.bench_runs.model import (BenchRun, BenchStage, LoadPlan, MeasuredMetric, dig,
                                                       finite_number, measured_latency)
from experiments.verification.client_metrics import TOOL_METRICS
from profiler.json_object import read_json_object

TOOL = "aiperf"
UNITS_S = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0}
STATS = ("avg", "p50", "p90", "p99")
RATES = {"request_throughput": ("throughput_rps", "requests/sec"),
         "output_token_throughput": ("output_throughput_tps", "tokens/sec")}


def read_aiperf(path: Path) -> BenchRun:
    """The one stage of an AIPerf (or genai-perf) JSON export.

    Raises:
        ValueError: no metrics, an unknown unit, a missing key or a load not described; the file
            and key named.
    """
    data = read_json_object(path, "cannot read AIPerf/genai-perf export", "expected a JSON object")
    measured = []
    for metric in TOOL_METRICS[TOOL]:
        block = data.get(metric)
        if block is None:
            continue
        unit = dig(block, ["unit"], path)
        if unit not in UNITS_S:
            raise ValueError(f"{path}: {metric}.unit {unit!r} is not a time unit read here ({', '.join(UNITS_S)})")
        for stat in STATS:
            measured.append(measured_latency(TOOL, metric, stat, dig(block, [stat], path), UNITS_S[unit],
                                             f"{path}: {metric}.{stat}"))
    if not measured:
        raise ValueError(f"{path}: none of {', '.join(TOOL_METRICS[TOOL])}: not an AIPerf/genai-perf profile export")
    for metric, (quantity, unit) in RATES.items():
        block = data.get(metric)
        if block is not None:
            if block.get("unit") != unit:
                raise ValueError(f"{path}: {metric}.unit is {block.get('unit')!r}, expected {unit!r}")
            measured.append(MeasuredMetric(metric, "", quantity, finite_number(dig(block, ["avg"], path),
                                                                                f"{path}: {metric}.avg"),
                                           f"{metric}.avg ({unit}, over the profiling phase)"))
    config = dig(data, ["input_config"], path)
    plan = _plan(config, path)
    return BenchRun("aiperf" if "loadgen" in config else "genai-perf", path, (BenchStage("profile", plan, tuple(measured)),))


def _plan(config: dict, path: Path) -> LoadPlan:
    nested = "loadgen" in config
    load = config["loadgen"] if nested else config
    prompt_cfg = dig(config, ["input", "prompt"], path) if nested else None
    where = "input_config.loadgen" if nested else "input_config"
    count = load.get("request_count", load.get("num_prompts"))
    count = int(finite_number(count, f"{path}: {where}.request_count"))
    if nested:
        prompt = _normal(dig(prompt_cfg, ["input_tokens"], path), f"{path}: input_config.input.prompt.input_tokens")
        output = _normal(dig(prompt_cfg, ["output_tokens"], path), f"{path}: input_config.input.prompt.output_tokens")
    else:
        prompt = _normal({"mean": config.get("synthetic_input_tokens_mean"),
                          "stddev": config.get("synthetic_input_tokens_stddev", 0)},
                         f"{path}: input_config.synthetic_input_tokens_mean")
        output = _normal({"mean": config.get("output_tokens_mean"), "stddev": config.get("output_tokens_stddev", 0)},
                         f"{path}: input_config.output_tokens_mean")
    notes = ["lengths drawn from the export's input/output token means and deviations"]
    warmup = int(finite_number(load.get("warmup_request_count") or 0, f"{path}: {where}.warmup_request_count"))
    concurrency, rate = load.get("concurrency"), load.get("request_rate")
    cap = int(finite_number(concurrency, f"{path}: {where}.concurrency")) if concurrency is not None else None
    if rate is None:
        if cap is None:
            raise ValueError(f"{path}: {where} has neither concurrency nor request_rate: the load is not described")
        return LoadPlan(count, max_concurrency=cap, prompt=prompt, output=output, warmup_before=warmup,
                        notes=tuple(notes))
    mode = str(load.get("request_rate_mode", "poisson")).lower().removeprefix("requestratemode.")
    if mode not in ("constant", "poisson"):
        raise ValueError(f"{path}: {where}.request_rate_mode {mode!r} is not read here; valid: constant, poisson")
    return LoadPlan(count, rate=finite_number(rate, f"{path}: {where}.request_rate"), arrival=mode,
                    max_concurrency=cap, prompt=prompt, output=output, warmup_before=warmup, notes=tuple(notes))


def _normal(block: Any, where: str) -> Any:
    mean = block.get("mean") if isinstance(block, dict) else None
    if mean is None:
        raise ValueError(f"{where}: no mean token count")
    mean = finite_number(mean, f"{where}.mean")
    std = finite_number(block.get("stddev") or 0, f"{where}.stddev")
    return {"dist": "normal", "mean": mean, "std": std} if std else max(1, round(mean))
