"""vLLM V1 chunk windows (issue 34): the steps where the decodes and one running prompt's chunk
take the whole token budget, taken at once by the replica, give exactly the step-by-step path's
records (requests, steps, the cost model's counts)."""
from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.scheduler import SchedulerConfig, make_scheduler
from simulator.simulate import simulate
from tests.conftest import ConstantCostModel
from tests.test_prefill_windows import _count_windows, _running_two_decodes_and_a_prompt, _same_records
from traces import Request


def _vllm_v1(chunk_size=16, blocks=1_000, block_size=4, **kwargs):
    return make_scheduler("vllm_v1", SchedulerConfig(num_gpu_blocks=blocks, block_size=block_size, max_model_len=4096,
                                                     max_num_seqs=8, chunk_size=chunk_size, **kwargs))


def _two_decodes_and_a_prompt(scheduler, prompt_tokens=60, output_tokens=(30, 30)):
    """Requests 0 and 1 (prompts 4) decode; request 2 (a prompt of `prompt_tokens`) was admitted
    beside them with a first chunk of 16 - 2 = 14 tokens, and that step completed."""
    _running_two_decodes_and_a_prompt(scheduler, prompt_tokens, output_tokens)


def test_chunk_window_by_hand():
    # 60 - 14 = 46 tokens left, 14 a step: 14, 14, 14 take the whole budget; the last 4 leaves 10
    # where loop 2 would admit a waiting request: with nothing waiting it is the window's last step,
    # flagged (the replica keeps it only if nothing arrives before it starts).
    s = _vllm_v1()
    _two_decodes_and_a_prompt(s)
    partial, decodes, chunks, last_has_leftover, admit = s.chunk_window()
    assert partial.request_id == 2 and [d.request_id for d in decodes] == [0, 1]
    assert (chunks, last_has_leftover, admit) == ([14, 14, 14, 4], True, None)
    # A request waiting: the last chunk is left to `schedule`.
    s.add_request(Request(3, 2.0, 10, 3))
    assert s.chunk_window()[2:] == ([14, 14, 14], False, None)
    # A decode with 2 tokens to go finishes in the second step: the window stops there.
    decodes[1].max_output_tokens = decodes[1].num_generated_tokens + 2
    assert s.chunk_window().chunks == [14, 14]
    # A last chunk that takes the whole budget (28 - 14 = 14 left) is certain, waiting or not.
    s = _vllm_v1()
    _two_decodes_and_a_prompt(s, prompt_tokens=28)
    s.add_request(Request(3, 2.0, 10, 3))
    assert s.chunk_window()[2:] == ([14], False, None)
    s = _vllm_v1()
    _two_decodes_and_a_prompt(s, prompt_tokens=20)  # 6 left: a last chunk with a request waiting
    s.add_request(Request(3, 2.0, 10, 3))
    assert s.chunk_window() is None
    # A long_prefill_token_threshold below the budget's chunk leaves budget every step: none.
    s = _vllm_v1(long_prefill_token_threshold=14)
    _two_decodes_and_a_prompt(s)
    assert s.chunk_window() is not None  # 14 = the chunk: it caps nothing
    s = _vllm_v1(long_prefill_token_threshold=20)
    _two_decodes_and_a_prompt(s)
    assert s.chunk_window() is not None
    s = _vllm_v1()
    _two_decodes_and_a_prompt(s)
    s.config = replace(s.config, long_prefill_token_threshold=13)  # caps the next chunks at 13
    assert s.chunk_window() is None


def test_chunk_window_stops_where_the_free_blocks_do():
    # Block size 4, 20 blocks: the decodes hold 2 each (5 tokens in 8 slots), the prompt 4 (its 14
    # computed tokens): 12 free. After step j the prompt holds 14 + 14 j tokens and each decode
    # 5 + j (no new block through j = 3; the 4th step takes one each). Three steps: the prompt at
    # 56 tokens, 14 blocks, 10 more <= 12; four: 60 tokens, 15 blocks, 11 + 2 = 13 > 12. With 17
    # blocks (9 free) two: 42 tokens, 11 blocks, 7 more.
    s = _vllm_v1(blocks=20)
    _two_decodes_and_a_prompt(s)
    bm = s.block_manager
    assert (bm.num_free, bm.blocks_held(0), bm.blocks_held(2)) == (12, 2, 4)
    assert s.chunk_window().chunks == [14, 14, 14]
    s = _vllm_v1(blocks=17)
    _two_decodes_and_a_prompt(s)
    assert s.block_manager.num_free == 9 and s.chunk_window().chunks == [14, 14]


@pytest.mark.parametrize("waiting", [False, True])
def test_advance_chunk_window_equals_the_steps_it_stands_for(waiting):
    # With a request waiting the window is the three full chunks; without, the last chunk (4)
    # too, where the prompt samples its first token.
    fast, slow = _vllm_v1(enable_prefix_caching=True), _vllm_v1(enable_prefix_caching=True)
    for s in (fast, slow):
        _two_decodes_and_a_prompt(s)
        if waiting:
            s.add_request(Request(3, 2.0, 10, 3))
    partial, decodes, chunks, _, _ = fast.chunk_window()
    ends = [3.0, 4.0, 5.0, 6.0][:len(chunks)]
    kv_used, finished = fast.advance_prefill_window(partial, decodes, chunks, ends)
    slow_kv = []
    for now_s, chunk in zip(ends, chunks):
        plan = slow.schedule(now_s - 1.0)
        assert list(plan.columns.query_tokens) == [1, 1, chunk]
        slow_kv.append(plan.kv_blocks_used)
        assert slow.complete_step(plan, None, now_s) == []
    # The decodes hold 2 blocks each (5 -> 8 tokens), then 3 (9); the prompt 14 -> 28, 42, 56, 60
    # tokens: 7, 11, 14, 15 blocks.
    assert kv_used == slow_kv == [4 + 7, 4 + 11, 4 + 14, 6 + 15][:len(chunks)] and finished == []
    for a, b in zip(fast.running, slow.running):
        assert (a.request_id, a.num_computed_tokens, a.num_generated_tokens, a.first_token_s, a.token_times_s) == (
            b.request_id, b.num_computed_tokens, b.num_generated_tokens, b.first_token_s, b.token_times_s)
        assert fast.block_manager.blocks_held(a.request_id) == slow.block_manager.blocks_held(b.request_id)
    assert fast.block_manager.num_used == slow.block_manager.num_used
    if waiting:
        assert fast.running[2].num_computed_tokens == 56 and fast.chunk_window() is None  # its last chunk is scheduled
    else:
        assert fast.running[2].token_times_s == [6.0] and fast._partial_prefill is None


def test_other_policies_take_no_chunk_window():
    s = make_scheduler("sarathi", SchedulerConfig(num_gpu_blocks=1_000, block_size=4, max_model_len=4096,
                                                  max_num_seqs=8, chunk_size=16))
    for i in range(2):
        s.add_request(Request(i, 0.0, 4, 30))
    s.complete_step(s.schedule(0.0), None, 1.0)
    s.add_request(Request(2, 1.0, 60, 5))
    s.complete_step(s.schedule(1.0), None, 2.0)
    assert s._partial_prefill is not None and s.chunk_window() is None


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_chunk_windows_give_the_step_by_step_records_with_a_measured_cost_model(monkeypatch, async_scheduling):
    # The workload in small: azure-conv on the measured H100 tables, prefix caching on; a
    # small pool adds preemptions and evictions.
    from profiler.device_spec import get_device_spec
    from profiler.measured.shipped import build_measured
    from profiler.model_spec import get_model_spec
    from traces import load_profile
    requests = load_profile("azure-conv").sample(300, 14.0, seed=5)
    windows = _count_windows(monkeypatch)
    for blocks in (30_000, 900):
        def run(fast_forward):
            cost = build_measured("auto", get_model_spec("llama-3-8b"), get_device_spec("h100-sxm"), 1)
            config = SchedulerConfig(num_gpu_blocks=blocks, max_model_len=8192, max_num_seqs=64, chunk_size=512,
                                     enable_prefix_caching=True)
            result = simulate(requests, make_scheduler("vllm_v1", config), cost, fast_forward=fast_forward,
                              async_scheduling=async_scheduling)
            return result, (cost.num_predictions, cost.out_of_grid_steps, dict(cost.out_of_range))
        (fast, fast_counts), (slow, slow_counts) = run(True), run(False)
        pd.testing.assert_frame_equal(fast.requests, slow.requests)
        pd.testing.assert_frame_equal(fast.steps, slow.steps)
        assert fast_counts == slow_counts
    assert len(windows) > 100 and max(windows) >= 2


@st.composite
def _busy_vllm_v1_runs(draw):
    """Bursts or spread arrivals, long and short prompts sharing prefixes (ids), priorities, small
    pools (preemptions, evictions), thresholds, async scheduling, several replicas."""
    k = draw(st.integers(1, 30))
    spread = st.floats(0, 2.0) if draw(st.booleans()) else st.sampled_from([0.0, 0.01, 0.05, 0.1, 0.2])
    times = sorted(draw(st.lists(spread, min_size=k, max_size=k)))
    hash_tokens = draw(st.sampled_from([4, 16]))
    families = [tuple(range(1000 * f, 1000 * f + 200)) for f in range(3)]
    requests = []
    for i, t in enumerate(times):
        prompt, output = draw(st.integers(1, 3000)), draw(st.integers(1, 200))
        shared = draw(st.integers(0, -(-prompt // hash_tokens)))
        requests.append(Request(i, t, prompt, output, priority=draw(st.integers(0, 2)),
                                prefix_hash_ids=families[draw(st.integers(0, 2))][:shared],
                                prefix_block_tokens=hash_tokens))
    config = SchedulerConfig(num_gpu_blocks=draw(st.integers(40, 3000)), block_size=draw(st.sampled_from([4, 16])),
                             max_model_len=4096, max_num_seqs=draw(st.integers(1, 64)),
                             chunk_size=draw(st.sampled_from([64, 256, 512, 2048])),
                             policy=draw(st.sampled_from(["fcfs", "priority"])),
                             long_prefill_token_threshold=draw(st.sampled_from([None, None, 100, 4096])),
                             enable_prefix_caching=draw(st.booleans()))
    return (requests, config, draw(st.integers(1, 3)), draw(st.sampled_from(["round_robin", "least_outstanding",
                                                                              "vllm_dp", "random"])),
            draw(st.booleans()))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_busy_vllm_v1_runs())
def test_chunk_windows_give_the_step_by_step_records_and_counts_on_random_busy_runs(run_spec):
    from profiler.device_spec import get_device_spec
    from profiler.measured.shipped import build_measured
    from profiler.model_spec import get_model_spec
    requests, config, replicas, router, async_scheduling = run_spec

    def run(fast_forward):
        cost = build_measured("auto", get_model_spec("llama-3-8b"), get_device_spec("h100-sxm"), 1)
        result = simulate(requests, [make_scheduler("vllm_v1", config) for _ in range(replicas)], cost, router=router,
                          fast_forward=fast_forward, async_scheduling=async_scheduling)
        return result, (cost.num_predictions, cost.out_of_grid_steps, dict(cost.out_of_range))

    (fast, fast_counts), (slow, slow_counts) = run(True), run(False)
    pd.testing.assert_frame_equal(fast.requests, slow.requests)
    pd.testing.assert_frame_equal(fast.steps, slow.steps)
    assert fast_counts == slow_counts


def test_chunk_windows_with_arrivals_exactly_at_step_ends():
    # Arrivals on step ends of the run itself (SimPy's same-time order), with and without async
    # scheduling, and a request too long for the pool arriving mid-window (rejected: its record
    # must come where the step-by-step path writes it).
    base = [Request(0, 0.0, 30, 60), Request(1, 0.0, 20, 60), Request(2, 0.05, 300, 20), Request(3, 0.21, 250, 20)]

    def run(requests, fast_forward, async_scheduling):
        config = SchedulerConfig(num_gpu_blocks=200, block_size=4, max_model_len=4096, max_num_seqs=8, chunk_size=32)
        return simulate(requests, make_scheduler("vllm_v1", config), ConstantCostModel(0.01),
                        fast_forward=fast_forward, async_scheduling=async_scheduling)

    for async_scheduling in (False, True):
        steps = run(base, False, async_scheduling).steps
        ends = list(steps["start_s"] + steps["duration_s"])
        for picks in ([3, 4], [5, 6, 7], [9], [12, 13]):
            requests = base + [Request(10 + i, ends[j], 40 + 10 * i, 5) for i, j in enumerate(picks)]
            requests += [Request(20, ends[picks[0]] - 0.005, 900, 5)]  # 900 + 5 tokens > 200 blocks of 4
            requests.sort(key=lambda r: r.arrival_s)
            fast, slow = run(requests, True, async_scheduling), run(requests, False, async_scheduling)
            assert "rejected_kv_capacity" in set(slow.requests["finish_reason"])
            pd.testing.assert_frame_equal(fast.requests, slow.requests)
            pd.testing.assert_frame_equal(fast.steps, slow.steps)


@pytest.mark.parametrize("router", ["vllm_dp", "least_outstanding"])
def test_chunk_windows_hand_over_no_request_mid_window_to_a_router_reading_the_queues(router):
    # Async scheduling over two replicas: a request arriving during a window reaches the waiting
    # queue at the next step's start step by step, and vllm_dp reads that queue's length at the
    # next arrival (least_outstanding the outstanding count a rejection there lowers). Windows
    # taking such steps differed under both routers before they were cut at the first hand-over.
    import random
    for seed in range(12):
        r = random.Random(seed)
        n = r.randint(5, 40)
        times = sorted(r.uniform(0, 1.0) for _ in range(n))
        requests = [Request(i, t, r.randint(1, 600), r.randint(1, 40)) for i, t in enumerate(times)]
        config = SchedulerConfig(num_gpu_blocks=r.choice([60, 200, 2000]), block_size=4, max_model_len=4096,
                                 max_num_seqs=8, chunk_size=r.choice([32, 64]))
        _same_records(requests, lambda: [make_scheduler("vllm_v1", config) for _ in range(2)],
                      lambda: ConstantCostModel(0.01), router=router, async_scheduling=True)


def test_a_decode_window_finishes_its_requests_after_every_decodes_growth():
    # Prefix caching with a 7-block pool: a request finishing at a decode window's last step puts
    # its partial block at the head of the free queue; the window took the next decode's new
    # block after that finish, so that decode got the freed block and a cached block stayed
    # cached (request 1 then hit 8 tokens, step by step 4). Now every growth comes first.
    family = tuple(range(50))
    spec = [(0, 0.05, 7, 1, 0), (2, 0.05, 5, 5, 2), (4, 0.1, 3, 9, 1), (5, 0.1, 12, 2, 3), (6, 0.1, 1, 9, 1),
            (1, 0.2, 14, 3, 4), (3, 0.2, 3, 12, 0)]
    requests = [Request(i, t, prompt, out, prefix_hash_ids=family[:ids], prefix_block_tokens=4)
                for i, t, prompt, out, ids in spec]
    config = SchedulerConfig(num_gpu_blocks=7, block_size=4, max_model_len=256, max_num_seqs=6, chunk_size=64,
                             enable_prefix_caching=True)
    slow = _same_records(requests, lambda: make_scheduler("vllm_v1", config), lambda: ConstantCostModel(0.01))
    assert slow.requests.set_index("request_id").loc[1, "cached_tokens"] == 4
