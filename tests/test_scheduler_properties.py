"""Invariants of every scheduler over random traces and configs (hypothesis)."""
from __future__ import annotations

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.acceptance import PositionalAcceptance, speculative_outcome_fn
from simulator.scheduler import FINISH_REASONS, SCHEDULERS, Scheduler, SchedulerConfig, make_scheduler
from simulator.scheduler.block_manager import blocks_for
from simulator.simulate import simulate
from tests.conftest import ConstantCostModel
from traces import Request

CHUNKED = {name for name, cls in SCHEDULERS.items() if cls.chunked}
PER_CHUNK_KV = {"vllm_v1", "fastgen"}


@st.composite
def scenarios(draw):
    n = draw(st.integers(0, 10))
    requests = [
        Request(i, draw(st.floats(0, 1.0)), draw(st.integers(1, 200)), draw(st.integers(1, 40)),
                priority=draw(st.integers(0, 2)))
        for i in range(n)
    ]
    name = draw(st.sampled_from(sorted(SCHEDULERS)))
    block_size = draw(st.sampled_from([1, 4, 16]))
    max_num_seqs = draw(st.integers(1, 6))
    config = SchedulerConfig(
        num_gpu_blocks=draw(st.integers(4, 300)) * (16 // block_size),
        block_size=block_size,
        max_model_len=draw(st.sampled_from([64, 256, 1024])),
        max_num_seqs=max_num_seqs,
        chunk_size=draw(st.integers(max_num_seqs, 128)) if name in CHUNKED else None,
        max_num_batched_tokens=draw(st.sampled_from([None, 64, 300])) if name not in CHUNKED else None,
        policy=draw(st.sampled_from(["fcfs", "priority"])),
        preemption=draw(st.sampled_from(["recompute", "swap"])),
        split_n=draw(st.sampled_from([0, 0, 2])),
    )
    return name, config, sorted(requests, key=lambda r: r.arrival_s), draw(st.integers(0, 3))


def reserved_tokens(name, config, seq, step_tokens):
    """What the policy says a running sequence holds after scheduling (DESIGN.md)."""
    if name == "orca":
        return config.max_model_len
    if name in PER_CHUNK_KV:
        return step_tokens
    return max(seq.prefill_target_tokens, step_tokens)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_scheduler_invariants(scenario):
    name, config, requests, seed = scenario
    scheduler = make_scheduler(name, config)
    outcome_fn = speculative_outcome_fn(PositionalAcceptance(0.7, seed=seed))
    finished = [f for f in (scheduler.add_request(r) for r in requests) if f is not None]
    now, steps = 0.0, 0
    budget = config.chunk_size if name in CHUNKED else (config.max_num_batched_tokens or config.max_model_len)
    while scheduler.has_work():
        plan = scheduler.schedule(now)
        assert not plan.is_empty, "work left but nothing schedulable"
        bm = scheduler.block_manager
        # KV: blocks in use = sum over running sequences of ceil(reserved / block_size).
        scheduled = {s.request_id: s for s in plan.sequences}
        expected = 0
        for seq in scheduler.running:
            item = scheduled.get(seq.request_id)
            step_tokens = seq.num_computed_tokens + (item.num_query_tokens if item else 0)
            want = blocks_for(reserved_tokens(name, config, seq, step_tokens), config.block_size)
            assert bm.blocks_held(seq.request_id) == want, (name, seq.request_id)
            expected += want
        assert bm.num_used == expected
        # Budget: exceeded only by one-token decodes (or a lone recompute of a non-chunker).
        one_token_decodes = sum(1 for s in plan.sequences if not s.is_prefill and s.num_query_tokens == 1)
        total = int(plan.query_tokens.sum())
        lone_recompute = name not in CHUNKED and len(plan) == 1
        assert total <= max(budget, one_token_decodes) or lone_recompute
        assert len(plan) <= config.max_num_seqs
        now += 0.01
        finished += scheduler.complete_step(plan, outcome_fn(plan), now)
        steps += 1
        assert steps < 20_000, "livelock"
    assert scheduler.block_manager.num_used == 0
    reasons = {f.request_id: f.finish_reason for f in finished}
    assert sorted(reasons) == [r.request_id for r in sorted(requests, key=lambda r: r.request_id)]
    assert set(reasons.values()) <= set(FINISH_REASONS)
    by_id = {r.request_id: r for r in requests}
    for f in finished:
        if f.finish_reason == "completed":
            assert f.generated_tokens == by_id[f.request_id].output_tokens == len(f.token_times_s)
            assert f.token_times_s == sorted(f.token_times_s)  # time never goes backwards


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_simulation_is_deterministic_and_monotone(scenario):
    name, config, requests, seed = scenario

    def once():
        outcome = speculative_outcome_fn(PositionalAcceptance(0.7, seed=seed))
        return simulate(requests, make_scheduler(name, config), ConstantCostModel(0.01), outcome_fn=outcome)

    a, b = once(), once()
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    assert a.steps["start_s"].is_monotonic_increasing
    done = a.requests[a.requests["finish_reason"] == "completed"]
    assert (done["first_scheduled_s"] >= done["arrival_s"]).all()
    assert (done["first_token_s"] > done["first_scheduled_s"]).all()
    assert (done["completion_s"] >= done["first_token_s"]).all()
    assert all(list(t) == sorted(t) for t in done["token_times_s"])
    assert (a.requests["finish_reason"].isin(FINISH_REASONS)).all()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_decode_windows_give_the_same_records_as_step_by_step(scenario):
    # The replica's fast path (runs of plain decodes taken at once) must not change any record.
    name, config, requests, seed = scenario

    def run(fast_forward):
        outcome = speculative_outcome_fn(PositionalAcceptance(0.7, seed=seed))
        return simulate(requests, make_scheduler(name, config), ConstantCostModel(0.01), outcome_fn=outcome,
                        fast_forward=fast_forward)

    fast, slow = run(True), run(False)
    pd.testing.assert_frame_equal(fast.requests, slow.requests)
    pd.testing.assert_frame_equal(fast.steps, slow.steps)


def test_decode_windows_match_with_a_real_cost_model_for_every_scheduler(monkeypatch):
    # Durations differ per step here (the roofline prices each context), and KV pressure forces
    # preemptions in the small pool: the fast path must still reproduce every record.
    from profiler import RooflineCostModel, get_device_spec, get_model_spec
    from traces import load_profile
    requests = load_profile("azure-conv").sample(120, 6.0, seed=3)
    cost = RooflineCostModel(get_model_spec("llama-3-8b"), get_device_spec("h100-sxm"))
    windows = []
    original = Scheduler.advance_decodes
    monkeypatch.setattr(Scheduler, "advance_decodes", lambda self, ends: windows.append(len(ends)) or original(self, ends))
    for name, cls in sorted(SCHEDULERS.items()):
        for blocks in (30_000, 600):
            config = SchedulerConfig(num_gpu_blocks=blocks, max_model_len=8192, max_num_seqs=64,
                                     **({"chunk_size": 512} if cls.chunked else {}))
            fast = simulate(requests, make_scheduler(name, config), cost, fast_forward=True)
            slow = simulate(requests, make_scheduler(name, config), cost, fast_forward=False)
            pd.testing.assert_frame_equal(fast.requests, slow.requests)
            pd.testing.assert_frame_equal(fast.steps, slow.steps)
    assert len(windows) > 100 and max(windows) > 5  # the fast path really ran, in long windows


def test_decode_windows_stop_for_a_closed_loop_request_routed_mid_window(monkeypatch):
    # Closed loop over several replicas: one replica's completion makes its client send a request
    # that another replica receives in the middle of a decode window. The window must stop at the
    # end of the step under way (an interrupt), exactly where the step-by-step loop schedules it.
    import simpy

    from profiler import RooflineCostModel, get_device_spec, get_model_spec
    from traces import ClosedLoopWorkload
    cost = RooflineCostModel(get_model_spec("llama-3-8b"), get_device_spec("h100-sxm"))
    interrupts = []
    original = simpy.Process.interrupt
    monkeypatch.setattr(simpy.Process, "interrupt", lambda self, cause=None: interrupts.append(cause) or original(self, cause))
    config = SchedulerConfig(num_gpu_blocks=30_000, max_model_len=8192, max_num_seqs=64, chunk_size=512)

    def run(fast_forward, think_time_s, replicas, scheduler="sarathi"):
        workload = ClosedLoopWorkload(num_clients=12, think_time_s=think_time_s, prompt=(50, 800),
                                      output=(20, 200), num_requests=150, seed=4)
        return simulate(workload, [make_scheduler(scheduler, config) for _ in range(replicas)], cost,
                        router="least_outstanding", fast_forward=fast_forward)

    # Think time 0: a client answers a completion at that very instant, a step boundary, where
    # SimPy's same-time ordering decides whether the newcomer joins the next step.
    for think_time_s, replicas, scheduler in [(0.05, 3, "sarathi"), (0.0, 1, "sarathi"), (0.0, 3, "sarathi"),
                                              (0.0, 2, "vllm_v1")]:
        fast, slow = run(True, think_time_s, replicas, scheduler), run(False, think_time_s, replicas, scheduler)
        pd.testing.assert_frame_equal(fast.requests, slow.requests)
        pd.testing.assert_frame_equal(fast.steps, slow.steps)
    assert len(interrupts) > 10
