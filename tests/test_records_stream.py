"""Records written to Parquet as the run goes (simulator/records_stream.py, issue 17 item 2): the
files equal the frames built at the end value for value, the summary is the same number for
number, and rows leave memory a row group at a time."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import simulator.metrics as metrics
import simulator.records as records
import simulator.step_log as step_log
from profiler import RooflineCostModel, get_device_spec, get_model_spec
from simulator.records_parquet import ParquetTokenTimes, SeriesTokenTimes, concat_files, write_in_row_groups
from simulator.records_stream import RecordFiles, RequestsStream, with_constants
from simulator.scheduler import FINISH_REASONS, SchedulerConfig, make_scheduler
from simulator.simulate import simulate
from traces import ClosedLoopWorkload, Request

COST = RooflineCostModel(get_model_spec("llama-3-8b"), get_device_spec("h100-sxm"))


def trace(n=300, qps=30.0, seed=3):
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / qps, n))
    ids = rng.permutation(n) * 3 + 5  # not 0..n-1, and not in arrival order
    return [Request(int(i), float(t), int(p), int(o)) for i, t, p, o in
            zip(ids, arrivals, rng.integers(20, 1500, n), rng.integers(1, 300, n))]


def schedulers(replicas=2):
    config = SchedulerConfig(num_gpu_blocks=3000, block_size=16, max_model_len=4096, chunk_size=256, max_num_seqs=64)
    return [make_scheduler("sarathi", config) for _ in range(replicas)]


def same_summary(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == value or (value != value and got[key] != got[key]), key


@pytest.fixture
def small_groups(monkeypatch):
    """Row groups of 32 requests / 64 steps and flushes of 16 finished requests or steps, so a
    300-request run writes many groups while it runs and replicas hand rows over out of order."""
    monkeypatch.setattr("simulator.records_stream.ROW_GROUP_ROWS", 32)
    monkeypatch.setattr(step_log, "ROW_GROUP_ROWS", 64)
    monkeypatch.setattr(step_log, "_FLUSH_STEPS", 16)
    monkeypatch.setattr(records, "_FLUSH_REQUESTS", 16)


@pytest.mark.parametrize("in_memory_tokens", [1 << 22, 0])  # numpy on the samples; the streamed percentiles
@pytest.mark.parametrize("replicas", [1, 2])
def test_streamed_files_equal_the_frames_built_at_the_end(tmp_path, monkeypatch, small_groups, replicas,
                                                          in_memory_tokens):
    monkeypatch.setattr(metrics, "_IN_MEMORY_TOKENS", in_memory_tokens)
    monkeypatch.setattr(metrics, "_GAP_CHUNK_REQUESTS", 17)  # chunks that straddle row groups
    built = simulate(trace(), schedulers(replicas), COST, trim_fraction=0.1)
    files = RecordFiles(tmp_path / "requests.parquet", tmp_path / "steps.parquet", {"point_id": 7})
    at_close, close = [], RequestsStream.close

    def spy(self):
        at_close.append((self._written, len(self._tokens)))
        return close(self)

    monkeypatch.setattr(RequestsStream, "close", spy)
    streamed = simulate(trace(), schedulers(replicas), COST, trim_fraction=0.1, record_files=files)
    [(written, waiting)] = at_close
    assert written == 288 and waiting == 300 - 288  # 9 row groups of 32 written while it ran; the rest at close

    same_summary(streamed.summary, built.summary)  # the means too: the same chunks, read back
    pd.testing.assert_frame_equal(streamed.requests, built.requests.drop(columns="token_times_s"))
    assert len(streamed.steps) == 0 and list(streamed.steps.columns) == list(built.steps.columns)
    # As a sweep would have written the frames built at the end:
    write_in_row_groups(with_constants(built.requests.copy(), {"point_id": 7}), tmp_path / "want_requests.parquet")
    write_in_row_groups(with_constants(built.steps.copy(), {"point_id": 7}), tmp_path / "want_steps.parquet")
    for name in ("requests", "steps"):
        got, want = pd.read_parquet(tmp_path / f"{name}.parquet"), pd.read_parquet(tmp_path / f"want_{name}.parquet")
        pd.testing.assert_frame_equal(got, want)
    got = pd.read_parquet(files.requests_path)
    assert got["request_id"].is_monotonic_increasing and len(got) == 300 and (got["point_id"] == 7).all()
    assert set(got["replica_id"]) == set(range(replicas))
    for times, want in zip(got["token_times_s"], built.requests["token_times_s"]):
        assert np.array_equal(times, want)
    assert pq.ParquetFile(files.requests_path).num_row_groups == math.ceil(300 / 32)
    assert pq.ParquetFile(files.steps_path).num_row_groups >= len(built.steps) // 64
    assert sorted(p.name for p in tmp_path.iterdir() if "want" not in p.name) == ["requests.parquet", "steps.parquet"]


def test_without_token_times_or_steps_the_files_hold_what_is_kept(tmp_path, small_groups):
    built = simulate(trace(), schedulers(), COST, keep_token_times=False, keep_steps=False)
    files = RecordFiles(tmp_path / "requests.parquet", None, {"point_id": 0})
    streamed = simulate(trace(), schedulers(), COST, keep_token_times=False, keep_steps=False, record_files=files)
    same_summary(streamed.summary, built.summary)
    got = pd.read_parquet(files.requests_path)
    assert "token_times_s" not in got
    pd.testing.assert_frame_equal(got.drop(columns="point_id"), built.requests)
    assert [p.name for p in tmp_path.iterdir()] == ["requests.parquet"]


def closed_loops():
    from traces.sessions import SessionWorkload

    return {"clients": lambda: ClosedLoopWorkload(6, think_time_s=0.01, prompt=[20, 900], output=[1, 120],
                                                  num_requests=200, seed=1),
            "sessions": lambda: SessionWorkload(30, 5, think_time_s=0.5, user_tokens=[20, 400], output_tokens=[5, 80],
                                                shared_prefix_tokens=64, num_prefixes=2, seed=2, session_qps=20.0)}


@pytest.mark.parametrize("kind", ["clients", "sessions"])
@pytest.mark.parametrize("replicas", [1, 2])
def test_a_closed_loop_run_writes_its_files_as_it_goes(tmp_path, monkeypatch, small_groups, kind, replicas):
    """A closed loop's ids are 0..num_requests-1 in issue order, so its rows are filed by id as
    they finish: row groups leave while it runs, and the files equal the frames built at the end."""
    workload = closed_loops()[kind]
    built = simulate(workload(), schedulers(replicas), COST, router="round_robin")
    files = RecordFiles(tmp_path / "requests.parquet", tmp_path / "steps.parquet", {"point_id": 3})
    at_close, close = [], RequestsStream.close

    def spy(self):
        at_close.append(self._written)
        return close(self)

    monkeypatch.setattr(RequestsStream, "close", spy)
    streamed = simulate(workload(), schedulers(replicas), COST, router="round_robin", record_files=files)
    n = len(built.requests)
    assert n == (200 if kind == "clients" else 150) and built.requests["request_id"].tolist() == list(range(n))
    [written] = at_close
    assert written >= n - 2 * 32  # all but the last row groups were written while the loop ran
    same_summary(streamed.summary, built.summary)
    pd.testing.assert_frame_equal(streamed.requests, built.requests.drop(columns="token_times_s"))
    assert len(streamed.steps) == 0
    write_in_row_groups(with_constants(built.requests.copy(), {"point_id": 3}), tmp_path / "want_requests.parquet")
    write_in_row_groups(with_constants(built.steps.copy(), {"point_id": 3}), tmp_path / "want_steps.parquet")
    for name in ("requests", "steps"):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / f"{name}.parquet"),
                                      pd.read_parquet(tmp_path / f"want_{name}.parquet"))
    got = pd.read_parquet(files.requests_path)
    for times, want in zip(got["token_times_s"], built.requests["token_times_s"]):
        assert np.array_equal(times, want)
    assert pq.ParquetFile(files.requests_path).num_row_groups == math.ceil(n / 32)
    assert sorted(p.name for p in tmp_path.iterdir() if "want" not in p.name) == ["requests.parquet", "steps.parquet"]


def test_a_closed_loop_without_token_times_writes_its_scalar_rows(tmp_path, small_groups):
    workload = closed_loops()["clients"]
    built = simulate(workload(), schedulers(2), COST, keep_token_times=False, keep_steps=False)
    files = RecordFiles(tmp_path / "requests.parquet", None, {"point_id": 0})
    streamed = simulate(workload(), schedulers(2), COST, keep_token_times=False, keep_steps=False, record_files=files)
    same_summary(streamed.summary, built.summary)
    pd.testing.assert_frame_equal(pd.read_parquet(files.requests_path).drop(columns="point_id"), built.requests)


def test_the_stream_files_a_closed_loop_by_its_issue_order_ids():
    workload = ClosedLoopWorkload(3, num_requests=7)
    assert RequestsStream.ids_if_streamable(workload).tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert RequestsStream.ids_if_streamable(ClosedLoopWorkload(3, num_requests=0)).tolist() == []


def rows(ids, times_per_request):
    """`RequestsStream.add`'s arguments for completed requests `ids` with these token times."""
    n = len(ids)
    columns = {name: np.zeros(n, dtype=dtype) for name, dtype in records.SCALAR_COLUMNS.items()}
    columns["request_id"] = np.asarray(ids, dtype=np.int64)
    columns["generated_tokens"] = np.array([len(t) for t in times_per_request], dtype=np.int64)
    columns["finish_reason"][:] = FINISH_REASONS.index("completed")
    flat = np.concatenate([np.asarray(t, dtype=np.float64) for t in times_per_request])
    return columns, np.zeros(n), flat, columns["generated_tokens"]


def test_the_stream_writes_a_row_group_once_its_rows_are_all_finished(tmp_path):
    stream = RequestsStream(tmp_path / "r.parquet", [4, 0, 1, 2, 3, 5], True, {"point_id": 1}, row_group_rows=2)
    stream.add(0, *rows([1, 3], [[0.1], [0.3, 0.4]]))
    assert stream._written == 0 and len(stream._tokens) == 2  # request 0 is still running
    stream.add(1, *rows([0], [[0.0, 0.5]]))
    assert stream._written == 2 and sorted(stream._tokens) == [3]  # ranks 0 and 1 went to the file
    stream.add(0, *rows([2, 5, 4], [[0.2], [], [0.6, 0.7, 0.8]]))
    assert stream._written == 6 and stream._tokens == {}
    frame = stream.close()
    assert frame["request_id"].tolist() == [0, 1, 2, 3, 4, 5] and frame["replica_id"].tolist() == [1, 0, 0, 0, 0, 0]
    got = pd.read_parquet(tmp_path / "r.parquet")
    assert got["request_id"].tolist() == [0, 1, 2, 3, 4, 5] and got["point_id"].tolist() == [1] * 6
    assert [t.tolist() for t in got["token_times_s"]] == [[0.0, 0.5], [0.1], [0.2], [0.3, 0.4], [0.6, 0.7, 0.8], []]
    assert pq.ParquetFile(tmp_path / "r.parquet").num_row_groups == 3


def test_the_stream_refuses_unknown_repeated_and_missing_requests(tmp_path):
    stream = RequestsStream(tmp_path / "r.parquet", [0, 1, 2], True)
    with pytest.raises(RuntimeError, match="not in the trace or finished twice"):
        stream.add(0, *rows([9], [[0.1]]))
    stream.add(0, *rows([1], [[0.1]]))
    with pytest.raises(RuntimeError, match="not in the trace or finished twice"):
        stream.add(0, *rows([1], [[0.1]]))
    with pytest.raises(RuntimeError, match="request 0 never finished"):
        stream.close()
    with pytest.raises(ValueError, match="unique"):
        RequestsStream(tmp_path / "x.parquet", [0, 0], True)
    assert RequestsStream.ids_if_streamable([Request(1, 0.0, 5, 5), Request(1, 1.0, 5, 5)]) is None


def test_token_times_read_back_in_the_chunks_of_the_frame(tmp_path):
    frame = pd.DataFrame({"token_times_s": pd.Series([np.arange(i, dtype=np.float64) + i for i in range(50)])})
    write_in_row_groups(frame, tmp_path / "t.parquet", row_group_rows=8)
    picked = np.array([0, 3, 4, 9, 10, 11, 15, 16, 30, 49])
    for size in (1, 3, 4, 100):
        got = list(ParquetTokenTimes(tmp_path / "t.parquet").chunks(picked, size))
        want = list(SeriesTokenTimes(frame["token_times_s"]).chunks(picked, size))
        assert len(got) == len(want) == math.ceil(picked.size / size)
        for (flat, lengths), (want_flat, want_lengths) in zip(got, want):
            assert np.array_equal(flat, want_flat) and np.array_equal(lengths, want_lengths)
    flat, lengths = next(ParquetTokenTimes(tmp_path / "t.parquet").chunks(np.array([3, 9]), 2))
    assert lengths.tolist() == [3, 9] and flat.tolist() == [3.0, 4.0, 5.0] + [float(9 + k) for k in range(9)]


def test_concat_files_keeps_every_row_in_order(tmp_path):
    parts = [pd.DataFrame({"a": np.arange(k * 10, k * 10 + n), "b": np.full(n, 0.5 * k)}) for k, n in enumerate([5, 0, 7])]
    for k, part in enumerate(parts):
        write_in_row_groups(part, tmp_path / f"p{k}.parquet", row_group_rows=3)
    concat_files([tmp_path / f"p{k}.parquet" for k in range(3)], tmp_path / "all.parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "all.parquet"), pd.concat(parts, ignore_index=True))


# ----- a sweep's points write their records as they run (run_sweep(records_dir=)) --------------

SWEEP = {
    "name": "streamed", "cost_model": "roofline",
    "trace": {"kind": "poisson", "qps": 8, "num_requests": 120, "prompt_tokens": [100, 1500], "output_tokens": [20, 200]},
    "engine": {"scheduler": "sarathi", "chunk_size": 512},
}


def sweep_points(token_times=(True, True)):
    return [{**SWEEP, "engine": {"scheduler": "sarathi", "chunk_size": chunk}, "output": {"token_times": kept}}
            for chunk, kept in zip((256, 1024), token_times)]


def write_sweep(points, out, records: bool, cache_dir=None):
    from experiments.outputs import RunFolder
    from experiments.planning.sweep import remove_point_files, run_sweep, sweep_requests, write_results

    with RunFolder(out) as folder:
        results = run_sweep(points, jobs=1, cache_dir=cache_dir, records_dir=folder.path if records else None)
        if records:
            names = sorted(p.name for p in out.iterdir() if p.name.startswith(".tmp-sarathi-point-"))
            assert len(names) == 2 * len(results)  # requests + steps each, computed or copied from the cache
        write_results(results, folder)
        requests = sweep_requests(results)
        remove_point_files(results)
    return results, requests


@pytest.mark.parametrize("token_times", [(True, True), (True, False)])  # joined file by file; through pd.concat
def test_a_sweep_writing_as_it_runs_writes_the_same_tables(tmp_path, token_times):
    points = sweep_points(token_times)
    built, built_requests = write_sweep(points, tmp_path / "built", records=False)
    streamed, streamed_requests = write_sweep(points, tmp_path / "streamed", records=True)
    assert all(r.files for r in streamed) and not any(r.files for r in built)
    assert (tmp_path / "built" / "points.csv").read_bytes() == (tmp_path / "streamed" / "points.csv").read_bytes()
    for name in ("requests", "steps"):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "streamed" / f"{name}.parquet"),
                                      pd.read_parquet(tmp_path / "built" / f"{name}.parquet"))
    pd.testing.assert_frame_equal(streamed_requests, built_requests)  # what the report gets
    assert len(built_requests) == 240 and not [p for p in (tmp_path / "streamed").iterdir() if "tmp" in p.name]


def test_a_point_cached_from_its_files_reads_back_as_computed(tmp_path):
    points = sweep_points()
    cache = tmp_path / "cache"
    first, _ = write_sweep(points, tmp_path / "first", records=True, cache_dir=cache)
    again, _ = write_sweep(points, tmp_path / "again", records=True, cache_dir=cache)
    assert [r.row["cached"] for r in first] == [False, False] and [r.row["cached"] for r in again] == [True, True]
    assert all(r.files for r in again)  # from the cache: its files copied, as a computed point leaves them
    assert all("token_times_s" not in r.requests and len(r.steps) == 0 for r in again)
    for fresh, cached in zip(first, again):
        pd.testing.assert_frame_equal(cached.requests, fresh.requests)
    first_points = pd.read_csv(tmp_path / "first" / "points.csv").drop(columns="cached")
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "again" / "points.csv").drop(columns="cached"), first_points)
    for name in ("requests", "steps"):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "again" / f"{name}.parquet"),
                                      pd.read_parquet(tmp_path / "first" / f"{name}.parquet"))


def test_a_failed_point_run_leaves_no_record_file(tmp_path, monkeypatch):
    import experiments.point as point_module
    from experiments.config import SweepConfig

    def broken(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", "some/input.csv")

    monkeypatch.setattr(point_module, "simulate", broken)
    config = SweepConfig.model_validate(SWEEP)
    for temporary in (False, True):
        with pytest.raises(FileNotFoundError, match="some/input.csv"):  # the run's own error, not a write failure
            point_module.run_point(config, 3, records_dir=tmp_path / "out", temporary=temporary)
    assert list((tmp_path / "out").iterdir()) == []


def test_a_disaggregated_point_writes_its_frames_into_the_files(tmp_path):
    import yaml

    from experiments.config import SweepConfig
    from experiments.point import run_point

    config = SweepConfig.model_validate(yaml.safe_load("""
        cost_model: roofline
        trace: {kind: profile, name: azure-conv, qps: 4, num_requests: 40, seed: 0}
        engine: {scheduler: sarathi, chunk_size: 512}
        cluster: {prefill: {engine: {chunk_size: 2048}}, link: {bandwidth_gb_s: 50}}
    """))
    built = run_point(config, 2)
    written = run_point(config, 2, records_dir=tmp_path)
    assert written.files == {"requests": tmp_path / "requests.parquet", "steps": tmp_path / "steps.parquet"}
    assert written.row == built.row
    pd.testing.assert_frame_equal(written.requests, built.requests.drop(columns="token_times_s"))
    for name in ("requests", "steps"):
        want = tmp_path / f"want_{name}.parquet"
        write_in_row_groups(getattr(built, name), want)
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / f"{name}.parquet"), pd.read_parquet(want))
    assert len(pd.read_parquet(tmp_path / "requests.parquet")) == 40


def test_the_finished_prefix_is_found_across_scan_windows(tmp_path, monkeypatch):
    monkeypatch.setattr("simulator.records_stream._SCAN", 2)
    stream = RequestsStream(tmp_path / "r.parquet", range(10), True, row_group_rows=4)
    stream.add(0, *rows([3, 4, 5, 6, 7, 9], [[0.3]] * 6))
    assert stream._ready == 0 and stream._written == 0
    stream.add(0, *rows([0, 1, 2], [[0.1]] * 3))
    assert stream._ready == 8 and stream._written == 8  # 8 (unfinished) stops it; two row groups out
    stream.add(0, *rows([8], [[0.8]]))
    assert stream._ready == 10
    assert stream.close()["request_id"].tolist() == list(range(10))
    assert pd.read_parquet(tmp_path / "r.parquet")["request_id"].tolist() == list(range(10))


def test_a_run_that_fails_leaves_no_step_part_files(tmp_path, monkeypatch, small_groups):
    seen = []

    def fail(self):
        seen.extend(sorted(p.name for p in tmp_path.iterdir()))
        raise RuntimeError("request 5 never finished")

    monkeypatch.setattr(RequestsStream, "close", fail)
    files = RecordFiles(tmp_path / "requests.parquet", tmp_path / "steps.parquet")
    with pytest.raises(RuntimeError, match="never finished"):
        simulate(trace(), schedulers(2), COST, record_files=files)
    assert seen == ["requests.parquet", "steps.parquet.replica-0.part", "steps.parquet.replica-1.part"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["requests.parquet"]  # the caller's own file


def test_a_streamed_file_is_copied_as_concat_files_would_write_it(tmp_path):
    """Issue 34: a stream's file names its list items as they read back, so `concat_files` of it
    alone rewrites it byte for byte and a sweep of one point copies it (`rewrites_as_itself`);
    a file pandas wrote ("item") is not such a file, and is joined by `concat_files` as before."""
    import filecmp

    from simulator.records import SCALAR_COLUMNS
    from simulator.records_parquet import rewrites_as_itself

    stream = RequestsStream(tmp_path / "r.parquet", [3, 1, 2], keep_token_times=True, row_group_rows=2)
    columns = {name: np.zeros(3, dtype=dtype) for name, dtype in SCALAR_COLUMNS.items()}
    columns["request_id"] = np.array([2, 1, 3])
    stream.add(0, columns, np.full(3, 0.5), np.array([1.0, 2.0, 3.0, 4.0, 5.0]), np.array([2, 0, 3]))
    stream.close()
    concat_files([tmp_path / "r.parquet"], tmp_path / "joined.parquet")
    assert rewrites_as_itself(tmp_path / "r.parquet")
    assert filecmp.cmp(tmp_path / "r.parquet", tmp_path / "joined.parquet", shallow=False)
    assert pd.read_parquet(tmp_path / "r.parquet")["token_times_s"].map(list).tolist() == [[], [1.0, 2.0], [3.0, 4.0, 5.0]]
    write_in_row_groups(pd.read_parquet(tmp_path / "r.parquet"), tmp_path / "pandas.parquet")
    assert not rewrites_as_itself(tmp_path / "pandas.parquet")
