"""CUDA graphs as vLLM 0.19 uses them (profiler/cuda_graphs.py): its capture-size list for a sequence
cap and token budget, the padded count of a step, and the measured cost model pricing a step's
token-count parts at that count, on the synthetic power-law tables of test_measured_cost_model
(GEMM time = 1e-12 s per m·n·k, graph all-reduce 1 ns per byte), so every value is worked by hand."""
from __future__ import annotations

import pytest

from profiler.cuda_graphs import capture_sizes_up_to, cudagraph_capture_sizes, padded_tokens
from profiler.measured.cost_model import MeasuredCostModel
from tests.test_measured_cost_model import C_GEMM, DEVICE, TOY, elementwise_s, synthetic_tables

# TOY's four layer GEMMs per token (n · k): qkv 256 → 512, o 256 → 256, gate_up 256 → 1024, down 512 → 256.
GEMM_NK = 256 * 512 + 256 * 256 + 256 * 1024 + 512 * 256


def test_capture_sizes_follow_vllms_rule():
    # max_num_seqs 256, budget 8192: min(256 × 2, 512) = 512: [1, 2, 4], 8..248 by 8 (31), 256..512 by 16 (17).
    sizes = cudagraph_capture_sizes(256, 8192)
    assert sizes[:5] == (1, 2, 4, 8, 16) and sizes[-3:] == (480, 496, 512) and len(sizes) == 3 + 31 + 17
    # max_num_seqs 130: 260 is not on the 16-token stride, so the list (and vLLM's max) ends at 256.
    assert cudagraph_capture_sizes(130, 8192)[-2:] == (248, 256)
    # AIConfigurator's generator flags at N = 8 (max_num_seqs 8, budget 2,540): 16 tokens at most.
    assert cudagraph_capture_sizes(8, 2540) == (1, 2, 4, 8, 16)
    assert cudagraph_capture_sizes(1024, 100) == (1, 2, 4, *range(8, 97, 8))  # at most the budget
    assert cudagraph_capture_sizes(64, 8192, num_speculative_tokens=3)[-1] == 512  # 64 × 4 × 2
    assert capture_sizes_up_to(0) == ()  # enforce_eager: nothing captured
    with pytest.raises(ValueError, match="cuda_graph_max_tokens"):
        capture_sizes_up_to(-1)


def test_padded_tokens_is_the_next_capture_size():
    sizes = capture_sizes_up_to(512)
    assert [padded_tokens(t, sizes) for t in (1, 3, 5, 17, 24, 255, 257, 500, 512)] == [1, 4, 8, 24, 24, 256, 272, 512, 512]
    assert padded_tokens(513, sizes) == 513  # above the largest: eager, unpadded
    assert padded_tokens(17, ()) == 17  # no graphs


def test_a_17_token_decode_step_runs_its_gemms_and_element_wise_at_24():
    model = MeasuredCostModel([synthetic_tables()], TOY, DEVICE)
    parts = model.breakdown([1] * 17, [63] * 17, [False] * 17)
    assert parts["gemm_s"] == pytest.approx(2 * C_GEMM * 24 * GEMM_NK, rel=1e-9)
    # Per layer: 2 RMSNorms (8 B × 256), rotary (4 B × 384), SiLU·mul (6 B × 512); per step embedding, final norm.
    ew = (2 * (2 * elementwise_s(24 * 8 * 256) + elementwise_s(24 * 4 * 384) + elementwise_s(24 * 6 * 512))
          + elementwise_s(24 * 4 * 256) + elementwise_s(24 * 8 * 256))
    assert parts["elementwise_s"] == pytest.approx(ew, rel=1e-9)
    # The LM head and the sampler see the 17 real rows, not the padding.
    assert parts["lm_head_s"] == pytest.approx(C_GEMM * 17 * 1024 * 256, rel=1e-9)
    assert parts["sampler_s"] == pytest.approx(elementwise_s(3 * 17 * 1024 * 4), rel=1e-9)
    assert model.predict_step_s([1] * 17, [63] * 17, [False] * 17) == pytest.approx(sum(parts.values()), rel=1e-12)
    # A mixed step of the same 17 tokens (a 9-token chunk and 8 decodes) pads alike (PIECEWISE graphs).
    assert model.breakdown([9] + [1] * 8, [0] + [63] * 8, [True] + [False] * 8)["gemm_s"] == pytest.approx(parts["gemm_s"])


def test_all_reduces_at_the_padded_count_in_graph_mode_and_unpadded_above():
    model = MeasuredCostModel([synthetic_tables()], TOY, DEVICE, tensor_parallel_size=2)
    # 17 tokens → 24 × 256 hidden × 2 bytes = 12,288 bytes → 12.288 µs each, 2 per layer, 2 layers.
    assert model.breakdown([1] * 17, [100] * 17, [False] * 17)["all_reduce_s"] == pytest.approx(4 * 12.288e-6)
    # Largest capture size 16 (max_num_seqs 8): 17 tokens run eagerly at 17 (the synthetic table's graph
    # rows stand in for eager ones): 8,704 bytes → 8.704 µs each; GEMMs at m = 17.
    eager = MeasuredCostModel([synthetic_tables()], TOY, DEVICE, tensor_parallel_size=2, cuda_graph_max_tokens=16)
    parts = eager.breakdown([1] * 17, [100] * 17, [False] * 17)
    assert parts["all_reduce_s"] == pytest.approx(4 * 8.704e-6)
    assert eager.describe()["cuda_graph_max_tokens"] == 16


def test_a_step_above_the_largest_capture_size_is_unpadded():
    model = MeasuredCostModel([synthetic_tables()], TOY, DEVICE, cuda_graph_max_tokens=300)
    assert model.cuda_graph_max_tokens == 288  # the list's last size: vLLM's max_cudagraph_capture_size
    assert model.breakdown([290], [0], [True])["gemm_s"] == pytest.approx(2 * C_GEMM * 290 * GEMM_NK, rel=1e-9)
    assert model.breakdown([260], [0], [True])["gemm_s"] == pytest.approx(2 * C_GEMM * 272 * GEMM_NK, rel=1e-9)
    no_graphs = MeasuredCostModel([synthetic_tables()], TOY, DEVICE, cuda_graph_max_tokens=0)
    assert no_graphs.breakdown([1] * 17, [63] * 17, [False] * 17)["gemm_s"] == pytest.approx(2 * C_GEMM * 17 * GEMM_NK)


def test_enforce_eager_is_a_point_without_graphs_and_its_flag():
    """engine.enforce_eager (vLLM --enforce-eager): the point's measured cost model captures
    nothing (largest capture size 0: a 17-token decode step's GEMMs at m = 17), the command
    carries the flag, and the settings column appears only when it is set."""
    from experiments.config import SweepConfig
    from experiments.planning.vllm_flags import vllm_serve_flags
    from experiments.point import build_cost_model

    def point(**engine):
        return SweepConfig.model_validate({
            "model": "llama-3-8b", "device": "h100-sxm", "cost_model": "auto",
            "trace": {"kind": "synthetic", "num_requests": 10, "qps": 1, "prompt_tokens": 64, "output_tokens": 4},
            "engine": {"scheduler": "vllm_v1", "chunk_size": 2048, "max_num_seqs": 64, **engine}})
    graphs, eager = build_cost_model(point()), build_cost_model(point(enforce_eager=True))
    assert graphs.cuda_graph_max_tokens == 128 and eager.cuda_graph_max_tokens == 0  # min(2 × 64, 512)
    assert eager.breakdown([1] * 17, [63] * 17, [False] * 17)["gemm_s"] < graphs.breakdown(
        [1] * 17, [63] * 17, [False] * 17)["gemm_s"]  # 17 rows against 24 padded
    assert eager.breakdown([1] * 24, [63] * 24, [False] * 24)["gemm_s"] == pytest.approx(
        graphs.breakdown([1] * 17, [63] * 17, [False] * 17)["gemm_s"], rel=1e-12)  # 24 rows: the padded count
    assert "--enforce-eager" in vllm_serve_flags(point(enforce_eager=True)).split()
    assert "--enforce-eager" not in vllm_serve_flags(point()).split()
    assert point(enforce_eager=True).engine.used_settings()["enforce_eager"] is True
    assert "enforce_eager" not in point().engine.used_settings()
    # Eager launch overhead is not modelled: the label says the steps are a lower bound.
    from experiments.point import cost_model_columns
    assert cost_model_columns(point(enforce_eager=True), eager)["cost_model_label"].endswith(
        "; enforce_eager: no CUDA-graph padding, but eager kernel-launch overhead is not modelled, so step times "
        "are a lower bound")
    assert "enforce_eager" not in cost_model_columns(point(), graphs)["cost_model_label"]
