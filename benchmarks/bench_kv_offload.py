"""KV offload to host memory (engine.kv_offload): TTFT, hit rates, bytes moved and the
simulator's speed, on experiments/configs/kv_offload_sessions.yaml (200 conversations x 5
turns, llama-3-8b on one H100 SXM with a 4,096-block GPU pool) with no tier and CPU tiers of
the sizes given (GiB), and where offload stops paying: a block's load time over the host link
against its recompute time, per model.

Run from the repo root:
    .venv/bin/python benchmarks/bench_kv_offload.py                 # no tier, 50 and 200 GiB
    .venv/bin/python benchmarks/bench_kv_offload.py 0 2 10 50 200   # tier sizes (0: no tier)
    .venv/bin/python benchmarks/bench_kv_offload.py --per-token     # load vs recompute time per token
    .venv/bin/python benchmarks/bench_kv_offload.py --mooncake 0 50 200  # the Mooncake conversation trace

Speed is CPU seconds of `run_point` (process time: the machine may be shared), best of 2.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import yaml

from experiments.config import SweepConfig
from experiments.point import run_point

CONFIGS = Path(__file__).resolve().parents[1] / "experiments" / "configs"
CONFIG = CONFIGS / "kv_offload_sessions.yaml"
MOONCAKE = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"


def point(cpu_gib: float, cost_model: str = "auto", config: Path = CONFIG) -> SweepConfig:
    tree = yaml.safe_load(config.read_text())
    tree.pop("variants")
    if tree["trace"]["kind"] == "file":
        tree["trace"]["path"] = str(MOONCAKE)
    tree["cost_model"] = cost_model
    if cpu_gib:
        tree["engine"]["kv_offload"] = {"cpu_gib": cpu_gib}
    return SweepConfig.model_validate(tree)


def run(cpu_gib: float, config: Path = CONFIG, repeats: int = 2) -> None:
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        row = run_point(point(cpu_gib, config=config)).row
        best = min(best, time.process_time() - start)
    offload = (f" CPU hit {row['kv_offload_cpu_hit_rate']:.3f}, loaded {row['kv_offload_load_bytes'] / 1e9:.1f} GB, "
               f"stored {row['kv_offload_store_bytes'] / 1e9:.1f} GB, load wait mean {row['kv_load_wait_s_mean'] * 1e3:.2f} ms"
               f" P99 {row['kv_load_wait_s_p99'] * 1e3:.1f} ms" if cpu_gib else "")
    print(f"cpu_gib {cpu_gib:>5g}: TTFT P50 {row['ttft_s_p50'] * 1e3:7.1f} ms P99 {row['ttft_s_p99'] * 1e3:7.1f} ms, "
          f"GPU hit {row['prefix_cache_hit_rate']:.3f}, preemptions {row['num_preemptions']},{offload}; "
          f"{best:.2f} CPU-s", flush=True)


def per_token() -> None:
    """A prompt token's KV load time over the host link (one rank's shard at the device's
    host-link bandwidth) against its recompute time (a 2,048-token prefill chunk on an empty
    batch, the roofline's price per token), per model on one H100 SXM."""
    from experiments.deployment import DTYPE_BYTES
    from profiler import RooflineCostModel, get_device_spec, get_model_spec

    device = get_device_spec("h100-sxm")
    for name, tp in (("llama-3-8b", 1), ("qwen3-32b", 1), ("llama-3-70b", 4)):
        model = get_model_spec(name)
        load_s = model.kv_bytes_per_token(DTYPE_BYTES["bf16"], tp) / device.host_link_bandwidth_bytes_per_s
        cost = RooflineCostModel(model, device, tensor_parallel_size=tp)
        for context in (0, 8192, 32768):
            chunk_s = cost.predict_step_s([2048], [context], [True])
            print(f"{name} TP{tp} context {context:>5}: load {load_s * 1e6:.2f} us/token, recompute "
                  f"{chunk_s / 2048 * 1e6:.2f} us/token ({chunk_s / 2048 / load_s:.1f}x)")


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--per-token" in args:
        per_token()
    else:
        mooncake = "--mooncake" in args  # experiments/configs/kv_offload_mooncake.yaml, timed once
        sizes = [float(a) for a in args if a != "--mooncake"] or [0.0, 50.0, 200.0]
        for size in sizes:
            run(size, CONFIGS / "kv_offload_mooncake.yaml", 1) if mooncake else run(size)
