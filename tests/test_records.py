"""Compact run records (simulator/records*.py): typed request rows with token times as step
indices, the typed step log, exact streamed percentiles and the 0.1 % TBT/ITL sketch."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import simulator.metrics as metrics
import simulator.records_percentiles as records_percentiles
from profiler import RooflineCostModel, get_device_spec, get_model_spec
from simulator.records import ChunkedArray, GrowableArray, RequestRecords, requests_table
from simulator.records_percentiles import streamed_percentiles
from simulator.records_sketch import GapSketch, gaps_of_flat
from simulator.scheduler import FinishedRequest, SchedulerConfig, make_scheduler
from simulator.simulate import simulate
from simulator.step_log import STEP_COLUMNS, StepLog, StepStats
from traces import ClosedLoopWorkload, Request

PERCENTILES = (50, 90, 95, 99, 99.9)
COST = RooflineCostModel(get_model_spec("llama-3-8b"), get_device_spec("h100-sxm"))


def finished(request_id, times, arrival_s=0.0, reason="completed"):
    return FinishedRequest(request_id=request_id, arrival_s=arrival_s, prompt_tokens=10, output_tokens=len(times) or 5,
                           finish_reason=reason, generated_tokens=len(times),
                           first_scheduled_s=arrival_s if times else math.nan,
                           first_token_s=times[0] if times else math.nan,
                           completion_s=times[-1] if times else math.nan, token_times_s=list(times))


def samples(kind: int, n: int, rng) -> np.ndarray:
    if kind == 0:
        return rng.lognormal(-4, 1, n)
    if kind == 1:
        return np.round(rng.lognormal(-4, 1, n), 4)  # many ties
    if kind == 2:
        return np.full(n, 0.0123)  # one value only
    return rng.integers(0, 5, n) * 0.01 + 1e-3


@pytest.mark.parametrize("kind", [0, 1, 2, 3])
def test_streamed_percentiles_equal_numpy_bit_for_bit(monkeypatch, kind):
    monkeypatch.setattr(records_percentiles, "_COLLECT_VALUES", 500)  # force histogram refinement passes
    rng = np.random.default_rng(kind)
    for n in (1, 2, 7, 1000, 40_000):
        x = samples(kind, n, rng)
        parts = np.array_split(x, 13)
        count, mean, values = streamed_percentiles(lambda: iter(parts), PERCENTILES)
        assert count == n
        assert values == np.percentile(x, PERCENTILES).tolist()  # exact, not approximately
        assert mean == pytest.approx(x.mean(), rel=1e-13)


def test_streamed_percentiles_of_nothing_are_nan():
    count, mean, values = streamed_percentiles(lambda: iter([np.zeros(0)]), PERCENTILES)
    assert count == 0 and math.isnan(mean) and all(math.isnan(v) for v in values)


def test_gap_sketch_is_within_a_tenth_of_a_percent_of_numpy():
    rng = np.random.default_rng(5)
    tbt = np.r_[rng.lognormal(-4, 0.8, 200_000), rng.uniform(0.2, 3.0, 500)]  # a tail of stalls
    tokens = rng.integers(1, 5, tbt.size)
    sketch, halves = GapSketch(), [GapSketch(), GapSketch()]
    sketch.add(tbt, tokens)
    halves[0].add(tbt[:1000], tokens[:1000])
    halves[1].add(tbt[1000:], tokens[1000:])
    halves[0].merge(halves[1])
    itl = np.repeat(tbt / tokens, tokens)
    for name, exact in (("tbt_s", tbt), ("itl_s", itl)):
        n, mean, values = sketch.stats(name, PERCENTILES)
        want = np.percentile(exact, PERCENTILES)
        assert n == exact.size and mean == pytest.approx(exact.mean(), rel=1e-12)
        assert np.all(np.abs(np.array(values) / want - 1) <= 1e-3)
        assert halves[0].stats(name, PERCENTILES)[2] == values  # merging is the same as adding at once


def test_gaps_of_flat_splits_emissions_and_requests():
    # Request 0: tokens at 1, 2, 2, 2 (a speculative emission of 3), 4; request 1: 10, 11.
    tbt, tokens, itl = gaps_of_flat(np.array([1.0, 2, 2, 2, 4, 10, 11]), np.array([5, 2]))
    assert tbt.tolist() == [1.0, 2.0, 1.0] and tokens.tolist() == [3, 1, 1]  # no gap from 4 to 10
    assert itl.tolist() == pytest.approx([1 / 3] * 3 + [2.0, 1.0])


def test_records_of_two_replicas_merge_sorted_with_their_token_times():
    a, b = RequestRecords(replica_id=0), RequestRecords(replica_id=1)
    a.token_steps, b.token_steps = ChunkedArray(np.int32, chunk_size=2), ChunkedArray(np.int32, chunk_size=3)
    a.note_step_ends([0.1, 0.2, 0.3])
    b.note_step_ends([0.15, 0.25])
    a.add([finished(7, [0.1, 0.3]), finished(2, [0.2, 0.2, 0.3], arrival_s=0.05)])
    b.add([finished(4, [0.15, 0.25]), finished(5, [], reason="rejected_too_long")])
    frame = requests_table([a, b])
    assert frame["request_id"].tolist() == [2, 4, 5, 7]
    assert frame["replica_id"].tolist() == [0, 1, 1, 0]
    assert [list(t) for t in frame["token_times_s"]] == [[0.2, 0.2, 0.3], [0.15, 0.25], [], [0.1, 0.3]]
    assert frame["finish_reason"].tolist() == ["completed", "completed", "rejected_too_long", "completed"]
    assert frame["tpot_s"].tolist()[:2] == pytest.approx([0.05, 0.1]) and math.isnan(frame["tpot_s"][2])
    assert frame["ttft_s"].tolist()[0] == pytest.approx(0.15)
    assert frame["token_times_s"][0].dtype == np.float64


def test_growable_and_chunked_arrays_keep_every_value_in_order():
    grown, chunked = GrowableArray(np.int64, capacity=2), ChunkedArray(np.int64, chunk_size=4)
    for start in range(0, 30, 3):
        grown.extend(np.arange(start, start + 3))
        chunked.extend(np.arange(start, start + 3))
    assert len(grown) == len(chunked) == 30
    parts = list(chunked.drain())
    assert [p.size for p in parts] == [4] * 7 + [2] and np.concatenate(parts).tolist() == list(range(30))
    assert len(chunked) == 0 and list(chunked.drain()) == []
    assert grown.release().tolist() == list(range(30)) and len(grown) == 0


def test_a_token_time_that_is_no_step_end_is_an_error():
    records = RequestRecords()
    records.note_step_ends([0.1, 0.2])
    records.add([finished(0, [0.1, 0.25])])
    with pytest.raises(RuntimeError, match="not the end of a step"):
        records.flush()


def test_requests_frame_keeps_the_columns_and_types_of_records():
    frame = metrics.requests_frame([finished(1, [0.3, 0.5]), finished(0, [0.2])])
    fields = [*FinishedRequest.__dataclass_fields__]
    assert fields[-1] == "token_times_s"
    assert list(frame.columns) == [*fields[:-1], "schedule_wait_s", "token_times_s", "ttft_s", "e2e_s",
                                   "scheduling_delay_s", "tpot_s"]
    assert frame["schedule_wait_s"].tolist() == [0.0, 0.0]  # no replica noted a wait: decided as it ran
    assert frame["request_id"].tolist() == [0, 1] and frame["generated_tokens"].dtype == np.int64
    assert [list(t) for t in frame["token_times_s"]] == [[0.2], [0.3, 0.5]]


def test_step_log_in_typed_columns():
    log = StepLog()
    log.extend_decodes([1.0, 1.5], [0.5, 0.25], batch_size=3, kv_blocks_used=[10, 11], replica_id=2)
    frame = log.to_frame()
    assert list(frame.columns) == list(STEP_COLUMNS) and len(frame) == 2
    assert frame["start_s"].tolist() == [1.0, 1.5] and frame["duration_s"].dtype == np.float64
    assert frame["num_decode_tokens"].tolist() == [3, 3] and frame["kv_blocks_used"].tolist() == [10, 11]
    assert frame["replica_id"].dtype == np.int64 and frame["replica_id"].tolist() == [2, 2]
    dropped = StepLog(keep=False)
    dropped.extend_decodes([1.0, 1.5, 2.0], [0.5] * 3, batch_size=3, kv_blocks_used=[10, 12, 11])
    assert dropped.stats() == StepStats(3, 33, 12) and len(dropped) == 3 and len(dropped.to_frame()) == 0


def trace(n=300, qps=30.0, seed=3):
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / qps, n))
    return [Request(i, float(t), int(p), int(o)) for i, (t, p, o) in
            enumerate(zip(arrivals, rng.integers(20, 1500, n), rng.integers(1, 300, n)))]


def scheduler(replicas=1):
    config = SchedulerConfig(num_gpu_blocks=3000, block_size=16, max_model_len=4096, chunk_size=256, max_num_seqs=64)
    return [make_scheduler("sarathi", config) for _ in range(replicas)]


@pytest.mark.parametrize("trim", [0.0, 0.1])
def test_dropping_token_times_and_steps_changes_only_the_gap_statistics_within_the_bound(trim):
    kept = simulate(trace(), scheduler(2), COST, trim_fraction=trim)
    dropped = simulate(trace(), scheduler(2), COST, trim_fraction=trim, keep_token_times=False, keep_steps=False)
    assert "token_times_s" not in dropped.requests and len(dropped.steps) == 0
    pd.testing.assert_frame_equal(dropped.requests, kept.requests.drop(columns="token_times_s"))
    for key, value in kept.summary.items():
        if key.startswith(("tbt_s_p", "itl_s_p")):
            assert dropped.summary[key] == pytest.approx(value, rel=1e-3), key
        elif key in ("tbt_s_mean", "itl_s_mean", "kv_usage_mean"):
            assert dropped.summary[key] == pytest.approx(value, rel=1e-12), key
        else:
            assert dropped.summary[key] == value or (value != value and dropped.summary[key] != dropped.summary[key]), key
    assert dropped.summary["num_steps"] == kept.summary["num_steps"] == len(kept.steps) > 100


def test_streamed_gap_statistics_equal_the_in_memory_ones(monkeypatch):
    result = simulate(trace(), scheduler(), COST)
    monkeypatch.setattr(metrics, "_IN_MEMORY_TOKENS", 0)
    monkeypatch.setattr(metrics, "_GAP_CHUNK_REQUESTS", 17)  # many chunks
    streamed = metrics.summarize(result.requests, result.steps, 3000)
    for key, value in result.summary.items():
        if key.endswith("_mean"):
            assert streamed[key] == pytest.approx(value, rel=1e-12), key
        else:
            assert streamed[key] == value or (value != value and streamed[key] != streamed[key]), key


def test_simulated_token_times_are_the_step_ends():
    result = simulate(trace(60), scheduler(), COST)
    ends = set((result.steps["start_s"] + result.steps["duration_s"]).round(12))
    for times, n in zip(result.requests["token_times_s"], result.requests["generated_tokens"]):
        assert len(times) == n and set(np.round(times, 12)) <= ends


def test_a_closed_loop_trimmed_run_must_keep_token_times():
    workload = ClosedLoopWorkload(4, think_time_s=0.0, prompt=10, output=5, num_requests=20, seed=1)
    with pytest.raises(ValueError, match="closed-loop run with trim_fraction > 0 must keep token times"):
        simulate(workload, scheduler(), COST, trim_fraction=0.1, keep_token_times=False)


def test_row_group_parquet_reads_back_as_the_frame(tmp_path):
    from simulator.records_parquet import write_in_row_groups
    import pyarrow.parquet as pq

    kept = simulate(trace(40), scheduler(), COST).requests
    dropped = simulate(trace(40), scheduler(), COST, keep_token_times=False).requests
    frame = pd.concat([kept, dropped], ignore_index=True)  # token_times_s missing in the second half
    write_in_row_groups(frame, tmp_path / "rows.parquet", row_group_rows=16)
    frame.to_parquet(tmp_path / "whole.parquet", index=False)
    assert pq.ParquetFile(tmp_path / "rows.parquet").num_row_groups == 5
    back, whole = pd.read_parquet(tmp_path / "rows.parquet"), pd.read_parquet(tmp_path / "whole.parquet")
    pd.testing.assert_frame_equal(back.drop(columns="token_times_s"), whole.drop(columns="token_times_s"))
    for got, want, original in zip(back["token_times_s"], whole["token_times_s"], frame["token_times_s"]):
        if isinstance(original, np.ndarray):
            assert np.array_equal(got, want) and np.array_equal(got, original)
        else:
            assert got is None and want is None
    write_in_row_groups(frame.iloc[:0], tmp_path / "empty.parquet")
    assert len(pd.read_parquet(tmp_path / "empty.parquet")) == 0
