"""Rows built to break a parser are row errors naming file, row and field, never a traceback.

Issue 14, item 10: a JSON line nested 100,000 deep raised RecursionError and a 4,301-digit
integer Python's int-string ValueError (Azure timestamps 300 years apart and a year-1 timestamp
are in test_traces_bounds.py). Rows are JSON-lines file lines, CSV data rows from 1.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traces import TraceFormatError, read_trace

MOONCAKE_ROW = '{"timestamp": 0, "input_length": 10, "output_length": 5}'
DEEP = "[" * 100_000 + "]" * 100_000
HUGE = "1" + "0" * 4_300  # 4,301 digits: past sys.get_int_max_str_digits() (4,300)


def write(tmp_path, text, name="trace.jsonl"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_deeply_nested_json_line_is_a_malformed_row(tmp_path):
    deep_row = '{"timestamp": 1, "input_length": 10, "output_length": 5, "x": ' + DEEP + "}"
    path = write(tmp_path, "\n".join([MOONCAKE_ROW, deep_row, MOONCAKE_ROW]) + "\n")
    result = read_trace(path)
    assert result.rejected_rows == {"malformed line": [2]} and len(result.requests) == 2
    with pytest.raises(TraceFormatError) as info:
        read_trace(path, strict=True)
    error = info.value
    assert (error.row, error.field, error.reason) == (2, "(whole line)", "malformed line")
    assert str(path) in str(error) and "nests deeper than Python's JSON parser can follow" in str(error)
    assert "(200,063 characters)" in str(error) and len(str(error)) < 400


def test_a_deeply_nested_first_line_is_an_unknown_header_not_a_crash(tmp_path):
    with pytest.raises(TraceFormatError, match="a header of a known trace format"):
        read_trace(write(tmp_path, DEEP + "\n" + MOONCAKE_ROW + "\n"))


def test_a_4301_digit_token_count_is_too_large_for_its_field(tmp_path):
    row = '{"timestamp": 5, "input_length": ' + HUGE + ', "output_length": 5}'
    path = write(tmp_path, MOONCAKE_ROW + "\n" + row + "\n")
    result = read_trace(path)
    assert result.rejected_rows == {"prompt_tokens too large": [2]} and len(result.requests) == 1
    with pytest.raises(TraceFormatError) as info:
        read_trace(path, strict=True)
    assert (info.value.row, info.value.field) == (2, "input_length (prompt_tokens)")
    assert "(4,301 characters)" in str(info.value) and "from 1 to 2147483647" in str(info.value)


def test_a_4301_digit_timestamp_is_too_large_and_a_huge_integer_elsewhere_is_ignored(tmp_path):
    rows = [MOONCAKE_ROW,
            '{"timestamp": ' + HUGE + ', "input_length": 10, "output_length": 5}',
            '{"timestamp": 7, "input_length": 20, "output_length": 5, "hash_ids": [1, ' + HUGE + "]}"]
    result = read_trace(write(tmp_path, "\n".join(rows) + "\n"))
    # hash_ids that are not all integers (the huge one stays text) are a row error (issue 16:
    # prefix caching reads them), counted, not silently dropped.
    assert result.rejected_rows == {"arrival too large": [2], "hash_ids not a list of integers": [3]}
    assert [(r.arrival_s, r.prompt_tokens, r.prefix_hash_ids) for r in result.requests] == [(0.0, 10, ())]


def test_a_4301_digit_csv_field_is_too_large_not_non_numeric(tmp_path):
    path = write(tmp_path, f"arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,10,{HUGE}\n", "trace.csv")
    assert read_trace(path).rejected_rows == {"output_tokens too large": [2]}


@pytest.mark.parametrize("line", ["[1, 2, 3]", "42", '"text"', "null", "{broken"])
def test_json_lines_that_are_not_objects_are_malformed_rows(tmp_path, line):
    result = read_trace(write(tmp_path, "\n".join([MOONCAKE_ROW, line, MOONCAKE_ROW]) + "\n"))
    assert result.rejected_rows == {"malformed line": [2]} and len(result.requests) == 2


def test_a_float_that_overflows_is_too_large_and_shown_as_written(tmp_path):
    rows = [MOONCAKE_ROW, '{"timestamp": 1e400, "input_length": 10, "output_length": 5}']
    with pytest.raises(TraceFormatError, match=r"row 2 .*arrival too large: got '1e400'"):
        read_trace(write(tmp_path, "\n".join(rows) + "\n"), strict=True)


def test_a_folder_is_not_a_trace_file(tmp_path):
    with pytest.raises(IsADirectoryError, match="a folder, not a trace file"):
        read_trace(tmp_path)


def test_json_lines_after_blank_lines_are_detected_and_numbered_by_file_line(tmp_path):
    path = write(tmp_path, "\n  \n" + MOONCAKE_ROW + "\n" + MOONCAKE_ROW.replace('"input_length": 10', '"input_length": 0') + "\n")
    result = read_trace(path)
    assert result.format == "mooncake" and result.rejected_rows == {"prompt_tokens < 1": [4]}


JSON_FRAGMENTS = [MOONCAKE_ROW, '{"timestamp": 9, "input_length": 0, "output_length": 5}', "[1]", "{oops", "", "   ",
                  '{"x": ' + "[" * 5_000 + "]" * 5_000 + "}", '{"timestamp": 1, "input_length": ' + HUGE + ', "output_length": 2}',
                  '{"timestamp": 1e400, "input_length": 3, "output_length": 2}', '{"timestamp": 2, "input_length": 3}']


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(JSON_FRAGMENTS), max_size=20))
def test_json_lines_loaded_plus_rejected_add_up_to_the_non_blank_lines(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("jsonl") / "trace.jsonl"
    path.write_text("\n".join([MOONCAKE_ROW, *lines]) + "\n")
    result = read_trace(path, format="mooncake")
    assert len(result.requests) + result.num_rejected == 1 + sum(1 for line in lines if line.strip())
