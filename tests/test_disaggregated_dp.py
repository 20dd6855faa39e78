"""Data parallelism inside a disaggregated pool (simulator/disaggregated.py, issue 19): an instance
that is a vLLM DP engine, its ranks picked by vLLM's DP balancer, a mixture of experts' ranks in
lockstep; hand-worked runs, the config's checks and GPU counts."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

from experiments.config import ConfigError, SweepConfig, cluster_label, describe_point, load_config, pool_gpus
from experiments.deployment import build_link, build_schedulers, cluster_gpus
from simulator.disaggregated import KvLink, Pool, simulate_disaggregated
from simulator.pricing import StepPricer
from simulator.scheduler import SchedulerConfig, make_scheduler
from traces import Request


class LinearCost:
    """A step of one instance (or of one dense DP rank): 10 ms + 0.1 ms per query token."""

    def predict_step_s(self, query_tokens, context_tokens, is_prefill) -> float:
        return 0.010 + 0.0001 * float(np.sum(query_tokens))


class LockstepCost(LinearCost):
    """A mixture of experts' DP step (`dp_step_s`): 4 ms + 1 ms per query token over every rank
    (the MoE layers take every rank's tokens; an idle rank's dummy batch adds none). Records the
    ranks' batch sizes per step."""

    def __init__(self):
        self.batches = []

    def dp_step_s(self, batches) -> float:
        self.batches.append([len(b[0]) for b in batches])
        return 0.004 + 0.001 * sum(float(np.sum(b[0])) for b in batches)


def schedulers(n: int, num_gpu_blocks: int = 1000) -> list:
    config = SchedulerConfig(num_gpu_blocks=num_gpu_blocks, block_size=16, max_model_len=4096, chunk_size=512)
    return [make_scheduler("sarathi", config) for _ in range(n)]


LINK = KvLink(1e7, 0.002)  # 10 MB/s, 2 ms a transfer; 1000 B of KV a token below


def test_dp2_moe_decode_pool_hand_worked():
    """One prefill instance (10 ms + 0.1 ms/token); one decode instance of DP2 MoE ranks
    (lockstep: 4 ms + 1 ms per token over both ranks). A: 100 + 5 tokens at 0; B: 30 + 3 at 5 ms.

    Prefill: A 0 → 0.020 (TTFT 0.020); B 0.020 → 0.033 (TTFT 0.028).
    vLLM's DP balancer: A to rank 0 (both empty: the first); B to rank 1 (rank 0 runs A: 1 > 0).
    Links, one per rank: A 0.002 + 100 kB / 10 MB/s = 0.012 s, 0.020 → 0.032 into rank 0; B
    0.005 s, 0.033 → 0.038 into rank 1, not behind A (its own link).
    Decode, the ranks in lockstep: 0.032 → 0.037 (A's token 2; rank 1's dummy batch adds no token:
    5 ms); 0.037 → 0.042 (A's 3; B arrived at 0.038, mid-step); 0.042 → 0.048 (both ranks: 2
    tokens, 6 ms: A's 4, B's 2); 0.048 → 0.054 (A's 5, B's 3: both done).
    """
    cost = LockstepCost()
    decode = Pool(schedulers(2), StepPricer(cost), data_parallel_size=2)
    prefill = Pool(schedulers(1), StepPricer(LinearCost()))
    result = simulate_disaggregated([Request(0, 0.0, 100, 5), Request(1, 0.005, 30, 3)], prefill, decode, LINK,
                                    kv_bytes_per_token=1000)
    r = result.requests.set_index("request_id")
    assert list(r["ttft_s"]) == pytest.approx([0.020, 0.028])
    assert list(r["decode_replica_id"]) == [1, 2] and list(r["replica_id"]) == [1, 2]
    assert list(r["kv_transfer_start_s"]) == pytest.approx([0.020, 0.033])
    assert list(r["kv_transfer_end_s"]) == pytest.approx([0.032, 0.038])
    np.testing.assert_allclose(r.loc[0, "token_times_s"], [0.020, 0.037, 0.042, 0.048, 0.054])
    np.testing.assert_allclose(r.loc[1, "token_times_s"], [0.033, 0.048, 0.054])
    assert list(r["completion_s"]) == pytest.approx([0.054, 0.054])
    assert cost.batches == [[1, 0], [1, 0], [1, 1], [1, 1]]  # rank 1 idle (a dummy batch) in the first two
    # KV per rank: rank 0 holds A's 101 tokens (7 blocks of 16), rank 1 B's 31 (2 blocks).
    steps = result.steps
    assert list(steps.loc[steps["replica_id"] == 1, "kv_blocks_used"]) == [7, 7, 7, 7]
    assert list(steps.loc[steps["replica_id"] == 2, "kv_blocks_used"]) == [2, 2]
    s = result.summary
    assert s["kv_transfer_bytes"] == 130_000
    # Busy step time over 2 ranks × the makespan (0.054 s): rank 0 four steps, rank 1 two.
    assert s["decode_utilization"] == pytest.approx((0.005 + 0.005 + 0.006 + 0.006 + 0.006 + 0.006) / (2 * 0.054))
    assert s["completed"] == 2


def test_dense_dp_ranks_run_independently_behind_the_balancer():
    """The same two requests into a DP2 decode instance of a dense model (no `dp_step_s`): each
    rank steps alone at 10 ms + 0.1 ms/token. A: 0.032 → 0.0421 → 0.0522 → 0.0623 → 0.0724; B
    (rank 1): 0.038 → 0.0481 → 0.0582, unaffected by A's steps."""
    decode = Pool(schedulers(2), StepPricer(LinearCost()), data_parallel_size=2)
    prefill = Pool(schedulers(1), StepPricer(LinearCost()))
    result = simulate_disaggregated([Request(0, 0.0, 100, 5), Request(1, 0.005, 30, 3)], prefill, decode, LINK,
                                    kv_bytes_per_token=1000)
    r = result.requests.set_index("request_id")
    assert list(r["decode_replica_id"]) == [1, 2]
    np.testing.assert_allclose(r.loc[0, "token_times_s"], [0.020, 0.0421, 0.0522, 0.0623, 0.0724])
    np.testing.assert_allclose(r.loc[1, "token_times_s"], [0.033, 0.0481, 0.0582])


def test_dp2_moe_prefill_pool_hand_worked():
    """A prefill instance of DP2 MoE ranks (lockstep, as above), one plain decode instance.
    A (100 tokens) to rank 0 at 0: its prefill step 0 → 0.104 (4 ms + 100 tokens). B (30 tokens,
    at 0.005) to rank 1 (rank 0 runs A): it waits for the group's step boundary, 0.104 → 0.138.
    A's KV leaves rank 0, B's rank 1: A crosses 0.104 → 0.116, B waits for the decode instance's
    one link, 0.138 → 0.143."""
    cost = LockstepCost()
    prefill = Pool(schedulers(2), StepPricer(cost), data_parallel_size=2)
    decode = Pool(schedulers(1), StepPricer(LinearCost()))
    result = simulate_disaggregated([Request(0, 0.0, 100, 2), Request(1, 0.005, 30, 2)], prefill, decode, LINK,
                                    kv_bytes_per_token=1000)
    r = result.requests.set_index("request_id")
    assert list(r["first_token_s"]) == pytest.approx([0.104, 0.138])
    assert list(r["prefill_replica_id"]) == [0, 1] and list(r["decode_replica_id"]) == [2, 2]
    assert list(r["kv_transfer_start_s"]) == pytest.approx([0.104, 0.138])
    assert list(r["kv_transfer_end_s"]) == pytest.approx([0.116, 0.143])
    assert cost.batches == [[1, 0], [0, 1]]


def test_balancer_counts_transfers_as_waiting_and_the_pool_router_picks_instances():
    """Two DP2 decode instances (4 ranks, ids 1..4) behind round robin, four requests prefilled
    one after another: the router alternates instances (A, C to instance 0; B, D to 1) and each
    instance's balancer sends its second request to its other rank, as the first one's transfer
    (or decode) counts against its rank."""
    decode = Pool(schedulers(4), StepPricer(LockstepCost()), router="round_robin", data_parallel_size=2)
    prefill = Pool(schedulers(1), StepPricer(LinearCost()))
    trace = [Request(i, 0.001 * i, 50, 3) for i in range(4)]
    result = simulate_disaggregated(trace, prefill, decode, KvLink(1e5, 0.002), kv_bytes_per_token=1000)
    r = result.requests.set_index("request_id")
    assert list(r["decode_replica_id"]) == [1, 3, 2, 4]
    assert (r["finish_reason"] == "completed").all()


def test_pool_refuses_what_is_not_modelled():
    with pytest.raises(ValueError, match="multiple of 2"):
        Pool(schedulers(3), StepPricer(LinearCost()), data_parallel_size=2)
    with pytest.raises(ValueError, match="prefix_aware over data-parallel"):
        Pool(schedulers(2), StepPricer(LinearCost()), router="prefix_aware", data_parallel_size=2)
    with pytest.raises(ValueError, match="pipeline stages"):
        Pool(schedulers(2), StepPricer(LinearCost(), pipeline_stages=2), data_parallel_size=2)


# ----- config ----------------------------------------------------------------------------------
MOE = """
model: qwen3-30b-a3b
device: h100-sxm
cost_model: roofline
trace: {kind: profile, name: azure-conv, qps: 4, num_requests: 40, seed: 0}
engine: {scheduler: vllm_v1, chunk_size: 2048}
goodput: {ttft_s: 2.0, tpot_s: 0.05}
cluster:
  prefill: {replicas: 1, engine: {tensor_parallel_size: 2}}
  decode: {replicas: 2, engine: {data_parallel_size: 2, enable_expert_parallel: true}}
  link: {bandwidth_gb_s: 50, latency_s: 0.0001}
"""


def _load(tmp_path, text=MOE, overrides=()):
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(text))
    _, points = load_config(path, list(overrides))
    return [SweepConfig.model_validate(p) for p in points]


def _error(tmp_path, overrides, text=MOE):
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(text))
    with pytest.raises(ConfigError) as info:
        load_config(path, list(overrides))
    return str(info.value)


def test_dp_pool_gpus_labels_and_schedulers(tmp_path):
    """Two DP2 EP decode engines of TP1 (4 GPUs) and one TP2 prefill engine: 6 GPUs; the decode
    pool has 2 × 2 schedulers (one per rank); the link moves one TP1 rank's KV (the smaller TP):
    Qwen3-30B-A3B's 48 layers × 2 × 4 KV heads × 128 × 2 bytes = 98,304 B a token."""
    (point,) = _load(tmp_path)
    assert pool_gpus(point) == {"prefill": 2, "decode": 4} and cluster_gpus(point) == 6
    assert cluster_label(point) == "1P(TP2) 2D(TP1 DP2 EP2)"
    assert "1P2D tp=2/1 dp=1/2 ep=1/2" in describe_point(point)
    from experiments.config import pool_point
    from experiments.deployment import build_scheduler_config

    decode = pool_point(point, "decode")
    assert len(build_schedulers(decode, build_scheduler_config(decode))) == 4
    _, kv_bytes = build_link(point)
    assert kv_bytes == 48 * 2 * 4 * 128 * 2
    assert "engine.num_gpus is 4 but the cluster's pools hold 6 GPUs" in _error(tmp_path, ["engine.num_gpus=4"])


def test_dp_pool_runs_end_to_end_with_its_columns(tmp_path):
    from experiments.point import run_point

    (point,) = _load(tmp_path)
    row = run_point(point).row
    assert row["cluster"] == "1P(TP2) 2D(TP1 DP2 EP2)" and row["num_gpus"] == 6
    assert row["decode_data_parallel_size"] == 2 and row["decode_enable_expert_parallel"]
    assert row["prefill_data_parallel_size"] == 1
    assert row["completed"] + row["rejected"] == 40 and row["completed"] > 0
    assert row["goodput_rps_per_gpu"] == pytest.approx(row["goodput_rps"] / 6)


@pytest.mark.parametrize(("overrides", "named"), [
    (["cluster.decode.engine.pipeline_parallel_size=2"],
     "cluster.decode.engine.data_parallel_size > 1 with pipeline_parallel_size > 1 is not modelled"),
    (["cluster.decode.engine.preemption=swap"],
     "cluster.decode.engine.data_parallel_size > 1 of a mixture of experts with preemption: swap"),
    (["cluster.decode.router=prefix_aware"], "cluster.decode.router prefix_aware with "
                                             "cluster.decode.engine.data_parallel_size 2 is not modelled"),
    (["cluster.decode.engine.data_parallel_size=256"], "256 must be from 1 to the model's 128 experts"),
])
def test_dp_pool_config_errors_name_the_key(tmp_path, overrides, named):
    message = _error(tmp_path, overrides)
    assert named in message and "cluster.decode" in message


def test_expert_parallel_on_a_dense_pool_is_named(tmp_path):
    text = MOE.replace("qwen3-30b-a3b", "llama-3-8b").replace("vllm_v1, chunk_size: 2048", "sarathi, chunk_size: 512")
    assert "cluster.decode.engine.enable_expert_parallel (line 10): llama-3-8b is a dense model" in _error(
        tmp_path, [], text)
    # A dense DP pool is fine: independent ranks behind the balancer.
    (point,) = _load(tmp_path, text, ["cluster.decode.engine.enable_expert_parallel=false"])
    assert cluster_label(point) == "1P(TP2) 2D(TP1 DP2)" and cluster_gpus(point) == 6
