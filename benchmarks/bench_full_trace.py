"""Simulator speed on the full Azure conv trace (19,366 requests): requests per CPU-second and
peak memory, llama-3-8b on h100-sxm, sarathi chunk 512, time-scaled to a given QPS.

Run from the repo root (needs ../shared/traces):
    .venv/bin/python benchmarks/bench_full_trace.py 9     # ~50 % of capacity (~18 QPS)
    .venv/bin/python benchmarks/bench_full_trace.py 16    # ~90 %
    .venv/bin/python benchmarks/bench_full_trace.py 9 vllm_v1 on    # vllm_v1, prefix caching on | off
    .venv/bin/python benchmarks/bench_full_trace.py 16 vllm_v1 on 3000    # ... with a 3,000-block KV pool
"""
from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

from experiments.config import FileTrace, SweepConfig
from experiments.point import run_point

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "azure_public_dataset" / "AzureLLMInferenceTrace_conv.csv"


def main(qps: float, scheduler: str = "sarathi", caching: str | None = None, num_gpu_blocks: str | None = None) -> None:
    engine = {"scheduler": scheduler, "chunk_size": 512}
    if num_gpu_blocks is not None:
        engine["num_gpu_blocks"] = int(num_gpu_blocks)
    if caching is not None:
        engine["enable_prefix_caching"] = caching == "on"
    config = SweepConfig(trace=FileTrace(kind="file", path=str(TRACE), qps=qps), engine=engine)
    start = time.process_time()
    row = run_point(config).row
    cpu_s = time.process_time() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{scheduler} {caching or ''} qps {qps:g}: {row['num_requests']} requests, {row['num_steps']} steps, {cpu_s:.1f} CPU-s -> "
          f"{row['num_requests'] / cpu_s:,.0f} requests/CPU-s, {cpu_s / row['num_steps'] * 1e6:.0f} us/step, "
          f"peak RSS {peak_mb:.0f} MB, {row['num_preemptions']} preemptions, "
          f"prefix-cache hit rate {row.get('prefix_cache_hit_rate', float('nan')):.4f}, "
          f"recomputed {row['recomputed_tokens']:,} tokens, hit on resumption {row.get('preempted_cache_hits_tokens', 0):,}, "
          f"P50 TTFT {row['ttft_s_p50']:.3f} s")


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 9.0, *sys.argv[2:5])
