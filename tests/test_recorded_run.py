"""`verify --against-run`: the recorded-run bundle reader (experiments/verification/recorded_run.py),
on hand-made bundles and the recorded Qwen3-32B TP2 run in ../shared/validation."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from experiments.verification.recorded_run import (bundle_config, measured_summary, per_request_errors, per_second,
                                                   read_recorded_run, write_trace)

SHARED = Path(__file__).resolve().parents[2] / "shared" / "validation" / "llmservingsim"
QWEN_TP2 = SHARED / "RTXPRO6000_Qwen3-32B_tp2"
META = {"model": "Qwen/Qwen3-32B", "vllm_version": "0.19.0",
        "engine_kwargs": {"tensor_parallel_size": 2, "data_parallel_size": 1, "enable_expert_parallel": False,
                          "max_num_seqs": 128, "max_num_batched_tokens": 2048, "max_model_len": None, "seed": 42}}


def _bundle(tmp_path: Path, requests: list[dict], meta: dict = META, cluster: dict | None = None) -> Path:
    (tmp_path / "vllm").mkdir(parents=True)
    (tmp_path / "vllm" / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in requests))
    (tmp_path / "vllm" / "meta.json").write_text(json.dumps(meta))
    cluster = cluster or {"nodes": [{"instances": [{"hardware": "RTXPRO6000", "npu_mem": {"mem_util": 0.9}}]}]}
    (tmp_path / "config.json").write_text(json.dumps(cluster))
    return tmp_path


def _request(i, queued, first, last, n_in=100, n_out=11, arrival=1.7e9):
    return {"request_id": f"r{i}", "input_toks": n_in, "output_toks": n_out, "arrival_time": arrival + i,
            "queued_ts": queued, "scheduled_ts": queued, "first_token_ts": first, "last_token_ts": last}


def test_metrics_come_from_the_engine_clock_only(tmp_path):
    # Engine clock around 1000 s; the client's epoch arrival_time (1.7e9) must never enter a latency.
    bundle = _bundle(tmp_path, [_request(0, 1000.0, 1000.5, 1001.5), _request(1, 1002.0, 1003.0, 1005.0, n_out=5)])
    run = read_recorded_run(bundle)
    assert run.requests["arrival_s"].tolist() == [0.0, 2.0]
    assert run.requests["ttft_s"].tolist() == [0.5, 1.0]
    assert run.requests["e2e_s"].tolist() == [1.5, 3.0]
    assert run.requests["tpot_s"].tolist() == pytest.approx([1.0 / 10, 2.0 / 4])
    summary = measured_summary(run)
    assert summary["makespan_s"] == 5.0  # last token 1005 − first queued 1000
    assert summary["throughput_rps"] == pytest.approx(2 / 5.0)
    assert summary["output_throughput_tps"] == pytest.approx(16 / 5.0)
    assert summary["ttft_s_p50"] == pytest.approx(0.75)


def test_requests_are_replayed_in_engine_arrival_order(tmp_path):
    bundle = _bundle(tmp_path, [_request(0, 1005.0, 1006.0, 1007.0, n_in=7), _request(1, 1000.0, 1001.0, 1002.0, n_in=3)])
    run = read_recorded_run(bundle)
    assert run.requests["prompt_tokens"].tolist() == [3, 7] and run.requests["request_id"].tolist() == ["r1", "r0"]
    trace = write_trace(run, tmp_path / "out" / "trace.csv").read_text().splitlines()
    assert trace[0] == "arrival_s,prompt_tokens,output_tokens"
    assert trace[1:] == ["0.000000000,3,11", "5.000000000,7,11"]


def test_bundle_config_carries_the_recorded_limits(tmp_path):
    run = read_recorded_run(_bundle(tmp_path, [_request(0, 1.0, 2.0, 3.0)]))
    config = bundle_config(run, tmp_path / "trace.csv")
    assert config["device"] == "rtx-pro-6000"
    assert config["engine"] == {"scheduler": "vllm_v1", "tensor_parallel_size": 2, "pipeline_parallel_size": 1,
                                "max_num_seqs": 128, "chunk_size": 2048, "seed": 42, "gpu_memory_utilization": 0.9}
    assert config["trace"] == {"kind": "file", "path": str(tmp_path / "trace.csv"), "format": "canonical"}
    assert config["model"] == "qwen3-32b"
    assert "model" not in bundle_config(run, tmp_path / "trace.csv", frozenset({"model"}))  # --set model=... names it


@pytest.mark.parametrize("field, value, message", [
    ("queued_ts", "soon", "field queued_ts is 'soon'"),
    ("output_toks", 0, "field output_toks is 0"),
    ("first_token_ts", float("nan"), "field first_token_ts is nan"),
    ("last_token_ts", 999.0, "expected first_token_ts <= last_token_ts"),
])
def test_a_bad_request_line_names_file_line_and_field(tmp_path, field, value, message):
    bad = _request(1, 1000.0, 1000.5, 1001.5)
    bad[field] = value
    bundle = _bundle(tmp_path, [_request(0, 1000.0, 1000.5, 1001.5), bad])
    with pytest.raises(ValueError, match=f"requests.jsonl:2: .*{message}"):
        read_recorded_run(bundle)


def test_missing_files_and_unsupported_deployments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="not a recorded run: vllm/requests.jsonl is missing"):
        read_recorded_run(tmp_path)
    dp = {**META, "engine_kwargs": {**META["engine_kwargs"], "data_parallel_size": 2, "enable_expert_parallel": True}}
    # Data + expert parallel runs map onto engine keys (issue 18); a cluster of another GPU count is refused.
    run = read_recorded_run(_bundle(tmp_path / "dp", [_request(0, 1.0, 2.0, 3.0)], meta=dp))
    engine = bundle_config(run, tmp_path / "t.csv")["engine"]
    assert (engine["data_parallel_size"], engine["enable_expert_parallel"]) == (2, True)
    three = {"nodes": [{"instances": [{"hardware": "RTXPRO6000", "num_npus": 1}] * 3}]}
    run = read_recorded_run(_bundle(tmp_path / "dp3", [_request(0, 1.0, 2.0, 3.0)], meta=dp, cluster=three))
    with pytest.raises(ValueError, match=r"meta.json: engine_kwargs data_parallel_size 2 × tensor_parallel_size 2 × "
                                         r"pipeline_parallel_size 1 does not match the 3 GPUs of .*config.json"):
        bundle_config(run, tmp_path / "t.csv")
    run = read_recorded_run(_bundle(tmp_path / "hw", [_request(0, 1.0, 2.0, 3.0)],
                                    cluster={"nodes": [{"instances": [{"hardware": "TPUv9"}]}]}))
    with pytest.raises(ValueError, match="hardware 'TPUv9' has no built-in device"):
        bundle_config(run, tmp_path / "t.csv")


def test_per_second_counts_running_waiting_and_tokens():
    # Request A: arrives 0, scheduled 0.5, tokens at 0.9, 1.5, 2.5 (done 2.5); B: arrives 0.2, scheduled 1.2, done 1.8.
    args = np.array([0.0, 0.2]), np.array([0.5, 1.2]), np.array([2.5, 1.8])
    frame = per_second(*args, [[0.9, 1.5, 2.5], [1.5, 1.8]], 2.5)
    assert frame["t"].tolist() == [1.0, 2.0, 3.0]
    assert frame["running"].tolist() == [1, 1, 0]
    assert frame["waiting"].tolist() == [1, 0, 0]
    assert frame["gen_throughput"].tolist() == [1.0, 3.0, 1.0]
    assert per_second(*args, None, 2.5)["gen_throughput"].isna().all()  # no per-token times: not invented


def test_per_request_errors_pair_requests_by_trace_order(tmp_path):
    import pandas as pd

    run = read_recorded_run(_bundle(tmp_path, [_request(0, 0.0, 1.0, 2.0), _request(1, 1.0, 3.0, 5.0)]))
    # measured TTFT 1.0 (r0) and 2.0 (r1); simulated 1.05 and 1.9: +5 % and −5 %; E2E 2.0 and 4.0 exactly.
    # The terms: measured scheduled at arrival (queue 0: no relative error), first token 1.0 and 2.0
    # after it; simulated r1 scheduled 0.2 s late, its first token 1.7 s after: +5 % (r0) and −15 % (r1).
    simulated = pd.DataFrame({"request_id": [1, 0], "ttft_s": [1.9, 1.05], "tpot_s": [0.2, 0.1], "e2e_s": [4.0, 2.0],
                              "arrival_s": [1.0, 0.0], "first_scheduled_s": [1.2, 0.0], "first_token_s": [2.9, 1.05]})
    errors = per_request_errors(run, simulated).set_index("metric")
    assert errors.loc["first_token_after_scheduled_s", "err P50 %"] == pytest.approx(-5.0)
    assert errors.loc["first_token_after_scheduled_s", "within ±10 %"] == 0.5
    assert errors.loc["queue_s", "requests"] == 0  # a measured queue of 0 has no relative error
    assert errors.loc["ttft_s", "err P10 %"] == pytest.approx(-4.0)
    assert errors.loc["ttft_s", "err P50 %"] == pytest.approx(0.0)
    assert errors.loc["e2e_s", "err P90 %"] == pytest.approx(0.0)
    assert errors.loc["ttft_s", "within ±10 %"] == 1.0
    with pytest.raises(ValueError, match="the simulation has 1 requests, the recording 2"):
        per_request_errors(run, simulated.iloc[:1])


@pytest.mark.skipif(not QWEN_TP2.is_dir(), reason="../shared/validation (recorded vLLM runs) is not beside the checkout")
def test_the_recorded_qwen3_32b_tp2_run_ground_truth():
    """The figures of the recorded run, computed by hand from requests.jsonl (engine clock)."""
    run = read_recorded_run(QWEN_TP2)
    s = measured_summary(run)
    assert s["completed"] == 300
    assert s["makespan_s"] == pytest.approx(159.6532, abs=1e-3)
    assert s["ttft_s_p50"] == pytest.approx(40.7018, abs=1e-3)
    assert s["tpot_s_p50"] == pytest.approx(0.08428, abs=1e-5)
    assert s["e2e_s_p50"] == pytest.approx(98.649, abs=1e-2)
    assert run.requests["output_tokens"].sum() == 199486 and run.requests["prompt_tokens"].sum() == 258691
    assert run.timeseries is not None and len(run.timeseries) == 160


def test_verify_against_run_on_a_small_bundle(tmp_path):
    from typer.testing import CliRunner

    from experiments.cli.main import app

    requests = [_request(i, 1000.0 + 0.5 * i, 1000.6 + 0.5 * i, 1002.0 + 0.5 * i, n_in=64 + 8 * i, n_out=20)
                for i in range(12)]
    bundle = _bundle(tmp_path / "bundle", requests, meta={**META, "model": "meta-llama/Meta-Llama-3-8B"},
                     cluster={"nodes": [{"instances": [{"hardware": "H100", "npu_mem": {"mem_util": 0.9}}]}]})
    out = tmp_path / "out"
    runner = CliRunner()
    refused = runner.invoke(app, ["verify", "cfg.yaml", "--against-run", str(bundle)])
    assert refused.exit_code != 0 and "drop CONFIG" in refused.output
    unknown = runner.invoke(app, ["verify", "--against-run", str(bundle), "--out", str(out)])
    assert unknown.exit_code != 0 and "is not a built-in model" in unknown.output and "--set model=PATH" in unknown.output
    result = runner.invoke(app, ["verify", "--against-run", str(bundle), "--out", str(out), "--set", "model=llama-3-8b",
                                 "--set", "engine.tensor_parallel_size=1", "--set", "cost_model=roofline"])
    assert result.exit_code == 0, result.output
    document = json.loads((out / "fidelity.json").read_text())
    assert document["context"]["requests"] == 12 and document["context"]["device"] == "h100-sxm"
    measured = {row["metric"]: row["measured"] for row in document["e2e"]}
    assert measured["makespan_s"] == pytest.approx(1007.5 - 1000.0)
    assert measured["ttft_s_p50"] == pytest.approx(0.6)
    per_request = next(iter(document["extra"].values()))
    assert [row["metric"] for row in per_request] == ["ttft_s", "tpot_s", "e2e_s", "queue_s",
                                                      "first_token_after_scheduled_s"]
    assert (out / "plots" / "per_second.png").is_file() and (out / "trace.csv").is_file()


def test_a_huge_token_count_or_a_repeated_request_id_names_the_lines(tmp_path):
    import re

    huge = _request(1, 1000.0, 1000.5, 1001.5)
    huge["input_toks"] = int("9" * 4300)  # json.dumps writes all 4,300 digits; no float holds it
    bundle = _bundle(tmp_path / "huge", [_request(0, 1000.0, 1000.5, 1001.5), huge])
    with pytest.raises(ValueError) as info:
        read_recorded_run(bundle)
    assert str(info.value) == (f"{bundle / 'vllm' / 'requests.jsonl'}:2: field input_toks is {'9' * 40}... "
                               "(4300 characters); expected a whole number of tokens from 1 to 2147483647")
    over = _request(1, 1000.0, 1000.5, 1001.5, n_out=2**31)
    with pytest.raises(ValueError, match=re.escape("requests.jsonl:2: field output_toks is 2147483648; expected a "
                                                   "whole number of tokens from 1 to 2147483647")):
        read_recorded_run(_bundle(tmp_path / "over", [_request(0, 1000.0, 1000.5, 1001.5), over]))
    twice = [_request(0, 1000.0, 1000.5, 1001.5), _request(1, 1001.0, 1001.5, 1002.5), _request(0, 1002.0, 1003.0, 1004.0)]
    bundle = _bundle(tmp_path / "twice", twice)
    with pytest.raises(ValueError) as info:
        read_recorded_run(bundle)
    assert str(info.value) == (f"{bundle / 'vllm' / 'requests.jsonl'}:3: request_id 'r0' is also on line 1; "
                               "each request must be recorded once")
    far = _request(1, 1000.0, 1000.5, 1e308)  # a last_token_ts no trace reader would replay
    with pytest.raises(ValueError, match=re.escape("requests.jsonl:2: field last_token_ts is 1e+308, more than 1e9 s "
                                                   "after the first queued_ts (1000.0)")):
        read_recorded_run(_bundle(tmp_path / "far", [_request(0, 1000.0, 1000.5, 1001.5), far]))
    # The client's epoch arrival_time is never used: 1e308 there is read without complaint.
    assert len(read_recorded_run(_bundle(tmp_path / "epoch", [_request(0, 1000.0, 1000.5, 1001.5, arrival=1e308)])
                                 ).requests) == 1


@pytest.mark.parametrize("key, value, expected", [
    ("max_num_batched_tokens", -1, "expected a whole number >= 1"),
    ("tensor_parallel_size", 1.5, "expected a whole number >= 1"),
    ("max_num_seqs", "128", "expected a whole number >= 1"),
    ("seed", -1, "expected a whole number >= 0"),
    ("pipeline_parallel_size", True, "expected a whole number >= 1"),
])
def test_bad_engine_kwargs_name_meta_json_and_the_key(tmp_path, key, value, expected):
    meta = {**META, "engine_kwargs": {**META["engine_kwargs"], key: value}}
    bundle = _bundle(tmp_path, [_request(0, 1.0, 2.0, 3.0)], meta=meta)
    with pytest.raises(ValueError) as info:
        bundle_config(read_recorded_run(bundle), tmp_path / "t.csv")
    assert str(info.value) == f"{bundle / 'vllm' / 'meta.json'}: engine_kwargs.{key} is {value!r}; {expected}"


def test_a_missing_config_json_says_so_and_how_to_name_the_card(tmp_path):
    bundle = _bundle(tmp_path, [_request(0, 1.0, 2.0, 3.0)])
    (bundle / "config.json").unlink()
    with pytest.raises(ValueError) as info:
        bundle_config(read_recorded_run(bundle), tmp_path / "t.csv")
    assert str(info.value) == (f"{bundle / 'config.json'} is missing (the cluster file that names the card, "
                               "`hardware`); name the card with --set device=NAME (a built-in device or a device file)")
    assert bundle_config(read_recorded_run(bundle), tmp_path / "t.csv", frozenset({"device"}))["engine"] == {
        "scheduler": "vllm_v1", "tensor_parallel_size": 2, "pipeline_parallel_size": 1, "max_num_seqs": 128,
        "chunk_size": 2048, "seed": 42, "gpu_memory_utilization": 0.9}  # vLLM's default: meta.json gives none


@pytest.mark.parametrize("kwargs, overrides, message", [
    ({"tensor_parallel_size": 3}, [], "{meta}: engine_kwargs.tensor_parallel_size is 3: model 'llama-3-8b': "
                                      "tensor_parallel_size 3 must divide num_attention_heads 32"),
    ({"max_num_batched_tokens": -1}, [], "{meta}: engine_kwargs.max_num_batched_tokens is -1; expected a whole number >= 1"),
    ({}, ["engine.tensor_parallel_size=3"], "--set engine.tensor_parallel_size: model 'llama-3-8b': "
                                             "tensor_parallel_size 3 must divide num_attention_heads 32"),
])
def test_verify_against_run_refuses_a_bad_recording_before_writing_into_out(tmp_path, kwargs, overrides, message):
    from typer.testing import CliRunner

    from experiments.cli.main import app

    meta = {**META, "engine_kwargs": {**META["engine_kwargs"], "tensor_parallel_size": 1, **kwargs}}
    bundle = _bundle(tmp_path / "bundle", [_request(i, 1000.0 + i, 1000.5 + i, 1001.5 + i) for i in range(3)], meta=meta,
                     cluster={"nodes": [{"instances": [{"hardware": "H100", "npu_mem": {"mem_util": 0.9}}]}]})
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["verify", "--against-run", str(bundle), "--out", str(out), "--set",
                                      "cost_model=roofline", "--set", "model=llama-3-8b",
                                      *[a for o in overrides for a in ("--set", o)]])
    assert result.exit_code != 0
    said = " ".join(result.output.split())
    assert "error: " + message.format(meta=bundle / "vllm" / "meta.json") in said
    assert "config.yaml" not in said  # the tool's own generated file is not the culprit
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == []  # no config.yaml, no trace.csv


def test_vllm_settings_come_from_meta_json_not_the_simulator_calibration(tmp_path):
    # config.json's npu_mem.mem_util is LLMServingSim's calibration of its own simulator (0.834 on a
    # held-back bundle); vLLM ran with meta.json's gpu_memory_utilization (or its default 0.9).
    calibrated = {"nodes": [{"instances": [{"hardware": "RTXPRO6000", "npu_mem": {"mem_util": 0.834}}]}]}
    run = read_recorded_run(_bundle(tmp_path / "a", [_request(0, 1.0, 2.0, 3.0)], cluster=calibrated))
    assert bundle_config(run, tmp_path / "t.csv")["engine"]["gpu_memory_utilization"] == 0.9
    meta = {**META, "engine_kwargs": {**META["engine_kwargs"], "gpu_memory_utilization": 0.95}}
    run = read_recorded_run(_bundle(tmp_path / "b", [_request(0, 1.0, 2.0, 3.0)], meta=meta, cluster=calibrated))
    assert bundle_config(run, tmp_path / "t.csv")["engine"]["gpu_memory_utilization"] == 0.95


def test_a_recorded_block_count_is_the_pool(tmp_path):
    meta = {**META, "num_gpu_blocks": 27_831}
    run = read_recorded_run(_bundle(tmp_path / "a", [_request(0, 1.0, 2.0, 3.0)], meta=meta))
    assert bundle_config(run, tmp_path / "t.csv")["engine"]["num_gpu_blocks"] == 27_831
    forced = {**META, "engine_kwargs": {**META["engine_kwargs"], "num_gpu_blocks_override": 4_000}}
    run = read_recorded_run(_bundle(tmp_path / "b", [_request(0, 1.0, 2.0, 3.0)], meta=forced))
    assert bundle_config(run, tmp_path / "t.csv")["engine"]["num_gpu_blocks"] == 4_000


@pytest.mark.parametrize("meta, message", [
    ({**META, "num_gpu_blocks": 100, "engine_kwargs": {**META["engine_kwargs"], "num_gpu_blocks_override": 200}},
     "num_gpu_blocks 100 contradicts engine_kwargs.num_gpu_blocks_override 200: vLLM's pool is the override; "
     "correct one of them"),
    ({**META, "num_gpu_blocks": 0}, "num_gpu_blocks is 0; expected a whole number >= 1"),
    ({**META, "engine_kwargs": {**META["engine_kwargs"], "gpu_memory_utilization": 1.5}},
     "engine_kwargs.gpu_memory_utilization is 1.5; expected a fraction in (0, 1]"),
])
def test_bad_vllm_memory_settings_name_meta_json_and_the_key(tmp_path, meta, message):
    run = read_recorded_run(_bundle(tmp_path, [_request(0, 1.0, 2.0, 3.0)], meta=meta))
    with pytest.raises(ValueError) as info:
        bundle_config(run, tmp_path / "t.csv")
    assert str(info.value) == f"{tmp_path / 'vllm' / 'meta.json'}: {message}"


def test_a_meta_json_that_contradicts_its_requests_is_refused(tmp_path):
    bundle = _bundle(tmp_path, [_request(0, 1.0, 2.0, 3.0), _request(1, 1.5, 2.0, 3.0)], meta={**META, "num_requests": 3})
    with pytest.raises(ValueError) as info:
        read_recorded_run(bundle)
    assert str(info.value) == (f"{bundle / 'vllm' / 'meta.json'}: num_requests is 3 but {bundle / 'vllm' / 'requests.jsonl'} "
                               "holds 2 requests: the recording is incomplete or not this run's")
    assert len(read_recorded_run(_bundle(tmp_path / "ok", [_request(0, 1.0, 2.0, 3.0)], meta={**META, "num_requests": 1})).requests) == 1
