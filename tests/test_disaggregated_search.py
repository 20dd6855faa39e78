"""The xPyD search (experiments/planning/disaggregation.py): the layouts of a GPU budget, SLO
attainment as DistServe counts it, and a small search end to end."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from experiments.config import SweepConfig
from experiments.deployment import cluster_gpus
from experiments.planning.disaggregation import comparison, layouts, search, slo_attainment, write_report

BASE = {"model": "llama-3-8b", "device": "h100-sxm", "cost_model": "roofline",
        "trace": {"kind": "profile", "name": "azure-conv", "qps": 4, "num_requests": 60, "seed": 0},
        "engine": {"scheduler": "sarathi", "chunk_size": 512},
        "cluster": {"prefill": {"engine": {"chunk_size": 2048}}, "link": {"bandwidth_gb_s": 50}},
        "goodput": {"ttft_s": 0.5, "tpot_s": 0.05}}


def test_layouts_of_eight_gpus():
    """TP 1 and 2 on 8 GPUs: colocated 8×TP1 and 4×TP2; xPyD with x·TP_p + y·TP_d = 8: TP1/TP1
    x = 1..7 (7), TP1/TP2 x = 2, 4, 6 (3), TP2/TP1 x = 1, 2, 3 (3), TP2/TP2 x = 1..3 (3)."""
    found = layouts(SweepConfig.model_validate(BASE), 8, (1, 2))
    labels = [layout.label for layout in found]
    assert labels[:2] == ["colocated 8x TP1", "colocated 4x TP2"]
    assert len(found) == 2 + 7 + 3 + 3 + 3
    assert "2P(TP1) 3D(TP2)" in labels and "3P(TP2) 2D(TP1)" in labels
    assert all(cluster_gpus(layout.point) == 8 for layout in found)
    disaggregated = [layout for layout in found if layout.kind == "disaggregated"]
    assert all(layout.point.cluster.link.bandwidth_gb_s == 50 for layout in disaggregated)  # the base's link
    assert all(layout.point.cluster.prefill.engine["chunk_size"] == 2048 for layout in disaggregated)


def test_layouts_skip_tp_the_heads_do_not_split_into():
    assert {layout.label for layout in layouts(SweepConfig.model_validate(BASE), 3, (1, 3))} == {
        "colocated 3x TP1", "1P(TP1) 2D(TP1)", "2P(TP1) 1D(TP1)"}
    with pytest.raises(ValueError, match="no layout"):
        layouts(SweepConfig.model_validate(BASE), 3, (3,))


def test_slo_attainment_counts_both_slos_inside_the_window():
    """Arrivals 0..10 s, 10 % trimmed: the window is [1, 9], so rows at 0 and 10 are out. Of the
    four inside, one is late on TTFT, one on TPOT, one meets both, one was rejected: 1 / 4."""
    frame = pd.DataFrame({
        "arrival_s": [0.0, 2.0, 4.0, 6.0, 8.0, 10.0],
        "finish_reason": ["completed", "completed", "completed", "completed", "rejected_kv_capacity", "completed"],
        "ttft_s": [9.0, 0.6, 0.1, 0.1, np.nan, 0.1],
        "tpot_s": [0.01, 0.01, 0.06, 0.01, np.nan, 0.01],
    })
    assert slo_attainment(frame, {"ttft_s": 0.5, "tpot_s": 0.05}, 0.1) == 0.25
    assert slo_attainment(frame, {"ttft_s": 0.5}, 0.0) == pytest.approx(3 / 6)
    one_token = frame.assign(tpot_s=[np.nan] * 6)  # no TPOT: meets that SLO
    assert slo_attainment(one_token, {"tpot_s": 0.05}, 0.0) == pytest.approx(5 / 6)


def test_search_two_gpus_and_report(tmp_path):
    base = SweepConfig.model_validate(BASE)
    frame = search(base, 2, (1,), qps=(1.0, 4.0), num_requests=60, max_trials=6)
    assert list(frame["kind"].sort_values()) == ["colocated", "disaggregated"]
    assert (frame["goodput_per_gpu_qps"] == frame["capacity_qps"] / 2).all()
    assert frame["goodput_per_gpu_qps"].is_monotonic_decreasing
    assert all(not math.isnan(c) for c in frame["capacity_qps"])
    assert comparison(frame).startswith("best disaggregated 1P(TP1) 1D(TP1)")
    written = write_report(frame, base, tmp_path, 0.9)
    assert sorted(p.name for p in written) == ["disaggregation.csv", "disaggregation.md", "disaggregation.png"]
    assert "| 1P(TP1) 1D(TP1) | disaggregated |" in (tmp_path / "disaggregation.md").read_text()


def test_search_needs_goodput_thresholds():
    with pytest.raises(ValueError, match="goodput"):
        search(SweepConfig.model_validate({**BASE, "goodput": {}}), 2, (1,))


def test_layouts_with_pipeline_stages():
    """TP 1, PP 1 and 2 on 4 GPUs: instance shapes of 1 and 2 GPUs. Colocated: 4x TP1, 2x TP1 PP2.
    xPyD with x·a + y·b = 4 for shapes a, b in {1, 2}: (1, 1) x = 1..3 (3), (1, 2) x = 2 (1),
    (2, 1) x = 1 (1), (2, 2) x = 1 (1)."""
    found = layouts(SweepConfig.model_validate(BASE), 4, (1,), (1, 2))
    labels = [layout.label for layout in found]
    assert labels[:2] == ["colocated 4x TP1", "colocated 2x TP1 PP2"]
    assert len(found) == 2 + 3 + 1 + 1 + 1
    assert {"2P(TP1) 1D(TP1 PP2)", "1P(TP1 PP2) 2D(TP1)", "1P(TP1 PP2) 1D(TP1 PP2)"} <= set(labels)
    assert all(cluster_gpus(layout.point) == 4 for layout in found)


def test_trials_keep_the_trace_seed_unless_given_one(monkeypatch):
    """layout_capacity's trials are the point's trace at each rate and size, with the trace's
    own seed (a `--set trace.seed=3` is not silently replaced by 0) unless a seed is passed."""
    import experiments.planning.disaggregation as module

    seen = []

    def fake_run_point(point, point_id=0, trim_fraction=0.0):
        seen.append((point.trace.qps, point.trace.num_requests, point.trace.seed))
        raise ValueError("stop after the first trial")

    monkeypatch.setattr(module, "run_point", fake_run_point)
    base = SweepConfig.model_validate({**BASE, "trace": {**BASE["trace"], "seed": 3}})
    layout = layouts(base, 2, (1,))[0]
    for seed, expected in ((None, 3), (7, 7)):
        with pytest.raises(ValueError, match="stop"):
            module.layout_capacity(layout, base.goodput, qps=(1.5, 4.0), num_requests=50, seed=seed)
        assert seen.pop() == (1.5, 50, expected)
