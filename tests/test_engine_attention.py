"""Paged attention and step inputs: chunked prefill equals unchunked, a mixed batch equals its parts.

float64 throughout: the paths differ only in summation order, so they agree to ~1e-12.
"""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gpu_engine.build import build_model  # noqa: E402
from gpu_engine.checkpoint import load_model_args  # noqa: E402
from gpu_engine.inputs import SequenceWork, prepare_inputs  # noqa: E402
from gpu_engine.runner import ModelRunner, cpu_threads  # noqa: E402

TINY = Path(__file__).parent / "data" / "engine" / "tiny"
BLOCK = 4


@pytest.fixture(scope="module")
def model():
    with cpu_threads(1):  # tiny matmuls: more threads only contend
        yield build_model(load_model_args(TINY), dtype=torch.float64, device="cpu", seed=3)


@pytest.fixture
def prompt() -> list[int]:
    return torch.randint(0, 256, (23,), generator=torch.Generator().manual_seed(5)).tolist()


def chunked_logits(model, tokens: list[int], chunks: list[int], table: list[int]) -> torch.Tensor:
    """Logits of every position, computed in consecutive chunks over the paged cache."""
    runner = ModelRunner(model, 32, BLOCK)
    out, start = [], 0
    for n in chunks:
        out.append(runner.run([SequenceWork(0, tokens[start : start + n], start, table, n)]))
        start += n
    return torch.cat(out)


def test_chunked_prefill_logits_match_unchunked(model, prompt):
    table = [17, 3, 30, 8, 22, 11]  # scattered physical blocks, as the scheduler hands them out
    whole = chunked_logits(model, prompt, [23], table)
    for chunks in ([7, 7, 7, 2], [1] * 23, [4, 19]):
        torch.testing.assert_close(chunked_logits(model, prompt, chunks, table), whole, rtol=0, atol=1e-10)


def test_logits_do_not_depend_on_which_physical_blocks_hold_the_kv(model, prompt):
    a = chunked_logits(model, prompt, [10, 13], [0, 1, 2, 3, 4, 5])
    b = chunked_logits(model, prompt, [10, 13], [31, 5, 12, 0, 27, 9])
    torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_mixed_batch_equals_each_sequence_alone(model, prompt):
    other = prompt[::-1][:15]
    # Alone: sequence A prefills 12 tokens then decodes; sequence B prefills in two chunks.
    runner = ModelRunner(model, 32, BLOCK)
    runner.run([SequenceWork(0, prompt[:12], 0, [0, 1, 2, 3], 0)])
    runner.run([SequenceWork(1, other[:8], 0, [10, 11, 12, 13], 0)])
    alone_decode = runner.run([SequenceWork(0, prompt[12:13], 12, [0, 1, 2, 3], 1)])
    alone_chunk = runner.run([SequenceWork(1, other[8:15], 8, [10, 11, 12, 13], 7)])
    # Together: the same two steps fused into one forward pass (Sarathi's hybrid batch).
    runner = ModelRunner(model, 32, BLOCK)
    runner.run([SequenceWork(0, prompt[:12], 0, [0, 1, 2, 3], 0), SequenceWork(1, other[:8], 0, [10, 11, 12, 13], 0)])
    fused = runner.run([SequenceWork(0, prompt[12:13], 12, [0, 1, 2, 3], 1),
                        SequenceWork(1, other[8:15], 8, [10, 11, 12, 13], 7)])
    torch.testing.assert_close(fused, torch.cat([alone_decode, alone_chunk]), rtol=0, atol=1e-12)


def test_step_inputs_flatten_sequences_with_their_slots():
    work = [SequenceWork(7, [5, 6, 7], 2, [9, 4], 1), SequenceWork(8, [1], 5, [3, 0], 1)]
    inputs = prepare_inputs(work, BLOCK, "cpu")
    assert inputs.input_ids.tolist() == [5, 6, 7, 1]
    assert inputs.positions.tolist() == [2, 3, 4, 5]
    # Position p of a sequence lives in block table[p // 4], offset p % 4: 9*4+2, 9*4+3, 4*4+0; 0*4+1.
    assert inputs.meta.slot_mapping.tolist() == [38, 39, 16, 1]
    assert inputs.meta.query_start.tolist() == [0, 3, 4]
    assert inputs.meta.seq_lens.tolist() == [5, 6]
    assert inputs.meta.block_tables.tolist() == [[9, 4], [3, 0]]
    assert inputs.logits_indices.tolist() == [2, 3]


def test_a_block_table_too_short_for_the_step_is_an_error():
    with pytest.raises(ValueError, match="request 7: block table holds 1 blocks of 4 tokens, too few for 5 tokens"):
        prepare_inputs([SequenceWork(7, [5, 6, 7], 2, [9], 1)], BLOCK, "cpu")
