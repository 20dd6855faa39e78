"""Absurd arrival times and rates are refused with the row, field or key named (issue 14, item 6).

Bounds (traces/time_bounds.py): arrivals read at most 1e10 s, a trace spans at most 1e9 s (rows
farther than that from the lower median are rejected), generators draw at most 1e6 requests/s
and burstiness >= 1e-3. An arrival of 1e308 s used to load, and every later time (1e308 + 0.5
== 1e308) made TTFT = E2E = 0.
"""
from __future__ import annotations

import numpy as np
import pytest

from traces import TraceFormatError, read_trace, scale_to_qps, synthetic_trace, time_scale
from traces.arrivals import arrival_times_s
from traces.closed_loop import ClosedLoopWorkload
from traces.request import Request

HEADER = "arrival_s,prompt_tokens,output_tokens"
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens"


def write(tmp_path, text, name="trace.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def loaded(result):
    return [(r.arrival_s, r.prompt_tokens) for r in result.requests]


def test_an_arrival_of_1e308_seconds_is_refused_naming_row_and_field(tmp_path):
    path = write(tmp_path, HEADER + "\n0,10,5\n1e308,20,5\n2,30,5\n")
    result = read_trace(path)
    assert result.rejected_rows == {"arrival too large": [2]}
    assert loaded(result) == [(0.0, 10), (2.0, 30)]
    with pytest.raises(TraceFormatError) as info:
        read_trace(path, strict=True)
    assert (info.value.row, info.value.field, info.value.reason, info.value.value) == (2, "arrival_s", "arrival too large", "1e308")
    assert "from 0 to 1e10" in str(info.value)


def test_an_overflowing_arrival_is_too_large_and_inf_text_is_non_numeric(tmp_path):
    result = read_trace(write(tmp_path, HEADER + "\n0,10,5\n1e400,20,5\ninf,30,5\n-1e400,40,5\n"))
    assert result.rejected_rows == {"arrival too large": [2], "non-numeric": [3], "negative arrival": [4]}


def test_unix_epoch_seconds_load_and_are_rebased_to_zero(tmp_path):
    result = read_trace(write(tmp_path, HEADER + "\n1700000000.0,10,5\n1700000000.25,20,5\n1700000001.5,30,5\n"),
                        strict=True)
    assert loaded(result) == [(0.0, 10), (0.25, 20), (1.5, 30)]


def test_mooncake_milliseconds_are_bounded_in_milliseconds(tmp_path):
    rows = ['{"timestamp": 0, "input_length": 5, "output_length": 1}',
            '{"timestamp": 20000000000000, "input_length": 6, "output_length": 1}']
    with pytest.raises(TraceFormatError, match=r"row 2 .*arrival too large.*milliseconds from 0 to 1e13"):
        read_trace(write(tmp_path, "\n".join(rows) + "\n", "trace.jsonl"), strict=True)


def test_one_arrival_far_after_the_others_is_rejected_and_the_rest_keep_their_span(tmp_path):
    # 5e9 s is under the 1e10 s limit of a value, but 5e9 s from the median (1 s) of the others.
    result = read_trace(write(tmp_path, HEADER + "\n0,10,5\n1,20,5\n5e9,30,5\n2,40,5\n"))
    assert result.rejected_rows == {"arrival far from the others": [3]}
    assert loaded(result) == [(0.0, 10), (1.0, 20), (2.0, 40)]


def test_a_typo_before_epoch_second_arrivals_is_the_row_rejected(tmp_path):
    # Lower median of (0, 1.7e9, 1.7e9 + 1, 1.7e9 + 2) is 1.7e9: the 0 is the outlier, not the trace.
    text = HEADER + "\n0,10,5\n1700000000,20,5\n1700000001,30,5\n1700000002,40,5\n"
    result = read_trace(write(tmp_path, text))
    assert result.rejected_rows == {"arrival far from the others": [1]}
    assert loaded(result) == [(0.0, 20), (1.0, 30), (2.0, 40)]


def test_of_two_arrivals_too_far_apart_the_later_is_rejected(tmp_path):
    with pytest.raises(TraceFormatError) as info:
        read_trace(write(tmp_path, HEADER + "\n0,10,5\n5e9,20,5\n"), strict=True)
    assert (info.value.row, info.value.field, info.value.reason) == (2, "arrival_s", "arrival far from the others")
    assert "within 1e9 s (31.7 years) of the trace's median arrival" in str(info.value)


def test_azure_timestamps_300_years_apart_are_a_row_error_not_an_overflow(tmp_path):
    text = (AZURE + "\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,10,5\n"
            "1723-11-16 18:15:46.6805900,20,6\n")
    result = read_trace(write(tmp_path, text))
    assert result.rejected_rows == {"arrival far from the others": [3]}
    assert loaded(result) == [(0.0, 374), (4.314579, 10)]
    with pytest.raises(TraceFormatError, match=r"row 3 \(file line 4\): field 'TIMESTAMP': arrival far from the others"):
        read_trace(write(tmp_path, text), strict=True)


def test_azure_timestamps_at_both_ends_of_the_nanosecond_range_do_not_overflow(tmp_path):
    # 1677 to 2262 is 584 years: 1.8e19 ns, more than int64 holds; the later row is rejected.
    text = AZURE + "\n1677-09-22 00:00:00.0000000,10,5\n2262-04-10 00:00:00.0000000,20,5\n"
    result = read_trace(write(tmp_path, text))
    assert result.rejected_rows == {"arrival far from the others": [2]} and loaded(result) == [(0.0, 10)]


def test_a_year_1_timestamp_is_out_of_range_and_an_hour_25_one_is_bad(tmp_path):
    text = (AZURE + "\n0001-01-01 00:00:00.0000000,10,5\n2023-11-16 25:99:00.0,20,5\n"
            "2023-11-16 18:15:46.6805900,30,5\n9999-12-31T23:59:59Z,40,5\n-0001-01-01 00:00:00.0,50,5\n"
            "+275760-09-13 00:00:00,60,5\n")
    result = read_trace(write(tmp_path, text))
    # Rows 5 and 6 made pandas 3 parse their batch at a coarser unit and raise OutOfBoundsDatetime.
    assert result.rejected_rows == {"timestamp out of range": [1, 4, 5, 6], "bad timestamp": [2]}
    assert loaded(result) == [(0.0, 30)]
    with pytest.raises(TraceFormatError) as info:
        read_trace(write(tmp_path, text), strict=True)
    assert (info.value.row, info.value.field, info.value.reason) == (1, "TIMESTAMP", "timestamp out of range")
    assert "from 1677-09-21 00:12:43 to 2262-04-11 23:47:16" in str(info.value)


@pytest.mark.parametrize("process, qps, count, burstiness, message", [
    ("poisson", 1e-310, 100, None, "qps 1e-310 is too low for 100 requests: they would span inf s"),
    ("poisson", 1e-6, 2048, None, r"too low for 2048 requests: they would span 2.05e\+09 s, more than the 1e9 s"),
    ("constant", 1e7, 10, None, "qps must be <= 1e6 requests/s, got 10000000.0"),
    ("gamma", 1e200, 10, 1e200, "qps must be <= 1e6"),  # qps * burstiness overflowed to a ZeroDivisionError
    ("gamma", 1.0, 10, 1e-6, r"burstiness must be >= 0.001 \(gap CV <= 31.6\), got 1e-06"),
    ("poisson", float("nan"), 10, None, "qps must be a finite number > 0, got nan"),
    ("gamma", 1.0, 10, float("inf"), "burstiness must be a finite number > 0, got inf"),
])
def test_rates_that_would_give_inf_nan_or_a_collapsed_trace_are_refused(process, qps, count, burstiness, message):
    with pytest.raises(ValueError, match=message):
        arrival_times_s(process, qps, count, np.random.default_rng(0), burstiness)


def test_the_bounds_themselves_are_allowed():
    assert arrival_times_s("constant", 1e-9, 2, np.random.default_rng(0))[-1] == pytest.approx(1e9)
    assert arrival_times_s("constant", 1e6, 3, np.random.default_rng(0)).tolist() == [0.0, 1e-6, 2e-6]
    gaps = np.diff(arrival_times_s("gamma", 10.0, 2000, np.random.default_rng(0), 1e-3))
    assert np.isfinite(gaps).all() and gaps.min() >= 0
    assert len(synthetic_trace(1, 1e-300)) == 1  # one request has no gap: any rate


def test_synthetic_trace_names_qps_when_it_is_too_low():
    with pytest.raises(ValueError, match="qps 1e-12 is too low for 2048 requests"):
        synthetic_trace(2048, 1e-12)


def test_time_scaling_that_would_stretch_a_trace_past_1e9_s_is_refused():
    requests = [Request(0, 0.0, 10, 5), Request(1, 3600.0, 10, 5)]
    with pytest.raises(ValueError, match=r"would stretch the trace's 3600 s to 3.6e\+303 s"):
        time_scale(requests, 1e-300)
    with pytest.raises(ValueError, match=r"qps 1e-300 is too low for this trace's 2 requests: they would span 1e\+300 s"):
        scale_to_qps(requests, 1e-300)
    assert [r.arrival_s for r in time_scale(requests, 3.6e-6)] == [0.0, 1e9]


def test_closed_loop_think_time_is_bounded_like_a_span():
    with pytest.raises(ValueError, match=r"think_time_s must be a number of seconds from 0 to 1e9 .*got 1e\+300"):
        ClosedLoopWorkload(2, think_time_s=1e300)
    assert ClosedLoopWorkload(2, think_time_s=1e9).think_time_s == 1e9
