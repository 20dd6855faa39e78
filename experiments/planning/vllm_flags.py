"""The `vllm serve` flags that reproduce a simulated point (REFERENCE.md §2.2, §2.3)."""
from __future__ import annotations

import json
import shlex

from experiments.config import CHUNKING_SCHEDULERS, DraftModel, SweepConfig


def vllm_serve_flags(point: SweepConfig) -> str:
    """Command-line flags for `vllm serve MODEL` matching the point's engine settings.

    Chunking schedulers map `chunk_size` to `--max-num-batched-tokens` with chunked prefill on;
    non-chunking ones to `--max-num-batched-tokens` = their budget with chunked prefill off.
    Split-N maps to `--speculative-config` (`ngram`, or `draft_model` with the draft's name).
    vLLM's own policy is v1's; a point simulated under another scheduler shares only its flags.
    """
    e = point.engine
    flags: list[str] = []
    if e.scheduler in CHUNKING_SCHEDULERS:
        flags += ["--enable-chunked-prefill", "--max-num-batched-tokens", str(e.chunk_size)]
    else:
        flags += ["--no-enable-chunked-prefill"]
        if e.max_num_batched_tokens:
            flags += ["--max-num-batched-tokens", str(e.max_num_batched_tokens)]
    if e.long_prefill_token_threshold:
        flags += ["--long-prefill-token-threshold", str(e.long_prefill_token_threshold)]
    flags += ["--max-num-seqs", str(e.max_num_seqs), "--block-size", str(e.block_size),
              "--gpu-memory-utilization", f"{e.gpu_memory_utilization:g}"]
    if e.max_model_len:
        flags += ["--max-model-len", str(e.max_model_len)]
    if e.tensor_parallel_size > 1:
        flags += ["--tensor-parallel-size", str(e.tensor_parallel_size)]
    if e.pipeline_parallel_size > 1:
        flags += ["--pipeline-parallel-size", str(e.pipeline_parallel_size)]
    if e.kv_cache_dtype == "fp8":
        flags += ["--kv-cache-dtype", "fp8"]
    if e.policy == "priority":
        flags += ["--scheduling-policy", "priority"]
    if e.split_n:
        spec = {"method": "ngram", "num_speculative_tokens": e.split_n}
        if isinstance(e.draft, DraftModel):
            spec = {"method": "draft_model", "model": e.draft.model, "num_speculative_tokens": e.split_n}
        flags += ["--speculative-config", json.dumps(spec)]
    return " ".join(shlex.quote(f) for f in flags)
