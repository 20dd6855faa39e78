"""Invariants of vllm_v1 with prefix caching over random traces with shared prefixes (hypothesis):
a referenced block is never free, in use + free = pool, reference counts equal the tables
holding a block, hits stay within prompt - 1 and whole blocks, and runs are deterministic and
equal with and without decode windows."""
from __future__ import annotations

from collections import Counter

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.acceptance import PositionalAcceptance, speculative_outcome_fn
from simulator.scheduler import SchedulerConfig, make_scheduler
from simulator.simulate import simulate
from tests.conftest import ConstantCostModel
from traces import Request


@st.composite
def shared_prefix_scenarios(draw):
    hash_tokens = draw(st.sampled_from([4, 8, 16]))
    families = [tuple(range(100 * f, 100 * f + draw(st.integers(0, 12)))) for f in range(3)]
    requests = []
    for i in range(draw(st.integers(0, 10))):
        prompt = draw(st.integers(1, 120))
        family = families[draw(st.integers(0, 2))]
        most = -(-prompt // hash_tokens)  # a prefix of the family's chain, no longer than the prompt
        ids = family[: draw(st.integers(0, min(most, len(family))))]
        requests.append(Request(i, draw(st.floats(0, 0.3)), prompt, draw(st.integers(1, 30)),
                                priority=draw(st.integers(0, 2)), prefix_hash_ids=ids, prefix_block_tokens=hash_tokens))
    max_num_seqs = draw(st.integers(1, 6))
    block_size = draw(st.sampled_from([4, 8, 16]))
    config = SchedulerConfig(
        num_gpu_blocks=draw(st.integers(6, 120)) * (16 // block_size), block_size=block_size, max_model_len=256,
        max_num_seqs=max_num_seqs, chunk_size=draw(st.integers(max_num_seqs, 96)),
        policy=draw(st.sampled_from(["fcfs", "priority"])), split_n=draw(st.sampled_from([0, 0, 2])),
        long_prefill_token_threshold=draw(st.sampled_from([None, 8])), enable_prefix_caching=True)
    return config, sorted(requests, key=lambda r: r.arrival_s), draw(st.integers(0, 3))


def check_pool(scheduler) -> None:
    bm = scheduler.block_manager
    free = bm.free_block_ids()
    holders = Counter(b for seq in scheduler.running for b in bm.block_table(seq.request_id))
    assert len(free) == len(set(free)) == bm.num_free
    assert not set(free) & set(holders), "a referenced block sits in the free queue"
    assert len(holders) + len(free) == bm.num_blocks, "blocks in use + free != pool"
    assert all(bm.ref_count(b) == n for b, n in holders.items())
    assert all(bm.ref_count(b) == 0 for b in free)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shared_prefix_scenarios())
def test_prefix_cache_pool_invariants(scenario):
    config, requests, seed = scenario
    scheduler = make_scheduler("vllm_v1", config)
    outcome_fn = speculative_outcome_fn(PositionalAcceptance(0.7, seed=seed))
    finished = [f for f in (scheduler.add_request(r) for r in requests) if f is not None]
    now, steps = 0.0, 0
    while scheduler.has_work():
        plan = scheduler.schedule(now)
        assert not plan.is_empty
        check_pool(scheduler)
        c = plan.columns
        for rid, context, table in zip(c.request_ids, c.context_tokens, c.block_tables):
            assert len(table) * config.block_size >= context  # the hit's blocks are in the table
        now += 0.01
        finished += scheduler.complete_step(plan, outcome_fn(plan), now)
        check_pool(scheduler)
        steps += 1
        assert steps < 20_000, "livelock"
    assert scheduler.block_manager.num_used == 0
    for f in finished:
        if f.finish_reason == "completed":
            assert 0 <= f.cached_tokens <= f.prompt_tokens - 1
            assert f.cached_tokens % config.block_size == 0
            assert f.generated_tokens == f.output_tokens


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shared_prefix_scenarios())
def test_prefix_cached_runs_are_deterministic_and_decode_windows_change_nothing(scenario):
    config, requests, seed = scenario

    def once(fast_forward=True):
        outcome = speculative_outcome_fn(PositionalAcceptance(0.7, seed=seed))
        return simulate(requests, make_scheduler("vllm_v1", config), ConstantCostModel(0.01), outcome_fn=outcome,
                        fast_forward=fast_forward)

    a, b, slow = once(), once(), once(False)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    pd.testing.assert_frame_equal(a.requests, slow.requests)
    pd.testing.assert_frame_equal(a.steps, slow.steps)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shared_prefix_scenarios())
def test_lazy_registration_of_unshared_content_changes_nothing(scenario):
    # Content no id names is registered only when its request is preempted (nobody else can hit
    # it). Naming each request's whole stream with ids of its own makes the same content
    # registered eagerly, as vLLM does: every record must be the same, block ids included.
    from dataclasses import replace
    config, requests, seed = scenario
    eager = [replace(r, prefix_hash_ids=tuple(10_000 * (r.request_id + 1) + k for k in range(
        -(-(r.prompt_tokens + r.output_tokens) // r.prefix_block_tokens)))) if not r.prefix_hash_ids else r
        for r in requests]

    def plans(trace):
        scheduler = make_scheduler("vllm_v1", config)
        outcome_fn = speculative_outcome_fn(PositionalAcceptance(0.7, seed=seed))
        for r in trace:
            scheduler.add_request(r)
        now, out = 0.0, []
        while scheduler.has_work():
            plan = scheduler.schedule(now)
            out.append(repr(plan))  # sequences with their block tables, preemptions, KV in use
            now += 0.01
            scheduler.complete_step(plan, outcome_fn(plan), now)
        return out

    assert plans(requests) == plans(eager)
