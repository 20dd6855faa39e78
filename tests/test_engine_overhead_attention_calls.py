"""The engine-overhead term for attention calls the fitted model does not price
(`profiler.engine_overhead.unpriced_attention_calls`), worked by hand and checked against the
calls the engine's torch attention really makes."""
from __future__ import annotations

import numpy as np
import pytest

from profiler.engine_overhead import EngineOverhead, WithEngineOverhead, unpriced_attention_calls

# (query tokens, is_prefill) -> engine calls − priced calls, worked by hand:
STEPS = [
    (([1, 1, 1], [False] * 3), 0),                      # decodes: 1 batched call, priced 1
    (([4, 3, 2], [False] * 3), 2),                      # 3 verifies alone: engine 3, priced 1
    (([4], [False]), 0),                                # 1 verify alone: engine 1, priced 1
    (([4, 3, 1, 32], [False, False, False, True]), 2),  # 2 verifies + decode + chunk: engine 4, priced 2
    (([4, 3, 32], [False, False, True]), 1),            # 2 verifies + chunk: engine 3, priced 2
    (([4, 1], [False, True]), 1),                       # verify + a one-token last chunk (batched as a decode)
    (([32, 16], [True, True]), 0),                      # two chunks: 2 calls, priced 2
]


@pytest.mark.parametrize(("step", "expected"), STEPS)
def test_unpriced_attention_calls_by_hand(step, expected):
    assert unpriced_attention_calls(np.array(step[0]), np.array(step[1])) == expected


@pytest.mark.parametrize(("step", "expected"), STEPS)
def test_the_count_is_the_engine_torch_attention_calls_minus_the_fitted_model_calls(monkeypatch, step, expected):
    torch = pytest.importorskip("torch")
    from gpu_engine import attention
    from gpu_engine.attention import AttentionMetadata, paged_attention_torch

    calls = []
    real = attention._attend
    monkeypatch.setattr(attention, "_attend", lambda *a: calls.append(1) or real(*a))
    q_lens, prefill = step
    context = [8] * len(q_lens)
    block_size, blocks_each = 4, 16
    tables = torch.arange(len(q_lens) * blocks_each, dtype=torch.int32).view(len(q_lens), blocks_each)
    cache = torch.zeros(len(q_lens) * blocks_each, block_size, 1, 8)
    meta = AttentionMetadata(slot_mapping=torch.zeros(sum(q_lens), dtype=torch.int64), query_start=None,
                             context_lens=None, seq_lens=None, block_tables=tables, max_query_len=max(q_lens),
                             query_lens_list=list(q_lens), context_lens_list=context)
    paged_attention_torch(torch.zeros(sum(q_lens), 2, 8), cache, cache, meta, 1.0)
    # FittedCostModel._parts: one attention_prefill call per prefill entry of q > 1, one
    # attention_decode call for all the rest
    is_chunk = [p and q > 1 for q, p in zip(q_lens, prefill)]
    priced = sum(is_chunk) + (not all(is_chunk))
    assert len(calls) - priced == expected


def test_the_step_price_charges_each_unpriced_call():
    from tests.conftest import ConstantCostModel

    overhead = EngineOverhead(per_step_s=1e-3, per_seq_s=10e-6, per_token_s=2e-6, per_draft_s=30e-6,
                              per_attention_call_s=50e-6)
    # 3 verifies (q = 4, 3, 2: 6 drafts) alone: 2 unpriced calls.
    # 1 ms + 3 × 10 µs + 9 × 2 µs + 6 × 30 µs + 2 × 50 µs = 1.328 ms, plus the model's 2 ms.
    priced = WithEngineOverhead(ConstantCostModel(0.002), overhead).predict_step_s(
        np.array([4, 3, 2]), np.array([50, 60, 70]), np.array([False] * 3))
    assert priced == pytest.approx(0.002 + 1.328e-3, rel=1e-12)


def test_the_fit_recovers_a_per_call_cost_and_old_files_load_without_it(tmp_path):
    rng = np.random.default_rng(1)
    seqs = rng.integers(1, 12, 400)
    tokens = seqs + rng.integers(0, 64, 400)
    drafts = rng.integers(0, 3 * seqs + 1)
    calls = np.minimum(seqs, rng.integers(0, 6, 400))
    residual = 1e-3 + 20e-6 * seqs + 2e-6 * tokens + 30e-6 * drafts + 50e-6 * calls
    residual[::13] += 0.01  # slowed steps: the median fit ignores them
    fit = EngineOverhead.fit(seqs, tokens, residual, drafts, calls)
    assert fit.per_draft_s == pytest.approx(30e-6, rel=1e-3)
    assert fit.per_attention_call_s == pytest.approx(50e-6, rel=1e-3)
    # without verifies the column is all 0 and its coefficient 0
    assert EngineOverhead.fit(seqs, tokens, 1e-3 + 20e-6 * seqs, None, np.zeros(400)).per_attention_call_s == 0.0
    (tmp_path / "engine_overhead.json").write_text(
        '{"per_step_s": 1e-3, "per_seq_s": 0, "per_token_s": 0, "per_draft_s": 0}')
    assert EngineOverhead.load(tmp_path).per_attention_call_s == 0.0
    fit.save(tmp_path)
    assert EngineOverhead.load(tmp_path) == fit
