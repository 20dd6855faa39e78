"""Assemble an engine from settings: model (random or checkpoint), KV cache, scheduler, sampler."""
from __future__ import annotations

from pathlib import Path

import torch

from gpu_engine.attention import paged_attention_torch
from gpu_engine.checkpoint import load_weights
from gpu_engine.fp8_linear import quantize_linears_
from gpu_engine.engine import Engine
from gpu_engine.kv_cache import KVCache
from gpu_engine.model import Llama, ModelArgs
from gpu_engine.runner import ModelRunner
from gpu_engine.sampler import Sampler
from simulator.scheduler import SchedulerConfig, make_scheduler

DTYPES = {"float64": torch.float64, "float32": torch.float32, "bf16": torch.bfloat16,
          "bfloat16": torch.bfloat16, "float16": torch.float16}


def attention_fn(name: str, device: torch.device):
    """The paged-attention function called `name`: "torch", "triton" or "auto" (triton on CUDA).

    Raises:
        ValueError: an unknown name.
    """
    if name == "auto":
        name = "triton" if device.type == "cuda" else "torch"
    if name == "torch":
        return paged_attention_torch
    if name == "triton":
        from gpu_engine.triton_attention import paged_attention_triton
        return paged_attention_triton
    raise ValueError(f"unknown attention backend {name!r}; valid: auto, torch, triton")


def build_model(args: ModelArgs, *, dtype: torch.dtype, device: torch.device | str,
                checkpoint_dir: str | Path | None = None, seed: int = 0, attention: str = "auto") -> Llama:
    """A `Llama` in `dtype` on `device`: weights from `checkpoint_dir`, else seeded random ones.

    Parameters are allocated once, directly in `dtype` on `device` (built on the meta device
    first), so an 8B model in bf16 never needs a float32 copy.
    """
    device = torch.device(device)
    with torch.device("meta"):
        model = Llama(args, attention_fn(attention, device))
    model = model.to(dtype).to_empty(device=device)
    if args.spec.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    fmt = args.spec.quantization
    if fmt is not None and fmt.kernel not in ("fp8", "fp8_block"):
        raise ValueError(f"the engine runs FP8 weights only; {args.spec.name} is {fmt.label} ({fmt.source})")
    if checkpoint_dir is not None:
        if fmt is not None and fmt.source != "engine.quantization":
            raise ValueError(f"{checkpoint_dir}: loading a pre-quantised checkpoint ({fmt.label}) is not implemented; "
                             "give its BF16 checkpoint with engine.quantization: fp8, or run random weights")
        load_weights(model, checkpoint_dir)
    else:
        model.init_random_(seed)
    if fmt is not None:  # FP8 weights per output channel (gpu_engine/fp8_linear.py), also for 128x128-block checkpoints
        quantize_linears_(model)
    return model.eval()


def build_engine(model: Llama, scheduler_name: str, config: SchedulerConfig, *, temperature: float = 0.0,
                 forced_acceptance=None, seed: int = 0, max_kv_bytes: int | None = None) -> Engine:
    """An engine running `model` under the scheduler `scheduler_name` with `config`'s KV pool.

    Args:
        forced_acceptance: a `simulator.acceptance` model for forced acceptance; None verifies
            drafts greedily.
        seed: seeds sampling and prompt ids.
        max_kv_bytes: refuse a KV pool larger than this (None: no limit).

    Raises:
        ValueError: the KV pool exceeds `max_kv_bytes` (set engine.num_gpu_blocks), an unknown
            scheduler, or bad sampling settings.
    """
    dtype = model.embed_tokens.weight.dtype
    kv_bytes = KVCache.bytes_needed(model.args.spec, config.num_gpu_blocks, config.block_size, dtype)
    if max_kv_bytes is not None and kv_bytes > max_kv_bytes:
        raise ValueError(f"a KV pool of {config.num_gpu_blocks} blocks of {config.block_size} tokens takes "
                         f"{kv_bytes / 2**30:.2f} GiB, over the {max_kv_bytes / 2**30:.2f} GiB allowed; "
                         "set engine.num_gpu_blocks")
    runner = ModelRunner(model, config.num_gpu_blocks, config.block_size)
    return Engine(make_scheduler(scheduler_name, config), runner, sampler=Sampler(temperature, seed),
                  forced_acceptance=forced_acceptance, prompt_seed=seed)
