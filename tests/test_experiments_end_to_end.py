"""The main job end to end: configs -> simulation -> tables -> report, and shared/cases through files."""
from __future__ import annotations

import math

import pandas as pd
import pytest
from typer.testing import CliRunner

from experiments.cli.main import app
from experiments.config import FileTrace, SweepConfig, load_config
from experiments.point import run_point
from simulator.scheduler import SchedulerConfig, make_scheduler
from tests.conftest import shared_path
from traces import read_trace

CONFIGS = "experiments/configs"
runner = CliRunner()


def point_named(points, label):
    from experiments.config import describe_point
    for p in points:
        config = SweepConfig.model_validate(p)
        if describe_point(config) == label:
            return config
    raise AssertionError(f"no point {label}")


def test_quickstart_sarathi_512_beats_vllm_on_p99_tbt():
    # Expected direction (Sarathi-Serve): at a load where vllm's prefill-only steps stall decodes,
    # stall-free batching with chunk 512 has a lower P99 TBT.
    _, points = load_config(f"{CONFIGS}/quickstart.yaml")
    vllm = run_point(point_named(points, "vllm")).row
    sarathi = run_point(point_named(points, "sarathi chunk=512")).row
    assert vllm["completed"] == sarathi["completed"] == 2048
    assert sarathi["tbt_s_p99"] < vllm["tbt_s_p99"]
    assert vllm["tbt_s_p99"] > 0.1 >= sarathi["tbt_s_p99"]  # the quickstart rate makes vllm miss the SLO


SMALL = """
name: small
trace: {kind: poisson, qps: 4, num_requests: 60, prompt_tokens: [50, 600], output_tokens: [5, 60]}
engine: {scheduler: sarathi, chunk_size: 256}
variants:
  - {engine.scheduler: vllm}
  - {engine.scheduler: sarathi, engine.chunk_size: [128, 256]}
  - {model: llama-2-70b, device: a100-80gb}
slo: {tbt_p99_s: 0.1}
goodput: {ttft_s: 1.0}
"""


def test_sweep_writes_tables_and_report_and_keeps_a_failed_point(tmp_path):
    config = tmp_path / "small.yaml"
    config.write_text(SMALL)
    out = tmp_path / "run"
    result = runner.invoke(app, ["sweep", str(config), "--out", str(out), "--jobs", "2"])
    assert result.exit_code == 1, result.output  # a point failed: exit 1, the others are written
    points = pd.read_csv(out / "points.csv")
    # Labelled by what differs (the model and device of the last point), so no '#<id>' is needed.
    assert list(points["label"]) == ["llama-3-8b · h100-sxm · vllm", "llama-3-8b · h100-sxm · sarathi chunk=128",
                                     "llama-3-8b · h100-sxm · sarathi chunk=256",
                                     "llama-2-70b · a100-80gb · sarathi chunk=256"]
    # llama-2-70b does not fit one A100: that point is an error row, the others are complete.
    assert "does not fit" in points.loc[3, "error"]
    assert points.loc[:2, "completed"].tolist() == [60, 60, 60]
    assert points.loc[:2, "goodput_rps"].gt(0).all()
    requests = pd.read_parquet(out / "requests.parquet")
    assert len(requests) == 180 and set(requests["point_id"]) == {0, 1, 2}
    assert len(requests.loc[0, "token_times_s"]) == requests.loc[0, "generated_tokens"]
    steps = pd.read_parquet(out / "steps.parquet")
    assert (steps["duration_s"] > 0).all()
    html = (out / "report.html").read_text()
    # The configured SLO metric (P99 TBT) with its limit, and the TBT CDF (issue 29: no fixed TTFT P90 bar
    # when no SLO names it).
    assert html.count("data:image/png;base64,") == 2 and "failed" in html
    assert (out / "plots" / "tbt_p99.png").stat().st_size > 1000
    assert "does not fit" in (out / "report.md").read_text()


def test_same_seed_same_results(tmp_path):
    config = tmp_path / "small.yaml"
    config.write_text(SMALL)
    _, points = load_config(config)
    a = run_point(SweepConfig.model_validate(points[1]))
    b = run_point(SweepConfig.model_validate(points[1]))
    pd.testing.assert_frame_equal(a.requests, b.requests)
    assert a.row.keys() == b.row.keys()
    assert all(a.row[k] == b.row[k] or (isinstance(a.row[k], float) and math.isnan(a.row[k])) for k in a.row)


def test_bad_config_exits_2_with_a_message(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("trace: {kind: poisson, qps: 2}\nengine: {chunk_sise: 1}\n")
    result = runner.invoke(app, ["sweep", str(config), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "engine.chunk_sise" in result.output and "Traceback" not in result.output


def test_azure_conv_config_on_the_real_file(tmp_path):
    path = shared_path("traces", "azure_public_dataset", "AzureLLMInferenceTrace_conv.csv")
    out = tmp_path / "az"
    result = runner.invoke(app, ["simulate", f"{CONFIGS}/azure_conv.yaml", "--point", "2", "--out", str(out),
                                 "--set", f"trace.path={path}", "--set", "trace.max_requests=300"])
    assert result.exit_code == 0, result.output
    row = pd.read_csv(out / "points.csv").iloc[0]
    assert row["label"] == "sarathi chunk=512" and row["completed"] == 300
    assert row["offered_qps"] == pytest.approx(16.0)


def test_missing_trace_path_is_caught_before_any_point_runs(tmp_path):
    result = runner.invoke(app, ["simulate", f"{CONFIGS}/azure_conv.yaml", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and not (tmp_path / "o").exists()
    assert "azure_conv.yaml: trace.path: not set: give it in the config or with --set" in " ".join(result.output.split())


# ----- ../shared/cases through the file path ------------------------------------------------
def case_point(case, **engine):
    path = shared_path("cases", case, "trace.csv")
    engine.setdefault("scheduler", "sarathi")
    return SweepConfig(trace=FileTrace(kind="file", path=str(path)), engine=engine)


@pytest.mark.parametrize("case,engine,expected", [
    ("kv_pool_too_small", dict(num_gpu_blocks=50, chunk_size=512),
     {"completed": 1, "rejected_kv_capacity": 1}),
    ("prompt_fits_but_total_does_not", dict(num_gpu_blocks=8, chunk_size=64, max_num_seqs=64),
     {"completed": 0, "rejected_kv_capacity": 1, "num_preemptions": 0}),
    ("preemption_livelock", dict(num_gpu_blocks=40, chunk_size=512, max_num_seqs=8),
     {"completed": 8}),
    ("prompt_over_budget_no_chunking", dict(scheduler="vllm", max_num_batched_tokens=2560),
     {"completed": 1, "rejected_budget": 1}),
    ("prompt_over_budget_no_chunking", dict(chunk_size=512), {"completed": 2}),
    ("all_unservable", dict(), {"completed": 0, "rejected_too_long": 2, "throughput_rps": 0}),
    ("empty_trace", dict(), {"num_requests": 0, "completed": 0}),
    ("chunk_not_block_multiple", dict(chunk_size=100, max_num_seqs=64), {"completed": 1}),
    ("zero_and_one_output", dict(), {"completed": 2, "trace_rows_rejected": 1}),
    ("zero_prompt", dict(), {"completed": 1, "trace_rows_rejected": 2}),
])
def test_shared_cases_run_to_completion(case, engine, expected):
    row = run_point(case_point(case, **engine)).row
    for key, value in expected.items():
        assert row[key] == value, key


def test_zero_and_one_output_tpot_over_the_16_token_request_only():
    result = run_point(case_point("zero_and_one_output"))
    assert result.row["tpot_s_mean"] == pytest.approx(result.requests.loc[0, "tpot_s"])
    assert math.isnan(result.requests.loc[1, "tpot_s"])  # 1-token output: no TPOT
    assert result.requests["generated_tokens"].tolist() == [16, 1]


def test_all_unservable_percentiles_present_and_nan():
    row = run_point(case_point("all_unservable")).row
    assert math.isnan(row["ttft_s_p99"]) and math.isnan(row["e2e_s_p50"])


def test_mooncake_conversation_too_long_count():
    loaded = read_trace(shared_path("traces", "mooncake", "conversation_trace.jsonl"))
    assert len(loaded.requests) == 12_031
    scheduler = make_scheduler("sarathi", SchedulerConfig(num_gpu_blocks=30_000, max_model_len=8192, chunk_size=512))
    reasons = [scheduler.add_request(r) for r in loaded.requests]
    assert sum(1 for r in reasons if r is not None and r.finish_reason == "rejected_too_long") == 5_570


# ----- found by a new-user pass -------------------------------------------------------------
def write_trace_config(tmp_path, rows: str, extra: str = ""):
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n" + rows)
    config = tmp_path / "c.yaml"
    config.write_text("trace: {kind: file, path: t.csv}\n" + extra)
    return config


def test_a_trace_whose_rows_are_all_bad_is_an_error_not_an_empty_success(tmp_path):
    config = write_trace_config(tmp_path, "x,y,z\n0,0,5\n")
    result = runner.invoke(app, ["simulate", str(config), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert "every row was rejected" in result.output


def test_skipped_rows_are_reported_with_row_numbers(tmp_path):
    config = write_trace_config(tmp_path, "0,10,2\n0,0,2\n0.5,12,3\n")
    result = runner.invoke(app, ["simulate", str(config), "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    assert "1 trace rows were skipped" in result.output
    report = (tmp_path / "o" / "report.md").read_text()
    assert "Trace rows skipped as invalid: 1" in report and "prompt_tokens < 1: rows 2" in report


def test_overriding_the_kv_pool_does_not_skip_the_fit_check(tmp_path):
    config = write_trace_config(tmp_path, "0,10,2\n", "model: llama-2-70b\ndevice: a100-80gb\n"
                                "engine: {num_gpu_blocks: 100}\n")
    result = runner.invoke(app, ["simulate", str(config), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1 and "does not fit" in result.output


def test_a_failed_rerun_leaves_no_stale_tables(tmp_path):
    good = write_trace_config(tmp_path, "0,10,2\n")
    out = tmp_path / "o"
    assert runner.invoke(app, ["simulate", str(good), "--out", str(out)]).exit_code == 0
    assert (out / "requests.parquet").exists()
    bad = write_trace_config(tmp_path, "0,10,2\n", "engine: {num_gpu_blocks: 100}\nmodel: llama-2-70b\n"
                             "device: a100-80gb\n")
    assert runner.invoke(app, ["simulate", str(bad), "--out", str(out)]).exit_code == 1
    assert not (out / "requests.parquet").exists() and not (out / "steps.parquet").exists()


def test_out_that_is_a_file_is_a_clean_error(tmp_path):
    config = write_trace_config(tmp_path, "0,10,2\n")
    result = runner.invoke(app, ["simulate", str(config), "--out", str(config)])
    assert result.exit_code == 2 and "cannot create the run folder" in result.output
