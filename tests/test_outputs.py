"""Run folders (experiments/outputs.py): nothing of the user's is overwritten or deleted, names stay
inside runs/, every output is written whole or not at all (a full disk names what was not
written and keeps the finished points), and one run at a time holds a folder."""
from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from experiments import outputs
from experiments.cli.main import app
from experiments.outputs import LOCK, MANIFEST, TEMP_PREFIX, OutputFolderError, OutputWriteError, RunFolder

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()

CONFIG = """
name: guarded
trace: {kind: poisson, qps: 6, num_requests: 40, prompt_tokens: [100, 400], output_tokens: [10, 40]}
engine: {scheduler: sarathi, chunk_size: 512}
variants:
  - {engine.chunk_size: [256, 512]}
"""


def _config(folder: Path, text: str = CONFIG) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "c.yaml"
    path.write_text(text)
    return path


def _said(result) -> str:
    """The command's output with rich's line wrapping undone."""
    return " ".join(result.output.split())


def _temporaries(folder: Path) -> list[Path]:
    return [p for p in folder.rglob(f"{TEMP_PREFIX}*")]


# ----- item 7: a folder with files the tool did not write is refused ---------------------------

def test_out_dot_with_user_files_is_refused_and_left_untouched(tmp_path):
    config = _config(tmp_path / "configs")
    mine = tmp_path / "work"
    (mine / "plots").mkdir(parents=True)
    (mine / "report.md").write_text("my notes\n")
    (mine / "plots" / "figure.png").write_bytes(b"my figure")

    result = runner.invoke(app, ["sweep", str(config), "--out", str(mine)])

    assert result.exit_code == 2
    assert "holds report.md (and more), which sarathi-sim did not write" in _said(result)
    assert "choose a new --out" in _said(result)
    assert (mine / "report.md").read_text() == "my notes\n"
    assert (mine / "plots" / "figure.png").read_bytes() == b"my figure"
    assert sorted(p.name for p in mine.iterdir()) == ["plots", "report.md"]  # no lock, manifest or outputs left


def test_a_folder_holding_the_input_config_is_refused(tmp_path):
    config = _config(tmp_path / "here")
    result = runner.invoke(app, ["simulate", str(config), "--out", str(tmp_path / "here")])
    assert result.exit_code == 2
    assert "holds c.yaml, an input of this run" in _said(result)
    assert config.read_text() == CONFIG


def test_a_run_folder_holding_its_own_config_yaml_is_not_rerun_into(tmp_path):
    """config.yaml of a run is the tool's file, but run as the input it must not be overwritten."""
    config = _config(tmp_path)
    out = tmp_path / "run"
    assert runner.invoke(app, ["simulate", str(config), "--out", str(out)]).exit_code == 0
    written = (out / "config.yaml").read_text()
    result = runner.invoke(app, ["simulate", str(out / "config.yaml"), "--out", str(out)])
    assert result.exit_code == 2 and "an input of this run" in _said(result)
    assert (out / "config.yaml").read_text() == written


def test_name_with_a_path_is_a_config_error_and_nothing_is_written_outside_runs(tmp_path, monkeypatch):
    work = tmp_path / "work"
    config = _config(work, CONFIG.replace("name: guarded", "name: ../../escaped"))
    monkeypatch.chdir(work)
    result = runner.invoke(app, ["sweep", str(config)])
    assert result.exit_code == 2
    assert "name (line 2)" in _said(result) and "is not a folder name" in _said(result)
    assert not (tmp_path / "escaped").exists() and not (work / "runs").exists()
    for bad in ("a/b", "..", "."):
        result = runner.invoke(app, ["simulate", str(config), "--set", f"name={bad}"])
        assert result.exit_code == 2 and "is not a folder name" in _said(result), bad


def test_rerun_into_its_own_folder_rewrites_and_removes_only_stale_outputs(tmp_path):
    folder = tmp_path / "run"
    with RunFolder(folder) as run:
        outputs.write_text(folder / "a.txt", "one")
        outputs.write_text(folder / "plots" / "old.png", "old")
    with RunFolder(folder) as run:
        outputs.write_text(folder / "a.txt", "two")
        assert run.remove_stale() == ["plots/old.png"]
    assert (folder / "a.txt").read_text() == "two"
    assert not (folder / "plots").exists()
    assert outputs.read_manifest(folder) == ["a.txt"]
    with RunFolder(folder) as run:
        outputs.write_text(folder / "ledger.csv", "row 1\n", keep=True)  # appended to run after run
        assert not (folder / "a.txt").exists()  # the earlier run's output went before this run's first
    with RunFolder(folder) as run:
        assert run.remove_stale() == []
    outputs.write_text(folder / "trace.csv", "arrival_s\n")  # `trace convert --to` into the folder
    with RunFolder(folder) as run:
        assert run.remove_stale() == []
    assert outputs.read_manifest(folder) == ["ledger.csv", "trace.csv"]
    (folder / "notes.txt").write_text("mine")  # the user adds a file: the folder is no longer only ours
    with pytest.raises(OutputFolderError, match="holds notes.txt, which sarathi-sim did not write"):
        RunFolder(folder).__enter__()


def test_nested_run_folders_and_cache_entries_are_ours_anything_else_in_cache_is_not(tmp_path):
    folder = tmp_path / "verify"
    with RunFolder(folder):
        outputs.write_text(folder / "fidelity.md", "report")
        with RunFolder(folder / "engine"):
            outputs.write_text(folder / "engine" / "engine.json", "{}")
    (folder / ".cache").mkdir()
    (folder / ".cache" / f"{'a' * 64}.pkl").write_bytes(b"entry")
    assert outputs.foreign_files(folder) == []
    assert outputs.read_manifest(folder) == ["fidelity.md"]  # engine/ lists its own files
    (folder / "engine" / "stray.txt").write_text("x")
    (folder / ".cache" / "notes.txt").write_text("x")
    assert outputs.foreign_files(folder) == [".cache/notes.txt", "engine/stray.txt"]


# ----- item 8: whole files or none ------------------------------------------------------------

def _enospc_writer(tmp: Path) -> None:
    tmp.write_bytes(b"PAR1 half a file")  # what a full disk leaves mid-write
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp))


def test_a_failed_write_keeps_the_previous_file_and_leaves_no_partial_one(tmp_path):
    target = tmp_path / "table.parquet"
    target.write_text("previous")
    with pytest.raises(OutputWriteError) as caught:
        outputs.write_atomic(target, _enospc_writer)
    assert str(caught.value) == f"{target}: could not be written (No space left on device)"
    assert target.read_text() == "previous"
    assert _temporaries(tmp_path) == []


def test_full_disk_on_requests_parquet_names_it_and_keeps_finished_points(tmp_path, monkeypatch):
    """The disk fills while requests.parquet is written: the message names it, the exit status is
    1, no partial (or earlier, mismatched) requests.parquet is left, both points are finished in
    points.csv and in the cache, and a rerun writes it without simulating again."""
    config = _config(tmp_path)
    out = tmp_path / "run"
    assert runner.invoke(app, ["sweep", str(config), "--out", str(out), "--jobs", "1"]).exit_code == 0
    assert (out / "requests.parquet").is_file()  # the earlier run's, which must not survive beside new tables

    original = pd.DataFrame.to_parquet

    def full_disk_for_requests(frame, path, *args, **kwargs):
        if "token_times_s" in frame:  # the requests table
            _enospc_writer(Path(path))
        return original(frame, path, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_parquet", full_disk_for_requests)
    import experiments.planning.sweep as sweep_module  # cached points' files are joined, not written from frames
    from simulator.records_parquet import source_schema
    joined = sweep_module.concat_files

    def full_disk_joining_requests(sources, path):
        if "token_times_s" in source_schema(sources[0]).names:
            _enospc_writer(Path(path))
        return joined(sources, path)

    monkeypatch.setattr(sweep_module, "concat_files", full_disk_joining_requests)
    result = runner.invoke(app, ["sweep", str(config), "--out", str(out), "--jobs", "1",
                                 "--set", "slo={tbt_p99_s: 0.5}"])
    assert result.exit_code == 1
    output = _said(result)
    assert f"could not write requests.parquet (No space left on device) in {out}" in output
    assert "2 of 2 points finished" in output
    assert not (out / "requests.parquet").exists()
    assert _temporaries(out) == []
    points = pd.read_csv(out / "points.csv")
    assert list(points["completed"]) == [40, 40] and "error" not in points
    assert list(points["slo_met"]) == [True, True]
    assert "requests.parquet" not in outputs.read_manifest(out)

    monkeypatch.setattr(pd.DataFrame, "to_parquet", original)
    monkeypatch.setattr(sweep_module, "concat_files", joined)
    again = runner.invoke(app, ["sweep", str(config), "--out", str(out), "--jobs", "1",
                                "--set", "slo={tbt_p99_s: 0.5}"])
    assert again.exit_code == 0
    assert len(pd.read_parquet(out / "requests.parquet")) == 80
    assert pd.read_csv(out / "points.csv")["cached"].all()


def test_full_disk_in_a_report_plot_names_the_plot_and_the_report_files(tmp_path, monkeypatch):
    config = _config(tmp_path)
    out = tmp_path / "run"
    original = outputs.save_figure

    def full_disk_for_cdf(fig, path, **kwargs):
        if Path(path).name == "tbt_cdf.png":
            return outputs.write_atomic(path, _enospc_writer)
        return original(fig, path, **kwargs)

    monkeypatch.setattr("experiments.planning.report.save_figure", full_disk_for_cdf)
    result = runner.invoke(app, ["sweep", str(config), "--out", str(out), "--jobs", "1"])
    assert result.exit_code == 1
    output = _said(result)
    assert "could not write plots/tbt_cdf.png (No space left on device); report.md, report.html " \
           "(not written after plots/tbt_cdf.png failed)" in output
    assert (out / "points.csv").is_file() and (out / "requests.parquet").is_file()
    assert not (out / "report.md").exists() and _temporaries(out) == []


def test_a_cache_that_cannot_be_written_does_not_fail_the_points(tmp_path, monkeypatch):
    config = _config(tmp_path)
    out = tmp_path / "run"

    def full_disk(value, handle, **_):
        handle.write(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("experiments.planning.results_cache.encode_entry", full_disk)
    result = runner.invoke(app, ["sweep", str(config), "--out", str(out), "--jobs", "1"])
    assert result.exit_code == 0, result.output
    assert "could not be written for 2 of 2 points (No space left on device)" in _said(result)
    points = pd.read_csv(out / "points.csv")
    assert list(points["completed"]) == [40, 40] and "error" not in points
    assert list((out / ".cache").iterdir()) == []


# ----- item 9: one run at a time --------------------------------------------------------------

HOLDER = textwrap.dedent("""
    import sys, time
    from experiments.outputs import RunFolder
    with RunFolder(sys.argv[1]):
        print("holding", flush=True)
        time.sleep(120)
""")


def test_a_second_run_into_a_held_folder_stops_at_once_naming_the_holder(tmp_path):
    config = _config(tmp_path)
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        started = time.monotonic()
        result = runner.invoke(app, ["sweep", str(config), "--out", str(out)])
        assert time.monotonic() - started < 20  # stops, does not wait for the holder (120 s)
        assert result.exit_code == 2
        assert f"--out {out}: another sarathi-sim run (pid {holder.pid}) is writing this folder" in \
            _said(result)
        assert not (out / "points.csv").exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # A killed holder's lock goes with it: the next run proceeds.
    assert runner.invoke(app, ["sweep", str(config), "--out", str(out), "--jobs", "1"]).exit_code == 0
    assert (out / LOCK).is_file() and (out / MANIFEST).is_file()


def test_a_sweep_into_the_folder_of_a_running_sweep_is_refused_and_the_first_finishes(tmp_path):
    config = _config(tmp_path, CONFIG.replace("num_requests: 40", "num_requests: 1500"))
    out = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "experiments.cli.main", "sweep", str(config), "--out", str(out),
                              "--jobs", "1"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not _holds(out / LOCK, first.pid):
        time.sleep(0.02)
    second = runner.invoke(app, ["sweep", str(config), "--out", str(out), "--jobs", "1"])
    assert first.wait(timeout=300) == 0
    assert second.exit_code == 2
    assert f"another sarathi-sim run (pid {first.pid})" in _said(second)
    assert list(pd.read_csv(out / "points.csv")["completed"]) == [1500, 1500]


def _holds(lock: Path, pid: int) -> bool:
    try:
        return lock.read_text().strip() == str(pid)
    except OSError:
        return False


def test_a_calibration_folder_adopts_the_profilers_files_and_the_ledger_verify_appends(tmp_path):
    """`calibrate` claims its folder with adopt (the profiler writes its CSVs itself); `verify`
    later appends ledger.csv there without holding it: both stay listed, so a re-calibration into
    the same folder is allowed, while a file of the user's there is not."""
    calibration = tmp_path / "cal"
    with RunFolder(calibration, adopt=True):
        (calibration / "gemm.csv").write_text("op,m\n")  # as profiler/profile_data.py writes it
        outputs.write_text(calibration / "overhead_run.yaml", "name: x\n")
    outputs.write_text(calibration / "ledger.csv", "date\n2026-12-01\n")
    assert outputs.read_manifest(calibration) == ["gemm.csv", "ledger.csv", "overhead_run.yaml"]
    with RunFolder(calibration, adopt=True):
        pass
    (calibration / "mine.txt").write_text("x")
    with pytest.raises(OutputFolderError, match="holds mine.txt"):
        RunFolder(calibration, adopt=True).__enter__()


TINY = REPO / "tests" / "data" / "engine" / "tiny_engine.yaml"


@pytest.mark.parametrize("command", [
    ["engine", "run", str(TINY), "--dtype", "float32"],
    ["verify", str(TINY), "--run-engine"],
    ["calibrate", "--model", str(REPO / "tests" / "data" / "engine" / "tiny" / "config.json"), "--budget-s", "2"],
])
def test_engine_verify_and_calibrate_refuse_a_folder_of_the_users_before_any_work(tmp_path, command):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "results.csv").write_text("keep me\n")
    result = runner.invoke(app, command + ["--out", str(mine)])
    assert result.exit_code == 2, result.output
    assert f"--out {mine}: holds results.csv, which sarathi-sim did not write" in _said(result)
    assert sorted(p.name for p in mine.iterdir()) == ["results.csv"]


def test_a_forked_worker_does_not_hold_the_lock_of_its_killed_parent(tmp_path):
    """The sweep's worker processes are forked with the lock file open: they drop their copy, so
    a run killed while a worker lives on leaves the folder free."""
    script = textwrap.dedent("""
        import os, sys, time
        from experiments.outputs import RunFolder
        folder = RunFolder(sys.argv[1]).__enter__()
        if os.fork() == 0:  # the child speaks once it runs (its fork hooks have run by then)
            print(os.getpid(), flush=True)
            time.sleep(60)
            os._exit(0)
        time.sleep(60)
    """)
    out = tmp_path / "run"
    parent = subprocess.Popen([sys.executable, "-c", script, str(out)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    try:
        with pytest.raises(OutputFolderError, match=f"pid {parent.pid}"):
            RunFolder(out).__enter__()
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        with RunFolder(out):  # the child still runs, and does not hold the folder
            os.kill(child, 0)
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_folder_that_cannot_be_locked_is_refused_not_run_unlocked(tmp_path, monkeypatch):
    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(outputs.fcntl, "flock", no_locks)
    with pytest.raises(OutputFolderError, match=r"run: cannot be locked \(No locks available\); choose a folder on"):
        RunFolder(tmp_path / "run").__enter__()
    assert not outputs._ACTIVE


# ----- issue 30 item 7: a stopped sweep leaves no point spool files ------------------------------

@pytest.mark.parametrize("stop", [None, "Terminated", "error"])
def test_releasing_a_run_folder_removes_its_point_spool_files_however_the_run_ends(tmp_path, stop):
    # A SIGTERM'd sweep left `.tmp-sarathi-point-*` files (its points' records as they ran)
    # until the next run claimed the folder. `Terminated` is what interrupts.py raises on SIGTERM.
    from experiments.cli.interrupts import Terminated
    from experiments.point import temporary_record_file

    folder = tmp_path / "run"
    raised = {"Terminated": Terminated("SIGTERM"), "error": ValueError("a point failed")}.get(stop)
    with pytest.raises(type(raised)) if raised else contextlib.nullcontext():
        with RunFolder(folder):
            spools = [temporary_record_file(folder, 3, name) for name in ("requests", "steps")]
            cached = temporary_record_file(folder / ".cache", 0, "requests")
            assert all(p.exists() for p in spools + [cached])
            if raised:
                raise raised
    assert _temporaries(folder) == []
    assert {p.name for p in folder.iterdir()} == {MANIFEST, LOCK, ".cache"}
