"""points.csv columns by benchmark tools' definitions (`output.client_metrics`,
experiments/bench_tool_columns.py): hand-built token times, the config's checks, and a point's row."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments.bench_tool_columns import client_column_prefix, client_columns
from experiments.config import ConfigError, load_config
from experiments.verification.client_metrics import (CLIENT_QUANTITIES, client_quantities, simulated_client_summary,
                                                      stream_metrics)
from simulator.metrics import emissions, percentile_stats
from simulator.records_parquet import SeriesTokenTimes


def test_hand_built_streams():
    # Request 0 sent at 0: tokens at 0.4 (one step), 0.45, 0.45, 0.45 (one step of 3), 0.5 -> chunks at
    # 0.4, 0.45, 0.5: TTFT 0.4, E2E 0.5, TPOT (0.5 - 0.4) / 4 = 0.025, NTPOT 0.5 / 5 = 0.1, gaps 0.05, 0.05.
    # Request 1 rejected (no token). Request 2 sent at 1.0, one token at 1.2: TTFT 0.2, TPOT undefined.
    times = np.array([0.4, 0.45, 0.45, 0.45, 0.5, 1.2])
    q = client_quantities(np.array([0.0, 0.5, 1.0]), times, np.array([5, 0, 1]))
    np.testing.assert_allclose(q["ttft_s"], [0.4, 0.2])
    np.testing.assert_allclose(q["e2e_s"], [0.5, 0.2])
    np.testing.assert_allclose(q["tpot_s"], [0.025, np.nan])
    np.testing.assert_allclose(q["ntpot_s"], [0.1, 0.2])
    np.testing.assert_allclose(q["chunk_gap_s"], [0.05, 0.05])  # 0.5 -> 1.2 crosses requests: not a gap


def _per_response_reference(frame: pd.DataFrame) -> dict[str, float]:
    """The client quantities' stats computed response by response with `stream_metrics` (the one-
    response definition), each engine step (`emissions`) a chunk: what the vectorised path must give."""
    values = {name: [] for name in CLIENT_QUANTITIES}
    for sent_s, times in zip(frame["arrival_s"], frame["token_times_s"]):
        if len(times):
            emitted, counts = emissions(times)
            one = stream_metrics(list(zip(emitted.tolist(), counts.tolist())), float(sent_s))
            for name in CLIENT_QUANTITIES:
                values[name].append(one[name])
    out = {}
    for name, parts in values.items():
        out.update(percentile_stats(name, np.concatenate(parts) if name == "chunk_gap_s" else np.asarray(parts)))
    return out


def test_columns_equal_the_verify_path_and_name_each_tool_metric():
    frame = pd.DataFrame({"arrival_s": [0.0, 0.5, 1.0, 2.0],
                          "token_times_s": [[0.4, 0.45, 0.45, 0.45, 0.5], [], [1.2], [2.1, 2.3, 2.6]]})
    cols = client_columns(["vllm-bench", "guidellm"], frame["arrival_s"].to_numpy(),
                          SeriesTokenTimes(frame["token_times_s"]))
    reference = _per_response_reference(frame)  # stream_metrics, one response at a time
    assert simulated_client_summary(frame) == pytest.approx(reference, nan_ok=True)  # verify --against-bench: the per-response definition
    assert cols["vllm_bench_ttft_s_p50"] == pytest.approx(reference["ttft_s_p50"])
    assert cols["vllm_bench_itl_s_mean"] == pytest.approx(reference["chunk_gap_s_mean"])
    assert cols["vllm_bench_tpot_s_p90"] == pytest.approx(reference["tpot_s_p90"])
    assert cols["vllm_bench_e2el_s_p99"] == pytest.approx(reference["e2e_s_p99"])
    # GuideLLM's ITL is vLLM's TPOT; its TPOT includes the first token (NTPOT); names lose "_ms".
    assert cols["guidellm_inter_token_latency_s_p50"] == pytest.approx(reference["tpot_s_p50"])
    assert cols["guidellm_time_per_output_token_s_mean"] == pytest.approx(reference["ntpot_s_mean"])
    # By hand: TTFTs 0.4, 0.2, 0.1 -> median 0.2; chunk gaps 0.05, 0.05, 0.2, 0.3 -> mean 0.15.
    assert cols["vllm_bench_ttft_s_p50"] == pytest.approx(0.2) and cols["vllm_bench_itl_s_mean"] == pytest.approx(0.15)
    assert client_column_prefix("inference-perf", "time_to_first_token") == "inference_perf_time_to_first_token_s"


def test_config_checks_name_the_key(tmp_path):
    path = tmp_path / "c.yaml"
    base = "model: llama-3-8b\ndevice: h100-sxm\ntrace: {kind: synthetic, num_requests: 4, qps: 1}\n"
    for output, message in (("{client_metrics: [locust]}", r"unknown tool 'locust'; valid: vllm-bench"),
                            ("{client_metrics: [aiperf, aiperf]}", r"names a tool twice"),
                            ("{client_metrics: [aiperf], token_times: false}", r"needs output.token_times: true")):
        path.write_text(base + f"output: {output}\n")
        with pytest.raises(ConfigError, match=message):
            load_config(path)


def test_a_points_row_carries_the_tools_columns(tmp_path):
    from experiments.point import run_point

    path = tmp_path / "c.yaml"
    path.write_text("model: llama-3-8b\ndevice: h100-sxm\nengine: {scheduler: vllm_v1}\n"
                    "trace: {kind: synthetic, num_requests: 20, qps: 4, prompt_tokens: 200, output_tokens: 16}\n"
                    "output: {client_metrics: [vllm-bench, aiperf]}\n")
    point = load_config(path)[0]
    in_memory = run_point(point).row
    written = run_point(point, records_dir=tmp_path / "rec").row  # token times read back from the file
    assert in_memory["vllm_bench_ttft_s_p50"] == pytest.approx(in_memory["ttft_s_p50"])  # sent = arrival
    assert in_memory["aiperf_inter_token_latency_s_mean"] == pytest.approx(in_memory["tpot_s_mean"])
    for key in ("vllm_bench_itl_s_p99", "aiperf_time_to_first_token_s_p90", "vllm_bench_e2el_s_mean"):
        assert written[key] == pytest.approx(in_memory[key])
    assert "guidellm_inter_token_latency_s_p50" not in in_memory


def test_behind_a_front_end_the_client_receives_each_token_frontend_out_s_later():
    """The records' token times are the engine's; ttft_s and e2e_s add frontend_out_s (the output
    hop to the client). Request 0 sent at 0, engine tokens at 0.4 and 0.5, 5 ms out: the client's
    TTFT 0.405, E2E 0.505, TPOT 0.1 (gaps unchanged); request 1 without a front-end time (NaN: as
    0). Both paths (points.csv columns and verify --against-bench) were 5 ms short."""
    from experiments.bench_tool_columns import point_client_columns

    frame = pd.DataFrame({"arrival_s": [0.0, 1.0], "frontend_out_s": [0.005, np.nan],
                          "token_times_s": [[0.4, 0.5], [1.2, 1.5]]})
    cols = point_client_columns(["vllm-bench"], frame)
    assert cols["vllm_bench_ttft_s_mean"] == pytest.approx((0.405 + 0.2) / 2)
    assert cols["vllm_bench_e2el_s_mean"] == pytest.approx((0.505 + 0.5) / 2)
    assert cols["vllm_bench_tpot_s_mean"] == pytest.approx((0.1 + 0.3) / 2)
    summary = simulated_client_summary(frame)
    assert summary["ttft_s_mean"] == pytest.approx((0.405 + 0.2) / 2)
    assert summary["e2e_s_mean"] == pytest.approx((0.505 + 0.5) / 2)
