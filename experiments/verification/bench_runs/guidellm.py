"""GuideLLM: the benchmarks report JSON (`guidellm benchmark --output-path benchmarks.json`).

Read in vllm-project/guidellm ee7a774: `src/guidellm/benchmark/schemas/report.py`
(`GenerativeBenchmarksReport`: `metadata.version` 2, `benchmarks: [...]`), each benchmark's
`config.strategy` (`src/guidellm/scheduler/strategies.py`: `type_` synchronous | concurrent
(`streams`, `rampup_duration`) | throughput (`max_concurrency`, `rampup_duration`) | constant /
poisson (`rate`, `max_concurrency`)) and `metrics` (`benchmark/schemas/metrics.py`
`GenerativeMetrics`: per metric a `StatusDistributionSummary` whose `successful` holds `mean`,
`median` and `percentiles.{p50, p90, p95, p99}`; latencies `*_ms` in milliseconds,
`request_latency` in seconds; `request_totals.successful`; `prompt_token_count` and
`output_token_count` distributions). A sweep is its benchmarks in order, each replayed alone.
A benchmark's `config.warmup` (`benchmark/schemas/base.py` `TransientPhaseConfig`) sends requests
that the metrics leave out: the replay sends them too and leaves them out the same way.

The report keeps length distributions, not each request's lengths: the replay sends the
successful requests' mean prompt and output tokens (said in the notes).
"""
from __future__ import annotations

from pathlib import Path

from experiments.verification.bench_runs.model import BenchRun, BenchStage, LoadPlan, dig, finite_number, measured_latency
from experiments.verification.client_metrics import TOOL_METRICS
from profiler.json_object import read_json_object

TOOL = "guidellm"
VERSIONS = (2,)
STATS = {"mean": ("mean",), "median": ("median",), "p90": ("percentiles", "p90"), "p99": ("percentiles", "p99")}


def read_guidellm(path: Path) -> BenchRun:
    """Each benchmark of a GuideLLM report as a stage.

    Raises:
        ValueError: a report of another version, no benchmarks, a missing key or a strategy not
            handled; the file, benchmark index and key named.
    """
    data = read_json_object(path, "cannot read GuideLLM report", "expected a JSON object (benchmarks.json)")
    version = dig(data, ["metadata", "version"], path)
    if version not in VERSIONS:
        raise ValueError(f"{path}: metadata.version {version!r} is not a GuideLLM report version read here "
                         f"({', '.join(map(str, VERSIONS))})")
    benchmarks = dig(data, ["benchmarks"], path)
    if not isinstance(benchmarks, list) or not benchmarks:
        raise ValueError(f"{path}: benchmarks is empty; nothing to compare")
    stages = tuple(_stage(path, i, b) for i, b in enumerate(benchmarks))
    return BenchRun(TOOL, path, stages, version=str(dig(data, ["metadata", "guidellm_version"], path, required=False)))


def _stage(path: Path, index: int, benchmark: dict) -> BenchStage:
    where = f"benchmarks[{index}]"
    metrics = dig(benchmark, ["metrics"], path)
    measured = []
    for metric in TOOL_METRICS[TOOL]:
        scale = 1e-3 if metric.endswith("_ms") else 1.0
        for stat, keys in STATS.items():
            value = dig(metrics, [metric, "successful", *keys], path)
            measured.append(measured_latency(TOOL, metric, stat, value, scale,
                                             f"{path}: {where}.metrics.{metric}.successful.{'.'.join(keys)}"))
    count = int(finite_number(dig(metrics, ["request_totals", "successful"], path),
                              f"{path}: {where}.metrics.request_totals.successful"))
    prompt = round(finite_number(dig(metrics, ["prompt_token_count", "successful", "mean"], path),
                                 f"{path}: {where}.metrics.prompt_token_count.successful.mean"))
    output = round(finite_number(dig(metrics, ["output_token_count", "successful", "mean"], path),
                                 f"{path}: {where}.metrics.output_token_count.successful.mean"))
    strategy = dig(benchmark, ["config", "strategy"], path)
    notes = (f"lengths: every request sends the mean prompt ({prompt}) and output ({output}) tokens of the "
             "benchmark's successful requests (the report keeps distributions only)",)
    warmup = _warmup(benchmark, count, f"{path}: {where}.config")
    plan = _plan(strategy, count + warmup.get("warmup_requests", 0), max(prompt, 1), max(output, 1), notes,
                 f"{path}: {where}.config.strategy", warmup)
    name = f"{where} {strategy.get('type_', '?')}"
    return BenchStage(name, plan, tuple(measured))


def _warmup(benchmark: dict, count: int, where: str) -> dict:
    """The LoadPlan keys of a benchmark's `warmup` (`TransientPhaseConfig`: `value` or `percent`,
    `mode` requests | duration | prefer_*; its requests are sent and left out of the metrics),
    {} when none. A cooldown, or a percent of a duration, is not replayed: ValueError."""
    config = benchmark.get("config", {})
    cooldown = config.get("cooldown") or {}
    if cooldown.get("percent") is not None or cooldown.get("value") is not None:
        raise ValueError(f"{where}.cooldown is set: the requests GuideLLM left out at the end are not replayed here")
    warmup = config.get("warmup") or {}
    percent, value, mode = warmup.get("percent"), warmup.get("value"), warmup.get("mode", "prefer_duration")
    if percent is None and value is None:
        return {}
    if mode in ("requests", "prefer_requests"):
        # percent of all requests: the measured ones are (1 - percent) of them
        total = count / (1.0 - percent) if percent is not None else count + finite_number(value, f"{where}.warmup.value")
        return {"warmup_requests": int(percent * total) if percent is not None else int(value)}
    if mode in ("duration", "prefer_duration") and percent is None:
        return {"warmup_s": finite_number(value, f"{where}.warmup.value")}
    raise ValueError(f"{where}.warmup {warmup}: a warm-up by percent of the duration, or mode 'both', is not "
                     "replayed here (give it as value seconds or as requests)")


def _plan(strategy: dict, count: int, prompt: int, output: int, notes: tuple[str, ...], where: str,
          warmup: dict) -> LoadPlan:
    kind = strategy.get("type_")
    lengths = {"prompt": prompt, "output": output, "notes": notes, **warmup}
    cap = strategy.get("max_concurrency")
    rampup = float(strategy.get("rampup_duration") or 0.0)
    if "warmup_s" in warmup and kind not in ("constant", "poisson"):
        raise ValueError(f"{where}: a warm-up of seconds on a {kind} strategy sent an unknown number of requests; "
                         "not replayed here")
    if kind == "synchronous":
        return LoadPlan(count, max_concurrency=1, **lengths)
    if kind == "concurrent":
        streams = int(finite_number(strategy.get("streams"), f"{where}.streams"))
        return LoadPlan(count, max_concurrency=streams, rampup_s=rampup, **lengths)
    if kind == "throughput":
        return LoadPlan(count, max_concurrency=cap, rampup_s=rampup if cap else 0.0, **lengths)
    if kind in ("constant", "poisson"):
        rate = finite_number(strategy.get("rate"), f"{where}.rate")
        # a warm-up of warmup_s seconds sent about rate x warmup_s requests besides the measured ones
        extra = round(rate * warmup["warmup_s"]) if "warmup_s" in warmup else 0
        return LoadPlan(count + extra, rate=rate, arrival=kind, max_concurrency=cap, **lengths)

    raise ValueError(f"{where}.type_ {kind!r} is not a GuideLLM strategy read here; valid: synchronous, "
                     "concurrent, throughput, constant, poisson")
