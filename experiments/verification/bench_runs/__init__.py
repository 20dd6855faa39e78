"""Benchmark tools' result files read into `BenchRun`s: per stage, the load the tool sent and
what it measured, with the tool's definitions (`experiments.verification.client_metrics`)."""
from __future__ import annotations

from pathlib import Path

from experiments.verification.bench_runs.model import BenchRun, BenchStage, LoadPlan, MeasuredMetric

TOOLS = ("vllm-bench", "inference-perf", "guidellm", "aiperf")

__all__ = ["BenchRun", "BenchStage", "LoadPlan", "MeasuredMetric", "TOOLS", "read_bench_run"]


def read_bench_run(path: str | Path, bench_config: str | Path | None = None, tool: str = "auto") -> BenchRun:
    """Read a result file (or an inference-perf results folder) of one of `TOOLS`.

    `tool` "auto" tells them apart by shape: a folder or `stage_<k>_lifecycle_metrics.json` is
    inference-perf's, a JSON with `benchmarks` GuideLLM's, one with `input_config` AIPerf's or
    genai-perf's, one with `ttfts` vllm bench's. `bench_config`: inference-perf's config YAML.

    Raises:
        ValueError: a missing file, a shape none of the tools writes (naming the keys looked
            for), or the reader's error (file and key named).
    """
    from profiler.json_object import read_json_object

    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path}: no such file or folder")
    if tool == "auto":
        tool = _detect(path, read_json_object)
    if tool == "inference-perf":
        from experiments.verification.bench_runs.inference_perf import read_inference_perf

        return read_inference_perf(path, Path(bench_config) if bench_config is not None else None)
    if bench_config is not None:
        raise ValueError(f"--bench-config is inference-perf's config; {path} is a {tool} result, which holds its load")
    if tool == "guidellm":
        from experiments.verification.bench_runs.guidellm import read_guidellm

        return read_guidellm(path)
    if tool in ("aiperf", "genai-perf"):
        from experiments.verification.bench_runs.aiperf import read_aiperf

        return read_aiperf(path)
    if tool == "vllm-bench":
        from experiments.verification.bench_runs.vllm import read_vllm_run

        return read_vllm_run(path)
    raise ValueError(f"unknown benchmark tool {tool!r}; valid: auto, {', '.join(TOOLS)}")


def _detect(path: Path, read_json_object) -> str:
    if path.is_dir() or path.name.startswith("stage_"):
        return "inference-perf"
    data = read_json_object(path, "cannot read benchmark result", "expected a JSON object")
    if "benchmarks" in data:
        return "guidellm"
    if "input_config" in data:
        return "aiperf"
    if "ttfts" in data:
        return "vllm-bench"
    if "load_summary" in data or "successes" in data:
        return "inference-perf"
    raise ValueError(f"{path}: not a result of {', '.join(TOOLS)}: none of the keys benchmarks (GuideLLM), "
                     "input_config (AIPerf/genai-perf), ttfts (vllm bench --save-detailed), load_summary "
                     "(inference-perf) is there")
