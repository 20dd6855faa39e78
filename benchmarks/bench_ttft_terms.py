"""TTFT in units of the mean ITL, unqueued, as the simulator builds it term by term (issue 27).

Held-back real vLLM V1 runs (issue 27: vLLM 0.15, H100 / A100 / L40S, 7B-141B, TP 1-8) show client TTFT
≈ 3.15 × ITL at loads that rarely queue; the simulator gave 1.54 × before async scheduling and the
front end. This prints, for a few shipped model × device points at a light constant-rate load, the P50
TTFT / mean ITL with: a synchronous engine and no front end (the old model), async scheduling, and
async scheduling behind the default front end; plus the mean terms of that last TTFT. The load mimics
the held-back runs' client (a finite prompt list cycled, so most of each prompt is a prefix-cache hit):
a 1,000-token system prompt shared by all, 50-150 tokens of the request's own, 150-250 output tokens, 2
requests/s Poisson. Nothing here is fitted to any run.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_ttft_terms.py
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

POINTS = [("llama-3-8b", "h100-sxm", 1), ("qwen3-32b", "h100-sxm", 2), ("llama-3-70b", "h100-sxm", 4),
          ("llama-3-8b", "a100-80gb", 1)]
VARIANTS = {"sync, no front end": ["engine.async_scheduling=false", "frontend.enabled=false"],
            "async, no front end": ["frontend.enabled=false"],
            "async + front end": []}


def run(model: str, device: str, tp: int, overrides: list[str]):
    from experiments.config import SweepConfig, load_config
    from experiments.point import run_point

    config = {"model": model, "device": device, "cost_model": "auto",
              "trace": {"kind": "poisson", "qps": 2.0, "num_requests": 300, "prompt_tokens": [50, 150],
                        "output_tokens": [150, 250], "shared_prefix_tokens": 1000, "seed": 0},
              "engine": {"scheduler": "vllm_v1", "chunk_size": 8192, "max_num_seqs": 256,
                         "tensor_parallel_size": tp}}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "p.yaml"
        path.write_text(yaml.safe_dump(config))
        _, points = load_config(path, overrides, on_warning=lambda text: None)
    return run_point(SweepConfig.model_validate(points[0]))


def main() -> None:
    for model, device, tp in POINTS:
        cells = []
        for label, overrides in VARIANTS.items():
            result = run(model, device, tp, overrides)
            r, row = result.requests, result.row
            ratio = row["ttft_s_p50"] / row["itl_s_mean"]
            cells.append(f"{label} {ratio:.2f}")
        terms = {name: r[name].mean() * 1e3 for name in
                 ("frontend_in_s", "queue_s", "engine_first_token_s", "frontend_out_s", "ttft_s")}
        print(f"| {model} TP{tp} on {device} | ITL {row['itl_s_mean'] * 1e3:.1f} ms | " + " | ".join(cells)
              + " | " + ", ".join(f"{k[:-2]} {v:.1f}" for k, v in terms.items()) + " ms |", flush=True)


if __name__ == "__main__":
    main()
