"""The KV cache groups of vLLM's hybrid KV cache manager, and the blocks a windowed layer keeps.

Read from vLLM's source (vllm-project/vllm, the 0.19 line; `vllm/v1/core/kv_cache_utils.py`
`_get_kv_cache_groups_uniform_page_size`, `get_kv_cache_config_from_groups`, `get_num_blocks`;
`vllm/v1/core/single_type_kv_cache_manager.py` `SlidingWindowManager`):

- A model whose layers all have the same KV spec (all full attention, or all windowed with one
  window) has one group of all its layers (`_get_kv_cache_groups_uniform_type`).
- A hybrid model (full and windowed layers) groups its layers by type and splits each type into
  groups of `group_size` layers: the smallest type's layer count (the "1" of an n:1 pattern), or
  the largest one's when that is under 1.5 × the smallest ("to avoid too many padding layers":
  gpt-oss-20b + EAGLE, 12 sliding + 13 full); a type whose count is not a multiple is padded.
  gpt-oss-120b (18 full, 18 sliding): 2 groups of 18; Gemma-3-27B (10 full, 52 sliding): group
  size 10, 1 full and 6 sliding groups (8 padding layers).
- Every block of the pool is one group's block over its `group_size` layers, so
  num_blocks = available // (page_bytes × group_size), page_bytes = block_size × one layer's KV
  bytes per token (`get_num_blocks`: `available_memory // page_size // num_layers` with
  num_layers = group_size). A request holds, in every group, the blocks of its tokens.
- A windowed group frees what no later query can see: before a step allocates, vLLM calls
  `remove_skipped_blocks(request_id, num_computed_tokens)`, which frees the request's first
  skipped // block_size blocks, skipped = max(0, num_computed_tokens − sliding_window + 1)
  (`get_num_skipped_tokens`), replacing them with the null block; the table keeps its length.

Engines without vLLM's hybrid manager (and vLLM with `--disable-hybrid-kv-cache-manager`,
`unify_hybrid_kv_cache_specs`) keep every layer's KV as full attention: one group of all layers.
"""
from __future__ import annotations

from dataclasses import dataclass

from profiler.model_spec import ModelSpec


@dataclass(frozen=True)
class KVCacheGroups:
    """How one rank's layers share the KV pool (module docstring).

    Attributes:
        group_size: layers per group (padding included); a block covers this many layers.
        num_full_groups: groups of full-attention layers (each holds every token's block).
        num_sliding_groups: groups of windowed layers (each frees blocks behind the window).
        sliding_window: the window in tokens (0 without windowed groups).
    """

    group_size: int
    num_full_groups: int
    num_sliding_groups: int
    sliding_window: int = 0

    @property
    def num_groups(self) -> int:
        return self.num_full_groups + self.num_sliding_groups

    def sliding_blocks_held(self, num_tokens: int, num_computed_tokens: int, block_size: int) -> int:
        """Blocks one windowed group holds for a request with slots for `num_tokens` tokens after
        `remove_skipped_blocks(num_computed_tokens)`: ceil(num_tokens / block_size) −
        min(skipped // block_size, that), skipped = max(0, num_computed_tokens − window + 1).

        E.g. window 128, block 16, 100,000 tokens computed, slots for 100,001: 6,251 − 6,242 = 9."""
        table = -(-num_tokens // block_size)
        skipped = max(0, num_computed_tokens - self.sliding_window + 1)
        return table - min(skipped // block_size, table)

    def blocks_held(self, num_tokens: int, num_computed_tokens: int, block_size: int) -> int:
        """Pool blocks a request holds over all groups (`sliding_blocks_held` in each windowed one)."""
        full = self.num_full_groups * -(-num_tokens // block_size)
        if not self.num_sliding_groups:
            return full
        return full + self.num_sliding_groups * self.sliding_blocks_held(num_tokens, num_computed_tokens, block_size)


def kv_cache_groups(model: ModelSpec, hybrid: bool = True) -> KVCacheGroups:
    """The groups vLLM forms for `model`'s layers on one rank (module docstring).

    Args:
        hybrid: vLLM's hybrid KV cache manager (V1's default); False: every layer kept as full
            attention (`--disable-hybrid-kv-cache-manager`, and every engine before V1).
    """
    full, sliding = model.num_full_layers, model.num_sliding_layers
    if not sliding or not hybrid:
        return KVCacheGroups(model.num_layers, 1, 0)
    if not full:  # every layer windowed: one uniform group
        return KVCacheGroups(sliding, 0, 1, model.sliding_window)
    size = min(full, sliding)
    if max(full, sliding) < 1.5 * size:
        size = max(full, sliding)
    return KVCacheGroups(size, -(-full // size), -(-sliding // size), model.sliding_window)


def groups_note(model: ModelSpec, hybrid: bool) -> str:
    """One sentence for a report on what a KV block is for `model` (leading space), '' without
    sliding-window layers."""
    if not model.num_sliding_layers:
        return ""
    groups = kv_cache_groups(model, hybrid)
    if not groups.num_sliding_groups:
        return (f" {model.name}'s {model.num_sliding_layers} sliding-window layers keep every token's KV "
                "(no hybrid KV cache manager: one group of all layers).")
    return (f" Under vLLM's hybrid KV cache manager a block is one KV cache group's ({groups.group_size} layers): "
            f"{groups.num_full_groups} full-attention and {groups.num_sliding_groups} sliding-window group(s) "
            f"(window {groups.sliding_window} tokens); a request holds its tokens' blocks in every full group and "
            "only those inside the window in each sliding one.")
