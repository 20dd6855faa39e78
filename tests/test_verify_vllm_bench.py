"""`verify --against-vllm-bench`: a hand-made `vllm bench serve --save-result --save-detailed` file
(tests/data/verify/vllm_bench/result.json: 3 requests, known TTFTs and ITLs) against the
simulation of its trace (trace.csv, the same 3 requests)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from experiments.cli.main import app
from experiments.verification.vllm_bench import read_vllm_bench, vllm_summary

DATA = Path(__file__).parent / "data"
BENCH = DATA / "verify" / "vllm_bench"
CONFIG = DATA / "engine" / "tiny_engine.yaml"
runner = CliRunner()


def test_reader_turns_the_result_into_request_rows():
    frame, duration_s = read_vllm_bench(BENCH / "result.json")
    assert duration_s == 20.5
    assert frame["prompt_tokens"].tolist() == [16, 32, 48] and frame["output_tokens"].tolist() == [4, 3, 2]
    np.testing.assert_allclose(frame["e2e_s"], [0.13, 0.24, 0.33])  # TTFT + sum of ITLs, no latencies saved


def test_summary_uses_vllms_definitions():
    summary = vllm_summary(*read_vllm_bench(BENCH / "result.json"))
    assert summary["ttft_s_p50"] == pytest.approx(0.2)
    # TPOT = (E2E - TTFT) / (output - 1): 0.03 / 3, 0.04 / 2, 0.03 / 1.
    assert summary["tpot_s_p50"] == pytest.approx(0.02) and summary["tpot_s_mean"] == pytest.approx(0.02)
    assert summary["tbt_s_p50"] == pytest.approx(0.015)  # median of the ITLs 0.01 x3, 0.02 x2, 0.03
    assert summary["e2e_s_p50"] == pytest.approx(0.24)
    assert summary["throughput_rps"] == pytest.approx(3 / 20.5) and summary["makespan_s"] == 20.5


def test_saved_latencies_win_and_failed_requests_are_dropped(tmp_path):
    data = json.loads((BENCH / "result.json").read_text())
    data.update(output_lens=[4, 3, 0], latencies=[0.5, 0.6, 0.0])
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    frame, _ = read_vllm_bench(path)
    assert frame["e2e_s"].tolist() == [0.5, 0.6]


def test_a_result_saved_without_detail_names_the_missing_keys(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"duration": 1.0, "completed": 3, "mean_ttft_ms": 10.0}))
    with pytest.raises(ValueError, match=r"r\.json: no per-request key\(s\) input_lens, output_lens, ttfts, itls"):
        read_vllm_bench(path)


def test_cli_compares_the_simulation_of_the_trace_with_the_result(tmp_path):
    result = runner.invoke(app, ["verify", str(CONFIG), "--against-vllm-bench", str(BENCH / "result.json"),
                                 "--trace", str(BENCH / "trace.csv"), "--cost-model", "roofline",
                                 "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "fidelity.json").read_text())
    rows = {r["metric"]: r for r in report["e2e"]}
    assert rows["ttft_s_p50"]["measured"] == pytest.approx(0.2)
    assert rows["e2e_s_p50"]["measured"] == pytest.approx(0.24)
    # The roofline of an H100 runs the tiny model far faster than this made-up server.
    assert rows["ttft_s_p50"]["predicted"] < 0.01 and rows["ttft_s_p50"]["error_pct"] < -90
    assert report["steps"] is None and "vLLM bench" in report["context"]["source"]
    missing = runner.invoke(app, ["verify", str(CONFIG), "--against-vllm-bench", str(BENCH / "result.json"),
                                  "--out", str(tmp_path)])
    assert missing.exit_code == 2 and "--trace" in missing.output
