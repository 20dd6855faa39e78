"""What a `cluster:` point must satisfy and how its row and report state each pool
(experiments/config.py `check_cluster`, `check_router`, `pool_gpus`; experiments/point.py
`simulate_cluster`; experiments/planning/report_header.py `kv_pool_line`): `engine.num_gpus` counts every
pool's GPUs, a pool's prefix_aware router needs its pool's prefix cache as a colocated one does,
an overlap weight nothing reads is an error, and points.csv / report.md give each pool's values."""
from __future__ import annotations

import pandas as pd
import pytest
import yaml

from experiments.config import SweepConfig, pool_gpus, pool_point
from experiments.deployment import cluster_gpus
from experiments.planning.disaggregation import layouts
from experiments.planning.report_header import kv_pool_line
from experiments.planning.sweep import config_as_run
from experiments.point import run_point

TRACE = {"kind": "synthetic", "qps": 4.0, "num_requests": 6, "prompt_tokens": 256, "output_tokens": 4, "seed": 0}
V1 = {"scheduler": "vllm_v1", "chunk_size": 2048}


def point(engine=None, prefill=None, decode=None, **keys) -> SweepConfig:
    tree = {"model": "llama-3-8b", "device": "h100-sxm", "cost_model": "roofline", "trace": TRACE,
            "engine": {**V1, **(engine or {})}, **keys}
    if prefill is not None or decode is not None:
        tree["cluster"] = {"prefill": prefill or {}, "decode": decode or {}}
    return SweepConfig.model_validate(tree)


def refused(**kwargs) -> str:
    with pytest.raises(ValueError) as info:
        point(**kwargs)
    return str(info.value)


# ----- d06: engine.num_gpus of a cluster is every pool's GPUs --------------------------------

def test_num_gpus_of_a_1p1d_cluster_is_two():
    """1P1D of TP1 instances: 1 × 1 × 1 + 1 × 1 × 1 = 2 GPUs (the base engine's DP × TP × PP, 1,
    was compared before: 1 passed, 2 was refused)."""
    ok = point(engine={"num_gpus": 2}, prefill={"replicas": 1}, decode={"replicas": 1})
    assert pool_gpus(ok) == {"prefill": 1, "decode": 1} and cluster_gpus(ok) == 2
    message = refused(engine={"num_gpus": 1}, prefill={"replicas": 1}, decode={"replicas": 1})
    assert ("engine.num_gpus is 1 but the cluster's pools hold 2 GPUs (replicas × data_parallel_size × "
            "tensor_parallel_size × pipeline_parallel_size: prefill 1 × 1 × 1 × 1 + decode 1 × 1 × 1 × 1); "
            "make them match") in message


def test_num_gpus_counts_each_pools_tp_and_pp():
    """2 prefill instances of TP1 × PP2 (4 GPUs) + 3 decode instances of TP2 (6) = 10."""
    pools = {"prefill": {"replicas": 2, "engine": {"pipeline_parallel_size": 2}},
             "decode": {"replicas": 3, "engine": {"tensor_parallel_size": 2}}}
    assert cluster_gpus(point(engine={"num_gpus": 10}, **pools)) == 10
    assert "the cluster's pools hold 10 GPUs" in refused(engine={"num_gpus": 8}, **pools)


def test_a_pools_own_num_gpus_is_refused():
    message = refused(prefill={"engine": {"num_gpus": 1}})
    assert "cluster.prefill.engine.num_gpus is not read: engine.num_gpus checks the GPUs of the whole cluster" in message


def test_colocated_num_gpus_is_still_dp_tp_pp():
    assert point(engine={"num_gpus": 2, "tensor_parallel_size": 2}).engine.num_gpus == 2
    assert "engine.num_gpus is 1 but replicas × data_parallel_size × tensor_parallel_size" in refused(
        engine={"num_gpus": 1, "tensor_parallel_size": 2})


# ----- d07: a pool's prefix_aware router needs its pool's prefix cache ------------------------

def test_pool_prefix_aware_router_without_its_prefix_cache_is_refused():
    message = refused(prefill={"replicas": 2, "router": "prefix_aware", "engine": {"enable_prefix_caching": False}})
    assert ("cluster.prefill.router prefix_aware routes by each replica's prefix cache: it needs "
            "cluster.prefill.engine.scheduler vllm_v1 with cluster.prefill.engine.enable_prefix_caching true "
            "(got scheduler 'vllm_v1', enable_prefix_caching False)") in message
    assert "cluster.decode.router prefix_aware" in refused(
        engine={"scheduler": "sarathi", "chunk_size": 512}, decode={"router": "prefix_aware"})


def test_colocated_prefix_aware_message_is_the_same_rule():
    assert ("engine.router prefix_aware routes by each replica's prefix cache: it needs engine.scheduler vllm_v1 "
            "with engine.enable_prefix_caching true (got scheduler 'vllm_v1', enable_prefix_caching False)") in refused(
        engine={"router": "prefix_aware", "replicas": 2, "enable_prefix_caching": False})


def test_the_point_router_is_not_a_pools():
    """The point's engine.router (prefix_aware, with its cache on) is no pool's: a pool with its
    cache off and its default router (least_outstanding) is valid, and runs that router."""
    ok = point(engine={"router": "prefix_aware"}, prefill={"engine": {"enable_prefix_caching": False}})
    assert pool_point(ok, "prefill").engine.router == "least_outstanding"
    assert "set cluster.decode.router" in refused(decode={"engine": {"router": "random"}})


def test_points_csv_has_each_pools_settings():
    """A 2P1D point whose prefill pool runs without a prefix cache: prefill_/decode_ columns hold
    each pool's value; the unprefixed columns are the decode pool's (as num_gpu_blocks is)."""
    p = point(prefill={"replicas": 2, "engine": {"enable_prefix_caching": False, "chunk_size": 1024}},
              decode={"router": "prefix_aware"})
    row = run_point(p).row
    assert (row["prefill_enable_prefix_caching"], row["decode_enable_prefix_caching"]) == (False, True)
    assert (row["prefill_chunk_size"], row["decode_chunk_size"], row["chunk_size"]) == (1024, 2048, 2048)
    assert (row["prefill_replicas"], row["decode_replicas"], row["replicas"]) == (2, 1, 1)
    assert (row["prefill_router"], row["decode_router"], row["router"]) == ("least_outstanding", "prefix_aware",
                                                                            "prefix_aware")
    assert row["enable_prefix_caching"] is True and row["num_gpus"] == 3
    assert row["num_gpu_blocks"] == row["decode_num_gpu_blocks"]
    assert not {"prefill_num_gpus", "decode_num_gpus", "prefill_router_overlap_weight"} & set(row)


# ----- d08: router_overlap_weight only where prefix_aware reads it ----------------------------

def test_overlap_weight_beside_round_robin_is_refused():
    message = refused(engine={"replicas": 2, "router": "round_robin", "router_overlap_weight": 5})
    assert ("engine.router_overlap_weight applies only to router: prefix_aware (its weight of uncached prompt blocks "
            "against load); engine.router round_robin does not read it: remove it or set engine.router: "
            "prefix_aware") in message
    # the default router is round_robin: an explicit default weight is still a key nothing reads
    assert "engine.router round_robin does not read it" in refused(engine={"router_overlap_weight": 1.0})


def test_overlap_weight_default_and_prefix_aware_pass():
    assert point(engine={"replicas": 2}).engine.router_overlap_weight == 1.0  # the default is no setting
    e = point(engine={"replicas": 2, "router": "prefix_aware", "router_overlap_weight": 5}).engine
    assert e.router_overlap_weight == 5.0 and e.used_settings()["router_overlap_weight"] == 5.0
    assert "router_overlap_weight" not in point(engine={"replicas": 2}).engine.used_settings()


def test_config_as_run_of_a_round_robin_point_loads_again():
    """config.yaml writes the settings a point reads: no default weight beside round_robin to refuse."""
    again = SweepConfig.model_validate(yaml.safe_load(yaml.safe_dump(config_as_run(point(engine={"replicas": 2})))))
    assert again.engine.router == "round_robin" and again.engine.replicas == 2


def test_overlap_weight_in_a_cluster_is_refused():
    pool_message = refused(prefill={"router": "prefix_aware", "engine": {"router_overlap_weight": 2}})
    assert ("cluster.prefill.engine.router_overlap_weight is not read: it applies only to a colocated engine.router: "
            "prefix_aware; a pool's prefix_aware router picks the longest cached prefix") in pool_message
    assert "engine.router_overlap_weight is not read with cluster" in refused(
        engine={"router": "prefix_aware", "router_overlap_weight": 2}, prefill={})


# ----- d11: the report states both pools' KV pools --------------------------------------------

def test_report_kv_pool_line_names_both_pools():
    """The breaker's 1P1D: 28,536 prefill blocks, 68 decode blocks (the line said only 68)."""
    p = point(prefill={}, decode={"engine": {"num_gpu_blocks": 69}})
    row = run_point(p).row
    line = kv_pool_line(pd.DataFrame([row]), p)
    assert line.startswith(f"KV pool: prefill pool {row['prefill_num_gpu_blocks']} blocks of 16 tokens per instance; "
                           "decode pool 68 blocks of 16 tokens per instance (")
    assert row["prefill_num_gpu_blocks"] > 10_000


def test_report_kv_pool_line_of_colocated_points_and_pool_block_sizes():
    base = point()
    colocated = pd.DataFrame({"num_gpu_blocks": [500, 400, 500], "block_size": [16, 16, 16]})
    assert kv_pool_line(colocated, base).startswith("KV pool: 400, 500 blocks of 16 tokens per replica (")
    cluster = pd.DataFrame({"num_gpu_blocks": [70], "prefill_num_gpu_blocks": [900], "decode_num_gpu_blocks": [70],
                            "prefill_block_size": [32], "decode_block_size": [16]})
    assert kv_pool_line(cluster, base).startswith(
        "KV pool: prefill pool 900 blocks of 32 tokens per instance; decode pool 70 blocks of 16 tokens per instance (")


# ----- pools' TP/PP checked as layouts are (experiments.planning.layouts.tp_pp_problem) -------

def test_pool_pp_above_the_layers_is_refused():
    assert ("cluster.prefill.engine.pipeline_parallel_size: llama-3-8b: pipeline_parallel_size 33 exceeds the "
            "model's 32 layers") in refused(prefill={"engine": {"pipeline_parallel_size": 33}})
    assert "cluster.decode.engine.tensor_parallel_size: llama-3-8b: tensor_parallel_size 3 must divide" in refused(
        decode={"engine": {"tensor_parallel_size": 3}})


def test_xpyd_layouts_of_four_gpus():
    """TP in {1, 2, 3}, PP in {1, 2, 40} on llama-3-8b (32 heads, 32 layers): TP 3 and PP 40 are
    skipped, leaving shapes of 1, 2, 2 and 4 GPUs. Colocated: each divides 4 (4 layouts). xPyD
    (x·size_p + y·size_d = 4): from a 1-GPU prefill shape 3 + 1 + 1, from each 2-GPU one 1 + 1 + 1,
    from the 4-GPU one none: 11. The colocated engine's prefix_aware router and weight stay out of
    the pools (which refuse a weight)."""
    base = point(engine={"router": "prefix_aware", "router_overlap_weight": 4})
    found = layouts(base, 4, (1, 2, 3), (1, 2, 40))
    assert sum(l.kind == "colocated" for l in found) == 4 and sum(l.kind == "disaggregated" for l in found) == 11
    assert all(cluster_gpus(l.point) == 4 for l in found)
    colocated = next(l.point for l in found if l.kind == "colocated")
    assert (colocated.engine.router, colocated.engine.router_overlap_weight) == ("prefix_aware", 4.0)


def test_config_as_run_of_a_cluster_point_loads_again():
    """config.yaml of a cluster run once held engine.replicas: 1 (a default), which the cluster
    check refuses: the run's own config did not load again."""
    p = point(engine={"router": "prefix_aware", "num_gpus": 3}, prefill={"replicas": 2}, decode={})
    tree = config_as_run(p)
    assert not {"replicas", "router_overlap_weight"} & set(tree["engine"]) and tree["engine"]["num_gpus"] == 3
    again = SweepConfig.model_validate(yaml.safe_load(yaml.safe_dump(tree)))
    assert (again.cluster.prefill.replicas, again.cluster.decode.replicas, cluster_gpus(again)) == (2, 1, 3)


def counted_pool_points(monkeypatch) -> list[str]:
    """The pools `pool_point` is called for from here on (experiments.config.cluster's and
    experiments.point's name for it), in call order."""
    import experiments.config.cluster as config
    import experiments.point as point_module

    calls = []
    real = config.pool_point

    def counting(p, pool):
        calls.append(pool)
        return real(p, pool)

    for module in (config, point_module):
        monkeypatch.setattr(module, "pool_point", counting)
    return calls


def test_check_cluster_builds_each_pools_engine_once(monkeypatch):
    """`check_cluster` merges each pool's engine once (`pool_point`: 2 calls for 1P1D, also on
    the num_gpus error that lists both pools' shapes, where it took 8), and still checks the
    pools in order: the prefill pool's error comes first though the decode pool's keys are bad too."""
    calls = counted_pool_points(monkeypatch)
    point(engine={"num_gpus": 2}, prefill={"replicas": 1}, decode={"replicas": 1})
    assert calls == ["prefill", "decode"]
    calls.clear()
    message = refused(engine={"num_gpus": 3}, prefill={"replicas": 1}, decode={"replicas": 1})
    assert calls == ["prefill", "decode"] and "prefill 1 × 1 × 1 × 1 + decode 1 × 1 × 1 × 1" in message
    message = refused(prefill={"engine": {"pipeline_parallel_size": 33}}, decode={"engine": {"chunk_sizes": 1}})
    assert "cluster.prefill.engine.pipeline_parallel_size: llama-3-8b: pipeline_parallel_size 33 exceeds" in message
    assert "cluster.decode" not in message


def test_a_cluster_point_merges_each_pool_once_per_run(monkeypatch):
    """run_point of a validated 1P1D point builds each pool's point once for the simulation and
    its columns (`pool_points`, then shared by the label, GPU count, link and pool columns) and
    the decode pool once more for the row's settings: 3 `pool_point` calls (12 before)."""
    ok = point(prefill={"replicas": 1}, decode={"replicas": 1})
    calls = counted_pool_points(monkeypatch)
    row = run_point(ok).row
    assert calls == ["prefill", "decode", "decode"]
    assert row["cluster"] == "1P(TP1) 1D(TP1)" and row["num_gpus"] == 2


def test_a_pools_invalid_engine_is_said_without_pydantics_lead():
    # pool_point's message is shown as it is by the xPyD search's layout errors (no config
    # loader strips pydantic's "Value error, " there).
    ok = point(prefill={}, decode={})
    bad_pool = ok.cluster.prefill.model_copy(update={"engine": {"scheduler": "sarathi", "max_num_batched_tokens": 8}})
    ok = ok.model_copy(update={"cluster": ok.cluster.model_copy(update={"prefill": bad_pool})})
    with pytest.raises(ValueError) as info:
        pool_point(ok, "prefill")
    assert str(info.value) == ("cluster.prefill.engine: engine: engine.max_num_batched_tokens is not used by "
                               "scheduler 'sarathi' (only by vllm_v1, vllm, orca, faster_transformer)")
