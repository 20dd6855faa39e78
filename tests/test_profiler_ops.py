"""Op catalogue work worked by hand, the shape grid's levels and limits, and the lookup tables."""
import numpy as np
import pytest

from profiler import RooflineCostModel, get_device_spec, get_model_spec
from profiler.lookup import GridTable, LineTable
from profiler.ops import OpCatalogue
from profiler.shape_grid import GridLimits, shape_grid

LLAMA_3_8B = get_model_spec("llama-3-8b")


def test_step_ops_and_calls_follow_a_llama_layer():
    catalogue = OpCatalogue(LLAMA_3_8B, tp=1)
    calls = {op.name: op.calls_per_step(32) for op in catalogue.ops}
    assert calls["rmsnorm"] == 2 * 32 + 1  # two per layer and the final norm
    assert calls["residual_add"] == 64 and calls["qkv_proj"] == 32 and calls["lm_head"] == 1
    assert "all_reduce" not in calls
    assert OpCatalogue(LLAMA_3_8B, tp=2).op("all_reduce").calls_per_step(32) == 64


def test_gemm_and_elementwise_work_by_hand():
    catalogue = OpCatalogue(LLAMA_3_8B, tp=2, dtype_bytes=2)
    flops, num_bytes = catalogue.work(catalogue.op("gate_up_proj"), {"num_tokens": np.array([512])})
    # gate_up at tp 2: 4096 in, 2 x 14336 / 2 = 14336 out.
    assert flops[0] == 2 * 512 * 4096 * 14336
    assert num_bytes[0] == (512 * 4096 + 4096 * 14336 + 512 * 14336) * 2
    flops, num_bytes = catalogue.work(catalogue.op("silu_and_mul"), {"num_tokens": np.array([10])})
    assert num_bytes[0] == 10 * (2 * 7168 + 7168) * 2 and flops[0] == 10 * 5 * 7168
    _, num_bytes = catalogue.work(catalogue.op("sampler"), {"num_tokens": np.array([3])})
    assert num_bytes[0] == 3 * 3 * 128256 * 4  # fp32 logits: softmax read + write, argmax read


def test_attention_work_matches_the_roofline_model():
    """Prefill attention of q=100 over c=300: the roofline's FLOPs, and its bytes without the KV write."""
    catalogue = OpCatalogue(LLAMA_3_8B, tp=1)
    flops, num_bytes = catalogue.work(catalogue.op("attention_prefill"),
                                      {"query_tokens": np.array([100]), "context_tokens": np.array([300])})
    assert flops[0] == 4 * 32 * 128 * (100 * 300 + 100 * 101 / 2)
    kv_per_token = 2 * 8 * 128 * 2
    assert num_bytes[0] == kv_per_token * 400 + 2 * 100 * 32 * 128 * 2
    # Decode batch of 4 at context 1000 = the sums of four (q=1, c=1000) sequences.
    flops_d, bytes_d = catalogue.work(catalogue.op("attention_decode"),
                                      {"batch_size": np.array([4]), "context_tokens": np.array([1000])})
    assert flops_d[0] == 4 * 32 * 128 * 4 * 1001
    assert bytes_d[0] == kv_per_token * 4 * 1001 + 2 * 4 * 32 * 128 * 2
    roofline = RooflineCostModel(LLAMA_3_8B, get_device_spec("h100-sxm"))
    assert roofline._attn_flops_per_pair * (100 * 300 + 100 * 101 / 2) == flops[0]


def test_grid_levels_cover_every_op_and_respect_limits():
    catalogue = OpCatalogue(get_model_spec("llama-2-7b"), tp=1)
    limits = GridLimits(max_tokens=512, max_seqs=64, max_context=1024, max_kv_tokens=8192)
    levels = shape_grid(catalogue.ops, limits)
    level0_ops = {op.name for op, _ in levels[0]}
    assert level0_ops == {op.name for op in catalogue.ops}
    tokens0 = [s["num_tokens"] for op, s in levels[0] if op.name == "qkv_proj"]
    assert tokens0 == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    tokens1 = {s["num_tokens"] for op, s in levels[1] if op.name == "qkv_proj"}
    assert {65, 129, 257, 3, 384} <= tokens1  # one past tile boundaries, 1.5 x powers of two
    everything = [entry for level in levels for entry in level]
    assert max(s["num_tokens"] for op, s in everything if op.name == "lm_head") == 64
    for op, s in everything:
        if op.name == "attention_decode":
            assert s["batch_size"] * (s["context_tokens"] + 1) <= 8192
        if op.name == "attention_prefill":
            assert s["query_tokens"] + s["context_tokens"] <= 1024 and s["query_tokens"] >= 1
    seen = [(op.name, tuple(s.items())) for op, s in everything]
    assert len(seen) == len(set(seen))  # no shape timed twice


def test_line_table_is_exact_on_integers_and_proportional_beyond():
    table = LineTable(lambda n: 3.0 * n + 7.0, max_value=5000, dense_up_to=100)
    assert table(37) == 3 * 37 + 7
    assert table(2500) == pytest.approx(3 * 2500 + 7, rel=1e-9)  # linear between grid points
    assert table(10_000) == pytest.approx((3 * 5000 + 7) * 2)


def test_grid_table_interpolates_in_log_space_and_clamps():
    table = GridTable(lambda a, b: np.log(a) + np.log1p(b), a_max=1000, b_max=1000, points=17)
    assert table(np.array([10.0]), np.array([99.0]))[0] == pytest.approx(np.log(10) + np.log(100), rel=1e-6)
    assert table(50.0, 5.0) == pytest.approx(np.log(50) + np.log(6), rel=1e-6)  # scalar path
    assert table(1e6, 0.0) == pytest.approx(np.log(1000), rel=1e-6)  # clamped at the edge
