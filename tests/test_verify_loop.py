"""The whole loop live on the CPU: `calibrate` the tiny model, then `verify --run-engine` the tiny
config with that calibration. Only structure is checked here (live timings are noisy); the error
bounds are tested on recorded runs (test_verify_steps.py)."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("torch")

from experiments.cli import app  # noqa: E402
from gpu_engine.runner import cpu_threads  # noqa: E402

DATA = Path(__file__).parent / "data"
runner = CliRunner()


def test_calibrate_then_verify_on_the_engine_writes_parseable_reports(tmp_path):
    calibration = tmp_path / "cal"
    with cpu_threads(1):
        done = runner.invoke(app, ["calibrate", "--model", str(DATA / "engine" / "tiny" / "config.json"),
                                   "--budget-s", "2", "--out", str(calibration)])
        assert done.exit_code == 0, done.output
        overhead = json.loads((calibration / "engine_overhead.json").read_text())
        assert set(overhead) == {"per_step_s", "per_seq_s", "per_token_s", "per_draft_s"} and min(overhead.values()) >= 0
        assert (calibration / "overhead_run_split_n" / "drafts.parquet").is_file()  # the draft term was measured
        out = tmp_path / "verify"
        done = runner.invoke(app, ["verify", str(DATA / "engine" / "tiny_engine.yaml"), "--run-engine",
                                   "--cost-model", f"profile:{calibration}", "--set", "trace.num_requests=6",
                                   "--out", str(out)])
    assert done.exit_code == 0, done.output
    report = json.loads((out / "fidelity.json").read_text())
    assert report["steps"]["all"]["n"] == len((out / "engine" / "plans.jsonl").read_text().splitlines())
    assert report["passed"] and "step_mape" in report["headline_abs_error_pct"]
    # One torch thread on the CPU: steps are timed by the serving thread's CPU time, and recorded both ways.
    assert json.loads((out / "engine" / "engine.json").read_text())["timing"] == "cpu"
    first = json.loads((out / "engine" / "plans.jsonl").read_text().splitlines()[0])
    assert 0 < first["measured_cpu_s"] and 0 < first["measured_s"] and first["duration_s"] == first["measured_cpu_s"]
    assert "## End to end" in (out / "fidelity.md").read_text() and (out / "plots" / "step_scatter.png").is_file()
    ledger = list(csv.DictReader((calibration / "ledger.csv").open()))  # profile:DIR: the ledger lives there
    assert len(ledger) == 1 and ledger[0]["device"] == "cpu" and ledger[0]["torch_version"]


def test_verify_top_runs_the_best_simulated_points_on_the_engine(tmp_path):
    config = tmp_path / "tiny_top.yaml"
    config.write_text((DATA / "engine" / "tiny_engine.yaml").read_text().replace(
        "model: tiny/config.json", f"model: {DATA / 'engine' / 'tiny' / 'config.json'}")
        + "variants:\n  - {engine.chunk_size: [8, 32, 64]}\n")
    out = tmp_path / "top"
    with cpu_threads(1):
        done = runner.invoke(app, ["verify", str(config), "--run-engine", "--top", "2", "--cost-model", "roofline",
                                   "--set", "trace.num_requests=6", "--out", str(out)])
    assert done.exit_code == 0, done.output
    top = json.loads((out / "top.json").read_text())
    assert len(top) == 2 and len({row["point_id"] for row in top}) == 2
    for row in top:  # each chosen point has its own engine run and fidelity report
        point_dir = out / f"point{row['point_id']}"
        assert json.loads((point_dir / "fidelity.json").read_text())["context"]["point"] == row["label"]
        assert (point_dir / "engine" / "plans.jsonl").is_file()
    assert top[0]["throughput_rps"] >= top[1]["throughput_rps"] or top[0]["goodput_rps"] > top[1]["goodput_rps"]
    assert "| point_id | label |" in (out / "top.md").read_text()


def test_verify_top_needs_an_engine_run(tmp_path):
    done = runner.invoke(app, ["verify", str(DATA / "engine" / "tiny_engine.yaml"), "--top", "2",
                               "--engine-run", str(tmp_path)])
    assert done.exit_code == 2
    assert "--top K needs --run-engine" in done.output


def test_rank_points_puts_slo_passing_points_first_then_goodput_then_throughput():
    import pandas as pd

    from experiments.verify_cli import rank_points
    rows = pd.DataFrame({
        "point_id": [0, 1, 2, 3, 4],
        "label": ["a", "b", "c", "d", "e"],
        "slo_met": [False, True, True, True, None],
        "goodput_rps": [9.0, 2.0, 3.0, 3.0, 0.0],
        "throughput_rps": [9.0, 5.0, 4.0, 6.0, 1.0],
        "error": [None, None, None, None, "ValueError: does not fit"],
    })
    assert rank_points(rows)["point_id"].tolist() == [3, 2, 1, 0]  # the failed point is dropped
