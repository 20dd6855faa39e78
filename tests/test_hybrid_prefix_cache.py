"""Prefix caching with sliding-window layers (simulator/scheduler/hybrid_prefix_cache.py): vLLM's hit
rule over a full-attention and a windowed KV cache group, block by block by hand in the comments.

Block size 4 throughout the manager tests; a window of 8 tokens needs ceil(7 / 4) = 2 consecutive
cached blocks at the end of a windowed hit.
"""
from __future__ import annotations

import pytest

from simulator.scheduler import SchedulerConfig, make_scheduler
from simulator.scheduler.hybrid_prefix_cache import NULL, HybridPrefixCachingBlockManager
from simulator.scheduler.kv_offload import KvOffload
from tests.test_prefix_cache import run
from traces import Request


def ids(n: int) -> dict:
    return dict(prefix_hash_ids=tuple(range(1, n + 1)), prefix_block_tokens=4)


def manager(num_blocks=24, full=1, sliding=1, window=8) -> HybridPrefixCachingBlockManager:
    return HybridPrefixCachingBlockManager(num_blocks, 4, 0.0, full, sliding, window)


def test_a_hit_needs_the_window_blocks_at_its_end_and_survives_losing_the_older_ones():
    bm = manager()
    a = Request(0, 0.0, 24, 1, **ids(6))
    bm.grow_to(0, 24)  # full group: blocks 0-5; windowed group: blocks 6-11
    bm.cache_blocks(0, 24, a)
    b = Request(1, 0.0, 40, 1, **ids(6))
    # Full group: blocks 0-5 cached, block 6 is B's own -> 6. Windowed: from block 5 down, 5 and 4
    # cached: a run of 2 -> the hit ends at block 6. 24 tokens.
    hit = bm.lookup(b, (40 - 1) // 4)
    assert len(hit) == 6 and hit.groups == [[0, 1, 2, 3, 4, 5], [NULL, NULL, NULL, NULL, 10, 11]]
    # B's 40 slots: 10 blocks a group, 6 of them hit -> 4 new in each group; the hit blocks are
    # held by A (none taken from the free queue); the windowed group takes only blocks 4 and 5
    # (max(0, 24 - 8 + 1) // 4 = 4 skipped).
    assert bm.blocks_to_admit(40, hit) == 8
    bm.admit_cached(1, hit)
    bm.free_sequence(0, 24, a, resumes=False)  # A finishes: its windowed blocks 0-3 (9, 8, 7, 6) go free, cached
    assert bm.free_block_ids() == list(range(12, 24)) + [9, 8, 7, 6]
    bm.grow_to(1, 40)  # full: 12-15; windowed: 16-19
    bm.cache_blocks(1, 40, b)
    bm.remove_skipped_blocks(1, 40)  # (40 - 7) // 4 = 8 windowed blocks behind: 17, 16, 11, 10 freed
    assert bm.block_table(1) == [0, 1, 2, 3, 4, 5, 12, 13, 14, 15]
    assert bm.blocks_held(1) == 10 + 2 and bm.free_block_ids() == [20, 21, 22, 23, 9, 8, 7, 6, 17, 16, 11, 10]

    d = Request(3, 0.0, 30, 1, **ids(6))
    assert len(bm.lookup(d, 7)) == 6  # the full blocks are held by B, the windowed 10 and 11 cached free
    bm.grow_to(9, 20)  # 5 blocks a group take the queue up to 16: the windowed copies of blocks 0-3 are evicted
    hit = bm.lookup(d, 7)
    assert len(hit) == 6 and hit.groups[1] == [NULL, NULL, NULL, NULL, 10, 11]  # the window's blocks are there
    assert bm.blocks_to_admit(30, hit) == (8 - 6) * 2 + 2  # 10 and 11 come out of the free queue
    bm.grow_to(10, 4)  # one block a group: 11 and 10 evicted
    # The full group still holds blocks 0-5 (B), but no windowed block is cached: no hit at all.
    assert bm.lookup(d, 7) == [] and not bm.is_cached(10) and bm.is_cached(0)


def test_a_windowed_run_in_the_middle_ends_the_hit_and_the_blocks_behind_it_stay_null():
    bm = manager()
    a = Request(0, 0.0, 16, 1, **ids(4))
    bm.grow_to(0, 16)
    bm.cache_blocks(0, 16, a)
    bm.free_sequence(0, 16, a, resumes=False)
    b = Request(1, 0.0, 30, 1, **ids(6))
    # Full: blocks 0-3 (block 4's key, id 5 at token 20, was never cached). Windowed: 3 and 2.
    hit = bm.lookup(b, 7)
    assert len(hit) == 4 and hit.groups[1] == [NULL, NULL, 6, 7]
    # (16 - 7) // 4 = 2 windowed blocks are not needed: only 6 and 7 are taken (4 + 2 evictable).
    assert bm.blocks_to_admit(30, hit) == (8 - 4) * 2 + 4 + 2
    bm.admit_cached(1, hit)
    assert bm.blocks_held(1) == 6 and bm.ref_count(4) == 0 and bm.ref_count(6) == 1 and bm.is_cached(4)


def test_with_windowed_layers_only_a_short_run_from_block_0_is_still_a_hit():
    # Window 12 needs ceil(11 / 4) = 3 consecutive blocks; A cached 2. B's blocks 2-4 miss, 1 and 0
    # hit: no run of 3, so the hit is the 2-block run that starts the prompt (vLLM keeps it).
    bm = manager(full=0, sliding=1, window=12)
    a = Request(0, 0.0, 8, 1, **ids(2))
    bm.grow_to(0, 8)
    bm.cache_blocks(0, 8, a)
    bm.free_sequence(0, 8, a, resumes=False)
    hit = bm.lookup(Request(1, 0.0, 24, 1, **ids(5)), (24 - 1) // 4)
    assert len(hit) == 2 and hit.groups == [[0, 1]]


def test_vllm_v1_serves_the_second_request_from_the_windowed_cache():
    # Block 16, window 32 (ceil(31 / 16) = 2 blocks), one full and one windowed group. A: a
    # 100-token prompt named by 6 ids (96 tokens); it finishes with its first token, its blocks
    # stay cached. B (120 tokens, same ids): full hit 6 blocks (block 6 is B's own), windowed 5
    # and 4 cached -> 96 tokens, 24 computed. B holds 8 blocks a group less the windowed group's
    # (96 - 31) // 16 = 4 skipped: 12 blocks.
    def scheduler():
        return make_scheduler("vllm_v1", SchedulerConfig(num_gpu_blocks=100, block_size=16, max_model_len=512,
                                                         max_num_seqs=8, chunk_size=256, enable_prefix_caching=True,
                                                         kv_groups=(1, 1, 32)))
    ids16 = dict(prefix_hash_ids=tuple(range(1, 7)), prefix_block_tokens=16)
    s = scheduler()
    _, done, now = run(s, [Request(0, 0.0, 100, 1, **ids16)])
    plans, done, _ = run(s, [Request(1, now, 120, 1, **ids16)], now)
    c = plans[0].columns
    assert (list(c.query_tokens), list(c.context_tokens)) == ([24], [96]) and done[1].cached_tokens == 96
    assert plans[0].kv_blocks_used == 12
    with pytest.raises(ValueError, match="KV offload with sliding-window layers"):
        scheduler().attach_kv_offload(KvOffload(100, 16, 1.0, 1e9, 1e9))


@pytest.mark.parametrize("seed", range(4))
def test_random_shared_prefix_traces_keep_the_pool_consistent(seed):
    # Small pools (preemptions), chunked prompts, split-N drafts (rejected: slots released), 0-2
    # full and 1-2 windowed groups: after every schedule and completion each block's reference
    # count equals the tables holding it, a block is free exactly when no table holds it, and at
    # the end every block is free; some requests hit.
    import random

    from simulator.scheduler import StepOutcome

    rng = random.Random(seed)
    split = (0, 2)[seed % 2]
    s = make_scheduler("vllm_v1", SchedulerConfig(
        num_gpu_blocks=(30, 60, 200, 45)[seed], block_size=4, max_model_len=256, max_num_seqs=6,
        chunk_size=(8, 32, 128, 16)[seed], enable_prefix_caching=True, split_n=split,
        kv_groups=((0, 1, 5), (1, 1, 8), (2, 2, 13), (1, 2, 40))[seed]))
    for i in range(25):
        prompt = rng.randint(2, 60)
        named = rng.randint(0, prompt // 4 + 1)
        base = rng.choice([0, 100, 200])
        s.add_request(Request(i, i * 0.01, prompt, rng.randint(1, 20),
                              prefix_hash_ids=tuple(range(base, base + named)), prefix_block_tokens=4))
    bm, now, cached = s.block_manager, 0.0, 0
    while s.has_work():
        plan = s.schedule(now)
        assert_consistent(bm)
        now += 0.01
        cached += sum(f.cached_tokens for f in s.complete_step(plan, StepOutcome.without_speculation(plan), now))
        assert_consistent(bm)
    assert bm.num_free == bm.num_blocks and cached > 0


def assert_consistent(bm: HybridPrefixCachingBlockManager) -> None:
    held = [0] * bm.num_blocks
    for tables in bm._group_tables.values():
        for table in tables:
            for b in table:
                if b != NULL:
                    held[b] += 1
    assert [bm.ref_count(b) for b in range(bm.num_blocks)] == held
    assert sorted(bm.free_block_ids()) == [b for b in range(bm.num_blocks) if not held[b]]
