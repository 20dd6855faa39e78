"""Replica-level scheduler settings: plain values, validated by experiments/config.py."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Knobs shared by the schedulers (defaults as Sarathi-Serve, REFERENCE.md §1.2).

    Attributes:
        num_gpu_blocks: KV pool size in blocks (from `profiler.kv_pool_blocks` or an override).
        block_size: tokens per KV block.
        max_model_len: longest prompt + output a request may have.
        max_num_seqs: cap on running sequences (batch size).
        chunk_size: per-step token budget of chunking schedulers (sarathi); None otherwise.
        max_num_batched_tokens: per-step token budget of non-chunking schedulers (vllm v0);
            None means max_model_len (Sarathi-Serve's default).
        watermark_fraction: share of the pool kept free at admission (1 %).
    """

    num_gpu_blocks: int
    block_size: int = 16
    max_model_len: int = 8192
    max_num_seqs: int = 128
    chunk_size: int | None = None
    max_num_batched_tokens: int | None = None
    watermark_fraction: float = 0.01
