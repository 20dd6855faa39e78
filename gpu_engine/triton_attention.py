"""Triton paged attention for mixed batches: prefill chunks over cached context, decodes, verifies.

One kernel for every query kind (as vLLM's unified Triton attention): a program takes BLOCK_Q
query tokens of one sequence and all the query heads that share one KV head (GQA), so each key
and value block is read once per group rather than once per query head. It walks the sequence's
keys BLOCK_N at a time through its block table, with an online softmax (FlashAttention) and a
causal mask by position. Same contract as `gpu_engine.attention.paged_attention_torch`.

A sliding window of W tokens masks the keys at positions <= p − W and starts the walk at the
tile's first visible key. Attention sinks seed the online softmax with M = sink and L = 1 (as vLLM's
`triton_unified_attention.py` does, vllm-project/vllm 1c98a49): exp(sink − m) then sits in the
denominator and nothing in the numerator. A row may see no key in one BLOCK_N iteration (a window
that starts mid-tile); its running max then stays −inf and that iteration adds nothing.

Checked against the torch path on the CPU under `TRITON_INTERPRET=1` (tests). On CUDA it is
compiled but, in this repository's history, not yet run: see BENCHMARKS.md.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_engine.attention import AttentionMetadata

_MIN_DOT = 16  # tl.dot needs every dimension >= 16 on GPUs
_BLOCK_N = 64  # keys per inner iteration (any page size: each key looks up its own block)


@triton.jit
def _paged_attention_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, block_tables_ptr, query_start_ptr, context_lens_ptr, sinks_ptr,
    scale, window, stride_qt, stride_qh, stride_kb, stride_ks, stride_kh, stride_ot, stride_oh, stride_bt,
    BLOCK_SIZE: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, USE_SINKS: tl.constexpr,
    USE_WINDOW: tl.constexpr,
):
    seq = tl.program_id(0)
    tile_start = tl.program_id(1) * BLOCK_Q
    kv_head = tl.program_id(2)
    q_begin = tl.load(query_start_ptr + seq)
    q_len = tl.load(query_start_ptr + seq + 1) - q_begin
    if tile_start < q_len:
        ctx = tl.load(context_lens_ptr + seq)
        # Row r of the tile: query token tile_start + r // GROUP, query head kv_head * GROUP + r % GROUP.
        rows = tl.arange(0, BLOCK_M)
        row_tok = tile_start + rows // GROUP
        row_head = kv_head * GROUP + rows % GROUP
        row_ok = (rows < BLOCK_Q * GROUP) & (row_tok < q_len)
        q_pos = ctx + row_tok
        d = tl.arange(0, BLOCK_D)
        d_ok = d < HEAD_DIM
        q_offs = (q_begin + row_tok)[:, None] * stride_qt + row_head[:, None] * stride_qh + d[None, :]
        q = tl.load(q_ptr + q_offs, mask=row_ok[:, None] & d_ok[None, :], other=0.0)

        if USE_SINKS:
            m_i = tl.load(sinks_ptr + row_head, mask=row_ok, other=0.0).to(tl.float32)
            l_i = tl.full([BLOCK_M], 1.0, tl.float32)
        else:
            m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
            l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        kv_end = ctx + tl.minimum(q_len, tile_start + BLOCK_Q)  # keys the tile's last query sees
        kv_begin = 0
        if USE_WINDOW:
            kv_begin = tl.maximum(ctx + tile_start - window + 1, 0)  # the tile's first query's first key
        for start in range(kv_begin, kv_end, BLOCK_N):
            keys = start + tl.arange(0, BLOCK_N)
            key_ok = keys < kv_end
            block_ids = tl.load(block_tables_ptr + seq * stride_bt + keys // BLOCK_SIZE, mask=key_ok, other=0)
            kv_offs = block_ids.to(tl.int64) * stride_kb + (keys % BLOCK_SIZE) * stride_ks + kv_head * stride_kh
            kv_mask = key_ok[:, None] & d_ok[None, :]
            k = tl.load(k_cache_ptr + kv_offs[:, None] + d[None, :], mask=kv_mask, other=0.0)
            s = tl.dot(q, tl.trans(k)) * scale
            visible = (keys[None, :] <= q_pos[:, None]) & key_ok[None, :]
            if USE_WINDOW:
                visible = visible & (keys[None, :] > q_pos[:, None] - window)
            s = tl.where(visible, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key seen yet
            p = tl.exp(s - m_safe[:, None])
            alpha = tl.exp(m_i - m_safe)
            v = tl.load(v_cache_ptr + kv_offs[:, None] + d[None, :], mask=kv_mask, other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            l_i = l_i * alpha + tl.sum(p, 1)
            m_i = m_new
        out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]  # l_i is 0 only on padding rows (not stored)
        o_offs = (q_begin + row_tok)[:, None] * stride_ot + row_head[:, None] * stride_oh + d[None, :]
        tl.store(out_ptr + o_offs, out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])


def tile_shape(max_query_len: int, group: int) -> tuple[int, int]:
    """(BLOCK_Q query tokens, BLOCK_M rows) per program for a step and a GQA group size.

    Decode-only steps take one token per program (its `group` heads are the rows); steps with
    longer queries take about 64 rows. BLOCK_M is a power of two and at least 16 (tl.dot).
    """
    block_q = 1 if max_query_len == 1 else max(1, 64 // group)
    return block_q, max(_MIN_DOT, triton.next_power_of_2(block_q * group))


def paged_attention_triton(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           meta: AttentionMetadata, scale: float, window: int = 0,
                           sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Causal paged attention of every query token of a step; see `paged_attention_torch`.

    Args:
        q: (T, num_heads, head_dim) queries; last dimension contiguous.
        k_cache, v_cache: (num_blocks, block_size, num_kv_heads, head_dim), contiguous, holding
            this step's keys and values.
        meta: the step's metadata (query_start, context_lens, block_tables on q's device).
        scale: softmax scale.
        window: sliding window in tokens (the query's own included); 0: full causal attention.
        sinks: (num_heads,) sink logits, or None.

    Returns:
        (T, num_heads, head_dim) in q's dtype; accumulation in float32 (inputs in float32 use
        TF32 dot products on GPUs, as Triton defaults).
    """
    num_heads, head_dim = q.shape[1:]
    _, block_size, num_kv_heads, _ = k_cache.shape
    group = num_heads // num_kv_heads
    block_q, block_m = tile_shape(meta.max_query_len, group)
    out = torch.empty_like(q)
    grid = (len(meta.query_lens_list), triton.cdiv(meta.max_query_len, block_q), num_kv_heads)
    _paged_attention_kernel[grid](
        q, k_cache, v_cache, out, meta.block_tables, meta.query_start, meta.context_lens,
        out if sinks is None else sinks.contiguous(), scale, window, q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        out.stride(0), out.stride(1), meta.block_tables.stride(0),
        BLOCK_SIZE=block_size, GROUP=group, HEAD_DIM=head_dim,
        BLOCK_D=max(_MIN_DOT, triton.next_power_of_2(head_dim)), BLOCK_Q=block_q, BLOCK_M=block_m,
        BLOCK_N=_BLOCK_N, USE_SINKS=sinks is not None, USE_WINDOW=window > 0,
    )
    return out
