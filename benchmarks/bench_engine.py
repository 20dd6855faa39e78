"""Engine speed: steps per second of the tiny CPU model, and (on a GPU) decode step time for
llama-3-8b shapes against the HBM roofline and transformers' generate.

Run from the repo root (results go in BENCHMARKS.md with these commands):
    .venv/bin/python benchmarks/bench_engine.py                 # CPU: tiny model
    .venv/bin/python benchmarks/bench_engine.py --gpu           # CUDA: llama-3-8b shapes, random bf16 weights
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from gpu_engine.build import build_engine, build_model
from gpu_engine.checkpoint import load_model_args
from gpu_engine.clock import FastClock
from gpu_engine.driver import run_trace
from gpu_engine.inputs import SequenceWork
from gpu_engine.model import ModelArgs
from gpu_engine.runner import ModelRunner, cpu_threads
from profiler import get_device_spec, get_model_spec
from simulator.scheduler import SchedulerConfig
from traces import Request

TINY = Path(__file__).resolve().parents[1] / "tests" / "data" / "engine" / "tiny"


def step_time_s(runner: ModelRunner, work: list[SequenceWork], repeats: int, sync, clock=time.perf_counter) -> float:
    """Median seconds of one forward + argmax over `work` (after 3 warm-up steps), on `clock`."""
    times = []
    for i in range(repeats + 3):
        sync()
        start = clock()
        runner.run(work).argmax(-1).tolist()
        sync()
        if i >= 3:
            times.append(clock() - start)
    return statistics.median(times)


def decode_work(batch: int, context: int, block_size: int) -> list[SequenceWork]:
    """`batch` decodes over `context` cached tokens each, on disjoint contiguous blocks."""
    per_seq = -(-(context + 1) // block_size)
    return [SequenceWork(i, [1], context, list(range(i * per_seq, (i + 1) * per_seq)), 1) for i in range(batch)]


def cpu_benchmarks() -> None:
    args = load_model_args(TINY)
    with cpu_threads(1):
        model = build_model(args, dtype=torch.float32, device="cpu", seed=0, attention="torch")
        runner = ModelRunner(model, 1024, 16)
        for batch in (1, 8, 32):
            s = step_time_s(runner, decode_work(batch, 128, 16), 50, lambda: None, time.process_time)
            print(f"tiny model, CPU, 1 thread: decode batch {batch:2d} over 128 cached tokens: "
                  f"{s * 1e3:.2f} CPU-ms/step -> {1 / s:,.0f} steps/CPU-s")
        mixed = decode_work(8, 128, 16) + [SequenceWork(99, [1] * 120, 0, list(range(900, 908)), 1)]
        s = step_time_s(runner, mixed, 50, lambda: None, time.process_time)
        print(f"tiny model, CPU, 1 thread: 8 decodes + a 120-token prefill chunk: {s * 1e3:.2f} CPU-ms/step "
              f"-> {1 / s:,.0f} steps/CPU-s")
        # End to end: scheduler + engine + records, as `sarathi-sim engine run --fast` drives them.
        config = SchedulerConfig(num_gpu_blocks=256, block_size=16, max_model_len=256, max_num_seqs=32, chunk_size=256)
        requests = [Request(i, 0.0, 64 + (37 * i) % 128, 16 + (11 * i) % 48) for i in range(128)]
        engine = build_engine(model, "sarathi", config)
        start = time.process_time()
        run = run_trace(engine, requests, FastClock())
        cpu_s = time.process_time() - start
        print(f"tiny model, CPU, 1 thread: 128 requests end to end (sarathi chunk 256, max 32 seqs): "
              f"{len(run.steps)} steps in {cpu_s:.2f} CPU-s -> {len(run.steps) / cpu_s:,.0f} steps/CPU-s, "
              f"{run.requests['generated_tokens'].sum() / cpu_s:,.0f} output tokens/CPU-s")


def gpu_benchmarks(batches=(1, 16, 64), context: int = 1024, compare_hf: bool = True) -> None:
    spec = get_model_spec("llama-3-8b")
    device = get_device_spec("h200")
    sync = torch.cuda.synchronize
    model = build_model(ModelArgs.for_builtin(spec), dtype=torch.bfloat16, device="cuda", seed=0, attention="triton")
    block_size = 16
    runner = ModelRunner(model, max(batches) * (-(-(context + 1) // block_size)), block_size)
    for batch in batches:
        s = step_time_s(runner, decode_work(batch, context, block_size), 20, sync)
        roofline_s = (spec.weight_bytes(2) + batch * context * spec.kv_bytes_per_token(2)) / device.mem_bandwidth_bytes_per_s
        line = (f"llama-3-8b bf16 on {torch.cuda.get_device_name()}: decode batch {batch:2d} over {context} tokens: "
                f"{s * 1e3:.2f} ms/step, HBM roofline {roofline_s * 1e3:.2f} ms ({s / roofline_s:.2f}x)")
        if compare_hf:
            line += f", transformers generate {hf_decode_step_s(batch, context) * 1e3:.2f} ms/step"
        print(line, flush=True)


def hf_decode_step_s(batch: int, context: int, new_tokens: int = 32) -> float:
    """transformers' generate: (time for 1 + new_tokens tokens − time for 1 token) / new_tokens."""
    import transformers

    spec = get_model_spec("llama-3-8b")
    config = transformers.LlamaConfig(
        hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size, num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_attention_heads, num_key_value_heads=spec.num_key_value_heads,
        vocab_size=spec.vocab_size, max_position_embeddings=spec.max_model_len, rope_theta=500000.0)
    global _HF_MODEL
    if _HF_MODEL is None:
        _HF_MODEL = transformers.LlamaForCausalLM(config).to(device="cuda", dtype=torch.bfloat16).eval()
    ids = torch.randint(0, spec.vocab_size, (batch, context), device="cuda")

    def timed(n: int) -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        _HF_MODEL.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                           do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        return time.perf_counter() - start

    timed(2)  # warm-up
    return (timed(1 + new_tokens) - timed(1)) / new_tokens


_HF_MODEL = None

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="llama-3-8b shapes on CUDA instead of the tiny CPU model")
    parser.add_argument("--no-hf", action="store_true", help="skip the transformers generate comparison")
    options = parser.parse_args()
    if options.gpu:
        gpu_benchmarks(compare_hf=not options.no_hf)
    else:
        cpu_benchmarks()
