"""Mixture-of-experts model specs: config.json of Mixtral / Qwen2-MoE / Qwen3-MoE read into total and
active parameters (hand-worked and against the model cards), and what cannot be read refused,
naming the file and the key."""
import json

import pytest

from profiler import BUILTIN_MODELS, ModelSpec, get_model_spec
from profiler.moe import MoESpec
from tests.test_model_spec_families import MIXTRAL_8X7B, QWEN3_30B_A3B

# Qwen/Qwen1.5-MoE-A2.7B config.json (the Qwen2-MoE family; card: 14.3 B total, 2.7 B activated).
QWEN1_5_MOE_A2_7B = {
    "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "hidden_size": 2048,
    "intermediate_size": 5632, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
    "num_experts": 60, "num_experts_per_tok": 4, "decoder_sparse_step": 1, "norm_topk_prob": False,
    "num_attention_heads": 16, "num_key_value_heads": 16, "num_hidden_layers": 24, "vocab_size": 151936,
    "max_position_embeddings": 8192, "tie_word_embeddings": False, "use_sliding_window": False,
    "sliding_window": 32768,
}


def write(tmp_path, config: dict, folder: str = "model"):
    directory = tmp_path / folder
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    return directory / "config.json"


def test_mixtral_counts_by_hand():
    hidden, layers, vocab = 4096, 32, 32000
    attention = 2 * hidden * 4096 + 2 * hidden * 1024  # q, o (32 heads × 128) and k, v (8 heads × 128)
    expert = 3 * hidden * 14336
    router = hidden * 8
    norms = 2 * hidden
    total = 2 * vocab * hidden + layers * (attention + 8 * expert + router + norms) + hidden
    active = 2 * vocab * hidden + layers * (attention + 2 * expert + router + norms) + hidden
    spec = get_model_spec("mixtral-8x7b")
    assert spec.num_params == total == 46_702_792_704
    assert spec.num_active_params == active == 12_879_925_248


def test_qwen3_30b_a3b_counts_by_hand():
    # Qwen/Qwen3-30B-A3B config.json: hidden 2048, 48 layers, 32 heads / 4 KV heads of head_dim 128
    # (q_norm, k_norm of 128 each), 128 experts of width 768, top-8, vocab 151936, untied LM head.
    hidden, layers, vocab = 2048, 48, 151936
    attention = 2 * hidden * 32 * 128 + 2 * hidden * 4 * 128 + 2 * 128  # q, o; k, v; q_norm, k_norm
    expert = 3 * hidden * 768
    router = hidden * 128
    per_layer = attention + router + 2 * hidden  # + the two RMSNorms
    embeddings = 2 * vocab * hidden  # embed_tokens and lm_head
    spec = get_model_spec("qwen3-30b-a3b")
    assert spec.num_params == embeddings + layers * (per_layer + 128 * expert) + hidden == 30_532_122_624
    assert spec.num_active_params == embeddings + layers * (per_layer + 8 * expert) + hidden == 3_353_032_704
    # The card's "3.3B activated" is no other convention: without the LM head 3.04 B, without
    # both embedding matrices 2.73 B; 3.353 B truncated to one decimal is 3.3 (its 29.91 B
    # non-embedding total is printed 29.9B, its 30.53 B total 30.5B).
    assert round((spec.num_active_params - vocab * hidden) / 1e9, 2) == 3.04
    assert round((spec.num_active_params - embeddings) / 1e9, 2) == 2.73


def test_builtin_moe_counts_within_one_percent_of_the_cards():
    # Mixtral-8x7B: 46.7 B total / 12.9 B active (Mistral AI's announcement, 2023-12-11).
    mixtral = get_model_spec("mixtral-8x7b")
    assert abs(mixtral.num_params / 46.7e9 - 1) < 0.01 and abs(mixtral.num_active_params / 12.9e9 - 1) < 0.01
    # Qwen3-30B-A3B card: 30.5 B total, 29.9 B non-embedding, 3.3 B activated.
    qwen = get_model_spec("qwen3-30b-a3b")
    assert abs(qwen.num_params / 30.5e9 - 1) < 0.01
    assert abs((qwen.num_params - 2 * 151936 * 2048) / 29.9e9 - 1) < 0.01
    # Active: 3,353,032,704 counted with both embedding matrices; the card's "3.3B" is that count
    # truncated to one decimal (as its 29.9 B non-embedding is 29.91 B): 1.6 % above the printed figure.
    assert qwen.num_active_params == 3_353_032_704
    assert int(qwen.num_active_params / 1e8) == 33


def test_qwen3_moe_config_reads_as_its_builtin(tmp_path):
    spec = get_model_spec(write(tmp_path, QWEN3_30B_A3B))
    assert ModelSpec(**{**spec.__dict__, "name": "qwen3-30b-a3b"}) == BUILTIN_MODELS["qwen3-30b-a3b"]
    assert spec.moe == MoESpec(128, 8, 768)


def test_mixtral_config_reads_as_its_builtin(tmp_path):
    spec = get_model_spec(write(tmp_path, MIXTRAL_8X7B))
    assert ModelSpec(**{**spec.__dict__, "name": "mixtral-8x7b"}) == BUILTIN_MODELS["mixtral-8x7b"]


def test_qwen2_moe_shared_expert_counted(tmp_path):
    spec = get_model_spec(write(tmp_path, QWEN1_5_MOE_A2_7B))
    hidden = 2048
    attention = 4 * hidden * hidden + 3 * hidden  # q, k, v, o (16 × 128) + q/k/v biases
    routed = 3 * hidden * 1408
    shared = 3 * hidden * 5632 + hidden  # the shared expert and its sigmoid gate (hidden → 1)
    router = hidden * 60
    per_layer = attention + shared + router + 2 * hidden
    embeddings = 2 * 151936 * hidden
    assert spec.num_params == embeddings + 24 * (per_layer + 60 * routed) + hidden
    assert spec.num_active_params == embeddings + 24 * (per_layer + 4 * routed) + hidden
    assert abs(spec.num_params / 14.3e9 - 1) < 0.01 and abs(spec.num_active_params / 2.7e9 - 1) < 0.01


def test_moe_layers_have_attention_gemms_only():
    spec = get_model_spec("qwen3-30b-a3b")
    assert spec.layer_gemm_shapes(2) == (("qkv_proj", 2048, 2048 + 2 * 2 * 128), ("o_proj", 2048, 2048))
    assert spec.expert_params() == 48 * 128 * 3 * 2048 * 768


def test_dense_models_unchanged():
    spec = get_model_spec("llama-3-8b")
    assert spec.moe is None and spec.num_active_params == spec.num_params == 8_030_261_248
    assert [name for name, _, _ in spec.layer_gemm_shapes()] == ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]


def test_expected_active_experts_uniform_routing():
    moe = MoESpec(128, 8, 768)
    assert moe.expected_active_experts(1) == pytest.approx(8.0)
    # two tokens: 128 · (1 − (120/128)²) = 15.5
    assert moe.expected_active_experts(2) == pytest.approx(128 * (1 - (120 / 128) ** 2))
    assert moe.expected_active_experts(2, 64) == pytest.approx(64 * (1 - (120 / 128) ** 2))
    assert moe.expected_active_experts(10_000) == pytest.approx(128.0)


def test_ep_degree_may_leave_a_remainder_on_the_first_ranks():
    # vLLM determine_expert_map: 60 experts over EP 8 are 8, 8, 8, 8, 7, 7, 7, 7; the busiest holds 8.
    assert MoESpec(60, 4, 1408).experts_per_rank(8) == 8
    assert MoESpec(128, 8, 768).experts_per_rank(3) == 43  # 43, 43, 42
    assert MoESpec(128, 8, 768).experts_per_rank(2) == 64
    assert MoESpec(8, 2, 14336).experts_per_rank(8) == 1
    for ep in (0, 9):
        with pytest.raises(ValueError, match=rf"enable_expert_parallel: expert parallel size {ep} must be from 1 to "
                                             r"the model's 8 experts \(every expert-parallel rank holds at least one"):
            MoESpec(8, 2, 14336).experts_per_rank(ep, key="enable_expert_parallel: expert parallel size")


@pytest.mark.parametrize("config, match", [
    ({**QWEN3_30B_A3B, "decoder_sparse_step": 2}, r"decoder_sparse_step=2"),
    ({**QWEN3_30B_A3B, "mlp_only_layers": [0, 1]}, r"mlp_only_layers=\[0, 1\]"),
    ({**QWEN3_30B_A3B, "shared_expert_intermediate_size": 1024},
     r"shared_expert_intermediate_size=1024 \(mixture-of-experts field\(s\) that model_type 'qwen3_moe' does not read"),
    ({**MIXTRAL_8X7B, "num_experts": 8}, r"num_experts=8 .*model_type 'mixtral' does not read"),
    ({k: v for k, v in QWEN3_30B_A3B.items() if k != "moe_intermediate_size"}, r"missing required key 'moe_intermediate_size'"),
    ({**QWEN3_30B_A3B, "num_experts_per_tok": 200}, r"num_experts_per_tok 200 must be <= num_experts 128"),
    ({**QWEN3_30B_A3B, "model_type": "qwen3"}, r"num_experts=128.*model_type 'qwen3' does not read"),
    ({k: v for k, v in QWEN1_5_MOE_A2_7B.items() if k != "shared_expert_intermediate_size"},
     r"missing required key 'shared_expert_intermediate_size'"),
    ({**QWEN3_30B_A3B, "model_type": "deepseek_v3"}, r"num_experts=128.*model_type 'deepseek_v3' does not read"),
])
def test_moe_fields_that_cannot_be_read_are_refused(tmp_path, config, match):
    path = write(tmp_path, config)
    with pytest.raises(ValueError, match=match) as info:
        get_model_spec(path)
    assert str(path) in str(info.value)


def test_the_engine_refuses_a_shared_expert_it_does_not_implement():
    torch = pytest.importorskip("torch")  # noqa: F841
    from gpu_engine.model import ModelArgs

    shared = ModelSpec("shared-moe", 2, 64, 4, 2, 16, 96, 256, 256, moe=MoESpec(4, 2, 96, shared_expert_intermediate_size=64))
    with pytest.raises(ValueError, match=r"'shared-moe' has a shared expert \(Qwen2-MoE\), which the engine does not"):
        ModelArgs(shared)
    ModelArgs(get_model_spec("mixtral-8x7b"))  # Mixtral runs: tests/test_moe_engine.py
