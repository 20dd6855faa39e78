"""The sweep and capacity reports (experiments/planning/report.py, capacity_report.py): labels by
what differs, the recommendation's rule and runner-up, the marked tables, truncation and trace wording; hand-made
points tables, so every expected value is worked out here."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from experiments.config import SweepConfig, point_labels
from experiments.planning.capacity_report import capacity_summary
from experiments.planning.report import (Recommendation, format_cell, points_tables, recommendation,
                                         recommendation_lines, write_report)
from experiments.planning.report_header import trace_line
from experiments.planning.sweep import rows_frame

SLO = {"tbt_p99_s": 0.1, "scheduling_delay_p50_s": 2.0}


def _point(point_id: int, label: str, **metrics) -> dict:
    row = {"point_id": point_id, "label": label, "model": "llama-3-8b", "device": "h100-sxm",
           "num_requests": 100, "completed": 100, "truncated": 0, "rejected": 0, "rejected_too_long": 0,
           "rejected_kv_capacity": 0, "rejected_budget": 0, "offered_qps": 10.0, "throughput_rps": 10.0,
           "goodput_rps": 10.0, "output_throughput_tps": 1000.0, "ttft_s_p50": 0.05, "ttft_s_p90": 0.1,
           "tbt_s_p50": 0.01, "tbt_s_p99": 0.05, "tpot_s_p50": 0.01, "e2e_s_p50": 1.0,
           "scheduling_delay_s_p50": 0.01, "num_preemptions": 0, "num_gpu_blocks": 1000, "kv_usage_max": 0.5}
    row.update(metrics)
    row["slo_tbt_p99_s"] = bool(row["tbt_s_p99"] <= SLO["tbt_p99_s"])
    row["slo_scheduling_delay_p50_s"] = bool(row["scheduling_delay_s_p50"] <= SLO["scheduling_delay_p50_s"])
    row["slo_met"] = row["slo_tbt_p99_s"] and row["slo_scheduling_delay_p50_s"]
    return row


def test_points_are_labelled_by_what_differs():
    base = {"trace": {"kind": "poisson", "qps": 4}, "engine": {"scheduler": "sarathi", "chunk_size": 512}}
    same = [SweepConfig.model_validate({**base, "engine": {"scheduler": "sarathi", "chunk_size": c}})
            for c in (256, 512)]
    assert point_labels(same) == ["sarathi chunk=256", "sarathi chunk=512"]
    devices = [SweepConfig.model_validate({**base, "device": d}) for d in ("h100-sxm", "a100-80gb")]
    assert point_labels(devices) == ["h100-sxm · sarathi chunk=512", "a100-80gb · sarathi chunk=512"]
    models = [SweepConfig.model_validate({**base, "model": "llama-2-7b", "device": "a100-80gb"}),
              SweepConfig.model_validate(base)]
    assert point_labels(models) == ["llama-2-7b · a100-80gb · sarathi chunk=512",
                                    "llama-3-8b · h100-sxm · sarathi chunk=512"]
    # Any other differing key follows as key=value; a key only one scheduler reads is not a difference.
    other = [SweepConfig.model_validate({**base, "engine": {"scheduler": "sarathi", "max_num_seqs": 64}}),
             SweepConfig.model_validate({**base, "trace": {"kind": "poisson", "qps": 8}})]
    assert point_labels(other) == ["sarathi chunk=512 max_num_seqs=64 trace.qps=4",
                                   "sarathi chunk=512 max_num_seqs=128 trace.qps=8"]
    mixed = [SweepConfig.model_validate({**base, "engine": {"scheduler": "vllm"}}), same[0]]
    assert point_labels(mixed) == ["vllm", "sarathi chunk=256"]


def test_recommendation_breaks_a_goodput_tie_by_slo_margin_and_names_what_it_gives_up():
    # A and B both meet the SLOs with goodput within 1 % (10.0 vs 10.05) and equal throughput;
    # A's margin is TBT (0.1 − 0.05) / 0.1 = 50 % of the limit, B's 10 %: A wins on SLO margin. C misses TBT.
    points = pd.DataFrame([_point(0, "A", ttft_s_p90=0.4), _point(1, "B", goodput_rps=10.05, tbt_s_p99=0.09),
                           _point(2, "C", tbt_s_p99=0.2, goodput_rps=12.0)])
    choice = recommendation(points, SLO)
    assert (choice.best["label"], choice.runner_up["label"], choice.decided_by) == ("A", "B", "SLO margin")
    assert choice.margin == {0: pytest.approx(50.0), 1: pytest.approx(10.0)}
    lines = recommendation_lines(choice, points, SLO)
    assert lines[0].startswith("Recommended at this load: **A (point 0: llama-3-8b on h100-sxm)**")
    assert lines[1].startswith("Rule: among the points meeting every SLO, the highest goodput")
    assert ("it lost on SLO margin (10 % against 50 % of the limit, more than 5 points apart; goodput and throughput "
            "within 1 %)") in lines[2]
    # A's P90 TTFT is 0.4 s against B's 0.1 s: 4.0× — the trade the rule made, said out loud.
    assert lines[3] == "Against the runner-up the recommendation gives up TTFT P90 0.4 s against 0.1 s (4.0× higher)."


def test_recommendation_by_goodput_beyond_the_tie_band():
    # B's goodput 10.2 is 2 % above A's 10.0: outside the 1 % band, so B wins despite less headroom.
    points = pd.DataFrame([_point(0, "A"), _point(1, "B", goodput_rps=10.2, tbt_s_p99=0.09)])
    choice = recommendation(points, SLO)
    assert (choice.best["label"], choice.runner_up["label"], choice.decided_by) == ("B", "A", "goodput")
    assert "it lost on goodput (10 against 10.2 req/s)" in recommendation_lines(choice, points, SLO)[2]
    # No SLO: nothing is recommended, and the report says why.
    assert recommendation(points, {}) is None
    assert recommendation_lines(None, points, {})[0].startswith("No SLO is set")


def test_only_point_meeting_the_slos_and_none_meeting_them():
    points = pd.DataFrame([_point(0, "A"), _point(1, "B", scheduling_delay_s_p50=3.0)])
    choice = recommendation(points, SLO)
    assert isinstance(choice, Recommendation) and choice.runner_up is None
    assert recommendation_lines(choice, points, SLO)[-1] == "It is the only point meeting every SLO."
    failing = pd.DataFrame([_point(0, "A", tbt_s_p99=0.3)])
    assert recommendation(failing, SLO) is None
    assert recommendation_lines(None, failing, SLO)[0].startswith("No point meets every SLO at this load")


def test_tables_mark_the_recommended_row_and_each_value_over_its_slo():
    points = pd.DataFrame([_point(0, "A"), _point(1, "B", tbt_s_p99=0.2, truncated=3)])
    requests, latency, kv = points_tables(points, SLO, best_id=0)
    assert requests.columns == ["point", "completed", "truncated", "rejected", "offered QPS", "req/s (over the makespan)",
                                "goodput (req/s)", "out tok/s", "SLO met", "SLOs missed"]
    assert requests.cells[1][requests.columns.index("truncated")] == "3"
    assert requests.cells[1][-1] == "TBT P99 > 0.1 s" and requests.cells[0][-1] == "—"
    assert requests.best == latency.best == kv.best == [True, False]
    tbt = latency.columns.index("TBT P99")
    assert [row[tbt] for row in latency.miss] == [False, True]
    assert sum(map(sum, latency.miss)) == 1  # nothing else is marked
    assert kv.columns == ["point", "KV blocks", "KV usage max", "preemptions"]


def test_report_files_show_marks_truncation_and_a_replayed_file(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,10,5\n")
    base = SweepConfig.model_validate({"name": "r", "trace": {"kind": "file", "path": str(trace), "qps": 2},
                                       "slo": SLO})
    points = pd.DataFrame([_point(0, "A", trace_source=str(trace)),
                           _point(1, "B", tbt_s_p99=0.2, truncated=3, trace_source=str(trace)),
                           {"point_id": 2, "label": "C", "model": "llama-2-70b", "device": "a100-80gb",
                            "error": "ValueError: does not fit"}])
    html = write_report(points, None, base, tmp_path).read_text()
    md = (tmp_path / "report.md").read_text()
    assert "| **A** ★ |" in md and "| **0.2** ✗ |" in md
    assert "Truncated requests (engine.on_too_long: truncate" in md and "3 at B" in md
    assert f"replayed from the file {trace}, time-scaled to a mean of 2 QPS" in md and "sampled" not in md
    assert "**llama-3-8b** on **h100-sxm** (points 0, 1); **llama-2-70b** on **a100-80gb** (point 2)" in md
    assert "- **C (point 2: llama-2-70b on a100-80gb):** ValueError: does not fit" in md
    assert html.count('<tr class="best"') == 3 and html.count('class="miss"') == 1
    assert html.count("<table>") == 3 and "max-width:1100px" in html
    # The plots' recommended bar is green (#55A868), the others blue (#4C72B0).
    import matplotlib.image
    import numpy as np

    pixels = matplotlib.image.imread(tmp_path / "plots" / "tbt_p99.png")[..., :3].reshape(-1, 3)
    for colour in ((0x55, 0xA8, 0x68), (0x4C, 0x72, 0xB0)):
        assert (np.abs(pixels - np.array(colour) / 255).max(axis=1) < 0.01).sum() > 100


def test_trace_line_says_sampled_only_for_generated_arrivals():
    row = pd.Series({"num_requests": 10, "offered_qps": 3.9, "trace_source": "poisson poisson"})
    poisson = SweepConfig.model_validate({"trace": {"kind": "poisson", "qps": 4}})
    assert "sampled poisson arrivals at a nominal 4 QPS" in trace_line(row, poisson)
    assert trace_line(row, poisson).startswith("Trace: generated (kind poisson); 10 requests")
    constant = SweepConfig.model_validate({"trace": {"kind": "synthetic", "qps": 4, "arrival": "constant"}})
    assert "at a constant 4 QPS" in trace_line(row, constant) and "sampled" not in trace_line(row, constant)


def test_integer_columns_stay_integers_in_points_csv(tmp_path):
    frame = rows_frame([{"point_id": 0, "chunk_size": 512, "ttft_s_p50": 1.0},
                        {"point_id": 1, "ttft_s_p50": 2.0}, {"point_id": 2, "chunk_size": 64, "ttft_s_p50": 64.0}])
    frame.to_csv(tmp_path / "p.csv", index=False)
    assert (tmp_path / "p.csv").read_text().splitlines() == ["point_id,chunk_size,ttft_s_p50", "0,512,1.0", "1,,2.0",
                                                              "2,64,64.0"]
    assert format_cell(frame.loc[1, "chunk_size"]) == "n/a" and format_cell(frame.loc[0, "chunk_size"]) == "512"


def test_capacity_summary_names_rule_runner_up_warnings_and_command():
    base = SweepConfig.model_validate({"trace": {"kind": "poisson", "qps": 1},
                                       "search": {"qps": [1, 32], "num_requests": 100, "seeds": 2}})
    common = {"model": "llama-3-8b", "device": "h100-sxm", "scheduler": "sarathi", "vllm_flags": "--x"}
    points = pd.DataFrame([
        {"point_id": 0, "label": "A", "capacity_qps": 10.0, "capacity_ci_low": 9.0, "capacity_ci_high": 11.0,
         "capacity_at_bound": False, "vllm_command": "vllm serve m --a", **common},
        {"point_id": 1, "label": "B", "capacity_qps": 12.0, "capacity_ci_low": 11.5, "capacity_ci_high": 12.5,
         "capacity_at_bound": False, "vllm_command": "vllm serve m --b", **common},
        {"point_id": 2, "label": "C", "capacity_qps": math.nan, "capacity_ci_low": math.nan,
         "capacity_ci_high": math.nan, "capacity_at_bound": False, "vllm_command": "vllm serve m --c", **common},
    ])
    summary = capacity_summary(points, base, {"tbt_p99_s": 0.1})
    assert summary.best_id == 1 and summary.command == "vllm serve m --b"
    assert summary.recommendation[0] == ("Recommended: **B (point 1: llama-3-8b on h100-sxm)** — capacity 12 QPS "
                                         "(95 % interval 11.5–12.5).")
    # (12 − 10) / 12 = 16.7 % less; intervals [9, 11] and [11.5, 12.5] do not overlap.
    assert summary.recommendation[2] == ("Runner-up: **A (point 0: llama-3-8b on h100-sxm)** — capacity 10 QPS "
                                         "(95 % interval 9–11), 16.7% less.")
    assert summary.warnings[0].startswith("Caution: trials of 100 requests are short")
    assert summary.warnings[1] == "Meets the SLOs at no load searched (not even 1 QPS): C."


def test_the_report_states_what_priced_the_steps_and_the_device_figures():
    """The header names each point's cost model (not a fixed 'roofline' sentence), the out-of-grid
    steps, and the device's figures with their sources."""
    import pandas as pd

    from experiments.config import SweepConfig
    from experiments.planning.report_header import cost_model_lines, device_lines

    points = pd.DataFrame({"point_id": [0, 1], "label": ["a", "b"], "device": ["h100-sxm", "h100-sxm"],
                           "cost_model_label": ["measured (aiconfigurator vllm 0.19.0) on h100-sxm",
                                                "roofline (no measured tables for this device and dtype)"],
                           "cost_model_steps_out_of_range": [3, 0], "num_steps": [400, 500]})
    lines = cost_model_lines(points)
    assert lines[0] == ("Step times: measured (aiconfigurator vllm 0.19.0) on h100-sxm (point 0); "
                        "roofline (no measured tables for this device and dtype) (point 1).")
    assert lines[1].startswith("Roofline step times are estimates")
    # A share of the point's steps (issue 29: a bare "38209" said nothing): 3 of 400.
    assert lines[2] == ("Steps outside the measured grids (priced by the roofline scaled from the grid's edge): "
                        "0.8% of 400 steps (3) at a.")
    assert lines[2].startswith("Steps outside") and cost_model_lines(points.drop(columns="num_steps"))[2].endswith(
        "edge): 3 at a.")  # no step count: the bare count
    base = SweepConfig.model_validate({"name": "x", "model": "llama-3-8b", "device": "h100-sxm",
                                       "trace": {"kind": "poisson", "qps": 1, "num_requests": 10,
                                                 "prompt_tokens": 8, "output_tokens": 8}})
    (device,) = device_lines(points, base)
    assert device.startswith("Device h100-sxm: 80 GiB, 989.5 TFLOP/s dense BF16, 3350 GB/s; GPU link nvlink 450 GB/s")


def test_labels_name_only_what_differs_not_schema_defaults(tmp_path):
    """A variant of another trace kind is labelled by its kind: the keys only one kind has (qps,
    clients) and the defaults the schema fills in for it (arrival, num_prefixes, think_time_s) are
    not listed (a profile base once put all its keys in every label, paging the terminal table),
    nor a qualifier every point shares (preemption swap); keys both kinds have are, where they differ."""
    from experiments.config import load_config

    config = tmp_path / "kinds.yaml"
    config.write_text("""
trace: {kind: poisson, qps: 2, num_requests: 10, prompt_tokens: 100, output_tokens: 10}
engine: {scheduler: sarathi, chunk_size: 256, preemption: swap}
variants:
  - {trace: {qps: 4}}
  - {trace: {kind: closed_loop, clients: 2, num_requests: 10, prompt_tokens: 100, output_tokens: 10}}
""")
    _, points = load_config(config)
    assert point_labels([SweepConfig.model_validate(p) for p in points]) == [
        "sarathi chunk=256 poisson", "sarathi chunk=256 closed_loop"]
    config.write_text(config.read_text().replace("clients: 2, num_requests: 10", "clients: 2, num_requests: 20")
                      + "  - {trace: {kind: closed_loop, clients: 4, num_requests: 20, prompt_tokens: 100, "
                        "output_tokens: 10}}\n")
    _, points = load_config(config)
    assert point_labels([SweepConfig.model_validate(p) for p in points]) == [
        "sarathi chunk=256 poisson trace.num_requests=10", "sarathi chunk=256 closed_loop trace.num_requests=20 "
        "trace.clients=2", "sarathi chunk=256 closed_loop trace.num_requests=20 trace.clients=4"]


def test_same_named_inline_devices_are_labelled_by_the_figure_that_differs():
    device = {"name": "my-gpu", "memory_gib": 80, "dense_bf16_tflops": 989, "memory_bandwidth_gb_per_s": 3350,
              "gpu_link": {"kind": "nvlink", "gb_per_s_per_direction": 450}, "host_link": {"gb_per_s_per_direction": 64}}
    base = {"trace": {"kind": "poisson", "qps": 4}}
    points = [SweepConfig.model_validate({**base, "device": device}),
              SweepConfig.model_validate({**base, "device": {**device, "memory_bandwidth_gb_per_s": 2000}})]
    assert point_labels(points) == ["sarathi chunk=512 device.memory_bandwidth_gb_per_s=3350",
                                    "sarathi chunk=512 device.memory_bandwidth_gb_per_s=2000"]


def test_every_point_at_the_search_bound_is_warned_about():
    base = SweepConfig.model_validate({"trace": {"kind": "poisson", "qps": 1},
                                       "search": {"qps": [1, 32], "num_requests": 2000, "seeds": 2}})
    common = {"model": "llama-3-8b", "device": "h100-sxm", "scheduler": "sarathi", "vllm_flags": "--x",
              "capacity_ci_low": math.nan, "capacity_ci_high": math.nan, "vllm_command": "vllm serve m"}
    points = pd.DataFrame([{"point_id": 0, "label": "A", "capacity_qps": 32.0, "capacity_at_bound": True, **common},
                           {"point_id": 1, "label": "B", "capacity_qps": 31.9, "capacity_at_bound": True, **common},
                           {"point_id": 2, "label": "C", "capacity_qps": 8.0, "capacity_at_bound": False, **common}])
    assert capacity_summary(points, base, {"tbt_p99_s": 0.1}).warnings == [
        "A passed at the top of search.qps (32 QPS): its capacity is only a lower bound; raise search.qps.",
        "B passed at the top of search.qps (32 QPS): its capacity is only a lower bound; raise search.qps."]


def test_a_report_where_no_point_drew_a_line_has_no_empty_legend(tmp_path):
    """Every request rejected (shared case all_unservable): the TBT CDF has nothing to label, so
    no legend and no matplotlib 'No artists with labels' warning."""
    import warnings

    base = SweepConfig.model_validate({"trace": {"kind": "poisson", "qps": 1}})
    points = rows_frame([_point(0, "A", completed=0, tbt_s_p99=math.nan, ttft_s_p90=math.nan)])
    requests = pd.DataFrame({"point_id": [0, 0], "token_times_s": [None, None]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        write_report(points, requests, base, tmp_path)
    assert (tmp_path / "plots" / "tbt_cdf.png").is_file() and (tmp_path / "report.md").is_file()


def test_points_on_different_gpu_counts_are_compared_per_gpu():
    """Issue 29: a 2-replica point at 9.56 req/s was picked over one GPU at 8.96 that met every SLO.
    Per GPU: 4.78 against 8.96 req/s, so the one GPU wins, on throughput per GPU."""
    points = pd.DataFrame([_point(0, "2 replicas", throughput_rps=9.56, goodput_rps=float("nan"), num_gpus=2),
                           _point(1, "1 GPU", throughput_rps=8.96, goodput_rps=float("nan"), num_gpus=1)])
    choice = recommendation(points, SLO)
    assert (choice.best["label"], choice.decided_by, choice.per_gpu) == ("1 GPU", "throughput", True)
    lines = recommendation_lines(choice, points, SLO)
    assert "it lost on throughput per GPU (4.78 against 8.96 req/s per GPU)" in lines[2]
    assert lines[1].endswith("(goodput and throughput compared per GPU: the points differ in GPUs).")


def test_a_load_axis_gets_one_pick_per_load_not_the_highest_load():
    points = pd.DataFrame([_point(0, "A qps=4", trace_qps=4.0, throughput_rps=4.0, goodput_rps=4.0),
                           _point(1, "B qps=4", trace_qps=4.0, throughput_rps=4.0, goodput_rps=4.0, tbt_s_p99=0.09),
                           _point(2, "A qps=8", trace_qps=8.0, throughput_rps=8.0, goodput_rps=8.0, tbt_s_p99=0.2),
                           _point(3, "B qps=8", trace_qps=8.0, throughput_rps=8.0, goodput_rps=8.0)])
    lines = recommendation_lines(recommendation(points, SLO), points, SLO)
    assert lines[0].startswith("The points differ in offered load (trace.qps), which is a load, not a configuration")
    assert lines[1].startswith("At 4 QPS: **A qps=4 (point 0")  # margin 50 % against B's 10 %
    assert lines[2].startswith("At 8 QPS: **B qps=8 (point 3")  # A misses TBT at 8 QPS
    assert lines[3].startswith("Rule: among the points meeting every SLO")
