"""A sweep's workers write their points' records into the run folder when they see it, or ship
them back as bytes that land there (experiments/planning/records_spool.py): the tables are the
same either way, and a failure leaves no file."""
from __future__ import annotations

from contextlib import contextmanager

import pandas as pd
import pytest

from experiments.config import SweepConfig
from experiments.outputs import RunFolder
from experiments.planning import sweep as sweep_module
from experiments.planning.records_spool import RecordsSpool, Shipped, land, records_spool
from experiments.planning.sweep import remove_point_files, run_sweep, write_results

POINT = {
    "name": "spool", "cost_model": "roofline",
    "trace": {"kind": "poisson", "qps": 8, "num_requests": 70, "prompt_tokens": [100, 1500], "output_tokens": [20, 200]},
    "engine": {"scheduler": "sarathi", "chunk_size": 512},
}
POINTS = [POINT, {**POINT, "engine": {"scheduler": "sarathi", "chunk_size": 256}, "output": {"steps": False}}]


def test_a_worker_writes_into_the_folder_only_where_its_marker_is(tmp_path):
    assert RecordsSpool(tmp_path).visible_path() == tmp_path  # local workers
    with records_spool(tmp_path, "ray") as spool:
        assert spool.path == tmp_path.resolve() and spool.marker.startswith(".tmp-")
        assert (tmp_path / spool.marker).read_text() == spool.marker
        assert spool.visible_path() == tmp_path.resolve()
        assert RecordsSpool(tmp_path / "elsewhere", spool.marker).visible_path() is None  # another node's path
        (tmp_path / spool.marker).write_text("someone else's")
        assert spool.visible_path() is None
    assert list(tmp_path.iterdir()) == []  # the marker is removed with the block
    with records_spool(None, "ray") as spool:
        assert spool is None


def sweep(out, shipped: bool, monkeypatch, cache_dir=None):
    """The POINTS swept into `out` (inline), their workers seeing the folder or not."""
    if shipped:  # a Ray worker on another node: its marker is not in its view of the folder
        @contextmanager
        def unseen(records_dir, backend):
            yield RecordsSpool(records_dir, ".tmp-sarathi-records-spool-not-here")

        monkeypatch.setattr(sweep_module, "records_spool", unseen)
    with RunFolder(out) as folder:
        results = run_sweep(POINTS, jobs=1, records_dir=folder.path, cache_dir=cache_dir)
        written = sorted(p.name for p in out.iterdir() if p.name.startswith(".tmp-sarathi-point-"))
        write_results(results, folder)
        remove_point_files(results)
    monkeypatch.undo()
    return results, written


@pytest.mark.parametrize("cached", [False, True])
def test_shipped_records_land_as_the_files_a_worker_writes(tmp_path, monkeypatch, cached):
    cache = tmp_path / "cache" if cached else None
    if cached:
        sweep(tmp_path / "fill", False, monkeypatch, cache)
    seen, _ = sweep(tmp_path / "seen", False, monkeypatch, cache)
    shipped, written = sweep(tmp_path / "shipped", True, monkeypatch, cache)
    assert [r.row.get("cached") for r in shipped] == [cached, cached]
    assert len(written) == 3 and [sorted(r.files) for r in shipped] == [["requests", "steps"], ["requests"]]
    assert all("token_times_s" not in r.requests for r in shipped)
    assert (tmp_path / "shipped" / "points.csv").read_bytes() == (tmp_path / "seen" / "points.csv").read_bytes()
    for name in ("requests", "steps"):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "shipped" / f"{name}.parquet"),
                                      pd.read_parquet(tmp_path / "seen" / f"{name}.parquet"))
    assert len(pd.read_parquet(tmp_path / "shipped" / "requests.parquet")) == 140
    assert not [p for p in (tmp_path / "shipped").iterdir() if p.name.startswith(".tmp")]


def test_a_worker_that_cannot_see_the_folder_ships_its_file_bytes(tmp_path):
    config = SweepConfig.model_validate(POINT)
    value = sweep_module._safe_run(config, 4, None, RecordsSpool(tmp_path / "run", ".tmp-sarathi-x"))
    assert isinstance(value, Shipped) and sorted(value.files) == ["requests", "steps"]
    assert value.files["requests"][:4] == b"PAR1" and value.result.files == {}
    landed = land(value, tmp_path / "run", 4)
    assert sorted(landed.files) == ["requests", "steps"] and value.files == {}
    requests = pd.read_parquet(landed.files["requests"])
    assert len(requests) == 70 and (requests["point_id"] == 4).all() and "token_times_s" in requests


def test_shipped_files_that_cannot_land_fail_the_point_and_leave_nothing(tmp_path):
    config = SweepConfig.model_validate(POINT)
    value = sweep_module._safe_run(config, 2, None, RecordsSpool(tmp_path / "run", ".tmp-sarathi-x"))
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    failed = sweep_module._landed(value, config, 2, blocked / "run")
    assert failed.files == {} and failed.row["error"].startswith(("FileExistsError", "NotADirectoryError"))
    run = tmp_path / "run"
    run.mkdir()
    value = sweep_module._safe_run(config, 2, None, RecordsSpool(tmp_path / "run", ".tmp-sarathi-x"))
    value.files["steps"] = None  # the second file cannot be written: the first is removed too
    with pytest.raises(TypeError):
        land(value, run, 2)
    assert list(run.iterdir()) == []


@pytest.mark.slow
def test_ray_workers_write_into_the_folder_they_see(tmp_path):
    pytest.importorskip("ray")
    with RunFolder(tmp_path / "local") as folder:
        local = run_sweep(POINTS, jobs=2, records_dir=folder.path)
        write_results(local, folder)
        remove_point_files(local)
    with RunFolder(tmp_path / "ray") as folder:
        on_ray = run_sweep(POINTS, backend="ray", records_dir=folder.path)
        assert all(r.files and all(p.parent == folder.path.resolve() for p in r.files.values()) for r in on_ray)
        write_results(on_ray, folder)
        remove_point_files(on_ray)
    assert (tmp_path / "ray" / "points.csv").read_bytes() == (tmp_path / "local" / "points.csv").read_bytes()
    for name in ("requests", "steps"):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "ray" / f"{name}.parquet"),
                                      pd.read_parquet(tmp_path / "local" / f"{name}.parquet"))
    assert not [p for p in (tmp_path / "ray").iterdir() if p.name.startswith(".tmp")]
