"""The paged KV cache: one key and one value tensor per layer, indexed by physical block id.

Block ids are the scheduler's (`simulator.scheduler.BlockManager`), used as they are: the token at
position p of a sequence lives in block `block_table[p // block_size]`, slot `p % block_size`.
Layout per layer (num_blocks, block_size, num_kv_heads, head_dim), as vLLM's flash-attention
backend and nano-vllm keep it.
"""
from __future__ import annotations

import torch

from profiler import ModelSpec


class KVCache:
    """Keys and values of `num_blocks` blocks of `block_size` tokens, for every layer.

    Attributes:
        keys, values: lists (one per layer) of tensors (num_blocks, block_size, num_kv_heads, head_dim).
    """

    def __init__(self, spec: ModelSpec, num_blocks: int, block_size: int, dtype: torch.dtype,
                 device: torch.device | str):
        shape = (spec.num_layers, num_blocks, block_size, spec.num_key_value_heads, spec.head_dim)
        self._k = torch.zeros(shape, dtype=dtype, device=device)
        self._v = torch.zeros(shape, dtype=dtype, device=device)
        self.keys = list(self._k.unbind(0))
        self.values = list(self._v.unbind(0))
        self.num_blocks, self.block_size = num_blocks, block_size

    @staticmethod
    def bytes_needed(spec: ModelSpec, num_blocks: int, block_size: int, dtype: torch.dtype) -> int:
        """Bytes of a cache of `num_blocks` blocks: blocks × block_size × KV bytes per token."""
        dtype_bytes = torch.empty((), dtype=dtype).element_size()
        return num_blocks * block_size * spec.kv_bytes_per_token(dtype_bytes)

    @staticmethod
    def store(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
              slot_mapping: torch.Tensor) -> None:
        """Write k, v (T, num_kv_heads, head_dim) into flat slots `slot_mapping` (T,) of one layer.

        Slot s is block s // block_size, offset s % block_size.
        """
        heads, dim = k_cache.shape[-2:]
        k_cache.view(-1, heads, dim).index_copy_(0, slot_mapping, k.to(k_cache.dtype))
        v_cache.view(-1, heads, dim).index_copy_(0, slot_mapping, v.to(v_cache.dtype))

    def copy_to_host(self, block_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of `block_ids`, every layer, copied to CPU memory.

        Returns:
            (k, v), each (num_layers, len(block_ids), block_size, num_kv_heads, head_dim).
        """
        index = torch.as_tensor(block_ids, device=self._k.device)
        return self._k[:, index].cpu(), self._v[:, index].cpu()

    def copy_from_host(self, block_ids: list[int], k: torch.Tensor, v: torch.Tensor) -> None:
        """Write host copies (as `copy_to_host` returns, len(block_ids) blocks) into `block_ids`."""
        index = torch.as_tensor(block_ids, device=self._k.device)
        self._k[:, index] = k.to(self._k.device)
        self._v[:, index] = v.to(self._v.device)
