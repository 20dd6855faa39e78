"""The right answers of ../shared/cases (capacity and chunking), as scheduler tests.

Model llama-3-8b (max_model_len 8192), block_size 16, as the cases README says. The traces are
a few rows each, written here as `Request`s so the tests read like the spec.
"""
from __future__ import annotations

import math

import pytest

from simulator.scheduler import SchedulerConfig, StepOutcome, make_scheduler
from simulator.simulate import simulate
from tests.conftest import ConstantCostModel
from traces import Request


def reqs(*rows):
    return [Request(i, a, p, o) for i, (a, p, o) in enumerate(rows)]


def run(name, rows, **cfg):
    config = SchedulerConfig(max_model_len=8192, block_size=16, **cfg)
    return simulate(reqs(*rows), make_scheduler(name, config), ConstantCostModel(0.01))


def reasons(result):
    return list(result.requests["finish_reason"])


# Case 1: kv_pool_too_small
def test_kv_pool_too_small_rejects_request_1_and_serves_request_2():
    result = run("sarathi", [(0.0, 1002, 50), (0.1, 20, 5)], num_gpu_blocks=50, chunk_size=512)
    assert reasons(result) == ["rejected_kv_capacity", "completed"]
    assert result.summary["completed"] == 1 and result.summary["rejected"] == 1
    assert result.requests.loc[1, "generated_tokens"] == 5


@pytest.mark.parametrize("name,extra", [("sarathi", {"chunk_size": 512}), ("vllm", {})])
def test_usable_pool_boundary(name, extra):
    # 50 blocks, watermark floor(0.01 * 50) = 0: usable = 50 blocks = 800 KV slots.
    # Final KV footprint = prompt + output - 1. 700 + 101 - 1 = 800 -> exactly 50 blocks: served.
    # 700 + 102 - 1 = 801 -> 51 blocks: rejected, never left waiting.
    ok = run(name, [(0.0, 700, 101)], num_gpu_blocks=50, **extra)
    assert reasons(ok) == ["completed"]
    over = run(name, [(0.0, 700, 102)], num_gpu_blocks=50, **extra)
    assert reasons(over) == ["rejected_kv_capacity"]


def test_usable_pool_boundary_with_watermark():
    # 400 blocks: watermark floor(0.01 * 400) = 4, usable 396 blocks = 6336 slots.
    ok = run("sarathi", [(0.0, 6000, 337)], num_gpu_blocks=400, chunk_size=512)  # 6336 slots
    over = run("sarathi", [(0.0, 6000, 338)], num_gpu_blocks=400, chunk_size=512)  # 6337 slots
    assert reasons(ok) == ["completed"] and reasons(over) == ["rejected_kv_capacity"]


# Case 2: prompt_fits_but_total_does_not
def test_prompt_fits_but_total_does_not():
    result = run("sarathi", [(0.0, 120, 24)], num_gpu_blocks=8, chunk_size=64)
    assert reasons(result) == ["rejected_kv_capacity"]  # 120 + 24 - 1 = 143 tokens -> 9 blocks > 8
    assert result.summary["num_preemptions"] == 0
    assert result.summary["num_steps"] == 0


# Case 3: preemption_livelock
def test_preemption_livelock_finishes_all_eight():
    # Each request needs ceil((300 + 200 - 1) / 16) = 32 of 40 blocks: no two finish together.
    result = run("sarathi", [(0.0, 300, 200)] * 8, num_gpu_blocks=40, max_num_seqs=8, chunk_size=512)
    assert result.summary["completed"] == 8
    assert int(result.requests["generated_tokens"].sum()) == 1600
    assert result.summary["num_steps"] < 100_000
    assert 0 < result.summary["num_preemptions"] < 200
    assert result.summary["recomputed_tokens"] > 0
    assert result.requests["recomputed_tokens"].sum() == result.summary["recomputed_tokens"]


def test_oldest_running_request_is_never_preempted_for_a_younger_one():
    config = SchedulerConfig(num_gpu_blocks=40, block_size=16, max_model_len=8192, max_num_seqs=8, chunk_size=512)
    scheduler = make_scheduler("sarathi", config)
    for r in reqs(*[(0.0, 300, 200)] * 8):
        scheduler.add_request(r)
    now = 0.0
    steps = 0
    while scheduler.has_work():
        running_before = {s.request_id for s in scheduler.running}
        plan = scheduler.schedule(now)
        if plan.preempted_ids:
            oldest = min(running_before)  # ids are in arrival order (all arrive at 0, FCFS by id)
            assert oldest not in plan.preempted_ids
            survivors = running_before - set(plan.preempted_ids)
            # every victim is younger than every survivor that stayed running
            assert max(plan.preempted_ids) > max(survivors, default=-1) or not survivors
        now += 0.01
        scheduler.complete_step(plan, StepOutcome.without_speculation(plan), now)
        steps += 1
    assert steps < 100_000


# Case 4: prompt_over_budget_no_chunking
def test_prompt_over_budget_rejected_by_vllm():
    result = run("vllm", [(0.0, 2715, 16), (0.1, 100, 16)], num_gpu_blocks=10_000, max_num_batched_tokens=2560)
    assert reasons(result) == ["rejected_budget", "completed"]
    assert result.requests.loc[1, "generated_tokens"] == 16


def test_prompt_over_budget_completes_with_sarathi_in_six_chunks():
    config = SchedulerConfig(num_gpu_blocks=10_000, block_size=16, max_model_len=8192, chunk_size=512)
    scheduler = make_scheduler("sarathi", config)
    scheduler.add_request(Request(0, 0.0, 2715, 16))
    chunks = []
    now = 0.0
    while scheduler.has_work():
        plan = scheduler.schedule(now)
        chunks += [s.num_query_tokens for s in plan.sequences if s.is_prefill]
        now += 0.01
        scheduler.complete_step(plan, StepOutcome.without_speculation(plan), now)
    assert chunks == [512] * 5 + [155]


# Case 5: all_unservable / empty_trace
def test_all_unservable_gives_complete_summary():
    result = run("sarathi", [(0.0, 65536, 128), (1.0, 65536, 128)], num_gpu_blocks=10_000, chunk_size=512)
    assert reasons(result) == ["rejected_too_long"] * 2
    s = result.summary
    assert s["completed"] == 0 and s["rejected"] == 2 and s["rejected_too_long"] == 2
    assert s["throughput_rps"] == 0 and s["output_throughput_tps"] == 0
    assert math.isnan(s["ttft_s_p99"]) and math.isnan(s["tbt_s_p50"]) and math.isnan(s["e2e_s_mean"])


def test_empty_trace_gives_complete_summary():
    result = run("sarathi", [], num_gpu_blocks=100, chunk_size=512)
    s = result.summary
    assert s["num_requests"] == 0 and s["completed"] == 0 and s["rejected"] == 0
    assert s["throughput_rps"] == 0 and math.isnan(s["ttft_s_p50"])


# Case 8: chunk_not_block_multiple
def _blocks_per_step(name, **cfg):
    config = SchedulerConfig(num_gpu_blocks=1000, block_size=16, max_model_len=8192, **cfg)
    scheduler = make_scheduler(name, config)
    scheduler.add_request(Request(0, 0.0, 250, 4))
    held, queries, now = [], [], 0.0
    while scheduler.has_work():
        plan = scheduler.schedule(now)
        held.append(len(plan.sequences[0].block_table))
        queries.append(plan.sequences[0].num_query_tokens)
        now += 0.01
        scheduler.complete_step(plan, StepOutcome.without_speculation(plan), now)
    return queries, held


def test_sarathi_reserves_whole_prompt_at_admission():
    queries, held = _blocks_per_step("sarathi", chunk_size=100)
    assert queries == [100, 100, 50, 1, 1, 1]
    # 250 tokens -> 16 blocks from the first chunk; decodes reach 253 KV tokens -> still 16.
    assert held == [16, 16, 16, 16, 16, 16]


def test_vllm_runs_whole_prompt_in_one_step():
    queries, held = _blocks_per_step("vllm")
    assert queries == [250, 1, 1, 1]
    assert held[0] == 16


def test_unknown_scheduler_names_valid_ones():
    with pytest.raises(ValueError, match="sarathi"):
        make_scheduler("lightllm", SchedulerConfig(num_gpu_blocks=10))


def test_no_request_is_scheduled_before_it_arrives_despite_float_rounding():
    # 0.3303583462639957 + (0.99999 - 0.3303583462639957) is one ulp short of 0.99999 in
    # floating point; the arrival delay is rounded up so the request never starts early.
    result = run("faster_transformer", [(0.3303583462639957, 1, 1), (0.99999, 1, 1)],
                 num_gpu_blocks=64, max_num_seqs=1)
    r = result.requests
    assert (r["first_scheduled_s"] >= r["arrival_s"]).all()
    assert r.loc[1, "first_scheduled_s"] == pytest.approx(0.99999, abs=1e-12)


def test_truncate_policy_caps_output_at_max_model_len_and_counts_it():
    # max_model_len 8192: 8000 + 300 does not fit. Rejected by default; under `truncate` it
    # generates 192 tokens (8000 + 192 = 8192) and ends as `truncated`. A prompt that fills the
    # context alone is still rejected.
    rows = [(0.0, 8000, 300), (0.0, 8192, 10), (0.0, 100, 5)]
    default = run("sarathi", rows, num_gpu_blocks=2000, chunk_size=512)
    assert reasons(default) == ["rejected_too_long", "rejected_too_long", "completed"]
    truncated = run("sarathi", rows, num_gpu_blocks=2000, chunk_size=512, on_too_long="truncate")
    assert reasons(truncated) == ["truncated", "rejected_too_long", "completed"]
    r = truncated.requests
    assert r.loc[0, "generated_tokens"] == 192 and r.loc[0, "output_tokens"] == 300
    assert truncated.summary["truncated"] == 1 and truncated.summary["completed"] == 1
    # Its tokens count in throughput and its latencies in the percentiles (case 11).
    s = truncated.summary
    assert s["output_throughput_tps"] * s["makespan_s"] == pytest.approx(192 + 5)
