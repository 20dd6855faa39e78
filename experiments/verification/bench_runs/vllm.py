"""`vllm bench serve --save-result --save-detailed` JSON as a `BenchRun` (per-request values read
by `experiments.verification.vllm_bench.read_vllm_bench`).

The load (vllm-project/vllm 009e6d4, `vllm/benchmarks/serve.py`: the result dict saves the
arguments `request_rate` ("inf" when unlimited), `burstiness`, `max_concurrency` and, with a
ramp, `ramp_up_strategy`, `ramp_up_start_rps`, `ramp_up_end_rps`; with `--save-detailed`, newer
versions also each request's `start_times`, which are then replayed as they were): each request's prompt and
output length as measured, in send order; gaps Gamma(γ, 1 / (rate γ)) (γ = 1: Poisson) or, with
a ramp, `traces.stages.vllm_ramp_times`. vLLM rescales a gamma schedule so the n-th request
goes at n / rate and draws from numpy's global generator: the replay draws its own (notes).
Measured values are recomputed from the per-request lists with vLLM's definitions
(`client_metrics.TOOL_METRICS["vllm-bench"]`).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from experiments.verification.bench_runs.model import BenchRun, BenchStage, LoadPlan, MeasuredMetric, finite_number
from experiments.verification.client_metrics import tool_quantity
from experiments.verification.vllm_bench import read_vllm_bench
from profiler.json_object import read_json_object
from traces.stages import vllm_ramp_times

TOOL = "vllm-bench"


def read_vllm_run(path: Path) -> BenchRun:
    """The one stage of a vllm bench result, per-request values by vLLM's definitions.

    Raises:
        ValueError: as `read_vllm_bench`, or a request_rate / burstiness / ramp that is not a number.
    """
    frame, duration_s = read_vllm_bench(path)
    data = read_json_object(path, "cannot read vLLM bench result", "expected a JSON object")
    samples = {"ttft": frame["ttft_s"].to_numpy(), "e2el": frame["e2e_s"].to_numpy(),
               "itl": np.concatenate([np.asarray(g, dtype=float) for g in frame["itls_s"]]) if len(frame) else np.zeros(0)}
    multi = frame[frame["output_tokens"] > 1]
    samples["tpot"] = ((multi["e2e_s"] - multi["ttft_s"]) / (multi["output_tokens"] - 1)).to_numpy()
    measured = []
    for metric, values in samples.items():
        quantity, definition = tool_quantity(TOOL, metric)
        values = values[~np.isnan(values)]
        if not values.size:
            continue
        for stat, value in (("mean", values.mean()), *((f"p{p}", np.percentile(values, p)) for p in (50, 90, 99))):
            measured.append(MeasuredMetric(metric, stat, quantity, float(value), definition))
    if duration_s > 0:
        measured.append(MeasuredMetric("request_throughput", "", "throughput_rps", len(frame) / duration_s,
                                       "completed / benchmark duration"))
        measured.append(MeasuredMetric("output_throughput", "", "output_throughput_tps",
                                       float(frame["output_tokens"].sum()) / duration_s,
                                       "output tokens / benchmark duration"))
    return BenchRun(TOOL, path, (BenchStage("run", _plan(data, frame, path), tuple(measured)),))


def _plan(data: dict, frame, path: Path) -> LoadPlan:
    n = len(frame)
    lengths = (frame["prompt_tokens"].to_numpy(), frame["output_tokens"].to_numpy())
    rate = data.get("request_rate", "inf")
    rate = math.inf if rate in ("inf", None) else finite_number(rate, f"{path}: request_rate")
    gamma = data.get("burstiness", 1.0)
    gamma = math.inf if gamma in ("inf", None) else finite_number(gamma, f"{path}: burstiness")
    cap = data.get("max_concurrency")
    cap = int(finite_number(cap, f"{path}: max_concurrency")) if cap is not None else None
    notes = ["each request's measured prompt and output lengths, in send order; failed requests left out"]
    starts = data.get("start_times")
    if isinstance(starts, list) and len(starts) == len(data["ttfts"]):
        return _recorded_sends(data, frame, starts, path, notes)
    if data.get("ramp_up_strategy"):
        start = finite_number(data.get("ramp_up_start_rps"), f"{path}: ramp_up_start_rps")
        end = finite_number(data.get("ramp_up_end_rps"), f"{path}: ramp_up_end_rps")
        schedule = vllm_ramp_times(n, start, end, data["ramp_up_strategy"], None if math.isinf(gamma) else gamma,
                                   np.random.default_rng(0))
        return LoadPlan(n, schedule_s=schedule - schedule[0] if n else schedule, max_concurrency=cap,
                        lengths=lengths, notes=tuple(notes))
    if math.isinf(rate):
        return LoadPlan(n, max_concurrency=cap, lengths=lengths, notes=tuple(notes))
    notes.append("the gamma/Poisson gaps are drawn afresh (vLLM's own draws are not saved)")
    arrival = "constant" if math.isinf(gamma) else "poisson" if gamma == 1.0 else "gamma"
    return LoadPlan(n, rate=rate, arrival=arrival, burstiness=gamma if arrival == "gamma" else None,
                    max_concurrency=cap, lengths=lengths, notes=tuple(notes))


def _recorded_sends(data: dict, frame, starts: list, path: Path, notes: list[str]) -> LoadPlan:
    """The run's own send times (`start_times`, saved by `--save-detailed` in versions that keep
    them: each request's start after any wait for a `--max-concurrency` slot) as an open-loop
    schedule from the first, failed requests left out as `read_vllm_bench` leaves them out."""
    kept = np.asarray(data["output_lens"], dtype=np.int64) > 0
    sent = np.array([finite_number(t, f"{path}: start_times[{i}]") for i, t in enumerate(starts)])[kept]
    order = np.argsort(sent, kind="stable")
    lengths = (frame["prompt_tokens"].to_numpy()[order], frame["output_tokens"].to_numpy()[order])
    schedule = sent[order] - sent[order][0] if sent.size else sent
    notes.append("the run's own send times (start_times) replayed as arrivals; a --max-concurrency wait is "
                 "already in them")
    return LoadPlan(len(sent), schedule_s=schedule, lengths=lengths, notes=tuple(notes))
