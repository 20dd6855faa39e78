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
        assert set(overhead) == {"per_step_s", "per_seq_s", "per_token_s"} and min(overhead.values()) >= 0
        out = tmp_path / "verify"
        done = runner.invoke(app, ["verify", str(DATA / "engine" / "tiny_engine.yaml"), "--run-engine",
                                   "--cost-model", f"profile:{calibration}", "--set", "trace.num_requests=6",
                                   "--out", str(out)])
    assert done.exit_code == 0, done.output
    report = json.loads((out / "fidelity.json").read_text())
    assert report["steps"]["all"]["n"] == len((out / "engine" / "plans.jsonl").read_text().splitlines())
    assert report["passed"] and "step_mape" in report["headline_abs_error_pct"]
    assert "## End to end" in (out / "fidelity.md").read_text() and (out / "plots" / "step_scatter.png").is_file()
    ledger = list(csv.DictReader((calibration / "ledger.csv").open()))  # profile:DIR: the ledger lives there
    assert len(ledger) == 1 and ledger[0]["device"] == "cpu" and ledger[0]["torch_version"]
