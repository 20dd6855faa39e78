"""The engine serves prefix-cache hits from shared physical blocks (no copy), and its greedy
tokens stay equal to transformers' `generate` with caching on and off (vllm_v1, float64)."""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from gpu_engine.build import build_engine, build_model  # noqa: E402
from gpu_engine.checkpoint import load_model_args, save_checkpoint  # noqa: E402
from gpu_engine.driver import run_trace  # noqa: E402
from gpu_engine.prompts import prompt_token_ids  # noqa: E402
from gpu_engine.runner import cpu_threads  # noqa: E402
from simulator.scheduler import SchedulerConfig  # noqa: E402
from traces import Request  # noqa: E402
from tests.conftest import greedy_continuations  # noqa: E402

TINY = Path(__file__).parent / "data" / "engine" / "tiny"
NUM_NEW = 10
BLOCK = 4
# Four requests: 0-2 share a 16-token prefix (4 blocks of 4, ids 1..4), 3 shares none.
SHARED = dict(prefix_hash_ids=(1, 2, 3, 4), prefix_block_tokens=BLOCK)
REQUESTS = [Request(0, 0.000, 21, NUM_NEW, **SHARED), Request(1, 0.001, 26, NUM_NEW, **SHARED),
            Request(2, 0.002, 19, NUM_NEW, **SHARED), Request(3, 0.003, 23, NUM_NEW)]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    with cpu_threads(1):
        model = build_model(load_model_args(TINY), dtype=torch.float64, device="cpu", seed=0)
        yield save_checkpoint(model, tmp_path_factory.mktemp("tiny-ckpt"))


@pytest.fixture(scope="module")
def prompts() -> dict[int, list[int]]:
    return {r.request_id: prompt_token_ids(r, 256, seed=0) for r in REQUESTS}


@pytest.fixture(scope="module")
def reference(checkpoint, prompts) -> dict[int, list[int]]:
    hf = transformers.LlamaForCausalLM.from_pretrained(checkpoint, dtype=torch.float64).eval()
    return greedy_continuations(hf, prompts, NUM_NEW)


def serve(checkpoint, prompts, caching: bool, num_gpu_blocks: int = 64, chunk_size: int = 64):
    model = build_model(load_model_args(checkpoint), dtype=torch.float64, device="cpu", checkpoint_dir=checkpoint)
    config = SchedulerConfig(num_gpu_blocks=num_gpu_blocks, block_size=BLOCK, max_model_len=256, max_num_seqs=4,
                             chunk_size=chunk_size, enable_prefix_caching=caching)
    engine = build_engine(model, "vllm_v1", config)
    return run_trace(engine, REQUESTS, prompts=prompts)


def test_seeded_prompts_agree_where_the_prefix_ids_agree(prompts):
    assert prompts[0][:16] == prompts[1][:16] == prompts[2][:16]
    assert prompts[0][16:19] != prompts[1][16:19] and prompts[3][:16] != prompts[0][:16]


@pytest.mark.parametrize("caching", [True, False])
def test_greedy_tokens_equal_transformers_with_prefix_caching_on_and_off(checkpoint, prompts, reference, caching):
    run = serve(checkpoint, prompts, caching)
    assert run.outputs == reference
    cached = dict(zip(run.requests["request_id"], run.requests["cached_tokens"]))
    # Request 0 computes the shared 16 tokens (4 blocks); 1 and 2, admitted in the same step,
    # hit them: 16 tokens each (their prompts are longer than 16, so the last token is not hit).
    assert cached == ({0: 0, 1: 16, 2: 16, 3: 0} if caching else {0: 0, 1: 0, 2: 0, 3: 0})


def test_greedy_tokens_survive_preemption_with_cached_blocks(checkpoint, prompts, reference):
    # 20 blocks of 4 for four requests of 19-26 + 10 tokens: decodes run out of blocks, the tail
    # of running is preempted and resumes by hitting what it had cached.
    run = serve(checkpoint, prompts, True, num_gpu_blocks=20)
    assert run.requests["num_preemptions"].sum() >= 1
    assert run.requests["resumed_cached_tokens"].sum() > 0
    assert run.outputs == reference


def test_sessions_with_prefix_caching_are_refused_by_the_engine(checkpoint):
    model = build_model(load_model_args(checkpoint), dtype=torch.float64, device="cpu", checkpoint_dir=checkpoint)
    engine = build_engine(model, "vllm_v1", SchedulerConfig(num_gpu_blocks=64, block_size=BLOCK, max_model_len=256,
                                                            max_num_seqs=4, chunk_size=64))
    turn = Request(0, 0.0, 10, 10, prefix_hash_ids=(1, 2, 3, 4), prefix_block_tokens=BLOCK)  # names 16 > 10 tokens
    with pytest.raises(ValueError, match="name output tokens"):
        engine.add_request(turn)
