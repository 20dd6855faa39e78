"""Each scheduler's step sequence on a 3-request trace, worked out by hand from its docstring.

Trace (all arrive at 0, FCFS by id): R0 prompt 6 / output 3, R1 prompt 10 / output 2,
R2 prompt 4 / output 2. Chunking schedulers: chunk_size 8; non-chunking: max_num_batched_tokens
16. The KV pool is large (no preemption). Each step is listed as [(request_id, query tokens)].
"""
from __future__ import annotations

import pytest

from simulator.scheduler import SchedulerConfig, StepOutcome, make_scheduler
from traces import Request

TRACE = [Request(0, 0.0, 6, 3), Request(1, 0.0, 10, 2), Request(2, 0.0, 4, 2)]


def drive(name, requests=TRACE, max_steps=10_000, **cfg):
    """Run the scheduler alone with a constant 10 ms step; return the plans' (id, q) lists."""
    cfg.setdefault("num_gpu_blocks", 1000)
    cfg.setdefault("max_model_len", 64)
    cfg.setdefault("max_num_seqs", 4)
    scheduler = make_scheduler(name, SchedulerConfig(**cfg))
    for r in requests:
        assert scheduler.add_request(r) is None
    steps, now = [], 0.0
    while scheduler.has_work():
        plan = scheduler.schedule(now)
        steps.append([(s.request_id, s.num_query_tokens) for s in plan.sequences])
        now += 0.01
        scheduler.complete_step(plan, StepOutcome.without_speculation(plan), now)
        assert len(steps) < max_steps
    return steps


def test_sarathi_decodes_then_partial_prefills_then_new_prefills():
    assert drive("sarathi", chunk_size=8) == [
        [(0, 6), (1, 2)],          # admit R0 whole (6), R1 gets the 2 left
        [(0, 1), (1, 7)],          # R0 decodes; R1 continues with 7 of the 7 left
        [(0, 1), (1, 1), (2, 4)],  # R0's last token; R1's final chunk; R2 admitted
        [(1, 1), (2, 1)],
    ]


def test_vllm_v0_prefills_first_and_stalls_decodes():
    assert drive("vllm", max_num_batched_tokens=16) == [
        [(0, 6), (1, 10)],         # R2 (4) does not fit the 0 tokens left
        [(2, 4)],                  # a waiting prompt fits: prefill-only step, decodes stall
        [(0, 1), (1, 1), (2, 1)],  # R1 and R2 finish
        [(0, 1)],
    ]


def test_vllm_v1_running_first_then_waiting():
    assert drive("vllm_v1", chunk_size=8) == [
        [(0, 6), (1, 2)],
        [(0, 1), (1, 7)],
        [(0, 1), (1, 1), (2, 4)],
        [(1, 1), (2, 1)],
    ]


def test_vllm_v1_long_prefill_threshold_caps_every_chunk():
    assert drive("vllm_v1", chunk_size=8, long_prefill_token_threshold=4) == [
        [(0, 4), (1, 4)],
        [(0, 2), (1, 4), (2, 2)],  # R2 admitted with the 2 tokens left
        [(0, 1), (1, 2), (2, 2)],
        [(0, 1), (1, 1), (2, 1)],
    ]


def test_orca_mixes_whole_prompts_with_decodes():
    assert drive("orca", max_num_batched_tokens=16) == [
        [(0, 6), (1, 10)],
        [(0, 1), (1, 1), (2, 4)],  # decodes take 2 of 16; R2's whole prompt fits the 14 left
        [(0, 1), (2, 1)],
    ]


def test_faster_transformer_admits_only_when_the_batch_has_drained():
    assert drive("faster_transformer", max_num_batched_tokens=16) == [
        [(0, 6), (1, 10)],
        [(0, 1), (1, 1)],
        [(0, 1)],
        [(2, 4)],
        [(2, 1)],
    ]


def test_simple_chunking_alternates_prefill_and_decode_steps():
    assert drive("simple_chunking", chunk_size=8) == [
        [(0, 6), (1, 2)],          # prefill turn
        [(0, 1)],                  # decode turn
        [(1, 8)],                  # prefill turn: R1's final chunk
        [(0, 1), (1, 1)],          # decode turn
        [(2, 4)],
        [(2, 1)],
    ]


def test_fastgen_fills_each_pass_to_the_budget():
    assert drive("fastgen", chunk_size=8) == [
        [(0, 6), (1, 2)],
        [(0, 1), (1, 7)],
        [(0, 1), (1, 1), (2, 4)],
        [(1, 1), (2, 1)],
    ]


def blocks_per_step(name, **cfg):
    scheduler = make_scheduler(name, SchedulerConfig(num_gpu_blocks=1000, max_num_seqs=64, **cfg))
    scheduler.add_request(Request(0, 0.0, 250, 4))
    held, now = [], 0.0
    while scheduler.has_work():
        plan = scheduler.schedule(now)
        held.append(len(plan.sequences[0].block_table))
        now += 0.01
        scheduler.complete_step(plan, StepOutcome.without_speculation(plan), now)
    return held


@pytest.mark.parametrize("name,expected", [
    # Case 8 (chunk_not_block_multiple): 250 tokens in chunks of 100, 100, 50; block_size 16.
    ("vllm_v1", [7, 13, 16, 16, 16, 16]),    # per chunk: ceil(100/16), ceil(200/16), ceil(250/16)
    ("fastgen", [7, 13, 16, 16, 16, 16]),
    ("sarathi", [16, 16, 16, 16, 16, 16]),   # whole prompt reserved at admission
])
def test_blocks_held_are_ceil_of_tokens_reserved(name, expected):
    assert blocks_per_step(name, chunk_size=100) == expected


def test_priority_policy_serves_lower_priority_value_first():
    requests = [Request(0, 0.0, 8, 1, priority=5), Request(1, 0.0, 8, 1, priority=0)]
    assert drive("sarathi", requests, chunk_size=8, policy="priority") == [[(1, 8)], [(0, 8)]]
    assert drive("sarathi", requests, chunk_size=8) == [[(0, 8)], [(1, 8)]]


def test_swap_preemption_keeps_computed_tokens():
    # 6 blocks of 4 tokens: R0 and R1 (prompt 8 = 2 blocks each) grow until the pool is full;
    # the newest is swapped out and later resumes without recomputing its prompt.
    requests = [Request(0, 0.0, 8, 9), Request(1, 0.0, 8, 9)]
    cfg = dict(num_gpu_blocks=6, block_size=4, max_model_len=64, max_num_seqs=4, chunk_size=16)
    for mode, recomputed in (("recompute", True), ("swap", False)):
        scheduler = make_scheduler("sarathi", SchedulerConfig(preemption=mode, **cfg))
        for r in requests:
            scheduler.add_request(r)
        now, finished, swapped = 0.0, [], 0
        while scheduler.has_work():
            plan = scheduler.schedule(now)
            swapped += plan.swap_in_tokens + plan.swap_out_tokens
            now += 0.01
            finished += scheduler.complete_step(plan, StepOutcome.without_speculation(plan), now)
        by_id = {f.request_id: f for f in finished}
        assert by_id[0].num_preemptions == 0 and by_id[1].num_preemptions >= 1
        assert (by_id[1].recomputed_tokens > 0) is recomputed
        assert (swapped > 0) is (not recomputed)
        assert all(f.generated_tokens == 9 for f in finished)
