"""The report's KV pool line (experiments/planning/report_header.py `kv_pool_line`): a DP engine's block
count is each rank's (every DP rank holds its own pool, experiments.deployment.build_schedulers),
so the line says "per DP rank" there, not "per instance" or "per replica"."""
from __future__ import annotations

import pandas as pd

from experiments.config import SweepConfig, pool_point
from experiments.deployment import build_scheduler_config, build_schedulers
from experiments.planning.report_header import kv_pool_line
from experiments.point import run_point

COLOCATED = {"model": "llama-3-8b", "device": "h100-sxm", "cost_model": "roofline",
             "trace": {"kind": "profile", "name": "azure-conv", "qps": 4, "num_requests": 20, "seed": 0},
             "engine": {"scheduler": "vllm_v1", "chunk_size": 1024, "max_num_seqs": 64}}
CLUSTER = {**COLOCATED, "cluster": {"prefill": {"replicas": 1}, "decode": {"engine": {"data_parallel_size": 2}},
                                    "link": {"bandwidth_gb_s": 50}}}
TAIL = " (differs by point when the token budget changes the activation memory)."


def _line(tree: dict) -> tuple[str, SweepConfig]:
    point = SweepConfig.model_validate(tree)
    return kv_pool_line(pd.DataFrame([run_point(point).row]), point), point


def test_a_dp_decode_pool_is_counted_per_rank():
    """llama-3-8b on H100s: every GPU's pool is the same count (one rank's scheduler's); the DP2
    decode instance holds two such pools, one a rank, so its count is per DP rank, not per instance."""
    line, point = _line(CLUSTER)
    decode = pool_point(point, "decode")
    blocks = build_scheduler_config(decode).num_gpu_blocks  # one rank's pool (28,611 here)
    assert len(build_schedulers(decode, build_scheduler_config(decode))) == 2  # one pool a rank
    assert line == (f"KV pool: prefill pool {blocks} blocks of 16 tokens per instance; decode pool {blocks} blocks of "
                    f"16 tokens per DP rank{TAIL}")


def test_a_colocated_dp_engine_is_counted_per_rank_and_replicas_per_replica():
    line, point = _line({**COLOCATED, "engine": {**COLOCATED["engine"], "data_parallel_size": 2}})
    blocks = build_scheduler_config(point).num_gpu_blocks
    assert line == f"KV pool: {blocks} blocks of 16 tokens per DP rank{TAIL}"
    line, _ = _line({**COLOCATED, "engine": {**COLOCATED["engine"], "replicas": 2}})
    assert line == f"KV pool: {blocks} blocks of 16 tokens per replica{TAIL}"
