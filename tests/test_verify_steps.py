"""Per-step and end-to-end verification on a recorded engine run (tests/data/verify/tiny_run: the tiny
config served on this CPU, one thread) priced by a recorded calibration (tests/data/verify/profile:
`sarathi-sim calibrate` of the tiny model, with its engine overhead). Timing bounds only on this
recorded data, never on live runs."""
from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from experiments.cli.main import app
from experiments.config import SweepConfig, load_config
from experiments.deployment import build_pricer
from experiments.point import build_cost_model
from experiments.verification.verify import (e2e_fidelity, error_stats, headline_errors, over_limit,
                                read_measured_steps, step_fidelity, step_kind)

DATA = Path(__file__).parent / "data"
CONFIG = DATA / "engine" / "tiny_engine.yaml"
RUN = DATA / "verify" / "tiny_run"
PROFILE = DATA / "verify" / "profile"
runner = CliRunner()


def tiny_point(cost_model: str) -> SweepConfig:
    _, points = load_config(CONFIG, [f"cost_model=profile:{cost_model}"])
    return SweepConfig.model_validate(points[0])


@pytest.fixture(scope="module")
def comparison():
    plans, measured = read_measured_steps(RUN)
    point = tiny_point(str(PROFILE))
    return plans, measured, step_fidelity(plans, measured, build_pricer(point, build_cost_model(point)))


@pytest.fixture(scope="module")
def slow_profile(tmp_path_factory) -> Path:
    """The recorded calibration with every measured time doubled: a cost model 2x too slow."""
    directory = tmp_path_factory.mktemp("slow") / "profile"
    shutil.copytree(PROFILE, directory)
    for path in directory.glob("*.csv"):
        frame = pd.read_csv(path)
        timed = [c for c in frame.columns if c.startswith("time_")]
        frame[timed] *= 2
        frame.to_csv(path, index=False)
    overhead = json.loads((directory / "engine_overhead.json").read_text())
    (directory / "engine_overhead.json").write_text(json.dumps({k: 2 * v for k, v in overhead.items()}))
    return directory


def test_every_executed_plan_is_priced_and_classified(comparison):
    plans, measured, result = comparison
    frame = result.frame
    assert len(frame) == len(plans) == len(measured) == len(pd.read_parquet(RUN / "steps.parquet"))
    np.testing.assert_allclose(frame["measured_s"], measured)
    kinds = frame["kind"].value_counts().to_dict()
    assert set(kinds) == {"prefill-heavy", "decode-only"}  # chunk 32 with short prompts: no mixed step here
    assert kinds["decode-only"] == sum(p.num_prefill_tokens == 0 for p in plans)


def test_calibrated_model_prices_the_recorded_run_within_a_third(comparison):
    # 14 % with the fit of 2026-11-30 (BENCHMARKS.md); the bound leaves room for changes to the fit.
    summary = comparison[2].summary()
    assert 5.0 < summary["all"]["mape_pct"] < 33.0
    assert summary["all"]["p95_ape_pct"] < 75.0
    assert summary["decode-only"]["n"] + summary["prefill-heavy"]["n"] == summary["all"]["n"]


def test_a_cost_model_twice_too_slow_fails_the_check(comparison, slow_profile):
    plans, measured, good = comparison
    point = tiny_point(str(slow_profile))
    slow = step_fidelity(plans, measured, build_pricer(point, build_cost_model(point)))
    np.testing.assert_allclose(slow.frame["predicted_s"], 2 * good.frame["predicted_s"], rtol=0.15)
    assert slow.summary()["all"]["mape_pct"] > 80.0 and slow.summary()["all"]["mean_signed_pct"] > 80.0
    assert over_limit(headline_errors(good, None), 50.0) == {}
    assert set(over_limit(headline_errors(slow, None), 50.0)) == {"step_mape"}


def test_verify_cli_writes_reports_and_ledger_and_gates_on_fail_above(tmp_path, slow_profile):
    ledger = tmp_path / "ledger.csv"
    ok = runner.invoke(app, ["verify", str(CONFIG), "--engine-run", str(RUN), "--cost-model", f"profile:{PROFILE}",
                             "--out", str(tmp_path / "good"), "--fail-above", "50", "--ledger", str(ledger)])
    assert ok.exit_code == 0, ok.output
    # the recorded calibration profiled blocks of 16 tokens, the tiny config uses 4: said, not hidden
    assert "profiled attention over blocks of 16 tokens; this point uses engine.block_size 4" in " ".join(ok.output.split())
    report = json.loads((tmp_path / "good" / "fidelity.json").read_text())
    assert report["passed"] and report["steps"]["all"]["n"] == len(read_measured_steps(RUN)[1])
    assert {r["metric"] for r in report["e2e"]} >= {"ttft_s_p50", "tpot_s_p99", "tbt_s_p90", "e2e_s_p50",
                                                    "scheduling_delay_s_p50", "throughput_rps", "makespan_s"}
    assert 'src="data:image/png;base64,' in (tmp_path / "good" / "fidelity.html").read_text()
    bad = runner.invoke(app, ["verify", str(CONFIG), "--engine-run", str(RUN), "--cost-model",
                              f"profile:{slow_profile}", "--out", str(tmp_path / "bad"), "--fail-above", "50",
                              "--ledger", str(ledger)])
    assert bad.exit_code == 1, bad.output
    assert not json.loads((tmp_path / "bad" / "fidelity.json").read_text())["passed"]
    rows = list(csv.DictReader(ledger.open()))
    assert [r["passed"] for r in rows] == ["True", "False"]
    assert rows[0]["device"] == "cpu" and float(rows[1]["step_mape_pct"]) > 80.0
    # the gate a row passed and the point it verified are in the ledger; the report states both and the sign
    assert rows[0]["fail_above_pct"] == "50.0" and rows[0]["point"] == "sarathi chunk=32"
    good_md, bad_md = (tmp_path / "good" / "fidelity.md").read_text(), (tmp_path / "bad" / "fidelity.md").read_text()
    assert "**passed --fail-above 50 %; headline |errors|: step_mape" in good_md
    assert "**FAILED --fail-above 50 %: step_mape" in bad_md
    assert "Signed errors are (simulated − measured) / measured" in good_md
    plain = runner.invoke(app, ["verify", str(CONFIG), "--engine-run", str(RUN), "--cost-model", f"profile:{PROFILE}",
                                "--out", str(tmp_path / "plain"), "--ledger", str(ledger)])
    assert plain.exit_code == 0, plain.output
    assert "**no gate (--fail-above not given); headline" in (tmp_path / "plain" / "fidelity.md").read_text()
    assert list(csv.DictReader(ledger.open()))[2]["fail_above_pct"] == ""


def test_missing_plan_log_is_a_clear_error(tmp_path):
    result = runner.invoke(app, ["verify", str(CONFIG), "--engine-run", str(tmp_path), "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "plans.jsonl" in result.output and "no plan log" in result.output


def test_error_statistics_and_e2e_rows_are_signed_percentages():
    stats = error_stats(np.array([10.0, -20.0, 30.0, -40.0]))
    assert stats["mape_pct"] == 25.0 and stats["mean_signed_pct"] == -5.0 and stats["max_ape_pct"] == 40.0
    rows = e2e_fidelity({"ttft_s_p50": 1.5, "makespan_s": 9.0, "tpot_s_p50": 0.1},
                        {"ttft_s_p50": 1.0, "makespan_s": 10.0, "tpot_s_p50": 0.0}).set_index("metric")
    assert rows.loc["ttft_s_p50", "error_pct"] == pytest.approx(50.0)
    assert rows.loc["makespan_s", "error_pct"] == pytest.approx(-10.0)
    assert np.isnan(rows.loc["tpot_s_p50", "error_pct"])  # measured 0: undefined, not inf


def test_step_kinds_follow_the_token_mix():
    from simulator.scheduler import BatchPlan, ScheduledSequence

    def plan(*seqs):
        return BatchPlan(tuple(ScheduledSequence(i, q, 0, p, True, d, ()) for i, (q, p, d) in enumerate(seqs)), (), 0)

    assert step_kind(plan((1, False, 0), (1, False, 0))) == "decode-only"
    assert step_kind(plan((8, True, 0), (1, False, 0))) == "prefill-heavy"
    assert step_kind(plan((2, True, 0), (1, False, 0), (1, False, 0), (1, False, 0))) == "mixed"
    assert step_kind(plan((4, False, 3), (8, True, 0))) == "verify"


def test_measured_steps_follow_the_runs_timing(tmp_path):
    # A run timed by CPU time (engine.json "timing": "cpu") is compared on measured_cpu_s; older
    # runs without the key, or wall-timed ones, on measured_s.
    import json
    import shutil

    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    entries = [json.loads(line) for line in (run / "plans.jsonl").read_text().splitlines()]
    for i, entry in enumerate(entries):
        entry["measured_cpu_s"] = 0.001 * (i + 1)
    (run / "plans.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    wall = [e["measured_s"] for e in entries]
    assert read_measured_steps(run)[1].tolist() == wall  # no "timing" in the recorded engine.json
    settings = json.loads((run / "engine.json").read_text())
    (run / "engine.json").write_text(json.dumps({**settings, "timing": "cpu"}))
    assert read_measured_steps(run)[1].tolist() == [0.001 * (i + 1) for i in range(len(entries))]
    del entries[2]["measured_cpu_s"]
    (run / "plans.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    with pytest.raises(ValueError, match=r"plans.jsonl:3: plan entry has no measured_cpu_s"):
        read_measured_steps(run)


def test_fast_clock_advances_by_the_chosen_measure():
    from gpu_engine.clock import FastClock

    wall, cpu = FastClock("wall"), FastClock("cpu")
    assert wall.end_step(1.0, None, measured_s=0.5, measured_cpu_s=0.2) == 1.5
    assert cpu.end_step(1.0, None, measured_s=0.5, measured_cpu_s=0.2) == 1.2
    with pytest.raises(ValueError, match="valid values are wall, cpu, cpu-normalized"):
        FastClock("gpu")


def test_engine_overhead_fit_recovers_known_coefficients_including_drafts():
    from profiler.engine_overhead import EngineOverhead, WithEngineOverhead
    from tests.conftest import ConstantCostModel

    rng = np.random.default_rng(0)
    seqs = rng.integers(1, 12, 400)
    tokens = seqs + rng.integers(0, 64, 400)
    drafts = np.where(rng.random(400) < 0.5, rng.integers(0, 3 * seqs + 1), 0)
    residual = 1e-3 + 20e-6 * seqs + 2e-6 * tokens + 50e-6 * drafts
    residual[::17] += 0.01  # steps slowed by another process: the median fit ignores them
    fit = EngineOverhead.fit(seqs, tokens, residual, drafts)
    assert fit.per_step_s == pytest.approx(1e-3, rel=1e-3) and fit.per_seq_s == pytest.approx(20e-6, rel=1e-3)
    assert fit.per_token_s == pytest.approx(2e-6, rel=1e-3) and fit.per_draft_s == pytest.approx(50e-6, rel=1e-3)
    plain = EngineOverhead.fit(seqs, tokens, 1e-3 + 20e-6 * seqs + 2e-6 * tokens)
    assert plain.per_draft_s == 0.0
    # A verify of 3 drafts (q = 4) and a decode (q = 1) beside a 10-token prefill chunk: 3 drafts.
    priced = WithEngineOverhead(ConstantCostModel(0.002), fit).predict_step_s(
        np.array([4, 1, 10]), np.array([50, 60, 0]), np.array([False, False, True]))
    assert priced == pytest.approx(0.002 + fit.step_s(3, 15, 3))
    assert fit.step_s(3, 15, 3) == pytest.approx(1e-3 + 60e-6 + 30e-6 + 150e-6, rel=1e-3)


def test_a_run_recorded_in_another_checkout_is_still_the_same_point(tmp_path):
    # engine.json records absolute paths (model, trace files) of the machine that made the run;
    # the same files elsewhere must not count as other settings, while a real change still does.
    import json
    import shutil

    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    settings = json.loads((run / "engine.json").read_text())
    settings["config"]["model"] = "/elsewhere/checkout/tests/data/engine/tiny/config.json"
    (run / "engine.json").write_text(json.dumps(settings))
    args = ["verify", str(CONFIG), "--engine-run", str(run), "--cost-model", "roofline"]
    done = runner.invoke(app, args + ["--out", str(tmp_path / "v"), "--ledger", str(tmp_path / "l.csv")])
    assert done.exit_code == 0, done.output
    done = runner.invoke(app, args + ["--set", "engine.max_num_seqs=4", "--out", str(tmp_path / "w")])
    assert done.exit_code == 2 and "engine.max_num_seqs differ" in done.output


def test_run_scale_separates_a_uniformly_slow_run_from_shape_errors():
    import pandas as pd

    from experiments.verification.verify import StepComparison

    measured = np.array([1.0, 2.0, 3.0, 4.0]) * 1e-3
    uniform = StepComparison(pd.DataFrame({"kind": "decode-only", "measured_s": measured,
                                           "predicted_s": measured / 1.25, "error_pct": -20.0}))
    scale = uniform.summary()["run_scale"]
    assert scale["measured_over_predicted"] == pytest.approx(1.25)
    assert scale["mape_after_scale_pct"] == pytest.approx(0.0, abs=1e-9)  # all of it one factor
    shaped = StepComparison(pd.DataFrame({"kind": "decode-only", "measured_s": measured,
                                          "predicted_s": measured * [0.5, 1.0, 1.0, 1.5], "error_pct": 0.0}))
    scale = shaped.summary()["run_scale"]
    assert scale["measured_over_predicted"] == pytest.approx(1.0)
    assert scale["mape_after_scale_pct"] == pytest.approx(25.0)  # |−50| + 0 + 0 + |+50|, over 4


def test_a_ledger_path_that_is_a_directory_is_refused_before_any_work(tmp_path):
    result = runner.invoke(app, ["verify", str(CONFIG), "--engine-run", str(RUN), "--ledger", str(tmp_path),
                                 "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "is a directory; give the CSV file to append to" in " ".join(result.output.split())
    assert not (tmp_path / "out").exists()


def test_verifying_a_config_with_several_points_says_which_one(tmp_path):
    config = tmp_path / "two.yaml"
    config.write_text(CONFIG.read_text().replace("model: tiny/config.json", f"model: {CONFIG.parent / 'tiny' / 'config.json'}")
                      + "variants:\n  - {engine.chunk_size: [32, 64]}\n")
    result = runner.invoke(app, ["verify", str(config), "--engine-run", str(RUN), "--cost-model", f"profile:{PROFILE}",
                                 "--out", str(tmp_path / "out"), "--ledger", str(tmp_path / "ledger.csv")])
    assert result.exit_code == 0, result.output
    assert "has several points; verifying point 0 (sarathi chunk=32)" in " ".join(result.output.split())


def test_sweep_and_verify_price_steps_with_the_same_calibrated_cost_model():
    # A calibration directory's engine overhead is part of its cost model for every command: the
    # point's simulated summary (what sweep reports) equals verify's simulation of the same point.
    from profiler.engine_overhead import EngineOverhead, WithEngineOverhead
    from experiments.point import run_point
    from experiments.verification.verify import simulate_summary

    point = tiny_point(str(PROFILE))
    cost = build_cost_model(point)
    overhead = EngineOverhead.load(PROFILE)
    assert isinstance(cost, WithEngineOverhead) and overhead.per_step_s > 0
    q, c, p = np.array([1, 1, 16]), np.array([40, 60, 0]), np.array([False, False, True])
    assert cost.predict_step_s(q, c, p) == pytest.approx(cost.cost_model.predict_step_s(q, c, p) + overhead.step_s(3, 18))
    swept = run_point(point).row
    verified = simulate_summary(point, build_pricer(point, cost))
    assert swept["ttft_s_p50"] == verified["ttft_s_p50"] and swept["makespan_s"] == verified["makespan_s"]


def test_measured_acceptance_replays_only_the_rows_of_full_grants(tmp_path):
    """A row granted fewer drafts (budget or the request's last tokens) accepts at most that many;
    replayed for a full grant it would under-draw acceptance. Of these four rows, the two granted
    3 are kept: mean accepted (0 + 3) / 2 = 1.5, not (0 + 3 + 0 + 1) / 4 = 1.0."""
    from experiments.cli.verify import _with_measured_acceptance

    run = tmp_path / "run"
    run.mkdir()
    pd.DataFrame({"step": [2, 3, 4, 5], "request_id": [0, 0, 1, 1], "drafts_granted": [3, 3, 1, 2],
                  "drafts_proposed": [3, 3, 1, 2], "drafts_accepted": [0, 3, 0, 1]}).to_parquet(run / "drafts.parquet")
    _, points = load_config(CONFIG, [f"cost_model=profile:{PROFILE}", "engine.split_n=3", "engine.acceptance=0.5"])
    point = _with_measured_acceptance(SweepConfig.model_validate(points[0]), run, tmp_path)
    replayed = pd.read_csv(tmp_path / "acceptance.csv")
    assert replayed.to_dict("list") == {"proposed": [3, 3], "accepted": [0, 3]}
    assert replayed["accepted"].mean() == 1.5
    assert Path(point.engine.acceptance.file) == (tmp_path / "acceptance.csv").resolve()
