"""Row validation and error reporting of `read_trace` (cases 6, 7 and the empty trace).

Rows are numbered from 1 for the first data row (file line 2), as ../shared/cases/README.md says.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import shared_path
from traces import TraceFormatError, read_lengths, read_trace
from traces.readers import read_canonical_csv

HEADER = "arrival_s,prompt_tokens,output_tokens"


def write(tmp_path, text, name="trace.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_zero_prompt_strict_raises_for_row_1_naming_the_field():
    path = shared_path("cases", "zero_prompt", "trace.csv")
    with pytest.raises(TraceFormatError) as info:
        read_trace(path, strict=True)
    error = info.value
    assert (error.row, error.line, error.field, error.value) == (1, 2, "prompt_tokens", "0")
    assert str(path) in str(error) and "row 1" in str(error) and "prompt_tokens" in str(error)
    assert "from 1" in str(error)  # says what would be valid


def test_zero_prompt_lenient_loads_row_2_and_rejects_rows_1_and_3():
    result = read_trace(shared_path("cases", "zero_prompt", "trace.csv"))
    assert [(r.prompt_tokens, r.output_tokens) for r in result.requests] == [(1, 16)]
    assert result.rejected_rows == {"prompt_tokens < 1": [1], "missing field": [3]}
    assert result.num_rejected == 2


def test_zero_output_strict_raises_for_row_1():
    with pytest.raises(TraceFormatError) as info:
        read_trace(shared_path("cases", "zero_and_one_output", "trace.csv"), strict=True)
    assert (info.value.row, info.value.field, info.value.reason) == (1, "output_tokens", "output_tokens < 1")


def test_zero_output_lenient_rejects_row_1_and_keeps_the_1_token_output():
    result = read_trace(shared_path("cases", "zero_and_one_output", "trace.csv"))
    assert result.rejected_rows == {"output_tokens < 1": [1]}
    assert [(r.arrival_s, r.output_tokens) for r in result.requests] == [(0.0, 16), (pytest.approx(0.1), 1)]
    assert "rejected 1 x output_tokens < 1: rows 1" in result.summary()


def test_header_only_file_gives_no_requests_and_no_error():
    result = read_trace(shared_path("cases", "empty_trace", "trace.csv"), strict=True)
    assert result.requests == [] and result.rejected_rows == {}
    assert "mean rate n/a" in result.summary()


def test_every_kind_of_bad_field_is_counted_under_its_reason(tmp_path):
    rows = ["0,10,5", "nan,10,5", "x,10,5", "-1,10,5", "1,0,5", "1,10.5,5", "1,10,inf", "1,10,-2", "2,1,1"]
    result = read_trace(write(tmp_path, HEADER + "\n" + "\n".join(rows) + "\n"))
    assert result.rejected_rows == {
        "missing field": [2],
        "non-numeric": [3, 7],
        "negative arrival": [4],
        "prompt_tokens < 1": [5],
        "prompt_tokens not a whole number": [6],
        "output_tokens < 1": [8],
    }
    assert [(r.arrival_s, r.prompt_tokens) for r in result.requests] == [(0.0, 10), (2.0, 1)]


def test_blank_lines_are_skipped_without_renumbering_rows(tmp_path):
    path = write(tmp_path, HEADER + "\n0,10,5\n\n   \n1,0,5\n")
    with pytest.raises(TraceFormatError) as info:
        read_trace(path, strict=True)
    assert (info.value.row, info.value.line) == (4, 5)


def test_line_with_too_many_fields_is_rejected_in_place(tmp_path):
    path = write(tmp_path, HEADER + "\n0,10,5\n1,10,5,7,0,99\n2,0,5\n")
    result = read_trace(path)
    assert result.rejected_rows == {"malformed line": [2], "prompt_tokens < 1": [3]}
    with pytest.raises(TraceFormatError, match=r"row 2 .*'1,10,5,7,0,99'"):
        read_trace(path, strict=True)


def test_short_line_is_a_missing_field(tmp_path):
    result = read_trace(write(tmp_path, HEADER + "\n0,10\n"))
    assert result.rejected_rows == {"missing field": [1]}


def test_optional_priority_and_ignored_request_id(tmp_path):
    path = write(tmp_path, HEADER + ",request_id,priority\n5,10,5,77,2\n3,20,6,78,\n4,30,7,79,x\n")
    result = read_trace(path)
    assert [(r.request_id, r.arrival_s, r.priority) for r in result.requests] == [(0, 0.0, 0), (1, 2.0, 2)]
    assert result.rejected_rows == {"priority not a whole number": [3]}


def test_azure_bad_timestamp_names_the_row_and_column(tmp_path):
    text = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 25:99:00.0,1,1"
    with pytest.raises(TraceFormatError) as info:
        read_trace(write(tmp_path, text), strict=True)
    assert (info.value.row, info.value.field, info.value.reason) == (2, "TIMESTAMP", "bad timestamp")


def test_azure_zero_tokens_error_names_both_column_names(tmp_path):
    text = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,0,44"
    with pytest.raises(TraceFormatError, match=r"ContextTokens \(prompt_tokens\)"):
        read_trace(write(tmp_path, text), strict=True)


def test_malformed_json_line_is_rejected(tmp_path):
    text = '{"timestamp": 0, "input_length": 5, "output_length": 1}\nnot json\n{"timestamp": 9, "input_length": 5}\n'
    result = read_trace(write(tmp_path, text, "trace.jsonl"))
    assert result.rejected_rows == {"malformed line": [2], "missing field": [3]}
    assert len(result.requests) == 1


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        read_trace(tmp_path / "nope.csv")


def test_unknown_header_lists_the_known_ones(tmp_path):
    with pytest.raises(TraceFormatError) as info:
        read_trace(write(tmp_path, "start,input,output\n0,10,5\n"))
    message = str(info.value)
    assert "trace.csv" in message and "start,input,output" in message
    for header in (HEADER, "TIMESTAMP,ContextTokens,GeneratedTokens", "arrived_at,num_prefill_tokens,num_decode_tokens",
                   "timestamp,input_length,output_length", "num_prefill_tokens,num_decode_tokens"):
        assert header in message


def test_a_lengths_only_file_is_not_a_trace_and_says_what_to_do(tmp_path):
    path = write(tmp_path, "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n10,5,15,2.0\n")
    with pytest.raises(TraceFormatError, match="lengths-only file gives lengths to combine with an arrival process"):
        read_trace(path)
    assert read_lengths(path).prompt_tokens.tolist() == [10]


def test_unknown_columns_are_reported_when_lenient_and_an_error_when_strict(tmp_path):
    path = write(tmp_path, HEADER + ",user\n0,10,5,alice\n1,0,5,bob\n")
    result = read_trace(path)
    assert result.ignored_columns == ("user",) and len(result.requests) == 1
    assert "ignored unknown columns: user" in result.summary()
    with pytest.raises(TraceFormatError) as info:
        read_trace(path, strict=True)
    assert (info.value.row, info.value.field, info.value.reason, info.value.value) == (None, "header", "unknown column", "user")
    assert "only the columns of format canonical" in str(info.value)


def test_unknown_json_key_in_strict_mode_names_its_first_row(tmp_path):
    rows = ['{"timestamp": 0, "input_length": 5, "output_length": 1}',
            '{"timestamp": 9, "input_length": 5, "output_length": 2, "user": 7}']
    path = write(tmp_path, "\n".join(rows) + "\n", "trace.jsonl")
    assert read_trace(path).ignored_columns == ("user",)
    with pytest.raises(TraceFormatError) as info:
        read_trace(path, strict=True)
    assert (info.value.row, info.value.field, info.value.reason) == (2, "user", "unknown field")


def test_burstgpt_zero_response_rows_are_counted_and_skipped(tmp_path):
    text = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "5,ChatGPT,472,18,490,Conversation log\n6,ChatGPT,300,0,300,Conversation log\n")
    result = read_trace(write(tmp_path, text))
    assert result.rejected_rows == {"output_tokens < 1": [2]} and len(result.requests) == 1
    with pytest.raises(TraceFormatError, match=r"row 2 .*Response tokens \(output_tokens\)"):
        read_trace(write(tmp_path, text), strict=True)


def test_empty_file_and_wrong_explicit_format_are_header_errors(tmp_path):
    with pytest.raises(TraceFormatError, match="header"):
        read_trace(write(tmp_path, "", "empty.csv"))
    with pytest.raises(TraceFormatError, match="missing TIMESTAMP"):
        read_trace(write(tmp_path, HEADER + "\n0,1,1\n"), format="azure")
    with pytest.raises(ValueError, match="unknown trace format 'csv'"):
        read_trace(write(tmp_path, HEADER + "\n0,1,1\n"), format="csv")


def test_non_utf8_file_is_a_format_error(tmp_path):
    path = tmp_path / "binary.csv"
    path.write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(TraceFormatError, match="UTF-8"):
        read_trace(path)


rows = st.lists(
    st.tuples(st.integers(0, 50).map(lambda t: t / 4), st.integers(1, 9_000), st.integers(1, 2_000)),
    max_size=30,
)


@settings(max_examples=40, deadline=None)
@given(rows)
def test_canonical_rows_come_back_stably_sorted_from_zero(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("prop") / "trace.csv"
    path.write_text(HEADER + "\n" + "".join(f"{a},{p},{o}\n" for a, p, o in rows))
    requests = read_canonical_csv(path)
    expected = sorted(rows, key=lambda row: row[0])  # Python's sort is stable too
    start = expected[0][0] if expected else 0.0
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in requests] == [
        (a - start, p, o) for a, p, o in expected
    ]
    assert [r.request_id for r in requests] == list(range(len(rows)))
