"""vllm_v1's loop 1 hands its leading plain decodes to the plan as `PlainDecodeEntries` (issue 34):
over random traces (shared prefixes, preemption under a small pool, priority victims that were
scheduled earlier in the step, long_prefill_token_threshold, drafts), every plan, preemption and
finished request equals what the same scheduler gives building one entry per decode."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from simulator.acceptance import PositionalAcceptance, speculative_outcome_fn
from simulator.scheduler import make_scheduler
from tests.test_scheduler_prefix_properties import shared_prefix_scenarios


def _run(config, requests, seed, decode_led: bool) -> list:
    scheduler = make_scheduler("vllm_v1", config)
    scheduler.decode_led_entries = decode_led
    outcome_fn = speculative_outcome_fn(PositionalAcceptance(0.7, seed=seed))
    events = [f for f in (scheduler.add_request(r) for r in requests) if f is not None]
    now, plain_decodes = 0.0, 0
    while scheduler.has_work() and now < 200:
        plan = scheduler.schedule(now)
        c = plan.columns
        plain_decodes += plan.num_plain_decodes
        events.append((c.request_ids, c.query_tokens, c.context_tokens, c.is_prefill, c.emits_token,
                       c.draft_tokens, [list(t) for t in c.block_tables], plan.preempted_ids, plan.kv_blocks_used, plan.counts,
                       plan.swap_in_tokens, plan.swap_out_tokens))
        now += 0.01
        events += scheduler.complete_step(plan, outcome_fn(plan), now)
    return events, plain_decodes


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shared_prefix_scenarios())
def test_decode_led_plans_equal_one_entry_per_decode(scenario):
    config, requests, seed = scenario
    fast, led = _run(config, requests, seed, True)
    slow, none = _run(config, requests, seed, False)
    assert fast == slow
    assert none == 0  # the step-by-step entries mark no plain decodes


def test_decode_led_entries_are_used():
    """A decode running beside a second request's prefill: its plan marks the decode as plain
    (the fast path ran), and the plan is the one-entry-per-decode one."""
    from simulator.scheduler import SchedulerConfig
    from traces import Request

    config = SchedulerConfig(num_gpu_blocks=64, block_size=16, max_model_len=256, max_num_seqs=4, chunk_size=32)
    requests = [Request(0, 0.0, 8, 5), Request(1, 0.0, 60, 3)]
    fast, led = _run(config, requests, 0, True)
    slow, _ = _run(config, requests, 0, False)
    assert fast == slow and led > 0
