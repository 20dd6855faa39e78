"""DistServe's chatbot setting (benchmarks/bench_distserve.py): the behaviours behind its results,
pinned on the benchmark's own model and device (llama-2-13b on a100-80gb, roofline).

- Sarathi's chunk-512 prefill under the 0.25 s TTFT SLO: a long prompt runs as ceil(P / 512)
  chunk steps, so it costs more than vLLM v0's one whole-prompt step, and every chunk step also
  carries the running decodes (their KV reads), which is why chunked prefill loses to v0 there.
- The disaggregated decode pool: a request that lands from the KV link should join the running
  decodes' next step (DistServe's decoding instance, vLLM V1's unified step); under the `vllm`
  (v0) policy it runs alone in a step and stalls them (fixed: it now joins them).
"""
from __future__ import annotations

import numpy as np
import pytest

from experiments.config import SweepConfig
from experiments.point import build_cost_model, run_point
from simulator.disaggregated import KvLink, Pool, simulate_disaggregated
from simulator.pricing import StepPricer
from simulator.scheduler import SchedulerConfig, make_scheduler
from traces import Request


def lone_prompt_point(tmp_path, engine: dict, prompt_tokens: int) -> SweepConfig:
    trace = tmp_path / "one.csv"
    trace.write_text(f"arrival_s,prompt_tokens,output_tokens\n0.0,{prompt_tokens},2\n")
    return SweepConfig.model_validate({"model": "llama-2-13b", "device": "a100-80gb", "cost_model": "roofline",
                                       "trace": {"kind": "file", "path": str(trace)}, "engine": engine})


def price_s(point: SweepConfig, query: list[int], context: list[int]) -> float:
    """One prefill step's price from the point's own cost model (chunks of one sequence each)."""
    model = build_cost_model(point)
    return float(model.predict_step_s(np.array(query), np.array(context), np.ones(len(query), dtype=bool)))


def test_lone_1550_token_prompt_sarathi_chunk_512_takes_four_steps_v0_one(tmp_path):
    """1,550 tokens alone: sarathi with chunk 512 computes 512 + 512 + 512 + 14 at contexts 0,
    512, 1024, 1536 (TTFT = the four steps' prices, 227.8 ms with the roofline today); vLLM v0
    computes all 1,550 in one step (199.5 ms). The chunked prompt pays one extra step's weight
    read and the attention over its earlier chunks: 14 % more, with no decode running."""
    sarathi = lone_prompt_point(tmp_path, {"scheduler": "sarathi", "chunk_size": 512}, 1550)
    result = run_point(sarathi)
    prefill_steps = result.steps[result.steps["num_prefill_tokens"] > 0]
    assert list(prefill_steps["num_prefill_tokens"]) == [512, 512, 512, 14]
    chunks_s = sum(price_s(sarathi, [n], [c]) for n, c in ((512, 0), (512, 512), (512, 1024), (14, 1536)))
    ttft_s = result.requests["ttft_s"].iloc[0]
    assert ttft_s == pytest.approx(chunks_s, rel=1e-9)

    v0 = lone_prompt_point(tmp_path, {"scheduler": "vllm"}, 1550)
    whole = run_point(v0)
    assert list(whole.steps["num_prefill_tokens"][whole.steps["num_prefill_tokens"] > 0]) == [1550]
    assert whole.requests["ttft_s"].iloc[0] == pytest.approx(price_s(v0, [1550], [0]), rel=1e-9)
    assert ttft_s > whole.requests["ttft_s"].iloc[0]  # the extra step (ratio 1.14 with today's roofline)


class LinearCost:
    """Step time = 10 ms + 0.1 ms per query token, whatever the context."""

    def predict_step_s(self, query_tokens, context_tokens, is_prefill) -> float:
        return 0.010 + 0.0001 * float(np.sum(query_tokens))


def decode_pool_run(policy: str):
    """A (100-token prompt, 6 tokens) and B (100, 3, arriving at 21 ms): prefills in a sarathi
    instance (A 0 → 20 ms, B 21 → 41 ms), an instant link, decodes under `policy`."""
    config = SchedulerConfig(num_gpu_blocks=1000, block_size=16, max_model_len=4096, chunk_size=512)
    pool = lambda name: Pool([make_scheduler(name, config)], StepPricer(LinearCost()))  # noqa: E731
    return simulate_disaggregated([Request(0, 0.0, 100, 6), Request(1, 0.021, 100, 3)], pool("sarathi"), pool(policy),
                                  KvLink(1e12, 0.0), kv_bytes_per_token=1000)


def decode_steps(result) -> list[tuple[float, int]]:
    steps = result.steps[result.steps["replica_id"] == 1]
    return [(round(s, 4), int(b)) for s, b in zip(steps["start_s"], steps["batch_size"])]


@pytest.mark.parametrize("policy", ["vllm_v1", "sarathi"])
def test_request_from_the_link_joins_the_running_decodes(policy):
    """A decodes alone from 20 ms in 10.1 ms steps (tokens at 0.0301, 0.0402, 0.0503, 0.0604).
    B's first token comes at 41 ms; its transfer starts at the decode instance's next step
    boundary, 0.0503 (after that step's plan), and B is admitted at the next, 0.0604, into A's
    step (two decodes: 10.2 ms, to 0.0706: A's 6th token, B's 2nd); B's 3rd runs alone."""
    result = decode_pool_run(policy)
    assert decode_steps(result) == [(0.02, 1), (0.0301, 1), (0.0402, 1), (0.0503, 1), (0.0604, 2), (0.0706, 1)]
    a = result.requests.set_index("request_id").loc[0]
    np.testing.assert_allclose(a["token_times_s"], [0.020, 0.0301, 0.0402, 0.0503, 0.0604, 0.0706], atol=1e-4)


def test_request_from_the_link_joins_the_running_decodes_under_v0():
    """The same run under `vllm` (v0): the right value is the same step sequence as vllm_v1's;
    before the fix the decode pool logged (0.0604, 1) with B alone and A's token 0.0604 → 0.0807
    (a 20.3 ms gap: one stalled step)."""
    result = decode_pool_run("vllm")
    assert decode_steps(result) == [(0.02, 1), (0.0301, 1), (0.0402, 1), (0.0503, 1), (0.0604, 2), (0.0706, 1)]
