"""Repetitions of the capacity searches (experiments/planning/repetitions.py): repetition k runs
the trace's and engine's seeds + k in the sweep's search as in the xPyD search; a file trace's
seeds are said to vary only the engine's draws; a zero-width interval is not shown as a 95 %
interval; the fleet line and the xPyD report say what their numbers rest on; config errors name
the line of the key they are about. Every expected value is worked out here."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from experiments.config import ConfigError, SweepConfig, load_config
from experiments.planning.capacity_report import capacity_summary
from experiments.planning.search import capacity_row, trial_config

SEARCH = {"qps": [2, 64], "num_requests": 300, "seeds": 3, "precision": 0.05}
PROFILE = {"kind": "profile", "name": "azure-conv", "qps": 16.0, "num_requests": 300, "seed": 7}


def _point(trace: dict, **keys) -> SweepConfig:
    return SweepConfig.model_validate({"trace": trace, "engine": {"scheduler": "sarathi", "chunk_size": 512,
                                                                  "seed": 10}, "search": SEARCH, **keys})


def test_a_capacity_trial_runs_the_trace_and_engine_seeds_plus_the_repetition():
    """trace.seed 7, engine.seed 10: repetition 0 runs 7 and 10 (the point as configured), 2
    runs 9 and 12. It ran seeds 0 and 2 for both, whatever the config said (`--set
    trace.seed=7` gave the same capacities as seed 0)."""
    point = _point(PROFILE)
    first, third = trial_config(point, 4.0, 0), trial_config(point, 4.0, 2)
    assert (first.trace.seed, first.engine.seed) == (7, 10)
    assert (third.trace.seed, third.engine.seed) == (9, 12)
    assert (third.trace.qps, third.trace.num_requests) == (4.0, 300)
    # The one rule shared with the xPyD search (`layout_capacity`'s seed_offset).
    from experiments.planning.repetitions import repetition_point

    assert repetition_point(point, 2).trace.seed == 9 and repetition_point(point, 2).engine.seed == 12


def test_a_file_trace_repetition_replays_the_file_and_moves_only_the_engine_seed():
    point = _point({"kind": "file", "path": "t.csv"})
    trial = trial_config(point, 5.0, 2)
    assert (trial.trace.qps, trial.trace.max_requests, trial.engine.seed) == (5.0, 300, 12)
    assert "seed" not in type(trial.trace).model_fields


def test_seeds_past_the_largest_seed_are_refused_when_the_config_loads(tmp_path):
    """trace.seed 2**32 − 2 and 3 seeds: repetition 2 would draw seed 2**32, which numpy refuses
    (mid-search); the config names search.seeds and its line instead."""
    path = tmp_path / "c.yaml"
    path.write_text("trace: {kind: profile, name: azure-conv, qps: 4, seed: 4294967294}\n"
                    "search: {qps: [2, 8], seeds: 3}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert ("search.seeds (line 2): trace.seed 4294967294 + 2 (repetition k uses seed + k) exceeds 4294967295, "
            "the largest seed: lower trace.seed or the seeds") in str(caught.value)


def _capacity_points(capacities: list[float], **extra) -> pd.DataFrame:
    row = {**capacity_row("p0", 0, capacities, 64.0), "model": "llama-3-8b", "device": "h100-sxm",
           "scheduler": "sarathi", "vllm_flags": "--x", "vllm_command": "vllm serve m", **extra}
    return pd.DataFrame([row])


def test_a_file_trace_with_seeds_is_warned_of_and_a_zero_width_interval_is_not_called_one():
    """capf.yaml: three seeds of a file trace, each 34.54 QPS. It said "95 % interval
    34.5–34.5" (three times the work for no spread); now the header says which seeds ran, the
    warning what they vary, and the interval is named for what it is."""
    from experiments.planning.repetitions import file_trace_seeds_warning

    base = _point({"kind": "file", "path": "t.csv"})
    summary = capacity_summary(_capacity_points([34.54, 34.54, 34.54]), base, {"tbt_p99_s": 0.1})
    assert summary.recommendation[0] == ("Recommended: **p0 (point 0: llama-3-8b on h100-sxm)** — capacity 34.5 QPS "
                                         "(every seed gave the same capacity: a zero-width interval, not a "
                                         "confidence interval).")
    assert file_trace_seeds_warning(base, 3) in summary.warnings
    assert "search.seeds 1 gives that capacity at 1/3 of the work" in file_trace_seeds_warning(base, 3)
    assert summary.header[-2].endswith("the 95 % interval is over 3 seeds (engine seeds 10–12); the trace is a "
                                       "file, replayed the same for every seed: the seeds vary only the engine's "
                                       "random draws (speculative acceptance, random routers).")
    profile = capacity_summary(_capacity_points([20.0, 22.0, 24.0]), _point(PROFILE), {"tbt_p99_s": 0.1})
    assert profile.header[-2].endswith("the 95 % interval is over 3 seeds (trace seeds 7–9, engine seeds 10–12).")
    assert not any("file" in w for w in profile.warnings)
    # mean 22, s = 2, t(0.975, 2) = 4.302653: 22 ± 4.968 -> 17.0–27.0
    assert "(95 % interval 17–27)" in profile.recommendation[0]
    assert file_trace_seeds_warning(base, 1) is None


def test_the_fleet_is_sized_from_the_interval_low_end_and_says_when_it_cannot_be():
    """capc.yaml at search.qps [33, 80]: seeds 35 QPS, below, below. The mean (35 / 3, seeds below
    counted 0) once sized 9 copies "at most"; the interval's low end is now what sizes a fleet, and
    here it is 0: no fleet, and the line says why. Seeds 35, 36, 37: mean 36, s = 1,
    t(0.975, 2) = 4.302653, low end 36 − 2.484 = 33.516; ceil(100 × 1.1 / 33.516) = 4 copies of a
    3-replica point = 12 GPUs (the mean without headroom gave 3 copies, 9 GPUs)."""
    from experiments.planning.fleet import fleet_row

    base = SweepConfig.model_validate({"trace": PROFILE, "search": {**SEARCH, "qps": [33, 80]},
                                       "engine": {"replicas": 3}, "fleet": {"target_qps": 100}})

    def fleet_lines(capacities):
        points = _capacity_points(capacities)
        points = points.assign(**fleet_row(base, points.iloc[0].to_dict(), []))
        return [t for t in capacity_summary(points, base, {"tbt_p99_s": 0.1}).recommendation
                if t.startswith("Fleet")]

    assert fleet_lines([35.0, math.nan, math.nan]) == [
        "Fleet for 100 QPS: not sized — the capacity's 95 % lower bound is 0 (the seeds spread too widely): no fleet is "
        "sized from it; more seeds (search.seeds) narrow the interval."]
    line, rule = fleet_lines([35.0, 36.0, 37.0])
    assert line == ("Fleet for 100 QPS: fewest GPUs with **p0** — 4 copies of its deployment, 12 GPUs, sized from "
                    "33.5 QPS a copy (copies assumed to add capacity linearly behind a router).")
    assert rule == ("Fleet rule: copies = ⌈100 QPS × (1 + 0.1 headroom) / the capacity's 95 % lower bound⌉ (one seed: "
                    "its capacity), GPUs = copies × the point's GPUs.")


def test_the_short_trial_caution_is_one_text_for_both_searches():
    from experiments.planning.capacity import short_trials_warning

    assert short_trials_warning(1000) is None
    assert short_trials_warning(100, "--num-requests") == (
        "Caution: trials of 100 requests are short. Overload shows as a growing queue (scheduling delay), which "
        "short trials rarely build, so these capacities may be overstated; Sarathi-Serve uses 2,048 requests per "
        "trial (raise --num-requests to at least 1,000).")


def test_the_xpyd_report_gives_the_short_trial_caution(tmp_path):
    """search-xpyd with 100-request trials gave 248 req/s colocated (36× the 1,500-request
    figure) with no word of caution; disaggregation.md now has the sweep's."""
    from experiments.planning.capacity import CapacityResult, short_trials_warning
    from experiments.planning.disaggregation import layout_row, layouts, ranked, write_report

    base = SweepConfig.model_validate({"trace": PROFILE, "engine": {"scheduler": "sarathi", "chunk_size": 512},
                                       "goodput": {"ttft_s": 2.0, "tpot_s": 0.05}})
    found = layouts(base, 2, (1,))
    frame = ranked([layout_row(layout, [CapacityResult(8.0, [(8.0, True), (9.0, False)])]) for layout in found])
    write_report(frame, base, tmp_path, 0.9, num_requests=100)
    text = (tmp_path / "disaggregation.md").read_text()
    assert f"Warning: {short_trials_warning(100, '--num-requests (or search.num_requests)')}" in text
    write_report(frame, base, tmp_path / "long", 0.9, num_requests=1500)
    assert "Caution" not in (tmp_path / "long" / "disaggregation.md").read_text()


def test_a_base_key_a_variant_makes_wrong_is_named_at_its_own_line(tmp_path):
    """moev.yaml: engine.data_parallel_size 2 on line 6, a variant adding cluster: on line 9. The
    error named line 9 for engine.data_parallel_size; the key is on line 6 (the variant is named
    in front)."""
    path = tmp_path / "moev.yaml"
    path.write_text("name: moev\nmodel: qwen3-30b-a3b\ndevice: h100-sxm\ncost_model: auto\n"
                    "trace: {kind: profile, name: sharegpt, qps: 4.0, num_requests: 200, seed: 0}\n"
                    "engine: {scheduler: vllm_v1, chunk_size: 2048, max_num_seqs: 64, data_parallel_size: 2, "
                    "enable_expert_parallel: true}\n"
                    "variants:\n  - {}\n  - {cluster: {prefill: {replicas: 1}, decode: {replicas: 1}}}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert ("variants[1] {cluster.prefill.replicas: 1, cluster.decode.replicas: 1}: engine.data_parallel_size "
            "(line 6): engine.data_parallel_size 2 beside cluster") in str(caught.value)
    # A key the variant itself sets keeps the variant's line.
    path.write_text(path.read_text().replace("  - {}\n  - {cluster: {prefill: {replicas: 1}, decode: {replicas: 1}}}",
                                             "  - {}\n  - {engine.chunk_size: 0}"))
    with pytest.raises(ConfigError, match=r"variants\[1\] \{engine.chunk_size: 0\}: engine.chunk_size \(line 9\)"):
        load_config(path)


def test_a_lengths_file_trial_is_cut_to_the_searchs_requests():
    """A lengths file reads its requests from the file, so a trial sets its `max_requests` (300),
    as for a trace file; the sweep's search set a `num_requests` the kind has no field for, so
    every trial replayed the whole file whatever search.num_requests said."""
    point = _point({"kind": "lengths_file", "path": "lengths.csv", "qps": 16.0})
    trial = trial_config(point, 5.0, 1)
    assert (trial.trace.qps, trial.trace.max_requests, trial.engine.seed) == (5.0, 300, 11)
    assert "num_requests" not in type(trial.trace).model_fields and "num_requests" not in vars(trial.trace)


def test_the_xpyd_report_names_trials_undecided_at_the_cap(tmp_path):
    """A layout's seeds with trials still undecided at the trial-length cap: the row counts them
    and names their rates and verdicts, and disaggregation.md says what was decided there (the
    sweep's capacity report's wording) and how to decide them on longer trials."""
    from experiments.planning.capacity import CapacityResult
    from experiments.planning.disaggregation import at_cap_warnings, layout_row, layouts, ranked, write_report

    base = SweepConfig.model_validate({"trace": PROFILE, "engine": {"scheduler": "sarathi", "chunk_size": 512},
                                       "goodput": {"ttft_s": 2.0, "tpot_s": 0.05}})
    colocated, split = layouts(base, 2, (1,))
    capped = [CapacityResult(8.0, [(8.0, True), (9.0, False)], at_cap=[(8.0, "passed"), (9.0, "failed")]),
              CapacityResult(7.5, [(7.5, True), (8.5, False)], at_cap=[(8.5, "failed")])]
    frame = ranked([layout_row(colocated, capped), layout_row(split, [CapacityResult(6.0, [(6.0, True)])] * 2)])
    first = frame[frame["label"] == colocated.label].iloc[0]
    assert first["trials_at_cap"] == 3 and first["at_cap_qps"] == "8 passed, 9 failed, 8.5 failed"
    assert frame[frame["label"] == split.label].iloc[0]["trials_at_cap"] == 0
    assert at_cap_warnings(frame, 4) == [
        f"{colocated.label}: 3 trial(s) still undecided at the cap of 4× the first trial's requests (rate and verdict: "
        "8 passed, 9 failed, 8.5 failed); a trial that still drifted or fell short of the offered rate failed, one "
        "short only of effectively independent samples was judged on its SLOs at that length. Raise "
        "search.max_trial_scale to decide them on longer trials."]
    write_report(frame, base, tmp_path, 0.9, num_requests=2048, max_trial_scale=4)
    assert f"Warning: {at_cap_warnings(frame, 4)[0]}" in (tmp_path / "disaggregation.md").read_text()
