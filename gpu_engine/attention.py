"""Paged attention for mixed batches: the step's metadata and the torch reference path.

One call covers every kind of query in a step: a prefill chunk (q tokens over c cached ones), a
decode (1 over c) and a speculative verify (1 + drafts over c) are all "q new tokens attending
causally to the c + q tokens of their sequence". The keys of this step are in the cache before
attention runs (`KVCache.store`), so a query at position p sees positions 0..p of its sequence.

Two variants of the 2025 open models, per layer:
- a sliding window of W tokens: the query at position p sees positions max(0, p − W + 1) .. p, W
  keys its own included (transformers' `sliding_window_overlay`: kv_idx > q_idx − W; vLLM's
  flash-attention window (W − 1, 0));
- attention sinks (gpt-oss): a learned logit per query head joins each row's softmax
  denominator and adds nothing to its numerator (transformers `gpt_oss.eager_attention_forward`:
  the sink column is concatenated to the scaled logits, softmaxed, then dropped; it is not
  scaled).
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
                          meta: AttentionMetadata, scale: float, window: int = 0,
                          sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Causal attention of each sequence's queries over its cached keys; the reference path.

    Single-token queries (decodes) are computed together, padded to the longest context; every
    other sequence (prefill chunk, verify) in a loop of its own. Clear and exact: it checks the
    Triton kernel and serves on the CPU.

    Args:
        q: (T, num_heads, head_dim) queries, rotary applied.
        k_cache, v_cache: one layer's cache (num_blocks, block_size, num_kv_heads, head_dim),
            already holding this step's keys and values.
        meta: the step's `AttentionMetadata`.
        scale: softmax scale, 1 / sqrt(head_dim).
        window: sliding window in tokens (the query's own included); 0: full causal attention.
        sinks: (num_heads,) sink logits (module docstring), or None.

    Returns:
        (T, num_heads, head_dim), in q's dtype; softmax in at least float32.
    """
    out = torch.empty_like(q)
    starts = [0]
    for q_len in meta.query_lens_list:
        starts.append(starts[-1] + q_len)
    decodes = [i for i, q_len in enumerate(meta.query_lens_list) if q_len == 1]
    if decodes:
        rows = torch.tensor([starts[i] for i in decodes], device=q.device)
        ctx = [meta.context_lens_list[i] for i in decodes]
        index = torch.tensor(decodes, device=q.device)
        out[rows] = _attend(q[rows][:, None], k_cache, v_cache, meta.block_tables[index], ctx, scale, window,
                            sinks)[:, 0]
    for i, (q_len, ctx_len) in enumerate(zip(meta.query_lens_list, meta.context_lens_list)):
        if q_len > 1:
            rows = slice(starts[i], starts[i] + q_len)
            out[rows] = _attend(q[rows][None], k_cache, v_cache, meta.block_tables[i : i + 1], [ctx_len], scale,
                                window, sinks)[0]
    return out


def _attend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
            context_lens: list[int], scale: float, window: int = 0,
            sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Attention of B sequences with the same query length Q, padded to the longest.

    Args:
        q: (B, Q, num_heads, head_dim); query j of sequence b sits at position context_lens[b] + j.
        block_tables: (B, >= blocks of the longest sequence) block ids.
        context_lens: B cached-token counts before the queries.
        window, sinks: as `paged_attention_torch`.

    Returns:
        (B, Q, num_heads, head_dim) in q's dtype.
    """
    batch, q_len, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1:3]
    group = num_heads // num_kv_heads
    work_dtype = torch.promote_types(q.dtype, torch.float32)
    seq_len = max(context_lens) + q_len
    table = block_tables[:, : -(-seq_len // block_size)]
    k = k_cache[table].flatten(1, 2)[:, :seq_len].to(work_dtype)  # (B, L, H_kv, D)
    v = v_cache[table].flatten(1, 2)[:, :seq_len].to(work_dtype)
    scores = torch.einsum("bqhgd,bkhd->bhgqk", q.to(work_dtype).view(batch, q_len, num_kv_heads, group, head_dim), k)
    query_pos = torch.tensor(context_lens, device=q.device)[:, None] + torch.arange(q_len, device=q.device)
    key_pos = torch.arange(seq_len, device=q.device)
    hidden = key_pos[None, None, :] > query_pos[:, :, None]  # (B, Q, L): causal, and past each sequence's end
    if window:
        hidden |= key_pos[None, None, :] <= query_pos[:, :, None] - window
    scores = scores.masked_fill(hidden[:, None, None], float("-inf")) * scale
    if sinks is None:
        probs = scores.softmax(dim=-1)
    else:  # a sink column per query head, softmaxed with the row and dropped
        sink = sinks.to(work_dtype).view(1, num_kv_heads, group, 1, 1).expand(*scores.shape[:-1], 1)
        probs = torch.cat((scores, sink), dim=-1).softmax(dim=-1)[..., :-1]
    o = torch.einsum("bhgqk,bkhd->bqhgd", probs, v)
    return o.reshape(batch, q_len, num_heads, head_dim).to(q.dtype)
