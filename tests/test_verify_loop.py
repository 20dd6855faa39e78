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

from experiments.cli.main import app  # noqa: E402
from gpu_engine.runner import cpu_threads  # noqa: E402

DATA = Path(__file__).parent / "data"
runner = CliRunner()


def test_calibrate_then_verify_on_the_engine_writes_parseable_reports(tmp_path):
    calibration = tmp_path / "cal"
    with cpu_threads(1):
        done = runner.invoke(app, ["calibrate", "--model", str(DATA / "engine" / "tiny" / "config.json"),
                                   "--budget-s", "4", "--block-size", "4", "--out", str(calibration)])
        assert done.exit_code == 0, done.output
        overhead = json.loads((calibration / "engine_overhead.json").read_text())
        assert set(overhead) == {"per_step_s", "per_seq_s", "per_token_s", "per_draft_s", "per_attention_call_s"}
        assert min(overhead.values()) >= 0
        assert (calibration / "overhead_run_split_n" / "drafts.parquet").is_file()  # the draft term was measured
        out = tmp_path / "verify"
        done = runner.invoke(app, ["verify", str(DATA / "engine" / "tiny_engine.yaml"), "--run-engine",
                                   "--cost-model", f"profile:{calibration}", "--set", "trace.num_requests=6",
                                   "--out", str(out)])
    assert done.exit_code == 0, done.output
    report = json.loads((out / "fidelity.json").read_text())
    assert report["steps"]["all"]["n"] == len((out / "engine" / "plans.jsonl").read_text().splitlines())
    assert report["passed"] and "step_mape" in report["headline_abs_error_pct"]
    # One torch thread on the CPU with a calibration that recorded the host-speed probe: steps are
    # timed by the serving thread's CPU time scaled to the calibration's host speed, raw times kept.
    reference_s = json.loads((calibration / "profile.json").read_text())["host_probe_s"]
    settings = json.loads((out / "engine" / "engine.json").read_text())
    assert settings["timing"] == "cpu-normalized" and settings["reference_probe_s"] == reference_s
    assert settings["host_probe_s_min"] <= settings["host_probe_s_median"] <= settings["host_probe_s_max"]
    first = json.loads((out / "engine" / "plans.jsonl").read_text().splitlines()[0])
    assert 0 < first["measured_cpu_s"] and 0 < first["measured_s"] and 0 < first["host_probe_s"]
    assert first["duration_s"] == pytest.approx(first["measured_cpu_s"] * reference_s / first["host_probe_s"])
    assert report["context"]["reference_probe_s"] == reference_s and report["context"]["step_mape_unnormalized_pct"] > 0
    assert f"- reference_probe_s: {reference_s:.4g}\n" in (out / "fidelity.md").read_text()  # whole in the JSON only
    # the calibration's own engine runs (the overhead fit) were normalised to it too, on its block size
    overhead_run = json.loads((calibration / "overhead_run" / "engine.json").read_text())
    assert overhead_run["timing"] == "cpu-normalized" and overhead_run["config"]["engine"]["block_size"] == 4
    assert json.loads((calibration / "profile.json").read_text())["block_size"] == 4
    assert "profiled attention over blocks of" not in " ".join(done.output.split())  # the tiny config's 4: no note
    assert "## End to end" in (out / "fidelity.md").read_text() and (out / "plots" / "step_scatter.png").is_file()
    ledger = list(csv.DictReader((calibration / "ledger.csv").open()))  # profile:DIR: the ledger lives there
    assert len(ledger) == 1 and ledger[0]["device"] == "cpu" and ledger[0]["torch_version"]
    assert ledger[0]["timing"] == "cpu-normalized" and float(ledger[0]["reference_probe_s"]) == pytest.approx(reference_s)


def verify_top_of_tiny(tmp_path, variants: str, out):
    """`verify --top 2 --run-engine` of the tiny engine config with these variants (YAML text)."""
    config = tmp_path / "tiny_top.yaml"
    config.write_text((DATA / "engine" / "tiny_engine.yaml").read_text().replace(
        "model: tiny/config.json", f"model: {DATA / 'engine' / 'tiny' / 'config.json'}") + variants)
    with cpu_threads(1):
        return runner.invoke(app, ["verify", str(config), "--run-engine", "--top", "2", "--cost-model", "roofline",
                                   "--set", "trace.num_requests=6", "--out", str(out)])


def test_verify_top_runs_the_best_simulated_points_on_the_engine(tmp_path):
    out = tmp_path / "top"
    done = verify_top_of_tiny(tmp_path, "variants:\n  - {engine.chunk_size: [8, 32, 64]}\n", out)
    assert done.exit_code == 0, done.output
    top = json.loads((out / "top.json").read_text())
    assert len(top) == 2 and len({row["point_id"] for row in top}) == 2
    for row in top:  # each chosen point has its own engine run and fidelity report
        point_dir = out / f"point{row['point_id']}"
        assert json.loads((point_dir / "fidelity.json").read_text())["context"]["point"] == row["label"]
        assert (point_dir / "engine" / "plans.jsonl").is_file()
    assert top[0]["throughput_rps"] >= top[1]["throughput_rps"] or top[0]["goodput_rps"] > top[1]["goodput_rps"]
    assert "| point_id | label |" in (out / "top.md").read_text()
    assert "`passed`: no gate was set (--fail-above)" in (out / "top.md").read_text()
    for row in top:  # the summary keeps the sign of each error (simulated - measured)
        e2e = json.loads((out / f"point{row['point_id']}" / "fidelity.json").read_text())["e2e"]
        signed = {r["metric"]: r["error_pct"] for r in e2e}
        assert row["ttft_s_p50_error_pct"] == pytest.approx(signed["ttft_s_p50"])
        assert row["e2e_s_p50_error_pct"] == pytest.approx(signed["e2e_s_p50"])


def test_verify_top_reports_a_point_the_engine_cannot_run_and_goes_on(tmp_path):
    # One variant's pool holds no request (every request rejected, no step to compare): its row
    # says why, the other point is still verified, and the exit status says not everything passed.
    out = tmp_path / "top"
    done = verify_top_of_tiny(tmp_path, "variants:\n  - {}\n  - {engine.num_gpu_blocks: 1}\n", out)
    assert done.exit_code == 1, done.output
    top = {row["point_id"]: row for row in json.loads((out / "top.json").read_text())}
    assert set(top) == {0, 1}
    assert top[0]["passed"] and (out / "point0" / "fidelity.json").is_file()
    assert not top[1]["passed"] and "executed no steps" in top[1]["error"]


def test_verify_top_with_every_point_failing_in_simulation_is_a_clear_error(tmp_path):
    config = tmp_path / "big.yaml"
    config.write_text("name: big\nmodel: llama-2-70b\ndevice: h100-sxm\n"
                      "trace: {kind: poisson, qps: 1, num_requests: 10, prompt_tokens: 100, output_tokens: 10}\n"
                      "engine: {scheduler: sarathi, chunk_size: 512}\nvariants:\n  - {engine.chunk_size: [256, 512]}\n")
    done = runner.invoke(app, ["verify", str(config), "--run-engine", "--top", "2", "--out", str(tmp_path / "o")])
    assert done.exit_code == 2
    assert "every point failed in simulation" in done.output and "Traceback" not in done.output


def test_verify_refuses_an_engine_run_of_another_config(tmp_path):
    run_dir = tmp_path / "run"
    with cpu_threads(1):
        done = runner.invoke(app, ["engine", "run", str(DATA / "engine" / "tiny_engine.yaml"), "--out", str(run_dir),
                                   "--set", "trace.num_requests=4", "--dtype", "float32"])
        assert done.exit_code == 0, done.output
    done = runner.invoke(app, ["verify", str(DATA / "engine" / "tiny_engine.yaml"), "--engine-run", str(run_dir),
                               "--cost-model", "roofline", "--set", "trace.num_requests=4",
                               "--set", "engine.chunk_size=64", "--out", str(tmp_path / "v")])
    assert done.exit_code == 2
    assert "engine.chunk_size differ" in done.output
    plans = run_dir / "plans.jsonl"
    plans.write_text(plans.read_text()[:-40])  # a truncated log names its file and line
    done = runner.invoke(app, ["verify", str(DATA / "engine" / "tiny_engine.yaml"), "--engine-run", str(run_dir),
                               "--cost-model", "roofline", "--set", "trace.num_requests=4", "--out", str(tmp_path / "v")])
    assert done.exit_code == 2
    lines = len(plans.read_text().splitlines())
    assert f"plans.jsonl:{lines}: not a JSON plan entry" in done.output.replace("\n", "")


def test_verify_top_and_engine_timing_flag_conflicts_are_refused(tmp_path):
    tiny = str(DATA / "engine" / "tiny_engine.yaml")
    done = runner.invoke(app, ["verify", tiny, "--run-engine", "--top", "2", "--point", "1"])
    assert done.exit_code == 2 and "drop --point" in done.output
    done = runner.invoke(app, ["engine", "run", tiny, "--realtime", "--timing", "cpu", "--out", str(tmp_path / "e")])
    assert done.exit_code == 2 and "--timing cpu applies to --fast runs" in done.output


def test_verify_top_needs_an_engine_run(tmp_path):
    done = runner.invoke(app, ["verify", str(DATA / "engine" / "tiny_engine.yaml"), "--top", "2",
                               "--engine-run", str(tmp_path)])
    assert done.exit_code == 2
    assert "--top K needs --run-engine" in done.output


def test_rank_points_puts_slo_passing_points_first_then_goodput_then_throughput():
    import pandas as pd

    from experiments.cli.verify import rank_points
    rows = pd.DataFrame({
        "point_id": [0, 1, 2, 3, 4],
        "label": ["a", "b", "c", "d", "e"],
        "slo_met": [False, True, True, True, None],
        "goodput_rps": [9.0, 2.0, 3.0, 3.0, 0.0],
        "throughput_rps": [9.0, 5.0, 4.0, 6.0, 1.0],
        "error": [None, None, None, None, "ValueError: does not fit"],
    })
    assert rank_points(rows)["point_id"].tolist() == [3, 2, 1, 0]  # the failed point is dropped
