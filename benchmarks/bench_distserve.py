"""DistServe's headline on its own setting, simulated: per-GPU goodput of prefill/decode
disaggregation against colocated vLLM for the chatbot workload on an OPT-13B-class model.

DistServe's artifact (github.com/LLMServe/DistServe, evaluation/2-benchmark-serving/2-start-api-server.py
MODEL_TO_PARALLEL_PARAMS and evaluation/ae-scripts/e2e/_plot.py plot_fig8_upper): OPT-13B on
A100-SXM-80GB, ShareGPT, DistServe = one prefill instance at TP2 + one decode instance at TP1
(3 GPUs) vs vLLM at TP1 (1 GPU); SLOs TTFT 0.25 s and TPOT 0.1 s; goodput = the per-GPU rate at
90 % attainment of both. Engine settings as that script launches them: vLLM with
--gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --max-num-seqs 1024 --block-size 16;
DistServe's context instance batches at most 128 requests / 8192 tokens, its decoding instance
1024 requests, both at 0.95 of the GPU memory.

Here: llama-2-13b (40 layers, hidden 5120, 40 heads, MHA: OPT-13B's attention and KV shape; its
gated MLP has 212M parameters a layer to OPT's 210M), a100-80gb, lengths from the built-in
`sharegpt` profile with DistServe's own filter (evaluation/2-benchmark-serving/0-prepare-dataset.py
drops prompt + output >= 2048, OPT-13B's context; Poisson arrivals), roofline cost model, NVLink
between the instances (`bandwidth_gb_s: device`). Layouts:
- colocated `vllm` (v0: prefill-prioritising, what DistServe compared with), TP1;
- colocated `sarathi` (chunked prefill) at chunk 512 (Sarathi-Serve's setting for tight TBT)
  and at chunk 2048 (the budget that suits a 0.25 s TTFT), TP1;
- 1P(TP2) 1D(TP1), DistServe's placement, and 1P(TP2) 2D(TP1). The prefill instance runs `vllm`
  (whole prompts, DistServe's context instance); the decode instance runs `vllm_v1`, whose step
  takes a request landing from the link together with the running decodes, as DistServe's
  decoding instance does (under `vllm` v0 such a request runs alone in a step while every
  running decode stalls: tests/test_distserve_setting.py, ~10 % of this layout's capacity).

For each layout the capacity (bisection, 1,000-request trials, 10 % warm-up/drain trimmed), the
per-GPU goodput and, at the capacity, the share of requests meeting TTFT alone and TPOT alone
(which SLO binds).

Run from the repo root (a few CPU-seconds a layout):
    .venv/bin/python benchmarks/bench_distserve.py 1000          # NUM_REQUESTS per trial
    .venv/bin/python benchmarks/bench_distserve.py 1000 256      # ... only outputs <= 256 tokens
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from experiments.config import SweepConfig
from experiments.planning.disaggregation import Layout, layout_capacity, slo_attainment
from experiments.point import run_point

SLO_S = {"ttft_s": 0.25, "tpot_s": 0.1}
MEMORY = {"gpu_memory_utilization": 0.95}  # both systems in DistServe's artifact
VLLM = {"scheduler": "vllm", "max_num_seqs": 1024, "max_num_batched_tokens": 16384, **MEMORY}
PREFILL = {"tensor_parallel_size": 2, "max_num_seqs": 128, "max_num_batched_tokens": 8192}  # DistServe's context instance
# A chunking policy caps max_num_seqs at its token budget (each decode takes one token): 512 for
# DistServe's 1024, moot here as ~65 requests of these lengths fill one A100's KV pool.
DECODE = {"scheduler": "vllm_v1", "chunk_size": 512, "enable_prefix_caching": False, "max_num_seqs": 512}

TRACE = Path(tempfile.gettempdir()) / "sarathi-sim-distserve-sharegpt.csv"


def write_trace(max_output_tokens: int | None = None, num_requests: int = 20_000) -> Path:
    """Canonical CSV: the sharegpt profile at 1 QPS, rows with prompt + output >= 2048 dropped
    (and, given `max_output_tokens`, rows with longer outputs)."""
    from experiments.config import ProfileTrace
    from experiments.point import load_requests

    requests, _ = load_requests(ProfileTrace(kind="profile", name="sharegpt", qps=1.0, num_requests=num_requests))
    kept = [r for r in requests if r.prompt_tokens + r.output_tokens < 2048
            and (max_output_tokens is None or r.output_tokens <= max_output_tokens)]
    lines = ["arrival_s,prompt_tokens,output_tokens"] + [f"{r.arrival_s!r},{r.prompt_tokens},{r.output_tokens}"
                                                          for r in kept]
    TRACE.write_text("\n".join(lines) + "\n")
    return TRACE


def point(engine: dict, cluster: dict | None = None) -> SweepConfig:
    tree = {"model": "llama-2-13b", "device": "a100-80gb", "cost_model": "roofline",
            "trace": {"kind": "file", "path": str(TRACE), "qps": 1, "max_requests": 1000},
            "engine": engine, "goodput": SLO_S}
    if cluster:
        tree["cluster"] = cluster
    return SweepConfig.model_validate(tree)


def disaggregated(decode_replicas: int) -> SweepConfig:
    return point({"scheduler": "vllm", **MEMORY}, {"prefill": {"replicas": 1, "engine": PREFILL},
                        "decode": {"replicas": decode_replicas, "engine": DECODE},
                        "link": {"bandwidth_gb_s": "device"}})


def layouts() -> list[tuple[str, Layout]]:
    return [
        ("colocated vllm (v0) TP1", Layout("colocated", point(VLLM), 1)),
        ("colocated sarathi TP1, chunk 512", Layout("colocated", point(
            {"scheduler": "sarathi", "chunk_size": 512, "max_num_seqs": 512, **MEMORY}), 1)),
        ("colocated sarathi TP1, chunk 2048", Layout("colocated", point(
            {"scheduler": "sarathi", "chunk_size": 2048, "max_num_seqs": 1024, **MEMORY}), 1)),
        ("1P(TP2) 1D(TP1)", Layout("disaggregated", disaggregated(1), 3)),
        ("1P(TP2) 2D(TP1)", Layout("disaggregated", disaggregated(2), 4)),
    ]


def binding(layout: Layout, rate_qps: float, num_requests: int) -> tuple[float, float]:
    """(share meeting TTFT alone, share meeting TPOT alone) at `rate_qps`, trimmed as the search."""
    trace = layout.point.trace.model_copy(update={"qps": rate_qps, "max_requests": num_requests})
    requests = run_point(layout.point.model_copy(update={"trace": trace}), trim_fraction=0.1).requests
    return tuple(slo_attainment(requests, {key: SLO_S[key]}, 0.1) for key in ("ttft_s", "tpot_s"))


def main(num_requests: int = 1000, max_output_tokens: int | None = None) -> None:
    write_trace(max_output_tokens)
    baseline = None
    for name, layout in layouts():
        start = time.process_time()
        result = layout_capacity(layout, SLO_S, attainment=0.9, qps=(0.25, 4.0), num_requests=num_requests,
                                 precision=0.02, max_trials=20)
        per_gpu = result.capacity_qps / layout.gpus
        baseline = baseline or per_gpu
        ttft, tpot = binding(layout, result.capacity_qps, num_requests)
        print(f"{name}: {result.capacity_qps:.3f} req/s on {layout.gpus} GPU(s) -> {per_gpu:.3f} req/s per GPU "
              f"({per_gpu / baseline:.2f}x vLLM); at it TTFT met {ttft:.1%}, TPOT met {tpot:.1%} "
              f"({len(result.trials)} trials, {time.process_time() - start:.0f} CPU-s)")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
