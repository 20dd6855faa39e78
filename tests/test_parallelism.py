"""Pipeline parallelism (micro-batches in flight) and replicas behind a router."""
from __future__ import annotations

import pytest

from simulator.pricing import StepPricer
from simulator.scheduler import SchedulerConfig, make_scheduler
from simulator.simulate import simulate
from tests.conftest import ConstantCostModel
from traces import Request


def config(**kw):
    kw.setdefault("num_gpu_blocks", 1000)
    kw.setdefault("max_model_len", 512)
    kw.setdefault("chunk_size", 8)
    kw.setdefault("max_num_seqs", 4)
    return SchedulerConfig(**kw)


def test_pipeline_overlaps_micro_batches():
    # Whole step 20 ms, 2 stages -> 10 ms per stage. R0 and R1 (8-token prompts, chunk 8) go in
    # separate micro-batches: R0 enters at 0, R1 at 10 ms when stage 1 frees; each takes 20 ms.
    requests = [Request(0, 0.0, 8, 1), Request(1, 0.0, 8, 1)]
    result = simulate(requests, make_scheduler("sarathi", config()),
                      StepPricer(ConstantCostModel(0.02), pipeline_stages=2))
    assert result.requests["first_token_s"].tolist() == pytest.approx([0.02, 0.03])
    assert result.steps["start_s"].tolist() == pytest.approx([0.0, 0.01])
    assert result.steps["duration_s"].tolist() == pytest.approx([0.02, 0.02])


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_at_most_one_micro_batch_per_stage_in_flight(stages):
    requests = [Request(i, 0.001 * i, 8 + i % 5, 5) for i in range(12)]
    result = simulate(requests, make_scheduler("sarathi", config(max_num_seqs=2)),
                      StepPricer(ConstantCostModel(0.03), pipeline_stages=stages))
    assert result.summary["completed"] == 12
    intervals = list(zip(result.steps["start_s"], result.steps["start_s"] + result.steps["duration_s"]))
    for t, _ in intervals:
        in_flight = sum(1 for s, e in intervals if s <= t + 1e-12 < e - 1e-12)
        assert in_flight <= stages


def test_no_sequence_is_in_two_micro_batches():
    requests = [Request(0, 0.0, 4, 30)]
    result = simulate(requests, make_scheduler("sarathi", config()),
                      StepPricer(ConstantCostModel(0.02), pipeline_stages=4))
    # One request: each step must wait for the previous one to finish all 4 stages (20 ms).
    assert result.steps["start_s"].diff().dropna().min() == pytest.approx(0.02)
    assert result.requests.loc[0, "generated_tokens"] == 30


def run_cluster(router, n_requests=8, seed=0):
    requests = [Request(i, 0.1 * i, 16, 20 if i % 2 else 2) for i in range(n_requests)]
    schedulers = [make_scheduler("sarathi", config(chunk_size=64)) for _ in range(2)]
    return simulate(requests, schedulers, ConstantCostModel(0.01), router=router, seed=seed)


def test_round_robin_alternates_replicas():
    result = run_cluster("round_robin")
    assert result.requests["replica_id"].tolist() == [0, 1, 0, 1, 0, 1, 0, 1]
    assert sorted(result.steps["replica_id"].unique()) == [0, 1]
    assert result.summary["completed"] == 8


def test_least_outstanding_sends_to_the_less_loaded_replica():
    # Requests 100 ms apart; even ones finish in 20 ms (2 tokens), odd ones run 200 ms (20 tokens).
    result = run_cluster("least_outstanding")
    placement = result.requests["replica_id"].tolist()
    assert placement[:2] == [0, 0]  # R0 is done at 20 ms: both replicas idle when R1 comes -> 0
    assert placement[2] == 1        # R1 still runs on 0 at 200 ms -> R2 to the idle replica 1
    assert result.summary["completed"] == 8


def test_random_router_is_seeded():
    a = run_cluster("random", 20, 7)
    b = run_cluster("random", 20, 7)
    c = run_cluster("random", 20, 8)
    assert a.requests["replica_id"].tolist() == b.requests["replica_id"].tolist()
    assert a.requests["replica_id"].tolist() != c.requests["replica_id"].tolist()


def test_unknown_router_lists_valid_ones():
    with pytest.raises(ValueError, match="round_robin, least_outstanding, random"):
        run_cluster("nearest")
