"""MoE pricing (profiler/moe_cost.py), per-rank weights and KV pool (profiler/moe_memory.py), and the
DP / EP layout errors: values worked by hand."""
import pandas as pd
import pytest

from profiler import get_device_spec, get_model_spec
from profiler.memory import vllm_kv_pool
from profiler.model_spec import ModelSpec
from profiler.moe import MoESpec
from profiler.moe_cost import MoEBlockCost, MoECostModel, MoELayout, dp_moe_tokens
from profiler.moe_memory import weight_params_per_rank

QWEN = get_model_spec("qwen3-30b-a3b-instruct-2507")
TINY = ModelSpec("tiny-moe", 2, 1024, 8, 8, 128, 4096, 1000, 4096,
                 moe=MoESpec(num_experts=8, num_experts_per_tok=2, expert_intermediate_size=512))


def test_dp_tokens_padded_in_cuda_graphs_summed_when_eager():
    # vllm/v1/worker/dp_utils.py: every rank padded to the largest when all run graphs.
    assert dp_moe_tokens([100, 60], cuda_graph_max_tokens=256) == 200
    assert dp_moe_tokens([300, 10], cuda_graph_max_tokens=256) == 310


def test_layout_splits_experts_or_widths_over_dp_times_tp():
    ep = MoELayout(QWEN.moe, tensor_parallel_size=1, data_parallel_size=2, enable_expert_parallel=True)
    assert (ep.moe_ep, ep.moe_tp, ep.experts_per_rank) == (2, 1, 64)
    tp = MoELayout(QWEN.moe, tensor_parallel_size=2, data_parallel_size=2, enable_expert_parallel=False)
    assert (tp.moe_ep, tp.moe_tp, tp.experts_per_rank) == (1, 4, 128)
    # EP 3 of 128 experts: vLLM's determine_expert_map gives 43, 43, 42; the busiest rank holds 43
    assert MoELayout(QWEN.moe, 1, 3, True).experts_per_rank == 43
    with pytest.raises(ValueError, match=r"engine.enable_expert_parallel: expert parallel size \(data_parallel_size × "
                                         r"tensor_parallel_size = 16 × 1\) 16 must be from 1 to the model's 8 experts"):
        MoELayout(get_model_spec("mixtral-8x7b").moe, 1, 16, True)
    with pytest.raises(ValueError, match=r"= 3 \(the MoE tensor-parallel degree without enable_expert_parallel\) must "
                                         r"divide the expert width 14336"):
        MoELayout(get_model_spec("mixtral-8x7b").moe, 3, 1, False)
    # A pool's keys (and a bare layout's) are named with the caller's prefix.
    with pytest.raises(ValueError) as pool:
        MoELayout(get_model_spec("mixtral-8x7b").moe, 3, 1, False, key_prefix="cluster.decode.engine.")
    assert str(pool.value) == ("cluster.decode.engine.tensor_parallel_size × data_parallel_size = 3 (the MoE "
                               "tensor-parallel degree without enable_expert_parallel) must divide the expert width "
                               "14336; set cluster.decode.engine.enable_expert_parallel: true or another degree")
    with pytest.raises(ValueError) as bare:
        MoELayout(get_model_spec("mixtral-8x7b").moe, 1, 16, True, key_prefix="")
    assert str(bare.value).startswith("enable_expert_parallel: expert parallel size (data_parallel_size × "
                                      "tensor_parallel_size = 16 × 1) 16 must be from 1")


def test_weights_per_rank_hold_total_parameters():
    experts = 48 * 128 * 3 * 2048 * 768
    assert QWEN.expert_params() == experts == 28_991_029_248
    rest = QWEN.num_params - experts  # attention, router, norms, embedding, LM head: replicated over DP
    assert weight_params_per_rank(QWEN, 1, 2) == rest + experts // 2 == 16_036_608_000
    assert weight_params_per_rank(QWEN, 2, 1) == rest // 2 + experts // 2
    assert weight_params_per_rank(get_model_spec("llama-3-8b"), 2) == 8_030_261_248 // 2


def test_kv_pool_of_the_dp2_ep2_run():
    pool = vllm_kv_pool(QWEN, get_device_spec("rtx-pro-6000"), gpu_memory_utilization=0.9, block_size=16,
                        max_num_batched_tokens=2048, max_num_seqs=128, data_parallel_size=2,
                        enable_expert_parallel=True)
    rotary = 262_144 * 128 * 2
    assert pool.weights_bytes == 16_036_608_000 * 2 + rotary == 32_140_324_864
    # fused-MoE caches of the 2 × 2048 tokens every rank's MoE layer gets in the profile run:
    # 4096 × 8 × (3 × 768 + 2048) + 4 × 2048 × 2048 elements × 2 bytes — below the sampler term here.
    forward = (4096 * 8 * (3 * 768 + 2048) + 4 * 2048 * 2048) * 2
    from profiler.moe_memory import moe_forward_peak_bytes

    assert moe_forward_peak_bytes(QWEN, 2048, 1, 2, enable_expert_parallel=True) == forward  # EP: the whole width
    assert forward < pool.activation_peak_bytes
    assert pool.block_bytes == 16 * 2 * 48 * 4 * 128 * 2


def test_experts_interpolate_the_measured_table_log_log():
    table = pd.DataFrame({"num_tokens": [16, 64], "hidden_size": 1024, "inter_size": 512, "topk": 2, "num_experts": 8,
                          "moe_tp_size": 1, "moe_ep_size": 2, "distribution": "balanced", "time_s": [1e-4, 4e-4]})
    layout = MoELayout(TINY.moe, 1, 2, True)
    block = MoEBlockCost(TINY, get_device_spec("h100-sxm"), layout, moe_table=table, gemm_s=lambda m, n, k: 0.0,
                         kernel_latency_s=0.0)
    assert block._experts(32.0) == (pytest.approx(2e-4), False)  # sqrt(1e-4 × 4e-4)
    t, out = block._experts(128.0)  # past the table: the edge × the roofline's ratio, counted
    assert out and t == pytest.approx(4e-4 * block._experts_roofline_s(128) / block._experts_roofline_s(64))
    with pytest.raises(ValueError, match=r"engine.expert_routing_skew 0.5: the measured MoE tables hold the routings "
                                         r"0 \(balanced\), 1.01 \(power_law_1.01\), 1.2 \(power_law_1.2\)"):
        MoEBlockCost(TINY, get_device_spec("h100-sxm"), layout, 0.5, table)


def test_experts_roofline_by_hand():
    device = get_device_spec("h100-sxm")
    block = MoEBlockCost(TINY, device, MoELayout(TINY.moe), moe_table=None, flops_efficiency=1.0,
                         bandwidth_efficiency=1.0, kernel_latency_s=0.0)
    # one token: 2 pairs, 8 · (1 − 6/8) = 2 experts of 3 · 1024 · 512 = 1,572,864 weights read, plus
    # per pair the hidden in and out and 3 widths of activations: (2 · 1,572,864 + 2 · (2048 + 1536)) · 2 bytes.
    num_bytes = (2 * 1_572_864 + 2 * (2 * 1024 + 3 * 512)) * 2
    assert num_bytes == 6_305_792
    assert block._experts_roofline_s(1) == pytest.approx(num_bytes / device.mem_bandwidth_bytes_per_s)
    # skew: the hottest experts sit on one rank; with 2 ranks and exponent 1 it holds
    # (1 + 1/2 + 1/3 + 1/4) / H_8 = 0.7605 of the pairs.
    skewed = MoEBlockCost(TINY, device, MoELayout(TINY.moe, 1, 2, True), 1.0)
    pairs, _ = skewed._rank_load(100)
    assert pairs == pytest.approx(200 * (1 + 1 / 2 + 1 / 3 + 1 / 4) / sum(1 / i for i in range(1, 9)))


class _Dense:
    """A dense part of 1 ms per token (a stand-in for the attention block's cost model)."""

    def predict_step_s(self, q, c, p):
        return 1e-3 * sum(q)


def test_dp_step_is_the_slowest_rank_plus_the_moe_layers_over_all_tokens():
    block = MoEBlockCost(TINY, get_device_spec("h100-sxm"), MoELayout(TINY.moe, 1, 2, True), moe_table=None)
    dispatch = {"graph": lambda b: (1e-4, False), "eager": lambda b: (2e-4, False)}
    model = MoECostModel(_Dense(), block, dispatch, cuda_graph_max_tokens=256)
    ten = ([1] * 10, [100] * 10, [False] * 10)
    # rank 1 is idle: vLLM's one-token dummy batch; MoE tokens 2 × max(10, 1) = 20 (graph padding)
    assert model.dp_step_s([ten, ([], [], [])]) == pytest.approx(10e-3 + 2 * (block.layer_s(20) + 1e-4))
    big = ([300], [0], [True])  # eager: no padding, 300 + 10 tokens, eager dispatch
    assert model.dp_step_s([big, ten]) == pytest.approx(300e-3 + 2 * (block.layer_s(310) + 2e-4))
    # one engine (no DP): the step's own tokens, no dispatch
    assert model.predict_step_s(*ten) == pytest.approx(10e-3 + 2 * block.layer_s(10))


def test_shipped_tables_price_the_built_in_moe_from_aiconfigurator():
    from experiments.config import SweepConfig
    from experiments.point import build_cost_model

    point = SweepConfig.model_validate({
        "name": "moe", "model": "qwen3-30b-a3b", "device": "rtx-pro-6000",
        "engine": {"scheduler": "vllm_v1", "chunk_size": 2048, "data_parallel_size": 2, "enable_expert_parallel": True},
        "trace": {"kind": "synthetic", "qps": 1, "num_requests": 1, "prompt_tokens": 10, "output_tokens": 10}})
    model = build_cost_model(point)
    assert model.describe()["parts"]["moe_experts"].startswith("aiconfigurator")
    assert "moe_ep 2, balanced" in model.describe()["parts"]["moe_experts"]
    # 16 tokens at EP 2: AIConfigurator's rtx_pro_6000_server row, 0.422395 ms (5 significant digits shipped)
    assert model.block._experts(16.0)[0] == pytest.approx(0.422395e-3, rel=1e-4)


@pytest.mark.parametrize("engine, match", [
    ({"data_parallel_size": 256, "enable_expert_parallel": True}, r"256 must be from 1 to the model's 128 experts"),
    ({"data_parallel_size": 2, "num_gpus": 4}, r"engine.num_gpus is 4 but replicas × data_parallel_size × "
                                               r"tensor_parallel_size × pipeline_parallel_size = 1 × 2 × 1 × 1 = 2"),
    ({"data_parallel_size": 2, "pipeline_parallel_size": 2}, r"with pipeline_parallel_size > 1 is not modelled"),
])
def test_bad_layouts_name_the_key(engine, match):
    from experiments.config import SweepConfig

    with pytest.raises(ValueError, match=match):
        SweepConfig.model_validate({"name": "moe", "model": "qwen3-30b-a3b", "device": "rtx-pro-6000",
                                    "engine": {"scheduler": "vllm_v1", **engine},
                                    "trace": {"kind": "synthetic", "qps": 1, "num_requests": 1, "prompt_tokens": 10,
                                              "output_tokens": 10}})


def test_expert_parallel_on_a_dense_model_is_refused():
    from experiments.config import SweepConfig

    with pytest.raises(ValueError, match=r"engine.enable_expert_parallel: llama-3-8b is a dense model"):
        SweepConfig.model_validate({"name": "d", "model": "llama-3-8b", "device": "h100-sxm",
                                    "engine": {"enable_expert_parallel": True, "data_parallel_size": 2},
                                    "trace": {"kind": "synthetic", "qps": 1, "num_requests": 1, "prompt_tokens": 10,
                                              "output_tokens": 10}})


def test_vllm_serve_flags_of_a_dp_ep_point():
    from experiments.config import SweepConfig
    from experiments.planning.vllm_flags import vllm_serve_command

    point = SweepConfig.model_validate({
        "name": "moe", "model": "qwen3-30b-a3b", "device": "rtx-pro-6000",
        "engine": {"scheduler": "vllm_v1", "chunk_size": 2048, "data_parallel_size": 2, "enable_expert_parallel": True},
        "trace": {"kind": "synthetic", "qps": 1, "num_requests": 1, "prompt_tokens": 10, "output_tokens": 10}})
    command = vllm_serve_command(point)
    assert command.startswith("vllm serve Qwen/Qwen3-30B-A3B ")
    assert "--data-parallel-size 2 --enable-expert-parallel" in command


def test_roofline_prices_an_moe_point_with_active_expert_bytes():
    from experiments.config import SweepConfig
    from experiments.point import build_cost_model

    point = SweepConfig.model_validate({
        "name": "moe", "model": "mixtral-8x7b", "device": "h100-sxm", "cost_model": "roofline",
        "engine": {"scheduler": "vllm_v1", "chunk_size": 2048, "tensor_parallel_size": 2},
        "trace": {"kind": "synthetic", "qps": 1, "num_requests": 1, "prompt_tokens": 10, "output_tokens": 10}})
    model = build_cost_model(point)
    assert model.describe()["parts"]["moe_experts"] == "roofline (active experts' weights)"
    # one decode: 2 of 8 experts active, each 3 × 4096 × 14336 / 2 (TP 2) weights: the step reads
    # 2 × 88 M bf16 weights per layer, ≥ 32 × 352 MB / (3.35 TB/s) = 3.4 ms for the experts alone
    experts_s = 32 * model.block._experts_roofline_s(1)
    assert experts_s >= 32 * 2 * 3 * 4096 * 7168 * 2 / get_device_spec("h100-sxm").mem_bandwidth_bytes_per_s
    assert model.predict_step_s([1], [100], [False]) > experts_s


def test_goodput_per_gpu_divides_by_every_gpu_of_the_layout():
    import pandas as pd

    from experiments.config import SweepConfig
    from experiments.point import report_columns

    point = SweepConfig.model_validate({
        "name": "moe", "model": "qwen3-30b-a3b", "device": "h100-sxm", "goodput": {"ttft_s": 1.0},
        "engine": {"scheduler": "vllm_v1", "chunk_size": 2048, "tensor_parallel_size": 2, "data_parallel_size": 2,
                   "enable_expert_parallel": True},
        "trace": {"kind": "synthetic", "qps": 1, "num_requests": 1, "prompt_tokens": 10, "output_tokens": 10}})
    requests = pd.DataFrame({"ttft_s": [0.5, 0.5, 2.0, 0.1], "tbt_s_max": [0.01] * 4, "finish_reason": ["completed"] * 4})
    columns = report_columns({"makespan_s": 2.0}, requests, point)
    assert columns["goodput_rps"] == pytest.approx(1.5)  # 3 of 4 requests within TTFT 1 s, over 2 s
    assert columns["goodput_rps_per_gpu"] == pytest.approx(1.5 / 4)  # TP 2 × DP 2


def test_ep_remainder_goes_to_the_first_ranks_and_prices_the_busiest():
    from profiler.moe_memory import moe_forward_peak_bytes
    from profiler.moe_routing import rank_expert_counts

    # vLLM determine_expert_map (linear placement): ⌊E / EP⌋ each, one more on the first E mod EP ranks.
    assert rank_expert_counts(60, 8) == [8, 8, 8, 8, 7, 7, 7, 7]
    assert rank_expert_counts(128, 3) == [43, 43, 42]
    # 6 experts of top-2 over EP 4 (2, 2, 1, 1): rank 0 holds 2 of the 6 uniform experts, q = 2/6
    # each, so 3 tokens give it 3 · 2 · 2/6 = 2 pairs on 2 · (1 − (4/6)³) = 38/27 experts.
    six = ModelSpec("six-moe", 2, 1024, 8, 8, 128, 4096, 1000, 4096,
                    moe=MoESpec(num_experts=6, num_experts_per_tok=2, expert_intermediate_size=512))
    layout = MoELayout(six.moe, 1, 4, True)
    assert layout.experts_per_rank == 2
    block = MoEBlockCost(six, get_device_spec("h100-sxm"), layout)
    assert block._rank_load(3) == pytest.approx((2.0, 38 / 27))
    # memory of the busiest GPU: 2 whole experts per layer with EP; 6/4 of one by width without
    expert = 3 * 1024 * 512
    rest = six.num_params - six.expert_params()
    assert weight_params_per_rank(six, 1, 4, enable_expert_parallel=True) == rest + 2 * 2 * expert
    assert weight_params_per_rank(six, 1, 4) == rest + 2 * 6 * expert // 4
    # the fused-MoE caches hold the whole width with EP (MoE TP 1), a quarter of it by width:
    # 4 ranks × 100 tokens × top-2 × (3 × 512 + 1024) + 4 × 100 × 1024 elements, 2 bytes each
    assert moe_forward_peak_bytes(six, 100, 1, 4, enable_expert_parallel=True) == (
        400 * 2 * (3 * 512 + 1024) + 4 * 100 * 1024) * 2
    assert moe_forward_peak_bytes(six, 100, 1, 4) == (400 * 2 * (3 * 128 + 1024) + 4 * 100 * 1024) * 2
