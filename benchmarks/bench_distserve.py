"""DistServe's headline on its own setting, simulated: per-GPU goodput of prefill/decode
disaggregation against colocated vLLM for the chatbot workload on an OPT-13B-class model.

DistServe's artifact (github.com/LLMServe/DistServe, evaluation/2-benchmark-serving/2-start-api-server.py
MODEL_TO_PARALLEL_PARAMS and evaluation/ae-scripts/e2e/_plot.py plot_fig8_upper): OPT-13B on
A100-SXM-80GB, ShareGPT, DistServe = one prefill instance at TP2 + one decode instance at TP1
(3 GPUs) vs vLLM at TP1 (1 GPU); SLOs TTFT 0.25 s and TPOT 0.1 s; goodput = the per-GPU rate at
90 % attainment of both.

Here: llama-2-13b (40 layers, hidden 5120, 40 heads, MHA: OPT-13B's attention and KV shape; its
gated MLP has 212M parameters a layer to OPT's 210M), a100-80gb, lengths from the built-in
`sharegpt` profile with DistServe's own filter (evaluation/2-benchmark-serving/0-prepare-dataset.py
drops prompt + output >= 2048, OPT-13B's context; Poisson arrivals), roofline cost model, NVLink between the instances (`bandwidth_gb_s: device`). Baselines:
colocated `vllm` (v0: prefill-prioritising, what DistServe compared with) and `sarathi`
(chunked prefill, chunk 512), each TP1 on one GPU.

Run from the repo root (under a CPU-minute each):
    .venv/bin/python benchmarks/bench_distserve.py 1000          # NUM_REQUESTS per trial
    .venv/bin/python benchmarks/bench_distserve.py 1000 256      # ... only outputs <= 256 tokens
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from experiments.config import SweepConfig
from experiments.planning.disaggregation import Layout, layout_capacity

SLO_S = {"ttft_s": 0.25, "tpot_s": 0.1}


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


def layouts() -> list[Layout]:
    return [
        Layout("colocated", point({"scheduler": "vllm", "max_num_seqs": 256}), 1),
        Layout("colocated", point({"scheduler": "sarathi", "chunk_size": 512, "max_num_seqs": 256}), 1),
        Layout("disaggregated", point({"scheduler": "vllm", "max_num_seqs": 256}, {
            "prefill": {"replicas": 1, "engine": {"tensor_parallel_size": 2}},
            "decode": {"replicas": 1}, "link": {"bandwidth_gb_s": "device"}}), 3),
    ]


def main(num_requests: int = 1000, max_output_tokens: int | None = None) -> None:
    write_trace(max_output_tokens)
    for layout in layouts():
        start = time.process_time()
        result = layout_capacity(layout, SLO_S, attainment=0.9, qps=(0.25, 4.0), num_requests=num_requests,
                                 precision=0.02, max_trials=20)
        name = layout.label if layout.kind == "disaggregated" else f"{layout.label} {layout.point.engine.scheduler}"
        print(f"{name}: {result.capacity_qps:.3f} req/s at 90 % attainment on {layout.gpus} GPU(s) -> "
              f"{result.capacity_qps / layout.gpus:.3f} req/s per GPU ({len(result.trials)} trials, "
              f"{time.process_time() - start:.0f} CPU-s)")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
