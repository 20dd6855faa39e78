"""The engine runs a small random-weight Mixtral: its greedy tokens equal transformers'
`MixtralForCausalLM.generate` with the same weights in float64, through the shared scheduler
(chunked prefill, hybrid batches, preemption with recompute), so "one scheduler, two clocks"
covers MoE too."""
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

# 4 experts, top-2, of width 96: every token's output mixes two experts, so a wrong router,
# renormalisation or expert order changes the tokens.
TINY_MIXTRAL = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 64,
                "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                "head_dim": 16, "vocab_size": 256, "max_position_embeddings": 256, "tie_word_embeddings": False,
                "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "hidden_act": "silu", "num_local_experts": 4,
                "num_experts_per_tok": 2, "sliding_window": None}
PROMPT_LENS = (9, 17, 23)
NUM_NEW = 12


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    with cpu_threads(1):
        yield tiny_checkpoint(tmp_path_factory, TINY_MIXTRAL, "tiny-mixtral")


@pytest.fixture(scope="module")
def prompts():
    return seeded_prompts(PROMPT_LENS)


@pytest.fixture(scope="module")
def reference(checkpoint, prompts):
    # the eager expert loop: torch._grouped_mm has no float64 kernel
    hf = transformers.MixtralForCausalLM.from_pretrained(checkpoint, dtype=torch.float64,
                                                         experts_implementation="eager").eval()
    return greedy_continuations(hf, prompts, NUM_NEW)


def serve(checkpoint, prompts, *, chunk_size: int, num_gpu_blocks: int = 64):
    model = build_model(load_model_args(checkpoint), dtype=torch.float64, device="cpu", checkpoint_dir=checkpoint)
    config = SchedulerConfig(num_gpu_blocks=num_gpu_blocks, block_size=4, max_model_len=256,
                             max_num_seqs=min(4, chunk_size), chunk_size=chunk_size)
    engine = build_engine(model, "sarathi", config)
    requests = [Request(rid, 0.001 * rid, len(ids), NUM_NEW) for rid, ids in prompts.items()]
    return run_trace(engine, requests, prompts=prompts)


def test_checkpoint_is_a_mixtral_transformers_reads(checkpoint):
    config = json.loads((checkpoint / "config.json").read_text())
    assert (config["model_type"], config["num_local_experts"], config["num_experts_per_tok"]) == ("mixtral", 4, 2)
    hf = transformers.MixtralForCausalLM.from_pretrained(checkpoint, dtype=torch.float64)
    assert sum(p.numel() for p in hf.parameters()) == load_model_args(checkpoint).spec.num_params


def test_reference_outputs_are_not_degenerate(reference):
    assert len({tuple(tokens) for tokens in reference.values()}) == len(PROMPT_LENS)


@pytest.mark.parametrize("chunk_size", [1, 7, 64])
def test_greedy_tokens_equal_transformers_mixtral(checkpoint, prompts, reference, chunk_size):
    run = serve(checkpoint, prompts, chunk_size=chunk_size)
    assert run.outputs == reference
    assert (run.requests["finish_reason"] == "completed").all()


def test_greedy_tokens_survive_preemption(checkpoint, prompts, reference):
    # 14 blocks of 4 tokens cannot hold the three sequences' 49 + 36 tokens: recompute preemption
    run = serve(checkpoint, prompts, chunk_size=16, num_gpu_blocks=14)
    assert run.requests["num_preemptions"].sum() > 0
    assert run.outputs == reference
