"""Metric definitions: cases 9, 10, 11 of ../shared/cases/README.md."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from simulator.metrics import itl_samples_s, requests_frame, summarize, tbt_samples_s, tpot_s
from simulator.scheduler import FinishedRequest
from simulator.step_log import STEP_COLUMNS


def record(token_times, output_tokens=None, reason="completed", arrival_s=0.0):
    return FinishedRequest(
        request_id=0, arrival_s=arrival_s, prompt_tokens=10,
        output_tokens=output_tokens or len(token_times), finish_reason=reason,
        generated_tokens=len(token_times), first_scheduled_s=arrival_s,
        first_token_s=token_times[0], completion_s=token_times[-1], token_times_s=list(token_times),
    )


def summary_of(*records):
    return summarize(requests_frame(list(records)), pd.DataFrame(columns=STEP_COLUMNS), num_gpu_blocks=100)


def test_case_9_ttft_tbt_tpot():
    times = [0.500, 0.520, 0.540, 0.560]
    assert tbt_samples_s(times) == pytest.approx([0.02, 0.02, 0.02])  # first-token gap excluded
    assert tpot_s(times) == pytest.approx(0.02)
    s = summary_of(record(times))
    assert s["ttft_s_p50"] == pytest.approx(0.5)
    assert s["tbt_s_p99"] == pytest.approx(0.02) and s["tpot_s_mean"] == pytest.approx(0.02)


def test_case_10_speculative_emissions():
    times = [0.100] + [0.109] * 3 + [0.118] * 3  # 7 tokens: first, then two verify steps of 3
    assert tpot_s(times) == pytest.approx(0.018 / 6)
    assert tbt_samples_s(times) == pytest.approx([0.009, 0.009])  # one sample per emission
    assert itl_samples_s(times) == pytest.approx([0.003] * 6)
    assert np.mean(itl_samples_s(times)) == pytest.approx(tpot_s(times))


def test_case_11_truncated_request_uses_tokens_produced():
    times = list(np.linspace(0.2, 0.29, 10))  # asked 100, produced 10
    s = summary_of(record(times, output_tokens=100, reason="truncated"))
    assert s["tpot_s_mean"] == pytest.approx(0.09 / 9)  # not 0.09 / 99
    assert s["output_throughput_tps"] == pytest.approx(10 / 0.29)
    assert s["truncated"] == 1 and s["completed"] == 0


def test_one_token_output_has_ttft_but_no_tpot_or_tbt():
    s = summary_of(record([0.3]))
    assert s["ttft_s_p50"] == pytest.approx(0.3)
    assert math.isnan(s["tpot_s_p50"]) and math.isnan(s["tbt_s_p99"])


def test_gap_samples_of_many_requests_equal_the_per_request_samples(monkeypatch):
    # The vectorised pass over every request's tokens must give exactly the per-request
    # TBT and ITL samples, concatenated: emissions never span two requests, and a request that
    # starts at the time the previous one ended still begins a new emission.
    from simulator.metrics import gap_samples_s
    rng = np.random.default_rng(5)
    requests = [[], [1.0], [2.0, 2.0, 2.5], [2.5, 3.0, 3.0, 3.0, 3.75], [3.75], [4.0, 4.5]]
    for _ in range(200):
        n = int(rng.integers(0, 12))
        gaps = rng.choice([0.0, 0.01, 0.02, 0.05], n)
        requests.append(list(np.cumsum(gaps) + rng.uniform(0, 10)))
    tbt, itl = gap_samples_s(requests)
    expected_tbt = np.concatenate([tbt_samples_s(t) for t in requests])
    expected_itl = np.concatenate([itl_samples_s(t) for t in requests])
    np.testing.assert_array_equal(tbt, expected_tbt)
    np.testing.assert_array_equal(itl, expected_itl)
    import simulator.metrics as metrics
    monkeypatch.setattr(metrics, "_GAP_CHUNK_REQUESTS", 7)  # chunks split the requests: same samples
    chunked = gap_samples_s(requests)
    np.testing.assert_array_equal(chunked[0], expected_tbt)
    np.testing.assert_array_equal(chunked[1], expected_itl)
    head_tbt, head_itl = gap_samples_s(requests[:6])
    assert head_tbt.tolist() == [0.5, 0.5, 0.75, 0.5]
    assert head_itl.tolist() == [0.5, 0.5 / 3, 0.5 / 3, 0.5 / 3, 0.75, 0.5]
    assert gap_samples_s([])[0].size == 0 and gap_samples_s([[], []])[1].size == 0
