"""`sarathi-sim engine run`: the shipped tiny config end to end on the CPU, as fast as possible and in real time."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

torch = pytest.importorskip("torch")

from experiments.cli.main import app  # noqa: E402
from gpu_engine.records import read_plans  # noqa: E402
from gpu_engine.runner import cpu_threads  # noqa: E402
from simulator.step_log import STEP_COLUMNS  # noqa: E402

CONFIG = str(Path(__file__).parent / "data" / "engine" / "tiny_engine.yaml")
runner = CliRunner()


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    with cpu_threads(1):  # tiny matmuls: more threads only contend
        yield


def engine_run(out: Path, *extra: str):
    result = runner.invoke(app, ["engine", "run", CONFIG, "--out", str(out), "--dtype", "float32", *extra])
    assert result.exit_code == 0, result.output
    return pd.read_parquet(out / "requests.parquet"), pd.read_parquet(out / "steps.parquet")


def test_fast_run_serves_every_request_and_writes_the_simulators_tables(tmp_path):
    requests, steps = engine_run(tmp_path)
    assert len(requests) == 24 and (requests["finish_reason"] == "completed").all()
    assert (requests["generated_tokens"] == requests["output_tokens"]).all()
    assert tuple(steps.columns) == STEP_COLUMNS
    assert len(read_plans(tmp_path / "plans.jsonl")) == len(steps)
    outputs = [json.loads(line) for line in (tmp_path / "outputs.jsonl").read_text().splitlines()]
    assert [len(o["token_ids"]) for o in outputs] == requests["output_tokens"].tolist()
    settings = json.loads((tmp_path / "engine.json").read_text())
    assert settings["device"] == "cpu" and settings["weights"] == "random (seed 0)" and settings["clock"] == "fast"
    # As fast as possible: idle gaps are skipped, so steps follow one another or start at an arrival.
    ends = (steps["start_s"] + steps["duration_s"]).to_numpy()[:-1]
    arrivals = set(requests["arrival_s"])
    assert all(abs(s - e) < 1e-12 or s in arrivals for s, e in zip(steps["start_s"].to_numpy()[1:], ends))


def test_realtime_run_admits_requests_only_after_they_arrive(tmp_path):
    requests, steps = engine_run(tmp_path, "--realtime", "--set", "trace.num_requests=6")
    assert (requests["finish_reason"] == "completed").all()
    assert (requests["first_scheduled_s"] >= requests["arrival_s"]).all()
    assert json.loads((tmp_path / "engine.json").read_text())["clock"] == "wall"


def test_split_n_with_forced_acceptance_records_proposed_and_accepted(tmp_path):
    _, steps = engine_run(tmp_path, "--set", "engine.split_n=3", "--set", "engine.acceptance=0.5",
                          "--forced-acceptance")
    drafts = pd.read_parquet(tmp_path / "drafts.parquet")
    assert steps["num_draft_tokens"].sum() == drafts["drafts_granted"].sum() > 0
    assert (drafts["drafts_proposed"] == drafts["drafts_granted"]).all()
    assert 0 < drafts["drafts_accepted"].sum() < drafts["drafts_proposed"].sum()


def test_settings_the_engine_cannot_run_are_errors(tmp_path):
    result = runner.invoke(app, ["engine", "run", CONFIG, "--out", str(tmp_path), "--set", "engine.replicas=2"])
    assert result.exit_code == 2
    assert "engine.replicas not supported" in " ".join(result.output.split())  # rich wraps lines
    result = runner.invoke(app, ["engine", "run", CONFIG, "--out", str(tmp_path), "--max-kv-gib", "0.00001"])
    assert result.exit_code == 2
    assert "set engine.num_gpu_blocks" in " ".join(result.output.split())


def test_cpu_timings_need_one_cpu_thread_and_a_calibration_that_recorded_the_probe(tmp_path):
    import shutil

    def run(*extra: str):
        with cpu_threads(1):  # --threads 2 would otherwise leak into the next tests
            result = runner.invoke(app, ["engine", "run", CONFIG, "--out", str(tmp_path / "run"), "--dtype", "float32",
                                         "--set", "trace.num_requests=2", *extra])
        return result.exit_code, " ".join(result.output.split())

    code, output = run("--threads", "2", "--timing", "cpu")
    assert code == 2 and "use --threads 1 on the CPU, or --timing wall" in output
    code, output = run("--timing", "cpu-normalized")
    assert code == 2 and "needs cost_model: profile:DIR of a calibration that recorded host_probe_s" in output
    calibration = tmp_path / "cal"
    shutil.copytree(Path(__file__).parent / "data" / "verify" / "profile", calibration)
    sidecar = json.loads((calibration / "profile.json").read_text())
    (calibration / "profile.json").write_text(json.dumps({**sidecar, "host_probe_s": 0}))
    code, output = run("--set", f"cost_model=profile:{calibration}")  # auto on one CPU thread reads the probe
    assert code == 2 and "host_probe_s must be a finite positive number of seconds, got 0" in output
    code, output = run("--set", f"cost_model=profile:{calibration}", "--timing", "wall")  # a wall run never uses it
    assert code == 0, output


def test_device_choices_are_checked_against_this_machine():
    from experiments.verification.engine_run import resolve_device

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert resolve_device("auto") == ("cuda" if gpus else "cpu") and resolve_device("cpu") == "cpu"
    with pytest.raises(ValueError, match=rf"--device cuda:{gpus}: torch sees {gpus} CUDA device\(s\)"):
        resolve_device(f"cuda:{gpus}")
    for bad in ("tpu", "cuda:x", "gpu"):
        with pytest.raises(ValueError, match="valid values are auto, cpu, cuda, cuda:N"):
            resolve_device(bad)
    if not gpus:  # the CLI says so in one line, before building anything
        result = runner.invoke(app, ["engine", "run", CONFIG, "--device", "cuda"])
        assert result.exit_code == 2 and "torch sees 0 CUDA device(s) on this machine" in " ".join(result.output.split())
        result = runner.invoke(app, ["verify", CONFIG, "--run-engine", "--device", "cuda"])
        assert result.exit_code == 2 and "torch sees 0 CUDA device(s) on this machine" in " ".join(result.output.split())


def test_plan_log_is_strict_json_and_engine_json_names_what_ran(tmp_path):
    engine_run(tmp_path, "--timing", "wall", "--set", "trace.num_requests=3")

    def no_nan(token):
        raise AssertionError(f"plans.jsonl holds {token}, which is not JSON")

    entries = [json.loads(line, parse_constant=no_nan) for line in (tmp_path / "plans.jsonl").read_text().splitlines()]
    assert entries and all(e["host_probe_s"] is None and e["measured_cpu_s"] > 0 for e in entries)
    settings = json.loads((tmp_path / "engine.json").read_text())
    assert settings["attention"] == "paged_attention_torch" and settings["torch_threads"] == 1


def test_invalid_trace_rows_are_counted_and_said(tmp_path):
    # ../shared/cases/zero_prompt: rows 1 (prompt 0) and 3 (empty field) are rejected at load,
    # row 2 is served; the run finishes and names the rows.
    from tests.conftest import SHARED

    trace = SHARED / "cases" / "zero_prompt" / "trace.csv"
    if not trace.is_file():
        pytest.skip("../shared/cases is not next to this checkout")
    result = runner.invoke(app, ["engine", "run", CONFIG, "--out", str(tmp_path), "--dtype", "float32",
                                 "--set", f"trace={{kind: file, path: '{trace}'}}"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "2 trace rows were skipped as invalid" in said and "rows 1" in said and "rows 3" in said
    assert json.loads((tmp_path / "summary.json").read_text())["completed"] == 1
    assert json.loads((tmp_path / "engine.json").read_text())["trace_rows_rejected"] == 2


def test_weights_that_are_not_a_checkpoint_folder_are_named(tmp_path):
    (tmp_path / "file.bin").write_text("x")
    (tmp_path / "empty").mkdir()
    takes = "--weights takes a Hugging Face checkpoint folder (config.json + *.safetensors)"
    for weights, problem in [(tmp_path / "nonexist", "no such folder"), (tmp_path / "file.bin", "not a folder"),
                             (tmp_path / "empty", "no *.safetensors file in this folder")]:
        result = runner.invoke(app, ["engine", "run", CONFIG, "--out", str(tmp_path / "out"), "--weights", str(weights)])
        assert result.exit_code == 2
        assert f"error: --weights {weights}: {problem}; {takes}" in " ".join(result.output.split())
    assert not (tmp_path / "out").exists()  # refused before the run folder is made


@pytest.mark.parametrize("written, note", [
    ((), "the engine run stopped before writing its outputs; nothing was written to {out} (files of an earlier "
         "run there are as they were)"),
    (("requests.parquet", "steps.parquet"), "the engine run stopped while writing its outputs; {out} holds a partial "
     "run: requests.parquet, steps.parquet (each written whole), the rest not written. Run it again for a complete "
     "run directory"),
])
def test_ctrl_c_says_what_was_written_and_exits_130_without_a_traceback(tmp_path, monkeypatch, written, note):
    from experiments.verification import engine_run

    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("an earlier run's")  # listed as ours below, and older than this run
    (out / ".sarathi-sim.json").write_text(json.dumps({"files": ["old.txt"]}))
    os.utime(out / "old.txt", (1e9, 1e9))

    def interrupted_serve(point, out_dir, **options):
        for name in written:
            (out_dir / name).write_bytes(b"whole")
        raise KeyboardInterrupt

    monkeypatch.setattr(engine_run, "_serve", interrupted_serve)
    result = runner.invoke(app, ["engine", "run", CONFIG, "--out", str(out)])
    assert result.exit_code == 130
    said = " ".join(result.output.split())
    assert said == "interrupted: " + note.format(out=out)
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output  # a plain exit, no trace
