"""RooflineCostModel: one GEMM and one decode step worked by hand, plus monotonicity properties."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiler import CostModel, RooflineCostModel, get_device_spec, get_model_spec
from profiler.roofline import gemm_time_s

LLAMA_3_8B = get_model_spec("llama-3-8b")
H100 = get_device_spec("h100-sxm")
# H100 SXM dense BF16 peak and HBM3 bandwidth (REFERENCE.md §5), derated by the efficiencies
# every hand computation below passes explicitly.
PEAK_FLOPS = 989.5e12 * 0.6
BANDWIDTH = 3.35e12 * 0.8


def model(tp=1, overhead_s=0.5e-3):
    return RooflineCostModel(LLAMA_3_8B, H100, tensor_parallel_size=tp, flops_efficiency=0.6,
                             bandwidth_efficiency=0.8, step_overhead_s=overhead_s)


def step(cost_model, query, context, prefill):
    return cost_model.predict_step_s(np.array(query), np.array(context), np.array(prefill, bool))


def test_gate_projection_gemm_512_tokens():
    flops = 2 * 512 * 4096 * 14336  # 60.1 GFLOP
    num_bytes = (512 * 4096 + 4096 * 14336 + 512 * 14336) * 2  # input + weight + output, bf16
    compute_s = flops / PEAK_FLOPS  # 101.3 us
    memory_s = num_bytes / BANDWIDTH  # 50.9 us
    assert compute_s > memory_s  # 512 tokens is past the H100 ridge point
    got = gemm_time_s(512, 14336, 4096, H100, dtype_bytes=2, flops_efficiency=0.6,
                      bandwidth_efficiency=0.8)
    assert got == pytest.approx(compute_s, rel=1e-12)
    assert got == pytest.approx(1.0128e-4, rel=1e-3)


def test_decode_step_batch_1_context_1000_by_hand():
    def bound(flops, num_bytes):
        return max(flops / PEAK_FLOPS, num_bytes / BANDWIDTH)

    def gemm(m, n, k):
        return bound(2 * m * n * k, (m * k + k * n + m * n) * 2)

    per_layer_linear = (gemm(1, 4096 + 2 * 1024, 4096)  # qkv_proj: 32 q heads + 2 x 8 kv heads, x 128
                        + gemm(1, 4096, 4096)  # o_proj
                        + gemm(1, 2 * 14336, 4096)  # gate_up_proj
                        + gemm(1, 4096, 14336))  # down_proj
    lm_head = gemm(1, 128256, 4096)
    pairs = 1 * 1000 + 1 * 2 / 2  # q c + q (q + 1) / 2
    attn_flops = 4 * 32 * 128 * pairs
    kv_per_token_layer = 2 * 8 * 128 * 2  # K and V, 8 heads x 128, bf16
    attn_bytes = kv_per_token_layer * (1000 + 1 + 1) + 1 * 2 * 32 * 128 * 2  # KV read, write; Q, O
    expected = 32 * per_layer_linear + lm_head + 32 * bound(attn_flops, attn_bytes) + 0.5e-3
    assert step(model(), [1], [1000], [False]) == pytest.approx(expected, rel=1e-9)
    # Weight-read bound: 16.06e9 B / 3.35e12 B/s = 4.8 ms; derated and with overhead, a few ms.
    assert 4.8e-3 < expected < 8e-3


def test_default_decode_is_a_few_ms():
    default = RooflineCostModel(LLAMA_3_8B, H100)
    assert 4.8e-3 < step(default, [1], [100], [False]) < 8e-3


def test_breakdown_parts_sum_to_step_and_all_reduce_by_hand():
    cost_model = model(tp=2)
    parts = cost_model.breakdown(np.array([512]), np.array([0]), np.array([True]))
    assert sum(parts.values()) == step(cost_model, [512], [0], [True])
    assert parts["attention_decode_s"] == 0.0
    # Two ring all-reduces per layer of 512 tokens x 4096 x 2 bytes over NVLink4 (450 GB/s a way).
    one = 2 * (2 - 1) / 2 * (512 * 4096 * 2) / 450e9 + 10e-6
    assert parts["all_reduce_s"] == pytest.approx(2 * 32 * one, rel=1e-12)


def test_empty_batch_costs_nothing_and_protocol_holds():
    cost_model = model()
    assert isinstance(cost_model, CostModel)
    assert step(cost_model, [], [], []) == 0.0


def test_misaligned_arrays_rejected():
    with pytest.raises(ValueError, match="must align"):
        step(model(), [1, 1], [10], [False])


batches = st.lists(st.tuples(st.integers(1, 4096), st.integers(0, 8192), st.booleans()),
                   min_size=1, max_size=64)


@settings(deadline=None, max_examples=200)
@given(batches, st.data())
def test_monotone_in_query_and_context(batch, data):
    cost_model = model()
    query, context, prefill = (list(column) for column in zip(*batch))
    before = step(cost_model, query, context, prefill)
    i = data.draw(st.integers(0, len(batch) - 1))
    extra = data.draw(st.integers(1, 2048))
    more_query = query.copy()
    more_query[i] += extra
    more_context = context.copy()
    more_context[i] += extra
    assert step(cost_model, more_query, context, prefill) >= before
    assert step(cost_model, query, more_context, prefill) >= before


@settings(deadline=None, max_examples=50)
@given(st.integers(1024, 8192), st.integers(0, 4096))
def test_tp2_prefill_is_cheaper(prompt_tokens, context_tokens):
    args = ([prompt_tokens], [context_tokens], [True])
    assert step(model(tp=2), *args) < step(model(tp=1), *args)


def test_fast_step_price_equals_the_breakdown_sum():
    # predict_step_s skips building the breakdown dict; it must price every step the same.
    import numpy as np

    from profiler import RooflineCostModel, get_device_spec, get_model_spec
    model = RooflineCostModel(get_model_spec("llama-3-8b"), get_device_spec("h100-sxm"), tensor_parallel_size=2)
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(1, 40))
        q = np.where(rng.random(n) < 0.7, 1, rng.integers(1, 600, n))
        c = rng.integers(0, 8000, n)
        prefill = (q > 1) & (rng.random(n) < 0.8)
        assert model.predict_step_s(q, c, prefill) == pytest.approx(sum(model.breakdown(q, c, prefill).values()),
                                                                     rel=1e-12)


def test_decode_steps_vectorised_equal_one_step_at_a_time():
    # The simulator's decode windows price k steps in one call; each must be the exact float
    # predict_step_s gives for that step (records must not depend on the fast path).
    from profiler import RooflineCostModel, get_device_spec, get_model_spec
    cost = RooflineCostModel(get_model_spec("llama-2-70b"), get_device_spec("h100-sxm"), tensor_parallel_size=4)
    rng = np.random.default_rng(0)
    for batch in (1, 7, 120):
        context = rng.integers(0, 6000, batch)
        one_by_one = [cost.predict_step_s(np.ones(batch, np.int64), context + j, np.zeros(batch, bool))
                      for j in range(200)]
        assert cost.predict_decode_steps_s(context, 40) == one_by_one[:40]
        assert cost.predict_decode_steps_s(context.tolist(), 10, first_step=30) == one_by_one[30:40]
        assert cost.predict_decode_steps_s(context, 150, first_step=50) == one_by_one[50:]  # a long run
        assert np.all(np.diff(one_by_one) >= 0)  # longer contexts never price cheaper


def test_lists_and_arrays_price_a_step_identically():
    # The simulator passes plan lists (summed in plain Python); engines and tools pass arrays.
    from profiler import RooflineCostModel, get_device_spec, get_model_spec
    cost = RooflineCostModel(get_model_spec("llama-3-8b"), get_device_spec("h100-sxm"))
    rng = np.random.default_rng(2)
    for _ in range(200):
        n = int(rng.integers(1, 80))
        prefill = (rng.random(n) < rng.choice([0.0, 0.1, 1.0])).tolist()
        q = [int(rng.integers(1, 900)) if p else int(rng.choice([1, 1, 3])) for p in prefill]
        c = rng.integers(0, 8000, n).tolist()
        as_arrays = cost.predict_step_s(np.array(q), np.array(c), np.array(prefill))
        assert cost.predict_step_s(q, c, prefill) == as_arrays
        assert sum(cost.breakdown(np.array(q), np.array(c), np.array(prefill)).values()) == pytest.approx(as_arrays, rel=1e-12)
