"""CUDA graphs as vLLM 0.19's V1 engine uses them: which token counts it captures, and what a step
of T scheduled tokens runs as.

Read from vLLM's source (vllm-project/vllm, the snapshots stored for this project):

- **Capture sizes** (`VllmConfig._set_cudagraph_sizes`, `vllm/config/vllm.py` at commit
  09f030eaf851400a83ad3d99f730868f76df0ca7): unless `enforce_eager` (or cudagraph_mode NONE), the
  largest size is min(max_num_seqs × (1 + num_speculative_tokens) × 2, 512), then at most
  max_num_batched_tokens; the sizes are [1, 2, 4] + range(8, 256, 8) + range(256, largest + 1, 16),
  each at most that largest, and `max_cudagraph_capture_size` becomes the last of them (so 260 gives
  a list ending at 256). Sequence parallelism (off by default) would drop sizes not divisible by TP:
  not modelled.
- **Mode**: the default optimisation level O2 sets `cudagraph_mode` FULL_AND_PIECEWISE
  (`OPTIMIZATION_LEVEL_02`, same file): uniform-decode batches (every request at the same query
  length 1 + drafts) replay FULL graphs (attention inside the graph), any other batch PIECEWISE
  graphs (attention runs eagerly between the captured pieces).
- **Padding** (`CudagraphDispatcher`, `vllm/v1/cudagraph_dispatcher.py` at commit
  ae2e8e62cea0f6c030f92234cb863acdc48658cb): `dispatch(num_tokens, ...)` returns NONE (eager, the
  step's own T tokens) when num_tokens > `max_cudagraph_capture_size`; otherwise the batch descriptor
  has num_tokens padded up to the next capture size (`_bs_to_padded_graph_size`), for FULL (a uniform
  decode batch of at most max_num_seqs × (1 + drafts) padded tokens) and PIECEWISE (every other batch
  at or below the largest size: PIECEWISE keys exist for every capture size) alike, so the model
  runner runs the whole forward (embedding, GEMMs, element-wise kernels, all-reduces) on the padded
  count either way.

What the simulator takes from this (`profiler.measured.cost_model.MeasuredCostModel`): a step of T
tokens, T ≤ the largest capture size, prices its token-count parts at `padded_tokens(T)` with the
graph-mode all-reduce; above it, at T, eager. Under the default mode a uniform-decode batch and a mixed
batch pad alike; they differ in where attention runs (in the graph or eagerly between pieces), which
changes its launch overhead, not its kernels: attention, the LM head and the sampler are priced at the
step's real rows (vLLM computes logits only at the sampled positions, outside the graph).
"""
from __future__ import annotations

from bisect import bisect_left

# `VllmConfig._set_cudagraph_sizes`: the default largest captured batch (tokens).
CUDA_GRAPH_MAX_CAPTURE_TOKENS = 512


def capture_sizes_up_to(max_capture_tokens: int) -> tuple[int, ...]:
    """vLLM's default capture list cut at `max_capture_tokens` (module docstring), ascending; ()
    for 0 (no CUDA graphs: `enforce_eager`). Its last entry is vLLM's `max_cudagraph_capture_size`.

    Raises:
        ValueError: a negative `max_capture_tokens`."""
    if max_capture_tokens < 0:
        raise ValueError(f"cuda_graph_max_tokens must be >= 0 (0: no CUDA graphs); got {max_capture_tokens}")
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, max_capture_tokens + 1, 16))
    return tuple(s for s in sizes if s <= max_capture_tokens)


def cudagraph_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int,
                            num_speculative_tokens: int = 0) -> tuple[int, ...]:
    """vLLM's default CUDA graph capture sizes (tokens per step), ascending, for a sequence cap,
    token budget and drafts per step (`VllmConfig._set_cudagraph_sizes`; module docstring)."""
    largest = min(max_num_seqs * (1 + num_speculative_tokens) * 2, CUDA_GRAPH_MAX_CAPTURE_TOKENS, max_num_batched_tokens)
    return capture_sizes_up_to(largest)


def padded_tokens(num_tokens: int, sizes: tuple[int, ...]) -> int:
    """The token count vLLM runs a step of `num_tokens` scheduled tokens at: the smallest capture
    size ≥ it (`CudagraphDispatcher._bs_to_padded_graph_size`), or `num_tokens` itself above the
    largest (eager) or without graphs (`sizes` empty)."""
    if not sizes or num_tokens > sizes[-1]:
        return num_tokens
    return sizes[bisect_left(sizes, num_tokens)]
