"""`layouts: {gpus: N}` (issue 18, item 6): every TP × DP × EP layout of a GPU count for a mixture of
experts (TP × PP × replicas for a dense model) enumerated exactly, the ones a model cannot take
skipped with the reason, bad input named by key; the capacity search and the chunk × N policy
run on MoE points and report capacity and goodput per GPU."""
from __future__ import annotations

import re
import textwrap

import pandas as pd
import pytest

from experiments.config import ConfigError, ConfigWarning, SweepConfig, load_config
from experiments.planning.layouts import Layout, enumerate_layouts
from profiler import get_model_spec

MOE = """
name: moe
model: qwen3-30b-a3b
device: h100-sxm
cost_model: auto
trace: {kind: synthetic, qps: 8, num_requests: 120, prompt_tokens: [256, 1024], output_tokens: [16, 64], seed: 0}
engine: {scheduler: vllm_v1, chunk_size: 1024, max_num_seqs: 64}
slo: {ttft_p99_s: 0.5, tbt_p99_s: 0.05}
goodput: {ttft_s: 0.5, tpot_s: 0.05}
"""
# Trials at their first length: the sustained-load rule has its own tests (test_steady_state.py).
SEARCH = "search: {qps: [1, 512], num_requests: 120, seeds: 1, precision: 0.05, max_trial_scale: 1}\n"


def write(tmp_path, text, name="c.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def points_of(tmp_path, text, overrides=(), warnings=None):
    _, points = load_config(write(tmp_path, text), list(overrides),
                            on_warning=(warnings.append if warnings is not None else None))
    return [SweepConfig.model_validate(p) for p in points]


def layout_of(point: SweepConfig) -> tuple:
    e = point.engine
    return (e.tensor_parallel_size, e.data_parallel_size, e.enable_expert_parallel, e.replicas, e.pipeline_parallel_size)


def sweep(tmp_path, config, *extra):
    from typer.testing import CliRunner

    from experiments.cli.main import app

    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["sweep", str(config), "--out", str(out), "--jobs", "1", *extra])
    assert result.exit_code == 0, result.output
    return out, result.output


def test_qwen3_moe_on_four_gpus_gives_exactly_nine_layouts(tmp_path):
    # (TP, DP, EP, replicas, PP): one DP group with TP × DP = 4, EP off and on (EP = 4), then
    # replicas of a DP-1 engine: 4 × TP 1 (EP 1 is no EP) and 2 × TP 2 with EP off and on (EP 2).
    # Qwen3-30B-A3B: 32 heads, 4 KV heads, 128 experts of width 768: 1, 2 and 4 divide them all.
    points = points_of(tmp_path, MOE + "layouts: {gpus: 4}\n")
    assert [layout_of(p) for p in points] == [
        (1, 4, False, 1, 1), (1, 4, True, 1, 1), (2, 2, False, 1, 1), (2, 2, True, 1, 1), (4, 1, False, 1, 1),
        (4, 1, True, 1, 1), (1, 1, False, 4, 1), (2, 1, False, 2, 1), (2, 1, True, 2, 1)]
    assert all(p.layouts is None for p in points)  # expanded: each point is one layout
    one_engine = points_of(tmp_path, MOE + "layouts: {gpus: 4, replicas: false}\n")
    assert [layout_of(p) for p in one_engine] == [layout_of(p) for p in points[:6]]


def test_dense_layouts_are_tp_pp_dp_and_replicas_of_a_pipeline(tmp_path):
    # llama-3-8b (32 heads, 8 KV heads, 32 layers) on 4 GPUs, (TP, DP, EP, replicas, PP): one
    # engine of TP × PP × DP = 4 (not DP 2 × PP 2: not modelled together), then 2 replicas of
    # TP 1 × PP 2 (what DP cannot say); replicas of a PP-1 engine are DP's independent ranks.
    text = MOE.replace("qwen3-30b-a3b", "llama-3-8b")
    points = points_of(tmp_path, text + "layouts: {gpus: 4}\n")
    assert [layout_of(p) for p in points] == [
        (1, 1, False, 1, 4), (1, 4, False, 1, 1), (2, 1, False, 1, 2), (2, 2, False, 1, 1), (4, 1, False, 1, 1),
        (1, 1, False, 2, 2)]
    one_engine = points_of(tmp_path, text + "layouts: {gpus: 4, replicas: false}\n")
    assert [layout_of(p) for p in one_engine] == [layout_of(p) for p in points[:5]]


def test_layouts_a_model_cannot_take_are_skipped_with_the_reason(tmp_path):
    # Mixtral-8x7B has 8 experts: on 16 GPUs expert parallelism would be EP 16, more ranks than
    # experts (some rank would hold none; vLLM's determine_expert_map gives the first E mod EP
    # ranks one extra, so EP need not divide E, but it cannot exceed it), so the five one-engine
    # layouts with EP on are skipped (warned and reported).
    valid, skipped = enumerate_layouts(get_model_spec("mixtral-8x7b"), 16)
    assert [layout.text() for layout, _ in skipped] == [
        "TP 1 × DP 16, EP 16", "TP 2 × DP 8, EP 16", "TP 4 × DP 4, EP 16", "TP 8 × DP 2, EP 16", "TP 16, EP 16"]
    assert all("16 must be from 1 to the model's 8 experts (every expert-parallel rank holds at least one expert)"
               in why for _, why in skipped)
    assert Layout(tensor_parallel_size=2, enable_expert_parallel=True, replicas=8) in valid  # EP 2 divides 8
    assert len(valid) == 12
    said = []
    points = points_of(tmp_path, MOE.replace("qwen3-30b-a3b", "mixtral-8x7b") + "layouts: {gpus: 16}\n",
                       warnings=said)
    assert len(points) == 12
    assert any(text.startswith("layouts: 5 of the 17 layouts of 16 GPUs are skipped: TP 1 × DP 16, EP 16 (")
               for text in said)
    from experiments.planning.report_header import layout_lines

    base, _ = load_config(write(tmp_path, MOE.replace("qwen3-30b-a3b", "mixtral-8x7b") + "layouts: {gpus: 16}\n"),
                          on_warning=lambda text: None)
    (line,) = layout_lines(base)
    assert line.startswith("Layouts (layouts.gpus: 16): 12 of 17 layouts of 16 GPUs run (TP 1 × DP 16; ")
    assert "Skipped: TP 1 × DP 16, EP 16 — enable_expert_parallel: expert parallel size" in line


@pytest.mark.parametrize("value, got", [("0", "0"), ("-2", "-2"), ("2.5", "2.5"), ("4.0", "4.0"), ("'4'", "'4'"),
                                        ("many", "'many'"), ("2000", "2000"), ("[4]", None), ("null", "None")])
def test_gpus_must_be_a_positive_integer(tmp_path, value, got):
    message = "layouts.gpus (line 10): must be a whole number of GPUs from 1 to 1024, e.g. layouts: {gpus: 8}"
    with pytest.raises(ConfigError, match=re.escape(message + (f" (got {got})" if got else ""))):
        points_of(tmp_path, MOE + f"layouts: {{gpus: {value}}}\n")


def test_gpus_true_is_no_count(tmp_path):
    with pytest.raises(ConfigError, match=r"layouts \(line 10\): gpus: expected a number or name, got true"):
        points_of(tmp_path, MOE + "layouts: {gpus: true}\n")


def test_no_valid_layout_names_the_key_and_the_counts_that_have_one(tmp_path):
    # 130 GPUs as one engine: TP must divide 32 heads (and the 4 KV heads): TP 1 or 2, so
    # DP 130 or 65; without EP the MoE TP degree 130 does not divide the expert width 768, and
    # EP 130 exceeds the 128 experts.
    with pytest.raises(ConfigError) as caught:
        points_of(tmp_path, MOE + "layouts: {gpus: 130, replicas: false}\n")
    text = str(caught.value)
    assert ("layouts.gpus (line 10): no layout of 130 GPUs can serve qwen3-30b-a3b as one engine "
            "(layouts.replicas: false)") in text
    assert ("TP 1 × DP 130, EP 130: enable_expert_parallel: expert parallel size (data_parallel_size × "
            "tensor_parallel_size = 130 × 1) 130 must be from 1 to the model's 128 experts") in text
    assert "TP 130: tensor_parallel_size 130 must divide num_attention_heads 32" in text
    # Every count up to 64 has one: DP n with EP n spreads the 128 experts over n ranks.
    assert text.endswith("GPU counts up to 64 with one: " + ", ".join(str(n) for n in range(1, 65)))
    # Five GPUs: TP 1 × DP 5 with EP 5 (experts 26, 26, 26, 25, 25) and, with replicas, 5 × TP 1.
    with pytest.warns(ConfigWarning, match=r"layouts: 3 of the 5 layouts of 5 GPUs are skipped: TP 1 × DP 5 \("):
        assert [layout_of(p) for p in points_of(tmp_path, MOE + "layouts: {gpus: 5}\n")] == [
            (1, 5, True, 1, 1), (1, 1, False, 5, 1)]


@pytest.mark.parametrize("text, overrides, where", [
    (MOE.replace("max_num_seqs: 64}", "max_num_seqs: 64, tensor_parallel_size: 2}"), (),
     r"c.yaml: engine.tensor_parallel_size \(line 7\): layouts: sets"),
    (MOE + "variants:\n  - {engine.data_parallel_size: 2}\n", (), r"variants\[0\] engine.data_parallel_size \(line 11\)"),
    (MOE, ["engine.enable_expert_parallel=true"], "--set engine.enable_expert_parallel: layouts: sets"),
    (MOE.replace("max_num_seqs: 64}", "max_num_seqs: 64, num_gpus: 4}"), (), "engine.num_gpus"),
])
def test_a_layout_key_set_beside_layouts_is_an_error(tmp_path, text, overrides, where):
    with pytest.raises(ConfigError, match=where):
        points_of(tmp_path, text + "layouts: {gpus: 4}\n", overrides)


def test_layouts_with_a_cluster_is_an_error(tmp_path):
    text = MOE.replace("qwen3-30b-a3b", "llama-3-8b") + "cluster: {prefill: {replicas: 1}, decode: {replicas: 1}}\n"
    with pytest.raises(ConfigError, match=r"layouts \(line 11\): enumerates colocated layouts"):
        points_of(tmp_path, text + "layouts: {gpus: 2}\n")


def test_variants_are_crossed_with_the_layouts_and_config_yaml_loads_again(tmp_path):
    text = MOE + "layouts: {gpus: 2}\nvariants:\n  - {engine.chunk_size: [512, 1024]}\n"
    points = points_of(tmp_path, text, ["trace.qps=4"])
    assert [(p.engine.chunk_size, layout_of(p)) for p in points] == [
        (chunk, layout) for chunk in (512, 1024) for layout in
        ((1, 2, False, 1, 1), (1, 2, True, 1, 1), (2, 1, False, 1, 1), (2, 1, True, 1, 1), (1, 1, False, 2, 1))]
    import yaml

    from experiments.planning.sweep import config_as_run

    base, _ = load_config(write(tmp_path, text), ["trace.qps=4"])
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(config_as_run(base), sort_keys=False))  # what config.yaml records
    _, reloaded = load_config(again)
    assert [SweepConfig.model_validate(p) for p in reloaded] == points


def test_capacity_search_of_moe_layouts_reports_capacity_per_gpu(tmp_path):
    out, output = sweep(tmp_path, write(tmp_path, MOE + SEARCH + "layouts: {gpus: 2}\n"))
    points = pd.read_csv(out / "points.csv")
    assert list(points["label"]) == ["vllm_v1 chunk=1024 dp=2", "vllm_v1 chunk=1024 dp=2 ep=2",
                                     "vllm_v1 chunk=1024 tp=2", "vllm_v1 chunk=1024 tp=2 ep=2",
                                     "vllm_v1 chunk=1024 x=2 round_robin"]
    assert (points["num_gpus"] == 2).all() and (points["capacity_qps"] > 1).all()
    assert points["capacity_per_gpu_qps"].tolist() == pytest.approx((points["capacity_qps"] / 2).tolist())
    trials = pd.read_csv(out / "trials.csv")
    for point_id, group in trials.groupby("point_id"):
        group = group[group["verdict"] != "undecided"]  # a lengthened trial's verdict is its last run's
        passed, failed = group[group["passed"]], group[~group["passed"]]
        # The bisection's verdicts are monotone in the load (every passing QPS below every failing
        # one), and the capacity is the highest passing trial.
        assert passed["trial_qps"].max() < failed["trial_qps"].min()
        assert points.loc[points["point_id"] == point_id, "capacity_qps"].item() == passed["trial_qps"].max()
    report = (out / "report.md").read_text()
    assert "Layouts (layouts.gpus: 2): 5 of 5 layouts of 2 GPUs run (TP 1 × DP 2; TP 1 × DP 2, EP 2; TP 2; " \
           "TP 2, EP 2; 2 × (TP 1))" in report
    assert "QPS per GPU" in report and "QPS per GPU" in output
    # Twice the replicas of one TP-1 engine on twice the GPUs serve at least twice the load (each
    # of 4 round-robin replicas at 2λ sees λ/2, as each of 2 at λ does, in more regular gaps): 4 ×
    # TP 1 (point 6 of the 4-GPU layouts) has at least 2 × (1 − precision) the capacity of 2 × TP 1
    # (here at the search's top, 512 QPS, itself a lower bound).
    from typer.testing import CliRunner

    from experiments.cli.main import app

    four = write(tmp_path, MOE + SEARCH + "layouts: {gpus: 4}\n", "c4.yaml")
    result = CliRunner().invoke(app, ["simulate", str(four), "--point", "6", "--out", str(tmp_path / "p6")])
    assert result.exit_code == 0, result.output
    row = pd.read_csv(tmp_path / "p6" / "points.csv").iloc[0]
    assert row["label"] == "vllm_v1 chunk=1024 x=4 round_robin" and row["num_gpus"] == 4
    assert row["capacity_qps"] >= 2 * (1 - 0.05) * points.loc[4, "capacity_qps"]
    assert row["capacity_per_gpu_qps"] == pytest.approx(row["capacity_qps"] / 4)


def test_sweep_of_moe_layouts_reports_goodput_per_gpu(tmp_path):
    out, _ = sweep(tmp_path, write(tmp_path, MOE + "layouts: {gpus: 2}\n"))
    points = pd.read_csv(out / "points.csv")
    assert (points["num_gpus"] == 2).all() and (points["goodput_rps"] > 0).all()
    assert points["goodput_rps_per_gpu"].tolist() == pytest.approx((points["goodput_rps"] / 2).tolist())
    report = (out / "report.md").read_text()
    assert "goodput per GPU (req/s)" in report and "Layouts (layouts.gpus: 2): 5 of 5" in report


def test_chunk_by_split_n_policy_runs_on_an_moe_point(tmp_path):
    # Qwen3-30B-A3B on one H100 (61 GB of bf16 weights fit its 80 GB): chunk {512, 1024} × split-N
    # {0, 2} with the load-dependent policy table over two loads.
    text = MOE + SEARCH.replace("}", ", loads: [4, 16]}") + (
        "variants:\n  - {engine.chunk_size: [512, 1024], engine.split_n: [0, 2], engine.acceptance: 0.8}\n")
    out, _ = sweep(tmp_path, write(tmp_path, text))
    points = pd.read_csv(out / "points.csv")
    assert sorted(zip(points["chunk_size"], points["split_n"])) == [(512, 0), (512, 2), (1024, 0), (1024, 2)]
    assert (points["capacity_qps"] > 1).all() and (points["num_gpus"] == 1).all()
    loads = pd.read_csv(out / "loads.csv")
    assert len(loads) == 8 and sorted(set(loads["trial_qps"])) == [4, 16]
    assert (out / "plots" / "capacity_chunk_x_n.png").is_file()
    # The policy line names, per load, the point of most goodput among those meeting every SLO.
    report = (out / "report.md").read_text()
    for qps, group in loads.groupby("trial_qps"):
        meeting = group[group["slo_met"]]
        if len(meeting):
            assert meeting.loc[meeting["goodput_rps"].idxmax(), "label"] in report
    assert "Load-dependent policy (best goodput among points meeting every SLO, per QPS band)" in report


def test_layouts_the_base_settings_rule_out_are_skipped_and_none_left_is_an_error(tmp_path):
    # A DP group of an MoE with preemption: swap is not modelled, so with it the four DP > 1
    # layouts of 4 GPUs are skipped (with that check's message) and the five others run.
    text = MOE.replace("max_num_seqs: 64}", "max_num_seqs: 64, preemption: swap}")
    with pytest.warns(ConfigWarning, match=r"layouts: 4 of the 9 layouts of 4 GPUs are skipped: TP 1 × DP 4 \("
                                           r"engine.data_parallel_size > 1 of a mixture of experts with preemption: "
                                           r"swap"):
        points = points_of(tmp_path, text + "layouts: {gpus: 4}\n")
    assert [layout_of(p) for p in points] == [(4, 1, False, 1, 1), (4, 1, True, 1, 1), (1, 1, False, 4, 1),
                                              (2, 1, False, 2, 1), (2, 1, True, 2, 1)]
    # Mixtral-8x7B on 64 GPUs as one engine (7 TP degrees × EP off and on = 14 layouts): EP 64
    # does not divide its 8 experts, TP 64 exceeds its 32 heads, and the 6 DP layouts left need
    # preemption: recompute, so none is left.
    with pytest.raises(ConfigError) as caught:
        points_of(tmp_path, text.replace("qwen3-30b-a3b", "mixtral-8x7b") + "layouts: {gpus: 64, replicas: false}\n")
    message = str(caught.value)
    assert "c.yaml: layouts.gpus: none of the 14 layouts of 64 GPUs can run this point: TP 1 × DP 64, EP 64: " \
           "enable_expert_parallel: expert parallel size" in message
    assert "; TP 64: tensor_parallel_size 64 must divide num_attention_heads 32; " in message
    assert message.count("of a mixture of experts with preemption: swap or a draft model is not modelled") == 6
