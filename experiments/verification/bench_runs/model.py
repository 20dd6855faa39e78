"""What a benchmark tool's result says: per stage, the load it sent (`LoadPlan`, which rebuilds it
for the simulator) and what it measured (`MeasuredMetric`, each with the tool's definition)."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from experiments.verification.client_metrics import tool_quantity
from traces.arrivals import arrival_times_s
from traces.concurrency import ScheduledConcurrency
from traces.length_distributions import length_distribution, sample_lengths
from traces.prompt_pool import PromptPool
from traces.request import Request, requests_from_columns
from traces.shared_prefix import GENERATED_BLOCK_TOKENS

# A tool's statistic name -> the simulator's suffix (simulator.metrics.PERCENTILES and the mean).
STATS = {"mean": "mean", "avg": "mean", "median": "p50", "p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99"}
# Arrival processes a plan can send: the generators' three, and `uniform`: num_requests sorted
# uniform times over duration_s (inference-perf's `constant` timer: exponential gaps normalised to
# the stage's duration are the order statistics of uniform points, up to the last at the end).
PLAN_ARRIVALS = ("constant", "poisson", "gamma", "uniform")


@dataclass(frozen=True)
class MeasuredMetric:
    """One number a tool reported, in seconds (or requests/s, tokens/s for rates).

    Attributes:
        metric: the tool's own name (e.g. `inter_token_latency_ms`).
        stat: the simulator's suffix: mean, p50, p90, p95 or p99; "" for a rate.
        quantity: the client quantity it is (`client_metrics.CLIENT_QUANTITIES`) or the
            simulator summary key of a rate (throughput_rps, output_throughput_tps).
        value: the measured value, seconds for latencies.
        definition: how the tool computes it, with its code path.
    """

    metric: str
    stat: str
    quantity: str
    value: float
    definition: str

    @property
    def key(self) -> str:
        """The key of the simulated value: `<quantity>_<stat>`, or the rate's summary key."""
        return f"{self.quantity}_{self.stat}" if self.stat else self.quantity


@dataclass(frozen=True)
class LoadPlan:
    """The load one stage of a benchmark sent, as the simulator replays it.

    Attributes:
        num_requests: requests sent (measured ones; warm-ups are not sent here).
        rate: requests/s of the send schedule; None: all scheduled at 0 s (a closed loop with
            `max_concurrency`, else one burst).
        arrival: "constant" (i / rate), "poisson", "gamma" (with burstiness) or "uniform" (sorted
            uniform over duration_s).
        duration_s: the stage's length, for "uniform".
        burstiness: gamma's shape.
        max_concurrency: at most this many in flight (`traces.concurrency.ScheduledConcurrency`).
        rampup_s: with max_concurrency and no rate, stream k starts at k × rampup_s / N.
        prompt, output: length specs (`traces.length_distributions`), or
        lengths: per-request (prompt, output) token arrays, in send order, or
        pool: a `PromptPool` (prompts, outputs and token identity).
        schedule_s: explicit send times, shape (num_requests,), instead of rate and arrival
            (`vllm bench --ramp-up-strategy`: `traces.stages.vllm_ramp_times`).
        warmup_requests, warmup_s: sent, but left out of the metrics as the tool left them out
            (GuideLLM's `warmup`): the first `warmup_requests` requests sent, and those sent
            before `warmup_s` seconds (`measured_mask`).
        warmup_before: requests sent as a phase of their own, by the same strategy, before the
            measured ones; the measured schedule starts when the last of them completes (AIPerf's
            `--warmup-request-count`: `aiperf/timing/credit_issuing_strategy.py` runs the warm-up
            phase, waits for its credits to return, then the profiling phase).
        notes: what the replay cannot reproduce of the tool's load (said in the report).
    """

    num_requests: int
    rate: float | None = None
    arrival: str = "constant"
    duration_s: float | None = None
    burstiness: float | None = None
    max_concurrency: int | None = None
    rampup_s: float = 0.0
    prompt: Any = None
    output: Any = None
    lengths: tuple[np.ndarray, np.ndarray] | None = None
    pool: PromptPool | None = None
    schedule_s: np.ndarray | None = None
    warmup_requests: int = 0
    warmup_s: float = 0.0
    warmup_before: int = 0
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.arrival not in PLAN_ARRIVALS:
            raise ValueError(f"unknown arrival {self.arrival!r}; valid: {', '.join(PLAN_ARRIVALS)}")
        if self.arrival == "uniform" and self.duration_s is None:
            raise ValueError("arrival uniform needs duration_s")
        if sum(x is not None for x in (self.pool, self.lengths, self.prompt)) != 1:
            raise ValueError("a load plan takes exactly one of prompt/output specs, per-request lengths or a pool")

    def build(self, seed: int = 0, after: tuple[list[Request], float] | None = None) -> list[Request] | ScheduledConcurrency:
        """The requests (open loop) or the concurrency-capped workload the simulator drives.
        Draws from `numpy.random.default_rng(seed)`: the schedule, then the lengths.

        `after`: (warm-up requests, the time their last one completed): they are sent first (ids
        0..K-1, their own times) and the plan's requests follow, ids from K, their schedule
        shifted to start at that time (`warmup_before`)."""
        requests = self.requests(seed)
        if after is not None:
            warm, done_s = after
            k = len(warm)
            requests = list(warm) + [Request(r.request_id + k, r.arrival_s + done_s, r.prompt_tokens, r.output_tokens,
                                             r.priority, r.prefix_hash_ids, r.prefix_block_tokens) for r in requests]
        if self.max_concurrency is not None:
            return ScheduledConcurrency(requests, self.max_concurrency)
        return requests

    def requests(self, seed: int = 0) -> list[Request]:
        """The plan's requests in send order, ids 0..n-1, `arrival_s` their scheduled send times."""
        rng = np.random.default_rng(seed)
        n = self.num_requests
        schedule = self._schedule(n, rng)
        if self.pool is not None:
            prompts, outputs, ids = self.pool.columns(self.pool.assignment(n))
            sizes = [GENERATED_BLOCK_TOKENS] * n
        elif self.lengths is not None:
            prompts, outputs = (np.asarray(a, dtype=np.int64)[:n] for a in self.lengths)
            ids, sizes = [()] * n, [512] * n
        else:
            prompts, outputs = sample_lengths(length_distribution(self.prompt, "prompt"),
                                              length_distribution(self.output, "output"), n, rng)
            ids, sizes = [()] * n, [512] * n
        return requests_from_columns(range(n), schedule.tolist(), prompts.tolist(), outputs.tolist(), [0] * n,
                                     ids, sizes)

    def warmup_plan(self) -> LoadPlan | None:
        """The warm-up phase's plan (`warmup_before` requests by the same strategy and lengths), or None."""
        if not self.warmup_before:
            return None
        if self.lengths is not None or self.schedule_s is not None:
            raise ValueError("a warm-up phase needs length specs or a pool and a generated schedule")
        return dataclasses.replace(self, num_requests=self.warmup_before, warmup_before=0, warmup_requests=0,
                                   warmup_s=0.0)

    def measured_mask(self, request_id: np.ndarray, sent_s: np.ndarray) -> np.ndarray:
        """Which simulated requests (ids in send order, send times in seconds) the tool measured."""
        return (np.asarray(request_id) >= self.warmup_requests + self.warmup_before) & \
            (np.asarray(sent_s) >= self.warmup_s)

    def _schedule(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.schedule_s is not None:
            return np.asarray(self.schedule_s, dtype=float)[:n]
        if self.rate is None:
            times = np.zeros(n)
            if self.max_concurrency is not None and self.rampup_s > 0:
                first = min(n, self.max_concurrency)
                times[:first] = np.arange(first) * (self.rampup_s / self.max_concurrency)
            return times
        if self.arrival == "uniform":
            return np.sort(rng.uniform(0.0, self.duration_s, n))
        return arrival_times_s(self.arrival, self.rate, n, rng, self.burstiness if self.arrival == "gamma" else None)


@dataclass(frozen=True)
class BenchStage:
    """One stage (or benchmark of a sweep) of a tool's run: its load and measurements."""

    name: str
    plan: LoadPlan
    measured: tuple[MeasuredMetric, ...]


@dataclass(frozen=True)
class BenchRun:
    """A benchmark tool's result file read: the tool, its file, and its stages in order."""

    tool: str
    path: Path
    stages: tuple[BenchStage, ...]
    version: str = ""
    notes: tuple[str, ...] = field(default=())


def measured_latency(tool: str, metric: str, stat: str, value: Any, scale_to_s: float, where: str) -> MeasuredMetric:
    """A `MeasuredMetric` of `tool`'s latency `metric` (`client_metrics.TOOL_METRICS`), its value in
    the tool's unit times `scale_to_s`.

    Raises:
        ValueError: a value that is not a finite number >= 0, naming `where` (file and key).
    """
    number = finite_number(value, where)
    quantity, definition = tool_quantity(tool, metric)
    return MeasuredMetric(metric, STATS[stat], quantity, number * scale_to_s, definition)


def finite_number(value: Any, where: str) -> float:
    """`value` as a float; ValueError naming `where` unless it is a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{where}: expected a finite number >= 0, got {value!r}")
    return float(value)


def dig(data: Any, keys: list[str], path: Path, required: bool = True) -> Any:
    """data[k0][k1]...; ValueError naming the file and the dotted key when missing (None if not
    `required`)."""
    node = data
    for depth, key in enumerate(keys):
        if not isinstance(node, dict) or key not in node:
            if not required:
                return None
            shown = ".".join(keys[:depth + 1])
            raise ValueError(f"{path}: no key {shown} (expected {'.'.join(keys)})")
        node = node[key]
    return node
