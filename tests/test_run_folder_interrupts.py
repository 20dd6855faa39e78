"""A rerun stopped at any instant leaves one run's outputs, never two runs' mixed; SIGTERM stops a
sweep as Ctrl-C does (cleanup, message, exit 143); a signal swallowed where it landed, or one
coming as the command ends, still stops it with 128 + the signal; the success line names only
files that were written (experiments/outputs.py, experiments/cli/interrupts.py, cli/main.py)."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from experiments import outputs
from experiments.cli.main import app
from experiments.outputs import LOCK, MANIFEST, TEMP_PREFIX

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()

CONFIG = """
name: mixed
cost_model: roofline
trace: {kind: poisson, qps: 6, num_requests: 30, prompt_tokens: [100, 400], output_tokens: [10, 40]}
engine: {scheduler: sarathi, chunk_size: 256}
variants:
  - {engine.chunk_size: [256, 512]}
"""


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(CONFIG)
    return path


def _outputs_now(out: Path) -> dict[str, bytes]:
    """The run folder's output files (no manifest, lock, temporary or cache entry) and their bytes."""
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*")
            if p.is_file() and p.name not in (MANIFEST, LOCK) and not p.name.startswith(TEMP_PREFIX)
            and ".cache" not in p.relative_to(out).parts}


def test_at_every_instant_of_a_rerun_the_folder_holds_only_one_runs_outputs(tmp_path, monkeypatch):
    """What a SIGKILL would leave after each file of the rerun is placed: never a file of the
    first run (its report.md beside the rerun's points.csv was the defect)."""
    config, out = _config(tmp_path), tmp_path / "run"
    assert runner.invoke(app, ["sweep", str(config), "--out", str(out), "--jobs", "1"]).exit_code == 0
    first = _outputs_now(out)
    assert {"points.csv", "report.md", "report.html", "requests.parquet"} <= set(first)
    instants = []
    write_whole = outputs.write_whole

    def watched(path, write, before_rename=None, **kwargs):
        placed = write_whole(path, write, before_rename, **kwargs)
        instants.append((Path(path).name, _outputs_now(out)))
        return placed

    monkeypatch.setattr(outputs, "write_whole", watched)
    rerun = runner.invoke(app, ["sweep", str(config), "--out", str(out), "--jobs", "1", "--set", "trace.qps=3"])
    assert rerun.exit_code == 0, rerun.output
    placed = [files for name, files in instants if name != MANIFEST]
    assert len(placed) >= len(first)  # every output of the rerun, each a moment a kill could come
    for files in placed:
        assert [name for name, data in files.items() if first.get(name) == data] == []
    assert set(placed[-1]) == set(first) and set(outputs.read_manifest(out)) == set(first)


def test_a_run_killed_while_removing_the_earlier_runs_files_leaves_them_marked_and_the_next_claim_removes_them(tmp_path):
    folder = tmp_path / "run"
    with outputs.RunFolder(folder):
        outputs.write_text(folder / "points.csv", "first run")
        outputs.write_text(folder / "report.md", "first run")
    # The manifest as _retire_earlier writes it before deleting: the earlier run's files marked stale.
    outputs._dump_manifest(folder, {"points.csv", "report.md"}, set(), stale={"points.csv", "report.md"})
    (folder / "points.csv").unlink()  # killed after deleting one of them
    with outputs.RunFolder(folder) as run:
        assert not (folder / "report.md").exists()
        assert run.remove_stale() == []
    assert outputs.read_manifest(folder) == []


def _driver(tmp_path: Path, patch: str, *args: str) -> subprocess.CompletedProcess:
    """`sarathi-sim ARGS` as the console script runs it (`app()`), after `patch` (Python source)."""
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(patch) + textwrap.dedent(f"""
        from experiments.cli.main import app
        sys.argv = ["sarathi-sim", *{list(args)!r}]
        app()
        """))
    # The command starts with Ctrl-C and SIGTERM at their defaults, as from a terminal: a suite run from
    # a non-interactive shell's background job inherits SIGINT ignored, which the CLI rightly keeps
    # ignored (nohup), and the Ctrl-C cases would then test that instead.
    return subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=300,
                          preexec_fn=_default_signals)


def _default_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_sigterm_while_writing_removes_the_earlier_runs_report_and_exits_143(tmp_path):
    config, out = _config(tmp_path), tmp_path / "run"
    assert runner.invoke(app, ["sweep", str(config), "--out", str(out), "--jobs", "1"]).exit_code == 0
    first_points = (out / "points.csv").read_bytes()
    done = _driver(tmp_path, """
        import os, signal, sys
        import experiments.planning.sweep as sweep
        write_results = sweep.write_results

        def tables_then_sigterm(*args, **kwargs):  # the tables are placed, the report not yet
            table = write_results(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass
            return table
        sweep.write_results = tables_then_sigterm
        """, "sweep", str(config), "--out", str(out), "--jobs", "1", "--set", "trace.qps=3")
    assert done.returncode == 143, done.stderr
    said = " ".join(done.stderr.split())
    assert ("terminated (SIGTERM): 2 of 2 points had finished; their results are kept in "
            f"{out / '.cache'}, so the same command resumes from them. Of this run's outputs only points.csv, "
            "points.parquet, requests.parquet, steps.parquet, config.yaml were written (the earlier run's are "
            "removed).") in said
    assert "Traceback" not in done.stderr
    assert sorted(_outputs_now(out)) == ["config.yaml", "points.csv", "points.parquet", "requests.parquet",
                                         "steps.parquet"]
    assert (out / "points.csv").read_bytes() != first_points
    assert pd.read_csv(out / "points.csv")["completed"].tolist() == [30, 30]


def test_ctrl_c_swallowed_in_a_weakref_callback_still_stops_the_sweep_with_130(tmp_path):
    config, out = _config(tmp_path), tmp_path / "run"
    done = _driver(tmp_path, """
        import os, signal, sys, weakref
        import experiments.planning.sweep as sweep
        run_sweep = sweep.run_sweep

        class Thing:
            pass

        def ctrl_c_in_a_callback(_):  # Python prints and drops what a weakref callback raises
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):
                pass

        def interrupted_sweep(*args, **kwargs):
            thing = Thing()
            ref = weakref.ref(thing, ctrl_c_in_a_callback)
            del thing
            return run_sweep(*args, **kwargs)
        sweep.run_sweep = interrupted_sweep
        """, "sweep", str(config), "--out", str(out), "--jobs", "1")
    assert done.returncode == 130, done.stderr
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr
    said = " ".join(done.stderr.split())
    assert "interrupted: 1 of 2 points had finished" in said  # stopped at the first point's end
    assert "The tables and report of this run were not written." in said
    assert _outputs_now(out) == {}


def test_ctrl_c_as_the_command_exits_gives_130_not_death_by_sigint(tmp_path):
    config, out = _config(tmp_path), tmp_path / "run"
    done = _driver(tmp_path, """
        import os, signal, sys
        exit_ = sys.exit

        def exit_after_ctrl_c(code=None):  # the command is done; Ctrl-C comes as typer exits
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):
                pass
            exit_(code)
        sys.exit = exit_after_ctrl_c
        """, "sweep", str(config), "--out", str(out), "--jobs", "1")
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert "wrote points.csv" in done.stdout and "Traceback" not in done.stderr
    assert "interrupted (SIGINT): stopped with exit status 130" in " ".join(done.stderr.split())
    assert (out / "report.md").is_file()


def test_the_success_line_names_only_the_files_written(tmp_path):
    config, out = _config(tmp_path), tmp_path / "run"
    assert runner.invoke(app, ["sweep", str(config), "--out", str(out), "--jobs", "1"]).exit_code == 0
    (out / "report.html").unlink()
    (out / "report.html").mkdir()  # in the way of the rerun's report.html
    result = runner.invoke(app, ["sweep", str(config), "--out", str(out), "--jobs", "1"])
    assert result.exit_code == 1
    said = " ".join(result.output.split())
    assert (f"wrote points.csv, points.parquet, requests.parquet, steps.parquet, config.yaml, report.md in {out} ("
            in said)
    assert "could not write report.html (Is a directory)" in said
