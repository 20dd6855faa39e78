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
    assert sorted(p.name for p in written) == ["disaggregation.csv", "disaggregation.html", "disaggregation.md",
                                               "disaggregation.png"]
    assert "| 1P(TP1) 1D(TP1) | disaggregated |" in (tmp_path / "disaggregation.md").read_text()
    page = (tmp_path / "disaggregation.html").read_text()
    assert "<td>1P(TP1) 1D(TP1)</td><td>disaggregated</td>" in page and "data:image/png;base64," in page


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
        assert seen.pop() == (4.0, 100, expected)  # the top rate first; 50 requests per instance × the layout's 2 instances


def test_a_repetition_offsets_the_trace_and_engine_seeds(monkeypatch):
    """search's repetition k (`seed_offset=k`) runs the trace's seed + k and the engine's + k:
    trace seed 3, engine seed 10, k = 2 -> 5 and 12; k = 0 is the point as configured."""
    import experiments.planning.disaggregation as module

    seen = []

    def fake_run_point(point, point_id=0, trim_fraction=0.0):
        seen.append((point.trace.seed, point.engine.seed))
        raise ValueError("stop after the first trial")

    monkeypatch.setattr(module, "run_point", fake_run_point)
    base = SweepConfig.model_validate({**BASE, "trace": {**BASE["trace"], "seed": 3},
                                       "engine": {**BASE["engine"], "seed": 10}})
    layout = layouts(base, 2, (1,))[0]
    for offset, expected in ((0, (3, 10)), (2, (5, 12))):
        with pytest.raises(ValueError, match="stop"):
            module.layout_capacity(layout, base.goodput, qps=(1.5, 4.0), num_requests=50, seed_offset=offset)
        assert seen.pop() == expected


# A bracket where every layout's bisection fails somewhere and the two seeds differ (88 vs 96,
# 44 vs 52 req/s), so the interval is not degenerate.
# Fixed trials (max_trial_scale 1): these tests are of the search's layouts and seeds, not of lengthening
# (tests/test_steady_state.py), and stay cheap.
TWO_SEEDS = {"qps": (2.0, 8.0), "num_requests": 80, "max_trials": 10, "precision": 0.1, "max_trial_scale": 1}
T_975_ONE_DOF = 12.706204736  # Student-t 97.5 % quantile, 1 degree of freedom (two seeds)


def test_two_seeds_are_the_mean_of_two_single_seed_searches():
    """seeds=2 is exactly the searches of the point (seeds 0) and of the point with trace and
    engine seed 1, each alone: capacity = their mean, interval = confidence_interval of the
    two (by hand: mean ± t(0.975, 1) · |c0 − c1| / 2), trials summed, capacity_by_seed both."""
    from experiments.planning.capacity import confidence_interval

    base = SweepConfig.model_validate(BASE)
    shifted = SweepConfig.model_validate({**BASE, "trace": {**BASE["trace"], "seed": 1},
                                          "engine": {**BASE["engine"], "seed": 1}})
    two = search(base, 2, (1,), seeds=2, **TWO_SEEDS).set_index("label")
    alone = [search(point, 2, (1,), seeds=1, **TWO_SEEDS).set_index("label") for point in (base, shifted)]
    assert sorted(two.index) == ["1P(TP1) 1D(TP1)", "colocated 2x TP1"]
    for label, row in two.iterrows():
        c0, c1 = (frame.loc[label, "capacity_qps"] for frame in alone)
        assert c0 != c1  # the seeds differ: the interval is not zero-width by construction
        assert row["capacity_qps"] == (c0 + c1) / 2
        assert (row["capacity_ci_low"], row["capacity_ci_high"]) == confidence_interval([c0, c1])[1:]
        assert row["capacity_ci_high"] == pytest.approx((c0 + c1) / 2 + T_975_ONE_DOF * abs(c0 - c1) / 2)
        assert row["capacity_ci_low"] == pytest.approx(max(0.0, (c0 + c1) / 2 - T_975_ONE_DOF * abs(c0 - c1) / 2))
        assert row["goodput_per_gpu_qps"] == row["capacity_qps"] / 2
        assert row["trials"] == sum(frame.loc[label, "trials"] for frame in alone)
        assert row["capacity_by_seed"] == f"{c0:.4g}, {c1:.4g}"
        assert row["seeds"] == 2 and row["error"] is None
    assert all(frame["vs_best"].tolist()[1:] == ["no interval (one seed)"] for frame in alone)


T_975_TWO_DOF = 4.302652729749464  # Student-t 97.5 % quantile, 2 degrees of freedom (three seeds)


def _bisection(capacity_qps: float, failed_at_qps: float):
    """A CapacityResult that passed at 1 req/s and at `capacity_qps`, and failed just above."""
    from experiments.planning.capacity import CapacityResult

    return CapacityResult(capacity_qps, [(1.0, True), (capacity_qps, True), (failed_at_qps, False)])


def _four_gpu_rows():
    """Three layouts of 4 GPUs with hand-worked intervals over seeds c − 1, c, c + 1 (mean c,
    standard error 1/√3, half-width 4.3027/√3 = 2.48414), the top over the failed rates:
      1P(TP1) 3D(TP1): c 5,  failed +0.2 -> [2.51586, 7.68414] req/s, per GPU [0.62897, 1.92103]
      colocated 2x TP2: c 10, failed +0.5 -> [7.51586, 12.98414],     per GPU [1.87897, 3.24603]
      colocated 4x TP1: c 21, failed +0.5 -> [18.51586, 23.98414],    per GPU [4.62897, 5.99603]
    and 2P(TP1) 2D(TP1), which could not run."""
    from experiments.planning.disaggregation import layout_row

    found = {layout.label: layout for layout in layouts(SweepConfig.model_validate(BASE), 4, (1, 2))}
    spec = {"1P(TP1) 3D(TP1)": (5, 0.2), "colocated 2x TP2": (10, 0.5), "colocated 4x TP1": (21, 0.5)}
    rows = {label: layout_row(found[label], [_bisection(c + d, c + d + gap) for d in (-1, 0, 1)])
            for label, (c, gap) in spec.items()}
    rows["2P(TP1) 2D(TP1)"] = layout_row(found["2P(TP1) 2D(TP1)"], ["ValueError: does not fit"] * 3)
    return rows


def test_layout_rows_have_the_hand_worked_intervals():
    rows = _four_gpu_rows()
    half = T_975_TWO_DOF / math.sqrt(3)
    a = rows["1P(TP1) 3D(TP1)"]
    assert a["capacity_qps"] == 5.0 and a["capacity_by_seed"] == "4, 5, 6" and a["trials"] == 9
    assert a["capacity_ci_low"] == pytest.approx(5 - half) and a["capacity_ci_high"] == pytest.approx(5 + half)
    assert a["capacity_ci_high_bracket"] == pytest.approx(5.2 + half)
    assert (a["goodput_per_gpu_qps"], a["goodput_per_gpu_ci_low"], a["goodput_per_gpu_ci_high"]) == pytest.approx(
        (1.25, 0.628966, 1.921034), abs=1e-6)
    assert not a["capacity_at_bound"] and a["seeds_below_lowest_rate"] == 0 and a["error"] is None
    failed = rows["2P(TP1) 2D(TP1)"]
    assert failed["error"] == "ValueError: does not fit" and math.isnan(failed["goodput_per_gpu_qps"])


def test_a_seed_below_the_bracket_counts_zero_and_one_that_never_failed_is_a_lower_bound():
    """Seeds failing at the lowest rate (2 req/s) and passing at 4: mean (0 + 4) / 2 = 2, not
    4 (dropping the failed seed would over-claim); its top over the failed rates 2.0 and 4.4:
    3.2 + 12.7062 · 1.2. Every seed below: capacity, interval and goodput NaN (it was an interval
    [0, 0] and goodput "0.000 [0.000, 0.500]", as if measured), as the sweep's capacity row. A
    seed that never failed: a lower bound, its interval open above."""
    from experiments.planning.capacity import CapacityResult
    from experiments.planning.disaggregation import layout_row, per_gpu_text

    layout = layouts(SweepConfig.model_validate(BASE), 2, (1,))[0]
    below = CapacityResult(math.nan, [(2.0, False)])
    row = layout_row(layout, [below, _bisection(4.0, 4.4)])
    assert row["capacity_qps"] == 2.0 and row["seeds_below_lowest_rate"] == 1
    assert row["capacity_by_seed"] == "below, 4"
    assert row["capacity_ci_high_bracket"] == pytest.approx(3.2 + T_975_ONE_DOF * 1.2)
    none = layout_row(layout, [below, below])
    stats = ("capacity_qps", "capacity_ci_low", "capacity_ci_high", "capacity_ci_high_bracket", "goodput_per_gpu_qps",
             "goodput_per_gpu_ci_low", "goodput_per_gpu_ci_high")
    assert [math.isnan(none[k]) for k in stats] == [True] * 7
    assert none["capacity_by_seed"] == "below, below" and none["seeds_below_lowest_rate"] == 2
    assert per_gpu_text(none) == "none (below the lowest rate)"
    open_top = layout_row(layout, [CapacityResult(64.0, [(1.0, True), (64.0, True)]), _bisection(4.0, 4.4)])
    assert open_top["capacity_at_bound"] and open_top["goodput_per_gpu_ci_high"] == math.inf


def test_ranking_and_comparison_say_when_the_intervals_overlap(tmp_path):
    """All four layouts: colocated 4x TP1 leads, its interval [4.63, 6.00] per GPU above
    colocated 2x TP2's [1.88, 3.25] (resolved); best disaggregated 1P3D [0.63, 1.92] against it:
    colocated is ahead. Without the leader, colocated 2x TP2 leads, but its interval overlaps
    1P3D's (1.879 ≤ 1.921): not resolved, and the comparison says so."""
    from experiments.planning.disaggregation import ranked, ranking

    rows = _four_gpu_rows()
    frame = ranked(list(rows.values()))
    assert list(frame["label"]) == ["colocated 4x TP1", "colocated 2x TP2", "1P(TP1) 3D(TP1)", "2P(TP1) 2D(TP1)"]
    assert frame["vs_best"].tolist()[:3] == ["best", "below", "below"] and pd.isna(frame["vs_best"].iloc[3])
    assert ranking(frame) == ("colocated 4x TP1 leads: its 95 % interval over 3 seeds lies above every other "
                              "layout's (resolved)")
    assert comparison(frame) == ("best disaggregated 1P(TP1) 3D(TP1): 1.250 [0.629, 1.921] req/s per GPU; best "
                                 "colocated 4x TP1: 5.250 [4.629, 5.996] req/s per GPU; ratio 0.24×; "
                                 "their 95 % intervals do not overlap: colocated is ahead at 3 seeds")
    close = ranked([rows["colocated 2x TP2"], rows["1P(TP1) 3D(TP1)"]])
    assert close["vs_best"].tolist() == ["best", "not resolved"]
    assert ranking(close) == ("colocated 2x TP2 has the highest mean, but its 95 % interval over 3 seeds overlaps "
                              "those of 1 other layout (1P(TP1) 3D(TP1)): their order is not resolved at 3 seeds "
                              "(more seeds or longer trials may resolve it)")
    assert comparison(close).endswith("ratio 0.50×; their 95 % intervals overlap: the difference is not resolved "
                                      "at 3 seeds")
    write_report(frame, SweepConfig.model_validate(BASE), tmp_path, 0.9)
    text = (tmp_path / "disaggregation.md").read_text()
    assert "| colocated 4x TP1 | colocated | 21.000 [18.516, 23.984] | 5.250 [4.629, 5.996] | best | 20, 21, 22 | 9 |" \
        in text
    assert "3 seeds (trace seeds 0–2, engine seeds 0–2)" in text and "Ranking: colocated 4x TP1 leads" in text
    table = pd.read_csv(tmp_path / "disaggregation.csv")
    assert table["vs_best"].tolist()[:3] == ["best", "below", "below"]


def test_one_seed_resolves_nothing():
    from experiments.planning.disaggregation import layout_row, ranked, ranking

    found = layouts(SweepConfig.model_validate(BASE), 2, (1,))
    frame = ranked([layout_row(found[0], [_bisection(10.0, 11.0)]), layout_row(found[1], [_bisection(4.0, 4.4)])])
    assert frame["vs_best"].tolist() == ["best", "no interval (one seed)"]
    assert ranking(frame).startswith("one seed per layout: no confidence intervals, so no difference")
    assert comparison(frame).endswith("ratio 0.40×; one seed: no interval, so whether this difference is real is "
                                      "not known (--seeds ≥ 2 gives one)")


@pytest.mark.parametrize(("seeds", "trace_seed", "message"), [
    (0, 0, "seeds 0: expected a whole number from 1 to 20"),
    (21, 0, "seeds 21: expected a whole number from 1 to 20"),
    (2, 2**32 - 1, "trace.seed 4294967295 \\+ 1 .* exceeds 4294967295"),
])
def test_bad_seeds_are_errors(seeds, trace_seed, message):
    base = SweepConfig.model_validate({**BASE, "trace": {**BASE["trace"], "seed": trace_seed}})
    with pytest.raises(ValueError, match=message):
        search(base, 2, (1,), seeds=seeds)


class InlinePool:
    """A stand-in for `make_pool`'s executors: runs each call at submit, after a pickle round
    trip of the call and its result (what a worker process or a Ray task does to them)."""

    made: list = []
    submitted: list = []

    def __init__(self, backend, jobs, ray_address=None):
        InlinePool.made.append((backend, jobs, ray_address))

    def submit(self, fn, *args):
        import pickle
        from concurrent.futures import Future

        InlinePool.submitted.append(args[2]["seed_offset"])
        fn, args = pickle.loads(pickle.dumps((fn, args)))
        future = Future()
        future.set_result(pickle.loads(pickle.dumps(fn(*args))))
        return future

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False


def test_a_pool_gives_the_local_table_and_caches_the_trials(tmp_path, monkeypatch):
    """The same search inline and through the sweep's pool (here `InlinePool` as the Ray
    backend, at address auto): the same table, value for value; the pool's trials went into the
    cache, so a local rerun with the simulator broken still gives that table."""
    import experiments.planning.disaggregation as disaggregation
    import experiments.planning.sweep as sweep

    base = SweepConfig.model_validate(BASE)
    local = search(base, 2, (1,), seeds=2, **TWO_SEEDS)
    monkeypatch.setattr(sweep, "make_pool", InlinePool)
    InlinePool.made.clear()
    InlinePool.submitted.clear()
    cache = tmp_path / "cache"
    pooled = search(base, 2, (1,), seeds=2, backend="ray", ray_address="auto", cache_dir=cache, **TWO_SEEDS)
    assert InlinePool.made == [("ray", 1, "auto")]
    assert sorted(InlinePool.submitted) == [0, 0, 1, 1]  # 2 layouts x 2 seeds, one task each
    pd.testing.assert_frame_equal(local, pooled)

    def broken(*_, **__):
        raise RuntimeError("simulated again")

    monkeypatch.setattr(sweep, "run_point", broken)
    monkeypatch.setattr(disaggregation, "run_point", broken)
    pd.testing.assert_frame_equal(search(base, 2, (1,), seeds=2, cache_dir=cache, **TWO_SEEDS), local)


def test_ray_gives_the_local_table(tmp_path):
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'sarathi-sim[ray]'): the Ray backend "
                                      "is checked with a stand-in pool in the test above")
    base = SweepConfig.model_validate(BASE)
    local = search(base, 2, (1,), seeds=2, **TWO_SEEDS)
    on_ray = search(base, 2, (1,), seeds=2, backend="ray", cache_dir=tmp_path / "cache", **TWO_SEEDS)
    pd.testing.assert_frame_equal(local, on_ray)


def test_layouts_with_data_parallel_instances():
    """llama-3-8b, TP1 with DP 1 and 2 on 4 GPUs: instance shapes of 1 GPU and of 2 (one DP2
    engine). Colocated: 4x TP1 only (replicas of a DP group are not modelled). xPyD with
    x·a + y·b = 4: (1, 1) x = 1..3 (3), (1, 2) x = 2 (1), (2, 1) x = 1 (1), (2, 2) x = 1 (1)."""
    found = layouts(SweepConfig.model_validate(BASE), 4, (1,), (1,), (1, 2))
    assert [layout.label for layout in found] == [
        "colocated 4x TP1", "1P(TP1) 3D(TP1)", "2P(TP1) 2D(TP1)", "3P(TP1) 1D(TP1)", "2P(TP1) 1D(TP1 DP2)",
        "1P(TP1 DP2) 2D(TP1)", "1P(TP1 DP2) 1D(TP1 DP2)"]
    decode = found[-1].point.cluster.decode
    assert decode.replicas == 1 and decode.engine["data_parallel_size"] == 2
    assert all(cluster_gpus(layout.point) == 4 for layout in found)
    with pytest.raises(ValueError, match="llama-3-8b is a dense model"):
        layouts(SweepConfig.model_validate(BASE), 4, (1,), (1,), (1, 2), (False, True))


def test_layouts_of_a_mixture_of_experts_with_dp_and_ep():
    """qwen3-30b-a3b, TP 1, 2 × DP 1, 2 × EP off/on on 4 GPUs: shapes TP1 (EP 1 is none), TP1 DP2
    off/on, TP2 off/on (2 GPUs), TP2 DP2 off/on (4). Colocated: 4x TP1, 2x TP2 off/on, 1x TP2 DP2
    off/on = 5 (2x TP1 DP2 is not modelled). xPyD: 1+1 GPUs x = 1..3 (3), 1 GPU + a 2-GPU shape
    x = 2 (4), a 2-GPU shape + 1 GPU x = 1 (4), two 2-GPU shapes (4 × 4 = 16): 27; 32 in all."""
    moe = SweepConfig.model_validate({**BASE, "model": "qwen3-30b-a3b"})
    found = layouts(moe, 4, (1, 2), (1,), (1, 2), (False, True))
    labels = [layout.label for layout in found]
    assert labels[:5] == ["colocated 4x TP1", "colocated 2x TP2", "colocated 2x TP2 EP2", "colocated 1x TP2 DP2",
                          "colocated 1x TP2 DP2 EP4"]
    assert len(found) == 32 and len(set(labels)) == 32
    assert {"1P(TP1 DP2 EP2) 1D(TP2)", "2P(TP1) 1D(TP1 DP2 EP2)", "1P(TP2 EP2) 1D(TP2 EP2)"} <= set(labels)
    assert all(cluster_gpus(layout.point) == 4 for layout in found)


def test_a_dense_dp_engine_searches_as_replicas_do():
    """A dense model's DP ranks are independent engines (vLLM run_engine_core): colocated 1x TP1
    DP2 has the capacity of 2x TP1 replicas (its balancer and the router both pick the least
    loaded), and the search runs the DP pool beside them."""
    frame = search(SweepConfig.model_validate(BASE), 2, (1,), data_parallel_sizes=(1, 2), seeds=1,
                   **TWO_SEEDS).set_index("label")
    assert sorted(frame.index) == ["1P(TP1) 1D(TP1)", "colocated 1x TP1 DP2", "colocated 2x TP1"]
    assert frame["error"].isna().all()
    # Equal within the bisection's precision: the steady-state tests read each request's queueing
    # delay, where the DP balancer's and the router's ties may differ, so their verdicts on a
    # trial near capacity (and its lengthening) can too.
    assert frame.loc["colocated 1x TP1 DP2", "capacity_qps"] == pytest.approx(
        frame.loc["colocated 2x TP1", "capacity_qps"], rel=0.1)


# A base with a DP2 decode pool (as cluster.decode.engine.data_parallel_size), and a colocated DP2 engine.
POOL_DP = {**BASE, "cluster": {**BASE["cluster"], "decode": {"engine": {"data_parallel_size": 2}}}}
COLOCATED_DP = {**{k: v for k, v in BASE.items() if k != "cluster"},
                "engine": {**BASE["engine"], "data_parallel_size": 2}}


def _wide_ep_base() -> SweepConfig:
    from pathlib import Path

    from experiments.config import load_config

    _, points = load_config(Path(__file__).parents[1] / "experiments" / "configs" / "moe_disaggregated_wide_ep.yaml")
    return SweepConfig.model_validate(points[0])


@pytest.mark.parametrize("base", ["plain", "pool_dp", "colocated_dp", "wide_ep"])
def test_every_layout_uses_exactly_the_budget(base):
    """Whatever DP the base's engine or pools set, a layout's GPUs are its shapes' (TP × PP × DP
    per instance): `Layout.gpus` = the GPUs its point runs on (`cluster_gpus`) = the budget, for
    every layout of 1 to 4 GPUs with TP 1, 2 and DP 1, 2 (a base's DP2 pool once counted as TP ×
    PP: 1P(TP1) 2D(TP1 DP2) was listed as 3 GPUs and ran on 5)."""
    point = _wide_ep_base() if base == "wide_ep" else SweepConfig.model_validate(
        {"plain": BASE, "pool_dp": POOL_DP, "colocated_dp": COLOCATED_DP}[base])
    for gpus in (1, 2, 3, 4):
        for layout in layouts(point, gpus, (1, 2), (1,), (1, 2)):
            assert layout.gpus == cluster_gpus(layout.point) == gpus, (base, gpus, layout.label)


def test_a_base_dp_is_not_kept_in_the_layouts():
    """The tester's cases: a DP2 decode pool on 3 GPUs with DP 1 only gives 3x TP1, 1P2D and 2P1D,
    each pool of DP1 instances (3 GPUs each, not 5 and 4); a colocated DP2 engine on 1 GPU is
    colocated 1x TP1 of DP 1 (it ran DP2 on 2 GPUs), on 2 GPUs with DP 1, 2: 2x TP1, 1x TP1 DP2,
    1P1D, the pools' point without the colocated engine's DP (no "dp=2" in its label)."""
    from experiments.config import describe_point

    found = layouts(SweepConfig.model_validate(POOL_DP), 3, (1,))
    assert [layout.label for layout in found] == ["colocated 3x TP1", "1P(TP1) 2D(TP1)", "2P(TP1) 1D(TP1)"]
    assert [cluster_gpus(layout.point) for layout in found] == [3, 3, 3]
    assert all(layout.point.cluster.decode.engine["data_parallel_size"] == 1 for layout in found[1:])
    (alone,) = layouts(SweepConfig.model_validate(COLOCATED_DP), 1, (1,))
    assert alone.label == "colocated 1x TP1" and alone.point.engine.data_parallel_size == 1
    assert cluster_gpus(alone.point) == 1
    found = layouts(SweepConfig.model_validate(COLOCATED_DP), 2, (1,), (1,), (1, 2))
    assert [layout.label for layout in found] == ["colocated 2x TP1", "colocated 1x TP1 DP2", "1P(TP1) 1D(TP1)"]
    assert [cluster_gpus(layout.point) for layout in found] == [2, 2, 2]
    assert describe_point(found[2].point) == "sarathi chunk=512 1P1D"


def test_a_top_level_dp_beside_a_cluster_is_refused_naming_the_pool_keys():
    """Both pools inherited it while the row was labelled "dp=2 1P1D dp=2/1": refused instead."""
    with pytest.raises(ValueError, match=r"engine.data_parallel_size 2 beside cluster: a pool's instance is a DP "
                                         r"engine by its own key: set cluster.prefill.engine.data_parallel_size"):
        SweepConfig.model_validate({**BASE, "engine": {**BASE["engine"], "data_parallel_size": 2}})
    assert SweepConfig.model_validate({**BASE, "engine": {**BASE["engine"], "data_parallel_size": 1}})


@pytest.mark.parametrize("gpus", [0, 1025, 1_000_000])
def test_a_budget_outside_1_to_1024_is_a_clear_error(gpus):
    with pytest.raises(ValueError, match=rf"^GPU budget \(--gpus\) {gpus}: expected 1 to 1024 GPUs \(as layouts.gpus\)$"):
        layouts(SweepConfig.model_validate(BASE), gpus, (1,))


def test_a_layout_the_base_rules_out_is_named_with_the_key():
    """A mixture of experts with preemption: swap cannot run a DP engine: the error names the
    layout and the check, not pydantic's dump of the whole config."""
    moe = {**COLOCATED_DP, "model": "qwen3-30b-a3b",
           "engine": {**BASE["engine"], "preemption": "swap"}}
    with pytest.raises(ValueError) as info:
        layouts(SweepConfig.model_validate(moe), 2, (1,), (1,), (1, 2))
    assert str(info.value) == ("layout colocated 1x TP1 DP2 cannot run from this config: engine.data_parallel_size > 1 "
                               "of a mixture of experts with preemption: swap or a draft model is not modelled; use "
                               "preemption: recompute and draft: ngram")


def _below(rate_qps: float):
    """A seed's bisection that failed its lowest rate."""
    from experiments.planning.capacity import CapacityResult

    return CapacityResult(math.nan, [(rate_qps, False)])


def test_no_layout_meeting_the_slos_ranks_none_and_gives_no_ratio(tmp_path):
    """Every seed of both layouts failed the lowest rate: no best (0 against 0), no ratio (it was
    "ratio ∞ (colocated meets the SLOs at no tested rate)"), and what to do."""
    from experiments.planning.disaggregation import layout_row, ranked, ranking

    found = layouts(SweepConfig.model_validate(BASE), 2, (1,))
    frame = ranked([layout_row(layout, [_below(95.0)] * 3) for layout in found])
    assert frame["vs_best"].tolist() == ["none met the SLOs", "none met the SLOs"]
    assert ranking(frame) == ("no layout met the SLOs at any tested rate (every seed of the 2 that ran failed even "
                              "the lowest rate), so none is ranked: lower --qps (or search.qps) to measure them")
    assert comparison(frame) == ("no layout met the SLOs at any tested rate, so there is no ratio: lower --qps (or "
                                 "search.qps) to measure them")
    write_report(frame, SweepConfig.model_validate(BASE), tmp_path, 0.9)
    text = (tmp_path / "disaggregation.md").read_text()
    assert "Ranking: no layout met the SLOs at any tested rate" in text and "∞" not in text.split("| layout |")[0]


def test_one_kind_below_the_lowest_rate_gives_no_ratio():
    """Colocated 2x TP1 seeds 9, 10, 11 req/s (failing at 10, 11, 12): per GPU 5.000 [(10 −
    2.48414) / 2, (11 + 2.48414) / 2] = [3.758, 6.742]; the disaggregated layout's every seed
    failed 2 req/s: no capacity and no interval (NaN), below the best; no ratio either way."""
    from experiments.planning.disaggregation import layout_row, ranked

    colocated, split = layouts(SweepConfig.model_validate(BASE), 2, (1,))
    met = layout_row(colocated, [_bisection(c, c + 1) for c in (9.0, 10.0, 11.0)])
    frame = ranked([met, layout_row(split, [_below(2.0)] * 3)])
    assert frame["vs_best"].tolist() == ["best", "below"]
    assert comparison(frame) == ("best colocated 2x TP1: 5.000 [3.758, 6.742] req/s per GPU; no disaggregated layout "
                                 "met the SLOs at any tested rate (its capacity lies below the lowest), so there is no "
                                 "ratio: lower --qps (or search.qps) to measure it")
    flipped = ranked([layout_row(colocated, [_below(2.0)] * 3), layout_row(split, [_bisection(c, c + 1)
                                                                                    for c in (9.0, 10.0, 11.0)])])
    assert comparison(flipped).startswith("best disaggregated 1P(TP1) 1D(TP1): 5.000 [3.758, 6.742] req/s per GPU; "
                                          "no colocated layout met the SLOs")


def test_a_kind_that_failed_or_was_not_searched_is_said_so():
    """"only one kind of layout was searched" was said when the other kind was searched and failed."""
    from experiments.planning.disaggregation import layout_row, ranked

    colocated, split = layouts(SweepConfig.model_validate(BASE), 2, (1,))
    frame = ranked([layout_row(colocated, [_bisection(10.0, 11.0)]),
                    layout_row(split, ["ValueError: does not fit"])])
    assert comparison(frame) == ("every disaggregated layout failed (1; 1P(TP1) 1D(TP1): ValueError: does not fit), "
                                 "so the kinds are not compared")
    (alone,) = layouts(SweepConfig.model_validate(BASE), 1, (1,))
    assert comparison(ranked([layout_row(alone, [_bisection(10.0, 11.0)])])) == (
        "no disaggregated layout was searched (none of these GPUs and degrees), so the kinds are not compared")
