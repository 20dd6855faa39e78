"""Model families from config.json: published parameter counts of every built-in, dense Llama /
Mistral / Qwen2 / Qwen3 configs read right, and architectures the spec cannot describe refused
(mixture of experts, sliding window, MLA, soft-capping, ...) with the file and the field named."""
import json

import pytest

from profiler import BUILTIN_MODELS, ModelSpec, get_model_spec

# Published parameter counts as printed (the figure, and half a unit of its last digit: the
# rounding the publisher applied). Sources: the Hugging Face model cards / model pages.
PUBLISHED = {
    # meta-llama/Llama-2-*-hf model pages (safetensors: 6.74B, 13B, 69B params); Llama-2-70B
    # 68.98B is REFERENCE.md §5's 69.0B to four digits, as issue 14 quotes it.
    "llama-2-7b": (6.74e9, 0.005e9),
    "llama-2-13b": (13.0e9, 0.05e9),
    "llama-2-70b": (68.98e9, 0.005e9),
    # meta-llama/Meta-Llama-3-8B, Meta-Llama-3-70B, Llama-3.1-8B model pages: 8.03B, 70.6B, 8.03B.
    "llama-3-8b": (8.03e9, 0.005e9),
    "llama-3-70b": (70.6e9, 0.05e9),
    "llama-3.1-8b": (8.03e9, 0.005e9),
    # mistralai/Mistral-7B-v0.1 model page: 7.24B; Mistral-Nemo-Base-2407: 12.2B.
    "mistral-7b": (7.24e9, 0.005e9),
    "mistral-nemo-12b": (12.2e9, 0.05e9),
    # Qwen model cards, "Number of Parameters": Qwen2.5-7B 7.61B, Qwen3-8B 8.2B, Qwen3-14B 14.8B,
    # Qwen3-32B 32.8B. The Qwen2.5-7B card truncates (its model page rounds the same count to
    # 7.62B), so it is held to [7.61, 7.62] B.
    "qwen2.5-7b": (7.615e9, 0.005e9),
    "qwen3-8b": (8.2e9, 0.05e9),
    "qwen3-14b": (14.8e9, 0.05e9),
    "qwen3-32b": (32.8e9, 0.05e9),
    # Mixture of experts (totals; active counts in tests/test_moe_spec.py): Mixtral-8x7B 46.7B
    # (Mistral AI's announcement and model card), Qwen3-30B-A3B and its Instruct-2507 30.5B (cards).
    "mixtral-8x7b": (46.7e9, 0.05e9),
    "qwen3-30b-a3b": (30.5e9, 0.05e9),
    "qwen3-30b-a3b-instruct-2507": (30.5e9, 0.05e9),
    # meta-llama/Llama-3.1-70B and Llama-3.3-70B-Instruct model pages: 70.6B; Llama-3.1-405B: 406B
    # (the page's safetensors count; the name rounds down). Qwen/Qwen3-235B-A22B card: 235B total.
    "llama-3.1-70b": (70.6e9, 0.05e9),
    "llama-3.3-70b": (70.6e9, 0.05e9),
    "llama-3.1-405b": (406e9, 0.5e9),
    "qwen3-235b-a22b": (235e9, 0.5e9),
    # FP8 checkpoints count the same parameters (RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8: 70.6B;
    # Qwen/Qwen3-32B-FP8 card: "Number of Parameters: 32.8B"); their bytes differ, not their count.
    "llama-3.1-70b-fp8": (70.6e9, 0.05e9),
    "qwen3-32b-fp8": (32.8e9, 0.05e9),
    "qwen3-235b-a22b-fp8": (235e9, 0.5e9),  # Qwen/Qwen3-235B-A22B-FP8 card: 235B, as its BF16 twin
    "qwen3-30b-a3b-fp8": (30.5e9, 0.05e9),  # Qwen/Qwen3-30B-A3B-FP8 card: 30.5B
    # Gemma 3 technical report (arXiv 2503.19786) Table 1, 27B: 1,416M embedding + 25,600M
    # non-embedding parameters (the 417M vision encoder is not the language model's).
    "gemma-3-27b": (27.016e9, 0.05e9),
    # openai/gpt-oss model card and "gpt-oss-120b & gpt-oss-20b Model Card" (OpenAI, 2025) Table 1:
    # 116.83 B and 20.91 B total parameters.
    "gpt-oss-120b": (116.83e9, 0.005e9),
    "gpt-oss-20b": (20.91e9, 0.005e9),
    # deepseek-ai/DeepSeek-V3 model card: 671 B total (685 B with the 14 B MTP module), 37 B activated.
    "deepseek-v3": (671e9, 0.5e9),
    # moonshotai/Kimi-K2-Instruct model card: "1 trillion total parameters" (32 B activated): held to
    # [0.95, 1.05] T, the card's rounding.
    "kimi-k2": (1.0e12, 0.05e12),
}
# The same Qwen cards, "Number of Parameters (Non-Embedding)": 6.53B, 6.95B, 13.2B, 31.2B.
PUBLISHED_NON_EMBEDDING = {"qwen2.5-7b": 6.53e9, "qwen3-8b": 6.95e9, "qwen3-14b": 13.2e9, "qwen3-32b": 31.2e9}


def test_every_builtin_has_a_published_count():
    assert set(PUBLISHED) == set(BUILTIN_MODELS)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_builtin_parameter_count_matches_its_model_card(name):
    published, half_unit = PUBLISHED[name]
    assert abs(get_model_spec(name).num_params - published) <= half_unit


@pytest.mark.parametrize("name", sorted(PUBLISHED_NON_EMBEDDING))
def test_qwen_non_embedding_counts_match_their_cards(name):
    spec = get_model_spec(name)
    embeddings = spec.vocab_size * spec.hidden_size * (1 if spec.tie_word_embeddings else 2)
    assert abs(spec.num_params - embeddings - PUBLISHED_NON_EMBEDDING[name]) <= 0.05e9


def test_qwen3_32b_count_by_hand():
    hidden, layers, vocab, ffn = 5120, 64, 151936, 25600
    q_o = 2 * hidden * 64 * 128  # 64 query heads of head_dim 128 (8192 wide, not hidden)
    k_v = 2 * hidden * 8 * 128
    mlp = 3 * hidden * ffn
    norms = 2 * hidden + 2 * 128  # input/post-attention RMSNorm + q_norm, k_norm (head_dim each)
    expected = 2 * vocab * hidden + layers * (q_o + k_v + mlp + norms) + hidden
    assert expected == 32_762_123_264
    assert get_model_spec("qwen3-32b").num_params == expected


def test_qwen2_5_7b_count_by_hand_includes_qkv_biases():
    hidden, layers, vocab, ffn = 3584, 28, 152064, 18944
    linear = 2 * hidden * hidden + 2 * hidden * 4 * 128 + 3 * hidden * ffn
    biases = hidden + 2 * 4 * 128  # q, k, v biases (Qwen2Attention), none on o_proj
    expected = 2 * vocab * hidden + layers * (linear + biases + 2 * hidden) + hidden
    assert expected == 7_615_616_512
    assert get_model_spec("qwen2.5-7b").num_params == expected


# Public config.json files (sources as at profiler.model_spec.BUILTIN_MODELS).
QWEN3_32B = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 5120, "initializer_range": 0.02, "intermediate_size": 25600,
    "max_position_embeddings": 40960, "max_window_layers": 64, "model_type": "qwen3",
    "num_attention_heads": 64, "num_hidden_layers": 64, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 151936,
}
QWEN2_5_7B = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
    "intermediate_size": 18944, "max_position_embeddings": 131072, "max_window_layers": 28,
    "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": True, "use_mrope": False,
    "use_sliding_window": False, "vocab_size": 152064,
}
LLAMA_3_1_8B = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
    "mlp_bias": False, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0", "use_cache": True, "vocab_size": 128256,
}
MISTRAL_NEMO = {
    "architectures": ["MistralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
    "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 128000, "model_type": "mistral",
    "num_attention_heads": 32, "num_hidden_layers": 40, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0, "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.3", "use_cache": True, "vocab_size": 131072,
}
# mistralai/Mixtral-8x7B-v0.1 config.json (46.7 B parameters: the model card).
MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32,
    "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
    "output_router_logits": False, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.02, "sliding_window": None, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.36.0.dev0", "use_cache": True, "vocab_size": 32000,
}
# Qwen/Qwen3-30B-A3B config.json (LLM-Prof `sglang/Model_Config.md`), the MoE of ../shared's bundle.
QWEN3_30B_A3B = {
    **{k: v for k, v in QWEN3_32B.items() if k not in ("architectures", "model_type")},
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "decoder_sparse_step": 1,
    "hidden_size": 2048, "intermediate_size": 6144, "max_window_layers": 48, "mlp_only_layers": [],
    "moe_intermediate_size": 768, "norm_topk_prob": True, "num_attention_heads": 32, "num_experts": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
}
# google/gemma-2-9b-it config.json (kevinstephano/thunder_model_blocks `gemma2/gemma2_config.py`): no
# tie_word_embeddings key, so Gemma2Config's default (tied) applies.
GEMMA_2_9B = {
    "architectures": ["Gemma2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": 1,
    "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3584, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "gemma2",
    "num_attention_heads": 16, "num_hidden_layers": 42, "num_key_value_heads": 8, "pad_token_id": 0,
    "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096,
    "sliding_window_size": 4096, "torch_dtype": "bfloat16", "transformers_version": "4.42.0.dev0",
    "use_cache": True, "vocab_size": 256000,
}
# deepseek-ai/DeepSeek-V3 config.json, the fields that matter here.
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "kv_lora_rank": 512, "q_lora_rank": 1536,
    "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "num_attention_heads": 128,
    "num_key_value_heads": 128, "num_hidden_layers": 61, "vocab_size": 129280, "max_position_embeddings": 163840,
}
# Mistral-7B-v0.1: MistralConfig's defaults (REFERENCE.md §5), with its 4096-token window.
MISTRAL_7B_V01 = {
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "rope_theta": 10000.0, "sliding_window": 4096,
    "tie_word_embeddings": False, "vocab_size": 32000,
}


def write(tmp_path, config: dict, folder: str = "model"):
    directory = tmp_path / folder
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    return directory / "config.json"


@pytest.mark.parametrize("config, builtin", [(QWEN3_32B, "qwen3-32b"), (QWEN2_5_7B, "qwen2.5-7b"),
                                             (LLAMA_3_1_8B, "llama-3.1-8b"), (MISTRAL_NEMO, "mistral-nemo-12b")])
def test_public_config_reads_as_its_builtin(tmp_path, config, builtin):
    spec = get_model_spec(write(tmp_path, config))
    assert ModelSpec(**{**spec.__dict__, "name": builtin}) == BUILTIN_MODELS[builtin]


def test_qwen_sliding_window_field_with_use_sliding_window_false_is_full_attention(tmp_path):
    # Qwen2.5 carries sliding_window: 131072 but use_sliding_window: false — dense full attention.
    assert get_model_spec(write(tmp_path, QWEN2_5_7B)).num_params == 7_615_616_512
    small_window = {**QWEN2_5_7B, "sliding_window": 4096}
    assert get_model_spec(write(tmp_path, small_window, "small")).max_model_len == 131072


def test_qwen_with_sliding_window_enabled_windows_the_layers_from_max_window_layers(tmp_path):
    # Qwen2Config: with use_sliding_window true, layers i >= max_window_layers are windowed.
    spec = get_model_spec(write(tmp_path, {**QWEN2_5_7B, "sliding_window": 4096, "use_sliding_window": True,
                                           "max_window_layers": 20}))
    assert (spec.sliding_window, spec.num_sliding_layers) == (4096, 8)
    assert spec.num_params == 7_615_616_512  # windows change no parameter


# Mixtral and Qwen3-MoE configs are read (not refused) since issue 18: tests/test_moe_spec.py.


def test_deepseek_v2_is_refused_for_experts_and_mla(tmp_path):
    # DeepSeek-V3 and Kimi-K2 configs are read (tests/test_mla.py); the deepseek_v2 family is not yet.
    with pytest.raises(ValueError) as info:
        get_model_spec(write(tmp_path, {**DEEPSEEK_V3, "model_type": "deepseek_v2"}))
    message = str(info.value)
    assert "n_routed_experts=256" in message and "kv_lora_rank=512" in message
    assert "multi-head latent attention (MLA)" in message


def test_mla_alone_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"kv_lora_rank=512 \(multi-head latent attention"):
        get_model_spec(write(tmp_path, {**LLAMA_3_1_8B, "kv_lora_rank": 512}))


def test_mistral_v01_window_is_every_layer(tmp_path):
    # MistralConfig has no use_sliding_window: a set window is always used, in every layer.
    spec = get_model_spec(write(tmp_path, MISTRAL_7B_V01))
    assert (spec.sliding_window, spec.num_sliding_layers, spec.num_layers) == (4096, 32, 32)
    # v0.2's shapes without the window are the built-in mistral-7b.
    spec = get_model_spec(write(tmp_path, {**MISTRAL_7B_V01, "sliding_window": None}, "v02"))
    assert ModelSpec(**{**spec.__dict__, "name": "mistral-7b"}) == BUILTIN_MODELS["mistral-7b"]


def test_gemma_2_is_refused_instead_of_over_counted(tmp_path):
    # Read as a Llama, gemma-2-9b counted 10.16 B: its absent tie_word_embeddings defaulted to an
    # untied LM head (+256000 x 3584 = 0.92 B); the card says 9.24 B: its model_type is refused
    # (four norms a layer, a tied head), though its window and soft-capping are now priced.
    with pytest.raises(ValueError) as info:
        get_model_spec(write(tmp_path, GEMMA_2_9B))
    message = str(info.value)
    assert "model_type='gemma2'" in message


@pytest.mark.parametrize("extra, field", [
    ({"attention_bias": True}, r"attention_bias=True \(biases on every attention projection"),
    ({"mlp_bias": True}, r"mlp_bias=True \(MLP biases"),
    ({"model_type": "phi3"}, r"model_type='phi3' \(supported: llama, mistral, qwen2, qwen3"),
    ({"text_config": {"hidden_size": 4096}}, r"text_config=.*multimodal"),
    ({"attention_chunk_size": 8192}, r"attention_chunk_size=8192 \(chunked local attention"),
    ({"num_nextn_predict_layers": 1}, r"num_nextn_predict_layers=1 \(multi-token prediction"),
])
def test_other_unmodelled_fields_are_refused(tmp_path, extra, field):
    with pytest.raises(ValueError, match=r"config\.json: architecture not supported yet: .*" + field):
        get_model_spec(write(tmp_path, {**LLAMA_3_1_8B, **extra}))


def test_full_attention_layer_types_are_accepted(tmp_path):
    config = {**QWEN3_32B, "layer_types": ["full_attention"] * 64}
    assert get_model_spec(write(tmp_path, config)).num_params == 32_762_123_264


@pytest.mark.parametrize("text, match", [
    ("{not json", "not a readable JSON config"),
    ("[1, 2]", r"must hold a JSON object \(a model config\), got list"),
    ("[" * 100_000 + "]" * 100_000, "not a readable JSON config"),
    ('{"hidden_size": ' + "9" * 5000 + "}", "not a readable JSON config"),  # past Python's int digits limit
    (b"\xff\xfe{", "not a readable JSON config \\(UnicodeDecodeError"),  # not UTF-8
])
def test_unreadable_config_names_the_file(tmp_path, text, match):
    path = tmp_path / "config.json"
    path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
    with pytest.raises(ValueError, match=r"config\.json: " + match):
        get_model_spec(path)


@pytest.mark.parametrize("value", ["4096", 4096.5, True, float("inf"), float("nan")])
def test_non_whole_shape_names_the_key(tmp_path, value):
    with pytest.raises(ValueError, match=r"config\.json: hidden_size must be a whole number"):
        get_model_spec(write(tmp_path, {**LLAMA_3_1_8B, "hidden_size": value}))


def test_the_configs_page_lists_every_builtin_model():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "configs.md").read_text()  # where `model:` is described
    assert [name for name in BUILTIN_MODELS if f"`{name}`" not in page] == []


@pytest.mark.parametrize("extra, match", [
    ({"num_key_value_heads": 0}, "num_key_value_heads must be > 0"),
    ({"num_key_value_heads": 5}, "num_attention_heads 32 is not a multiple of num_key_value_heads 5"),
])
def test_impossible_shapes_name_the_file(tmp_path, extra, match):
    with pytest.raises(ValueError, match=r"config\.json: model 'model': " + match):
        get_model_spec(write(tmp_path, {**LLAMA_3_1_8B, **extra}))
