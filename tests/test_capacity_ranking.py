"""Capacity recommendations per GPU and per dollar when points differ in GPUs or devices (issue 29)."""
from __future__ import annotations

import pandas as pd

from experiments.config import SweepConfig
from experiments.planning.capacity_report import (CAPACITY_RULE, PER_DOLLAR_RULE, PER_GPU_RULE, capacity_ranking,
                                                  capacity_summary)
from experiments.planning.search import capacity_row


def _rows(**per_point) -> pd.DataFrame:
    rows = []
    for i, (capacity, gpus, device, usd) in enumerate(zip(*per_point.values())):
        rows.append({**capacity_row(f"p{i}", i, [capacity], 64.0), "model": "llama-3-8b", "device": device,
                     "scheduler": "vllm_v1", "vllm_flags": "--x", "vllm_command": "vllm serve m", "num_gpus": gpus,
                     "capacity_per_gpu_qps": capacity / gpus, "fleet_usd_per_hour": usd})
    return pd.DataFrame(rows)


def test_points_on_different_gpu_counts_rank_per_gpu():
    # The case: 2 replicas at 9.56 req/s (4.78 a GPU) were picked over 1 GPU at 8.96.
    points = _rows(capacity=[9.56, 8.96], gpus=[2, 1], device=["h100-sxm"] * 2, usd=[None, None])
    ranked, rule, column = capacity_ranking(points)
    assert list(ranked["label"]) == ["p1", "p0"] and rule == PER_GPU_RULE and column[0] == "capacity_per_gpu_qps"
    base = SweepConfig.model_validate({"trace": {"kind": "poisson", "qps": 1}, "search": {"seeds": 1}})
    lines = capacity_summary(points, base, {"tbt_p99_s": 0.1}).recommendation
    assert lines[0].startswith("Recommended: **p1") and lines[1] == f"Rule: {PER_GPU_RULE}."
    assert lines[2].endswith("capacity 9.56 QPS; 4.78 QPS per GPU against 8.96, 46.7% less.")


def test_priced_points_on_different_devices_rank_per_dollar_and_equal_gpus_by_capacity():
    points = _rows(capacity=[20.0, 12.0], gpus=[1, 2], device=["h200", "a100-80gb"], usd=[11.1, 7.2])
    ranked, rule, _ = capacity_ranking(points)
    assert list(ranked["label"]) == ["p1", "p0"] and rule == PER_DOLLAR_RULE
    same = _rows(capacity=[20.0, 22.0], gpus=[1, 1], device=["h200"] * 2, usd=[None, None])
    ranked, rule, _ = capacity_ranking(same)
    assert list(ranked["label"]) == ["p1", "p0"] and rule == CAPACITY_RULE


def test_trials_undecided_at_the_cap_are_named_with_the_rule():
    points = _rows(capacity=[21.7], gpus=[1], device=["h200"], usd=[None]).assign(
        trials_at_cap=[2], trial_requests_first=[2048], trial_requests_cap=[8192], at_cap_qps=["21.75 passed, 22.6 failed"])
    base = SweepConfig.model_validate({"trace": {"kind": "poisson", "qps": 1}, "search": {"seeds": 1}})
    summary = capacity_summary(points, base, {"ttft_p99_s": 2.0})
    assert ("p0: 2 trial(s) still undecided at the cap of 8,192 requests (QPS and verdict: 21.75 passed, 22.6 failed); "
            "a trial that still drifted or fell short of the offered rate failed") in summary.warnings[0]
    assert summary.header[-1].startswith("Sustained-load rule: a load passes only in steady state")
    assert "2,048 requests per instance (replicas × DP, every pool of a cluster) (a point's first trial, rerun at " \
           "the cap when undecided: 2,048 → 8,192); search.max_trial_scale 4×" in summary.header[-2]
