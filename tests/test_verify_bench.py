"""Benchmark tools' result files (tests/data/bench, written from each tool's schema) read into a
workload and measurements, and `verify --against-bench` replaying them."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from experiments.cli.main import app
from experiments.verification.bench_runs import read_bench_run
from traces.concurrency import ScheduledConcurrency

DATA = Path(__file__).parent / "data"
BENCH = DATA / "bench"
CONFIG = DATA / "engine" / "tiny_engine.yaml"
IP = BENCH / "inference_perf"
runner = CliRunner()


def _measured(stage):
    return {m.key: m.value for m in stage.measured}


def test_inference_perf_stages_replay_the_config_load_and_pool():
    run = read_bench_run(IP / "results", IP / "config.yaml")
    assert run.tool == "inference-perf" and [s.name for s in run.stages] == ["stage 0", "stage 1"]
    first = run.stages[0]
    assert first.plan.num_requests == 8 and first.plan.arrival == "uniform" and first.plan.duration_s == 4
    requests = first.plan.build()
    assert len(requests) == 8 and all(0 <= r.arrival_s < 4 for r in requests)
    assert {r.prompt_tokens for r in requests} == {64} and {r.output_tokens for r in requests} == {8}
    assert len({r.prefix_hash_ids for r in requests}) == 6  # 2 groups x 3 prompts, cycled
    measured = _measured(first)
    assert measured["ttft_s_p50"] == pytest.approx(0.020) and measured["ntpot_s_p50"] == pytest.approx(0.050 / 8)
    assert measured["chunk_gap_s_p90"] == pytest.approx(0.0048)  # inter_token_latency: per chunk
    assert measured["throughput_rps"] == pytest.approx(8 / 3.9)


def test_guidellm_benchmarks_are_stages_with_their_strategies():
    run = read_bench_run(BENCH / "guidellm" / "benchmarks.json")
    concurrent, constant = run.stages
    workload = concurrent.plan.build()
    assert isinstance(workload, ScheduledConcurrency) and workload.num_clients == 2
    np.testing.assert_allclose([r.arrival_s for r in workload.initial_requests()], [0.0, 0.5])  # rampup 1 s / 2
    assert constant.plan.rate == 4.0 and len(constant.plan.build()) == 12
    measured = _measured(concurrent)
    assert measured["ttft_s_p50"] == pytest.approx(0.030)       # time_to_first_token_ms / 1000
    assert measured["tpot_s_p50"] == pytest.approx(0.005)       # inter_token_latency_ms: per token
    assert measured["e2e_s_p50"] == pytest.approx(0.105)        # request_latency: seconds


@pytest.mark.parametrize("path, tool", [(BENCH / "aiperf" / "profile_export_aiperf.json", "aiperf"),
                                        (BENCH / "genai_perf" / "profile_export_genai_perf.json", "genai-perf")])
def test_aiperf_and_genai_perf_exports(path, tool):
    run = read_bench_run(path)
    assert run.tool == tool
    plan = run.stages[0].plan
    assert plan.num_requests == 8 and plan.max_concurrency == 2 and plan.rate is None
    measured = _measured(run.stages[0])
    assert measured["ttft_s_p50"] == pytest.approx(0.021) and measured["tpot_s_mean"] == pytest.approx(0.0045)
    assert measured["throughput_rps"] == 12.5
    assert plan.warmup_before == (2 if tool == "aiperf" else 0)


def test_vllm_bench_result_replays_each_requests_lengths():
    run = read_bench_run(DATA / "verify" / "vllm_bench" / "result.json")
    requests = run.stages[0].plan.build()
    assert [r.prompt_tokens for r in requests] == [16, 32, 48] and [r.arrival_s for r in requests] == [0, 0, 0]
    measured = _measured(run.stages[0])
    assert measured["tpot_s_p50"] == pytest.approx(0.02) and measured["chunk_gap_s_p50"] == pytest.approx(0.015)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["metadata"].update(version=3), r"metadata.version 3 is not a GuideLLM report version"),
    (lambda d: d["benchmarks"][1]["metrics"].pop("time_to_first_token_ms"),
     r"no key time_to_first_token_ms"),
    (lambda d: d["benchmarks"][0]["config"]["strategy"].update(type_="sweep"), r"benchmarks\[0\].config.strategy.type_"),
    (lambda d: d["benchmarks"][0]["metrics"]["request_latency"]["successful"].update(median="fast"),
     r"benchmarks\[0\].metrics.request_latency.successful.median: expected a finite number"),
])
def test_bad_guidellm_reports_name_the_file_and_key(tmp_path, edit, message):
    data = json.loads((BENCH / "guidellm" / "benchmarks.json").read_text())
    edit(data)
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message):
        read_bench_run(path)


def test_bad_inputs_of_the_other_tools(tmp_path):
    with pytest.raises(ValueError, match="give the run's config YAML with --bench-config"):
        read_bench_run(IP / "results")
    stage = json.loads((IP / "results" / "stage_1_lifecycle_metrics.json").read_text())
    (tmp_path / "stage_5_lifecycle_metrics.json").write_text(json.dumps(stage))
    del stage["successes"]["latency"]["time_to_first_token"]["p99"]
    with pytest.raises(ValueError, match=r"stage 5, but .*config.yaml load.stages has 2 stage"):
        read_bench_run(tmp_path / "stage_5_lifecycle_metrics.json", IP / "config.yaml")
    path = tmp_path / "stage_1_lifecycle_metrics.json"
    path.write_text(json.dumps(stage))
    with pytest.raises(ValueError, match=r"stage_1_lifecycle_metrics.json: no key successes.latency.time_to_first_token.p99"):
        read_bench_run(path, IP / "config.yaml")
    export = json.loads((BENCH / "aiperf" / "profile_export_aiperf.json").read_text())
    export["time_to_first_token"]["unit"] = "fortnights"
    (tmp_path / "a.json").write_text(json.dumps(export))
    with pytest.raises(ValueError, match=r"a.json: time_to_first_token.unit 'fortnights'"):
        read_bench_run(tmp_path / "a.json")
    (tmp_path / "b.json").write_text(json.dumps({"results": []}))
    with pytest.raises(ValueError, match=r"b.json: not a result of vllm-bench, inference-perf, guidellm, aiperf"):
        read_bench_run(tmp_path / "b.json")


@pytest.mark.parametrize("args", [
    ["--against-bench", str(IP / "results"), "--bench-config", str(IP / "config.yaml"), "--set", "engine.block_size=16"],
    ["--against-bench", str(BENCH / "guidellm" / "benchmarks.json")],
    ["--against-bench", str(BENCH / "aiperf" / "profile_export_aiperf.json")],
    ["--against-bench", str(BENCH / "genai_perf" / "profile_export_genai_perf.json")],
    ["--against-bench", str(DATA / "verify" / "vllm_bench" / "result.json")],
])
def test_each_tools_example_round_trips_into_a_verify_report(tmp_path, args):
    result = runner.invoke(app, ["verify", str(CONFIG), *args, "--cost-model", "roofline", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "fidelity.json").read_text())
    rows = report["e2e"]
    assert rows and all(np.isfinite(r["predicted"]) for r in rows if r["quantity"] != "chunk_gap_s_mean")
    assert any(key.endswith("ttft_s_p50") for key in report["headline_abs_error_pct"])


def test_a_pool_on_a_block_size_it_cannot_name_is_refused(tmp_path):
    result = runner.invoke(app, ["verify", str(CONFIG), "--against-bench", str(IP / "results"), "--bench-config",
                                 str(IP / "config.yaml"), "--cost-model", "roofline", "--out", str(tmp_path)])
    assert result.exit_code != 0 and "engine.block_size 4 is not a multiple of 16" in result.output


def test_guidellm_warmup_requests_are_sent_and_left_out(tmp_path):
    data = json.loads((BENCH / "guidellm" / "benchmarks.json").read_text())
    data["benchmarks"][1]["config"]["warmup"] = {"percent": None, "value": 3, "mode": "prefer_requests"}
    data["benchmarks"][0]["config"]["warmup"] = {"percent": None, "value": 2.0, "mode": "duration"}
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"benchmarks\[0\].config.strategy: a warm-up of seconds on a concurrent"):
        read_bench_run(path)
    data["benchmarks"][0]["config"]["warmup"] = {"percent": None, "value": None}
    path.write_text(json.dumps(data))
    plan = read_bench_run(path).stages[1].plan
    assert plan.num_requests == 12 + 3 and plan.warmup_requests == 3
    np.testing.assert_array_equal(plan.measured_mask(np.arange(5), np.zeros(5)), [False] * 3 + [True] * 2)


def test_a_warm_up_phase_ends_before_the_measured_requests_start():
    from experiments.config import load_config
    from experiments.config.sweep import SweepConfig
    from experiments.point import build_cost_model
    from experiments.verification.bench_runs import LoadPlan
    from experiments.verification.bench_verify import simulate_stage

    point = SweepConfig.model_validate(load_config(CONFIG, ["cost_model=roofline"])[1][0])
    plan = LoadPlan(4, max_concurrency=2, prompt=16, output=4, warmup_before=3)
    warm = plan.warmup_plan()
    assert warm.num_requests == 3 and warm.warmup_before == 0
    workload = plan.build(0, (warm.requests(1), 0.75))
    sent = [r.arrival_s for r in workload.initial_requests()]
    assert sent == [0.0, 0.0]  # the warm-ups go first; the measured ones are scheduled from 0.75 s
    assert [r.arrival_s for r in workload._scheduled[3:]] == [0.75] * 4
    np.testing.assert_array_equal(plan.measured_mask(np.arange(7), np.zeros(7)), [False] * 3 + [True] * 4)
    summary = simulate_stage(point, plan, build_cost_model(point))
    assert summary["num_requests"] == 7 and np.isfinite(summary["ttft_s_p50"])


def test_vllm_bench_start_times_are_replayed_in_send_order(tmp_path):
    data = json.loads((DATA / "verify" / "vllm_bench" / "result.json").read_text())
    data.update(start_times=[100.5, 100.0, 101.25], output_lens=[4, 3, 2])
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    requests = read_bench_run(path).stages[0].plan.build()
    assert [(r.arrival_s, r.prompt_tokens) for r in requests] == [(0.0, 32), (0.5, 16), (1.25, 48)]
    data.update(start_times=[100.5, 100.0, "late"])
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"r.json: start_times\[2\]: expected a finite number"):
        read_bench_run(path)


def _sweep_run(tmp_path, sweep: str, drop_rate: bool = False):
    """The inference-perf fixture's two stage reports under a config whose load is a sweep."""
    results = tmp_path / "results"
    results.mkdir(parents=True)
    for f in (IP / "results").iterdir():
        data = json.loads(f.read_text())
        if drop_rate:
            del data["load_summary"]["requested_rate"]
        (results / f.name).write_text(json.dumps(data))
    config = (IP / "config.yaml").read_text().replace(
        "  stages:\n    - {rate: 2, duration: 4}\n    - {rate: 4, duration: 2}\n", sweep)
    (tmp_path / "config.yaml").write_text(config)
    return results, tmp_path / "config.yaml"


def test_inference_perf_sweep_stages_take_their_rates_from_the_reports(tmp_path):
    """A sweep's stages are generated at run time (inference_perf/loadgen/saturation.py): the rate of
    each is its report's requested_rate (2 and 4 req/s here), its duration load.sweep.stage_duration."""
    results, config = _sweep_run(tmp_path, "  sweep: {type: linear, num_stages: 2, stage_duration: 3}\n")
    run = read_bench_run(results, config)
    first, second = (s.plan for s in run.stages)
    assert (first.rate, first.duration_s, first.num_requests) == (2.0, 3.0, 6)   # int(2 x 3)
    assert (second.rate, second.duration_s, second.num_requests) == (4.0, 3.0, 12)
    assert any("sweep" in note for note in first.notes)
    results, config = _sweep_run(tmp_path / "d", "  sweep: {type: geometric}\n")  # default 180 s
    assert read_bench_run(results, config).stages[0].plan.num_requests == 360


@pytest.mark.parametrize("sweep, drop_rate, message", [
    ("  sweep: {type: linear, stage_duration: -1}\n", False, r"load.sweep.stage_duration: expected a finite number"),
    ("  sweep: {type: linear, stage_duration: 0}\n", False, r"load.sweep.stage_duration must be > 0"),
    ("  sweep: [1, 2]\n", False, r"load.sweep must be a mapping"),
    ("  sweep: {type: linear}\n", True, r"stage_0_lifecycle_metrics.json: no load_summary.requested_rate"),
    ("  type: concurrent\n  sweep: {type: linear}\n", False, r"load.sweep with load.type 'concurrent'"),
])
def test_inference_perf_sweep_bad_input_names_the_key(tmp_path, sweep, drop_rate, message):
    results, config = _sweep_run(tmp_path, sweep, drop_rate)
    with pytest.raises(ValueError, match=message):
        read_bench_run(results, config)


@pytest.mark.parametrize("old, new, message", [
    ("  shared_prefix:\n", "  shared_prefix: null\n  unused:\n", r"data.shared_prefix must be a mapping"),
    ("num_groups: 2", "num_groups: abc", r"config.yaml: data.shared_prefix.num_groups: expected a finite number"),
    ("system_prompt_len: 40", "system_prompt_len: {std_dev: 3}",
     r"config.yaml: data.shared_prefix.system_prompt_len.mean: expected a finite number >= 0, got None$"),
    ("question_len: 24", "question_len: '24'", r"config.yaml: data.shared_prefix.question_len: expected a token count"),
    ("question_len: 24", "question_len: .inf", r"config.yaml: data.shared_prefix.question_len: expected a token count"),
    ("question_len: 24", "question_len: 24.5", r"config.yaml: data.shared_prefix.question_len: expected a token count"),
])
def test_inference_perf_bad_shared_prefix_names_the_key(tmp_path, old, new, message):
    """A malformed data.shared_prefix is a ValueError naming the config file and key (it was a
    TypeError traceback, or int()'s message without file or key)."""
    results, config = _sweep_run(tmp_path, "  sweep: {type: linear, stage_duration: 3}\n")
    text = config.read_text()
    assert old in text
    config.write_text(text.replace(old, new))
    with pytest.raises(ValueError, match=message):
        read_bench_run(results, config)


def test_inference_perf_whole_float_lengths_read_as_token_counts(tmp_path):
    """inference-perf's pydantic config reads question_len: 24.0 as 24: the same pool as 24."""
    results, config = _sweep_run(tmp_path, "  sweep: {type: linear, stage_duration: 3}\n")
    config.write_text(config.read_text().replace("question_len: 24", "question_len: 24.0"))
    requests = read_bench_run(results, config).stages[0].plan.build()
    assert {r.prompt_tokens for r in requests} == {64}  # 40 + 24


def test_inference_perf_stage_that_sends_no_request_is_refused(tmp_path):
    """int(rate x duration) = int(2 x 0.4) = 0 requests against a report of 8 successes: a config of
    another run (the replay of no request compared nothing and passed any --fail-above)."""
    results, config = _sweep_run(tmp_path, "  sweep: {type: linear, stage_duration: 0.4}\n")
    with pytest.raises(ValueError, match=r"rate 2 x duration 0.4 s sends no request .* reports 8 successes"):
        read_bench_run(results, config)
