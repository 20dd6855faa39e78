"""Prefill/decode disaggregation (simulator/disaggregated.py): a hand-worked two-request run, and
bad input."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.disaggregated import KvLink, Pool, simulate_disaggregated
from simulator.pricing import StepPricer
from simulator.scheduler import SchedulerConfig, make_scheduler
from traces import Request


class LinearCost:
    """Step time = 10 ms + 0.1 ms per query token (prefill or decode), whatever the context."""

    def predict_step_s(self, query_tokens, context_tokens, is_prefill) -> float:
        return 0.010 + 0.0001 * float(np.sum(query_tokens))


def pool(num_replicas: int = 1, num_gpu_blocks: int = 1000, scheduler: str = "sarathi", **kwargs) -> Pool:
    config = SchedulerConfig(num_gpu_blocks=num_gpu_blocks, block_size=16, max_model_len=4096, chunk_size=512)
    return Pool([make_scheduler(scheduler, config) for _ in range(num_replicas)], StepPricer(LinearCost()), **kwargs)


def run(requests, prefill=None, decode=None, link=KvLink(1e6, 0.002), **kwargs):
    return simulate_disaggregated(requests, prefill or pool(), decode or pool(), link, kv_bytes_per_token=1000,
                                  **kwargs)


TWO = [Request(0, 0.0, 100, 3), Request(1, 0.005, 200, 2)]


def test_two_requests_hand_worked():
    """One prefill and one decode instance, step = 10 ms + 0.1 ms/token, KV 1000 B/token over
    1 MB/s with 2 ms latency.

    Prefill: A (100 tokens) 0 → 0.020 (first token: TTFT 0.020); B (200) 0.020 → 0.050 (TTFT 0.045).
    Link: A 0.002 + 100 kB / 1 MB/s = 0.102 s, 0.020 → 0.122; B waits for the link (queued
    0.050 → 0.122), 0.202 s, 0.122 → 0.324 (it starts the instant A is admitted and leaves
    `waiting`, as vLLM's loop 2 allocates it).
    Decode (10.1 ms a step): A 0.122 → 0.1321 (token 2) → 0.1422 (token 3, done); B 0.324 →
    0.3341 (token 2, done).
    """
    result = run(TWO)
    r = result.requests.set_index("request_id")
    assert list(r["finish_reason"]) == ["completed", "completed"]
    assert r.loc[0, "first_token_s"] == pytest.approx(0.020)
    assert r.loc[1, "first_token_s"] == pytest.approx(0.050)
    assert r.loc[0, "ttft_s"] == pytest.approx(0.020)
    assert r.loc[1, "ttft_s"] == pytest.approx(0.045)
    assert r.loc[0, "kv_transfer_start_s"] == pytest.approx(0.020)
    assert r.loc[0, "kv_transfer_end_s"] == pytest.approx(0.122)
    assert r.loc[1, "kv_transfer_start_s"] == pytest.approx(0.122)
    assert r.loc[1, "kv_transfer_end_s"] == pytest.approx(0.324)
    assert r.loc[0, "completion_s"] == pytest.approx(0.1422)
    assert r.loc[1, "completion_s"] == pytest.approx(0.3341)
    np.testing.assert_allclose(r.loc[0, "token_times_s"], [0.020, 0.1321, 0.1422])
    np.testing.assert_allclose(r.loc[1, "token_times_s"], [0.050, 0.3341])
    assert r.loc[0, "tpot_s"] == pytest.approx((0.1422 - 0.020) / 2)
    assert list(r["generated_tokens"]) == [3, 2]
    assert list(r["prefill_replica_id"]) == [0, 0]
    assert list(r["decode_replica_id"]) == [1, 1]
    s = result.summary
    assert s["kv_transfer_s_mean"] == pytest.approx((0.102 + 0.202) / 2)
    assert s["kv_transfer_queue_s_p50"] == pytest.approx((0.0 + 0.072) / 2)
    assert s["kv_transfer_bytes"] == 300_000
    # Busy time over replicas × makespan (0.3341 s): prefill 0.020 + 0.030, decode 3 × 0.0101.
    assert s["prefill_utilization"] == pytest.approx(0.050 / 0.3341)
    assert s["decode_utilization"] == pytest.approx(3 * 0.0101 / 0.3341)
    assert s["num_steps"] == 5
    assert s["completed"] == 2


def test_kv_held_in_both_pools_while_in_flight():
    """A's prompt (100 tokens = 7 blocks of 16) stays in the prefill pool until its transfer ends
    at 0.122: B's prefill step (0.020 → 0.050) runs with A's 7 blocks held beside its own 13. In
    the decode pool a step's count is taken when it is scheduled: A's first decode (101 tokens, 7
    blocks) is scheduled just before B's transfer takes its 13 blocks; A's second decode sees both;
    B's decode (201 tokens, 13 blocks) runs after A freed its own."""
    result = run(TWO)
    steps = result.steps
    prefill = steps[steps["replica_id"] == 0].reset_index(drop=True)
    decode = steps[steps["replica_id"] == 1].reset_index(drop=True)
    assert list(prefill["kv_blocks_used"]) == [7, 7 + 13]
    assert list(decode["kv_blocks_used"]) == [7, 7 + 13, 13]


def test_full_decode_pool_back_pressures_transfers():
    """A decode pool of 12 blocks: both prompts prefill in one step (200 tokens, 0 → 0.030). A
    (100 + 20 tokens) crosses 0.030 → 0.132 and is admitted with 101 tokens = 7 blocks; B's 101
    tokens need 7 more and 5 are free, so B's transfer waits for A to finish, not only for the
    link: A decodes 19 steps, 0.132 → 0.132 + 19 × 0.0101 = 0.3239; B crosses 0.3239 → 0.4259
    and decodes one step to 0.4360, after 0.2939 s queued."""
    result = run([Request(0, 0.0, 100, 20), Request(1, 0.0, 100, 2)], decode=pool(num_gpu_blocks=12))
    r = result.requests.set_index("request_id")
    assert r.loc[0, "completion_s"] == pytest.approx(0.3239)
    assert r.loc[1, "kv_transfer_start_s"] == pytest.approx(0.3239)
    assert r.loc[1, "kv_transfer_end_s"] == pytest.approx(0.4259)
    assert r.loc[1, "completion_s"] == pytest.approx(0.4360)
    assert result.summary["kv_transfer_queue_s_mean"] == pytest.approx((0.0 + 0.3239 - 0.030) / 2)
    assert list(r["finish_reason"]) == ["completed", "completed"]


def test_transfer_starts_at_the_next_step_boundary_of_a_busy_decode_instance():
    """A (100 + 50 tokens) decodes from 0.122 in steps of 0.0101 s. B (arrives 0.2) is prefilled
    0.2 → 0.22 while A is in step 10 (0.2130 → 0.2230): its transfer starts at that step's end,
    0.223 (vLLM allocates remote KV in `schedule()`), crosses to 0.325, joins at A's step
    boundary 0.122 + 21 × 0.0101 = 0.3341 and decodes with A (10.2 ms) to 0.3443. The same with
    and without decode windows."""
    trace = [Request(0, 0.0, 100, 50), Request(1, 0.2, 100, 2)]
    for fast in (True, False):
        r = run(trace, fast_forward=fast).requests.set_index("request_id")
        assert r.loc[1, "first_token_s"] == pytest.approx(0.220)
        assert r.loc[1, "kv_transfer_start_s"] == pytest.approx(0.223)
        assert r.loc[1, "kv_transfer_end_s"] == pytest.approx(0.325)
        assert r.loc[1, "completion_s"] == pytest.approx(0.3443)


def test_layer_pipelined_transfer_streams_with_the_last_prefill_step():
    """10 layers. A's transfer finds the link free at its prefill's end, so it streamed from that
    step's start (0): it ends at max(0 + 0.102, 0.020 + 0.002 + 0.1 / 10) = 0.102 instead of
    0.122. B waited for the link (queued from 0.050), so no overlap: 0.102 → 0.304. Decodes:
    A 0.102 → 0.1121 → 0.1222, B 0.304 → 0.3141."""
    result = run(TWO, link=KvLink(1e6, 0.002, layer_pipelined=True, num_layers=10))
    r = result.requests.set_index("request_id")
    assert result.summary["kv_transfer_queue_s_mean"] == pytest.approx((0.0 + 0.102 - 0.050) / 2)
    assert r.loc[0, "kv_transfer_start_s"] == pytest.approx(0.0)
    assert r.loc[0, "kv_transfer_end_s"] == pytest.approx(0.102)
    assert r.loc[0, "completion_s"] == pytest.approx(0.1222)
    assert r.loc[1, "kv_transfer_start_s"] == pytest.approx(0.102)
    assert r.loc[1, "kv_transfer_end_s"] == pytest.approx(0.304)
    assert r.loc[1, "completion_s"] == pytest.approx(0.3141)
    # The last layer's share bounds it: a prompt whose step is short against its KV.
    assert KvLink(1e6, 0.0, True, 4).end_s(1e5, 0.0, 0.09) == pytest.approx(0.09 + 0.025)


def test_one_token_request_ends_in_the_prefill_pool():
    result = run([Request(0, 0.0, 100, 1)])
    r = result.requests.iloc[0]
    assert r["finish_reason"] == "completed"
    assert r["completion_s"] == pytest.approx(0.020)
    assert r["first_token_s"] == pytest.approx(0.020)
    assert np.isnan(r["kv_transfer_start_s"])
    assert r["replica_id"] == -1


def test_request_the_decode_pool_can_never_hold_is_a_counted_rejection():
    """4 blocks of 16 = 64 tokens of KV: a 100-token prompt can never be decoded there; it is
    rejected at arrival (no prefill spent), the other request completes."""
    result = run([Request(0, 0.0, 100, 5), Request(1, 0.0, 20, 5)], decode=pool(num_gpu_blocks=4))
    r = result.requests.set_index("request_id")
    assert r.loc[0, "finish_reason"] == "rejected_kv_capacity"
    assert r.loc[1, "finish_reason"] == "completed"
    assert result.summary["rejected"] == 1
    assert (result.steps[result.steps["replica_id"] == 0]["num_prefill_tokens"] == 20).all()


def test_prompt_the_prefill_pool_can_never_hold_is_a_counted_rejection():
    result = run([Request(0, 0.0, 100, 5)], prefill=pool(num_gpu_blocks=4))
    assert result.requests.iloc[0]["finish_reason"] == "rejected_kv_capacity"
    assert result.summary["rejected"] == 1


def test_without_token_times_the_first_gap_is_in_the_tbt_sketch():
    """TBT samples: A 0.1121 (transfer and first decode) and 0.0101; B 0.2841. The sketch is within 0.1 %."""
    kept = run(TWO).summary
    sketched = run(TWO, keep_token_times=False).summary
    assert kept["tbt_s_mean"] == pytest.approx((0.1121 + 0.0101 + 0.2841) / 3)
    assert kept["tbt_s_p50"] == pytest.approx(0.1121)
    assert sketched["tbt_s_p50"] == pytest.approx(kept["tbt_s_p50"], rel=1e-3)
    assert sketched["tbt_s_mean"] == pytest.approx(kept["tbt_s_mean"], rel=1e-9)
    assert sketched["tpot_s_mean"] == pytest.approx(kept["tpot_s_mean"])


@pytest.mark.parametrize("bandwidth", [0.0, -1.0, float("inf"), float("nan")])
def test_link_bandwidth_must_be_positive(bandwidth):
    with pytest.raises(ValueError, match="bandwidth"):
        KvLink(bandwidth)


def test_pool_needs_replicas():
    with pytest.raises(ValueError, match="at least one replica"):
        Pool([], StepPricer(LinearCost()))


@pytest.mark.parametrize(("router", "instance", "cached"), [("prefix_aware", 1, 48), ("least_outstanding", 0, 0)])
def test_prefix_aware_routing_sends_a_request_where_its_prefix_is_cached(router, instance, cached):
    """Two vllm_v1 prefill instances with prefix caching. R0 (own prefix) goes to instance 0, R1
    (prefix ids 7, 8: 64 tokens) to instance 1 (fewest outstanding). R2, later, shares R1's prefix:
    prefix_aware sends it to instance 1 and hits 3 blocks of 16 (the last prompt token is always
    computed: (64 - 1) // 16 = 3); least_outstanding sends it to instance 0 (a tie, lowest
    index), which has nothing cached."""
    ids = dict(prefix_hash_ids=(7, 8), prefix_block_tokens=32)
    trace = [Request(0, 0.0, 64, 2, prefix_hash_ids=(5, 6), prefix_block_tokens=32), Request(1, 0.0, 64, 2, **ids),
             Request(2, 1.0, 64, 2, **ids)]
    result = run(trace, prefill=pool(2, scheduler="vllm_v1", router=router))
    r = result.requests.set_index("request_id")
    assert list(r["prefill_replica_id"]) == [0, 1, instance]
    assert r.loc[2, "cached_tokens"] == cached
    # The hit is priced: R2's prefill computes 64 - cached tokens in one step.
    prefill_steps = result.steps[result.steps["replica_id"] < 2]
    assert prefill_steps["num_prefill_tokens"].iloc[-1] == 64 - cached


def test_sessions_next_turn_arrives_after_the_previous_turn_ends_in_the_decode_pool():
    """Two conversations (think time 0.5 s), both first turns at 0 s: A = [(100 user, 3 answer),
    (50, 2)], B = [(100, 1), (20, 2)]; a turn's prompt is the conversation so far.

    Prefill: A0 and B0 in one step (200 tokens) 0 → 0.030. B0 asks one token: it ends there, so
    B1 (100 + 1 + 20 = 121 tokens) arrives at 0.530. A0 crosses 0.030 → 0.132 (0.002 + 0.1 s)
    and decodes 0.132 → 0.1421 → 0.1522 (its end in the decode pool), so A1 (100 + 3 + 50 = 153
    tokens) arrives at 0.6522. B1: prefill 0.530 → 0.5521 (0.010 + 0.0121), link 0.123 s → 0.6751, one
    decode step → 0.6852. A1: prefill 0.6522 → 0.6775 (0.010 + 0.0153); the decode instance is then
    in B1's step, so A1's transfer starts at its end, 0.6852, crosses in 0.155 s to 0.8402, and
    one decode step ends it at 0.8503. Request ids are in issue order: A0, B0, B1, A1."""
    from traces.sessions import SessionWorkload

    workload = SessionWorkload.from_turns([[(100, 3), (50, 2)], [(100, 1), (20, 2)]], think_time_s=0.5)
    result = run(workload)
    r = result.requests.set_index("request_id").sort_index()
    assert list(r["prompt_tokens"]) == [100, 100, 121, 153]
    assert list(r["output_tokens"]) == [3, 1, 2, 2]
    assert list(r["finish_reason"]) == ["completed"] * 4
    np.testing.assert_allclose(r["arrival_s"], [0.0, 0.0, 0.530, 0.6522])
    np.testing.assert_allclose(r["first_token_s"], [0.030, 0.030, 0.5521, 0.6775])
    np.testing.assert_allclose(r["kv_transfer_start_s"], [0.030, np.nan, 0.5521, 0.6852])
    np.testing.assert_allclose(r["kv_transfer_end_s"], [0.132, np.nan, 0.6751, 0.8402])
    np.testing.assert_allclose(r["completion_s"], [0.1522, 0.030, 0.6852, 0.8503])
    np.testing.assert_allclose(r.loc[3, "token_times_s"], [0.6775, 0.8503])
    assert result.summary["completed"] == 4


def test_closed_loop_keeps_its_clients_in_flight_across_the_pools():
    """A closed loop of 3 clients, 12 requests of 100 + 4 tokens, think time 0: at every instant
    at most 3 requests are in the cluster (arrived and not ended), each client's next request
    arrives exactly when its previous one completed in the decode pool, and the run ends with
    all 12 completed, with and without decode windows."""
    from traces import ClosedLoopWorkload

    frames = []
    for fast in (True, False):
        workload = ClosedLoopWorkload(3, 0.0, prompt=100, output=4, num_requests=12)
        r = run(workload, decode=pool(2), fast_forward=fast).requests.sort_values("request_id")
        assert (r["finish_reason"] == "completed").all() and len(r) == 12
        clients = [workload.client_of(i) for i in r["request_id"]]
        ends_by_client: dict[int, float] = {}
        for client, arrival, end in zip(clients, r["arrival_s"], r["completion_s"]):
            assert arrival == ends_by_client.get(client, 0.0)
            ends_by_client[client] = end
        for t in r["arrival_s"]:
            assert ((r["arrival_s"] <= t) & (r["completion_s"] > t)).sum() <= 3
        frames.append(r.drop(columns="token_times_s").reset_index(drop=True))
    import pandas as pd

    pd.testing.assert_frame_equal(frames[0], frames[1])


@pytest.mark.parametrize(("router", "prefill_ids", "b1_cached"), [
    ("session_affinity", [0, 1, 1, 0], 96), ("round_robin", [0, 1, 0, 1], 0)])
def test_session_affinity_keeps_a_conversation_on_its_prefill_instance(router, prefill_ids, b1_cached):
    """The two conversations of the sessions test on two vllm_v1 prefill instances with prefix
    caching. Affinity: A0 to instance 0, B0 to 1 (fewest outstanding), then each conversation's
    next turn where its first went, so B1 (121 tokens) finds B0's 6 full blocks of 16 cached
    there: 96 tokens. Round robin sends B1 to instance 0 (A0's) and A1 to 1: no hit."""
    from traces.sessions import SessionWorkload

    workload = SessionWorkload.from_turns([[(100, 3), (50, 2)], [(100, 1), (20, 2)]], think_time_s=0.5)
    result = run(workload, prefill=pool(2, scheduler="vllm_v1", router=router))
    r = result.requests.set_index("request_id").sort_index()
    assert list(r["finish_reason"]) == ["completed"] * 4
    # B0 ends in the prefill pool (one token): its instance is the step's replica, not a transfer's.
    steps = result.steps[result.steps["replica_id"] < 2]
    assert list(r["prefill_replica_id"].drop(index=1)) == [prefill_ids[0]] + prefill_ids[2:]
    assert set(steps["replica_id"]) == {0, 1}
    assert r.loc[2, "cached_tokens"] == b1_cached


def test_session_affinity_needs_sessions():
    with pytest.raises(ValueError, match="session_affinity"):
        run([Request(0, 0.0, 100, 3)], prefill=pool(2, router="session_affinity"))


def test_pipelined_prefill_instance_overlaps_prefills():
    """A prefill instance of 2 pipeline stages (no activation cost): a step's stage takes half
    of 10 ms + 0.1 ms/token. A (100 tokens, at 0) runs stage 0 0 → 0.010 and stage 1 0.010 →
    0.020 (first token 0.020); B (100 tokens, at 0.001) enters stage 0 when A leaves it, 0.010
    → 0.020, and stage 1 0.020 → 0.030 (first token 0.030, where one stage would give 0.040).
    Link as the two-request test: A 0.020 → 0.122, B waits for it, 0.122 → 0.224. Decode
    (one stage, 10.1 ms a step): A 0.122 → 0.1321 → 0.1422; B 0.224 → 0.2341 → 0.2442."""
    prefill = pool()
    prefill.pricer = StepPricer(LinearCost(), pipeline_stages=2)
    result = run([Request(0, 0.0, 100, 3), Request(1, 0.001, 100, 3)], prefill=prefill)
    r = result.requests.set_index("request_id").sort_index()
    np.testing.assert_allclose(r["first_token_s"], [0.020, 0.030])
    np.testing.assert_allclose(r["kv_transfer_start_s"], [0.020, 0.122])
    np.testing.assert_allclose(r["kv_transfer_end_s"], [0.122, 0.224])
    np.testing.assert_allclose(r["completion_s"], [0.1422, 0.2442])
    prefill_steps = result.steps[result.steps["replica_id"] == 0]
    np.testing.assert_allclose(prefill_steps["start_s"], [0.0, 0.010])
    np.testing.assert_allclose(prefill_steps["duration_s"], [0.020, 0.020])


def test_pipelined_decode_instance_runs_micro_batches_with_transfer_holds():
    """A decode instance of 2 stages whose 12 blocks hold one request at a time (the
    back-pressure case): both requests complete, B's transfer waits for A to finish as with one
    stage, and each decode step is one 10.1 ms pass (two 5.05 ms stages)."""
    decode = pool(num_gpu_blocks=12)
    decode.pricer = StepPricer(LinearCost(), pipeline_stages=2)
    result = run([Request(0, 0.0, 100, 20), Request(1, 0.0, 100, 2)], decode=decode)
    r = result.requests.set_index("request_id").sort_index()
    assert list(r["finish_reason"]) == ["completed", "completed"]
    # A: transfer 0.030 → 0.132, then 19 decodes; with one sequence each waits for the last.
    assert r.loc[0, "completion_s"] == pytest.approx(0.132 + 19 * 0.0101)
    assert r.loc[1, "kv_transfer_start_s"] == pytest.approx(r.loc[0, "completion_s"])
    assert r.loc[1, "completion_s"] == pytest.approx(r.loc[1, "kv_transfer_end_s"] + 0.0101)
