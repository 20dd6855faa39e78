"""DistServe's headline on its own setting, simulated: per-GPU goodput of prefill/decode
disaggregation against colocated vLLM for the chatbot workload on an OPT-13B-class model.

DistServe's artifact (github.com/LLMServe/DistServe at 82831f1, evaluation/2-benchmark-serving/2-start-api-server.py
MODEL_TO_PARALLEL_PARAMS and evaluation/ae-scripts/e2e/_plot.py plot_fig8_upper): OPT-13B on
A100-SXM-80GB, ShareGPT, DistServe = one prefill instance at TP2 + one decode instance at TP1
(3 GPUs) vs vLLM at TP1 (1 GPU); SLOs TTFT 0.25 s and TPOT 0.1 s; goodput = the per-GPU rate at
90 % attainment of both. Engine settings as that script launches them: vLLM (v0.2.3, the fork
`interestingLSY/vllm@distserve-baseline-vllm`: evaluation/0-test-single-forward-performance/INSTRUCTIONS.md)
with --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --max-num-seqs 1024 --block-size 16
--engine-use-ray --worker-use-ray; DistServe's context instance batches at most 128 requests / 8192
tokens, its decoding instance 1024 requests, both at 0.95 of the GPU memory.

Here: llama-2-13b (40 layers, hidden 5120, 40 heads, MHA: OPT-13B's attention and KV shape; its
gated MLP has 212M parameters a layer to OPT's 210M), a100-80gb, lengths from the built-in
`sharegpt` profile with DistServe's own filter (evaluation/2-benchmark-serving/0-prepare-dataset.py
drops prompt + output >= 2048, OPT-13B's context; Poisson arrivals), NVLink between the instances
(`bandwidth_gb_s: device`). Two step-price sources (`PRICES`):
- `roofline`: the project's roofline cost model;
- `auto`: the shipped measured kernel tables (vLLM 0.14 kernels on the A100);
- `distserve`: DistServe's own measured step times of OPT-13B on A100-80GB, the fits its simulator
  uses (`DISTSERVE_FITS`, below) plus that simulator's Ray overhead per step. vLLM 0.2.3's fit
  prices the colocated vLLM layouts, DistServe's engine's fit its prefill and decode instances.
Layouts:
- colocated `vllm` (v0: prefill-prioritising, what DistServe compared with), TP1;
- (distserve prices only) colocated vLLM 0.2.3 as it batched prompts (`Vllm023Scheduler`): a
  prompt batch is padded to its longest prompt and a prompt joins it only while the padding stays
  within max_paddings = 256 and batch × longest within the token budget;
- (roofline only) colocated `sarathi` (chunked prefill) at chunk 512 (Sarathi-Serve's setting for
  tight TBT) and at chunk 2048 (the budget that suits a 0.25 s TTFT), TP1 (DistServe's fits
  have no price for a step mixing a prefill chunk with decodes);
- 1P(TP2) 1D(TP1), DistServe's placement, and 1P(TP2) 2D(TP1). The prefill instance runs `vllm`
  (whole prompts, DistServe's context instance); the decode instance runs `vllm_v1`, whose step
  takes a request landing from the link together with the running decodes, as DistServe's
  decoding instance does.

For each layout the capacity (bisection, 1,000-request trials, 10 % warm-up/drain trimmed), the
per-GPU goodput and, at the capacity, the share of requests meeting TTFT alone and TPOT alone
(which SLO binds); its attainment at DistServe's eight per-GPU rates and DistServe's goodput rule
on them; and, for the trace, the share of prompts whose TTFT alone (an idle instance) already
exceeds the 0.25 s SLO under the layout's prices. Under `distserve` prices, `distserve_style` then
repeats DistServe's own measuring procedure over 20 samples of the workload.

Run from the repo root (a few CPU-seconds a layout):
    .venv/bin/python benchmarks/bench_distserve.py 1000                 # NUM_REQUESTS per trial, roofline
    .venv/bin/python benchmarks/bench_distserve.py 1000 256             # ... only outputs <= 256 tokens
    .venv/bin/python benchmarks/bench_distserve.py 1000 0 auto          # the shipped measured kernel tables
    .venv/bin/python benchmarks/bench_distserve.py 1000 0 distserve     # DistServe's measured step times
    .venv/bin/python benchmarks/bench_distserve.py 1000 256 distserve
"""
from __future__ import annotations

import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import experiments.point as point_module
from experiments.config import SweepConfig, pool_point
from experiments.planning.disaggregation import Layout, layout_capacity, slo_attainment
from experiments.point import run_point
from simulator.scheduler import SCHEDULERS, VllmV0Scheduler
from simulator.scheduler.base import Entry

SLO_S = {"ttft_s": 0.25, "tpot_s": 0.1}
MEMORY = {"gpu_memory_utilization": 0.95}  # both systems in DistServe's artifact
VLLM = {"scheduler": "vllm", "max_num_seqs": 1024, "max_num_batched_tokens": 16384, **MEMORY}
PREFILL = {"tensor_parallel_size": 2, "max_num_seqs": 128, "max_num_batched_tokens": 8192}  # DistServe's context instance
# A chunking policy caps max_num_seqs at its token budget (each decode takes one token): 512 for
# DistServe's 1024, moot here as ~65 requests of these lengths fill one A100's KV pool.
DECODE = {"scheduler": "vllm_v1", "chunk_size": 512, "enable_prefix_caching": False, "max_num_seqs": 512}

TRACE = Path(tempfile.gettempdir()) / "sarathi-sim-distserve-sharegpt.csv"

# DistServe's measured step times of OPT-13B on A100-SXM-80GB, fp16 (github.com/LLMServe/DistServe
# at 82831f1, Apache-2.0: simdistserve/estimators/profile_data/profiler-a100-80g.{vllm,distserve}.json,
# fitted by evaluation/1-fit-time-usage from the single-forward timings of
# evaluation/0-test-single-forward-performance; read by simdistserve/estimators/time_estimator.py).
# Milliseconds: prefill = a + b·Σ prompt + c·Σ prompt²; decode = a + b·Σ (context + 1) + c·batch,
# with the "smallbs" triple below `decoding_large_small_bs_threshold` (95) sequences, "largebs" from it.
DISTSERVE_FITS = {
    "vllm": {  # vLLM 0.2.3 (the baseline), TP1
        1: {"prefill": (22.052204789310185, 0.14050923870128956, 8.076584822611088e-06),
            "decoding_smallbs": (23.475041008414784, 0.000592934466077393, 0.060726861260369455),
            "decoding_largebs": (20.206356173691958, 0.0004907727036234946, 0.1200031385587413)},
    },
    "distserve": {  # DistServe's engine (SwiftTransformer): its context instance at TP2, decoding at TP1
        1: {"prefill": (18.10254647486372, 0.1019122572698738, 7.122264314252114e-06),
            "decoding_smallbs": (19.934702624895458, 0.0006269356524350583, 0.03850697740828398),
            "decoding_largebs": (7.1661889468253595, 0.0005798000403396046, 0.15831096191764046)},
        2: {"prefill": (14.742973695171262, 0.06857720739764, 2.4495727400243586e-06),
            "decoding_smallbs": (13.294796350285385, 0.00034109219700723494, 0.06296393225243659),
            "decoding_largebs": (10.638741913126715, 0.00031183369638295723, 0.08562913604102729)},
    },
}
LARGE_BATCH_FROM = 95  # decoding_large_small_bs_threshold, the same in every entry
# simdistserve/base/worker.py add_ray_overhead, added to every step of both engines: 2 ms plus
# 0.0001 ms per token of the batch's context (prompt + tokens decoded so far).
RAY_BASE_MS, RAY_MS_PER_CONTEXT_TOKEN = 2.0, 1e-4
MAX_PADDINGS = 256  # vLLM 0.2.3 vllm/engine/arg_utils.py EngineArgs.max_paddings (DistServe's launch keeps it)


@dataclass
class DistServeFit:
    """A step's price from DistServe's measured fits (`DISTSERVE_FITS`) plus its Ray overhead.

    `engine` is "vllm" (vLLM 0.2.3) or "distserve"; `tensor_parallel_size` picks the fit. A
    prefill-only step costs a + b·Σq + c·Σq² ms over its prompts' query tokens q (`padded`: vLLM
    0.2.3's prompt batch, every prompt padded to the longest, n·max q and n·(max q)²); a
    decode-only step a + b·Σ(context + query) + c·B over its B sequences. A step holding both
    (a recompute beside decodes, which neither engine's fit measured) is the prefill price plus the
    decodes' b and c terms, and is counted in `mixed_steps`. Ray overhead: RAY_BASE_MS +
    RAY_MS_PER_CONTEXT_TOKEN · Σ(context + query).

    Raises:
        KeyError: no fit for that engine and TP degree.
    """

    engine: str
    tensor_parallel_size: int
    padded: bool = False
    mixed_steps: int = field(default=0, init=False)

    def __post_init__(self):
        self.fit = DISTSERVE_FITS[self.engine][self.tensor_parallel_size]

    def predict_step_s(self, query_tokens, context_tokens, is_prefill) -> float:
        q = np.asarray(query_tokens, dtype=np.int64)
        after = np.asarray(context_tokens, dtype=np.int64) + q
        prefill = np.asarray(is_prefill, dtype=bool)
        decodes = ~prefill
        batch = int(decodes.sum())
        large = "decoding_largebs" if batch >= LARGE_BATCH_FROM else "decoding_smallbs"
        _, b_decode, c_decode = self.fit[large]
        decode_ms = b_decode * float(after[decodes].sum()) + c_decode * batch
        if prefill.any():
            prompts = q[prefill].astype(np.float64)
            if self.padded:
                sum_q, sum_q2 = len(prompts) * prompts.max(), len(prompts) * prompts.max() ** 2
            else:
                sum_q, sum_q2 = prompts.sum(), (prompts ** 2).sum()
            a, b, c = self.fit["prefill"]
            step_ms = a + b * sum_q + c * sum_q2 + (decode_ms if batch else 0.0)
            self.mixed_steps += batch > 0
        else:
            step_ms = self.fit[large][0] + decode_ms
        return (step_ms + RAY_BASE_MS + RAY_MS_PER_CONTEXT_TOKEN * float(after.sum())) / 1e3

    def lone_prefill_s(self, prompt_tokens: int) -> float:
        """TTFT of one prompt on an idle instance (its prefill step alone), seconds."""
        return self.predict_step_s([prompt_tokens], [0], [True])


class Vllm023Scheduler(VllmV0Scheduler):
    """vLLM 0.2.3's prompt admission (vllm/core/scheduler.py `Scheduler._schedule`, lines 169-187
    of the 0.2.3 wheel): waiting prompts join the step in order while len(batch) × longest
    <= max_num_batched_tokens, `max_num_seqs` allows and the padding len × longest − Σ lengths
    <= max_paddings (256); the batch then runs padded to its longest prompt
    (worker/model_runner.py `_prepare_prompt`, `_make_tensor_with_pad`), which `DistServeFit(padded=True)`
    prices. Everything else is the `vllm` policy's. Benchmark-local: the project's `vllm` models
    Sarathi-Serve's unpadded v0 baseline."""

    def _admit_whole_prompts(self, entries: list[Entry], budget: int) -> int:
        lengths: list[int] = []
        while self.waiting:
            head = self.waiting.head()
            n = head.num_pending_tokens
            padded = (len(lengths) + 1) * max(lengths + [n])
            fits = padded <= budget or (not entries and head.num_preemptions)  # a long recompute runs alone
            if not fits or padded - sum(lengths) - n > MAX_PADDINGS or self._admit_head(n) is None:
                break
            entries.append((head, n, 0))
            lengths.append(n)
        return max(0, budget - len(lengths) * max(lengths, default=0))


@contextmanager
def distserve_prices(engine: str, padded: bool = False):
    """Within the block every point's cost model (`experiments.point.build_cost_model`, colocated
    replicas and both pools of a cluster alike) is `DistServeFit(engine, its TP, padded)`, and with
    `padded` the `vllm` policy is `Vllm023Scheduler`. Yields the list of cost models built."""
    built: list[DistServeFit] = []
    original_build, original_vllm = point_module.build_cost_model, SCHEDULERS["vllm"]

    def build(point: SweepConfig) -> DistServeFit:
        built.append(DistServeFit(engine, point.engine.tensor_parallel_size, padded))
        return built[-1]

    point_module.build_cost_model = build
    if padded:
        SCHEDULERS["vllm"] = Vllm023Scheduler
    try:
        yield built
    finally:
        point_module.build_cost_model, SCHEDULERS["vllm"] = original_build, original_vllm


def write_trace(max_output_tokens: int | None = None, num_requests: int = 20_000, seed: int = 0,
                path: Path = TRACE) -> Path:
    """Canonical CSV at `path`: the sharegpt profile at 1 QPS (its `seed`), rows with prompt + output
    >= 2048 dropped (and, given `max_output_tokens`, rows with longer outputs)."""
    from experiments.config import ProfileTrace
    from experiments.point import load_requests

    requests, _ = load_requests(ProfileTrace(kind="profile", name="sharegpt", qps=1.0, num_requests=num_requests,
                                                 seed=seed))
    kept = [r for r in requests if r.prompt_tokens + r.output_tokens < 2048
            and (max_output_tokens is None or r.output_tokens <= max_output_tokens)]
    lines = ["arrival_s,prompt_tokens,output_tokens"] + [f"{r.arrival_s!r},{r.prompt_tokens},{r.output_tokens}"
                                                          for r in kept]
    path.write_text("\n".join(lines) + "\n")
    return path


def point(engine: dict, cluster: dict | None = None, trace: Path = TRACE, cost_model: str = "roofline") -> SweepConfig:
    tree = {"model": "llama-2-13b", "device": "a100-80gb", "cost_model": cost_model,
            "trace": {"kind": "file", "path": str(trace), "qps": 1, "max_requests": 1000},
            "engine": engine, "goodput": SLO_S}
    if cluster:
        tree["cluster"] = cluster
    return SweepConfig.model_validate(tree)


def disaggregated(decode_replicas: int, trace: Path = TRACE, cost_model: str = "roofline") -> SweepConfig:
    return point({"scheduler": "vllm", **MEMORY}, {"prefill": {"replicas": 1, "engine": PREFILL},
                        "decode": {"replicas": decode_replicas, "engine": DECODE},
                        "link": {"bandwidth_gb_s": "device"}}, trace, cost_model)


@dataclass
class Row:
    """One layout of the benchmark and the step prices it runs under (`prices`: None for the
    point's own cost model, else `distserve_prices` arguments)."""

    name: str
    layout: Layout
    prices: tuple[str, bool] | None = None


def layouts(prices: str, trace: Path = TRACE) -> list[Row]:
    """The benchmark's layouts under `prices` ("roofline", "auto": the shipped measured kernel
    tables, or "distserve") on `trace`; the first is the baseline."""
    cost_model = "auto" if prices == "auto" else "roofline"
    v0 = Layout("colocated", point(VLLM, trace=trace, cost_model=cost_model), 1)
    split = [("1P(TP2) 1D(TP1)", Layout("disaggregated", disaggregated(1, trace, cost_model), 3)),
             ("1P(TP2) 2D(TP1)", Layout("disaggregated", disaggregated(2, trace, cost_model), 4))]
    if prices == "auto":
        return [Row("colocated vllm (v0) TP1", v0), *(Row(name, layout) for name, layout in split)]
    if prices == "roofline":
        return [Row("colocated vllm (v0) TP1", v0),
                Row("colocated sarathi TP1, chunk 512", Layout("colocated", point(
                    {"scheduler": "sarathi", "chunk_size": 512, "max_num_seqs": 512, **MEMORY}), 1)),
                Row("colocated sarathi TP1, chunk 2048", Layout("colocated", point(
                    {"scheduler": "sarathi", "chunk_size": 2048, "max_num_seqs": 1024, **MEMORY}), 1)),
                *(Row(name, layout) for name, layout in split)]
    if prices != "distserve":
        raise ValueError(f"prices must be 'roofline', 'auto' or 'distserve', got {prices!r}")
    return [Row("colocated vllm (v0) TP1", v0, ("vllm", False)),
            Row("colocated vllm 0.2.3 (padded prompt batches) TP1", v0, ("vllm", True)),
            *(Row(name, layout, ("distserve", False)) for name, layout in split)]


def attainment_at(layout: Layout, rate_qps: float, num_requests: int,
                  trim_fraction: float = 0.1) -> tuple[float, float, float]:
    """(share meeting both SLOs, TTFT alone, TPOT alone) at `rate_qps` over the trace's first
    `num_requests`, `trim_fraction` trimmed each end (the search's 0.1 by default)."""
    trace = layout.point.trace.model_copy(update={"qps": rate_qps, "max_requests": num_requests})
    requests = run_point(layout.point.model_copy(update={"trace": trace}), trim_fraction=trim_fraction).requests
    return tuple(slo_attainment(requests, slo, trim_fraction) for slo in (SLO_S, {"ttft_s": SLO_S["ttft_s"]},
                                                                          {"tpot_s": SLO_S["tpot_s"]}))


# The per-GPU rates DistServe measured the OPT-13B chatbot at (ae-scripts/e2e/opt-13b-*-client.sh,
# `--num-prompts-req-rates`, divided by the GPUs in plot.ipynb `plot_fig8_upper`), and vLLM's measured
# attainment of both SLOs there (plot.ipynb's stored output of plot_fig8_upper(99), which prints the
# 90 %-target curves' points).
DISTSERVE_RATES_PER_GPU = (0.25, 0.5, 1.0, 1.5, 2.0, 2.25, 2.5, 3.0)
DISTSERVE_VLLM_ATTAINMENT = (0.90, 0.90, 0.85, 0.81, 0.71, 0.70, 0.68, 0.55)


def find_intersection(xs, ys, target: float) -> float:
    """DistServe's goodput rule (plot.ipynb `find_intersection`): the x where the piecewise-linear
    curve (xs, ys) first crosses `target` (a segment whose ends lie on either side of it, `y < target`
    deciding the side); xs[0] if none does (DistServe then prints a warning)."""
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if (y0 < target) != (y1 < target):
            return (target - y0) * (x1 - x0) / (y1 - y0) + x0
    return xs[0]


def lone_ttft_misses(prompt_tokens: np.ndarray, lone_prefill_s) -> tuple[float, int]:
    """(share of `prompt_tokens` whose prefill alone exceeds the TTFT SLO, the shortest such prompt
    length; 0 when none does) under `lone_prefill_s(prompt_tokens) -> seconds`."""
    too_slow = [p for p in range(1, 2048) if lone_prefill_s(p) > SLO_S["ttft_s"]]
    shortest = too_slow[0] if too_slow else 0
    return (float(np.mean(prompt_tokens >= shortest)) if shortest else 0.0), shortest


def main(num_requests: int = 1000, max_output_tokens: int | None = None, prices: str = "roofline") -> None:
    write_trace(max_output_tokens)
    lengths = np.loadtxt(TRACE, delimiter=",", skiprows=1, usecols=(1, 2))
    print(f"trace: {len(lengths)} requests, mean prompt {lengths[:, 0].mean():.0f}, mean output {lengths[:, 1].mean():.0f}"
          f" tokens; prices: {prices}")
    baseline = None
    for row in layouts(prices):
        start = time.process_time()
        gpus = row.layout.gpus
        with ExitStack() as stack:
            built = stack.enter_context(distserve_prices(*row.prices)) if row.prices else None
            curve = [attainment_at(row.layout, rate * gpus, num_requests) for rate in DISTSERVE_RATES_PER_GPU]
            result = layout_capacity(row.layout, SLO_S, attainment=0.9, qps=(0.05, 4.0), num_requests=num_requests,
                                     precision=0.02, max_trials=24)
            at_capacity = (attainment_at(row.layout, result.capacity_qps, num_requests)
                           if np.isfinite(result.capacity_qps) else (np.nan,) * 3)
            first = built[0] if built else point_module.build_cost_model(
                pool_point(row.layout.point, "prefill") if row.layout.point.cluster else row.layout.point)
        share, shortest = lone_ttft_misses(lengths[:, 0], lambda p: first.predict_step_s([p], [0], [True]))
        mixed = sum(m.mixed_steps for m in built) if built else 0
        per_gpu = result.capacity_qps / gpus
        by_rule = find_intersection(DISTSERVE_RATES_PER_GPU, [both for both, _, _ in curve], 0.9)
        baseline = baseline or (per_gpu, by_rule)
        capacity = (f"capacity {result.capacity_qps:.3f} req/s on {gpus} GPU(s) = {per_gpu:.3f} per GPU "
                    f"({per_gpu / baseline[0]:.2f}x the first row); there TTFT met {at_capacity[1]:.1%}, "
                    f"TPOT met {at_capacity[2]:.1%}" if np.isfinite(per_gpu) else
                    "capacity below 0.05 req/s (the search's floor fails)")
        print(f"{row.name}: {capacity}\n  both SLOs met at DistServe's per-GPU rates "
              + " / ".join(f"{both:.0%}" for both, _, _ in curve)
              + f" -> DistServe's rule {by_rule:.2f} req/s per GPU ({by_rule / baseline[1]:.2f}x)"
              + (f"\n  prompts >= {shortest} tokens ({share:.1%} of the trace) miss TTFT alone" if shortest else
                 "\n  no prompt under 2,048 tokens misses TTFT alone") + " (the prefill instance's prices)"
              + f"{f'; {mixed} mixed steps' if mixed else ''} ({len(result.trials)} trials, "
              f"{time.process_time() - start:.0f} CPU-s)")


def distserve_style(max_output_tokens: int | None, seeds: int = 20) -> None:
    """DistServe's own measuring procedure on the simulator, under DistServe's measured prices:
    per seed, one sample of the workload (the profile at that seed), the same requests and arrival
    pattern at every rate (its client re-seeds before each rate: 2-benchmark-serving.py `main`),
    100 requests for vLLM and 300 for DistServe (ae-scripts/e2e/opt-13b-*-client.sh), nothing trimmed,
    goodput by `find_intersection` at 90 %. Prints each layout's attainment curve (mean over the
    seeds) and, over the seeds, the median and range of each goodput and of the ratio (DistServe
    over vLLM)."""
    rule: dict[str, list[float]] = {}
    uncrossed: dict[str, list[str]] = {}
    curves: dict[str, list[list[float]]] = {}
    for seed in range(seeds):
        trace = write_trace(max_output_tokens, num_requests=2000, seed=seed,
                            path=Path(tempfile.gettempdir()) / f"sarathi-sim-distserve-sharegpt-{seed}.csv")
        for row in (r for r in layouts("distserve", trace) if not r.prices[1] and r.layout.gpus < 4):
            size = 100 if row.layout.gpus == 1 else 300
            with distserve_prices(*row.prices):
                curve = [attainment_at(row.layout, rate * row.layout.gpus, size, trim_fraction=0.0)[0]
                         for rate in DISTSERVE_RATES_PER_GPU]
            curves.setdefault(row.name, []).append(curve)
            rule.setdefault(row.name, []).append(find_intersection(DISTSERVE_RATES_PER_GPU, curve, 0.9))
            # No crossing: find_intersection's xs[0] is then an upper bound (every rate below 90 %)
            # or a lower bound (every rate at or above 90 %: counted at the last rate).
            if min(curve) >= 0.9:
                rule[row.name][-1] = DISTSERVE_RATES_PER_GPU[-1]
            uncrossed.setdefault(row.name, []).append("above" if min(curve) >= 0.9 else
                                                      "below" if max(curve) < 0.9 else "crossed")
    for name, rows in curves.items():
        print(f"DistServe's procedure: {name}: both SLOs met at its per-GPU rates, mean of {seeds} samples "
              + " / ".join(f"{v:.0%}" for v in np.mean(rows, axis=0)))
    names = list(rule)
    rule["ratio"] = list(np.array(rule[names[1]]) / np.array(rule[names[0]]))
    for name, values in rule.items():
        flags = uncrossed.get(name, [])
        print(f"DistServe's procedure, {seeds} samples: {name}: median {np.median(values):.2f}, "
              f"range {min(values):.2f}-{max(values):.2f}" + (" req/s per GPU" if name != "ratio" else "x")
              + (f" ({flags.count('below')} samples below 90 % at every rate, {flags.count('above')} above)"
                 if flags else ""))


if __name__ == "__main__":
    args = sys.argv[1:4]
    main(int(args[0]) if args else 1000, (int(args[1]) or None) if len(args) > 1 else None,
         args[2] if len(args) > 2 else "roofline")
    if len(args) > 2 and args[2] == "distserve":
        distserve_style((int(args[1]) or None) if len(args) > 1 else None)
