"""The simulator's hot-loop shortcuts give exactly the floats and states of the plain paths
(issue 17): `LogGrid.at2`'s cached first axis, the measured cost model's direct 2-D look-ups."""
from __future__ import annotations

import math
import random

import numpy as np
import pandas as pd
import pytest

from profiler.measured.grid import LogGrid


def _grid_2x2() -> LogGrid:
    """Axes m in {1, 4}, k in {1, 16}; t = m^0.5 · k^0.75 · 1 s at the four corners."""
    frame = pd.DataFrame({"m": [1, 1, 4, 4], "k": [1, 16, 1, 16]})
    frame["time_s"] = frame["m"] ** 0.5 * frame["k"] ** 0.75
    return LogGrid.from_frame(frame, ["m", "k"])


def test_at2_interpolates_log_time_in_log_keys_by_hand():
    grid = _grid_2x2()
    # (2, 4) is half-way along both log axes: log t = 0.5·log 2 + 0.75·log 4 = 2·log 2 → t = 4.
    t, out = grid.at2(2, 4)
    assert t == pytest.approx(4.0, rel=1e-12) and out is False
    assert grid.at2(2.0, 4.0) == (t, False)  # the cached first-axis entry of 2 serves 2.0 too
    t, out = grid.at2(8, 16)  # m above its range: clamped to 4 and flagged
    assert t == pytest.approx(2.0 * 8.0, rel=1e-12) and out is True
    t, out = grid.at2(0.5, 1)  # below: flat, not flagged
    assert t == pytest.approx(1.0, rel=1e-12) and out is False


def test_at2_equals_the_uncached_position_formula_bit_for_bit():
    rng = np.random.default_rng(3)
    m, k = np.array([1.0, 2, 8, 32, 128]), np.array([0.0, 16, 256, 4096])  # k has 0: log1p axis
    frame = pd.DataFrame([(a, b) for a in m for b in k], columns=["m", "k"])
    frame["time_s"] = 1e-6 * (1 + frame["m"]) ** 0.9 * (1 + frame["k"]) ** 0.6 * rng.uniform(0.9, 1.1, len(frame))
    frame = frame.drop(index=[7])  # one unmeasured cell: filled and flagged
    grid = LogGrid.from_frame(frame, ["m", "k"])
    r = random.Random(5)
    for _ in range(2000):
        x = r.choice([r.uniform(0.5, 200.0), float(r.randint(1, 150))])
        y = r.uniform(-1.0, 6000.0)
        (i, f, out_x), (j, g, out_y) = grid._position(0, x), grid._position(1, y)
        s0, s1 = grid._strides
        corners = [i * s0 + j * s1, i * s0 + (j + 1) * s1, (i + 1) * s0 + j * s1, (i + 1) * s0 + (j + 1) * s1]
        v = [grid._flat[c] for c in corners]
        expected = math.exp((1.0 - f) * ((1.0 - g) * v[0] + g * v[1]) + f * ((1.0 - g) * v[2] + g * v[3]))
        flagged = out_x or out_y or any(grid._filled_flat[c] for c in corners)
        assert grid.at2(x, y) == (expected, flagged)
        assert grid(x, y) == (expected, flagged)


# -- plans in flight (pipeline parallelism) ------------------------------------------------------

def test_plans_in_flight_are_tracked_per_plan_and_freed_by_identity_or_value():
    from simulator.scheduler import BatchPlan, SchedulerConfig, StepOutcome, make_scheduler
    from traces import Request

    scheduler = make_scheduler("sarathi", SchedulerConfig(num_gpu_blocks=100, block_size=16, chunk_size=64))
    for i in range(3):  # prompts of 20 tokens: three fit one 64-token step
        scheduler.add_request(Request(i, 0.0, 20, 4))
    first = scheduler.schedule(0.0)
    assert first.columns.request_ids == [0, 1, 2] and scheduler.num_executing == 3
    scheduler.add_request(Request(3, 0.0, 20, 4))
    second = scheduler.schedule(0.0)  # the first plan is still in flight: only the newcomer runs
    assert second.columns.request_ids == [3] and scheduler.num_executing == 4
    assert scheduler.decode_window()[1] == 0  # never a window while plans are in flight
    # The first plan completes as an equal plan rebuilt from its sequences (by value, not identity).
    rebuilt = BatchPlan(first.sequences, kv_blocks_used=first.kv_blocks_used)
    scheduler.complete_step(rebuilt, StepOutcome.without_speculation(rebuilt), 1.0)
    assert scheduler.num_executing == 1
    third = scheduler.schedule(1.0)  # 0, 1, 2 decode again; 3 is still in flight
    assert third.columns.request_ids == [0, 1, 2] and third.columns.query_tokens == [1, 1, 1]
    scheduler.complete_step(second, StepOutcome.without_speculation(second), 1.5)
    scheduler.complete_step(third, StepOutcome.without_speculation(third), 2.0)
    assert scheduler.num_executing == 0
    assert [seq.num_generated_tokens for seq in scheduler.running] == [2, 2, 2, 1]


# -- fixed costs of a run: the trace's time scale, the TBT/ITL statistics ----------------------

def test_time_scale_keeps_every_request_field_but_the_arrival():
    import dataclasses

    from traces import Request
    from traces.replay import time_scale

    # time_scale builds each Request from its fields by position: a new field must be listed there.
    assert [f.name for f in dataclasses.fields(Request)] == [
        "request_id", "arrival_s", "prompt_tokens", "output_tokens", "priority", "prefix_hash_ids",
        "prefix_block_tokens"]
    requests = [Request(7, 10.0, 30, 5, priority=2, prefix_hash_ids=(4, 9), prefix_block_tokens=16),
                Request(8, 14.0, 12, 3)]
    scaled = time_scale(requests, 4.0)
    assert [r.arrival_s for r in scaled] == [0.0, 1.0]  # (t - 10) / 4
    assert scaled[0] == dataclasses.replace(requests[0], arrival_s=0.0)
    assert (scaled[0].priority, scaled[0].prefix_hash_ids, scaled[0].prefix_block_tokens) == (2, (4, 9), 16)
    assert (scaled[1].request_id, scaled[1].prompt_tokens, scaled[1].output_tokens) == (8, 12, 3)


def test_gap_stats_itl_equals_tbt_without_multi_token_emissions_and_differs_with_them():
    from simulator.metrics import _gap_stats
    from simulator.records_parquet import SeriesTokenTimes

    # One token per emission: gaps 1, 2 and 3 s (request 0) and 4 s (request 1).
    times = SeriesTokenTimes(pd.Series([[0.0, 1.0, 3.0, 6.0], [2.0, 6.0]]))
    out = _gap_stats(times, np.array([True, True]), 6)
    assert out["tbt_s_mean"] == 2.5 and out["itl_s_mean"] == 2.5
    assert out["tbt_s_p50"] == 2.5 and out["itl_s_p50"] == 2.5  # median of 1, 2, 3, 4
    assert [k for k in out if k.startswith("itl_s")] == [k.replace("tbt_s", "itl_s") for k in out if k.startswith("tbt_s")]
    assert all(out[k] == out[k.replace("tbt_s", "itl_s")] for k in out if k.startswith("tbt_s"))
    # A verify emitting 2 tokens at t = 4: TBT gaps 4 (0 -> 4 s), ITL 2 and 2 (one per token).
    out = _gap_stats(SeriesTokenTimes(pd.Series([[0.0, 4.0, 4.0]])), np.array([True]), 3)
    assert out["tbt_s_mean"] == 4.0 and out["itl_s_mean"] == 2.0


def test_paused_gc_disables_the_collector_inside_and_restores_its_state():
    import gc

    from simulator.gc_pause import paused_gc

    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():  # nested: the outer block's state stays
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(KeyError):
        with paused_gc():
            raise KeyError("the run failed")
    assert gc.isenabled()  # restored on the way out of a failure too
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()  # a collector the caller turned off stays off
    finally:
        gc.enable()


def test_run_point_and_simulate_run_with_the_collector_paused(monkeypatch):
    import gc

    import simpy

    from experiments.config import SweepConfig
    from experiments.point import run_point

    seen = []
    run = simpy.Environment.run
    monkeypatch.setattr(simpy.Environment, "run", lambda self, *a: (seen.append(gc.isenabled()), run(self, *a))[1])
    config = SweepConfig(trace={"kind": "synthetic", "num_requests": 20, "qps": 5.0, "seed": 0},
                         engine={"scheduler": "sarathi", "chunk_size": 256}, cost_model="roofline")
    row = run_point(config).row
    assert seen == [False] and gc.isenabled()
    assert row["num_requests"] == 20


def test_at2_many_equals_at2_value_by_value():
    rng = np.random.default_rng(11)
    m, k = np.array([1.0, 2, 8, 32, 128]), np.array([0.0, 16, 256, 4096])  # k has 0: log1p axis
    frame = pd.DataFrame([(a, b) for a in m for b in k], columns=["m", "k"])
    frame["time_s"] = 1e-6 * (1 + frame["m"]) ** 0.9 * (1 + frame["k"]) ** 0.6 * rng.uniform(0.9, 1.1, len(frame))
    frame = frame.drop(index=[6])  # one unmeasured cell (m 2, k 256): filled and flagged
    grid = LogGrid.from_frame(frame, ["m", "k"])
    r = random.Random(2)
    for x in [0.5, 1.0, 3.0, 40.0, 500.0]:  # below, on, inside, inside, above the first axis
        runs = [[r.uniform(-1.0, 6000.0) for _ in range(40)],  # jumping between cells and out of range
                [10.0 + step for step in range(300)],  # a window: one more token of context a step
                [4000.0 + 7 * step for step in range(50)], []]
        for ys in runs:
            times, outs = grid.at2_many(x, ys)
            expected = [grid.at2(x, y) for y in ys]
            assert times == [t for t, _ in expected]
            assert outs == [bool(o) for _, o in expected]
    # by hand: the filled cell's corner flags the look-ups between k 16 and 4096 at m 2 only
    assert grid.at2_many(2.0, [100.0, 1.0])[1] == [True, False]


# -- scheduler fast paths: plain decodes in complete_step, a window's block growth ---------------

def _decoding_sarathi(num_decodes: int, prompt_tokens: int = 20, output_tokens: int = 5):
    """A sarathi scheduler whose `num_decodes` requests have finished their prompts (one step)."""
    from simulator.scheduler import SchedulerConfig, StepOutcome, make_scheduler
    from traces import Request

    scheduler = make_scheduler("sarathi", SchedulerConfig(num_gpu_blocks=100, block_size=16, chunk_size=64))
    for i in range(num_decodes):
        scheduler.add_request(Request(i, 0.0, prompt_tokens, output_tokens))
    plan = scheduler.schedule(0.0)
    scheduler.complete_step(plan, StepOutcome.without_speculation(plan), 1.0)
    return scheduler


def test_plain_decodes_are_counted_in_the_plan_and_completed_in_one_pass():
    from simulator.scheduler import StepOutcome
    from traces import Request

    scheduler = _decoding_sarathi(2)
    scheduler.add_request(Request(2, 1.0, 30, 2))  # a prompt admitted behind the two decodes
    plan = scheduler.schedule(1.0)
    assert plan.columns.request_ids == [0, 1, 2] and plan.num_plain_decodes == 2
    finished = scheduler.complete_step(plan, StepOutcome.without_speculation(plan), 2.0)
    assert finished == []
    by_id = {seq.request_id: seq for seq in scheduler.running}
    assert [by_id[i].num_computed_tokens for i in (0, 1, 2)] == [21, 21, 30]  # 20 + 1 decode; the whole prompt
    assert [by_id[i].token_times_s for i in (0, 1, 2)] == [[1.0, 2.0], [1.0, 2.0], [2.0]]
    assert by_id[2].first_token_s == 2.0 and by_id[0].first_token_s == 1.0
    # An outcome where a plain decode emits nothing takes the general pass: no token, no time.
    plan = scheduler.schedule(2.0)
    assert plan.num_plain_decodes == 3
    scheduler.complete_step(plan, StepOutcome((0, 1, 1)), 3.0)
    assert [by_id[i].num_generated_tokens for i in (0, 1, 2)] == [2, 3, 2]
    assert by_id[0].token_times_s == [1.0, 2.0] and by_id[1].token_times_s == [1.0, 2.0, 3.0]
    assert 2 not in {seq.request_id for seq in scheduler.running}  # its 2 tokens are out: finished


def test_decode_window_grows_the_plain_pools_tables_by_hand():
    scheduler = _decoding_sarathi(2, prompt_tokens=20, output_tokens=40)
    bm = scheduler.block_manager
    # Whole prompts reserved at admission: 20 tokens hold 2 blocks each; 4 of 100 in use.
    assert bm.blocks_held_each([0, 1]) == [2, 2] and bm.num_used == 4
    running, steps = scheduler.decode_window()
    assert steps == 39  # 40 outputs, one already sampled
    kv_used, finished = scheduler.advance_decodes([2.0 + j for j in range(14)])
    # 14 steps write tokens 21..34 of each: tokens 33 and 34 need a third block (from step 12).
    assert kv_used == [4] * 12 + [6, 6]
    assert bm.blocks_held_each([0, 1]) == [3, 3] and bm.num_used == 6 and finished == []
    assert [seq.num_computed_tokens for seq in running] == [34, 34]
    assert [len(seq.token_times_s) for seq in running] == [15, 15]


# -- fifth pass: the default outcome, the step log's windows, lazy block tables ---------------------

def test_complete_step_without_an_outcome_is_one_token_per_emitting_sequence():
    from simulator.scheduler import StepOutcome
    from traces import Request

    def two_steps(outcome_of):
        scheduler = _decoding_sarathi(2)
        scheduler.add_request(Request(2, 1.0, 30, 3))
        scheduler.add_request(Request(3, 1.0, 90, 2))  # a first chunk of 64 - 2 - 30 = 32 of its 90
        done = []
        for now in (1.0, 2.0):
            plan = scheduler.schedule(now)
            done += scheduler.complete_step(plan, outcome_of(plan), now + 1.0)
        seqs = sorted(scheduler.running, key=lambda s: s.request_id)
        return ([(s.request_id, s.num_computed_tokens, s.num_generated_tokens, s.token_times_s) for s in seqs],
                [(f.request_id, f.token_times_s) for f in done])

    running, done = two_steps(lambda plan: None)
    # Decodes 0, 1: 20 + 2 computed, 1 + 2 tokens at 1.0 (their prefill), 2.0 and 3.0; request 2:
    # its prompt at step 1 (token at 2.0), a decode at step 2 (3.0); request 3: 32, then the
    # other 58 of its 90 within the 64 - 3 left (its first token at 3.0).
    assert running == [(0, 22, 3, [1.0, 2.0, 3.0]), (1, 22, 3, [1.0, 2.0, 3.0]), (2, 31, 2, [2.0, 3.0]),
                       (3, 90, 1, [3.0])] and done == []
    assert two_steps(StepOutcome.without_speculation) == (running, done)


def test_step_log_interleaves_decode_windows_with_scheduled_steps_in_order():
    from simulator.scheduler.plan import BatchPlan, PlanColumns
    from simulator.step_log import StepLog

    def plan(kv_blocks_used):  # one prefill chunk of 7 tokens and 2 decodes
        return BatchPlan.from_columns(PlanColumns([0, 1, 2], [7, 1, 1], [0, 5, 9], [True, False, False],
                                                  [False, True, True], [0, 0, 0], [[], [], []]),
                                      kv_blocks_used=kv_blocks_used)

    log = StepLog()
    log.extend_decodes([0.0, 0.5], [0.5, 0.5], 3, [10, 11], replica_id=4)
    log.append(1.0, 0.25, plan(12), replica_id=4)
    log.append(1.25, 0.25, plan(13), replica_id=4)
    log.extend_decodes([1.5], [0.75], 2, [14], replica_id=4)
    log.append(2.25, 0.5, plan(15), replica_id=4)
    assert len(log) == 6
    frame = log.to_frame()
    assert frame["start_s"].tolist() == [0.0, 0.5, 1.0, 1.25, 1.5, 2.25]
    assert frame["duration_s"].tolist() == [0.5, 0.5, 0.25, 0.25, 0.75, 0.5]
    assert frame["kv_blocks_used"].tolist() == [10, 11, 12, 13, 14, 15]
    assert frame["batch_size"].tolist() == [3, 3, 3, 3, 2, 3]
    assert frame["num_prefill_tokens"].tolist() == [0, 0, 7, 7, 0, 7]
    assert frame["num_decode_tokens"].tolist() == [3, 3, 2, 2, 2, 2]
    assert frame["num_prefill_seqs"].tolist() == [0, 0, 1, 1, 0, 1]
    assert (frame["replica_id"] == 4).all() and (frame["num_preempted"] == 0).all()
    assert frame["kv_blocks_used"].dtype == np.int64 and frame["start_s"].dtype == np.float64


def test_block_tables_are_looked_up_when_read_and_pinned_before_a_table_is_dropped():
    from traces import Request

    scheduler = _decoding_sarathi(2, prompt_tokens=20, output_tokens=2)  # each has 1 token to go
    bm = scheduler.block_manager
    plan = scheduler.schedule(1.0)
    tables = [list(t) for t in (bm.block_table(0), bm.block_table(1))]
    assert len(tables[0]) == 2 and len(tables[1]) == 2  # 20 + 1 tokens in 2 blocks each
    scheduler.complete_step(plan, None, 2.0)  # both finish: their tables leave the manager
    assert bm.block_table(0) == [] and bm.num_used == 0
    # The plan still answers with the tables it was scheduled with (pinned before the frees).
    assert list(plan.columns.block_tables) == tables and plan.columns.block_tables == tables
    assert [s.block_table for s in plan.sequences] == tables
    # A plan read at once gives the live lists, as before.
    scheduler.add_request(Request(5, 2.0, 40, 3))
    plan = scheduler.schedule(2.0)
    assert plan.columns.block_tables[0] is bm.block_table(5) and len(bm.block_table(5)) == 3


@pytest.mark.parametrize("model_name, device_name, tp", [("llama-3-8b", "h100-sxm", 1), ("qwen3-32b", "rtx-pro-6000", 2)])
def test_scheduled_step_price_equals_predict_step_s_float_for_float_and_count_for_count(model_name, device_name, tp):
    from profiler.device_spec import get_device_spec
    from profiler.measured.shipped import build_measured
    from profiler.model_spec import get_model_spec

    def fresh():
        return build_measured("auto", get_model_spec(model_name), get_device_spec(device_name), tp)

    plain, counted = fresh(), fresh()
    r = random.Random(11)
    for _ in range(400):
        k = r.randint(0, 60)  # leading plain decodes, then a few chunks / one-token prefills / decodes
        q, c, p = [1] * k, [r.randint(1, 300_000) for _ in range(k)], [False] * k
        for _ in range(r.randint(0, 3)):
            prefill = r.random() < 0.8
            q.append(r.choice([1, r.randint(2, 9_000)]) if prefill else 1)
            c.append(r.randint(0, 120_000))
            p.append(prefill)
        expected = plain.predict_step_s(q, c, p)
        assert counted.predict_scheduled_step_s(q, c, p, sum(q), sum(p), k) == expected
    assert (counted.num_predictions, counted.out_of_grid_steps, counted.out_of_range) == (
        plain.num_predictions, plain.out_of_grid_steps, plain.out_of_range)
    assert plain.num_predictions == 400 and plain.out_of_grid_steps > 0  # contexts past the tables counted


def test_plain_decode_entries_store_only_what_follows_the_decodes_but_read_as_every_entry():
    from simulator.scheduler.base import PlainDecodeEntries
    from simulator.scheduler.sequence import Sequence
    from traces import Request

    a, b, c = (Sequence(Request(i, 0.0, 10, 5)) for i in range(3))
    entries = PlainDecodeEntries([a, b])
    assert len(entries) == 2 and entries and list(entries) == [(a, 1, 0), (b, 1, 0)]
    entries.append((c, 7, 0))  # a chunk after them
    assert len(entries) == 3 and entries[2] == (c, 7, 0) and entries[-3] == (a, 1, 0)
    assert entries.tail == [(c, 7, 0)] and list(zip(*entries))[1] == (1, 1, 7)
    assert entries == [(a, 1, 0), (b, 1, 0), (c, 7, 0)]
    empty = PlainDecodeEntries([])
    assert not empty and len(empty) == 0 and list(empty) == []


def test_step_rows_array_is_the_rows_as_floats_in_order():
    from simulator.step_log import STEP_COLUMNS, _rows_array

    rows = [tuple(range(j, j + len(STEP_COLUMNS))) for j in (0, 100)]
    array = _rows_array(rows)
    assert array.shape == (2, len(STEP_COLUMNS)) and array.dtype == np.float64
    assert array.tolist() == [[float(v) for v in row] for row in rows]
    assert _rows_array([]).shape == (0, len(STEP_COLUMNS))


@pytest.mark.parametrize("policy, expected", [("fcfs", [0, 1, 2]), ("priority", [1, 2, 0])])
def test_an_admission_joins_running_at_its_policy_place(policy, expected):
    from simulator.scheduler import SchedulerConfig, make_scheduler
    from traces import Request

    scheduler = make_scheduler("sarathi", SchedulerConfig(num_gpu_blocks=100, block_size=16, chunk_size=64,
                                                         policy=policy))
    now = 0.0
    # One admission a step (prompts of 60 fill the budget): request 0 (priority 5), then 1
    # (priority 1), then 2 (priority 3). FCFS keeps arrival order; priority puts 1 before 2 before 0.
    for rid, priority in ((0, 5), (1, 1), (2, 3)):
        scheduler.add_request(Request(rid, now, 60, 9, priority=priority))
        plan = scheduler.schedule(now)
        now += 1.0
        scheduler.complete_step(plan, None, now)
    assert [seq.request_id for seq in scheduler.running] == expected


def test_a_plans_block_tables_keep_a_finished_requests_table_and_read_the_others_live():
    from traces import Request

    scheduler = _decoding_sarathi(2, prompt_tokens=20, output_tokens=3)
    bm = scheduler.block_manager
    scheduler.running[0].max_output_tokens = 2  # request 0 finishes at the next step, 1 does not
    plan = scheduler.schedule(1.0)
    table_0, table_1 = bm.block_table(0), bm.block_table(1)
    scheduler.complete_step(plan, None, 2.0)
    assert bm.block_table(0) == [] and bm.block_table(1) is table_1
    tables = plan.columns.block_tables
    assert tables[0] is table_0 and table_0 == [0, 1] and tables[1] is table_1  # kept; live
    scheduler.add_request(Request(7, 2.0, 16, 2))
    tables_7 = scheduler.schedule(2.0).columns.block_tables  # a new column: the newcomer's live table
    assert tables_7[1] is bm.block_table(7) and plan.columns.block_tables[0] == [0, 1]


# -- sixth pass: windows an arrival does not cut, kept prefill times, window prices by total ------

def _interrupts_and_frames(monkeypatch, requests, fast: bool):
    """(interrupts, requests frame, steps frame) of an open-loop run of `requests` on one sarathi
    replica priced by the roofline (each context priced differently, so step ends are sums)."""
    import simpy.events

    from profiler import RooflineCostModel, get_device_spec, get_model_spec
    from simulator.scheduler import SchedulerConfig, make_scheduler
    from simulator.simulate import simulate

    calls = []
    interrupt = simpy.events.Process.interrupt
    monkeypatch.setattr(simpy.events.Process, "interrupt", lambda self, cause=None: (calls.append(cause), interrupt(self, cause)))
    cost = RooflineCostModel(get_model_spec("llama-3-8b"), get_device_spec("h100-sxm"))
    scheduler = make_scheduler("sarathi", SchedulerConfig(num_gpu_blocks=400, chunk_size=256))
    result = simulate(requests, scheduler, cost, fast_forward=fast)
    return len(calls), result.requests.sort_values("request_id").reset_index(drop=True), result.steps


def test_an_arrival_inside_a_windows_last_step_leaves_it_running(monkeypatch):
    from traces import Request

    # Two requests decode for 200 steps; arrivals come one at a time while they decode (one
    # second apart: each falls inside the last step of the window that stops at it).
    requests = [Request(0, 0.0, 100, 200), Request(1, 0.0, 120, 200)]
    requests += [Request(2 + i, 0.05 + 0.2 * i, 50, 3) for i in range(4)]
    interrupts, fast_requests, fast_steps = _interrupts_and_frames(monkeypatch, requests, fast=True)
    assert interrupts == 0  # every one of those windows ran to the end it was priced for
    _, plain_requests, plain_steps = _interrupts_and_frames(monkeypatch, requests, fast=False)
    pd.testing.assert_frame_equal(fast_requests, plain_requests)
    pd.testing.assert_frame_equal(fast_steps, plain_steps)
    # Two arrivals inside one step: neither changes a step of the window (it was planned to end
    # at the first step due after the next arrival), so an open loop interrupts nothing, and the
    # records are the step-by-step path's.
    step_s = fast_steps["duration_s"].iloc[-1]
    close = requests[:2] + [Request(2, 0.05, 50, 3), Request(3, 0.05 + step_s / 1000, 50, 3)]
    interrupts, fast_requests, fast_steps = _interrupts_and_frames(monkeypatch, close, fast=True)
    assert interrupts == 0
    _, plain_requests, plain_steps = _interrupts_and_frames(monkeypatch, close, fast=False)
    pd.testing.assert_frame_equal(fast_requests, plain_requests)
    pd.testing.assert_frame_equal(fast_steps, plain_steps)


def test_kept_prefill_chunk_times_equal_fresh_look_ups_float_for_float_and_count_for_count():
    from profiler.device_spec import get_device_spec
    from profiler.measured.shipped import build_measured
    from profiler.model_spec import get_model_spec

    def fresh():
        return build_measured("auto", get_model_spec("llama-3-8b"), get_device_spec("h100-sxm"), 1)

    plain, kept = fresh(), fresh()
    r = random.Random(17)
    chunks = [(r.randint(2, 9_000), r.choice([0, r.randint(1, 200_000)])) for _ in range(12)]  # some past the table
    for _ in range(300):
        q, c, p = [1, 1], [r.randint(1, 5_000), r.randint(1, 5_000)], [False, False]
        for _ in range(r.randint(1, 2)):
            chunk_q, chunk_c = r.choice(chunks)  # repeated chunks: served from the kept times
            q.append(chunk_q), c.append(chunk_c), p.append(True)
        plain._prefill_in_grid.clear()  # every look-up fresh
        assert kept.predict_step_s(q, c, p) == plain.predict_step_s(q, c, p)
    assert 0 < len(kept._prefill_in_grid) <= len(chunks)
    assert (kept.num_predictions, kept.out_of_grid_steps, kept.out_of_range) == (
        plain.num_predictions, plain.out_of_grid_steps, plain.out_of_range)
    assert kept.out_of_grid_steps > 0  # the chunks past the table were priced and counted each time


def test_window_prices_from_the_contexts_total_equal_the_lists_and_at2_many_scales_exactly():
    from profiler.device_spec import get_device_spec
    from profiler.measured.shipped import build_measured
    from profiler.model_spec import get_model_spec

    def fresh():
        return build_measured("auto", get_model_spec("llama-3-8b"), get_device_spec("h100-sxm"), 1)

    by_list, by_total, stepwise = fresh(), fresh(), fresh()
    for context in ([17, 300, 4_000], [100_000, 200_000], [5] * 40):  # the second past the table
        for first, steps in ((0, 16), (16, 5)):
            expected = [stepwise.predict_step_s([1] * len(context), [x + j for x in context], [False] * len(context))
                        for j in range(first, first + steps)]
            assert by_list.predict_decode_steps_s(context, steps, first) == expected
            assert by_total.predict_decode_steps_total_s(len(context), sum(context), steps, first) == expected
    counts = [(m.num_predictions, m.out_of_grid_steps, m.out_of_range) for m in (by_list, by_total, stepwise)]
    assert counts[0] == counts[1] == counts[2] and counts[0][0] == 3 * (16 + 5) and counts[0][1] > 0
    grid = _grid_2x2()
    ys = [1.5, 2.0, 9.0, 20.0]
    times, outs = grid.at2_many(2.0, ys)
    assert grid.at2_many(2.0, ys, 0.25, 32) == ([0.25 + 32 * t for t in times], outs)


def test_finished_request_fields_are_in_the_order_finish_passes_them():
    import dataclasses

    from simulator.scheduler import FinishedRequest

    # `Scheduler._finish` builds the record positionally, in this order.
    assert [f.name for f in dataclasses.fields(FinishedRequest)] == [
        "request_id", "arrival_s", "prompt_tokens", "output_tokens", "finish_reason", "generated_tokens",
        "first_scheduled_s", "first_token_s", "completion_s", "num_preemptions", "recomputed_tokens",
        "cached_tokens", "resumed_cached_tokens", "cpu_hit_tokens", "kv_load_wait_s", "token_times_s"]
    scheduler = _decoding_sarathi(1, prompt_tokens=20, output_tokens=2)
    plan = scheduler.schedule(1.0)
    (finished,) = scheduler.complete_step(plan, None, 2.0)
    assert finished == FinishedRequest(request_id=0, arrival_s=0.0, prompt_tokens=20, output_tokens=2,
                                       finish_reason="completed", generated_tokens=2, first_scheduled_s=0.0,
                                       first_token_s=1.0, completion_s=2.0, num_preemptions=0, recomputed_tokens=0,
                                       cached_tokens=0, resumed_cached_tokens=0, token_times_s=[1.0, 2.0])


def test_records_and_step_log_are_the_same_whatever_their_flush_sizes(monkeypatch):
    """The staging sizes (256 requests, 2,048 steps: chosen for speed) only batch the typed
    columns: 1 and 3 (a flush every request and every few steps, windows split across flushes)
    give the same frames, token times and summary, value for value, as sizes no run reaches."""
    from simulator import records, step_log
    from simulator.simulate import simulate
    from profiler import RooflineCostModel, get_device_spec, get_model_spec
    from simulator.scheduler import SchedulerConfig, make_scheduler
    from traces import Request

    rng = random.Random(7)
    requests = [Request(i, 0.02 * i, rng.randint(20, 700), rng.randint(1, 60)) for i in range(80)]
    cost = RooflineCostModel(get_model_spec("llama-3-8b"), get_device_spec("h100-sxm"))

    def run(flush_requests: int, flush_steps: int):
        monkeypatch.setattr(records, "_FLUSH_REQUESTS", flush_requests)
        monkeypatch.setattr(step_log, "_FLUSH_STEPS", flush_steps)
        scheduler = make_scheduler("sarathi", SchedulerConfig(num_gpu_blocks=300, chunk_size=256))
        return simulate(requests, scheduler, cost)

    small, large = run(1, 3), run(10**9, 10**9)
    assert len(small.steps) > 100 and (small.steps["num_prefill_tokens"] == 0).sum() > 50  # windows and mixed steps
    pd.testing.assert_frame_equal(small.requests.drop(columns="token_times_s"),
                                  large.requests.drop(columns="token_times_s"), check_exact=True)
    assert sum(map(len, small.requests["token_times_s"])) == sum(r.output_tokens for r in requests)
    for a, b in zip(small.requests["token_times_s"], large.requests["token_times_s"]):
        assert np.array_equal(a, b)
    pd.testing.assert_frame_equal(small.steps, large.steps, check_exact=True)
    assert repr(small.summary) == repr(large.summary)
