"""A disaggregated (cluster) run writing its records as it goes (simulator/disaggregated.py,
`simulate_disaggregated(record_files=)`, issue 17 item 2): the files equal the frames built at the
end value for value and in the same row order (plain pools, DP pools in lockstep and not, a
closed loop, without token times or steps), row groups leave while it runs, and the summary
(the per-pool utilisation and KV usage included) is the same number for number."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import simulator.disaggregated as disaggregated
import simulator.disaggregated_records as disaggregated_records
import simulator.records as records
import simulator.step_log as step_log
from profiler import RooflineCostModel, get_device_spec, get_model_spec
from simulator.disaggregated import KvLink, Pool, simulate_disaggregated
from simulator.pricing import StepPricer
from simulator.records_parquet import write_in_row_groups
from simulator.records_stream import RecordFiles, with_constants
from simulator.scheduler import SchedulerConfig, make_scheduler
from tests.test_records_stream import same_summary, trace  # a 300-request trace, ids not 0..n-1
from traces import ClosedLoopWorkload, Request

COST = RooflineCostModel(get_model_spec("llama-3-8b"), get_device_spec("h100-sxm"))
KV_BYTES = 131072  # llama-3-8b, bf16, TP1: 2 × 32 layers × 8 KV heads × 128 × 2 bytes
LINK = KvLink(50e9, 1e-4)


class LockstepCost:
    """A mixture of experts' DP step (`dp_step_s`, ranks in lockstep): 4 ms + 10 µs per query
    token over every rank; a step of one rank alone: the roofline's."""

    def predict_step_s(self, query_tokens, context_tokens, is_prefill) -> float:
        return COST.predict_step_s(query_tokens, context_tokens, is_prefill)

    def dp_step_s(self, batches) -> float:
        return 0.004 + 1e-5 * sum(float(np.sum(b[0])) for b in batches)


def schedulers(n, num_gpu_blocks=3000):
    config = SchedulerConfig(num_gpu_blocks=num_gpu_blocks, block_size=16, max_model_len=4096, chunk_size=256,
                             max_num_seqs=64)
    return [make_scheduler("sarathi", config) for _ in range(n)]


def pools(kind):
    """(prefill, decode) of a layout: 2P2D; a DP2 MoE decode instance (lockstep); a dense DP2 one."""
    if kind == "2p2d":
        return Pool(schedulers(2), StepPricer(COST)), Pool(schedulers(2), StepPricer(COST))
    cost = LockstepCost() if kind == "moe_dp2" else COST
    return Pool(schedulers(1), StepPricer(COST)), Pool(schedulers(4), StepPricer(cost), data_parallel_size=2)


@pytest.fixture
def small_groups(monkeypatch):
    """Row groups of 32 requests / 64 steps, flushes of 16: a 300-request run writes many row
    groups while it runs, and ranks hand rows over out of order."""
    monkeypatch.setattr("simulator.records_stream.ROW_GROUP_ROWS", 32)
    monkeypatch.setattr(step_log, "ROW_GROUP_ROWS", 64)
    monkeypatch.setattr(step_log, "_FLUSH_STEPS", 16)
    monkeypatch.setattr(records, "_FLUSH_REQUESTS", 16)


def spy_close(monkeypatch) -> list:
    """Records (rows written, rows waiting with their token times) when the stream closes."""
    at_close, close = [], disaggregated_records.ClusterRequestsStream.close

    def spy(self):
        at_close.append((self._written, len(self._tokens)))
        return close(self)

    monkeypatch.setattr(disaggregated_records.ClusterRequestsStream, "close", spy)
    return at_close


def assert_files_are_the_frames(tmp_path, built, files, point_id=7):
    """The files hold the frames built at the end, with `point_id` first, as a sweep wrote them."""
    for name, frame in (("requests", built.requests), ("steps", built.steps)):
        want = tmp_path / f"want_{name}.parquet"
        write_in_row_groups(with_constants(frame.copy(), {"point_id": point_id}), want)
        got_table = pq.read_table(getattr(files, f"{name}_path"))
        assert got_table.equals(pq.read_table(want), check_metadata=True), name  # schema and pandas metadata too
        pd.testing.assert_frame_equal(pd.read_parquet(getattr(files, f"{name}_path")), pd.read_parquet(want))


@pytest.mark.parametrize("kind", ["2p2d", "moe_dp2", "dense_dp2"])
def test_streamed_cluster_files_equal_the_frames_built_at_the_end(tmp_path, monkeypatch, small_groups, kind):
    built = simulate_disaggregated(trace(), *pools(kind), LINK, KV_BYTES, trim_fraction=0.1)
    at_close = spy_close(monkeypatch)
    files = RecordFiles(tmp_path / "requests.parquet", tmp_path / "steps.parquet", {"point_id": 7})
    streamed = simulate_disaggregated(trace(), *pools(kind), LINK, KV_BYTES, trim_fraction=0.1, record_files=files)
    [(written, waiting)] = at_close
    assert written == 288 and waiting == 300 - 288  # 9 row groups of 32 written while it ran; the rest at close
    assert pq.ParquetFile(files.requests_path).num_row_groups == math.ceil(300 / 32)

    same_summary(streamed.summary, built.summary)
    assert not math.isnan(streamed.summary["decode_utilization"]) and streamed.summary["kv_transfer_bytes"] > 0
    pd.testing.assert_frame_equal(streamed.requests, built.requests.drop(columns="token_times_s"))
    assert len(streamed.steps) == 0 and list(streamed.steps.columns) == list(built.steps.columns)
    assert_files_are_the_frames(tmp_path, built, files)
    got = pd.read_parquet(files.requests_path)
    assert got["request_id"].is_monotonic_increasing and len(got) == 300
    # A decoded request's token times start with its prefill's first token, one per generated token.
    decoded = got[got["decode_replica_id"] >= 0]
    assert len(decoded) > 250 and (decoded["replica_id"] == decoded["decode_replica_id"]).all()
    for times, first, generated in zip(decoded["token_times_s"], decoded["first_token_s"], decoded["generated_tokens"]):
        assert times[0] == first and len(times) == generated
    assert ((decoded["kv_transfer_start_s"] >= decoded["first_token_s"]).all()
            and (decoded["kv_transfer_end_s"] > decoded["kv_transfer_start_s"]).all())
    steps = pd.read_parquet(files.steps_path)
    assert steps["replica_id"].is_monotonic_increasing  # the ranks' parts joined in replica order
    assert sorted(p.name for p in tmp_path.iterdir() if "want" not in p.name) == ["requests.parquet", "steps.parquet"]


def test_the_hand_worked_dp2_moe_run_reads_back_from_the_files(tmp_path):
    """tests/test_disaggregated_dp.py's hand-worked DP2 MoE decode run (A: 100 + 5 tokens at 0,
    B: 30 + 3 at 5 ms), written as it runs: the same token times, transfers and steps in the files."""

    class Linear:
        def predict_step_s(self, query_tokens, context_tokens, is_prefill) -> float:
            return 0.010 + 0.0001 * float(np.sum(query_tokens))

    class Lockstep(Linear):
        def dp_step_s(self, batches) -> float:
            return 0.004 + 0.001 * sum(float(np.sum(b[0])) for b in batches)

    config = SchedulerConfig(num_gpu_blocks=1000, block_size=16, max_model_len=4096, chunk_size=512)
    decode = Pool([make_scheduler("sarathi", config) for _ in range(2)], StepPricer(Lockstep()), data_parallel_size=2)
    prefill = Pool([make_scheduler("sarathi", config)], StepPricer(Linear()))
    files = RecordFiles(tmp_path / "requests.parquet", tmp_path / "steps.parquet")
    result = simulate_disaggregated([Request(0, 0.0, 100, 5), Request(1, 0.005, 30, 3)], prefill, decode,
                                    KvLink(1e7, 0.002), kv_bytes_per_token=1000, record_files=files)
    r = pd.read_parquet(files.requests_path).set_index("request_id")
    assert list(r["decode_replica_id"]) == [1, 2] and list(r["prefill_replica_id"]) == [0, 0]
    assert list(r["kv_transfer_end_s"]) == pytest.approx([0.032, 0.038])
    np.testing.assert_allclose(r.loc[0, "token_times_s"], [0.020, 0.037, 0.042, 0.048, 0.054])
    np.testing.assert_allclose(r.loc[1, "token_times_s"], [0.033, 0.048, 0.054])
    assert list(r["tpot_s"]) == pytest.approx([(0.054 - 0.020) / 4, (0.054 - 0.033) / 2])  # over every token
    steps = pd.read_parquet(files.steps_path)
    assert list(steps.loc[steps["replica_id"] == 1, "kv_blocks_used"]) == [7, 7, 7, 7]
    assert list(steps.loc[steps["replica_id"] == 2, "kv_blocks_used"]) == [2, 2]
    s = result.summary
    assert s["kv_transfer_bytes"] == 130_000
    assert s["decode_utilization"] == pytest.approx((0.005 + 0.005 + 0.006 + 0.006 + 0.006 + 0.006) / (2 * 0.054))


def test_a_closed_loop_cluster_writes_its_files_as_it_goes(tmp_path, monkeypatch, small_groups):
    def workload():
        return ClosedLoopWorkload(8, think_time_s=0.01, prompt=[20, 900], output=[1, 120], num_requests=200, seed=1)

    built = simulate_disaggregated(workload(), *pools("2p2d"), LINK, KV_BYTES)
    at_close = spy_close(monkeypatch)
    files = RecordFiles(tmp_path / "requests.parquet", tmp_path / "steps.parquet", {"point_id": 7})
    streamed = simulate_disaggregated(workload(), *pools("2p2d"), LINK, KV_BYTES, record_files=files)
    [(written, _)] = at_close
    assert written == 192  # 6 row groups of 32 while it ran
    same_summary(streamed.summary, built.summary)
    pd.testing.assert_frame_equal(streamed.requests, built.requests.drop(columns="token_times_s"))
    assert_files_are_the_frames(tmp_path, built, files)
    assert pd.read_parquet(files.requests_path)["request_id"].tolist() == list(range(200))


def test_without_token_times_or_steps_the_cluster_files_hold_what_is_kept(tmp_path, small_groups):
    built = simulate_disaggregated(trace(), *pools("moe_dp2"), LINK, KV_BYTES, trim_fraction=0.1,
                                   keep_token_times=False, keep_steps=False)
    files = RecordFiles(tmp_path / "requests.parquet", None, {"point_id": 0})
    streamed = simulate_disaggregated(trace(), *pools("moe_dp2"), LINK, KV_BYTES, trim_fraction=0.1,
                                      keep_token_times=False, keep_steps=False, record_files=files)
    same_summary(streamed.summary, built.summary)
    assert math.isnan(streamed.summary["decode_utilization"]) and streamed.summary["decode_kv_usage_max"] > 0
    got = pd.read_parquet(files.requests_path)
    assert "token_times_s" not in got
    pd.testing.assert_frame_equal(got.drop(columns="point_id"), built.requests)
    assert [p.name for p in tmp_path.iterdir()] == ["requests.parquet"]


def test_a_trace_with_repeated_ids_is_refused(tmp_path):
    """A cluster follows a request across its pools by its id: repeated, the in-memory frame had
    four rows for the two requests of id 4 (the transfers' merge); now a clear error, no file."""
    requests = [Request(4, 0.0, 200, 20), Request(4, 0.01, 300, 10), Request(9, 0.02, 100, 5)]
    files = RecordFiles(tmp_path / "requests.parquet", tmp_path / "steps.parquet")
    for record_files in (None, files):
        with pytest.raises(ValueError, match="request id 4 appears 2 times"):
            simulate_disaggregated(requests, *pools("2p2d"), LINK, KV_BYTES, record_files=record_files)
    assert list(tmp_path.iterdir()) == []


def test_a_run_where_nothing_crosses_the_link_has_typed_transfer_columns(tmp_path):
    """Every request asks for one token (done in the prefill pool): the transfer columns are
    float64 NaN and int64 -1, in the frame and in the file (pandas made them object before)."""
    requests = [Request(i, 0.01 * i, 100 + i, 1) for i in range(5)]
    files = RecordFiles(tmp_path / "requests.parquet", tmp_path / "steps.parquet")
    for result in (simulate_disaggregated(requests, *pools("2p2d"), LINK, KV_BYTES),
                   simulate_disaggregated(requests, *pools("2p2d"), LINK, KV_BYTES, record_files=files)):
        r = result.requests
        assert str(r["kv_transfer_start_s"].dtype) == "float64" and r["kv_transfer_start_s"].isna().all()
        assert str(r["decode_replica_id"].dtype) == "int64" and (r["decode_replica_id"] == -1).all()
        assert result.summary["kv_transfer_bytes"] == 0 and result.summary["completed"] == 5
    got = pd.read_parquet(files.requests_path)
    assert str(got["kv_transfer_end_s"].dtype) == "float64" and list(got["prefill_replica_id"]) == [-1] * 5


def test_a_cluster_run_that_fails_leaves_no_step_part_files(tmp_path, monkeypatch, small_groups):
    seen = []

    def fail(self):
        seen.extend(sorted(p.name for p in tmp_path.iterdir()))
        raise RuntimeError("request 5 never finished")

    monkeypatch.setattr(disaggregated_records.ClusterRequestsStream, "close", fail)
    files = RecordFiles(tmp_path / "requests.parquet", tmp_path / "steps.parquet")
    with pytest.raises(RuntimeError, match="never finished"):
        simulate_disaggregated(trace(), *pools("2p2d"), LINK, KV_BYTES, record_files=files)
    assert seen == ["requests.parquet"] + [f"steps.parquet.replica-{i}.part" for i in range(4)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["requests.parquet"]  # the caller's own file


def test_a_rejection_recorded_by_the_cluster_does_not_hold_back_the_rows_after_it(tmp_path, monkeypatch,
                                                                                   small_groups):
    """Ids in arrival order (as a profile trace's); the first request (id 0) is too long for the
    decode pool: rejected at arrival, a row of the cluster's own, alone in its staging (flushed
    at 16), and every other asks for >= 2 tokens. Its row is handed over with the ranks' next
    rows, so when the run's last event ends 8 row groups of 32 are already in the file (the
    33 rows after them: the ranks' last staged rows and those behind them); before, that one
    staged row held back every row until the end (0 written while it ran)."""
    requests = [Request(k, r.arrival_s, 5000 if k == 0 else r.prompt_tokens, max(r.output_tokens, 2))
                for k, r in enumerate(trace())]
    built = simulate_disaggregated(requests, *pools("2p2d"), LINK, KV_BYTES)
    at_end_of_run, streamed_result = [], disaggregated._Cluster.streamed_result

    def spy(self, trim_fraction):
        at_end_of_run.append((self.stream._written, len(self.stream._tokens)))
        return streamed_result(self, trim_fraction)

    monkeypatch.setattr(disaggregated._Cluster, "streamed_result", spy)
    files = RecordFiles(tmp_path / "requests.parquet", tmp_path / "steps.parquet", {"point_id": 7})
    streamed = simulate_disaggregated(requests, *pools("2p2d"), LINK, KV_BYTES, record_files=files)
    assert at_end_of_run == [(256, 33)]
    got = pd.read_parquet(files.requests_path)
    assert got.loc[0, "request_id"] == 0 and got.loc[0, "finish_reason"].startswith("rejected")
    assert got.loc[0, "replica_id"] == -1 and streamed.summary["rejected"] == 1
    same_summary(streamed.summary, built.summary)
    assert_files_are_the_frames(tmp_path, built, files)
