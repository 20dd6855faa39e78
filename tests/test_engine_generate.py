"""The engine's greedy tokens equal transformers' `LlamaForCausalLM.generate` with the same weights.

Random weights are saved as a Hugging Face checkpoint; the engine loads that checkpoint back and
serves the prompts through the shared sarathi scheduler (chunked prefill, hybrid batches,
preemption with recompute). float64, so argmax ties cannot flip between the two.
"""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from gpu_engine.build import build_engine, build_model  # noqa: E402
from gpu_engine.checkpoint import load_model_args, save_checkpoint  # noqa: E402
from gpu_engine.driver import run_trace  # noqa: E402
from gpu_engine.runner import cpu_threads  # noqa: E402
from simulator.scheduler import SchedulerConfig  # noqa: E402
from traces import Request  # noqa: E402
from tests.conftest import greedy_continuations  # noqa: E402

TINY = Path(__file__).parent / "data" / "engine" / "tiny"
PROMPT_LENS = (9, 17, 23)
NUM_NEW = 12


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    with cpu_threads(1):  # every test serves with it; tiny matmuls: more threads only contend
        model = build_model(load_model_args(TINY), dtype=torch.float64, device="cpu", seed=0)
        yield save_checkpoint(model, tmp_path_factory.mktemp("tiny-ckpt"))


@pytest.fixture(scope="module")
def prompts() -> dict[int, list[int]]:
    g = torch.Generator().manual_seed(7)
    # The second prompt repeats a phrase, so n-gram drafting has something to find.
    phrase = torch.randint(0, 256, (6,), generator=g).tolist()
    return {0: torch.randint(0, 256, (PROMPT_LENS[0],), generator=g).tolist(),
            1: (phrase * 3)[: PROMPT_LENS[1]],
            2: torch.randint(0, 256, (PROMPT_LENS[2],), generator=g).tolist()}


@pytest.fixture(scope="module")
def reference(checkpoint, prompts) -> dict[int, list[int]]:
    hf = transformers.LlamaForCausalLM.from_pretrained(checkpoint, dtype=torch.float64).eval()
    return greedy_continuations(hf, prompts, NUM_NEW)


def serve(checkpoint: Path, prompts: dict[int, list[int]], *, chunk_size: int, num_gpu_blocks: int = 64,
          scheduler_name: str = "sarathi", block_size: int = 4, split_n: int = 0, preemption: str = "recompute"):
    model = build_model(load_model_args(checkpoint), dtype=torch.float64, device="cpu", checkpoint_dir=checkpoint)
    config = SchedulerConfig(num_gpu_blocks=num_gpu_blocks, block_size=block_size, max_model_len=256,
                             max_num_seqs=min(4, chunk_size),
                             chunk_size=chunk_size if scheduler_name == "sarathi" else None,
                             split_n=split_n, preemption=preemption)
    engine = build_engine(model, scheduler_name, config)
    requests = [Request(rid, 0.001 * rid, len(ids), NUM_NEW) for rid, ids in prompts.items()]
    return run_trace(engine, requests, prompts=prompts)


def test_reference_outputs_are_not_degenerate(reference):
    # Guards the test itself: distinct outputs, so equality below says something.
    assert len({tuple(tokens) for tokens in reference.values()}) == len(PROMPT_LENS)
    assert all(len(tokens) == NUM_NEW for tokens in reference.values())


@pytest.mark.parametrize("chunk_size", [1, 7, 64])
def test_greedy_tokens_equal_transformers_generate(checkpoint, prompts, reference, chunk_size):
    run = serve(checkpoint, prompts, chunk_size=chunk_size)
    assert run.outputs == reference
    assert (run.requests["finish_reason"] == "completed").all()
    assert run.requests["generated_tokens"].tolist() == [NUM_NEW] * len(prompts)
    if chunk_size == 7:  # a 23-token prompt takes 4 chunks, some sharing a step with decodes
        assert (run.steps["num_prefill_tokens"] > 0).sum() >= 4
        assert ((run.steps["num_prefill_tokens"] > 0) & (run.steps["num_decode_tokens"] > 0)).any()


def test_greedy_tokens_survive_preemption_and_recompute(checkpoint, prompts, reference):
    # 14 blocks of 4 tokens admit all three prompts (3 + 5 + 6 blocks); their decodes then need
    # more, so the newest request is preempted and later recomputes prompt + generated tokens.
    run = serve(checkpoint, prompts, chunk_size=7, num_gpu_blocks=14)
    assert run.requests["num_preemptions"].sum() >= 1
    assert run.requests["recomputed_tokens"].sum() > 0
    assert run.steps["num_preempted"].sum() >= 1
    assert run.outputs == reference


def test_vllm_scheduler_whole_prompts_give_the_same_tokens(checkpoint, prompts, reference):
    run = serve(checkpoint, prompts, chunk_size=64, scheduler_name="vllm")
    assert run.outputs == reference


def test_swap_preemption_restores_the_kv_and_gives_the_same_tokens(checkpoint, prompts, reference):
    run = serve(checkpoint, prompts, chunk_size=7, num_gpu_blocks=14, preemption="swap")
    assert run.requests["num_preemptions"].sum() >= 1
    assert run.requests["recomputed_tokens"].sum() == 0  # swapped back, not recomputed
    assert run.steps["swap_tokens"].sum() > 0
    assert run.outputs == reference


@pytest.mark.parametrize("chunk_size", [7, 64])
def test_split_n_greedy_verification_gives_plain_greedy_tokens(checkpoint, prompts, reference, chunk_size):
    run = serve(checkpoint, prompts, chunk_size=chunk_size, split_n=3)
    assert run.outputs == reference
    drafts = run.drafts
    assert (drafts["drafts_granted"] > 0).all() and (drafts["drafts_granted"] <= 3).all()
    assert drafts["drafts_proposed"].sum() > 0  # the repeated phrase gives n-gram matches
    assert drafts["drafts_accepted"].sum() > 0
    assert (drafts["drafts_accepted"] <= drafts["drafts_proposed"]).all()
    # Accepted drafts save steps: fewer decode steps than tokens decoded one at a time.
    assert run.steps["num_draft_tokens"].sum() == drafts["drafts_granted"].sum()


def test_split_n_with_preemption_gives_plain_greedy_tokens(checkpoint, prompts, reference):
    run = serve(checkpoint, prompts, chunk_size=7, num_gpu_blocks=10, split_n=2)
    assert run.requests["num_preemptions"].sum() >= 1
    assert run.outputs == reference
