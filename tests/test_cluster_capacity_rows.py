"""Capacity rows of a `cluster:` point follow points.csv's rule: the unprefixed columns are the
decode pool's, `prefill_*` / `decode_*` give each pool's (README; experiments/point.py
`settings_columns`, `cluster_columns`). A colocated point's capacity row is as before."""
from __future__ import annotations

from experiments.config import POOLS, SweepConfig, pool_point
from experiments.planning.search import STEADY_COLUMNS, SUSTAINED_COLUMNS, TRIAL_COLUMNS
from experiments.planning.sweep import run_capacity_sweep
from experiments.point import run_point

_SEARCH = {"qps": [1.0, 8.0], "num_requests": 10, "seeds": 1, "max_trials": 2, "trim_fraction": 0.0}
_TRACE = {"kind": "synthetic", "qps": 4.0, "num_requests": 10, "prompt_tokens": 256, "output_tokens": 4}


def _point(cluster: bool) -> dict:
    """llama-3-8b, the point's engine vllm_v1 chunk 2048 on h100-sxm; as a cluster, prefill there
    at TP 2 and decode on h200 with its own chunk 512 (so the base engine and the decode pool differ)."""
    point = {"name": "a", "model": "llama-3-8b", "device": "h100-sxm", "cost_model": "roofline",
             "trace": _TRACE, "engine": {"scheduler": "vllm_v1", "chunk_size": 2048}, "search": _SEARCH}
    if cluster:
        point["cluster"] = {"prefill": {"engine": {"tensor_parallel_size": 2}},
                            "decode": {"device": "h200", "engine": {"chunk_size": 512}}}
    return point


def test_a_cluster_capacity_row_has_the_decode_pools_unprefixed_columns_and_each_pools_prefixed():
    """It had the base engine's chunk 2048 and no prefill_*/decode_* columns."""
    table, trials, _ = run_capacity_sweep([_point(cluster=True)], jobs=1)
    row = table.iloc[0].to_dict()
    assert "error" not in row
    assert (row["device"], row["prefill_device"], row["decode_device"]) == ("h200", "h100-sxm", "h200")
    assert (row["chunk_size"], row["prefill_chunk_size"], row["decode_chunk_size"]) == (512, 2048, 512)
    assert (row["tensor_parallel_size"], row["prefill_tensor_parallel_size"], row["decode_tensor_parallel_size"]) \
        == (1, 2, 1)
    assert (row["scheduler"], row["prefill_scheduler"], row["decode_scheduler"]) == ("vllm_v1",) * 3
    assert (row["cluster"], row["num_gpus"]) == ("1P(TP2) 1D(TP1)", 3)
    assert (row["replicas"], row["prefill_replicas"], row["decode_replicas"]) == (1, 1, 1)
    roofline = "roofline"  # cost_model roofline: the label is the value, each pool's
    assert (row["cost_model_label"], row["prefill_cost_model_label"], row["decode_cost_model_label"]) == (
        roofline, roofline, roofline)
    assert (row["prefill_cost_model_steps_out_of_range"], row["decode_cost_model_steps_out_of_range"]) == (0, 0)
    assert row["capacity_per_gpu_qps"] == row["capacity_qps"] / 3
    # The same settings columns as the point's points.csv row (KV blocks included), one rule for both.
    point = SweepConfig.model_validate(_point(cluster=True))
    sweep_row = run_point(point).row
    pool_keys = {f"{pool}_{key}" for pool in POOLS for key in [
        *pool_point(point, pool).engine.used_settings(), "num_gpu_blocks", "device", "cost_model_label",
        "cost_model_steps_out_of_range"] if key not in ("num_gpus", "router_overlap_weight")}
    assert {k for k in row if k.startswith(("prefill_", "decode_"))} == pool_keys
    # (Unprefixed num_gpu_blocks / max_model_len: the engine's settings in a capacity row, None
    # here as a colocated one's; points.csv gives the sized pool there.)
    settings = [*pool_keys, "model", "device", "cluster", "num_gpus", "cost_model_label",
                *(k for k in point.engine.used_settings() if k not in ("num_gpu_blocks", "max_model_len"))]
    assert {k: row[k] for k in settings} == {k: sweep_row[k] for k in settings}
    assert row["prefill_num_gpu_blocks"] != row["decode_num_gpu_blocks"]  # h100 at TP 2 against one h200
    assert set(trials["prefill_cost_model_label"]) == {roofline}


def test_a_colocated_capacity_row_is_unchanged():
    table, trials, _ = run_capacity_sweep([_point(cluster=False)], jobs=1)
    row = table.iloc[0].to_dict()
    engine = SweepConfig.model_validate(_point(cluster=False)).engine.used_settings()
    assert list(row) == ["point_id", "label", "model", "device", *engine, "vllm_flags", "vllm_command", "burstiness",
                         "capacity_qps", "capacity_ci_low", "capacity_ci_high", "capacity_by_seed",
                         "capacity_at_bound", "seeds_below_lowest_rate", "cost_model_label", "cost_model_steps_out_of_range",
                         "cost_model_steps", *SUSTAINED_COLUMNS, "lowest_rate_verdict", "capacity_per_gpu_qps", "cached"]
    assert (row["device"], row["chunk_size"], row["num_gpus"]) == ("h100-sxm", 2048, 1)
    assert set(trials.columns) == set(TRIAL_COLUMNS) | set(STEADY_COLUMNS)  # no pool columns beside a colocated point
