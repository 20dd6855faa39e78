"""RooflineCostModel: a small model's step worked by hand kernel by kernel, one GEMM, the TP
all-reduces, and monotonicity and fast-path properties."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiler import CostModel, ModelSpec, RooflineCostModel, get_device_spec, get_model_spec
from profiler.roofline import gemm_time_s

LLAMA_3_8B = get_model_spec("llama-3-8b")
H100 = get_device_spec("h100-sxm")
# H100 SXM dense BF16 peak and HBM3 bandwidth (REFERENCE.md §5), derated by the efficiencies
# the GEMM check passes explicitly.
PEAK_FLOPS = 989.5e12 * 0.6
BANDWIDTH = 3.35e12 * 0.8

# A device with round figures, described inline as a config would: 100 TFLOPS, 1,000 GB/s,
# half of each reached, 2 µs a kernel, 100 GB/s a way between GPUs with a measured TP2
# all-reduce of 10 µs + ring bytes at half the link, 0.1 ms per step on the host.
ROUND_DEVICE = get_device_spec({
    "name": "round", "memory_gib": 16, "dense_bf16_tflops": 100, "memory_bandwidth_gb_per_s": 1000,
    "gpu_link": {"kind": "nvlink", "gb_per_s_per_direction": 100},
    "host_link": {"gb_per_s_per_direction": 32},
    "efficiency": {"gemm_flops": 0.5, "memory_bandwidth": 0.5, "kernel_latency_us": 2,
                   "all_reduce": {2: {"latency_us": 10, "link_bandwidth": 0.5}}},
    "step_overhead_ms": 0.1,
})
# 2 layers, hidden 256, 4 query heads and 2 KV heads of 64, FFN 512, vocabulary 1,000.
SMALL = ModelSpec("small", 2, 256, 4, 2, 64, 512, 1000, 4096)


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
                      bandwidth_efficiency=0.8, kernel_latency_s=0.0)
    assert got == pytest.approx(compute_s, rel=1e-12)
    assert got == pytest.approx(1.0128e-4, rel=1e-3)
    # The device's fitted launch latency is added on top (3.358 µs, roofline_fits.yaml).
    with_latency = gemm_time_s(512, 14336, 4096, H100, flops_efficiency=0.6, bandwidth_efficiency=0.8)
    assert with_latency == pytest.approx(compute_s + 3.358e-6, rel=1e-12)


def test_fp8_gemm_adds_the_activation_quantisation_pass():
    # h100-sxm fp8_gemm terms (roofline_fits.yaml): 0.5836 of 1,979 TFLOPS, 0.6051 of 3.35 TB/s,
    # 5.949 µs. 512 tokens through gate_proj (4096 -> 14336), 1-byte operands: compute 60.1 GFLOP
    # / 1,155 TFLOP/s = 52.0 µs > memory 61.0 MB / 2.027 TB/s = 30.1 µs; + quantising the input,
    # 3 x 512 x 4096 B / 2.027 TB/s = 3.1 µs.
    compute_s = 2 * 512 * 4096 * 14336 / (1979e12 * 0.5836)
    quant_s = 3 * 512 * 4096 / (3.35e12 * 0.6051)
    assert gemm_time_s(512, 14336, 4096, H100, dtype_bytes=1) == pytest.approx(compute_s + 5.949e-6 + quant_s, rel=1e-12)
    assert compute_s + 5.949e-6 + quant_s == pytest.approx(61.06e-6, rel=1e-3)
    # Ampere has no FP8 tensor cores: weight-only FP8 at the BF16 peak, no activation pass.
    a100 = get_device_spec("a100-80gb")
    weight_only = max(2 * 512 * 4096 * 14336 / (312e12 * 0.7098),
                      (512 * 4096 + 4096 * 14336 + 512 * 14336) / (2.039e12 * 0.6436)) + 4.536e-6
    assert gemm_time_s(512, 14336, 4096, a100, dtype_bytes=1) == pytest.approx(weight_only, rel=1e-12)


def test_small_decode_step_by_hand_kernel_by_kernel():
    # Rates: 100e12 x 0.5 = 50e12 FLOP/s, 1000e9 x 0.5 = 500e9 B/s; every kernel + 2 µs.
    # One decode (q = 1) over 100 cached tokens. All GEMMs at m = 1 are memory-bound:
    qkv = (256 + 256 * 512 + 512) * 2 / 500e9 + 2e-6  # 256 -> 4 x 64 + 2 x 2 x 64 = 512
    o = (256 + 256 * 256 + 256) * 2 / 500e9 + 2e-6
    gate_up = (256 + 256 * 1024 + 1024) * 2 / 500e9 + 2e-6
    down = (512 + 512 * 256 + 256) * 2 / 500e9 + 2e-6
    assert (qkv, o, gate_up, down) == pytest.approx((2.52736e-6, 2.264192e-6, 3.053696e-6, 2.52736e-6))
    linear = 2 * (qkv + o + gate_up + down)
    # Element-wise bytes a token: per layer 2 fused add-norms (4 x 256), rotary on q and k
    # (2 x (256 + 128)), SiLU-mul (3 x 512), all x 2 bytes, + KV-cache write (read and write
    # 2 x 128 at 2 bytes each); per step embedding (2 x 256) + final norm (4 x 256) - layer 0's
    # missing residual (2 x 256), x 2 bytes.
    per_layer_bytes = (2 * 4 * 256 + 2 * (256 + 128) + 3 * 512) * 2 + 2 * 128 * (2 + 2)
    assert per_layer_bytes == 9728
    elementwise = (2 * 9728 + 4 * 256 * 2) / 500e9 + (2 * 5 + 2) * 2e-6  # 5 kernels a layer + 2
    # Attention a layer: 101 query-key pairs x 4 x 4 heads x 64 = 103,424 FLOP (compute 2 ns);
    # bytes = KV read of 101 tokens x (2 x 2 heads x 64 x 2 B) + Q and O (2 x 4 x 64 x 2 B).
    attention = 2 * (max(4 * 4 * 64 * 101 / 50e12, (512 * 101 + 1024) / 500e9) + 2e-6)
    lm_head = (256 + 256 * 1000 + 1000) * 2 / 500e9 + 2e-6
    sampler = 1000 * (2 + 7 * 4) / 500e9 + 6 * 2e-6  # bf16 read + 7 fp32 passes, 6 kernels
    expected = linear + elementwise + attention + lm_head + sampler + 0.1e-3
    assert expected == pytest.approx(164.088192e-6, rel=1e-9)
    cost = RooflineCostModel(SMALL, ROUND_DEVICE)
    assert step(cost, [1], [100], [False]) == pytest.approx(expected, rel=1e-12)
    parts = cost.breakdown(np.array([1]), np.array([100]), np.array([False]))
    assert parts["linear_s"] == pytest.approx(linear, rel=1e-12)
    assert parts["elementwise_s"] == pytest.approx(elementwise, rel=1e-12)
    assert parts["attention_decode_s"] == pytest.approx(attention, rel=1e-12)
    assert parts["all_reduce_s"] == parts["logits_gather_s"] == parts["attention_prefill_s"] == 0.0


def test_small_tp2_all_reduces_by_hand():
    # TP2, a 64-token prefill: 2 x 2 layers + 1 (embedding) all-reduces of 64 x 256 x 2 B, each
    # 10 µs + 2 (2 - 1) / 2 x 32,768 B / (100e9 x 0.5) = 10.65536 µs; the logits all-gather moves
    # (2 - 1) / 2 x 1 row x 1,000 x 2 B: 10 µs + 1000 / 50e9 = 10.02 µs.
    cost = RooflineCostModel(SMALL, ROUND_DEVICE, tensor_parallel_size=2)
    parts = cost.breakdown(np.array([64]), np.array([0]), np.array([True]))
    assert parts["all_reduce_s"] == pytest.approx(5 * 10.65536e-6, rel=1e-12)
    assert parts["logits_gather_s"] == pytest.approx(10.02e-6, rel=1e-12)
    # A TP degree without a fit uses the link's latency (default 10 µs for NVLink) at full bandwidth.
    assert ROUND_DEVICE.all_reduce_terms(4).latency_s == 10e-6
    assert ROUND_DEVICE.all_reduce_terms(4).link_bandwidth_efficiency == 1.0


def test_fitted_all_reduce_on_h100_tp2():
    # roofline_fits.yaml, h100-sxm TP2: 4.301 µs + ring bytes at 0.5962 of 450 GB/s.
    cost = model(tp=2)
    parts = cost.breakdown(np.array([512]), np.array([0]), np.array([True]))
    assert sum(parts.values()) == pytest.approx(step(cost, [512], [0], [True]), rel=1e-12)
    assert parts["attention_decode_s"] == 0.0
    one = 2 * (2 - 1) / 2 * (512 * 4096 * 2) / (450e9 * 0.5962) + 4.301e-6
    assert parts["all_reduce_s"] == pytest.approx((2 * 32 + 1) * one, rel=1e-12)


def test_device_figures_reach_the_model():
    # Efficiencies, launch latency and overhead come from the device unless overridden.
    cost = RooflineCostModel(SMALL, ROUND_DEVICE)
    assert (cost.flops_efficiency, cost.bandwidth_efficiency, cost.kernel_latency_s, cost.step_overhead_s) == \
        (0.5, 0.5, pytest.approx(2e-6), pytest.approx(0.1e-3))
    h100 = RooflineCostModel(LLAMA_3_8B, H100)
    assert (h100.flops_efficiency, h100.bandwidth_efficiency) == (0.7633, 0.7992)


def test_default_decode_is_a_few_ms():
    # Weight-read bound: 16.06e9 B / 3.35e12 B/s = 4.8 ms; with the fitted 80 % of bandwidth,
    # ~450 kernel launches and the host overhead, about 7 ms.
    default = RooflineCostModel(LLAMA_3_8B, H100)
    assert 6e-3 < step(default, [1], [100], [False]) < 8e-3


def test_empty_batch_costs_nothing_and_protocol_holds():
    cost_model = model()
    assert isinstance(cost_model, CostModel)
    assert step(cost_model, [], [], []) == 0.0


def test_misaligned_arrays_rejected():
    with pytest.raises(ValueError, match="must align"):
        step(model(), [1, 1], [10], [False])


def test_bad_efficiency_rejected():
    with pytest.raises(ValueError, match="efficiencies must be in"):
        RooflineCostModel(SMALL, ROUND_DEVICE, flops_efficiency=1.5)


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
    cost = RooflineCostModel(LLAMA_3_8B, H100, tensor_parallel_size=2)
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(1, 40))
        q = np.where(rng.random(n) < 0.7, 1, rng.integers(1, 600, n))
        c = rng.integers(0, 8000, n)
        prefill = (q > 1) & (rng.random(n) < 0.8)
        assert cost.predict_step_s(q, c, prefill) == pytest.approx(sum(cost.breakdown(q, c, prefill).values()),
                                                                    rel=1e-12)


def test_decode_steps_vectorised_equal_one_step_at_a_time():
    # The simulator's decode windows price k steps in one call; each must be the exact float
    # predict_step_s gives for that step (records must not depend on the fast path).
    cost = RooflineCostModel(get_model_spec("llama-2-70b"), H100, tensor_parallel_size=4)
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
    cost = RooflineCostModel(LLAMA_3_8B, H100)
    rng = np.random.default_rng(2)
    for _ in range(200):
        n = int(rng.integers(1, 80))
        prefill = (rng.random(n) < rng.choice([0.0, 0.1, 1.0])).tolist()
        q = [int(rng.integers(1, 900)) if p else int(rng.choice([1, 1, 3])) for p in prefill]
        c = rng.integers(0, 8000, n).tolist()
        as_arrays = cost.predict_step_s(np.array(q), np.array(c), np.array(prefill))
        assert cost.predict_step_s(q, c, prefill) == as_arrays
        assert sum(cost.breakdown(np.array(q), np.array(c), np.array(prefill)).values()) == pytest.approx(as_arrays, rel=1e-12)
