"""Simulator speed of prefill/decode disaggregation against colocated replicas: requests per
CPU-second of the same 8-GPU deployment of llama-3-8b on h100-sxm (roofline), 20,000 requests of
the built-in azure-conv profile: 8 colocated sarathi replicas (chunk 512) vs 4P4D (sarathi,
prefill chunk 2048, decode chunk 512, 50 GB/s link).

Run from the repo root:
    .venv/bin/python benchmarks/bench_disaggregated.py            # 40 QPS
    .venv/bin/python benchmarks/bench_disaggregated.py 80 20000   # QPS, requests
"""
from __future__ import annotations

import sys
import time

from experiments.config import SweepConfig
from experiments.point import run_point


def config(qps: float, num_requests: int, cluster: bool) -> SweepConfig:
    tree = {"model": "llama-3-8b", "device": "h100-sxm", "cost_model": "roofline",
            "trace": {"kind": "profile", "name": "azure-conv", "qps": qps, "num_requests": num_requests, "seed": 0},
            "engine": {"scheduler": "sarathi", "chunk_size": 512}}
    if cluster:
        tree["cluster"] = {"prefill": {"replicas": 4, "engine": {"chunk_size": 2048}}, "decode": {"replicas": 4},
                           "link": {"bandwidth_gb_s": 50, "latency_s": 0.0001}}
    else:
        tree["engine"].update(replicas=8, router="least_outstanding")
    return SweepConfig.model_validate(tree)


def main(qps: float = 40.0, num_requests: int = 20_000) -> None:
    for name, cluster in (("colocated 8x", False), ("4P4D", True)):
        point = config(qps, num_requests, cluster)
        start = time.process_time()
        row = run_point(point).row
        cpu_s = time.process_time() - start
        print(f"{name}: {row['num_requests']} requests, {row['num_steps']} steps, {cpu_s:.1f} CPU-s -> "
              f"{row['num_requests'] / cpu_s:,.0f} requests/CPU-s; P50 TTFT {row['ttft_s_p50']:.3f} s, "
              f"P50 TPOT {row['tpot_s_p50'] * 1e3:.1f} ms, P99 TBT {row['tbt_s_p99'] * 1e3:.1f} ms")


if __name__ == "__main__":
    main(*(float(a) if i == 0 else int(a) for i, a in enumerate(sys.argv[1:3])))
