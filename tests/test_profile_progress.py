"""`sarathi-sim profile` shows a progress bar over its time budget, with the profiler's lines above it."""
from __future__ import annotations

import time

from typer.testing import CliRunner

from experiments.cli.main import app


def test_profile_shows_progress_over_its_budget(tmp_path, monkeypatch):
    calls = []

    def fake_run_profile(spec, device, budget_s, out, log, **kwargs):  # the timing loop, 0.6 s of it
        log(f"timed 3 shapes of {spec.name}")
        time.sleep(0.6)
        calls.append((spec.name, device, budget_s))

    monkeypatch.setattr("profiler.harness.run_profile", fake_run_profile)
    result = CliRunner().invoke(app, ["profile", "--model", "llama-2-7b", "--budget-s", "2", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert calls == [("llama-2-7b", "cpu", 2.0)]
    # The bar ends full at the budget (2 s), below the profiler's line.
    assert "profiling llama-2-7b on cpu" in result.output and "2/2 s of the budget" in result.output
    assert result.output.index("timed 3 shapes of llama-2-7b") < result.output.index("wrote ")
