"""Sliding windows and attention sinks in the engine's paged attention equal transformers' gpt-oss attention.

transformers' `models.gpt_oss.modeling_gpt_oss.eager_attention_forward` (the sink column joined to
the scaled logits, softmaxed, dropped) over the mask its `masking_utils` builds (causal, and
`sliding_window_overlay`: kv_idx > q_idx − W) is the reference; the engine's torch path and its
Triton kernel (TRITON_INTERPRET=1 on the CPU) read the same keys from a paged cache on scattered
blocks, as a chunk over cached context and as decodes. float64 for the torch path (agrees to
~1e-12); float32 for the kernel.
"""
from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from transformers.masking_utils import and_masks, causal_mask_function, sliding_window_overlay  # noqa: E402
from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward  # noqa: E402

from gpu_engine.attention import paged_attention_torch  # noqa: E402
from gpu_engine.inputs import SequenceWork, prepare_inputs  # noqa: E402
from gpu_engine.runner import cpu_threads  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM, BLOCK = 4, 2, 8, 4
LENGTH = 23  # tokens of the sequence
TABLE = [5, 0, 3, 7, 1, 6]  # its blocks, scattered over a pool of 8


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    with cpu_threads(1):
        yield


def case(dtype: torch.dtype):
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(LENGTH, h, HEAD_DIM, generator=g, dtype=torch.float64) for h in (HEADS, KV_HEADS, KV_HEADS))
    sinks = torch.randn(HEADS, generator=g, dtype=torch.float64)
    k_cache = torch.zeros(8, BLOCK, KV_HEADS, HEAD_DIM, dtype=torch.float64)
    v_cache = torch.zeros_like(k_cache)
    for p in range(LENGTH):
        k_cache[TABLE[p // BLOCK], p % BLOCK], v_cache[TABLE[p // BLOCK], p % BLOCK] = k[p], v[p]
    return tuple(t.to(dtype) for t in (q, k, v, sinks, k_cache, v_cache))


def transformers_attention(q, k, v, sinks, window: int | None) -> torch.Tensor:
    """(LENGTH, HEADS, HEAD_DIM): gpt-oss eager attention of the whole sequence, window or full."""
    rule = causal_mask_function if window is None else and_masks(causal_mask_function, sliding_window_overlay(window))
    pos = torch.arange(LENGTH)
    allowed = torch.stack([torch.stack([rule(0, 0, i, j) for j in pos]) for i in pos])
    mask = torch.zeros(LENGTH, LENGTH, dtype=q.dtype).masked_fill(~allowed, float("-inf"))[None, None]
    module = SimpleNamespace(sinks=torch.nn.Parameter(sinks), num_key_value_groups=HEADS // KV_HEADS, training=False)
    out, _ = eager_attention_forward(module, q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                     v.transpose(0, 1)[None], mask, scaling=HEAD_DIM ** -0.5)
    return out[0]


def engine_attention(attend, q, k_cache, v_cache, sinks, window: int) -> torch.Tensor:
    """Rows 10..22 as one chunk over 10 cached tokens; rows 3 and 22 again as decodes (batched)."""
    chunk = prepare_inputs([SequenceWork(0, [0] * 13, 10, TABLE, 1)], BLOCK, "cpu").meta
    decodes = prepare_inputs([SequenceWork(0, [0], 3, TABLE, 1), SequenceWork(1, [0], 22, TABLE, 1)], BLOCK, "cpu").meta
    scale = HEAD_DIM ** -0.5
    rows = attend(q[10:], k_cache, v_cache, chunk, scale, window, sinks)
    single = attend(q[[3, 22]], k_cache, v_cache, decodes, scale, window, sinks)
    return rows, single


@pytest.mark.parametrize("window", [0, 5, 8])
def test_torch_path_equals_gpt_oss_eager_attention(window):
    q, k, v, sinks, k_cache, v_cache = case(torch.float64)
    expected = transformers_attention(q, k, v, sinks, window or None)
    rows, single = engine_attention(paged_attention_torch, q, k_cache, v_cache, sinks, window)
    torch.testing.assert_close(rows, expected[10:], rtol=0, atol=1e-12)
    torch.testing.assert_close(single, expected[[3, 22]], rtol=0, atol=1e-12)


def test_sinks_change_the_output_and_a_window_drops_old_keys():
    # Guards the reference: sinks lower every weight (the row sums to less than 1), and with a
    # window of 5 the last row no longer depends on key 0.
    q, k, v, sinks, k_cache, v_cache = case(torch.float64)
    with_sinks = transformers_attention(q, k, v, sinks, None)
    without = transformers_attention(q, k, v, torch.full_like(sinks, float("-inf")), None)
    assert (with_sinks - without).abs().max() > 1e-3
    rows, _ = engine_attention(paged_attention_torch, q, k_cache, v_cache, None, 5)
    k_cache[TABLE[0], 0] += 100.0  # key 0 changed: invisible to the chunk's queries at 10..22 with window 5
    again, _ = engine_attention(paged_attention_torch, q, k_cache, v_cache, None, 5)
    torch.testing.assert_close(again, rows, rtol=0, atol=0)


@pytest.mark.parametrize("window", [0, 5])
def test_triton_kernel_equals_gpt_oss_eager_attention(window):
    pytest.importorskip("triton")
    from gpu_engine.triton_attention import paged_attention_triton

    q, k, v, sinks, k_cache, v_cache = case(torch.float32)
    expected = transformers_attention(q, k, v, sinks, window or None)
    rows, single = engine_attention(paged_attention_triton, q, k_cache, v_cache, sinks, window)
    torch.testing.assert_close(rows, expected[10:], rtol=0, atol=1e-5)
    torch.testing.assert_close(single, expected[[3, 22]], rtol=0, atol=1e-5)
