"""A data-parallel group of an MoE model (simulator/data_parallel.py): ranks step in lockstep, a
step lasts as long as its slowest rank, idle ranks run dummy batches, requests go through vLLM's DP
load balancer; and the DP2 EP2 recorded run, when ../shared is present."""
from pathlib import Path

import pytest

from simulator.scheduler import SchedulerConfig, make_scheduler
from simulator.simulate import simulate
from traces import Request


class TokenCost:
    """dp_step_s: 1 ms per token of the busiest rank (an idle rank's dummy batch: one token)."""

    def __init__(self):
        self.batches = []

    def predict_step_s(self, q, c, p):
        return 1e-3 * sum(q)

    def dp_step_s(self, batches):
        self.batches.append([sum(b[0]) for b in batches])
        return 1e-3 * max(sum(b[0]) or 1 for b in batches)


def _schedulers(n=2):
    config = SchedulerConfig(num_gpu_blocks=10_000, max_model_len=4096, chunk_size=512, max_num_seqs=16)
    return [make_scheduler("vllm_v1", config) for _ in range(n)]


def test_ranks_step_together_at_the_slowest_ranks_pace():
    cost = TokenCost()
    requests = [Request(0, 0.0, 100, 2), Request(1, 0.0, 10, 2)]
    result = simulate(requests, _schedulers(), cost, data_parallel=True)
    r = result.requests.sort_values("request_id")
    # vLLM's balancer: request 0 to rank 0 (both empty, first index), request 1 to rank 1 (rank 0: 1 waiting → 4)
    assert r["replica_id"].tolist() == [0, 1]
    # step 1: prefills of 100 and 10 tokens → 0.1 s for both; step 2: one decode each → 1 ms
    assert r["first_token_s"].tolist() == pytest.approx([0.1, 0.1])
    assert r["completion_s"].tolist() == pytest.approx([0.101, 0.101])
    assert cost.batches == [[100, 10], [1, 1]]


def test_an_idle_rank_runs_dummy_steps_while_another_has_work():
    cost = TokenCost()
    result = simulate([Request(0, 0.0, 50, 3)], _schedulers(), cost, data_parallel=True)
    assert cost.batches == [[50, 0], [1, 0], [1, 0]]  # rank 1 empty every step (priced as a dummy batch)
    assert result.requests["completion_s"].iloc[0] == pytest.approx(0.052)


def test_dense_data_parallel_ranks_run_independently():
    from tests.conftest import ConstantCostModel

    requests = [Request(0, 0.0, 100, 2), Request(1, 0.0, 10, 2)]
    result = simulate(requests, _schedulers(), ConstantCostModel(0.01), data_parallel=True)
    assert sorted(result.requests["replica_id"]) == [0, 1]
    assert result.requests["completion_s"].tolist() == pytest.approx([0.02, 0.02])


BUNDLE = Path(__file__).resolve().parents[2] / "shared" / "validation" / "llmservingsim" / "RTXPRO6000_Qwen3-30B-A3B_dp2ep2"


@pytest.mark.skipif(not BUNDLE.is_dir(), reason="../shared/validation (the DP2 EP2 recorded run) is absent")
def test_dp2_ep2_run_within_the_issue_targets(tmp_path):
    from experiments.config import SweepConfig
    from experiments.deployment import build_pricer
    from experiments.point import build_cost_model
    from experiments.verification import recorded_run as rr
    from experiments.verification.verify import simulate_point

    run = rr.read_recorded_run(BUNDLE)
    config = rr.bundle_config(run, tmp_path / "trace.csv")
    rr.write_trace(run, tmp_path / "trace.csv")
    point = SweepConfig.model_validate(config)
    result = simulate_point(point, build_pricer(point, build_cost_model(point)))
    measured = rr.measured_summary(run)
    error = {k: abs(result.summary[k] / measured[k] - 1) for k in ("tpot_s_p50", "ttft_s_p50", "e2e_s_p50", "makespan_s")}
    assert error["tpot_s_p50"] <= 0.15 and error["makespan_s"] <= 0.15
    assert error["ttft_s_p50"] <= 0.20 and error["e2e_s_p50"] <= 0.20


def test_async_scheduling_in_lockstep_hand_worked():
    # R0 and R1 at 0 (one per rank, 100 tokens each): prefill [0, 0.1) s, then 1 ms decode steps.
    # R2 (10 tokens) arrives at 0.1015 s, during [0.101, 0.102), to rank 0 (a tie). Synchronous: scheduled
    # at 0.102, its step (11 tokens on rank 0) [0.102, 0.113). Async: the step [0.102, 0.103) was decided
    # at 0.101 without it; rank 0 decides it at 0.102, its step is [0.103, 0.114): a 1 ms schedule wait.
    requests = [Request(0, 0.0, 100, 20), Request(1, 0.0, 100, 20), Request(2, 0.1015, 10, 2)]
    sync = simulate(requests, _schedulers(), TokenCost(), data_parallel=True).requests.set_index("request_id")
    asyn = simulate(requests, _schedulers(), TokenCost(), data_parallel=True,
                    async_scheduling=True).requests.set_index("request_id")
    assert sync.loc[2, "replica_id"] == 0 and asyn.loc[2, "replica_id"] == 0
    assert sync.loc[2, "first_scheduled_s"] == pytest.approx(0.102)
    assert sync.loc[2, "first_token_s"] == pytest.approx(0.113)
    assert asyn.loc[2, "first_scheduled_s"] == pytest.approx(0.102)
    assert asyn.loc[2, "schedule_wait_s"] == pytest.approx(0.001)
    assert asyn.loc[2, "first_token_s"] == pytest.approx(0.114)
    # R0 and R1, scheduled on the idle group, start at once either way.
    assert asyn.loc[0, "first_token_s"] == pytest.approx(0.1) and asyn.loc[0, "schedule_wait_s"] == 0.0


def test_an_arrival_at_an_idle_rank_of_a_running_group_is_scheduled_at_the_step_end():
    # R0 runs on rank 0; R1 arrives at 0.1005 s during [0.1, 0.101) on the empty rank 1, which scheduled
    # nothing for that step: its engine core decides again at 0.101 and sees R1 (no step in flight for it).
    requests = [Request(0, 0.0, 100, 10), Request(1, 0.1005, 10, 2)]
    asyn = simulate(requests, _schedulers(), TokenCost(), data_parallel=True,
                    async_scheduling=True).requests.set_index("request_id")
    assert asyn.loc[1, "replica_id"] == 1
    assert asyn.loc[1, "first_scheduled_s"] == pytest.approx(0.101)
    assert asyn.loc[1, "schedule_wait_s"] == 0.0
    assert asyn.loc[1, "first_token_s"] == pytest.approx(0.111)  # [0.101, 0.111): 10 prompt tokens
