"""Multi-head latent attention and DeepSeek-V3 (profiler/mla.py): the latent KV cache, the pool at TP 8
on an H200, the projections and the work of prefill and absorbed decode (hand-computed values)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from profiler import get_device_spec
from profiler.memory import vllm_kv_pool
from profiler.mla import mla_flops, mla_gemm_shapes, mla_replicated_params
from profiler.model_spec import ModelSpec, get_model_spec
from profiler.moe_memory import weight_params_per_rank
from profiler.roofline import RooflineCostModel, roofline_time_s


def test_deepseek_v3_counts_and_latent_kv_bytes():
    model = get_model_spec("deepseek-v3")
    assert model.num_params == 671_026_820_096  # card: 671 B (MTP module not loaded)
    # 61 layers x (512 + 64) latent elements x 2 bytes, the same on every TP rank.
    assert model.kv_bytes_per_token(2, 1) == model.kv_bytes_per_token(2, 8) == 61 * 576 * 2 == 70_272
    assert get_model_spec("deepseek-r1").kv_bytes_per_token(2, 8) == 70_272
    # Per layer at TP 8 (16 heads): fused_qkv_a replicated, the rest split by heads.
    assert mla_gemm_shapes(model, 8) == (("fused_qkv_a_proj", 7168, 1536 + 576), ("q_b_proj", 1536, 16 * 192),
                                         ("kv_b_proj", 512, 16 * 256), ("o_proj", 16 * 128, 7168))
    assert mla_replicated_params(model) == 61 * 7168 * 2112


def test_deepseek_v3_pool_at_tp8_on_h200_by_hand():
    model, device = get_model_spec("deepseek-v3"), get_device_spec("h200")
    pool = vllm_kv_pool(model, device, gpu_memory_utilization=0.9, block_size=16, max_num_batched_tokens=8192,
                        max_num_seqs=1024, tensor_parallel_size=8)
    # Per rank: 1/8 of the 17,118,049,280 non-expert and 653,908,770,816 expert parameters, plus 7/8 of
    # the replicated fused_qkv_a_proj (923,467,776 x 7/8 = 808,034,304).
    assert weight_params_per_rank(model, 8) == 17_118_049_280 // 8 + 653_908_770_816 // 8 + 808_034_304
    # FP8 blocks: 84,441,235,456 quantised weights at 1 + 4/128^2 bytes, 245,151,360 others at 2,
    # the rotary cache 163,840 x 64 x 2.
    quantized = 653_908_770_816 // 8 + 15_156_838_400 // 8 + 808_034_304
    assert pool.weights_bytes == (84_686_386_816 - quantized) * 2 + quantized + quantized // 4096 + 163_840 * 128
    assert pool.block_bytes == 16 * 70_272 == 1_124_352
    assert pool.num_blocks == pool.available_bytes // 1_124_352 == 40_714  # 651,424 tokens per rank


def test_mla_flops_per_pair_by_hand():
    model = get_model_spec("deepseek-v3")
    # TP 8, 16 heads: prefill 2 x 16 x (192 + 128); decode 2 x 16 x (2 x 512 + 64); context up-projection
    # 2 x 512 x 16 x (128 + 128) per context token.
    assert mla_flops(model, 8) == (10_240.0, 34_816.0, 4_194_304.0)


def test_mla_decode_attention_is_the_latent_roofline():
    model, device = get_model_spec("deepseek-v3"), get_device_spec("h200")
    cost = RooflineCostModel(model, device, tensor_parallel_size=8)
    context = 100_000
    got = cost.breakdown(np.ones(1, dtype=int), np.array([context]), np.zeros(1, dtype=bool))["attention_decode_s"]
    # One decode: 100,001 pairs at 34,816 FLOPs; 100,001 latents of 1,152 bytes read plus Q in and O out
    # (2 x 16 heads x 192 x 2 bytes), in each of 61 layers.
    one_layer = roofline_time_s(34_816.0 * 100_001, 1_152.0 * 100_001 + 12_288.0, cost._attn_flops_per_s,
                                cost._attn_bytes_per_s) + cost._attn_latency_s + cost._attn_per_seq_s
    assert got == pytest.approx(61 * one_layer, rel=1e-12)


def test_mla_fields_are_checked():
    with pytest.raises(ValueError, match="multi-head latent attention needs 0 < qk_rope_head_dim < head_dim"):
        ModelSpec("bad", 2, 256, 4, 4, 64, 512, 1000, 4096, kv_lora_rank=64, qk_rope_head_dim=64, v_head_dim=64)
    with pytest.raises(ValueError, match="num_dense_layers 1 must be below num_layers and only on a mixture"):
        ModelSpec("bad", 2, 256, 4, 4, 64, 512, 1000, 4096, num_dense_layers=1)


def test_kimi_k2_counts_and_kv_bytes():
    model = get_model_spec("kimi-k2")
    # Per layer: MLA 7168 x 2112 + 1536 x 12288 + 512 x 16384 + 8192 x 7168 and norms 2 x 7168 + 1536 + 512;
    # 1 dense MLP 3 x 7168 x 18432; 60 MoE layers of 384 experts + 1 shared of 3 x 7168 x 2048 and a router
    # 7168 x 384 (+ 7168, the shared expert's gate as MoESpec counts it); embedding and LM head 163840 x 7168.
    attention = 61 * (7168 * 2112 + 1536 * 12288 + 512 * 16384 + 8192 * 7168 + 2 * 7168 + 1536 + 512)
    expert, router = 3 * 7168 * 2048, 7168 * 384 + 7168
    rest = attention + 3 * 7168 * 18432 + 2 * 163840 * 7168 + 7168
    assert model.num_params == rest + 60 * (385 * expert + router) == 1_026_408_639_488  # card: 1 T
    assert model.num_active_params == rest + 60 * (9 * expert + router) == 32_861_907_968  # card: 32 B activated
    assert model.kv_bytes_per_token(2, 8) == 70_272  # the same latent as DeepSeek-V3


# config.json of deepseek-ai/DeepSeek-V3 (huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json) and
# moonshotai/Kimi-K2-Instruct (huggingface.co/moonshotai/Kimi-K2-Instruct/blob/main/config.json): the keys
# read and the routing keys, copied into tests/data/models/ (auto_map, token ids and rope_scaling left out).
MODELS = Path(__file__).parent / "data" / "models"


@pytest.mark.parametrize("folder, builtin", [("deepseek-v3", "deepseek-v3"), ("kimi-k2-instruct", "kimi-k2")])
def test_public_mla_config_json_reads_as_its_builtin(folder, builtin):
    spec, expected = get_model_spec(MODELS / folder), get_model_spec(builtin)
    assert dataclasses.replace(spec, name=expected.name, quantization=expected.quantization) == expected
    assert (spec.quantization.method, spec.quantization.kernel) == ("fp8", "fp8_block")
    # head_dim = qk_nope 128 + qk_rope 64; the shared MLP = 1 x moe_intermediate_size.
    assert (spec.head_dim, spec.moe.shared_expert_intermediate_size, spec.q_lora_rank) == (192, 2048, 1536)


def test_mla_config_fields_the_spec_cannot_describe_are_refused(tmp_path):
    config = json.loads((MODELS / "deepseek-v3" / "config.json").read_text())
    for change, match in (({"moe_layer_freq": 2}, r"moe_layer_freq=2"),
                          ({"kv_lora_rank": None}, r"missing required key 'kv_lora_rank'"),
                          ({"attention_bias": True}, r"attention_bias=True \(biases on every attention projection"),
                          ({"num_local_experts": 8}, r"num_local_experts=8 .*model_type 'deepseek_v3' does not read"),
                          # were read: 0 priced plain attention (702.6 B), -512 a negative latent (668.5 B)
                          ({"kv_lora_rank": 0}, r"config.json: kv_lora_rank must be > 0 .*got 0"),
                          ({"kv_lora_rank": -512}, r"config.json: kv_lora_rank must be > 0 .*got -512"),
                          ({"q_lora_rank": -1}, r"config.json: q_lora_rank must be >= 0 or null .*got -1")):
        (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(ValueError, match=match):
            get_model_spec(tmp_path)
    # A V3-shaped config without the query low-rank projection (q_lora_rank null): queries from hidden.
    (tmp_path / "config.json").write_text(json.dumps({**config, "q_lora_rank": None}))
    assert get_model_spec(tmp_path).q_lora_rank == 0
