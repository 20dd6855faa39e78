"""A sweep served a point from the results cache gets its record files copied out of the entry
(results_cache.RecordsFolder), as a computed point leaves them, never its token times or steps
as frames: the files equal a fresh run's value for value, with the sweep's point_id, and a bad
entry or an unwritable folder leaves no file."""
from __future__ import annotations

import zipfile

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from experiments.config import SweepConfig
from experiments.outputs import RunFolder
from experiments.planning import results_cache
from experiments.planning.results_cache import RecordsFolder, ResultsCache, cache_key
from experiments.planning.sweep import remove_point_files, run_sweep, write_results
from experiments.point import PointResult
from simulator.records_parquet import copy_with_constants, write_in_row_groups

POINT = {
    "name": "cached-files", "cost_model": "roofline",
    "trace": {"kind": "poisson", "qps": 8, "num_requests": 90, "prompt_tokens": [100, 1500], "output_tokens": [20, 200]},
    "engine": {"scheduler": "sarathi", "chunk_size": 512},
}
CLOSED = {**POINT, "trace": {"kind": "closed_loop", "clients": 6, "num_requests": 80, "prompt_tokens": [50, 800],
                             "output_tokens": [5, 120]}}


def sweep(points, out, cache_dir, point_ids=None):
    """run_sweep + write_results as `sarathi-sim sweep` runs them; the results and the leftover
    temporaries of the folder once done."""
    with RunFolder(out) as folder:
        results = run_sweep(points, jobs=1, cache_dir=cache_dir, records_dir=folder.path, point_ids=point_ids)
        write_results(results, folder)
        remove_point_files(results)
    return results, sorted(p.name for p in out.iterdir() if p.name.startswith(".tmp"))


def tables(out):
    points = pd.read_csv(out / "points.csv").drop(columns="cached")
    return points, {name: pd.read_parquet(out / f"{name}.parquet") for name in ("requests", "steps")}


@pytest.mark.parametrize("point_ids", [None, [7, 3]])  # the stored point ids, or others: renumbered
def test_cached_points_write_the_files_a_fresh_run_writes(tmp_path, point_ids):
    points = [{**POINT, "output": {"token_times": True}}, {**CLOSED, "output": {"steps": False}}]
    cache = tmp_path / "cache"
    first, _ = sweep(points, tmp_path / "first", cache)
    again, left = sweep(points, tmp_path / "again", cache, point_ids)
    fresh, _ = sweep(points, tmp_path / "fresh", None, point_ids)
    assert [r.row["cached"] for r in first] == [False, False] and [r.row["cached"] for r in again] == [True, True]
    assert [sorted(r.files) for r in again] == [["requests", "steps"], ["requests"]]  # point 1 kept no steps
    assert all("token_times_s" not in r.requests and len(r.steps) == 0 for r in again) and left == []
    want_points, want = tables(tmp_path / "fresh")
    got_points, got = tables(tmp_path / "again")
    pd.testing.assert_frame_equal(got_points, want_points)
    for name in ("requests", "steps"):
        pd.testing.assert_frame_equal(got[name], want[name])
    ids = point_ids or [0, 1]
    assert got["requests"]["point_id"].tolist() == [ids[0]] * 90 + [ids[1]] * 80
    assert set(got["steps"]["point_id"]) == {ids[0]}
    for cached, computed in zip(again, fresh):
        pd.testing.assert_frame_equal(cached.requests, computed.requests)
        assert list(cached.steps.columns) == list(computed.steps.columns)


def stored_entry(tmp_path):
    """A cache holding the POINT's entry; (cache, key, the entry's point result)."""
    config = SweepConfig.model_validate(POINT)
    cache = ResultsCache(tmp_path / "cache")
    cache.directory.mkdir()
    results, _ = sweep([POINT], tmp_path / "first", cache.directory)
    return cache, cache_key("point", config, 0.0), results[0]


def test_a_copied_file_is_the_stored_one_byte_for_byte_in_small_pieces(tmp_path, monkeypatch):
    cache, key, _ = stored_entry(tmp_path)
    monkeypatch.setattr(results_cache, "_COPY_BYTES", 1000)  # many pieces per file
    value = cache.get(key, records=RecordsFolder(tmp_path / "run", 0))
    with zipfile.ZipFile(cache.path(key)) as archive:
        for name in ("requests", "steps"):
            assert value.files[name].read_bytes() == archive.read(f"{name}.parquet")
            assert value.files[name].parent == tmp_path / "run" and value.files[name].name.startswith(".tmp-")
    assert len(value.requests) == value.row["num_requests"] == 90


def corrupt(path, member):
    """Flip one byte inside `member`'s stored data (its CRC no longer matches)."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(member)
    data = bytearray(path.read_bytes())
    at = info.header_offset + 30 + len(info.filename) + len(info.extra) + info.file_size // 2
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_corrupt_entry_is_recomputed_and_leaves_no_file(tmp_path, capsys):
    cache, key, _ = stored_entry(tmp_path)
    corrupt(cache.path(key), "requests.parquet")
    run = tmp_path / "run"
    assert cache.get(key, records=RecordsFolder(run, 0)) is None
    assert "is not used (not a readable entry (BadZipFile: Bad CRC-32" in capsys.readouterr().err
    assert list(run.iterdir()) == []
    results, left = sweep([POINT], tmp_path / "again", cache.directory)
    assert results[0].row["cached"] is False and left == []


def test_an_entry_whose_requests_miss_rows_is_recomputed(tmp_path, capsys):
    cache, key, computed = stored_entry(tmp_path)
    short = PointResult({**computed.row}, computed.requests.iloc[:10], computed.steps)
    cache.put(key, short)
    assert cache.get(key, records=RecordsFolder(tmp_path / "run", 0)) is None
    assert "its requests file holds 10 rows, its row says 90" in capsys.readouterr().err
    assert list((tmp_path / "run").iterdir()) == []


def test_a_run_folder_that_cannot_be_written_fails_the_point_not_the_entry(tmp_path, capsys):
    cache, key, _ = stored_entry(tmp_path)
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    with pytest.raises(OSError):
        cache.get(key, records=RecordsFolder(blocked / "run", 0))
    assert "not used" not in capsys.readouterr().err and cache.path(key).exists()
    assert cache.get(key, records=RecordsFolder(tmp_path / "run", 0)).files  # still served


def test_copy_with_constants_sets_the_column_row_group_by_row_group(tmp_path):
    frame = pd.DataFrame({"point_id": np.full(7, 4, dtype=np.int64), "x": np.arange(7) * 0.5,
                          "t": pd.Series([np.arange(i, dtype=np.float64) for i in range(7)], dtype=object)})
    write_in_row_groups(frame, tmp_path / "a.parquet", row_group_rows=3)
    copy_with_constants(tmp_path / "a.parquet", tmp_path / "b.parquet", {"point_id": 9})
    got = pd.read_parquet(tmp_path / "b.parquet")
    assert got["point_id"].tolist() == [9] * 7 and got["point_id"].dtype == np.int64
    pd.testing.assert_frame_equal(got.drop(columns="point_id"), pd.read_parquet(tmp_path / "a.parquet").drop(columns="point_id"))
    assert [pq.ParquetFile(tmp_path / "b.parquet").metadata.row_group(i).num_rows for i in range(3)] == [3, 3, 1]
    write_in_row_groups(frame.iloc[:0], tmp_path / "empty.parquet")
    copy_with_constants(tmp_path / "empty.parquet", tmp_path / "c.parquet", {"point_id": 9})
    assert len(pd.read_parquet(tmp_path / "c.parquet")) == 0
    with pytest.raises(KeyError, match="no column nope"):
        copy_with_constants(tmp_path / "a.parquet", tmp_path / "d.parquet", {"nope": 1})
