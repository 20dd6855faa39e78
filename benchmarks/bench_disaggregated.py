"""Simulator speed of prefill/decode disaggregation against colocated replicas: requests per
CPU-second of the same deployment of llama-3-8b on h100-sxm (roofline).

Open loop (the default): 20,000 requests of the built-in azure-conv profile on 8 GPUs, 8
colocated sarathi replicas (chunk 512) vs 4P4D (sarathi, prefill chunk 2048, decode chunk 512,
50 GB/s link). `sessions`: the closed loop of experiments/configs/sessions_routing.yaml (200
conversations x 5 turns, vllm_v1 with prefix caching) on 4 GPUs, 4 colocated replicas with
session affinity vs 2P2D (session affinity in the prefill pool, so a turn finds its
conversation's KV cached there).

Run from the repo root:
    .venv/bin/python benchmarks/bench_disaggregated.py            # 40 QPS
    .venv/bin/python benchmarks/bench_disaggregated.py 80 20000   # QPS, requests
    .venv/bin/python benchmarks/bench_disaggregated.py sessions
"""
from __future__ import annotations

import sys
import time

from experiments.config import SweepConfig
from experiments.point import run_point

MODEL = {"model": "llama-3-8b", "device": "h100-sxm", "cost_model": "roofline"}
LINK = {"bandwidth_gb_s": 50, "latency_s": 0.0001}


def config(qps: float, num_requests: int, cluster: bool) -> SweepConfig:
    tree = {**MODEL, "trace": {"kind": "profile", "name": "azure-conv", "qps": qps, "num_requests": num_requests,
                               "seed": 0},
            "engine": {"scheduler": "sarathi", "chunk_size": 512}}
    if cluster:
        tree["cluster"] = {"prefill": {"replicas": 4, "engine": {"chunk_size": 2048}}, "decode": {"replicas": 4},
                           "link": LINK}
    else:
        tree["engine"].update(replicas=8, router="least_outstanding")
    return SweepConfig.model_validate(tree)


def sessions_config(cluster: bool) -> SweepConfig:
    """sessions_routing.yaml's trace and engine, on 4 GPUs."""
    tree = {**MODEL, "trace": {"kind": "sessions", "clients": 200, "turns": 5, "session_qps": 10.0,
                               "think_time_s": 2.0, "shared_prefix_tokens": 512, "num_prefixes": 4,
                               "prompt_tokens": {"dist": "lognormal", "mean": 400, "std": 300, "min": 16, "max": 2048},
                               "output_tokens": {"dist": "lognormal", "mean": 250, "std": 150, "min": 16, "max": 1024},
                               "seed": 0},
            "engine": {"scheduler": "vllm_v1", "chunk_size": 2048, "max_num_seqs": 128}}
    if cluster:
        tree["cluster"] = {"prefill": {"replicas": 2, "router": "session_affinity"},
                           "decode": {"replicas": 2}, "link": LINK}
    else:
        tree["engine"].update(replicas=4, router="session_affinity")
    return SweepConfig.model_validate(tree)


def measure(name: str, point: SweepConfig) -> None:
    start = time.process_time()
    row = run_point(point).row
    cpu_s = time.process_time() - start
    print(f"{name}: {row['num_requests']} requests, {row['num_steps']} steps, {cpu_s:.1f} CPU-s -> "
          f"{row['num_requests'] / cpu_s:,.0f} requests/CPU-s; {row['throughput_rps']:.2f} req/s served; "
          f"P50 TTFT {row['ttft_s_p50']:.3f} s, P50 TPOT {row['tpot_s_p50'] * 1e3:.1f} ms, "
          f"P99 TBT {row['tbt_s_p99'] * 1e3:.1f} ms; prefix-cache hit {row.get('prefix_cache_hit_rate', float('nan')):.3f}")


def main(qps: float = 40.0, num_requests: int = 20_000) -> None:
    for name, cluster in (("colocated 8x", False), ("4P4D", True)):
        measure(name, config(qps, num_requests, cluster))


if __name__ == "__main__":
    if sys.argv[1:2] == ["sessions"]:
        for label, cluster in (("colocated 4x, session affinity", False), ("2P2D, session affinity", True)):
            measure(label, sessions_config(cluster))
    else:
        main(*(float(a) if i == 0 else int(a) for i, a in enumerate(sys.argv[1:3])))
