"""The engine runs a small random-weight gpt-oss: its greedy tokens equal transformers'
`GptOssForCausalLM.generate` with the same weights (float64, eager attention and experts), through
the shared scheduler (chunked prefill, hybrid batches). Alternating sliding-window layers (window 6),
a sink per head, q/k/v/o biases, biased experts with the clamped SwiGLU (a limit of 0.05 so the clamp
acts on these small random weights), default rotary (gpt-oss ships YaRN, which the engine refuses)."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from gpu_engine.build import build_engine, build_model  # noqa: E402
from gpu_engine.checkpoint import load_model_args  # noqa: E402
from gpu_engine.driver import run_trace  # noqa: E402
from gpu_engine.runner import cpu_threads  # noqa: E402
from simulator.scheduler import SchedulerConfig  # noqa: E402
from traces import Request  # noqa: E402
from tests.conftest import greedy_continuations, seeded_prompts, tiny_checkpoint  # noqa: E402

TINY_GPT_OSS = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 64,
                "intermediate_size": 32, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
                "head_dim": 16, "vocab_size": 256, "max_position_embeddings": 256, "tie_word_embeddings": False,
                "rms_norm_eps": 1e-05, "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 6,
                "attention_bias": True, "swiglu_alpha": 1.702, "swiglu_limit": 0.05,
                "rope_parameters": {"rope_type": "default", "rope_theta": 150000.0}}
PROMPT_LENS = (9, 17, 23)
NUM_NEW = 12


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    with cpu_threads(1):
        yield tiny_checkpoint(tmp_path_factory, TINY_GPT_OSS, "tiny-gpt-oss")


@pytest.fixture(scope="module")
def prompts():
    return seeded_prompts(PROMPT_LENS)


@pytest.fixture(scope="module")
def reference(checkpoint, prompts):
    hf = transformers.GptOssForCausalLM.from_pretrained(checkpoint, dtype=torch.float64, attn_implementation="eager",
                                                        experts_implementation="eager").eval()
    return greedy_continuations(hf, prompts, NUM_NEW)


def serve(checkpoint, prompts, chunk_size: int):
    model = build_model(load_model_args(checkpoint), dtype=torch.float64, device="cpu", checkpoint_dir=checkpoint)
    config = SchedulerConfig(num_gpu_blocks=64, block_size=4, max_model_len=256, max_num_seqs=4, chunk_size=chunk_size)
    requests = [Request(rid, 0.001 * rid, len(ids), NUM_NEW) for rid, ids in prompts.items()]
    return run_trace(build_engine(model, "sarathi", config), requests, prompts=prompts)


def test_checkpoint_is_a_gpt_oss_transformers_reads(checkpoint):
    config = json.loads((checkpoint / "config.json").read_text())
    assert config["model_type"] == "gpt_oss" and config["swiglu_limit"] == 0.05
    assert config["layer_types"] == ["sliding_attention", "full_attention"] * 2
    args = load_model_args(checkpoint)
    assert args.layer_windows == (6, 0, 6, 0) and (args.swiglu_alpha, args.swiglu_limit) == (1.702, 0.05)


@pytest.mark.parametrize("chunk_size", [7, 64])
def test_greedy_tokens_equal_transformers_gpt_oss(checkpoint, prompts, reference, chunk_size):
    assert len({tuple(t) for t in reference.values()}) == len(PROMPT_LENS)
    assert serve(checkpoint, prompts, chunk_size).outputs == reference


def test_sinks_and_the_clamp_change_the_tokens(checkpoint, prompts, reference):
    # Guards the comparison: without the sinks, or without the clamp, other tokens.
    for change in ("sinks", "clamp"):
        model = build_model(load_model_args(checkpoint), dtype=torch.float64, device="cpu", checkpoint_dir=checkpoint)
        for layer in model.layers:
            if change == "sinks":
                layer.self_attn.sinks = None
            else:
                layer.mlp.limit = 1e9
        config = SchedulerConfig(num_gpu_blocks=64, block_size=4, max_model_len=256, max_num_seqs=4, chunk_size=64)
        requests = [Request(rid, 0.001 * rid, len(ids), NUM_NEW) for rid, ids in prompts.items()]
        assert run_trace(build_engine(model, "sarathi", config), requests, prompts=prompts).outputs != reference, change


def test_yarn_rotary_of_a_real_gpt_oss_config_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({**TINY_GPT_OSS, "rope_parameters": None, "rope_scaling": {
        "rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
        "original_max_position_embeddings": 4096}, "rope_theta": 150000}))
    with pytest.raises(ValueError, match="rotary scaling 'yarn' is not supported"):
        load_model_args(tmp_path)
