"""The profiler's own outputs are written whole or not at all (`profiler.atomic_write`): a disk that
fills while a profile directory, a fit report, measured tables or `roofline_fits.yaml` is written
leaves the previous file byte for byte, no temporary beside it, and an error naming the file;
`sarathi-sim profile`, `fit` and `profile import` exit 2 with it instead of a traceback."""
from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import profiler.atomic_write as atomic_write
from experiments.cli.main import app
from profiler.atomic_write import TEMP_PREFIX, OutputWriteError, write_whole
from profiler.measured.tables import MeasuredTables
from profiler.profile_data import SIDECAR, Profile

RECORDED = Path(__file__).parent / "data" / "profiles" / "cpu-tiny-llama"
SHIPPED_H100 = Path(__file__).resolve().parents[1] / "profiler" / "data" / "measured" / "h100-sxm" / "aiconfigurator"
TINY = "profiler/data/models/tiny-llama"
FULL = f"could not be written ({os.strerror(errno.ENOSPC)})"


def _full_disk_at_flush(monkeypatch, suffix: str) -> None:
    """The disk is full when a temporary file ending in `suffix` is flushed (delayed allocation
    reports ENOSPC at fsync); the other files are written."""
    real = atomic_write._flush_to_disk

    def flush(path: Path) -> None:
        if path.name.endswith(suffix):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path)

    monkeypatch.setattr(atomic_write, "_flush_to_disk", flush)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _temporaries(folder: Path) -> list[Path]:
    return list(folder.rglob(f"{TEMP_PREFIX}*"))


def test_write_whole_keeps_the_previous_file_when_the_writer_fails_midway(tmp_path):
    target = tmp_path / "linear.csv"
    target.write_text("previous\n")

    def half_then_full(tmp: Path) -> None:
        tmp.write_text("op,num_tok")  # what a full disk leaves mid-write
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OutputWriteError) as caught:
        write_whole(target, half_then_full)
    assert str(caught.value) == f"{target}: {FULL}" and caught.value.reason == os.strerror(errno.ENOSPC)
    assert target.read_text() == "previous\n" and _temporaries(tmp_path) == []
    # Any other exception propagates unchanged, and leaves nothing either.
    with pytest.raises(KeyError):
        write_whole(target, lambda tmp: {}["missing"])
    assert target.read_text() == "previous\n" and _temporaries(tmp_path) == []
    # A write that succeeds: the content, an ordinary file's mode (mkstemp alone gives 0600).
    write_whole(tmp_path / "sub" / "new.csv", lambda tmp: tmp.write_text("op\n"))
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "sub" / "new.csv").read_text() == "op\n"
    assert stat.S_IMODE((tmp_path / "sub" / "new.csv").stat().st_mode) == 0o666 & ~mask


def test_the_temporary_carries_the_targets_suffix_unless_told(tmp_path):
    seen = []
    write_whole(tmp_path / "t.csv.gz", lambda tmp: seen.append(tmp.name) or tmp.write_bytes(b""))
    write_whole(tmp_path / "e.zip", lambda tmp: seen.append(tmp.name) or tmp.write_bytes(b""), temp_suffix=".tmp")
    assert seen[0].startswith(TEMP_PREFIX) and seen[0].endswith(".gz")  # pandas infers compression from it
    assert seen[1].endswith(".tmp")


def test_a_profile_save_that_fails_midway_keeps_the_previous_profile(tmp_path, monkeypatch):
    out = tmp_path / "profile"
    previous = Profile.load(RECORDED)
    previous.save(out)
    before = _snapshot(out)
    doubled = Profile(previous.meta, {family: table.assign(time_median_s=table["time_median_s"] * 2)
                                      for family, table in previous.tables.items()})
    real_to_csv = pd.DataFrame.to_csv

    def full_disk_on_attention_decode(frame, path=None, *args, **kwargs):
        if path is not None and "batch_size" in frame:  # the attention_decode table
            Path(path).write_text("op,batch_si")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_to_csv(frame, path, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_csv", full_disk_on_attention_decode)
    with pytest.raises(OutputWriteError, match=f"^{out / 'attention_decode.csv'}: could not be written"):
        doubled.save(out)
    monkeypatch.undo()
    after = _snapshot(out)
    assert after["attention_decode.csv"] == before["attention_decode.csv"]
    assert after[SIDECAR] == before[SIDECAR] and _temporaries(out) == []
    reread = Profile.load(out)
    assert reread.tables["attention_decode"]["time_median_s"].tolist() == \
        previous.tables["attention_decode"]["time_median_s"].tolist()


def test_fit_on_a_full_disk_exits_2_naming_the_report_and_keeps_the_previous_one(tmp_path, monkeypatch):
    directory = tmp_path / "calibration"
    shutil.copytree(RECORDED, directory)
    (directory / "fit_report.md").write_text("the previous report\n")
    _full_disk_at_flush(monkeypatch, ".md")
    result = CliRunner().invoke(app, ["fit", str(directory)])
    assert result.exit_code == 2, result.output
    assert f"{directory / 'fit_report.md'}: {FULL}" in result.output.replace("\n", "")
    assert (directory / "fit_report.md").read_text() == "the previous report\n"
    assert _temporaries(directory) == []


def test_profile_on_a_full_disk_exits_2_naming_the_sidecar_and_keeps_the_previous_one(tmp_path, monkeypatch):
    import profiler.harness as harness

    real_grid = harness.shape_grid
    monkeypatch.setattr(harness, "shape_grid", lambda ops, limits, seed: [real_grid(ops, limits, seed)[0][:1]])
    out = tmp_path / "profile"
    out.mkdir()
    (out / SIDECAR).write_text('{"previous": true}\n')
    _full_disk_at_flush(monkeypatch, ".json")
    result = CliRunner().invoke(app, ["profile", "--model", TINY, "--budget-s", "1", "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert f"error: {out / SIDECAR}: {FULL}" in result.output.replace("\n", "")
    assert (out / SIDECAR).read_text() == '{"previous": true}\n' and _temporaries(out) == []


def test_measured_tables_on_a_full_disk_keep_the_previous_sidecar(tmp_path, monkeypatch):
    tables = MeasuredTables.load(SHIPPED_H100)
    out = tmp_path / "h100"
    tables.save(out)
    before = _snapshot(out)
    _full_disk_at_flush(monkeypatch, ".json")
    with pytest.raises(OutputWriteError, match=f"^{out / 'measured.json'}: could not be written"):
        tables.save(out)
    assert _snapshot(out) == before and _temporaries(out) == []


def test_profile_import_on_a_full_disk_exits_2_naming_the_file(tmp_path, monkeypatch):
    from tests.conftest import shared_path

    source = shared_path("profiles", "aiconfigurator", "a100_sxm")
    out = tmp_path / "a100"
    _full_disk_at_flush(monkeypatch, ".json")
    result = CliRunner().invoke(app, ["profile", "import", str(source), "--from", "aiconfigurator",
                                      "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert f"error: {out / 'measured.json'}: {FULL}" in result.output.replace("\n", "")
    assert not (out / "measured.json").exists() and _temporaries(out) == []


def test_roofline_fits_yaml_on_a_full_disk_keeps_the_previous_one(tmp_path, monkeypatch):
    import profiler.roofline_fit as roofline_fit

    (tmp_path / "aic" / "h100_sxm").mkdir(parents=True)
    monkeypatch.setattr(roofline_fit, "fit_system", lambda system_dir, device: {"system": system_dir.name, "error": {
        "gemm_mape_pct": 1.0}, "gemm_flops": 0.5, "memory_bandwidth": 0.5, "kernel_latency_us": 1.0})
    out = tmp_path / "roofline_fits.yaml"
    out.write_text("previous: true\n")
    _full_disk_at_flush(monkeypatch, ".yaml")
    with pytest.raises(OutputWriteError, match=f"^{out}: could not be written"):
        roofline_fit.main([str(tmp_path / "aic"), "--out", str(out)])
    assert out.read_text() == "previous: true\n" and _temporaries(tmp_path) == []
    monkeypatch.setattr(atomic_write, "_flush_to_disk", lambda path: None)
    assert roofline_fit.main([str(tmp_path / "aic"), "--out", str(out)]) == 0
    assert "h100-sxm:\n    system: h100_sxm\n" in out.read_text()
