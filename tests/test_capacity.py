"""Capacity search, confidence intervals, default SLOs and vLLM flags."""
from __future__ import annotations

import math

import pytest

from experiments.planning.capacity import confidence_interval, default_slo, find_capacity
from experiments.config import SweepConfig
from experiments.planning.vllm_flags import vllm_serve_flags


@pytest.mark.parametrize("true_capacity", [0.7, 7.3, 41.0])
def test_bisection_finds_a_known_capacity_within_its_precision(true_capacity):
    result = find_capacity(lambda qps: qps <= true_capacity, 0.5, 64.0, precision=0.025)
    assert result.capacity_qps <= true_capacity
    assert result.capacity_qps >= true_capacity * (1 - 0.025)
    assert len(result.trials) <= 20


def test_capacity_is_nan_when_even_the_lowest_load_fails_and_capped_at_the_top():
    assert math.isnan(find_capacity(lambda q: False, 0.5, 64.0).capacity_qps)
    assert find_capacity(lambda q: True, 0.5, 64.0, max_qps=64.0).capacity_qps == 64.0


def test_the_lowest_rate_runs_only_when_no_higher_rate_passed():
    """True capacity 7.3 in [0.5, 64], an overloaded trial serving 10 QPS: 64 fails, the guesses
    9.5 and 8.5 fail, 7 passes (implying 0.5, never run), then bisection in [7, 8.5]: 7.75 and
    7.375 fail, 7.1875 passes ((7.375 − 7.1875) / 7.375 = 2.54 % > 2.5 %), 7.281 passes (1.3 %).
    The rates and their order are those of the search that tried 0.5 first, whose slot still
    counts against max_trials: with 5 it stops at 7 as that search did after 0.5, 64, 9.5, 8.5, 7;
    with 4 nothing above passed, so 0.5 runs and is the capacity, as there."""
    served = lambda qps: 10.0  # noqa: E731
    result = find_capacity(lambda qps: qps <= 7.3, 0.5, 64.0, precision=0.025, served_qps=served)
    assert [q for q, _ in result.trials] == pytest.approx([64.0, 9.5, 8.5, 7.0, 7.75, 7.375, 7.1875, 7.28125])
    assert result.capacity_qps == pytest.approx(7.28125)
    five = find_capacity(lambda qps: qps <= 7.3, 0.5, 64.0, precision=0.025, max_trials=5, served_qps=served)
    assert [q for q, _ in five.trials] == pytest.approx([64.0, 9.5, 8.5, 7.0]) and five.capacity_qps == 7.0
    four = find_capacity(lambda qps: qps <= 7.3, 0.5, 64.0, precision=0.025, max_trials=4, served_qps=served)
    assert [q for q, _ in four.trials] == pytest.approx([64.0, 9.5, 8.5, 0.5]) and four.capacity_qps == 0.5
    below = find_capacity(lambda qps: qps <= 0.3, 0.5, 64.0, served_qps=served)
    # 64 fails, the guesses 9.5, 8.5 and 7 fail, then 0.5 is run and fails: no capacity
    assert [q for q, _ in below.trials] == pytest.approx([64.0, 9.5, 8.5, 7.0, 0.5]) and math.isnan(below.capacity_qps)
    plain = find_capacity(lambda qps: qps <= 7.3, 0.5, 64.0)  # no saturation guesses: 0.5 runs once 64 fails
    assert [q for q, _ in plain.trials][:3] == pytest.approx([64.0, 0.5, 5.657], abs=1e-3)


def test_confidence_interval():
    mean, low, high = confidence_interval([10.0, 11.0, 12.0])
    # t(0.975, 2) = 4.303; sd = 1; half width = 4.303 / sqrt(3) = 2.484
    assert mean == 11.0 and low == pytest.approx(11 - 2.484, abs=1e-3) and high == pytest.approx(13.484, abs=1e-3)
    assert math.isnan(confidence_interval([5.0])[1])


def test_default_slos_follow_sarathi_serve_by_model_size():
    assert default_slo(8.03e9) == {"tbt_p99_s": 0.1, "scheduling_delay_p50_s": 2.0}
    assert default_slo(34e9)["tbt_p99_s"] == 0.2
    assert default_slo(69e9)["tbt_p99_s"] == 1.0


def test_vllm_flags_for_a_point():
    point = SweepConfig.model_validate({
        "trace": {"kind": "poisson", "qps": 1},
        "engine": {"scheduler": "sarathi", "chunk_size": 512, "max_num_seqs": 256 // 2, "split_n": 4,
                   "tensor_parallel_size": 2}})
    assert vllm_serve_flags(point) == (
        "--enable-chunked-prefill --max-num-batched-tokens 512 --max-num-seqs 128 --block-size 16 "
        "--gpu-memory-utilization 0.9 --tensor-parallel-size 2 "
        "--speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 4}'")
    vllm = SweepConfig.model_validate({"trace": {"kind": "poisson", "qps": 1}, "engine": {"scheduler": "vllm"}})
    assert vllm_serve_flags(vllm).startswith("--no-enable-chunked-prefill --max-num-seqs 128")


def test_capacity_sweep_end_to_end(tmp_path):
    from typer.testing import CliRunner

    import pandas as pd

    from experiments.cli.main import app
    config = tmp_path / "cap.yaml"
    config.write_text(
        "name: cap\n"
        "trace: {kind: poisson, qps: 1, prompt_tokens: [50, 400], output_tokens: [10, 80]}\n"
        "engine: {scheduler: sarathi, chunk_size: 256, max_num_seqs: 64}\n"
        "search: {qps: [1, 64], num_requests: 60, seeds: 2, precision: 0.1}\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["sweep", str(config), "--out", str(out), "--jobs", "2"])
    assert result.exit_code == 0, result.output
    points = pd.read_csv(out / "points.csv")
    trials = pd.read_csv(out / "trials.csv")
    capacity = points.loc[0, "capacity_qps"]
    assert 1 <= capacity <= 64
    # The capacity is the highest passing trial of each seed, and every trial above it failed.
    for seed, group in trials.groupby("seed"):
        best = group.loc[group["passed"], "trial_qps"].max()
        assert (group.loc[group["trial_qps"] > best, "passed"] == False).all()  # noqa: E712
    assert capacity == pytest.approx(trials[trials["passed"]].groupby("seed")["trial_qps"].max().mean())
    report = (out / "report.md").read_text()
    assert "Sarathi-Serve strict defaults" in report and "tbt_p99_s ≤ 0.1" in report
    assert "--enable-chunked-prefill --max-num-batched-tokens 256" in report
    assert "under `vllm_v1`" in report


def test_fleet_sizing_arithmetic():
    from experiments.planning.fleet import fleet_row
    point = SweepConfig.model_validate({
        "trace": {"kind": "poisson", "qps": 1}, "engine": {"tensor_parallel_size": 2},
        "search": {}, "fleet": {"target_qps": 40, "gpu_hour_usd": 3.0}})
    trials = [{"passed": True, "throughput_rps": 10.0, "output_throughput_tps": 2000.0}]
    row = fleet_row(point, {"capacity_qps": 14.0, "capacity_ci_low": 12.5}, trials)
    # From the interval's low end: ceil(40 × 1.1 / 12.5) = ceil(3.52) = 4 copies × TP 2 = 8 GPUs
    # (the mean, 14, would give ceil(3.14) = 4 as well; 40 / 14 without headroom 3);
    # $24/h over 40 req/s × 200 tokens × 3600 s.
    assert row["fleet_sizing_qps"] == 12.5 and row["fleet_replicas"] == 4 and row["fleet_gpus"] == 8
    assert row["usd_per_million_output_tokens"] == pytest.approx(24 / (40 * 200 * 3600) * 1e6)
    with pytest.raises(Exception, match="fleet: sizing needs a capacity search"):
        SweepConfig.model_validate({"trace": {"kind": "poisson", "qps": 1}, "fleet": {"target_qps": 4}})


def test_fleet_sizing_of_the_issue_case_never_takes_the_mean():
    """Issue 29: capacity 26.9 QPS (interval 25.1–28.7) sized 50 QPS at ceil(50 / 26.9) = 2 GPUs.
    From the low end with 10 % headroom: ceil(55 / 25.1) = 3; with headroom 0.3: ceil(65 / 25.1) = 3;
    an interval down to 0 sizes nothing and says why."""
    from experiments.planning.fleet import fleet_row, fleet_rule_text
    point = SweepConfig.model_validate({
        "trace": {"kind": "poisson", "qps": 1}, "search": {},
        "fleet": {"target_qps": 50, "gpu_hour_usd": {"h100-sxm": 2.5}}})
    row = fleet_row(point, {"capacity_qps": 26.9, "capacity_ci_low": 25.1}, [])
    assert row["fleet_gpus"] == 3 and row["fleet_usd_per_hour"] == pytest.approx(7.5)
    tight = point.model_copy(update={"fleet": point.fleet.model_copy(update={"headroom": 0.3})})
    assert fleet_row(tight, {"capacity_qps": 26.9, "capacity_ci_low": 25.1}, [])["fleet_gpus"] == 3
    wide = fleet_row(point, {"capacity_qps": 20.0, "capacity_ci_low": 0.0}, [])
    assert "fleet_gpus" not in wide and "lower bound is 0" in wide["fleet_problem"]
    assert fleet_row(point, {"capacity_qps": 26.9}, [])["fleet_sizing_qps"] == 26.9  # one seed: its capacity
    assert fleet_rule_text(50, 0.1) == ("copies = ⌈50 QPS × (1 + 0.1 headroom) / the capacity's 95 % lower bound⌉ "
                                        "(one seed: its capacity), GPUs = copies × the point's GPUs")


def test_per_device_prices_must_name_every_device():
    with pytest.raises(Exception, match="fleet.gpu_hour_usd has no price for device 'h100-sxm'"):
        SweepConfig.model_validate({"trace": {"kind": "poisson", "qps": 1}, "search": {},
                                    "fleet": {"target_qps": 50, "gpu_hour_usd": {"h200": 3.7, "a100-80gb": 1.8}}})


def test_pareto_frontier_of_a_hand_made_table():
    import pandas as pd

    from experiments.planning.search import pareto_frontier
    table = pd.DataFrame({"label": list("abcde"),
                          "throughput_rps": [10.0, 12.0, 12.0, 8.0, 15.0],
                          "tbt_s_p99": [0.05, 0.04, 0.06, 0.03, 0.09]})
    # a is dominated by b (more throughput, lower TBT); c by b; d, b, e trade off.
    assert pareto_frontier(table)["label"].tolist() == ["d", "b", "e"]


def test_policy_table_merges_bands_and_says_when_none_meets():
    import pandas as pd

    from experiments.planning.search import policy_table
    loads = pd.DataFrame({
        "trial_qps": [2, 2, 4, 4, 8, 8, 16, 16],
        "label": ["x", "y"] * 4,
        "slo_met": [True, True, True, True, False, True, False, False],
        "goodput_rps": [2.0, 1.9, 3.5, 3.9, 1.0, 7.0, 0.5, 0.4],
        "throughput_rps": [2, 2, 4, 4, 8, 8, 12, 12]})
    table = policy_table(loads)
    assert table.to_dict("records") == [
        {"QPS from": 2, "QPS to": 2, "best point": "x"},
        {"QPS from": 4, "QPS to": 8, "best point": "y"},
        {"QPS from": 16, "QPS to": 16, "best point": "none meets the SLOs"}]


def test_burstiness_variants_get_labels_and_a_headroom_plot(tmp_path):
    from typer.testing import CliRunner

    from experiments.cli.main import app
    config = tmp_path / "b.yaml"
    config.write_text(
        "trace: {kind: synthetic, qps: 2, arrival: gamma, burstiness: 1.0, prompt_tokens: [50, 300], output_tokens: 20}\n"
        "engine: {scheduler: sarathi, chunk_size: 256, max_num_seqs: 64}\n"
        "variants:\n  - {trace.burstiness: [0.25, 4.0]}\n"
        "search: {qps: [1, 32], num_requests: 40, seeds: 1, precision: 0.2}\n")
    result = CliRunner().invoke(app, ["sweep", str(config), "--out", str(tmp_path / "o"), "--jobs", "1"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "o" / "plots" / "capacity_vs_burstiness.png").exists()
    report = (tmp_path / "o" / "report.md").read_text()
    assert "gamma=0.25" in report and "gamma=4" in report and "Caution: trials of 40 requests" in report


def test_capacity_search_where_every_point_fails_still_reports(tmp_path):
    from typer.testing import CliRunner

    from experiments.cli.main import app
    config = tmp_path / "c.yaml"
    config.write_text("model: llama-2-70b\ndevice: h100-sxm\ntrace: {kind: poisson, qps: 1}\n"
                      "search: {qps: [1, 4], num_requests: 20, seeds: 1}\n")
    result = CliRunner().invoke(app, ["sweep", str(config), "--out", str(tmp_path / "o"), "--jobs", "1"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    report = (tmp_path / "o" / "report.md").read_text()
    assert "does not fit" in report and "No point meets the SLOs" in report


def test_error_text_in_brackets_is_printed_as_written(tmp_path):
    from typer.testing import CliRunner

    from experiments.cli.main import app
    config = tmp_path / "c.yaml"
    config.write_text("trace: {kind: poisson, qps: 1}\nsearch: {qps: [5, 1]}\n")
    result = CliRunner().invoke(app, ["sweep", str(config)])
    assert result.exit_code == 2 and "[low, high]" in result.output and "[5.0, 1.0]" in result.output


@pytest.mark.parametrize("true_capacity,served", [(20.3, 21.0), (20.3, 30.0), (5.0, 21.0), (20.3, None)])
def test_saturation_guess_narrows_the_bracket_without_changing_the_answer(true_capacity, served):
    # An overloaded trial serves about μ requests/s; trying 0.95 μ and 1.1 μ first brackets the
    # capacity quickly when μ is close to it, and costs at most two trials when it is not
    # (a TBT-bound point, capacity far below μ). The answer keeps the bisection's guarantee.
    plain = find_capacity(lambda q: q <= true_capacity, 2.0, 40.0, precision=0.025, max_qps=40.0)
    guided = find_capacity(lambda q: q <= true_capacity, 2.0, 40.0, precision=0.025, max_qps=40.0,
                           served_qps=lambda q: served)
    for result in (plain, guided):
        assert true_capacity * (1 - 0.025) <= result.capacity_qps <= true_capacity
    if served == 21.0 and true_capacity == 20.3:
        # the lowest rate, 2 QPS, is implied by 19.95 passing: not run
        assert [q for q, _ in guided.trials[:3]] == [40.0, pytest.approx(19.95), pytest.approx(23.1)]
        assert len(guided.trials) <= len(plain.trials) - 3
    assert len(guided.trials) <= len(plain.trials) + 2


def test_a_seed_below_the_searched_range_counts_zero_in_the_capacity_row():
    """Seeds 8, 10 and one whose lowest rate failed (NaN): mean (8 + 10 + 0) / 3 = 6, the
    interval over [8, 10, 0] (t(0.975, 2) = 4.303, s = 5.292: 6 ± 13.15, low clipped at 0);
    dropping the failed seed reported 9 as if all three had met the SLOs."""
    import math

    from experiments.planning.search import capacity_row

    row = capacity_row("p", 0, [8.0, 10.0, math.nan], max_qps=64.0)
    assert row["capacity_qps"] == 6.0 and row["seeds_below_lowest_rate"] == 1
    assert row["capacity_by_seed"] == "8, 10, below"
    assert row["capacity_ci_low"] == 0.0 and abs(row["capacity_ci_high"] - (6 + 4.3027 * 5.2915 / 3 ** 0.5)) < 1e-3
    every = capacity_row("p", 0, [math.nan, math.nan], max_qps=64.0)
    assert math.isnan(every["capacity_qps"]) and every["seeds_below_lowest_rate"] == 2


def test_the_capacity_report_warns_of_seeds_below_the_searched_range():
    """A point with one of three seeds below the range: the report says it counts 0 in the mean."""
    import math

    import pandas as pd

    from experiments.config import SweepConfig
    from experiments.planning.capacity_report import capacity_summary
    from experiments.planning.search import capacity_row

    base = SweepConfig.model_validate({"trace": {"kind": "poisson", "qps": 1},
                                       "search": {"qps": [1, 32], "num_requests": 100, "seeds": 3}})
    row = {**capacity_row("p0", 0, [8.0, 10.0, math.nan], 32.0), "model": "llama-3-8b", "device": "h100-sxm",
           "scheduler": "sarathi", "vllm_flags": "--x", "vllm_command": "vllm serve m"}
    summary = capacity_summary(pd.DataFrame([row]), base, {"tbt_p99_s": 0.1})
    assert "Some seeds met the SLOs at no load searched (not even 1 QPS) and count 0 in the mean: p0 (1 of 3); " \
           "lower search.qps to measure them." in summary.warnings
    assert summary.best_id == 0


def test_the_lowest_rates_verdict_tells_an_unreachable_slo_from_a_range_set_too_high():
    """Seed 1 never passed (seed 0 did at 2 QPS). Its deciding trial at the lowest rate, 1 QPS, is
    the last of its runs there: steady but TBT P99 0.012 s over 0.001 s (service, not queueing),
    or overloaded (a rising backlog: the range starts too high)."""
    from experiments.config import SweepConfig
    from experiments.planning.search import lowest_rate_verdict

    point = SweepConfig.model_validate({"trace": {"kind": "poisson", "qps": 1}, "slo": {"tbt_p99_s": 0.001,
                                                                                       "ttft_p99_s": 2.0},
                                        "search": {"qps": [1, 8], "seeds": 2}})
    seed0 = [{"seed": 0, "trial_qps": 1.0, "passed": True}, {"seed": 0, "trial_qps": 2.0, "passed": True}]
    undecided = {"seed": 1, "trial_qps": 1.0, "passed": False, "overloaded": False, "tbt_s_p99": 0.0005,
                 "ttft_s_p99": 0.2}
    steady_miss = {**undecided, "tbt_s_p99": 0.012, "ttft_s_p99": None}  # the run at the cap decides
    assert lowest_rate_verdict(point, seed0 + [undecided, steady_miss]) == (
        "at 1 QPS (seed 1), in steady state (no growing backlog): tbt_p99_s 0.012 > 0.001, ttft_p99_s nan > 2; a "
        "lower load shortens queues, not service times, so no load may meet these SLOs: relax them or serve faster "
        "(lower search.qps to check)")
    overloaded = {**undecided, "overloaded": True, "not_steady": "completions 80.0% of arrivals in the window (< 95%)"}
    assert lowest_rate_verdict(point, seed0 + [overloaded]) == (
        "at 1 QPS (seed 1) the load already overloads it (completions 80.0% of arrivals in the window (< 95%)): lower "
        "search.qps to find its capacity")
    assert lowest_rate_verdict(point, seed0) is None


def test_a_search_with_an_slo_no_load_meets_ends_in_a_verdict_not_a_capacity():
    """End to end (one 100-request trial): TBT P99 ≤ 1 ms, which a decode step of llama-3-8b on an
    H100 never meets. Capacity NaN (never 0), the recommendation and fleet lines say nothing is
    sized, and the warning gives the lowest rate's verdict (the overloaded one: the test above)."""
    import math

    from experiments.config import SweepConfig
    from experiments.planning.capacity_report import capacity_summary
    from experiments.planning.sweep import run_capacity_sweep

    raw = {"name": "bad", "model": "llama-3-8b", "device": "h100-sxm",
           "trace": {"kind": "poisson", "qps": 2, "num_requests": 100, "seed": 0},
           "engine": {"scheduler": "sarathi", "chunk_size": 512}, "slo": {"tbt_p99_s": 0.001},
           "search": {"qps": [1, 8], "num_requests": 100, "seeds": 1}, "fleet": {"target_qps": 10}}
    table, trials, _ = run_capacity_sweep([raw], jobs=1)
    row = table.iloc[0]
    # 8 QPS and the saturation guesses below it fail, then the deferred lowest rate decides
    assert math.isnan(row["capacity_qps"]) and row["capacity_by_seed"] == "below"
    assert list(trials["trial_qps"])[0] == 8.0 and list(trials["trial_qps"])[-1] == 1.0 and not trials["passed"].any()
    tbt = trials["tbt_s_p99"].iloc[-1]
    assert tbt > 0.001 and row["lowest_rate_verdict"].startswith(
        f"at 1 QPS (seed 0), in steady state (no growing backlog): tbt_p99_s {tbt:.3g} > 0.001; ")
    summary = capacity_summary(table, SweepConfig.model_validate(raw), {"tbt_p99_s": 0.001})
    assert summary.recommendation == ["No point meets the SLOs even at the lowest load searched.",
                                      "Fleet for 10 QPS: not sized (no point has a capacity)."]
    assert f"Meets the SLOs at no load searched (not even 1 QPS): sarathi chunk=512 ({row['lowest_rate_verdict']})." \
        in summary.warnings
