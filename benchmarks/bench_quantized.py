"""Quantised serving (issue 32): held-out error of the FP8 kernel tables, Llama-3.1-70B FP8 closed-loop
TTFT / TPOT at TP 2/4/8 on h100-sxm and h200, and what an FP8 KV cache does to the pool.

Run from the repo root (results go in BENCHMARKS.md with this command; needs ../shared/profiles):
    .venv/bin/python benchmarks/bench_quantized.py [heldout] [grid] [kv]

1. Every interior point of AIConfigurator's `gemm_fp8`, `gemm_fp8_block` and FP8-KV attention
   tables left out in turn and predicted from its neighbours along each axis
   (`profiler.measured.heldout`, as bench_measured.py does for bf16): MAPE per table.
2. `llama-3.1-70b-fp8` (W8A8 FP8, the `gemm_fp8` rows), vllm_v1 with vLLM 0.19's defaults for an
   80 GB-class card (max_num_batched_tokens 8192, max_num_seqs 1024 → graph capture to 512
   tokens), closed loop of C clients, no think time, fixed ISL/OSL, 4·C requests (at least 64),
   `cost_model: auto`: mean TTFT and mean TPOT per point.
3. The KV pool (tokens per replica) with a BF16 and an FP8 KV cache, and closed-loop throughput,
   preemptions and KV usage at 8192/1024 as the clients grow.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from bench_measured import _row  # benchmarks/ is on sys.path when this file runs as a script
from experiments.config import SweepConfig
from experiments.deployment import build_scheduler_config
from experiments.point import run_point
from profiler.importers.aiconfigurator import import_aiconfigurator
from profiler.measured.grid import LogGrid
from profiler.measured.heldout import heldout_errors, heldout_errors_by_class
from profiler.measured.table_grids import SCALE_TMA_ALIGNMENT_ROWS

PROFILES = Path(__file__).resolve().parents[2] / "shared" / "profiles"
SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm", "rtx_pro_6000_server", "l40s")
TPS = (2, 4, 8)
DEVICES = ("h100-sxm", "h200")
CLIENTS = (4, 8, 16, 32, 64)
LENGTHS = ((1024, 1024), (8192, 1024))


def heldout_section() -> None:
    print("## FP8 tables: held-out error (leave-one-out along each axis, MAPE)\n")
    print("| source | table | axes: MAPE (points) | all |\n|---|---|---|---|")
    for system in SYSTEMS:
        tables = import_aiconfigurator(PROFILES / "aiconfigurator" / system)
        label = f"AIC {system} {tables.meta['engine_version']}"
        for name in ("gemm_fp8", "gemm_fp8_block"):
            if name in tables.tables:
                _row(label, name, heldout_errors(LogGrid.from_frame(tables.tables[name], ["m", "n", "k"])), ["m", "n", "k"])
        if "gemm_fp8_block" in tables.tables:  # as the cost model reads it: within m's alignment class
            rows = tables.tables["gemm_fp8_block"]
            _row(label, "gemm_fp8_block (by m class)",
                 heldout_errors_by_class(rows, ["m", "n", "k"], rows["m"] % SCALE_TMA_ALIGNMENT_ROWS == 0), ["m", "n", "k"])
        for name, key in (("context_attention_fp8_kv", "query_tokens"), ("decode_attention_fp8_kv", "kv_tokens")):
            if name not in tables.tables:
                continue
            errs = {0: [], 1: []}
            for _, rows in tables.tables[name].groupby(["num_heads", "num_kv_heads", "head_dim"]):
                if rows["batch_size"].nunique() < 2 or rows[key].nunique() < 2:
                    continue
                for axis, e in heldout_errors(LogGrid.from_frame(rows, ["batch_size", key])).items():
                    errs[axis].append(e)
            _row(label, name, {a: np.concatenate(v) if v else np.array([]) for a, v in errs.items()}, ["batch", key])
    print()


def point(model: str, device: str, tp: int, clients: int, isl: int, osl: int, kv_cache_dtype: str = "bf16") -> SweepConfig:
    return SweepConfig.model_validate({
        "name": "fp8", "model": model, "device": device, "cost_model": "auto",
        "trace": {"kind": "closed_loop", "clients": clients, "think_time_s": 0.0, "num_requests": max(4 * clients, 64),
                  "prompt_tokens": isl, "output_tokens": osl, "seed": 0},
        "engine": {"scheduler": "vllm_v1", "chunk_size": 8192, "max_num_seqs": 1024, "tensor_parallel_size": tp,
                   "kv_cache_dtype": kv_cache_dtype}})


def grid_section() -> None:
    print("## Llama-3.1-70B FP8, closed loop: mean TTFT / mean TPOT (ms)\n")
    print("| device | TP | ISL/OSL | " + " | ".join(f"C={c}" for c in CLIENTS) + " |")
    print("|---|---|---|" + "---|" * len(CLIENTS))
    start = time.process_time()
    for device in DEVICES:
        for tp in TPS:
            for isl, osl in LENGTHS:
                cells = []
                for clients in CLIENTS:
                    row = run_point(point("llama-3.1-70b-fp8", device, tp, clients, isl, osl)).row
                    cells.append(f"{1e3 * row['ttft_s_mean']:.0f} / {1e3 * row['tpot_s_mean']:.1f}")
                print(f"| {device} | {tp} | {isl}/{osl} | " + " | ".join(cells) + " |")
    print(f"\n({time.process_time() - start:.0f} CPU-s; label: {row['cost_model_label']})\n")


def kv_section() -> None:
    print("## FP8 KV cache: pool and saturation (llama-3.1-70b-fp8, h100-sxm TP 2, 8192/1024)\n")
    for kv in ("bf16", "fp8"):
        config = build_scheduler_config(point("llama-3.1-70b-fp8", "h100-sxm", 2, 4, 8192, 1024, kv))
        tokens = config.num_gpu_blocks * config.block_size
        print(f"- kv_cache_dtype {kv}: {config.num_gpu_blocks:,} blocks = {tokens:,} tokens "
              f"({tokens / 9216:.1f} requests of 8192 + 1024 tokens)")
    print("\n| clients | KV | output tok/s | mean TPOT ms | mean TTFT ms | preemptions | KV usage max |\n|---|---|---|---|---|---|---|")
    for clients in (16, 24, 32, 48, 64):
        for kv in ("bf16", "fp8"):
            row = run_point(point("llama-3.1-70b-fp8", "h100-sxm", 2, clients, 8192, 1024, kv)).row
            print(f"| {clients} | {kv} | {row['output_throughput_tps']:,.0f} | {1e3 * row['tpot_s_mean']:.1f} | "
                  f"{1e3 * row['ttft_s_mean']:.0f} | {row['num_preemptions']} | {row['kv_usage_max']:.2f} |")
    print()


if __name__ == "__main__":
    sections = sys.argv[1:] or ["heldout", "grid", "kv"]
    for name in sections:
        {"heldout": heldout_section, "grid": grid_section, "kv": kv_section}[name]()
