"""An interrupted sweep resumes from its cache without recomputing finished points."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from experiments.cli.main import app

CONFIG = """
name: resume
trace: {kind: poisson, qps: 6, num_requests: 200, prompt_tokens: [100, 1500], output_tokens: [20, 200]}
engine: {scheduler: sarathi, chunk_size: 512}
variants:
  - {engine.chunk_size: [128, 256, 512, 1024]}
"""


def test_sigkill_then_resume_recomputes_nothing_finished(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    out = tmp_path / "out"
    cache = out / ".cache"
    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-m", "experiments.cli.main", "sweep", str(config), "--out", str(out),
                             "--jobs", "1"], cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and len(list(cache.glob("*.pkl"))) < 1:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = {p.name for p in cache.glob("*.pkl")}
    assert finished, "no point finished before the kill"
    assert not (out / "points.csv").exists() or len(finished) == 4

    result = CliRunner().invoke(app, ["sweep", str(config), "--out", str(out), "--jobs", "1"])
    assert result.exit_code == 0, result.output
    points = pd.read_csv(out / "points.csv")
    assert int(points["cached"].sum()) == len(finished)  # exactly the finished ones were reused
    assert {p.name for p in cache.glob("*.pkl")} >= finished and len(list(cache.glob("*.pkl"))) == 4

    fresh = CliRunner().invoke(app, ["sweep", str(config), "--out", str(tmp_path / "fresh"), "--no-cache"])
    assert fresh.exit_code == 0
    again = pd.read_csv(tmp_path / "fresh" / "points.csv")
    columns = ["label", "completed", "tbt_s_p99", "ttft_s_p90", "num_steps"]
    pd.testing.assert_frame_equal(points[columns], again[columns])
    assert not again["cached"].any()
