"""What `sweep`/`simulate` say that report.md already said: a trace file's ignored unknown
columns when no row was rejected (said only beside rejected rows), and goodput per GPU in the
terminal table when a point has more than one GPU (report.md and points.csv had it)."""
from __future__ import annotations

import re

import pandas as pd
import pytest
from typer.testing import CliRunner

from experiments.cli.main import app
from experiments.planning.report import format_cell

runner = CliRunner()

GPUS = """
name: gpus
model: llama-3-8b
device: h100-sxm
trace: {kind: poisson, qps: 4, num_requests: 30, prompt_tokens: [50, 300], output_tokens: [5, 40]}
engine: {scheduler: sarathi, chunk_size: 256, max_num_seqs: 64}
goodput: {ttft_s: 0.5, tpot_s: 0.05}
"""


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_the_sweep_table_shows_goodput_per_gpu_when_a_point_has_more_than_one_gpu(tmp_path):
    config = tmp_path / "gpus.yaml"
    config.write_text(GPUS + "variants:\n  - {engine.tensor_parallel_size: 1}\n  - {engine.tensor_parallel_size: 2}\n")
    result = runner.invoke(app, ["sweep", str(config), "--out", str(tmp_path / "run"), "--jobs", "1"])
    assert result.exit_code == 0, result.output
    points = pd.read_csv(tmp_path / "run" / "points.csv")
    assert points["num_gpus"].tolist() == [1, 2] and (points["goodput_rps"] > 0).all()
    # Per GPU: the goodput over the point's 1 and 2 GPUs.
    assert points["goodput_rps_per_gpu"].tolist() == pytest.approx([points["goodput_rps"][0], points["goodput_rps"][1] / 2])
    out = flat(result.output)
    assert " req/s goodput/s GPUs goodput/s/GPU TTFT P90 s " in out
    for (_, row), gpus in zip(points.iterrows(), ("1", "2")):
        assert (f" {row['label']} {row['completed']} {format_cell(row['throughput_rps'])} "
                f"{format_cell(row['goodput_rps'])} {gpus} {format_cell(row['goodput_rps_per_gpu'])} ") in out
    assert "| GPUs | goodput per GPU (req/s) |" in (tmp_path / "run" / "report.md").read_text()


def test_one_gpu_points_keep_the_table_without_per_gpu_columns(tmp_path):
    config = tmp_path / "one.yaml"
    config.write_text(GPUS)
    result = runner.invoke(app, ["simulate", str(config), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert " goodput/s TTFT P90 s " in flat(result.output)  # the same decision as report.md's
    assert "GPU" not in result.stdout.split("wrote ")[0] and "GPUs |" not in (tmp_path / "run" / "report.md").read_text()


@pytest.mark.parametrize("command", ["simulate", "sweep"])
def test_a_trace_files_unknown_columns_are_said_when_no_row_was_rejected(tmp_path, command):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,user,[b]x\n0,100,10,a,1\n0.5,120,12,b,2\n1.0,80,8,c,3\n")
    config = tmp_path / "f.yaml"
    config.write_text(f"name: f\ntrace: {{kind: file, path: {trace}}}\nengine: {{scheduler: sarathi, chunk_size: 256}}\n")
    result = runner.invoke(app, [command, str(config), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if "warning" in line or "note" in line]
    assert warnings == ["warning: the trace's unknown columns were ignored: user, [b]x (see the report; "
                        "trace.strict: true refuses them)"]
    report = (tmp_path / "run" / "report.md").read_text()
    assert "\n- Trace columns ignored (not columns of the file's format; trace.strict: true refuses them): user, [b]x.\n" in report
    assert "Trace rows skipped" not in report
    points = pd.read_csv(tmp_path / "run" / "points.csv")
    assert points["trace_rows_rejected"].tolist() == [0] and points["trace_ignored_columns"].tolist() == ["user, [b]x"]


def test_a_trace_without_unknown_columns_says_nothing_of_them(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n0.5,120,12\n")
    config = tmp_path / "f.yaml"
    config.write_text(f"name: f\ntrace: {{kind: file, path: {trace}}}\nengine: {{scheduler: sarathi, chunk_size: 256}}\n")
    result = runner.invoke(app, ["simulate", str(config), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0 and "ignored" not in result.stderr
    assert "columns ignored" not in (tmp_path / "run" / "report.md").read_text()


def test_a_sessions_files_unknown_columns_get_the_warning_and_stay_in_its_trace_line(tmp_path):
    turns = tmp_path / "turns.csv"
    turns.write_text("session_id,turn,user_tokens,output_tokens,note\na,0,100,20,x\nb,0,50,10,y\na,1,30,5,z\n")
    config = tmp_path / "s.yaml"
    config.write_text(f"name: s\ntrace: {{kind: sessions, path: {turns}}}\n"
                      "engine: {scheduler: vllm_v1, chunk_size: 256}\n")
    result = runner.invoke(app, ["simulate", str(config), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert "warning: the trace's unknown columns were ignored: note (see the report;" in flat(result.stderr)
    report = (tmp_path / "run" / "report.md").read_text()
    assert "(sessions, 2 conversations, 3 turns; ignored unknown columns: note)" in report
    assert "Trace columns ignored" not in report  # not said twice
