"""DistServe's chatbot setting (benchmarks/bench_distserve.py): the behaviours behind its results,
pinned on the benchmark's own model and device (llama-2-13b on a100-80gb, roofline).

- Sarathi's chunk-512 prefill under the 0.25 s TTFT SLO: a long prompt runs as ceil(P / 512)
  chunk steps, so it costs more than vLLM v0's one whole-prompt step, and every chunk step also
  carries the running decodes (their KV reads), which is why chunked prefill loses to v0 there.
- The disaggregated decode pool: a request that lands from the KV link should join the running
  decodes' next step (DistServe's decoding instance, vLLM V1's unified step); under the `vllm`
  (v0) policy it runs alone in a step and stalls them (fixed: it now joins them).
- The benchmark's DistServe prices (its artifact's measured fits plus its simulator's Ray overhead),
  vLLM 0.2.3's padded prompt batches, the prompt length that misses the TTFT SLO alone, and
  DistServe's goodput rule, by hand.
"""
from __future__ import annotations

import numpy as np
import pytest

from benchmarks.bench_distserve import (DISTSERVE_RATES_PER_GPU, DISTSERVE_VLLM_ATTAINMENT, DistServeFit,
                                        distserve_prices, find_intersection, lone_ttft_misses)
from experiments import point as point_module
from experiments.config import SweepConfig
from experiments.point import build_cost_model, run_point
from simulator.disaggregated import KvLink, Pool, simulate_disaggregated
from simulator.pricing import StepPricer
from simulator.scheduler import SCHEDULERS, SchedulerConfig, VllmV0Scheduler, make_scheduler
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


def test_distserve_fit_prices_by_hand():
    """vLLM 0.2.3, TP1 (ms): a lone 1,400-token prompt 22.0522 + 0.140509·1400 + 8.07658e-6·1400²
    + Ray 2 + 0.0001·1400 = 22.0522 + 196.7129 + 15.8301 + 2.14 = 236.735; prompts 1,000 and 800
    unpadded 22.0522 + 0.140509·1800 + 8.07658e-6·(1000² + 800²) + 2.18 = 290.394, padded to 1,000
    each 22.0522 + 0.140509·2000 + 8.07658e-6·2·1000² + 2.18 = 321.404; two decodes at contexts
    100 and 200 (Σ context + 1 = 302) 23.4750 + 0.000592934·302 + 0.0607269·2 + 2 + 0.0302 = 25.806;
    95 decodes take the large-batch triple: 20.2064 + 0.000490773·95·11 + 0.120003·95 + 2 + 0.1045."""
    fit = DistServeFit("vllm", 1)
    assert fit.lone_prefill_s(1400) == pytest.approx(0.236735, abs=1e-6)
    assert fit.predict_step_s([1000, 800], [0, 0], [True, True]) == pytest.approx(0.290394, abs=1e-6)
    padded = DistServeFit("vllm", 1, padded=True)
    assert padded.predict_step_s([1000, 800], [0, 0], [True, True]) == pytest.approx(0.321404, abs=1e-6)
    assert fit.predict_step_s([1, 1], [100, 200], [False, False]) == pytest.approx(0.025806, abs=1e-6)
    large_ms = 20.206356173691958 + 0.0004907727036234946 * 95 * 11 + 0.1200031385587413 * 95 + 2 + 1e-4 * 95 * 11
    assert fit.predict_step_s([1] * 95, [10] * 95, [False] * 95) == pytest.approx(large_ms / 1e3, rel=1e-12)
    assert fit.mixed_steps == 0
    # DistServe's context instance at TP2: 14.7430 + 96.0081 (0.0685772·1400) + 4.8012 (2.44957e-6·1400²) + 2.14
    assert DistServeFit("distserve", 2).lone_prefill_s(1400) == pytest.approx(0.117692, abs=1e-6)
    with pytest.raises(KeyError):
        DistServeFit("vllm", 2)  # DistServe measured vLLM at TP1, 2 and 4; only TP1 is carried


def test_prompts_of_1481_tokens_miss_the_ttft_slo_alone_under_vllm_023():
    """c·P² + b·P + a = 250 ms with a = 24.0522, b = 0.140609, c = 8.07658e-6: P = 1480.94, so
    1,480 tokens take 249.845 ms and 1,481 take 250.009 ms (roofline: 1,932, BENCHMARKS.md)."""
    fit = DistServeFit("vllm", 1)
    assert fit.lone_prefill_s(1480) == pytest.approx(0.249845, abs=1e-6)
    assert lone_ttft_misses(np.array([100, 1480, 1481, 2000]), fit.lone_prefill_s) == (0.5, 1481)


def test_distserve_goodput_rule_on_its_own_vllm_curve():
    """DistServe's measured vLLM curve (90, 90, 85, ... %) first crosses 90 % on the segment
    0.5 → 1 req/s, at 0.5 (its 0.50 and 4.6x = 2.30 / 0.50); a curve that never crosses gives the
    first rate; (1, 95 %) → (2, 85 %) crosses at 1.5."""
    assert find_intersection(DISTSERVE_RATES_PER_GPU, DISTSERVE_VLLM_ATTAINMENT, 0.9) == pytest.approx(0.5)
    assert find_intersection(DISTSERVE_RATES_PER_GPU, [0.8] * 8, 0.9) == 0.25
    assert find_intersection([1, 2], [0.95, 0.85], 0.9) == pytest.approx(1.5)


def test_vllm_023_pads_prompt_batches_and_caps_the_padding(tmp_path):
    """Prompts of 1,000, 800 and 700 tokens waiting at once. vLLM 0.2.3: 1,000 + 800 pad 200 <= 256
    and run as 2 × 1,000 (321.404 ms); adding 700 would pad 500, so it runs next, alone (22.0522 +
    98.3565 + 3.9575 + 2.07 = 126.436 ms): TTFTs 0.321404, 0.321404, 0.447840 s. The project's
    `vllm` runs all three in one unpadded step: 22.0522 + 0.140509·2500 + 8.07658e-6·2,130,000 +
    2.25 = 392.779 ms for each."""
    trace = tmp_path / "three.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,1000,2\n0.0,800,2\n0.0,700,2\n")
    point = SweepConfig.model_validate({"model": "llama-2-13b", "device": "a100-80gb",
                                        "trace": {"kind": "file", "path": str(trace)},
                                        "engine": {"scheduler": "vllm", "max_num_batched_tokens": 16384}})
    original_build = point_module.build_cost_model
    with distserve_prices("vllm", padded=True):
        padded = run_point(point)
    assert SCHEDULERS["vllm"] is VllmV0Scheduler and point_module.build_cost_model is original_build
    steps = padded.steps[padded.steps["num_prefill_tokens"] > 0]
    assert list(steps["num_prefill_tokens"]) == [1800, 700]
    ttft = padded.requests.sort_values("request_id")["ttft_s"].to_numpy()
    np.testing.assert_allclose(ttft, [0.321404, 0.321404, 0.447840], atol=1e-6)
    with distserve_prices("vllm"):
        whole = run_point(point)
    assert list(whole.steps["num_prefill_tokens"][whole.steps["num_prefill_tokens"] > 0]) == [2500]
    np.testing.assert_allclose(whole.requests["ttft_s"].to_numpy(), [0.392779] * 3, atol=1e-6)
