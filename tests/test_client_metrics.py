"""Latency metrics by a benchmark client's definition (experiments/verification/client_metrics.py)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments.verification.client_metrics import (TOOL_METRICS, simulated_client_summary, stream_metrics,
                                                     tool_quantity)


def test_a_hand_built_stream_by_the_tools_definitions():
    # Role-only chunk at 0, 1 token at 0.400, 3 tokens at 0.450, 1 token at 0.500.
    m = stream_metrics([(0.0, 0), (0.400, 1), (0.450, 3), (0.500, 1)])
    assert m["tokens"] == 5
    assert m["ttft_s"] == pytest.approx(0.400)
    assert m["tpot_s"] == pytest.approx(0.025)            # (0.500 - 0.400) / (5 - 1)
    assert m["ntpot_s"] == pytest.approx(0.100)           # 0.500 / 5
    np.testing.assert_allclose(m["chunk_gap_s"], [0.05, 0.05])  # the per-chunk "ITL" of vllm bench, inference-perf
    # GuideLLM's ITL and AIPerf's ITL are the per-token mean, vLLM's TPOT is the same quantity.
    assert {tool_quantity(t, n)[0] for t, n in [("guidellm", "inter_token_latency_ms"),
                                                ("aiperf", "inter_token_latency"), ("vllm-bench", "tpot")]} == {"tpot_s"}
    assert tool_quantity("vllm-bench", "itl")[0] == "chunk_gap_s"


def test_a_stream_without_tokens_and_bad_streams():
    assert np.isnan(stream_metrics([(0.0, 0)])["ttft_s"])
    with pytest.raises(ValueError, match="arrival order"):
        stream_metrics([(1.0, 1), (0.5, 1)])
    with pytest.raises(ValueError, match="unknown benchmark tool 'locust'"):
        tool_quantity("locust", "ttft")
    with pytest.raises(ValueError, match="guidellm has no metric 'itl'"):
        tool_quantity("guidellm", "itl")


def test_simulated_steps_are_the_chunks():
    # Request sent at 1.0: tokens at 1.4, then 3 in one step at 1.45 (speculative), then 1.5.
    frame = pd.DataFrame({"arrival_s": [1.0], "token_times_s": [np.array([1.4, 1.45, 1.45, 1.45, 1.5])]})
    summary = simulated_client_summary(frame)
    assert summary["ttft_s_p50"] == pytest.approx(0.4)
    assert summary["tpot_s_p50"] == pytest.approx(0.025)
    assert summary["chunk_gap_s_p50"] == pytest.approx(0.05)
    assert summary["e2e_s_p50"] == pytest.approx(0.5)
    assert set(TOOL_METRICS) == {"vllm-bench", "inference-perf", "guidellm", "aiperf"}
