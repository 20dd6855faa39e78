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
