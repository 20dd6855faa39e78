"""Weight offload to host memory (`engine.cpu_offload_gb`, vLLM --cpu-offload-gb;
profiler/weight_offload.py): the bytes vLLM's UVA offloader moves, worked by hand for
Llama-3.1-8B; the KV pool they free; the step time they add; the flag; and bad input."""
from __future__ import annotations

import pytest

from experiments.config import SweepConfig
from experiments.deployment import build_scheduler_config, weight_offload_bytes
from experiments.planning.vllm_flags import vllm_serve_flags
from experiments.point import build_cost_model, cost_model_columns
from profiler import get_device_spec, get_model_spec
from profiler.memory import vllm_kv_pool
from profiler.weight_offload import GIB, layer_parameter_bytes, offloaded_weight_bytes

LLAMA = get_model_spec("llama-3.1-8b")
# One Llama-3.1-8B layer at TP 1, BF16: qkv 4096 x 6144, o 4096 x 4096, gate_up 4096 x 28672,
# down 14336 x 4096, two RMSNorms of 4096.
LAYER = [4096 * 6144 * 2, 4096 * 4096 * 2, 4096 * 28672 * 2, 14336 * 4096 * 2, 8192, 8192]


def point(**engine) -> SweepConfig:
    return SweepConfig.model_validate({
        "model": engine.pop("model", "llama-3.1-8b"), "device": engine.pop("device", "rtx-4090"),
        "cost_model": engine.pop("cost_model", "roofline"),
        "trace": {"kind": "synthetic", "num_requests": 10, "qps": 1, "prompt_tokens": 128, "output_tokens": 8},
        "engine": {"scheduler": "vllm_v1", "chunk_size": 2048, "max_num_seqs": 64, **engine}})


def test_a_layers_parameters_in_vllms_order():
    assert layer_parameter_bytes(LLAMA, 1) == LAYER and sum(LAYER) == 436_224_000


def test_one_gib_moves_two_layers_then_parameters_while_below_the_budget():
    # 2 whole layers (872,448,000 B); then qkv (-> 922,779,648), o (-> 956,334,080), both below
    # 1 GiB = 1,073,741,824, then gate_up (-> 1,191,215,104), which crosses it: the last one moved.
    assert offloaded_weight_bytes(LLAMA, 1, 32, 1.0) == 1_191_215_104


def test_the_rule_equals_vllms_loop_parameter_by_parameter():
    def vllm_loop(budget: float, layers: int) -> int:
        moved = 0
        for _ in range(layers):
            if moved >= budget:
                return moved
            for size in LAYER:
                if moved >= budget:
                    break
                moved += size
        return moved
    for gib in (0.01, 0.4062671, 0.5, 1.0, 3.25, 6.0, 13.0, 15.0, 100.0):
        assert offloaded_weight_bytes(LLAMA, 1, 32, gib) == vllm_loop(gib * GIB, 32), gib
    assert offloaded_weight_bytes(LLAMA, 1, 32, 100.0) == 32 * sum(LAYER)  # never past the layers held
    assert offloaded_weight_bytes(LLAMA, 1, 16, 100.0) == 16 * sum(LAYER)  # a pipeline stage's 16 layers
    assert offloaded_weight_bytes(LLAMA, 1, 32, 0.0) == 0


def test_the_moved_bytes_leave_the_weights_vllm_profiles_and_join_the_kv_pool():
    device = get_device_spec("rtx-4090")
    args = dict(gpu_memory_utilization=0.9, block_size=16, max_num_batched_tokens=2048, max_num_seqs=64)
    plain = vllm_kv_pool(LLAMA, device, **args)
    moved = offloaded_weight_bytes(LLAMA, 1, 32, 6.0)
    offloaded = vllm_kv_pool(LLAMA, device, **args, offloaded_weight_bytes=moved)
    assert offloaded.weights_bytes == plain.weights_bytes - moved
    assert offloaded.available_bytes == plain.available_bytes + moved
    block = 16 * 32 * 2 * 8 * 128 * 2  # 16 tokens x layers x K,V x KV heads x head_dim x bf16 = 2 MiB
    assert offloaded.block_bytes == block
    assert offloaded.num_blocks == (plain.available_bytes + moved) // block
    assert build_scheduler_config(point(cpu_offload_gb=6)).num_gpu_blocks == offloaded.num_blocks - 1  # null block


def test_every_step_reads_the_moved_bytes_over_the_host_link():
    """RTX 4090: PCIe 4.0 x16, 32 GB/s a direction (its device file). 6 GiB (6,442,450,944 B)
    of Llama-3.1-8B: 14 whole layers (6,107,136,000 B), then qkv, o and gate_up stay below the
    budget (6,425,903,104 B) and down crosses it: 6,543,343,616 B, read on every step."""
    moved = offloaded_weight_bytes(LLAMA, 1, 32, 6.0)
    assert moved == 14 * sum(LAYER) + sum(LAYER[:4]) == 6_543_343_616
    plain, offloaded = build_cost_model(point()), build_cost_model(point(cpu_offload_gb=6))
    for q, c, p in (([1], [100], [False]), ([512, 1, 1], [0, 300, 900], [True, False, False])):
        assert offloaded.predict_step_s(q, c, p) == pytest.approx(plain.predict_step_s(q, c, p) + moved / 32e9, rel=1e-12)
    label = cost_model_columns(point(cpu_offload_gb=6), offloaded)["cost_model_label"]
    assert label == (f"roofline; {moved / GIB:.2f} GiB of weights per GPU read from host memory every step "
                     f"(+{moved / 32e9 * 1e3:.1f} ms at 32 GB/s, a lower bound)")
    measured = build_cost_model(point(cpu_offload_gb=6, cost_model="auto"))  # the shipped 4090 tables
    base = build_cost_model(point(cost_model="auto"))
    assert measured.predict_step_s([1], [100], [False]) == pytest.approx(
        base.predict_step_s([1], [100], [False]) + moved / 32e9, rel=1e-12)


def test_the_flag_and_the_settings_column_only_with_offload():
    assert vllm_serve_flags(point(cpu_offload_gb=2.5)).endswith("--cpu-offload-gb 2.5")
    assert "--cpu-offload-gb" not in vllm_serve_flags(point())
    assert point(cpu_offload_gb=2.5).engine.used_settings()["cpu_offload_gb"] == 2.5
    assert "cpu_offload_gb" not in point().engine.used_settings()


@pytest.mark.parametrize("engine, message", [
    ({"model": "qwen3-30b-a3b", "device": "h100-sxm", "cpu_offload_gb": 4},
     "engine.cpu_offload_gb: model 'qwen3-30b-a3b' is a mixture of experts: weight offload of its expert layers is not modelled"),
    ({"quantization": "fp8", "cpu_offload_gb": 4}, "engine.cpu_offload_gb: weight offload of quantised weights"),
    ({"device": "h100-sxm", "cpu_offload_gb": 300},
     "engine.cpu_offload_gb: 300 GiB per GPU exceeds the 256 GiB of host memory per GPU of device 'h100-sxm'"),
])
def test_what_is_not_modelled_is_refused_naming_the_key(engine, message):
    with pytest.raises(ValueError) as error:
        build_scheduler_config(point(**engine))
    assert message in str(error.value)


@pytest.mark.parametrize("value", [-1, float("inf"), float("nan"), "lots"])
def test_a_negative_or_non_finite_budget_is_a_config_error(value):
    with pytest.raises(ValueError, match="cpu_offload_gb"):
        point(cpu_offload_gb=value)


def test_moved_weights_and_the_kv_offload_tier_share_the_host_memory():
    """h100-sxm: 256 GiB of host memory per GPU. At 20 GiB every one of Llama-3.1-8B's 32 layers
    moves: 32 x 436,224,000 B = 13.000488 GiB; with a 242 GiB KV tier that is 255.0005 GiB (fits),
    with 243 GiB 256.0005 GiB, over the 256: refused naming both keys (each alone fits)."""
    assert weight_offload_bytes(point(device="h100-sxm", cpu_offload_gb=20, kv_offload={"cpu_gib": 242})) \
        == 32 * sum(LAYER)
    with pytest.raises(ValueError, match=r"engine\.cpu_offload_gb with engine\.kv_offload\.cpu_gib: 13\.00 GiB of "
                                         r"offloaded weights and 243 GiB of KV tier x 1 DP rank\(s\) exceed the 256 GiB"):
        weight_offload_bytes(point(device="h100-sxm", cpu_offload_gb=20, kv_offload={"cpu_gib": 243}))
