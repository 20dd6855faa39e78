"""What `sweep` tells its user: a terminal table that never elides a value, the recommendation,
the exit status when points fail, Ctrl-C, the capacity search's summary and `vllm serve` command,
and `sarathi-sim flags RUN --point K` for a finished run."""
from __future__ import annotations

import pandas as pd
import pytest
from typer.testing import CliRunner

from experiments.cli import main as cli
from experiments.cli.main import app

runner = CliRunner()

TWO_MODELS = """
name: two
trace: {kind: poisson, qps: 2, num_requests: 40, prompt_tokens: [50, 300], output_tokens: [5, 40]}
engine: {scheduler: sarathi, chunk_size: 256, max_num_seqs: 64}
variants:
  - {engine.scheduler: vllm}
  - {engine.chunk_size: 128}
  - {model: llama-2-70b, device: a100-80gb}
slo: {tbt_p99_s: 0.1}
"""


@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("two")
    config = folder / "two.yaml"
    config.write_text(TWO_MODELS)
    result = runner.invoke(app, ["sweep", str(config), "--out", str(folder / "run"), "--jobs", "1"])
    return folder / "run", result


def test_a_failed_point_makes_the_sweep_exit_1_after_writing_the_others(two_models):
    run, result = two_models
    assert result.exit_code == 1, result.output
    assert "1 of 3 points failed" in result.output and "exit status 1" in result.output
    points = pd.read_csv(run / "points.csv")
    assert points["error"].notna().tolist() == [False, False, True]
    assert (run / "report.md").is_file()


def test_terminal_table_names_points_in_full_and_elides_nothing(two_models):
    _, result = two_models
    assert "…" not in result.output
    assert "llama-3-8b · h100-sxm · sarathi chunk=128" in result.output
    # The recommendation names the point in full (its label carries model and device here).
    assert "Recommended at this load: llama-3-8b · h100-sxm · " in result.output
    assert "Rule: among the points meeting every SLO" in result.output


def test_flags_prints_the_complete_vllm_serve_command_of_a_point(two_models):
    run, _ = two_models
    result = runner.invoke(app, ["flags", str(run), "--point", "1"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == (
        "vllm serve meta-llama/Meta-Llama-3-8B --enable-chunked-prefill --max-num-batched-tokens 128 "
        "--max-num-seqs 64 --block-size 16 --gpu-memory-utilization 0.9 --max-model-len 8192 "
        "--dtype bfloat16 --seed 0")
    vllm = runner.invoke(app, ["flags", str(run), "--point", "0"])
    # vllm (v0) reads no chunk size: its budget is max_model_len, a whole prompt per step.
    assert vllm.stdout.splitlines()[0] == (
        "vllm serve meta-llama/Meta-Llama-3-8B --no-enable-chunked-prefill --max-num-batched-tokens 8192 "
        "--max-num-seqs 64 --block-size 16 --gpu-memory-utilization 0.9 --max-model-len 8192 "
        "--dtype bfloat16 --seed 0")
    several = runner.invoke(app, ["flags", str(run)])
    assert several.exit_code == 2 and "holds 3 points; choose one with --point K (0: llama-3-8b" in several.output
    failed = runner.invoke(app, ["flags", str(run), "--point", "2"])
    assert failed.exit_code == 2 and "did not run" in failed.output
    missing = runner.invoke(app, ["flags", str(run), "--point", "9"])
    assert missing.exit_code == 2 and "has no such point" in missing.output


def test_ctrl_c_says_what_was_kept_and_exits_130(tmp_path, monkeypatch):
    config = tmp_path / "c.yaml"
    config.write_text(TWO_MODELS)

    def interrupted(points, jobs=None, on_done=None, **kwargs):
        on_done(0, {})  # one point finished (and cached), then the user pressed Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr("experiments.planning.sweep.run_sweep", interrupted)
    out = tmp_path / "run"
    result = runner.invoke(app, ["sweep", str(config), "--out", str(out)])
    assert result.exit_code == 130
    said = " ".join(result.output.split())  # the console wraps long lines
    assert f"interrupted: 1 of 3 points had finished; their results are kept in {out / '.cache'}" in said
    assert "Traceback" not in result.output
    result = runner.invoke(app, ["sweep", str(config), "--out", str(tmp_path / "r2"), "--no-cache"])
    assert result.exit_code == 130 and "--no-cache: nothing was kept" in " ".join(result.output.split())


CAPACITY = """
name: cap
trace: {kind: poisson, qps: 1, prompt_tokens: [50, 400], output_tokens: [10, 80]}
engine: {scheduler: vllm_v1, chunk_size: 256, max_num_seqs: 64}
search: {qps: [1, 64], num_requests: 40, seeds: 1, precision: 0.2}
"""


def test_capacity_search_prints_its_recommendation_warnings_and_command(tmp_path):
    config = tmp_path / "cap.yaml"
    config.write_text(CAPACITY)
    result = runner.invoke(app, ["sweep", str(config), "--out", str(tmp_path / "o"), "--jobs", "1"])
    assert result.exit_code == 0, result.output
    assert "Recommended: vllm_v1 chunk=256 (point 0: llama-3-8b on h100-sxm) — capacity" in result.output
    assert "Rule: the highest capacity (mean over seeds)" in result.output
    assert "warning: Caution: trials of 40 requests are short" in result.output
    assert "warning: One seed: the capacities have no confidence interval" in result.output
    command = result.output.split("serve the recommended point with:\n")[1].splitlines()[0]
    assert command == ("vllm serve meta-llama/Meta-Llama-3-8B --enable-chunked-prefill --max-num-batched-tokens 256 "
                       "--max-num-seqs 64 --block-size 16 --gpu-memory-utilization 0.9 --dtype bfloat16 --seed 0")
    assert "error" not in result.output.lower() and "NaN" not in result.output
    trials = len(pd.read_csv(tmp_path / "o" / "trials.csv"))
    # Not a terminal: a progress line per search done (the bar counts searches, then trials).
    assert f"capacity search cap: 1/1 point × seed searches done · {trials} trials in them (" in result.output


INLINE_DEVICE = """
name: inline
model: llama-3-70b
device: {name: small-gpu, memory_gib: 24, dense_bf16_tflops: 100, memory_bandwidth_gb_per_s: 1000,
         gpu_link: {kind: pcie, gb_per_s_per_direction: 32}, host_link: {gb_per_s_per_direction: 32}}
trace: {kind: poisson, qps: 2, num_requests: 10, prompt_tokens: 100, output_tokens: 10}
engine: {scheduler: sarathi, chunk_size: 256}
"""


def test_a_failed_point_on_an_inline_device_writes_every_output_with_the_device_by_name(tmp_path):
    """llama-3-70b (131 GiB of weights) does not fit the 24 GiB inline device; the 8B variant runs.
    Every row's device is the device's name (an inline mapping once broke parquet and the report)."""
    config = tmp_path / "inline.yaml"
    config.write_text(INLINE_DEVICE + "variants:\n  - {engine.chunk_size: 128}\n  - {model: llama-3-8b}\n")
    out = tmp_path / "run"
    result = runner.invoke(app, ["sweep", str(config), "--out", str(out), "--jobs", "1"])
    assert result.exit_code == 1, result.output
    assert "does not fit on small-gpu" in result.output and "1 of 2 points failed" in result.output
    for name in ("points.csv", "points.parquet", "requests.parquet", "report.md", "report.html"):
        assert (out / name).is_file(), name
    assert pd.read_parquet(out / "points.parquet")["device"].tolist() == ["small-gpu", "small-gpu"]
    assert pd.read_csv(out / "points.csv")["error"].notna().tolist() == [True, False]
    assert "(point 0: llama-3-70b on small-gpu)" in (out / "report.md").read_text()


def test_every_point_failed_prints_the_failures_and_no_empty_table(tmp_path):
    config = tmp_path / "inline.yaml"
    config.write_text(INLINE_DEVICE)
    out = tmp_path / "run"
    result = runner.invoke(app, ["simulate", str(config), "--out", str(out)])
    assert result.exit_code == 1, result.output
    assert "every point of inline failed (1 of 1):" in result.output
    assert "point 0 (sarathi chunk=256) failed: ValueError: llama-3-70b does not fit on small-gpu" in result.output
    assert "completed" not in result.output and "─" not in result.output  # no table, not even its headers
    assert "Every point failed (the errors are listed with the points): nothing to recommend." in result.output
    assert pd.read_parquet(out / "points.parquet")["device"].tolist() == ["small-gpu"]
    assert (out / "report.md").is_file()


def test_verify_against_run_help_names_every_bundle_file():
    # "[vllm/timeseries.csv, config.json]" was read as rich markup and printed "vllm/meta.json, )".
    result = runner.invoke(app, ["verify", "--help"])
    text = " ".join(result.output.replace("│", " ").split())
    assert ("(LLMServingSim bundle: vllm/requests.jsonl and vllm/meta.json, optionally vllm/timeseries.csv and "
            "config.json) to simulate and compare with.") in text


MIXED_ACCEPTANCE = """
name: mixed
trace: {kind: poisson, qps: 2, num_requests: 10, prompt_tokens: 100, output_tokens: 8}
engine: {scheduler: sarathi, split_n: 2}
variants:
  - {engine.acceptance: {file: acc.csv}}
  - {engine.acceptance: 0.6}
  - {engine.acceptance: [[0.8, 0.5]]}
"""


def test_points_of_mixed_acceptance_kinds_write_every_table_and_rerun(tmp_path):
    # A number in one point and a file or per-position list in another ended the sweep in
    # ArrowInvalid after simulating every point: only points.csv was written (issue 30 item 1).
    (tmp_path / "acc.csv").write_text("proposed,accepted\n2,1\n2,2\n")
    config = tmp_path / "mixed.yaml"
    config.write_text(MIXED_ACCEPTANCE)
    for _ in range(2):  # the rerun (served from the results cache) crashed the same way
        result = runner.invoke(app, ["sweep", str(config), "--out", str(tmp_path / "run"), "--jobs", "1"])
        assert result.exit_code == 0, result.output
        parquet = pd.read_parquet(tmp_path / "run" / "points.parquet")
        assert parquet["acceptance"].tolist() == [f'{{"file": "{tmp_path / "acc.csv"}"}}', "0.6", "[0.8, 0.5]"]
        assert pd.read_csv(tmp_path / "run" / "points.csv", dtype=str)["acceptance"].tolist() \
            == parquet["acceptance"].tolist()
        assert all((tmp_path / "run" / name).is_file() for name in ("requests.parquet", "steps.parquet", "report.md"))
