"""`sarathi-sim search-xpyd` (experiments/cli/xpyd.py): the xPyD search from the command line, its
run folder, and bad input as exit statuses."""
from __future__ import annotations

import json
import textwrap

import pandas as pd
import pytest
from typer.testing import CliRunner

from experiments.cli.main import app

CONFIG = """
name: xpyd
model: llama-3-8b
device: h100-sxm
cost_model: roofline
trace: {kind: profile, name: azure-conv, qps: 4, num_requests: 40, seed: 0}
engine: {scheduler: sarathi, chunk_size: 512}
goodput: {ttft_s: 0.5, tpot_s: 0.05}
cluster:
  prefill: {engine: {chunk_size: 2048}}
  link: {bandwidth_gb_s: 50}
"""
# Trials at their first length: these tests are about the command and its folder, not the
# sustained-load rule (tests/test_steady_state.py), and lengthened trials made each ~3x slower.
SHORT_TRIALS = "search: {max_trial_scale: 1}\n"
FILES = ["disaggregation.csv", "disaggregation.html", "disaggregation.md", "disaggregation.png"]


def invoke(tmp_path, *args, text=CONFIG + SHORT_TRIALS):
    config = tmp_path / "xpyd.yaml"
    config.write_text(textwrap.dedent(text))
    return CliRunner().invoke(app, ["search-xpyd", str(config), *args])


def test_search_writes_the_table_and_plot_into_a_run_folder(tmp_path):
    """Two GPUs, TP1: colocated 2x TP1 and 1P1D. The table holds both, best goodput per GPU
    first, goodput per GPU = capacity / 2; the folder's manifest lists exactly the three files,
    and a rerun into it rewrites them."""
    out = tmp_path / "run"
    for _ in range(2):
        result = invoke(tmp_path, "--gpus", "2", "--tp", "1", "--qps", "1,4", "--num-requests", "40", "--out", str(out))
        assert result.exit_code == 0, result.output
        assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == FILES
    table = pd.read_csv(out / "disaggregation.csv")
    assert sorted(table["label"]) == ["1P(TP1) 1D(TP1)", "colocated 2x TP1"]
    assert (table["goodput_per_gpu_qps"] == table["capacity_qps"] / 2).all()
    assert table["goodput_per_gpu_qps"].is_monotonic_decreasing and table["error"].isna().all()
    assert sorted(json.loads((out / ".sarathi-sim.json").read_text())["files"]) == FILES
    assert "best disaggregated 1P(TP1) 1D(TP1)" in result.output
    assert "| 1P(TP1) 1D(TP1) | disaggregated |" in (out / "disaggregation.md").read_text()


def test_a_layout_that_cannot_run_is_reported_and_the_others_finish(tmp_path):
    """llama-3-70b (131 GiB of weights) fits no TP1 instance of an 80 GB H100: on 2 GPUs with TP
    1 and 2, every layout but colocated 1x TP2 fails with the memory error; exit 1, all written."""
    out = tmp_path / "run"
    result = invoke(tmp_path, "--gpus", "2", "--tp", "1,2", "--qps", "0.1,0.4", "--num-requests", "20",
                    "--out", str(out), text=CONFIG.replace("llama-3-8b", "llama-3-70b"))
    assert result.exit_code == 1, result.output
    table = pd.read_csv(out / "disaggregation.csv")
    ran = table[table["error"].isna()]
    assert list(ran["label"]) == ["colocated 1x TP2"]
    assert table.loc[table["error"].notna(), "error"].str.contains("does not fit on h100-sxm").all()
    assert len(table) == 3 and table["label"].iloc[-1] != "colocated 1x TP2"  # failed rows last
    assert "2 of 3 layouts failed" in result.output
    assert "failed: ValueError: llama-3-70b does not fit" in (out / "disaggregation.md").read_text()
    # Not "only one kind of layout was searched": the disaggregated one was, and failed.
    assert ("every disaggregated layout failed (1; 1P(TP1) 1D(TP1): ValueError: llama-3-70b does not fit on "
            "h100-sxm") in " ".join(result.output.split())


@pytest.mark.parametrize(("args", "text", "message"), [
    (["--gpus", "2"], CONFIG.replace("goodput: {ttft_s: 0.5, tpot_s: 0.05}\n", ""), "goodput: thresholds"),
    (["--gpus", "2", "--qps", "4,1"], CONFIG, "needs 0 < LOW < HIGH"),
    (["--gpus", "2", "--tp", "one"], CONFIG, "--tp 'one'"),
    (["--gpus", "2", "--pp", "0"], CONFIG, "--pp '0'"),
    (["--gpus", "3", "--tp", "3"], CONFIG, "no layout of 3 GPUs"),
    (["--gpus", "2", "--point", "1"], CONFIG, "--point 1 is out of range"),
    (["--gpus", "2"], CONFIG.replace("trace: {kind: profile, name: azure-conv, qps: 4, num_requests: 40, seed: 0}",
                                     "trace: {kind: closed_loop, clients: 4, num_requests: 20}"),
     "sized by its clients"),
    (["--gpus", "1000000"], CONFIG, "GPU budget (--gpus) 1000000: expected 1 to 1024 GPUs (as layouts.gpus)"),
    (["--gpus", "2"], CONFIG.replace("chunk_size: 512}", "chunk_size: 512, data_parallel_size: 2}"),
     "engine.data_parallel_size (line 7): engine.data_parallel_size 2 beside cluster: a pool's instance is a DP "
     "engine by its own key"),
])
def test_bad_input_is_exit_2_with_the_reason(tmp_path, args, text, message):
    out = tmp_path / "run"
    result = invoke(tmp_path, *args, "--out", str(out), text=text)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert "validation error" not in result.output and "input_value" not in result.output  # no pydantic dump
    assert not out.exists()  # checked before the run folder is claimed


def test_a_folder_holding_other_files_is_refused(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.md").write_text("mine")
    result = invoke(tmp_path, "--gpus", "2", "--out", str(out))
    assert result.exit_code == 2 and "holds notes.md" in result.output
    assert sorted(p.name for p in out.iterdir()) == ["notes.md"]


def test_an_output_that_cannot_be_written_is_named_and_exit_1(tmp_path, monkeypatch):
    """The plot cannot be written (a full disk, simulated): the table and the Markdown report
    are written whole, the message names disaggregation.png and its reason (and the HTML page,
    which embeds it, as not written after it), exit 1."""
    import experiments.outputs as outputs

    def full_disk(fig, path, **kwargs):
        raise outputs.OutputWriteError(path, "No space left on device")

    monkeypatch.setattr(outputs, "save_figure", full_disk)
    out = tmp_path / "run"
    result = invoke(tmp_path, "--gpus", "2", "--tp", "1", "--qps", "1,4", "--num-requests", "40", "--out", str(out))
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "could not write disaggregation.png (No space left on device)" in text
    assert "disaggregation.html (not written after disaggregation.png failed)" in text
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["disaggregation.csv",
                                                                                   "disaggregation.md"]


def test_a_second_run_reuses_the_cached_trials(tmp_path, monkeypatch):
    """The trials of a search are cached in OUT/.cache: the same command again simulates
    nothing (the simulator is broken here to prove it) and writes the same table; --no-cache
    simulates again (and fails on the broken simulator, each layout with its error)."""
    import experiments.planning.disaggregation as disaggregation
    import experiments.planning.sweep as sweep

    args = ("--gpus", "2", "--tp", "1", "--qps", "1,4", "--num-requests", "40", "--out", str(tmp_path / "run"))
    assert invoke(tmp_path, *args).exit_code == 0
    first = pd.read_csv(tmp_path / "run" / "disaggregation.csv")

    def broken(*_, **__):
        raise RuntimeError("simulated again")

    monkeypatch.setattr(sweep, "run_point", broken)  # what the cache runs on a miss
    monkeypatch.setattr(disaggregation, "run_point", broken)  # what --no-cache runs
    result = invoke(tmp_path, *args)
    assert result.exit_code == 0, result.output
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "run" / "disaggregation.csv"), first)
    result = invoke(tmp_path, *args, "--no-cache")
    assert result.exit_code == 1 and "simulated again" in result.output


def test_seeds_give_the_mean_and_say_what_the_intervals_resolve(tmp_path):
    """--seeds 2: each layout's capacity is the mean of its two seeds' (capacity_by_seed), the
    report names the seeds and states the ranking's and the comparison's resolution."""
    out = tmp_path / "run"
    result = invoke(tmp_path, "--gpus", "2", "--tp", "1", "--qps", "2,8", "--num-requests", "40", "--seeds", "2",
                    "--out", str(out))
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "disaggregation.csv")
    assert (table["seeds"] == 2).all()
    for _, row in table.iterrows():
        by_seed = [float(c) for c in row["capacity_by_seed"].split(", ")]
        assert row["capacity_qps"] == pytest.approx(sum(by_seed) / 2, rel=1e-3)  # by_seed is printed to 4 digits
    text = (out / "disaggregation.md").read_text()
    assert "2 seeds (trace seeds 0–1, engine seeds 0–1)" in text
    # The statements follow the table's intervals (per GPU, [ci_low, ci_high]) of the two layouts.
    first, second = table.iloc[0], table.iloc[1]
    overlap = (first["goodput_per_gpu_ci_low"] <= second["goodput_per_gpu_ci_high"]
               and second["goodput_per_gpu_ci_low"] <= first["goodput_per_gpu_ci_high"])
    assert second["vs_best"] == ("not resolved" if overlap else "below")
    output = " ".join(result.output.split())
    if overlap:
        assert f"overlaps those of 1 other layout ({second['label']})" in output
        assert "their 95 % intervals overlap: the difference is not resolved at 2 seeds" in output
    else:
        assert f"{first['label']} leads: its 95 % interval over 2 seeds lies above every other layout's" in output
        assert "their 95 % intervals do not overlap" in output


def test_search_seeds_is_the_default_and_the_option_overrides_it(tmp_path):
    text = CONFIG + "search: {qps: [2, 8], num_requests: 40, seeds: 2}\n"
    result = invoke(tmp_path, "--gpus", "2", "--tp", "1", "--out", str(tmp_path / "a"), text=text)
    assert result.exit_code == 0, result.output
    assert (pd.read_csv(tmp_path / "a" / "disaggregation.csv")["seeds"] == 2).all()
    result = invoke(tmp_path, "--gpus", "2", "--tp", "1", "--seeds", "1", "--out", str(tmp_path / "b"), text=text)
    assert result.exit_code == 0, result.output
    assert (pd.read_csv(tmp_path / "b" / "disaggregation.csv")["seeds"] == 1).all()
    assert "one seed per layout: no confidence intervals" in " ".join(result.output.split())


@pytest.mark.parametrize(("args", "message"), [
    (["--dp", "0"], "--dp '0': expected degrees >= 1"),
    (["--ep", "maybe"], "--ep 'maybe': expected off, on or off,on"),
    (["--ep", "on"], "expert parallelism (--ep on): llama-3-8b is a dense model (no experts)"),
    (["--seeds", "0"], "--seeds: seeds 0: expected a whole number from 1 to 20"),
    (["--seeds", "21"], "--seeds: seeds 21: expected a whole number from 1 to 20"),
    (["--backend", "slurm"], "--backend 'slurm': valid values are local, ray"),
    (["--ray-address", "auto"], "--ray-address is only used with --backend ray"),
])
def test_bad_seeds_and_backends_are_exit_2(tmp_path, args, message):
    out = tmp_path / "run"
    result = invoke(tmp_path, "--gpus", "2", *args, "--out", str(out))
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not out.exists()


def test_backend_ray_without_ray_is_a_clear_error(tmp_path, monkeypatch):
    """Ray not importable (as on a machine without the extra): exit 2 naming the extra to
    install, before any folder or output is made."""
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    out = tmp_path / "run"
    result = invoke(tmp_path, "--gpus", "2", "--backend", "ray", "--out", str(out))
    assert result.exit_code == 2, result.output
    assert "--backend ray needs Ray: pip install 'sarathi-sim[ray]'" in " ".join(result.output.split())
    assert "Traceback" not in result.output and not out.exists()


def test_backend_ray_writes_the_local_table_and_its_cache(tmp_path, monkeypatch):
    """On Ray (a local instance) the table is the local one, byte for byte, and the trials the
    Ray workers ran are in OUT/.cache: a local rerun into the folder, the simulator broken,
    writes the same table."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'sarathi-sim[ray]'); the no-Ray error "
                                      "and a stand-in pool are tested without it")
    import experiments.planning.disaggregation as disaggregation
    import experiments.planning.sweep as sweep

    args = ("--gpus", "2", "--tp", "1", "--qps", "2,8", "--num-requests", "40", "--seeds", "2")
    assert invoke(tmp_path, *args, "--out", str(tmp_path / "local")).exit_code == 0
    result = invoke(tmp_path, *args, "--out", str(tmp_path / "ray"), "--backend", "ray")
    assert result.exit_code == 0, result.output
    local = (tmp_path / "local" / "disaggregation.csv").read_bytes()
    assert (tmp_path / "ray" / "disaggregation.csv").read_bytes() == local

    def broken(*_, **__):
        raise RuntimeError("simulated again")

    monkeypatch.setattr(sweep, "run_point", broken)
    monkeypatch.setattr(disaggregation, "run_point", broken)
    assert invoke(tmp_path, *args, "--out", str(tmp_path / "ray")).exit_code == 0
    assert (tmp_path / "ray" / "disaggregation.csv").read_bytes() == local


def test_no_layout_meeting_the_slos_is_said_with_what_to_do_and_exit_0(tmp_path):
    """A TPOT SLO of 1 ms no H100 step meets: every seed of both layouts fails the lowest rate.
    No best, no ratio (it was "ratio ∞"), a warning to lower --qps; exit 0 as the capacity
    search's (a search that found no capacity is a result, not a failure)."""
    out = tmp_path / "run"
    result = invoke(tmp_path, "--gpus", "2", "--tp", "1", "--qps", "1,4", "--num-requests", "40", "--seeds", "2",
                    "--out", str(out), text=CONFIG.replace("tpot_s: 0.05", "tpot_s: 0.001"))
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    assert "no layout met the SLOs at any tested rate, so there is no ratio: lower --qps" in output
    assert ("warning: no layout met the SLOs at any tested rate (every seed failed even 1 req/s): lower --qps (or "
            "search.qps)") in output
    assert "∞" not in output.split("ranking:")[1] and "★" not in output
    table = pd.read_csv(out / "disaggregation.csv")
    assert table["capacity_qps"].isna().all() and (table["vs_best"] == "none met the SLOs").all()
    assert (table["capacity_by_seed"] == "below, below").all()
    # Every seed below: no interval or goodput either (they were 0.0, "0.000 [0.000, 0.500]").
    stats = ["capacity_ci_low", "capacity_ci_high", "goodput_per_gpu_qps", "goodput_per_gpu_ci_high"]
    assert table[stats].isna().all().all()
    # 40-request trials: the sweep's caution, on the terminal and in disaggregation.md (it gave none).
    assert ("warning: Caution: trials of 40 requests are short. Overload shows as a growing queue (scheduling "
            "delay), which short trials rarely build, so these capacities may be overstated; Sarathi-Serve uses 2,048 "
            "requests per trial (raise --num-requests (or search.num_requests) to at least 1,000).") in output
    assert "Warning: Caution: trials of 40 requests are short." in (out / "disaggregation.md").read_text()


def test_an_interrupted_search_says_so_once_and_exits_128_plus_the_signal(tmp_path, monkeypatch):
    """Ctrl-C inside the search: one "interrupted:" line naming the kept trials, exit 130 (the
    handler's `interrupts.handling`, as the sweep's), the table and plot not written."""
    import experiments.planning.disaggregation as disaggregation

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(disaggregation, "search_layouts", interrupted)  # imported by the command when it runs
    result = invoke(tmp_path, "--gpus", "2", "--tp", "1", "--seeds", "1", "--out", str(tmp_path / "run"))
    assert result.exit_code == 130, result.output
    assert result.output.count("interrupted:") == 1
    assert "0 layouts had finished; their trials are kept in" in result.output
    assert not (tmp_path / "run" / "disaggregation.csv").exists()


def test_the_command_plans_each_layout_once_and_searches_what_it_planned(tmp_path, monkeypatch):
    """The layouts are built and validated once (`plan`, before the run folder is claimed), and
    exactly those are searched (`search_layouts`), not planned again by `search`."""
    import experiments.planning.disaggregation as disaggregation

    planned, searched = [], []
    real_layouts = disaggregation.layouts

    def counting_layouts(*args, **kwargs):
        planned.append(real_layouts(*args, **kwargs))
        return planned[-1]

    def recording(base, found, **kwargs):
        searched.append(found)
        raise KeyboardInterrupt  # stop before any trial runs

    monkeypatch.setattr(disaggregation, "layouts", counting_layouts)
    monkeypatch.setattr(disaggregation, "search_layouts", recording)
    result = invoke(tmp_path, "--gpus", "2", "--tp", "1", "--seeds", "1", "--out", str(tmp_path / "run"))
    assert result.exit_code == 130, result.output
    assert len(planned) == 1 and len(searched) == 1 and searched[0] is planned[0]
    assert [layout.label for layout in searched[0]] == ["colocated 2x TP1", "1P(TP1) 1D(TP1)"]
