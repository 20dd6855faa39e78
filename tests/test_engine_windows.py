"""The engine serves sliding-window models: its greedy tokens equal transformers' `generate` with the
same random weights (float64), through the shared scheduler (chunked prefill, hybrid batches).

Two families, as the profiler reads their config.json (`profiler.sliding_window.layer_pattern`):
Qwen2 with `use_sliding_window` and `max_window_layers` 1 (layer 0 full, layers 1-2 windowed; q/k/v
biases) and Mistral (every layer windowed). A 6-token window over 9..35-token sequences: most
queries see fewer keys than causal attention would give them, so a wrong window changes the tokens.
"""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from gpu_engine.build import build_engine, build_model  # noqa: E402
from gpu_engine.checkpoint import load_model_args, save_checkpoint  # noqa: E402
from gpu_engine.driver import run_trace  # noqa: E402
from gpu_engine.model import ModelArgs  # noqa: E402
from gpu_engine.runner import cpu_threads  # noqa: E402
from profiler import get_model_spec  # noqa: E402
from simulator.scheduler import SchedulerConfig  # noqa: E402
from traces import Request  # noqa: E402
from tests.conftest import greedy_continuations  # noqa: E402

WINDOW = 6
COMMON = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 16, "vocab_size": 256, "max_position_embeddings": 256, "tie_word_embeddings": False,
          "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "hidden_act": "silu", "sliding_window": WINDOW}
FAMILIES = {
    "qwen2": ({**COMMON, "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "num_hidden_layers": 3,
               "use_sliding_window": True, "max_window_layers": 1}, transformers.Qwen2ForCausalLM, (0, WINDOW, WINDOW)),
    "mistral": ({**COMMON, "architectures": ["MistralForCausalLM"], "model_type": "mistral", "num_hidden_layers": 2},
                transformers.MistralForCausalLM, (WINDOW, WINDOW)),
}
PROMPT_LENS = (9, 17, 23)
NUM_NEW = 12


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    config, hf_class, windows = FAMILIES[request.param]
    config_dir = tmp_path_factory.mktemp(f"tiny-{request.param}-config")
    (config_dir / "config.json").write_text(json.dumps(config))
    with cpu_threads(1):
        args = load_model_args(config_dir)
        model = build_model(args, dtype=torch.float64, device="cpu", seed=0)
        yield request.param, save_checkpoint(model, tmp_path_factory.mktemp(f"tiny-{request.param}")), hf_class, windows


@pytest.fixture(scope="module")
def prompts():
    g = torch.Generator().manual_seed(7)
    return {rid: torch.randint(0, 256, (n,), generator=g).tolist() for rid, n in enumerate(PROMPT_LENS)}


@pytest.fixture(scope="module")
def reference(family, prompts):
    _, checkpoint, hf_class, _ = family
    hf = hf_class.from_pretrained(checkpoint, dtype=torch.float64, attn_implementation="eager").eval()
    return greedy_continuations(hf, prompts, NUM_NEW)


def serve(checkpoint, prompts, *, chunk_size: int, window_override=None):
    args = load_model_args(checkpoint)
    if window_override is not None:
        args = ModelArgs(args.spec, args.rope_theta, args.rms_norm_eps, window_override)
    model = build_model(args, dtype=torch.float64, device="cpu", checkpoint_dir=checkpoint)
    config = SchedulerConfig(num_gpu_blocks=64, block_size=4, max_model_len=256, max_num_seqs=4, chunk_size=chunk_size)
    engine = build_engine(model, "sarathi", config)
    requests = [Request(rid, 0.001 * rid, len(ids), NUM_NEW) for rid, ids in prompts.items()]
    return run_trace(engine, requests, prompts=prompts)


def test_checkpoint_keeps_the_family_and_its_windows(family):
    name, checkpoint, hf_class, windows = family
    config = json.loads((checkpoint / "config.json").read_text())
    assert config["model_type"] == name and config["sliding_window"] == WINDOW
    assert load_model_args(checkpoint).layer_windows == windows
    if name == "qwen2":
        assert config["layer_types"] == ["full_attention", "sliding_attention", "sliding_attention"]


@pytest.mark.parametrize("chunk_size", [7, 64])
def test_greedy_tokens_equal_transformers_with_windows(family, prompts, reference, chunk_size):
    _, checkpoint, _, _ = family
    assert len({tuple(t) for t in reference.values()}) == len(PROMPT_LENS)
    run = serve(checkpoint, prompts, chunk_size=chunk_size)
    assert run.outputs == reference


def test_full_attention_in_place_of_the_window_gives_other_tokens(family, prompts, reference):
    # Guards the comparison: the window matters for these prompts and weights.
    _, checkpoint, _, windows = family
    spec = load_model_args(checkpoint).spec
    full = spec.__class__.from_fields({**spec.to_fields(), "sliding_window": 0, "num_sliding_layers": 0})
    model = build_model(ModelArgs(full), dtype=torch.float64, device="cpu", checkpoint_dir=checkpoint)
    engine = build_engine(model, "sarathi", SchedulerConfig(num_gpu_blocks=64, block_size=4, max_model_len=256,
                                                            max_num_seqs=4, chunk_size=64))
    requests = [Request(rid, 0.001 * rid, len(ids), NUM_NEW) for rid, ids in prompts.items()]
    assert run_trace(engine, requests, prompts=prompts).outputs != reference


def test_a_mixed_pattern_the_spec_cannot_place_is_refused():
    llama = get_model_spec("llama-3-8b")
    spec = llama.from_fields({**llama.to_fields(), "sliding_window": 4096, "num_sliding_layers": 16})
    with pytest.raises(ValueError, match="16 of 32 layers are windowed and the spec does not say which"):
        ModelArgs(spec)  # the spec keeps the count only
    assert ModelArgs(spec, layer_windows=(0, 4096) * 16).layer_windows[:3] == (0, 4096, 0)
    with pytest.raises(ValueError, match="disagree with the spec"):
        ModelArgs(get_model_spec("llama-3-8b"), layer_windows=(4,) * 32)


def test_the_engine_refuses_the_hybrid_kv_cache_manager(family):
    # vLLM's per-group tables free windowed blocks; the engine keeps one table for every layer.
    _, checkpoint, _, _ = family
    model = build_model(load_model_args(checkpoint), dtype=torch.float64, device="cpu", checkpoint_dir=checkpoint)
    config = SchedulerConfig(num_gpu_blocks=64, block_size=4, max_model_len=256, max_num_seqs=4, chunk_size=64,
                             kv_groups=(1, 2, WINDOW), enable_prefix_caching=False)
    with pytest.raises(ValueError, match="hybrid KV cache manager"):
        build_engine(model, "vllm_v1", config)
