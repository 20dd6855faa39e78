"""Automatic prefix caching (vLLM V1 semantics) in the shared block manager and vllm_v1,
with block sequences worked out by hand in each test's comments."""
from __future__ import annotations

import pytest

from simulator.scheduler import SchedulerConfig, StepOutcome, make_scheduler
from simulator.scheduler.prefix_cache import block_keys, named_tokens
from tests.conftest import ConstantCostModel
from traces import Request


def v1(num_gpu_blocks=1000, caching=True, **cfg):
    cfg.setdefault("block_size", 16)
    cfg.setdefault("max_model_len", 4096)
    cfg.setdefault("max_num_seqs", 8)
    cfg.setdefault("chunk_size", 256)
    return make_scheduler("vllm_v1", SchedulerConfig(num_gpu_blocks=num_gpu_blocks, enable_prefix_caching=caching,
                                                     **cfg))


def run(scheduler, requests, now=0.0):
    """Add `requests`, step until idle; return (plans, finished by id, end time)."""
    for r in requests:
        assert scheduler.add_request(r) is None
    plans, finished = [], {}
    while scheduler.has_work():
        plan = scheduler.schedule(now)
        plans.append(plan)
        now += 0.01
        for f in scheduler.complete_step(plan, StepOutcome.without_speculation(plan), now):
            finished[f.request_id] = f
        assert len(plans) < 10_000
    return plans, finished, now


def cols(plan):
    c = plan.columns
    return list(zip(c.request_ids, c.query_tokens, c.context_tokens))


def test_second_request_computes_only_what_the_shared_3_block_prefix_leaves():
    # Block size 16; A (50 tokens) and B (60 tokens) share 3 blocks (48 tokens) named by ids
    # 1, 2, 3 of 16-token blocks. A's admission allocates 4 blocks and caches its 3 full ones
    # (min(0 + 50, 50) // 16 = 3) at once, so B, admitted next in the same step, hits 3 blocks:
    # at most (60 - 1) // 16 = 3, i.e. 48 tokens, and computes 12 over a context of 48.
    a = Request(0, 0.0, 50, 1, prefix_hash_ids=(1, 2, 3), prefix_block_tokens=16)
    b = Request(1, 0.0, 60, 1, prefix_hash_ids=(1, 2, 3), prefix_block_tokens=16)
    scheduler = v1()
    plans, done, _ = run(scheduler, [a, b])
    assert cols(plans[0]) == [(0, 50, 0), (1, 12, 48)]
    tables = plans[0].columns.block_tables
    assert tables[1][:3] == tables[0][:3] and len(set(tables[1][3:]) | set(tables[0])) == 5
    assert plans[0].kv_blocks_used == 5  # 4 for A + 1 new for B, not 8
    assert (done[0].cached_tokens, done[1].cached_tokens) == (0, 48)
    # Without caching (or without shared ids) B computes all 60.
    plans, done, _ = run(v1(caching=False), [a, b])
    assert cols(plans[0]) == [(0, 50, 0), (1, 60, 0)] and plans[0].kv_blocks_used == 8
    plans, _, _ = run(v1(), [Request(0, 0.0, 50, 1), Request(1, 0.0, 60, 1)])
    assert cols(plans[0]) == [(0, 50, 0), (1, 60, 0)]


def test_a_whole_cached_prompt_still_computes_its_last_block():
    # A 48-token prompt whose 3 blocks are all cached hits only (48 - 1) // 16 = 2 blocks: the
    # last token is always computed for its logits, and hits are whole blocks, so 16 are computed.
    ids = dict(prefix_hash_ids=(7, 8, 9), prefix_block_tokens=16)
    scheduler = v1()
    run(scheduler, [Request(0, 0.0, 48, 1, **ids)])
    plans, done, _ = run(scheduler, [Request(1, 1.0, 48, 1, **ids)], now=1.0)
    assert cols(plans[0]) == [(1, 16, 32)] and done[1].cached_tokens == 32


def serve_in_turn(scheduler, requests):
    """Each request alone, after the previous one finished."""
    done, now = {}, 0.0
    for r in requests:
        _, finished, now = run(scheduler, [r], now)
        done.update(finished)
    return done


def test_a_pool_one_block_too_small_evicts_the_oldest_free_cached_block():
    # Block size 16, prompts of 40 tokens and 1 output token: each request holds 3 blocks, 2 full
    # (cached) and one partial (not). Freed tail first; cached blocks join the free queue's tail,
    # the partial one its head. Pool of 6 blocks, queue [0..5]:
    #   A takes 0 1 2, frees -> [2 3 4 5 1 0]; B takes 2 3 4, frees -> [4 5 1 0 3 2];
    #   C takes 4 5 and then 1: A's tail block, the oldest free cached block, is evicted.
    # B again hits both of its blocks (32 = (40 - 1) // 16 * 16 tokens) and takes block 1 from the
    # head for its partial block; A again hits only its first block (16 tokens).
    def req(rid, base):
        return Request(rid, 0.0, 40, 1, prefix_hash_ids=(base, base + 1, base + 2), prefix_block_tokens=16)

    scheduler = v1(num_gpu_blocks=6)
    bm = scheduler.block_manager
    serve_in_turn(scheduler, [req(0, 10), req(1, 20)])
    assert bm.free_block_ids() == [4, 5, 1, 0, 3, 2]
    serve_in_turn(scheduler, [req(2, 30)])
    assert not bm.is_cached(1) and bm.is_cached(0) and bm.is_cached(3) and bm.is_cached(2)
    assert bm.free_block_ids() == [1, 0, 3, 2, 5, 4]  # C's partial block (1) first, its cached 5, 4 last
    done = serve_in_turn(scheduler, [req(3, 20)])
    assert done[3].cached_tokens == 32
    assert bm.free_block_ids() == [1, 0, 5, 4, 3, 2]
    done = serve_in_turn(scheduler, [req(4, 10)])
    assert done[4].cached_tokens == 16
    # One block more and nothing of A is evicted: A hits both of its full blocks.
    scheduler = v1(num_gpu_blocks=7)
    done = serve_in_turn(scheduler, [req(0, 10), req(1, 20), req(2, 30), req(3, 10)])
    assert done[3].cached_tokens == 32


def test_preempted_request_resumed_before_eviction_recomputes_nothing_it_had_cached():
    # Pool 5 blocks of 16; A and B: prompt 32 (2 blocks each, cached at admission), A outputs 10,
    # B 20. Step 1 admits both (4 blocks) and each emits a token. Step 2: A's decode takes the last
    # free block; B's needs a block, so B (the tail of running) is preempted: its 2 cached blocks
    # go to the free queue's tail. B waits (it needs 2 hit + 1 new block, only its own 2 are free)
    # until A finishes after 10 tokens (41 KV tokens, 3 blocks) and frees its partial block to the
    # queue's head. B then hits 32 = (33 - 1) // 16 * 16 tokens and computes 1 token over 32.
    a, b = Request(0, 0.0, 32, 10), Request(1, 0.0, 32, 20)
    plans, done, _ = run(v1(num_gpu_blocks=5), [a, b])
    assert cols(plans[0]) == [(0, 32, 0), (1, 32, 0)]
    assert plans[1].preempted_ids == (1,) and cols(plans[1]) == [(0, 1, 32)]
    resumed = next(p for p in plans[2:] if 1 in p.columns.request_ids)
    assert (1, 1, 32) in cols(resumed)
    assert (done[1].num_preemptions, done[1].recomputed_tokens, done[1].resumed_cached_tokens) == (1, 0, 32)
    assert done[1].cached_tokens == 0 and done[1].generated_tokens == 20
    # Without caching B prefills its 32 + 1 tokens again: 32 recomputed.
    plans, done, _ = run(v1(num_gpu_blocks=5, caching=False), [a, b])
    resumed = next(p for p in plans[2:] if 1 in p.columns.request_ids)
    assert (1, 33, 0) in cols(resumed)
    assert (done[1].recomputed_tokens, done[1].resumed_cached_tokens) == (32, 0)


def test_a_shared_block_is_not_freed_while_another_request_holds_it():
    ids = dict(prefix_hash_ids=(1, 2), prefix_block_tokens=16)
    scheduler = v1(num_gpu_blocks=10)
    bm = scheduler.block_manager
    scheduler.add_request(Request(0, 0.0, 40, 5, **ids))
    scheduler.add_request(Request(1, 0.0, 40, 1, **ids))
    plan = scheduler.schedule(0.0)
    shared = plan.columns.block_tables[0][:2]
    assert [bm.ref_count(b) for b in shared] == [2, 2]
    scheduler.complete_step(plan, StepOutcome.without_speculation(plan), 0.01)  # request 1 finishes
    assert [bm.ref_count(b) for b in shared] == [1, 1]
    assert not set(shared) & set(bm.free_block_ids())


def test_block_keys_map_512_token_hash_ids_to_the_engine_block_size():
    # Mooncake-style: 2 ids of 512 tokens for a 700-token prompt; the second is partial and
    # names only the prompt's tokens, so 16-token blocks ending past 700 are the request's own.
    r = Request(5, 0.0, 700, 100, prefix_hash_ids=(11, 12))
    assert named_tokens(r) == 700
    keys = block_keys(r, 16, 0, 50)
    assert keys[0] == (11, 16) and keys[31] == (11, 512) and keys[32] == (12, 528)
    assert keys[42] == (12, 688) and keys[43] == (5, 43, 0)  # block 43 ends at 704 > 700
    # Ids past the prompt's last block name output tokens (a session's answer).
    r = Request(6, 0.0, 20, 30, prefix_hash_ids=(1, 2, 3), prefix_block_tokens=16)
    assert named_tokens(r) == 48


def test_enable_prefix_caching_defaults_and_refusals():
    assert v1(caching=None).prefix_caching
    cfg = SchedulerConfig(num_gpu_blocks=100, chunk_size=64)
    assert not make_scheduler("sarathi", cfg).prefix_caching
    with pytest.raises(ValueError, match="enable_prefix_caching is not supported by scheduler 'sarathi'"):
        make_scheduler("sarathi", SchedulerConfig(num_gpu_blocks=100, chunk_size=64, enable_prefix_caching=True))


def test_vllm_v1_keeps_no_watermark_and_sarathi_one_percent():
    cfg = dict(num_gpu_blocks=200, chunk_size=64)
    assert make_scheduler("vllm_v1", SchedulerConfig(**cfg)).block_manager.watermark_blocks == 0
    assert make_scheduler("sarathi", SchedulerConfig(**cfg)).block_manager.watermark_blocks == 2


def test_bad_prefix_ids_are_clear_errors():
    with pytest.raises(ValueError, match="prefix_hash_ids must be a tuple of integers"):
        Request(0, 0.0, 10, 1, prefix_hash_ids=(1, "a"))
    with pytest.raises(ValueError, match="prefix_block_tokens must be an int >= 1"):
        Request(0, 0.0, 10, 1, prefix_hash_ids=(1, 2, 3), prefix_block_tokens=0)
    # Ids past the stream's end name nothing: 11 tokens, 3 ids of 8 tokens name the 11.
    assert named_tokens(Request(0, 0.0, 10, 1, prefix_hash_ids=(1, 2, 3), prefix_block_tokens=8)) == 11


def test_summary_counts_queries_hits_and_recomputed_tokens_as_vllm(constant_cost):
    # The two-request case of the first test through the simulator: queries 50 + 60, hits 48.
    from simulator.simulate import simulate
    ids = dict(prefix_hash_ids=(1, 2, 3), prefix_block_tokens=16)
    requests = [Request(0, 0.0, 50, 2, **ids), Request(1, 0.0, 60, 2, **ids), Request(2, 0.0, 3000, 2)]
    result = simulate(requests, v1(max_model_len=1024), constant_cost)  # request 2 is rejected (too long)
    s = result.summary
    assert (s["prefix_cache_queries_tokens"], s["prefix_cache_hits_tokens"]) == (110, 48)
    assert s["prefix_cache_hit_rate"] == pytest.approx(48 / 110)
    assert (s["preempted_cache_hits_tokens"], s["recomputed_tokens"]) == (0, 0)
    assert result.requests["cached_tokens"].tolist() == [0, 48, 0]


class _ConstantDecodes(ConstantCostModel):
    """10 ms steps, with the vectorised decode-window pricing the replica's fast path uses."""

    def predict_decode_steps_s(self, context_tokens, num_steps, first_step):
        return [self.step_s] * num_steps


def test_mooncake_conversation_trace_hit_rate_is_the_share_of_prefix_blocks_seen_before():
    # Caching on, a pool that never evicts, each request after the previous one ended: a
    # request hits the leading run of its 512-token hash ids that an earlier request held as a
    # full prompt block, up to (prompt - 1) // 512 blocks. Computed here from the file alone.
    import json

    from simulator.simulate import simulate
    from tests.conftest import shared_path

    rows = [json.loads(line) for line in shared_path("traces", "mooncake", "conversation_trace.jsonl").open()]
    size, seen, hits, queries = 512, set(), 0, 0
    for row in rows:
        ids, prompt = row["hash_ids"], row["input_length"]
        run_length = 0
        while run_length < len(ids) and ids[run_length] in seen:
            run_length += 1
        hits += min(run_length, (prompt - 1) // size) * size
        queries += prompt
        seen.update(ids[: prompt // size])
    # One output token each: outputs do not change what a later prompt can hit here (no request
    # overlaps another, nothing is evicted), and 5 M token times would only slow the test.
    requests = [Request(i, 1000.0 * i, row["input_length"], 1, prefix_hash_ids=tuple(row["hash_ids"]))
                for i, row in enumerate(rows)]
    pool = sum(-(-(r.prompt_tokens + r.output_tokens) // size) for r in requests)  # every block ever allocated
    scheduler = v1(num_gpu_blocks=pool, block_size=size, max_model_len=200_000, max_num_seqs=1, chunk_size=200_000)
    summary = simulate(requests, scheduler, _ConstantDecodes(0.01)).summary
    assert summary["completed"] == len(rows) == 12031
    assert (summary["prefix_cache_queries_tokens"], summary["prefix_cache_hits_tokens"]) == (queries, hits)
    assert summary["prefix_cache_hit_rate"] == pytest.approx(0.37338, abs=1e-5)  # 36.6 % of the ids were seen before


def test_engine_enable_prefix_caching_key():
    from experiments.config import SweepConfig
    from experiments.deployment import build_scheduler_config
    trace = {"kind": "synthetic", "qps": 1, "prompt_tokens": 10, "output_tokens": 10, "num_requests": 4}
    on = SweepConfig(trace=trace, engine={"scheduler": "vllm_v1", "chunk_size": 512})
    off = SweepConfig(trace=trace, engine={"scheduler": "vllm_v1", "chunk_size": 512, "enable_prefix_caching": False})
    assert build_scheduler_config(on).enable_prefix_caching is True
    assert build_scheduler_config(off).enable_prefix_caching is False
    sarathi = SweepConfig(trace=trace, engine={"scheduler": "sarathi", "chunk_size": 512})
    assert build_scheduler_config(sarathi).enable_prefix_caching is None  # the policy's default: off
    with pytest.raises(ValueError, match="engine.enable_prefix_caching is not used by scheduler 'sarathi'"):
        SweepConfig(trace=trace, engine={"scheduler": "sarathi", "chunk_size": 512, "enable_prefix_caching": True})


def test_mooncake_hash_ids_that_are_not_integer_lists_are_counted_row_errors(tmp_path):
    from traces import TraceFormatError
    from traces.readers import read_trace
    lines = ['{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}',
             '{"timestamp": 1, "input_length": 600, "output_length": 5, "hash_ids": [0, "x"]}',
             '{"timestamp": 2, "input_length": 600, "output_length": 5, "hash_ids": 7}',
             '{"timestamp": 3, "input_length": 600, "output_length": 5}',
             '{"timestamp": 4, "input_length": 600, "output_length": 5, "hash_ids": [1.5, true]}']
    path = tmp_path / "mooncake.jsonl"
    path.write_text("\n".join(lines) + "\n")
    loaded = read_trace(path, format="mooncake", strict=False)
    assert [r.prefix_hash_ids for r in loaded.requests] == [(0, 1), ()]
    assert loaded.rejected_rows == {"hash_ids not a list of integers": [2, 3, 5]}
    with pytest.raises(TraceFormatError, match="row 2 .*field 'hash_ids': hash_ids not a list of integers: got '\\[0, \"x\"\\]'; "
                                               "expected a list of integers"):
        read_trace(path, format="mooncake", strict=True)


def test_vllm_v1_priority_victim_scheduled_earlier_in_the_step_is_taken_out_of_it():
    # Blocks of 4, a pool of 4. A (priority 1, prompt 4) runs first; B (priority 0, prompt 8)
    # arrives later and is admitted behind it in `running` (vLLM appends): step 2 holds A's 2
    # blocks and B's 2. Step 3: A's decode (token 5) fits its block, B's (token 8) needs a new
    # one and none is free: the victim is max (priority, arrival) = A, already scheduled in this
    # step, so it is taken out (budget back, blocks freed) and B runs alone. Under FCFS the
    # victim is the tail of running, B itself, and A runs alone.
    a = Request(0, 0.0, 4, 10, priority=1)
    b = Request(1, 0.005, 8, 4, priority=0)
    for policy, step3, victim in (("priority", [(1, 1, 8)], (0,)), ("fcfs", [(0, 1, 5)], (1,))):
        scheduler = v1(num_gpu_blocks=4, block_size=4, policy=policy, max_num_seqs=4, chunk_size=16)
        scheduler.add_request(a)
        plans, now = [], 0.0
        while len(plans) < 3:
            if len(plans) == 1:
                scheduler.add_request(b)
            plan = scheduler.schedule(now)
            plans.append(plan)
            now += 0.01
            scheduler.complete_step(plan, StepOutcome.without_speculation(plan), now)
        assert cols(plans[0]) == [(0, 4, 0)] and cols(plans[1]) == [(0, 1, 4), (1, 8, 0)]
        assert cols(plans[2]) == step3 and plans[2].preempted_ids == victim, policy


def test_a_pass_that_changes_nothing_ends_vllm_v1s_retry_loop():
    """A running request that cannot grow preempts itself; the retry pass can admit nothing while
    blocks are held outside the scheduler (a KV transfer's) and preempts nothing: the step is
    empty instead of the pass repeating forever (as it did)."""
    scheduler = v1(num_gpu_blocks=4, caching=False, chunk_size=64, max_num_seqs=2)
    assert scheduler.add_request(Request(0, 0.0, 16, 8)) is None
    plan = scheduler.schedule(0.0)  # the 16-token prefill: 1 block, full
    scheduler.complete_step(plan, StepOutcome.without_speculation(plan), 0.01)
    scheduler.block_manager.grow_to(-1, 3 * 16)  # the other 3 blocks held elsewhere
    plan = scheduler.schedule(0.01)  # its decode needs a second block: none is free
    assert len(plan) == 0 and plan.preempted_ids == (0,)
    assert [s.request_id for s in scheduler.waiting] == [0]
