"""Sliding-window attention: the layer pattern each config family spells, the windowed work, vLLM's
KV cache groups and the blocks a windowed group keeps (hand-computed values)."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from profiler import get_device_spec
from profiler.kv_cache_groups import KVCacheGroups, kv_cache_groups
from profiler.model_spec import ModelSpec, get_model_spec
from profiler.roofline import RooflineCostModel
from profiler.sliding_window import layer_pattern, read_sliding_window, windowed_kv_tokens, windowed_pairs
from simulator.scheduler import SchedulerConfig, StepOutcome, make_scheduler
from simulator.scheduler.hybrid_block_manager import HybridBlockManager
from traces import Request

GPT_OSS_TYPES = ["sliding_attention", "full_attention"] * 18  # openai/gpt-oss-120b config.json


def test_layer_pattern_as_each_family_spells_it(tmp_path):
    path = tmp_path / "config.json"
    base = {"num_hidden_layers": 36, "sliding_window": 128, "max_position_embeddings": 131072}
    assert read_sliding_window({**base, "layer_types": GPT_OSS_TYPES}, path) == (128, 18)
    # Gemma-3: layer i windowed unless (i + 1) % 6 == 0 -> 62 layers, full at 5, 11, ..., 59: 10 full.
    gemma = {"num_hidden_layers": 62, "sliding_window": 1024, "sliding_window_pattern": 6}
    pattern = layer_pattern(gemma, path)
    assert [i for i, s in enumerate(pattern) if not s] == [5, 11, 17, 23, 29, 35, 41, 47, 53, 59]
    # Qwen2: use_sliding_window with max_window_layers 30 of 36: layers 30..35.
    assert read_sliding_window({**base, "use_sliding_window": True, "max_window_layers": 30}, path) == (128, 6)
    assert read_sliding_window({**base, "use_sliding_window": False}, path) == (0, 0)
    # Mistral (no use_sliding_window): every layer; a window as long as the context: full attention.
    assert read_sliding_window(base, path) == (128, 36)
    assert read_sliding_window({**base, "sliding_window": 131072}, path) == (0, 0)


@pytest.mark.parametrize("extra, match", [
    ({"layer_types": ["chunked_attention"] * 4}, r"layer_types names \['chunked_attention'\]"),
    ({"layer_types": ["full_attention"] * 3}, r"layer_types must list one entry per layer \(4\)"),
    ({"layer_types": ["sliding_attention"] * 4, "sliding_window": None}, r"layer_types has sliding_attention layers but sliding_window is not set"),
    ({"sliding_window_pattern": 0}, r"sliding_window_pattern must be a whole number >= 1"),
    ({"layer_types": ["sliding_attention"] * 4, "sliding_window_pattern": 2}, r"sliding_window_pattern=2 disagrees with layer_types"),
])
def test_bad_layer_patterns_name_the_file_and_field(tmp_path, extra, match):
    config = {"num_hidden_layers": 4, "sliding_window": 8, **extra}
    with pytest.raises(ValueError, match=rf"config\.json: {match}"):
        layer_pattern(config, tmp_path / "config.json")


def test_a_config_json_with_layer_types_reads_into_the_spec(tmp_path):
    config = {"model_type": "qwen3", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
              "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 4096, "sliding_window": 64,
              "use_sliding_window": True,
              "layer_types": ["sliding_attention", "full_attention"] * 2, "attn_logit_softcapping": 50.0}
    (tmp_path / "config.json").write_text(json.dumps(config))
    spec = get_model_spec(tmp_path)
    assert (spec.sliding_window, spec.num_sliding_layers, spec.attn_logit_softcapping) == (64, 2, 50.0)


def test_windowed_pairs_and_kv_tokens_by_hand():
    q, c = np.array([1.0, 4.0, 1.0]), np.array([99_999.0, 2.0, 10.0])
    # decode over 100,000 KV tokens, window 128: 128 keys; chunk of 4 after 2 tokens, window 4:
    # keys 3, 4, 4, 4 = 15; decode at position 10 (11 keys < window): 11.
    assert windowed_pairs(q, c, 128).tolist() == [128, 3 + 4 + 5 + 6, 11]
    assert windowed_pairs(q, c, 4).tolist() == [4, 15, 4]
    assert windowed_kv_tokens(q, c, 4).tolist() == [4, 6, 4]  # chunk: positions 0..5 (min(6, 3 + 4))


def test_kv_cache_groups_as_vllm_forms_them():
    oss = ModelSpec("oss", 36, 2880, 64, 8, 64, 2880, 201088, 131072, sliding_window=128, num_sliding_layers=18)
    assert kv_cache_groups(oss) == KVCacheGroups(18, 1, 1, 128)
    assert kv_cache_groups(oss, hybrid=False) == KVCacheGroups(36, 1, 0)
    assert kv_cache_groups(get_model_spec("gemma-3-27b")) == KVCacheGroups(10, 1, 6, 1024)  # 8 padding layers
    # gpt-oss-20b + EAGLE: 12 sliding + 13 full, 13 < 1.5 x 12 -> groups of 13 (vLLM's comment).
    eagle = dataclasses.replace(oss, num_layers=25, num_sliding_layers=12)
    assert kv_cache_groups(eagle) == KVCacheGroups(13, 1, 1, 128)
    every = dataclasses.replace(oss, num_sliding_layers=36)
    assert kv_cache_groups(every) == KVCacheGroups(36, 0, 1, 128)


def test_blocks_a_long_request_holds_in_a_windowed_group():
    groups = KVCacheGroups(18, 1, 1, 128)
    # 100,000 computed, a slot for the next: table ceil(100,001 / 16) = 6,251; skipped
    # 100,000 - 128 + 1 = 99,873 tokens = 6,242 whole blocks freed: 9 held.
    assert groups.sliding_blocks_held(100_001, 100_000, 16) == 9
    assert groups.blocks_held(100_001, 100_000, 16) == 6_251 + 9
    assert groups.sliding_blocks_held(100, 100, 16) == 7  # 100 - 128 + 1 < 0: nothing skipped


def test_kv_pool_of_a_hybrid_model_counts_one_groups_layers_per_block():
    from profiler.memory import vllm_kv_pool

    model = get_model_spec("gemma-3-27b")
    device = get_device_spec("h200")
    kw = dict(gpu_memory_utilization=0.9, block_size=16, max_num_batched_tokens=8192, max_num_seqs=256)
    uniform = vllm_kv_pool(model, device, **kw)
    hybrid = vllm_kv_pool(model, device, kv_groups=kv_cache_groups(model), **kw)
    # One layer's page: 16 tokens x 2 x 16 KV heads x 128 x 2 bytes = 131,072; 62 layers vs a group's 10.
    assert (uniform.block_bytes, hybrid.block_bytes) == (62 * 131_072, 10 * 131_072)
    assert hybrid.num_blocks == hybrid.available_bytes // (10 * 131_072)


def test_windowed_decode_attention_is_the_full_cost_at_the_window():
    # Decode over 100,000 tokens: a windowed layer reads 128 keys, exactly a full layer's decode
    # at context 127; the full layers are unchanged.
    device = get_device_spec("h100-sxm")
    full = ModelSpec("dense", 36, 2880, 64, 8, 64, 2880, 201088, 131072)
    windowed = dataclasses.replace(full, sliding_window=128, num_sliding_layers=18)
    ones, no = np.ones(1, dtype=int), np.zeros(1, dtype=bool)

    def decode_s(model, context):
        return RooflineCostModel(model, device).breakdown(ones, np.array([context]), no)["attention_decode_s"]

    expected = decode_s(full, 100_000) / 2 + decode_s(full, 127) / 2
    assert decode_s(windowed, 100_000) == pytest.approx(expected, rel=1e-12)
    cost = RooflineCostModel(windowed, device)
    assert cost.predict_decode_steps_s([100, 200], 2, first_step=1) == [
        cost.predict_step_s([1, 1], [101, 201], [False, False]), cost.predict_step_s([1, 1], [102, 202], [False, False])]


def test_hybrid_block_manager_frees_behind_the_window():
    bm = HybridBlockManager(100, 16, 0.0, num_full_groups=1, num_sliding_groups=2, sliding_window=32)
    bm.grow_to(7, 100)  # 7 blocks in each of 3 groups
    assert (bm.blocks_held(7), bm.num_free) == (21, 79)
    bm.remove_skipped_blocks(7, 100)  # skipped 100 - 32 + 1 = 69 tokens: 4 blocks in each sliding group
    assert (bm.blocks_held(7), bm.num_free) == (13, 87)
    assert not bm.try_grow_to(7, 100 + 16 * 30)  # 30 more blocks x 3 groups > 87 free
    assert bm.try_grow_to(7, 113) and bm.blocks_held(7) == 16  # table 7 -> 8 (113 tokens) in 3 groups
    bm.free(7)
    assert bm.num_free == 100


def test_vllm_v1_with_a_windowed_group_holds_blocks_as_vllm():
    # 1 full + 1 windowed group, window 32, blocks of 16: a 64-token prompt takes 4 + 4 blocks; the
    # first decode (computed 64: 33 skipped = 2 blocks freed) grows the table to 5: 5 + 3 = 8.
    config = SchedulerConfig(num_gpu_blocks=100, block_size=16, max_model_len=1024, chunk_size=256,
                             enable_prefix_caching=False, kv_groups=(1, 1, 32))
    scheduler = make_scheduler("vllm_v1", config)
    scheduler.add_request(Request(0, 0.0, 64, 40))
    used = []
    for step in range(40):
        plan = scheduler.schedule(step * 0.01)
        used.append(plan.kv_blocks_used)
        scheduler.complete_step(plan, StepOutcome.without_speculation(plan), step * 0.01 + 0.01)
    assert used[:2] == [8, 8]
    # At the last decode: computed 102, slots 103 -> table 7; skipped 71 -> 4 freed: 7 + 3 = 10.
    assert used[-1] == 10


def test_windowed_kv_groups_are_refused_where_not_modelled():
    # Prefix caching with windowed groups is modelled (tests/test_hybrid_prefix_cache.py); a draft
    # model's lookahead slots are not.
    with pytest.raises(ValueError, match="lookahead slots with sliding-window layers"):
        make_scheduler("vllm_v1", SchedulerConfig(num_gpu_blocks=100, chunk_size=256, kv_groups=(1, 1, 32),
                                                  split_n=2, num_lookahead_tokens=2))
    with pytest.raises(ValueError, match="only vllm_v1 runs vLLM's hybrid KV cache manager"):
        make_scheduler("sarathi", SchedulerConfig(num_gpu_blocks=100, chunk_size=256, kv_groups=(1, 1, 32)))


# openai/gpt-oss-120b config.json (huggingface.co/openai/gpt-oss-120b/raw/main/config.json), the keys read.
GPT_OSS_120B = {
    "architectures": ["GptOssForCausalLM"], "attention_bias": True, "experts_per_token": 4, "head_dim": 64,
    "hidden_act": "silu", "hidden_size": 2880, "initial_context_length": 4096, "intermediate_size": 2880,
    "layer_types": GPT_OSS_TYPES, "max_position_embeddings": 131072, "model_type": "gpt_oss",
    "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 36, "num_key_value_heads": 8,
    "num_local_experts": 128, "quantization_config": {
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                   "lm_head"], "quant_method": "mxfp4"},
    "rms_norm_eps": 1e-05, "rope_theta": 150000, "sliding_window": 128, "swiglu_limit": 7.0,
    "tie_word_embeddings": False, "vocab_size": 201088}


def test_gpt_oss_config_json_reads_as_its_builtin(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(GPT_OSS_120B))
    spec = get_model_spec(tmp_path)
    builtin = get_model_spec("gpt-oss-120b")
    assert dataclasses.replace(spec, name=builtin.name, quantization=builtin.quantization) == builtin
    assert (spec.quantization.method, spec.quantization.bytes_per_param) == ("mxfp4", 0.53125)


def test_gpt_oss_120b_kv_bytes_and_pool_on_one_h100_by_hand():
    from profiler.memory import vllm_kv_pool

    model, device = get_model_spec("gpt-oss-120b"), get_device_spec("h100-sxm")
    # 2 (K, V) x 36 layers x 8 KV heads x 64 x 2 bytes = 73,728 bytes a token; 2,048 a layer.
    assert model.kv_bytes_per_token(2, 1) == 73_728
    pool = vllm_kv_pool(model, device, gpu_memory_utilization=0.9, block_size=16, max_num_batched_tokens=8192,
                        max_num_seqs=256, kv_groups=kv_cache_groups(model))
    # Weights: 2,127,557,952 non-expert parameters x 2 bytes + 114,701,598,720 expert weights x
    # 0.53125 (MXFP4: 4 bits + an 8-bit scale per 32) + the rotary cache 131,072 x 64 x 2 bytes.
    assert pool.weights_bytes == 2_127_557_952 * 2 + 114_701_598_720 * 17 // 32 + 131_072 * 64 * 2 == 65_207_117_440
    # A block is one group's: 16 tokens x 2,048 bytes x 18 layers = 589,824 bytes.
    assert pool.block_bytes == 589_824
    # requested = ceil(85,029,615,042 x 0.9) (h100-sxm's CUDA total): 76,526,653,538.
    assert pool.requested_bytes == 76_526_653_538
    available = pool.requested_bytes - pool.weights_bytes - pool.activation_peak_bytes - pool.non_torch_bytes
    assert pool.num_blocks == available // 589_824 == 17_079  # vLLM logs 17,079 // 2 x 16 = 136,624 tokens


def test_gpt_oss_long_context_decode_attention_with_and_without_windows():
    # One decode over 100,000 tokens: the 18 windowed layers cost what a full layer costs at context
    # 127; the same model with all 36 layers full pays 100,001 tokens in every layer.
    model, device = get_model_spec("gpt-oss-120b"), get_device_spec("h100-sxm")
    dense = dataclasses.replace(model, sliding_window=0, num_sliding_layers=0)
    ones, no = np.ones(1, dtype=int), np.zeros(1, dtype=bool)

    def decode_s(spec, context):
        return RooflineCostModel(spec, device).breakdown(ones, np.array([context]), no)["attention_decode_s"]

    assert decode_s(model, 100_000) == pytest.approx((decode_s(dense, 100_000) + decode_s(dense, 127)) / 2, rel=1e-12)


def test_mxfp4_on_a_dense_model_is_refused(tmp_path):
    config = {**GPT_OSS_120B, "model_type": "qwen3", "layer_types": None, "sliding_window": None,
              "attention_bias": False}
    for key in ("num_local_experts", "num_experts_per_tok"):
        del config[key]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"config\.json: .*mxfp4 .*quantises mixture-of-experts experts only"):
        get_model_spec(tmp_path)


def test_serve_command_turns_prefix_caching_off_as_simulated():
    from experiments.config import SweepConfig
    from experiments.planning.vllm_flags import vllm_serve_flags

    point = SweepConfig.model_validate({"name": "x", "model": "gpt-oss-120b", "device": "h100-sxm",
                                        "trace": {"kind": "profile", "name": "azure-conv", "qps": 1, "num_requests": 8},
                                        "engine": {"scheduler": "vllm_v1", "enable_prefix_caching": False}})
    assert "--no-enable-prefix-caching" in vllm_serve_flags(point).split()


@pytest.mark.parametrize("name, feature", [("gemma-3-27b", "4 norms per layer"),
                                           ("deepseek-v3", "multi-head latent attention")])
def test_the_engine_refuses_attention_it_does_not_implement(name, feature):
    pytest.importorskip("torch")
    from gpu_engine.model import ModelArgs

    with pytest.raises(ValueError, match=f"has .*{feature}.*which the engine does not implement"):
        ModelArgs.for_builtin(get_model_spec(name))


def test_the_engine_takes_gpt_oss_with_its_alternating_windows():
    # gpt-oss's layer (sinks, biases, biased experts) runs in the engine (tests/test_engine_gpt_oss.py);
    # the built-in's windowed layers are config.json's: 0, 2, 4, ... of 36 (18).
    pytest.importorskip("torch")
    from gpu_engine.model import ModelArgs

    args = ModelArgs.for_builtin(get_model_spec("gpt-oss-120b"))
    assert args.layer_windows[:4] == (128, 0, 128, 0) and sum(map(bool, args.layer_windows)) == 18
    assert args.rope_theta == 150000.0


def test_a_qwen_config_without_use_sliding_window_is_full_attention(tmp_path):
    """transformers' Qwen config classes default use_sliding_window to False and then drop the
    window, so a Qwen config.json with `sliding_window` (even `layer_types`) but no
    use_sliding_window is full attention in vLLM: no windowed layer. A Mistral one is windowed."""
    path = tmp_path / "config.json"
    base = {"num_hidden_layers": 4, "sliding_window": 8, "max_position_embeddings": 4096}
    for model_type in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        assert read_sliding_window({**base, "model_type": model_type}, path) == (0, 0)
        assert read_sliding_window({**base, "model_type": model_type,
                                    "layer_types": ["sliding_attention", "full_attention"] * 2}, path) == (0, 0)
        assert read_sliding_window({**base, "model_type": model_type, "use_sliding_window": True,
                                    "max_window_layers": 1}, path) == (8, 3)
    assert read_sliding_window({**base, "model_type": "mistral"}, path) == (8, 4)


def test_a_qwen_config_with_use_sliding_window_but_no_first_layer_is_refused(tmp_path):
    """use_sliding_window true with neither layer_types nor max_window_layers: the windowed layers
    would be the config class's default, not the file's; the error names the file and field."""
    config = {"model_type": "qwen2", "num_hidden_layers": 4, "sliding_window": 8, "use_sliding_window": True}
    with pytest.raises(ValueError, match=r"config\.json: use_sliding_window is true but max_window_layers is not set"):
        layer_pattern(config, tmp_path / "config.json")


def test_an_omitted_window_field_takes_the_transformers_class_default(tmp_path):
    """MistralConfig's sliding_window defaults to 4096 (every layer); GptOssConfig's to 128 with
    layer_types alternating from a windowed layer 0: of 24 layers, 12 windowed. An explicit null
    window is full attention for both."""
    path = tmp_path / "config.json"
    base = {"num_hidden_layers": 24, "max_position_embeddings": 131072}
    assert read_sliding_window({**base, "model_type": "mistral"}, path) == (4096, 24)
    assert read_sliding_window({**base, "model_type": "mistral", "sliding_window": None}, path) == (0, 0)
    assert read_sliding_window({**base, "model_type": "gpt_oss"}, path) == (128, 12)
    assert layer_pattern({**base, "model_type": "gpt_oss"}, path)[:4] == [True, False, True, False]
    assert read_sliding_window({**base, "model_type": "gpt_oss", "sliding_window": None}, path) == (0, 0)
    assert read_sliding_window({**base, "model_type": "llama"}, path) == (0, 0)  # LlamaConfig has no window


def test_a_qwen_config_with_use_sliding_window_but_no_window_is_refused(tmp_path):
    config = {"model_type": "qwen3", "num_hidden_layers": 4, "use_sliding_window": True, "max_window_layers": 2}
    with pytest.raises(ValueError, match=r"config\.json: use_sliding_window is true but sliding_window is not set"):
        layer_pattern(config, tmp_path / "config.json")
