"""An interrupted sweep resumes from its cache without recomputing finished points."""
from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from experiments.cli.main import app

CONFIG = """
name: resume
trace: {kind: poisson, qps: 6, num_requests: 200, prompt_tokens: [100, 1500], output_tokens: [20, 200]}
engine: {scheduler: sarathi, chunk_size: 512}
variants:
  - {engine.chunk_size: [128, 256, 512, 1024]}
"""


def test_sigkill_then_resume_recomputes_nothing_finished(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    out = tmp_path / "out"
    cache = out / ".cache"
    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-m", "experiments.cli.main", "sweep", str(config), "--out", str(out),
                             "--jobs", "1"], cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and len(list(cache.glob("*.zip"))) < 1:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = {p.name for p in cache.glob("*.zip")}
    assert finished, "no point finished before the kill"
    assert not (out / "points.csv").exists() or len(finished) == 4

    result = CliRunner().invoke(app, ["sweep", str(config), "--out", str(out), "--jobs", "1"])
    assert result.exit_code == 0, result.output
    points = pd.read_csv(out / "points.csv")
    assert int(points["cached"].sum()) == len(finished)  # exactly the finished ones were reused
    assert {p.name for p in cache.glob("*.zip")} >= finished and len(list(cache.glob("*.zip"))) == 4

    fresh = CliRunner().invoke(app, ["sweep", str(config), "--out", str(tmp_path / "fresh"), "--no-cache"])
    assert fresh.exit_code == 0
    again = pd.read_csv(tmp_path / "fresh" / "points.csv")
    columns = ["label", "completed", "tbt_s_p99", "ttft_s_p90", "num_steps"]
    pd.testing.assert_frame_equal(points[columns], again[columns])
    assert not again["cached"].any()


# ----- a change of reporting only re-uses the cached work -------------------------------------

import math  # noqa: E402

import pytest  # noqa: E402

from experiments.config import SweepConfig, load_config  # noqa: E402
from experiments.planning import sweep as sweep_module  # noqa: E402
from experiments.planning.results_cache import cache_key  # noqa: E402
from experiments.planning.sweep import search_cache_key  # noqa: E402

SEARCH = """
name: cap
trace: {kind: poisson, qps: 1, num_requests: 40, prompt_tokens: [100, 400], output_tokens: [10, 40]}
engine: {scheduler: sarathi, chunk_size: 512}
slo: {tbt_p99_s: 0.05}
search: {qps: [1, 16], num_requests: 40, seeds: 1, precision: 0.2, max_trials: 6, loads: [2, 4]}
variants:
  - {engine.chunk_size: [256, 512]}
"""


def _first_point(tmp_path, text, overrides=()):
    path = tmp_path / "k.yaml"
    path.write_text(text)
    return SweepConfig.model_validate(load_config(path, list(overrides))[1][0])


@pytest.mark.parametrize("override, same_point, same_search", [
    ("slo={tbt_p99_s: 0.02}", True, False),          # a trial's pass/fail reads the SLOs
    ("goodput={ttft_s: 0.5}", True, True),
    ("fleet={target_qps: 20}", True, True),
    ("name=renamed", True, True),
    ("search.loads=[2, 4, 8]", True, True),           # the grid is its own work
    ("search.num_requests=50", True, False),
    ("search.trim_fraction=0.2", True, False),        # read by every trial (the point key gets it as an extra)
    ("engine.block_size=32", False, False),
    ("trace.seed=1", False, False),                    # repetition k runs trace.seed + k (it ignored it)
    ("trace.qps=2", False, True),                      # the search sets each trial's QPS itself
    ("trace.num_requests=80", False, True),            # ... and its size (search.num_requests)
    ("engine.max_num_seqs=64", False, False),
])
def test_cache_keys_leave_out_exactly_the_keys_the_work_does_not_read(tmp_path, override, same_point, same_search):
    base = _first_point(tmp_path, SEARCH)
    changed = _first_point(tmp_path, SEARCH, [override])

    def search_key(c):
        return search_cache_key(c, 0)

    assert (cache_key("point", base, 0.0) == cache_key("point", changed, 0.0)) is same_point
    assert (search_key(base) == search_key(changed)) is same_search


def test_search_key_of_no_slo_is_that_of_the_defaults_written_out(tmp_path):
    """`slo: {}` searches against Sarathi-Serve's defaults for an 8B model (P99 TBT 0.1 s, P50
    scheduling delay 2 s): writing them out is the same work."""
    bare = _first_point(tmp_path, SEARCH.replace("slo: {tbt_p99_s: 0.05}\n", ""))
    explicit = _first_point(tmp_path, SEARCH, ["slo={tbt_p99_s: 0.1, scheduling_delay_p50_s: 2.0}"])
    assert search_cache_key(bare, 0) == search_cache_key(explicit, 0)
    assert search_cache_key(bare, 0) != search_cache_key(bare, 1)  # each seed is its own bisection


def test_changing_slo_or_goodput_re_renders_a_sweep_from_the_cache(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    out = tmp_path / "out"
    first = CliRunner().invoke(app, ["sweep", str(config), "--out", str(out), "--jobs", "1"])
    assert first.exit_code == 0, first.output
    tbt = pd.read_csv(out / "points.csv")["tbt_s_p99"].to_numpy()
    limit = float((tbt.min() + tbt.max()) / 2)  # between the points: some pass, some fail

    args = ["sweep", str(config), "--out", str(out), "--jobs", "1", "--set", f"slo={{tbt_p99_s: {limit}}}",
            "--set", "goodput={ttft_s: 0.05}"]
    second = CliRunner().invoke(app, args)
    assert second.exit_code == 0, second.output
    points = pd.read_csv(out / "points.csv")
    assert points["cached"].all()  # nothing simulated again
    assert list(points["slo_tbt_p99_s"]) == [bool(t <= limit) for t in tbt]
    assert list(points["slo_met"]) == [bool(t <= limit) for t in tbt]
    assert 0 < points["slo_met"].sum() < len(points)
    requests = pd.read_parquet(out / "requests.parquet")
    for _, point in points.iterrows():
        mine = requests[requests["point_id"] == point["point_id"]]
        good = ((mine["finish_reason"] == "completed") & (mine["ttft_s"] <= 0.05)).sum()
        assert point["goodput_rps"] == pytest.approx(good / point["makespan_s"], rel=1e-12)

    fresh = CliRunner().invoke(app, args[:3] + [str(tmp_path / "fresh"), "--no-cache"] + args[4:])
    assert fresh.exit_code == 0
    recomputed = pd.read_csv(tmp_path / "fresh" / "points.csv")
    columns = ["label", "tbt_s_p99", "slo_tbt_p99_s", "slo_met", "goodput_rps"]
    pd.testing.assert_frame_equal(points[columns], recomputed[columns])


def test_capacity_search_re_uses_its_trials_unless_the_slos_or_the_search_change(tmp_path, monkeypatch):
    """Counted calls: a bisection per point and seed, a simulation per point and grid load."""
    calls = {"searches": 0, "load_runs": 0}
    search, run = sweep_module.search_capacity, sweep_module.run_point

    def counting_search(*args, **kwargs):
        calls["searches"] += 1
        return search(*args, **kwargs)

    def counting_run(*args, **kwargs):
        calls["load_runs"] += 1
        return run(*args, **kwargs)

    monkeypatch.setattr(sweep_module, "search_capacity", counting_search)
    monkeypatch.setattr(sweep_module, "run_point", counting_run)
    config = tmp_path / "s.yaml"
    config.write_text(SEARCH)
    cache = tmp_path / "cache"

    def run_with(*overrides):
        before = dict(calls)
        points = load_config(config, list(overrides))[1]
        result = sweep_module.run_capacity_sweep(points, jobs=1, cache_dir=cache)
        return result, {k: calls[k] - before[k] for k in calls}

    (table, _, loads), counts = run_with()
    assert counts == {"searches": 2, "load_runs": 4}
    assert not table["cached"].any()
    capacities = list(table["capacity_qps"])

    (table, _, _), counts = run_with("fleet={target_qps: 20, gpu_hour_usd: 2}")
    assert counts == {"searches": 0, "load_runs": 0}
    assert table["cached"].all() and list(table["capacity_qps"]) == capacities
    assert list(table["fleet_replicas"]) == [math.ceil(20 / c) for c in capacities]

    (_, _, loads), counts = run_with("goodput={ttft_s: 0.5}")
    assert counts == {"searches": 0, "load_runs": 0}
    assert loads["goodput_rps"].notna().all()

    (table, _, loads), counts = run_with("slo={tbt_p99_s: 0.02}")
    assert counts == {"searches": 2, "load_runs": 0}  # new bisections; the grid runs re-judged
    assert list(loads["slo_met"]) == [bool(t <= 0.02) for t in loads["tbt_s_p99"]]

    _, counts = run_with("search.loads=[2, 4, 8]")
    assert counts == {"searches": 0, "load_runs": 2}  # only QPS 8, for each point

    _, counts = run_with("search.num_requests=50")
    assert counts == {"searches": 2, "load_runs": 4}


def test_a_cache_entry_of_another_shape_is_recomputed_not_trusted(tmp_path, capsys):
    from experiments.planning.results_cache import ResultsCache

    config = tmp_path / "s.yaml"
    config.write_text(SEARCH.replace("loads: [2, 4]", "loads: []"))
    points = load_config(config)[1][:1]
    cache = tmp_path / "cache"
    point = SweepConfig.model_validate(points[0])
    search_entry = cache / f"{sweep_module.search_cache_key(point, 0)}.zip"
    for value in ({"capacity": 3.0}, (3.0,), ("3", []), (3.0, ["a trial"])):  # none is (QPS, [trial rows])
        assert ResultsCache(cache).put(sweep_module.search_cache_key(point, 0), value)
        table, trials, _ = sweep_module.run_capacity_sweep(points, jobs=1, cache_dir=cache)
        assert "error" not in table and not table["cached"].any() and table["capacity_qps"].iloc[0] >= 1, value
        assert f"note: results cache entry {search_entry} is not used (not a result of the expected " \
            f"shape (a {type(value).__name__})); recomputing it" in capsys.readouterr().err
    again, _, _ = sweep_module.run_capacity_sweep(points, jobs=1, cache_dir=cache)  # the recomputed entry is good
    assert again["cached"].all() and again["capacity_qps"].iloc[0] == table["capacity_qps"].iloc[0]
    assert capsys.readouterr().err == ""
    key = cache_key('point', point, 0.0)
    assert ResultsCache(cache).put(key, [1, 2, 3])
    result = sweep_module._safe_run(point, 0, cache)
    assert "error" not in result.row and not result.row["cached"] and result.row["completed"] == 40


# ----- entries are data: a crafted file is never executed -------------------------------------

class _RunsCode:
    """Unpickling this runs `marker.touch()` — what a crafted cache entry could do with os.system."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_crafted_pickle_or_garbage_entry_is_not_executed_but_recomputed_with_a_note(tmp_path, capsys):
    import pickle
    import zipfile

    from experiments.planning.results_cache import ResultsCache

    config = tmp_path / "s.yaml"
    config.write_text(SEARCH.replace("loads: [2, 4]", "loads: []"))
    point = SweepConfig.model_validate(load_config(config)[1][0])
    cache = tmp_path / "cache"
    cache.mkdir()
    key = cache_key("point", point, 0.0)
    marker = tmp_path / "executed"
    crafted = pickle.dumps(_RunsCode(marker))
    fresh = sweep_module._safe_run(point, 0, None)  # the right answer, uncached
    good = ResultsCache(cache)
    assert good.put("f" * 64, fresh)
    whole = (cache / f"{'f' * 64}.zip").read_bytes()
    fake_entry = io.BytesIO()
    with zipfile.ZipFile(fake_entry, "w") as archive:  # a zip whose entry.json is a pickle
        archive.writestr("entry.json", crafted)
    for content, reason in [
            (crafted, "not a readable entry (BadZipFile: File is not a zip file)"),
            (b"garbage", "not a readable entry (BadZipFile: File is not a zip file)"),
            (whole[:len(whole) // 2], "not a readable entry (BadZipFile: File is not a zip file)"),
            (fake_entry.getvalue(), "not a readable entry (UnicodeDecodeError: "),
    ]:
        (cache / f"{key}.pkl").write_bytes(crafted)  # an older version's name: never unpickled
        (cache / f"{key}.zip").write_bytes(content)
        result = sweep_module._safe_run(point, 0, cache)
        assert not marker.exists()
        assert "error" not in result.row and not result.row["cached"]
        assert result.row["completed"] == fresh.row["completed"] == 40
        assert f"note: results cache entry {cache / (key + '.zip')} is not used ({reason}" in capsys.readouterr().err
        assert not (cache / f"{key}.pkl").exists()  # replaced by the recomputed entry
        again = sweep_module._safe_run(point, 0, cache)  # ... which is read back as data
        assert again.row["cached"] and again.row["tbt_s_p99"] == fresh.row["tbt_s_p99"]
        pd.testing.assert_frame_equal(again.requests, fresh.requests)
        pd.testing.assert_frame_equal(again.steps, fresh.steps)
        assert capsys.readouterr().err == ""
    pickle.loads(crafted)  # the payload is live: unpickling it would have run its code
    assert marker.exists()


def test_entries_round_trip_tuples_nan_and_refuse_what_is_not_data(tmp_path):
    from experiments.planning.results_cache import ResultsCache

    cache = ResultsCache(tmp_path)
    value = (2.5, [{"qps": 2.5, "ok": True, "p99": float("nan"), "n": 3, "note": None}])
    assert cache.put("a" * 64, value)
    back = cache.get("a" * 64)
    assert isinstance(back, tuple) and back[0] == 2.5 and isinstance(back[1][0]["n"], int)
    assert math.isnan(back[1][0]["p99"]) and back[1][0]["ok"] is True and back[1][0]["note"] is None
    assert not cache.put("b" * 64, {"f": _RunsCode(tmp_path / "x")})
    assert cache.write_error == "cannot store a _RunsCode as data"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a" * 64 + ".zip"]  # nothing partial
