"""Sliding-window attention (issue 33): what windowed layers save in long-context decode, and where
gpt-oss-120b's time goes on one H100.

Run from the repo root (results go in BENCHMARKS.md with this command):
    .venv/bin/python benchmarks/bench_windowed.py [attention] [closed] [share]

1. attention: one decode step of B sequences at context C, gpt-oss-120b and gemma-3-27b on their
   cards, with their windowed layers against the same model with every layer full (roofline):
   attention seconds and step seconds.
2. closed: gpt-oss-120b on one h100-sxm, vllm_v1 with vLLM 0.19's defaults, closed loop of C
   clients with 32,768-token prompts and 1,024-token outputs: the model as it is against the same
   model with full attention in every layer (its config.json with layer_types all full): KV pool
   (tokens of every layer), mean TPOT, output tokens/s, preemptions, and the share of GPU time in
   attention (summed `breakdown` attention over the summed step time of every priced step).
3. share: the share of GPU time in attention and the KV pool at the issue's targets' sweep points
   (benchmarks/sweep_gpt_oss_120b.yaml at chunk 8192; benchmarks/capacity_deepseek_v3.yaml's TP 8
   point at 8 QPS), and deepseek-v3's decode attention per step (TP 8, h200) by context.
"""
from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import experiments.point as point_module
from experiments.config import SweepConfig
from experiments.deployment import build_scheduler_config
from profiler import get_device_spec, get_model_spec
from profiler.roofline import RooflineCostModel

CONTEXTS = (4096, 32768, 100_000)
BATCHES = (1, 32)
CLIENTS = (1, 2, 3, 4, 8)


def attention_section() -> None:
    print("## One decode step: windowed layers against all layers full (roofline)\n")
    print("| model | device | batch | context | attention ms (windowed / full) | step ms (windowed / full) | step saved |")
    print("|---|---|---|---|---|---|---|")
    for name, device in (("gpt-oss-120b", "h100-sxm"), ("gemma-3-27b", "h200")):
        model = get_model_spec(name)
        full = dataclasses.replace(model, sliding_window=0, num_sliding_layers=0)
        costs = [RooflineCostModel(m, get_device_spec(device)) for m in (model, full)]
        for batch in BATCHES:
            for context in CONTEXTS:
                q, c, p = np.ones(batch, dtype=int), np.full(batch, context), np.zeros(batch, dtype=bool)
                att = [cost.breakdown(q, c, p)["attention_decode_s"] for cost in costs]
                step = [cost.predict_step_s(q, c, p) for cost in costs]
                print(f"| {name} | {device} | {batch} | {context:,} | {1e3 * att[0]:.3f} / {1e3 * att[1]:.3f} | "
                      f"{1e3 * step[0]:.3f} / {1e3 * step[1]:.3f} | {100 * (1 - step[0] / step[1]):.0f} % |")
    print("\n(attention and the dense parts only: gpt-oss's MoE experts are priced by profiler/moe_cost.py and "
          "add the same time to both)\n")


class AttentionShare:
    """A cost model that also sums the attention seconds of every step it prices (its roofline
    base's `breakdown`), for the share of GPU time in attention."""

    def __init__(self, inner):
        self.inner, self.attention_s, self.total_s = inner, 0.0, 0.0
        self._base = getattr(inner, "base", inner)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def predict_step_s(self, query_tokens, context_tokens, is_prefill) -> float:
        seconds = self.inner.predict_step_s(query_tokens, context_tokens, is_prefill)
        if len(query_tokens):
            parts = self._base.breakdown(np.asarray(query_tokens), np.asarray(context_tokens), np.asarray(is_prefill))
            self.attention_s += parts["attention_prefill_s"] + parts["attention_decode_s"]
            self.total_s += seconds
        return seconds


def full_attention_config(directory: Path) -> Path:
    """gpt-oss-120b's config.json (tests/test_sliding_window.py's copy) with every layer full."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.test_sliding_window import GPT_OSS_120B

    (directory / "config.json").write_text(json.dumps({**GPT_OSS_120B, "layer_types": ["full_attention"] * 36}))
    return directory


def closed_point(model: str, clients: int) -> SweepConfig:
    return SweepConfig.model_validate({
        "name": "windowed", "model": model, "device": "h100-sxm", "cost_model": "auto",
        "trace": {"kind": "closed_loop", "clients": clients, "think_time_s": 0.0, "num_requests": 4 * clients,
                  "prompt_tokens": 32768, "output_tokens": 1024, "seed": 0},
        "engine": {"scheduler": "vllm_v1", "enable_prefix_caching": False}})


def closed_section() -> None:
    print("## gpt-oss-120b on one h100-sxm, closed loop, 32,768 / 1,024 tokens\n")
    with tempfile.TemporaryDirectory() as tmp:
        variants = (("windowed (as shipped)", "gpt-oss-120b"), ("all layers full", str(full_attention_config(Path(tmp)))))
        for label, model in variants:
            config = build_scheduler_config(closed_point(model, 4))
            print(f"- {label}: KV pool {config.num_gpu_blocks:,} blocks of {config.block_size} tokens "
                  f"(kv_groups {config.kv_groups})")
        print("\n| clients | attention | output tok/s | mean TPOT ms | mean TTFT s | preemptions | KV usage max | attention share |")
        print("|---|---|---|---|---|---|---|---|")
        original = point_module.build_cost_model
        start = time.process_time()
        try:
            for clients in CLIENTS:
                for label, model in variants:
                    shares = []
                    point_module.build_cost_model = lambda p: shares.append(AttentionShare(original(p))) or shares[-1]
                    row = point_module.run_point(closed_point(model, clients)).row
                    share = shares[-1].attention_s / shares[-1].total_s
                    print(f"| {clients} | {label} | {row['output_throughput_tps']:,.0f} | {1e3 * row['tpot_s_mean']:.1f} | "
                          f"{row['ttft_s_mean']:.2f} | {row['num_preemptions']} | {row['kv_usage_max']:.2f} | "
                          f"{100 * share:.0f} % |")
        finally:
            point_module.build_cost_model = original
        print(f"\n({time.process_time() - start:.0f} CPU-s; label: {row['cost_model_label']})\n")


def share_point(model: str, device: str, tp: int) -> SweepConfig:
    return SweepConfig.model_validate({
        "name": "share", "model": model, "device": device, "cost_model": "auto",
        "trace": {"kind": "profile", "name": "azure-conv", "qps": 8, "num_requests": 2048, "seed": 0},
        "engine": {"scheduler": "vllm_v1", "chunk_size": 8192, "tensor_parallel_size": tp,
                   "enable_prefix_caching": False}})


def share_section() -> None:
    print("## Attention share and KV pool at the targets' sweep points (azure-conv, 8 QPS, 2,048 requests)\n")
    print("| model | device | TP | KV pool blocks (tokens) | req/s | TPOT P50 ms | attention share |\n|---|---|---|---|---|---|---|")
    original = point_module.build_cost_model
    try:
        for model, device, tp in (("gpt-oss-120b", "h100-sxm", 1), ("deepseek-v3", "h200", 8)):
            point = share_point(model, device, tp)
            config = build_scheduler_config(point)
            shares = []
            point_module.build_cost_model = lambda p: shares.append(AttentionShare(original(p))) or shares[-1]
            row = point_module.run_point(point).row
            groups = config.kv_groups
            tokens = config.num_gpu_blocks * config.block_size // (1 + (groups[1] if groups else 0))
            print(f"| {model} | {device} | {tp} | {config.num_gpu_blocks:,} ({tokens:,} tokens in the full-attention layers) | "
                  f"{row['throughput_rps']:.2f} | {1e3 * row['tpot_s_p50']:.1f} | "
                  f"{100 * shares[-1].attention_s / shares[-1].total_s:.1f} % |")
    finally:
        point_module.build_cost_model = original
    model, device = get_model_spec("deepseek-v3"), get_device_spec("h200")
    cost = RooflineCostModel(model, device, tensor_parallel_size=8)
    print("\ndeepseek-v3, TP 8 on h200, one decode step of 32 sequences (roofline; MoE excluded):\n")
    print("| context | attention ms | dense-part step ms |\n|---|---|---|")
    for context in CONTEXTS:
        q, c, p = np.ones(32, dtype=int), np.full(32, context), np.zeros(32, dtype=bool)
        print(f"| {context:,} | {1e3 * cost.breakdown(q, c, p)['attention_decode_s']:.3f} | "
              f"{1e3 * cost.predict_step_s(q, c, p):.3f} |")
    print()


if __name__ == "__main__":
    for section in sys.argv[1:] or ["attention", "closed", "share"]:
        {"attention": attention_section, "closed": closed_section, "share": share_section}[section]()
