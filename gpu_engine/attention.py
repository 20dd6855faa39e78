"""Paged attention for mixed batches: the step's metadata and the torch reference path.

One call covers every kind of query in a step: a prefill chunk (q tokens over c cached ones), a
decode (1 over c) and a speculative verify (1 + drafts over c) are all "q new tokens attending
causally to the c + q tokens of their sequence". The keys of this step are in the cache before
attention runs (`KVCache.store`), so a query at position p sees positions 0..p of its sequence.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class AttentionMetadata:
    """Where each sequence's queries are and which cache blocks hold its keys.

    B sequences, T query tokens in all, plan order. Tensors are on the model's device; the
    `*_list` copies let the torch path loop without device synchronisation.

    Attributes:
        slot_mapping: int64 (T,), flat cache slot (block id × block_size + offset) of each token.
        query_start: int32 (B + 1,), offset of each sequence's first query token; last entry T.
        context_lens: int32 (B,), tokens already cached before this step.
        seq_lens: int32 (B,), context + query tokens (keys each sequence attends to at most).
        block_tables: int32 (B, max_blocks), physical block ids, padded with 0 past each
            sequence's ceil(seq_len / block_size) blocks (never read there).
        max_query_len: the longest query of the step (tokens).
        query_lens_list, context_lens_list: the same counts as Python ints.
    """

    slot_mapping: torch.Tensor
    query_start: torch.Tensor
    context_lens: torch.Tensor
    seq_lens: torch.Tensor
    block_tables: torch.Tensor
    max_query_len: int
    query_lens_list: list[int]
    context_lens_list: list[int]


def paged_attention_torch(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                          meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """Causal attention of each sequence's queries over its cached keys; the reference path.

    Loops over sequences: clear and exact, used to check the Triton kernel and on the CPU.

    Args:
        q: (T, num_heads, head_dim) queries, rotary applied.
        k_cache, v_cache: one layer's cache (num_blocks, block_size, num_kv_heads, head_dim),
            already holding this step's keys and values.
        meta: the step's `AttentionMetadata`.
        scale: softmax scale, 1 / sqrt(head_dim).

    Returns:
        (T, num_heads, head_dim), in q's dtype; softmax in at least float32.
    """
    num_heads, head_dim = q.shape[1:]
    block_size, num_kv_heads = k_cache.shape[1:3]
    group = num_heads // num_kv_heads
    work_dtype = torch.promote_types(q.dtype, torch.float32)
    out = torch.empty_like(q)
    start = 0
    for i, (q_len, ctx_len) in enumerate(zip(meta.query_lens_list, meta.context_lens_list)):
        seq_len = ctx_len + q_len
        table = meta.block_tables[i, : -(-seq_len // block_size)]
        k = k_cache[table].reshape(-1, num_kv_heads, head_dim)[:seq_len].to(work_dtype)
        v = v_cache[table].reshape(-1, num_kv_heads, head_dim)[:seq_len].to(work_dtype)
        qi = q[start : start + q_len].to(work_dtype).view(q_len, num_kv_heads, group, head_dim)
        scores = torch.einsum("qhgd,khd->hgqk", qi, k) * scale
        query_pos = torch.arange(ctx_len, seq_len, device=q.device)
        key_pos = torch.arange(seq_len, device=q.device)
        scores.masked_fill_(key_pos[None, :] > query_pos[:, None], float("-inf"))
        o = torch.einsum("hgqk,khd->qhgd", scores.softmax(dim=-1), v)
        out[start : start + q_len] = o.reshape(q_len, num_heads, head_dim).to(q.dtype)
        start += q_len
    return out
