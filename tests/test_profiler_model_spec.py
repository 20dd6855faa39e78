"""ModelSpec: parameter counts, KV bytes per token, tensor-parallel shapes, config.json loading."""
import json

import pytest

from profiler import BUILTIN_MODELS, ModelSpec, get_model_spec


def test_llama_3_8b_params_by_hand():
    hidden, ffn, vocab, layers = 4096, 14336, 128256, 32
    q_o = 2 * hidden * hidden  # q_proj and o_proj: 32 heads x 128 = 4096 wide
    k_v = 2 * hidden * 8 * 128  # k_proj and v_proj: 8 KV heads x 128
    mlp = 3 * hidden * ffn  # gate, up, down
    per_layer = q_o + k_v + mlp + 2 * hidden  # + two RMSNorm weights
    expected = vocab * hidden + layers * per_layer + hidden + vocab * hidden  # embed, final norm, LM head
    assert expected == 8_030_261_248
    spec = get_model_spec("llama-3-8b")
    assert spec.num_params == expected
    assert spec.num_params == pytest.approx(8.03e9, rel=0.005)  # REFERENCE.md §5
    assert spec.weight_bytes(2) == 2 * expected


def test_llama_2_7b_params_by_hand():
    hidden, ffn, vocab, layers = 4096, 11008, 32000, 32
    per_layer = 4 * hidden * hidden + 3 * hidden * ffn + 2 * hidden  # MHA: q, k, v, o all square
    expected = 2 * vocab * hidden + layers * per_layer + hidden
    assert expected == 6_738_415_616
    assert get_model_spec("llama-2-7b").num_params == expected
    assert expected == pytest.approx(6.74e9, rel=0.005)


def test_kv_bytes_per_token():
    # 2 (K, V) x layers x kv_heads x head_dim x 2 bytes (bf16)
    assert get_model_spec("llama-3-8b").kv_bytes_per_token(2) == 2 * 32 * 8 * 128 * 2 == 131072
    assert get_model_spec("llama-2-7b").kv_bytes_per_token(2) == 2 * 32 * 32 * 128 * 2 == 524288
    assert get_model_spec("llama-2-13b").kv_bytes_per_token(2) == 2 * 40 * 40 * 128 * 2  # 800 KiB
    # Tensor parallel splits the KV heads: llama-2-70b on 4 GPUs keeps 8 / 4 = 2 heads per rank.
    assert get_model_spec("llama-2-70b").kv_bytes_per_token(2, tp=4) == 2 * 80 * 2 * 128 * 2


def test_kv_heads_replicated_when_tp_exceeds_them():
    # vLLM replicates KV heads when tp > kv_heads: 8 KV heads on 16 ranks -> 1 per rank.
    assert get_model_spec("llama-2-70b").kv_heads_per_rank(16) == 1
    with pytest.raises(ValueError, match="tensor_parallel_size 3"):
        get_model_spec("llama-3-8b").kv_heads_per_rank(3)


def test_tp_shards_layer_gemms():
    shapes = {name: (k, n) for name, k, n in get_model_spec("llama-3-8b").layer_gemm_shapes(tp=2)}
    assert shapes == {
        "qkv_proj": (4096, 16 * 128 + 2 * 4 * 128),  # column-parallel: heads split over 2 ranks
        "o_proj": (16 * 128, 4096),  # row-parallel: input split
        "gate_up_proj": (4096, 2 * 14336 // 2),
        "down_proj": (14336 // 2, 4096),
    }


def test_builtin_context_lengths_and_mistral_v02_shape():
    assert {name: spec.max_model_len for name, spec in BUILTIN_MODELS.items()} == {
        "llama-2-7b": 4096, "llama-2-13b": 4096, "llama-2-70b": 4096,
        "llama-3-8b": 8192, "mistral-7b": 32768,
        "mixtral-8x7b": 32768, "qwen3-30b-a3b": 40960, "qwen3-30b-a3b-instruct-2507": 262144,  # their config.json
        # max_position_embeddings of their config.json (profiler/model_spec.py cites them)
        "llama-3-70b": 8192, "llama-3.1-8b": 131072, "mistral-nemo-12b": 128000, "qwen2.5-7b": 131072,
        "qwen3-8b": 40960, "qwen3-14b": 40960, "qwen3-32b": 40960,
        "llama-3.1-70b": 131072, "llama-3.3-70b": 131072, "llama-3.1-405b": 131072, "llama-3.1-70b-fp8": 131072,
        "qwen3-32b-fp8": 40960, "qwen3-235b-a22b": 40960, "qwen3-235b-a22b-fp8": 40960,
        "qwen3-30b-a3b-fp8": 40960, "gemma-3-27b": 131072, "gpt-oss-120b": 131072, "gpt-oss-20b": 131072, "deepseek-v3": 163840, "kimi-k2": 131072,
    }
    mistral = get_model_spec("mistral-7b")
    assert (mistral.num_layers, mistral.hidden_size, mistral.num_attention_heads,
            mistral.num_key_value_heads, mistral.intermediate_size, mistral.vocab_size) == (
        32, 4096, 32, 8, 14336, 32000)
    assert mistral.num_params == pytest.approx(7.24e9, rel=0.005)  # REFERENCE.md §5


def test_tied_embeddings_drop_the_lm_head():
    spec = get_model_spec("llama-3-8b")
    tied = ModelSpec(**{**spec.__dict__, "tie_word_embeddings": True})
    assert spec.num_params - tied.num_params == 128256 * 4096


LLAMA_3_8B_CONFIG = {
    "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
    "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
    "max_position_embeddings": 8192, "tie_word_embeddings": False,
}


def test_hf_config_file_and_directory(tmp_path):
    model_dir = tmp_path / "Meta-Llama-3-8B"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(LLAMA_3_8B_CONFIG))
    builtin = get_model_spec("llama-3-8b")
    for arg in (model_dir, model_dir / "config.json", str(model_dir)):
        spec = get_model_spec(arg)
        assert spec.name == "Meta-Llama-3-8B"
        assert ModelSpec(**{**spec.__dict__, "name": "llama-3-8b"}) == builtin  # head_dim 4096/32


def test_hf_config_defaults(tmp_path):
    config = {k: v for k, v in LLAMA_3_8B_CONFIG.items()
              if k not in ("num_key_value_heads", "tie_word_embeddings")}
    (tmp_path / "config.json").write_text(json.dumps({**config, "head_dim": None}))
    spec = get_model_spec(tmp_path)
    assert spec.num_key_value_heads == 32  # defaults to num_attention_heads (LlamaConfig)
    assert spec.head_dim == 4096 // 32
    assert spec.tie_word_embeddings is False


def test_hf_config_missing_key_names_file_and_key(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in LLAMA_3_8B_CONFIG.items() if k != "vocab_size"}))
    with pytest.raises(ValueError, match=r"config\.json.*'vocab_size'"):
        get_model_spec(path)


def test_unknown_model_lists_builtins():
    with pytest.raises(ValueError, match=r"llama-3-8b.*mistral-7b|mistral-7b.*llama-3-8b"):
        get_model_spec("gpt-5")


def test_bad_shapes_rejected():
    with pytest.raises(ValueError, match="num_key_value_heads"):
        ModelSpec("bad", 2, 64, 4, 3, 16, 128, 100, 64)
    with pytest.raises(ValueError, match="hidden_size must be > 0"):
        ModelSpec("bad", 2, 0, 4, 4, 16, 128, 100, 64)
