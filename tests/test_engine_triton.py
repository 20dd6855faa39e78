"""The Triton paged-attention kernel agrees with the torch reference path.

Without a GPU the kernel runs in Triton's interpreter (TRITON_INTERPRET=1, set here before triton
is imported); with one, on CUDA. float32 inputs: the kernel accumulates in float32 too.
"""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from gpu_engine.attention import paged_attention_torch  # noqa: E402
from gpu_engine.inputs import SequenceWork, prepare_inputs  # noqa: E402
from gpu_engine.runner import cpu_threads  # noqa: E402
from gpu_engine.triton_attention import paged_attention_triton, tile_shape  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    with cpu_threads(1):  # tiny matmuls: more threads only contend
        yield


# On GPUs float32 dot products run in TF32 (10-bit mantissa).
ATOL = 2e-2 if DEVICE == "cuda" else 1e-5


def random_case(heads: int, kv_heads: int, head_dim: int, block_size: int, shapes: list[tuple[int, int]], seed=0):
    """Random q and caches for sequences of (context, query) tokens on shuffled blocks."""
    g = torch.Generator().manual_seed(seed)
    num_blocks = sum(-(-(c + q) // block_size) for c, q in shapes) + 3
    k_cache = torch.randn(num_blocks, block_size, kv_heads, head_dim, generator=g)
    v_cache = torch.randn(num_blocks, block_size, kv_heads, head_dim, generator=g)
    free = torch.randperm(num_blocks, generator=g).tolist()
    work = []
    for i, (ctx, q) in enumerate(shapes):
        n = -(-(ctx + q) // block_size)
        table, free = free[:n], free[n:]
        work.append(SequenceWork(i, [0] * q, ctx, table, 1))
    meta = prepare_inputs(work, block_size, DEVICE).meta
    q = torch.randn(sum(q for _, q in shapes), heads, head_dim, generator=g)
    return q.to(DEVICE), k_cache.to(DEVICE), v_cache.to(DEVICE), meta


# (context, query) per sequence: a chunk over cached context, a decode, a verify of 1 + 3 drafts,
# a first chunk, and a long prefill whose keys span several 64-key iterations and query tiles.
MIXED = [(5, 7), (20, 1), (9, 4), (0, 3), (70, 90)]


@pytest.mark.parametrize("heads,kv_heads,head_dim,block_size", [
    (4, 2, 16, 4),    # GQA, group 2
    (8, 2, 32, 16),   # GQA, group 4, vLLM's default block size
    (3, 3, 24, 8),    # MHA, head_dim not a power of two (masked lanes)
    (6, 1, 16, 3),    # MQA, group 6 (not a power of two) and an odd block size
])
def test_kernel_matches_torch_on_a_mixed_batch(heads, kv_heads, head_dim, block_size):
    q, k_cache, v_cache, meta = random_case(heads, kv_heads, head_dim, block_size, MIXED)
    scale = head_dim ** -0.5
    expected = paged_attention_torch(q, k_cache, v_cache, meta, scale)
    got = paged_attention_triton(q, k_cache, v_cache, meta, scale)
    torch.testing.assert_close(got, expected, rtol=0, atol=ATOL)


def test_kernel_matches_torch_on_a_decode_only_batch():
    q, k_cache, v_cache, meta = random_case(8, 2, 16, 4, [(3, 1), (40, 1), (0, 1), (77, 1)], seed=1)
    expected = paged_attention_torch(q, k_cache, v_cache, meta, 0.25)
    torch.testing.assert_close(paged_attention_triton(q, k_cache, v_cache, meta, 0.25), expected, rtol=0, atol=ATOL)


def test_tiles_fold_the_gqa_group_into_rows():
    assert tile_shape(max_query_len=1, group=4) == (1, 16)    # a decode: its 4 heads, padded to 16 rows
    assert tile_shape(max_query_len=1, group=32) == (1, 32)
    assert tile_shape(max_query_len=300, group=4) == (16, 64)  # 16 tokens x 4 heads
    assert tile_shape(max_query_len=300, group=6) == (10, 64)  # 60 rows, padded to 64


def assert_model_logits_match(args):
    """A chunk over 11 cached tokens beside a first chunk: the model's logits with the kernel equal the torch path's."""
    from gpu_engine.build import build_model
    from gpu_engine.runner import ModelRunner

    prompt = torch.randint(0, 256, (19,), generator=torch.Generator().manual_seed(2)).tolist()
    logits = {}
    for attention in ("torch", "triton"):
        runner = ModelRunner(build_model(args, dtype=torch.float32, device=DEVICE, seed=1, attention=attention), 16, 4)
        runner.run([SequenceWork(0, prompt[:11], 0, [5, 2, 9], 0)])
        logits[attention] = runner.run([SequenceWork(0, prompt[11:], 11, [5, 2, 9, 14, 0], 8),
                                        SequenceWork(1, prompt[:6], 0, [7, 8], 1)])
    torch.testing.assert_close(logits["triton"], logits["torch"], rtol=0, atol=10 * ATOL)


def test_model_logits_with_the_kernel_match_the_torch_path():
    from pathlib import Path

    from gpu_engine.checkpoint import load_model_args

    assert_model_logits_match(load_model_args(Path(__file__).parent / "data" / "engine" / "tiny"))


@pytest.mark.parametrize("window,with_sinks", [(5, False), (64, False), (1, False), (0, True), (7, True)])
def test_kernel_matches_torch_with_a_window_and_sinks(window, with_sinks):
    # Window 5 and 7: shorter than most contexts, starting mid-block and mid-tile; 64 = BLOCK_N, so
    # in the 90-token prefill some rows of a tile see no key in the walk's first iteration; 1: a
    # query sees itself only.
    q, k_cache, v_cache, meta = random_case(4, 2, 16, 4, MIXED, seed=2)
    sinks = torch.randn(4, generator=torch.Generator().manual_seed(9)).to(DEVICE) if with_sinks else None
    expected = paged_attention_torch(q, k_cache, v_cache, meta, 0.25, window, sinks)
    got = paged_attention_triton(q, k_cache, v_cache, meta, 0.25, window, sinks)
    torch.testing.assert_close(got, expected, rtol=0, atol=ATOL)
    if window == 1 and not with_sinks:  # each query's output is its own value row
        torch.testing.assert_close(got[0], v_cache.flatten(0, 1)[meta.slot_mapping[0].item()].repeat_interleave(2, 0))


def test_windowed_model_logits_with_the_kernel_match_the_torch_path(tmp_path):
    # A tiny Qwen2 with layers 1-2 windowed (4 tokens) and q/k/v biases: the model hands each
    # layer's window to the kernel.
    import json

    from gpu_engine.checkpoint import load_model_args

    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "vocab_size": 256, "max_position_embeddings": 256, "use_sliding_window": True, "sliding_window": 4,
        "max_window_layers": 1}))
    args = load_model_args(tmp_path)
    assert args.layer_windows == (0, 4, 4)
    assert_model_logits_match(args)
