"""A results cache entry is verified before it is served: a member file damaged or edited with
its zip CRC made valid again, a requests file without a column the report reads, a steps file
that lost rows, an edited entry.json, an entry of the format before digests — each is
recomputed with a note, and the sweep's outputs are those of a fresh run, never a mix of runs."""
from __future__ import annotations

import io
import sys
import json
import zipfile

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from experiments.cli.main import app
from experiments.config import SweepConfig
from experiments.outputs import MANIFEST
from experiments.planning import results_cache
from experiments.planning.results_cache import RecordsFolder, ResultsCache, cache_key
from experiments.planning.sweep import remove_point_files, run_sweep, sweep_requests
from experiments.point import PointResult

POINT = {
    "name": "verified", "cost_model": "roofline",
    "trace": {"kind": "poisson", "qps": 8, "num_requests": 90, "prompt_tokens": [100, 1500], "output_tokens": [20, 200]},
    "engine": {"scheduler": "sarathi", "chunk_size": 512}, "goodput": {"ttft_s": 2.0, "tpot_s": 0.05},
}


def rewrite(path, member, change):
    """Replace `member` of the entry at `path` by change(its bytes), as a valid zip (every CRC
    right: only a digest can tell)."""
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    members[member] = change(members[member])
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def as_table(change):
    """A change of a Parquet file's bytes made from a change of its table."""
    def changed(data: bytes) -> bytes:
        buffer = io.BytesIO()
        pq.write_table(change(pq.read_table(io.BytesIO(data))), buffer)
        return buffer.getvalue()
    return changed


def flip_middle_byte(data: bytes) -> bytes:
    changed = bytearray(data)
    changed[len(changed) // 2] ^= 0xFF
    return bytes(changed)


def ttft_times_ten(table: pa.Table) -> pa.Table:
    return table.set_column(table.schema.get_field_index("ttft_s"), "ttft_s", pc.multiply(table["ttft_s"], 10.0))


def stored(tmp_path):
    """(cache holding POINT's entry, its key, the computed point in memory)."""
    cache = ResultsCache(tmp_path / "cache")
    cache.directory.mkdir()
    [computed] = run_sweep([POINT], jobs=1, cache_dir=cache.directory)
    return cache, cache_key("point", SweepConfig.model_validate(POINT), 0.0), computed


DAMAGES = {  # member, change, the note's reason
    "flipped byte in requests": ("requests.parquet", flip_middle_byte, "its requests.parquet does not match the SHA-256"),
    "ttft_s dropped": ("requests.parquet", as_table(lambda t: t.drop(["ttft_s"])), "its requests.parquet does not match the SHA-256"),
    "ttft_s x10": ("requests.parquet", as_table(ttft_times_ten), "its requests.parquet does not match the SHA-256"),
    "5 steps lost": ("steps.parquet", as_table(lambda t: t.slice(0, t.num_rows - 5)), "its steps.parquet does not match the SHA-256"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
@pytest.mark.parametrize("to_files", [True, False])  # copied into a run folder, or read into memory
def test_a_member_damaged_behind_a_valid_crc_is_not_served(tmp_path, capsys, damage, to_files):
    cache, key, _ = stored(tmp_path)
    member, change, reason = DAMAGES[damage]
    rewrite(cache.path(key), member, change)
    capsys.readouterr()
    run = tmp_path / "run"
    run.mkdir()
    assert cache.get(key, records=RecordsFolder(run, 0) if to_files else None) is None
    assert f"is not used ({reason} stored when it was written (damaged or edited)); recomputing it" \
        in capsys.readouterr().err
    assert list(run.iterdir()) == []  # no copied file left


def test_an_entry_json_edited_behind_a_valid_crc_is_not_served(tmp_path, capsys):
    cache, key, computed = stored(tmp_path)

    def edit(data: bytes) -> bytes:
        head = json.loads(data)
        head["row"]["ttft_s_p90"] *= 10
        return json.dumps(head).encode()
    rewrite(cache.path(key), "entry.json", edit)
    assert cache.get(key) is None
    assert "its entry.json does not match its SHA-256 (edited or damaged)" in capsys.readouterr().err
    assert cache.put("c" * 64, (2.5, [{"qps": 2.5}]))  # a search's entry (JSON only) is checked too
    rewrite(cache.path("c" * 64), "entry.json", lambda data: data.replace(b"2.5", b"9.5"))
    assert cache.get("c" * 64) is None
    assert "its entry.json does not match its SHA-256" in capsys.readouterr().err


def test_files_stored_whole_but_missing_a_column_or_rows_are_not_served(tmp_path, capsys):
    """What the digest cannot catch (the damage was there when the entry was written): the
    columns the report reads and the rows the row counts."""
    cache, key, computed = stored(tmp_path)
    assert computed.row["num_steps"] == len(computed.steps) > 5
    for broken, reason in [
            (PointResult(computed.row, computed.requests.drop(columns="ttft_s"), computed.steps),
             "its requests file lacks the column(s) ttft_s"),
            (PointResult(computed.row, computed.requests, computed.steps.iloc[:-5]),
             f"its steps file holds {computed.row['num_steps'] - 5} rows, its row says {computed.row['num_steps']}")]:
        assert cache.put(key, broken)
        for records in (None, RecordsFolder(tmp_path / "run", 0)):
            assert cache.get(key, records=records) is None
            assert f"is not used ({reason}); recomputing it" in capsys.readouterr().err
        assert list((tmp_path / "run").iterdir()) == []
    assert cache.put(key, computed)  # the whole one is served, equal to what was computed
    served = cache.get(key)
    pd.testing.assert_frame_equal(served.requests, computed.requests)
    assert len(served.steps) == computed.row["num_steps"]


def test_an_entry_of_the_format_before_digests_is_recomputed_with_a_note(tmp_path, capsys):
    cache, key, _ = stored(tmp_path)

    def as_format_1(data: bytes) -> bytes:
        head = json.loads(data)
        for added in ("members_sha256", "sha256"):
            head.pop(added)
        return json.dumps({**head, "format": 1}).encode()
    rewrite(cache.path(key), "entry.json", as_format_1)
    assert cache.get(key) is None
    assert "is not used (not format 3); recomputing it" in capsys.readouterr().err


def test_a_served_point_is_the_computed_one(tmp_path):
    """Verification rejects nothing whole: a second sweep serves every point, value for value."""
    cache, key, computed = stored(tmp_path)
    [again] = run_sweep([POINT], jobs=1, cache_dir=cache.directory, records_dir=tmp_path / "run")
    try:
        assert again.row["cached"] is True
        assert again.row["goodput_rps"] == computed.row["goodput_rps"] and again.row["num_steps"] == len(computed.steps)
        pd.testing.assert_frame_equal(sweep_requests([again]), computed.requests)
    finally:
        remove_point_files([again])


# ----- the command: a bad entry recomputed, the run folder holds one run's files -------------------

OTHER = """
name: other
trace: {kind: poisson, qps: 4, num_requests: 50, prompt_tokens: [100, 800], output_tokens: [10, 100]}
engine: {scheduler: vllm_v1, chunk_size: 1024}
"""
MINE = """
name: mine
trace: {kind: poisson, qps: 8, num_requests: 70, prompt_tokens: [100, 1500], output_tokens: [20, 200], seed: 3}
engine: {scheduler: sarathi, chunk_size: 512}
goodput: {ttft_s: 2.0}
variants:
  - {engine.chunk_size: [256, 512]}
"""


def sweep(config, out, *extra):
    return CliRunner().invoke(app, ["sweep", str(config), "--out", str(out), "--jobs", "1", *extra])


def configs(tmp_path):
    mine, other = tmp_path / "mine.yaml", tmp_path / "other.yaml"
    mine.write_text(MINE)
    other.write_text(OTHER)
    return mine, other


def test_a_damaged_entry_in_a_reused_folder_is_recomputed_and_the_folder_holds_this_run_only(tmp_path):
    """The tester's case: sweep A, sweep B into the same folder, damage A's entries (CRC kept
    valid), sweep A again: it used to crash reading the requests back and leave A's tables
    beside B's requests.parquet and report.md."""
    mine, other = configs(tmp_path)
    out = tmp_path / "mix"
    assert sweep(mine, out).exit_code == 0
    mine_entries = sorted((out / ".cache").glob("*.zip"))
    assert len(mine_entries) == 2
    assert sweep(other, out).exit_code == 0
    for entry in mine_entries:
        rewrite(entry, "requests.parquet", flip_middle_byte)
    result = sweep(mine, out)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and result.output.count("is not used (its requests.parquet") == 2
    fresh = sweep(mine, tmp_path / "fresh", "--no-cache")
    assert fresh.exit_code == 0
    points = pd.read_csv(out / "points.csv")
    assert points["cached"].tolist() == [False, False]
    pd.testing.assert_frame_equal(points.drop(columns="cached"), pd.read_csv(tmp_path / "fresh" / "points.csv").drop(columns="cached"))
    requests = pd.read_parquet(out / "requests.parquet")
    assert requests["point_id"].tolist() == [0] * 70 + [1] * 70  # mine's, not other's 50
    pd.testing.assert_frame_equal(requests, pd.read_parquet(tmp_path / "fresh" / "requests.parquet"))
    assert (out / "report.md").read_text() == (tmp_path / "fresh" / "report.md").read_text()  # mine's, not other's
    assert not [p.name for p in out.iterdir() if p.name.startswith(".tmp")]
    assert sweep(mine, out).exit_code == 0 and pd.read_csv(out / "points.csv")["cached"].tolist() == [True, True]


def test_a_failure_while_writing_the_outputs_leaves_no_earlier_runs_files(tmp_path, monkeypatch):
    """Whatever fails after the points ran (here the report, with an error no handler expects),
    no file of the earlier run into the folder is left listed beside this run's."""
    from experiments.planning import report

    mine, other = configs(tmp_path)
    out = tmp_path / "out"
    assert sweep(other, out).exit_code == 0
    assert (out / "report.md").exists() and (out / "requests.parquet").exists()

    def broken(*args, **kwargs):
        raise RuntimeError("report failed")
    monkeypatch.setattr(report, "write_report", broken)
    result = sweep(mine, out)
    assert isinstance(result.exception, RuntimeError)
    listed = set(json.loads((out / MANIFEST).read_text())["files"])
    on_disk = {p.name for p in out.iterdir() if p.is_file() and not p.name.startswith(".")}
    assert on_disk == {"points.csv", "points.parquet", "requests.parquet", "steps.parquet", "config.yaml"}
    assert listed == on_disk  # report.md and plots of `other` are gone, nothing else listed
    assert pd.read_parquet(out / "requests.parquet")["point_id"].tolist() == [0] * 70 + [1] * 70
    assert not [p.name for p in out.iterdir() if p.name.startswith(".tmp")]


def test_a_point_file_that_cannot_be_read_back_is_a_named_failure_not_a_traceback(tmp_path, monkeypatch):
    mine, _ = configs(tmp_path)
    real = results_cache.pd.read_parquet

    def unreadable(path, *args, **kwargs):  # the sweep's read-back of the point's file, no other read
        if sys._getframe(1).f_code.co_name == "_read_back" and str(path).endswith("-requests.parquet"):
            raise OSError("Unexpected end of stream")
        return real(path, *args, **kwargs)
    from experiments.planning import sweep as sweep_module
    monkeypatch.setattr(sweep_module.pd, "read_parquet", unreadable)
    result = sweep(mine, tmp_path / "out")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "cannot read it back (Unexpected end of stream)" in result.output
    assert "report.md" in result.output and not (tmp_path / "out" / "report.md").exists()


def test_a_point_whose_columns_cannot_be_derived_leaves_no_record_file(tmp_path, monkeypatch):
    """simulate_cached removes the point's files when deriving its report columns fails (the
    KeyError of issue 4 used to leave `.tmp-sarathi-point-*` files behind)."""
    from experiments.planning import sweep as sweep_module

    cache, key, _ = stored(tmp_path)
    run = tmp_path / "run"

    def missing(*args):
        raise KeyError("ttft_s")
    monkeypatch.setattr(sweep_module, "report_columns", missing)
    with pytest.raises(KeyError):
        sweep_module.simulate_cached(SweepConfig.model_validate(POINT), 0, cache=cache, records_dir=run)
    assert list(run.iterdir()) == []


CAPACITY = """
name: cap
trace: {kind: poisson, qps: 1, num_requests: 40, prompt_tokens: [100, 400], output_tokens: [10, 40]}
engine: {scheduler: vllm_v1, chunk_size: 512}
slo: {tbt_p99_s: 0.05}
search: {qps: [1, 16], num_requests: 40, seeds: 1, precision: 0.2, max_trials: 4}
"""


def test_a_failed_capacity_report_leaves_no_earlier_runs_files(tmp_path, monkeypatch):
    from experiments.planning import capacity_report

    _, other = configs(tmp_path)
    capacity = tmp_path / "cap.yaml"
    capacity.write_text(CAPACITY)
    out = tmp_path / "out"
    assert sweep(other, out).exit_code == 0

    def broken(*args, **kwargs):
        raise RuntimeError("report failed")
    monkeypatch.setattr(capacity_report, "write_capacity_report", broken)
    result = sweep(capacity, out)
    assert isinstance(result.exception, RuntimeError)
    on_disk = {p.name for p in out.iterdir() if p.is_file() and not p.name.startswith(".")}
    assert on_disk == {"points.csv", "points.parquet", "trials.csv", "trials.parquet", "config.yaml"}
    assert set(json.loads((out / MANIFEST).read_text())["files"]) == on_disk  # other's requests, report gone


# ----- an entry is tied to its key (a copy over another key's file is not that key's result) ------

def test_a_capacity_entry_copied_over_another_seeds_is_not_served_for_it(tmp_path, capsys):
    cache = ResultsCache(tmp_path / "cache")
    cache.directory.mkdir()
    seed_0, seed_1 = "0" * 64, "1" * 64
    assert cache.put(seed_0, (23.07, [{"seed": 0, "trial_qps": 23.07, "passed": True}]))
    cache.path(seed_1).write_bytes(cache.path(seed_0).read_bytes())  # cp .cache/<seed 0>.zip .cache/<seed 1>.zip
    assert cache.get(seed_1) is None
    assert (f"results cache entry {cache.path(seed_1)} is not used (it was stored under the key 000000000000…, "
            "not this one's (an entry copied or renamed from another unit of work)); recomputing it"
            in capsys.readouterr().err)
    assert cache.get(seed_0) == (23.07, [{"seed": 0, "trial_qps": 23.07, "passed": True}])  # its own still served


def test_a_point_entry_copied_over_another_points_is_recomputed_not_served_as_it(tmp_path):
    """The point labelled chunk=256 never carries chunk=1024's settings and metrics."""
    config = tmp_path / "c.yaml"
    config.write_text("name: tied\ncost_model: roofline\n"
                      "trace: {kind: poisson, qps: 8, num_requests: 40, prompt_tokens: [100, 900], output_tokens: [10, 60]}\n"
                      "engine: {scheduler: sarathi, chunk_size: 256}\nvariants:\n  - {engine.chunk_size: [256, 1024]}\n")
    out = tmp_path / "run"
    first = CliRunner().invoke(app, ["sweep", str(config), "--out", str(out), "--jobs", "1"])
    assert first.exit_code == 0, first.output
    fresh = pd.read_csv(out / "points.csv")
    from experiments.config import load_config
    keys = [cache_key("point", SweepConfig.model_validate(p), 0.0) for p in load_config(config)[1]]
    cache = out / ".cache"
    (cache / f"{keys[0]}.zip").write_bytes((cache / f"{keys[1]}.zip").read_bytes())  # chunk=1024's over chunk=256's
    again = CliRunner().invoke(app, ["sweep", str(config), "--out", str(out), "--jobs", "1"])
    assert again.exit_code == 0, again.output
    assert f"results cache entry {cache / keys[0]}.zip is not used (it was stored under the key {keys[1][:12]}…" \
        in " ".join(again.stderr.split())
    points = pd.read_csv(out / "points.csv")
    assert points["chunk_size"].tolist() == [256, 1024] and points["cached"].tolist() == [False, True]
    columns = [c for c in fresh.columns if c != "cached"]
    pd.testing.assert_frame_equal(points[columns], fresh[columns])  # chunk=256's own metrics, as first computed

