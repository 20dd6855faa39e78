"""CSV quoting and line splitting: every physical data line is loaded, rejected or filtered, never lost.

Issue 14, item 2: a stray `"` made the CSV parser read every later line as one field (rows
silently dropped, even with strict), and a field over 131,072 characters made its line vanish.
Right values are worked by hand from the files written here; rows are numbered from 1 for the
first data row (file line 2).
"""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traces import TraceFormatError, read_lengths, read_trace

HEADER = "arrival_s,prompt_tokens,output_tokens"
BURSTGPT = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"


def write(tmp_path, text, name="trace.csv"):
    path = tmp_path / name
    path.write_bytes(text.encode())
    return path


def test_a_stray_quote_rejects_its_row_and_keeps_every_later_one(tmp_path):
    path = write(tmp_path, HEADER + '\n0.0,10,5\n1.0,"10,5\n2.0,20,6\n3.0,30,7\n')
    result = read_trace(path)
    assert result.rejected_rows == {"bad quoting": [2]}
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in result.requests] == [
        (0.0, 10, 5), (2.0, 20, 6), (3.0, 30, 7)]
    assert "rejected 1 x bad quoting: rows 2" in result.summary()


def test_a_stray_quote_in_strict_mode_names_file_row_and_field(tmp_path):
    path = write(tmp_path, HEADER + '\n0.0,10,5\n1.0,"10,5\n2.0,20,6\n')
    with pytest.raises(TraceFormatError) as info:
        read_trace(path, strict=True)
    error = info.value
    assert (error.row, error.line, error.field, error.reason, error.value) == (2, 3, "prompt_tokens", "bad quoting", '"10')
    assert str(path) in str(error) and "wholly inside a pair of them" in str(error)


@pytest.mark.parametrize("field", ['1"0', '"10"5', '10"', '"1"0"', '"'])
def test_any_quote_that_does_not_enclose_the_whole_field_is_bad_quoting(tmp_path, field):
    # '"10"5' is the dangerous one: a CSV parser reads it as 105 without a word.
    result = read_trace(write(tmp_path, HEADER + f"\n0,{field},5\n1,7,5\n"))
    assert result.rejected_rows == {"bad quoting": [1]}
    assert [r.prompt_tokens for r in result.requests] == [7]


def test_fields_and_header_wholly_in_quotes_are_read_as_their_text(tmp_path):
    text = '"arrival_s","prompt_tokens","output_tokens"\n"0.5","10","5"\n 1.5 , "20" ,6\n'
    result = read_trace(write(tmp_path, text), strict=True)
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in result.requests] == [(0.0, 10, 5), (1.0, 20, 6)]


def test_quoted_burstgpt_labels_filter_as_their_text_and_a_stray_quote_is_rejected_not_filtered(tmp_path):
    text = (BURSTGPT + '\n5,"ChatGPT",472,18,490,"Conversation log"\n6,"GPT-4",300,20,320,"Conversation log"\n'
            '7,"ChatGPT,100,10,110,Conversation log\n8,ChatGPT,"""x""",10,110,Conversation log\n')
    result = read_trace(write(tmp_path, text), where={"Model": ["ChatGPT"]})
    assert [r.prompt_tokens for r in result.requests] == [472]
    assert result.filtered_rows == {"Model not in ['ChatGPT']": [2]}
    # Row 3's Model has a stray quote: its value is unknown, so it is rejected, not filtered out.
    # Row 4's '"""x"""' is a quoted field holding '"x"' (inner quotes doubled): non-numeric tokens.
    assert result.rejected_rows == {"bad quoting": [3], "non-numeric": [4]}


def test_a_comma_inside_quotes_is_a_line_with_too_many_fields(tmp_path):
    path = write(tmp_path, HEADER + '\n0,"1,000",5\n1,7,5\n')
    result = read_trace(path)
    assert result.rejected_rows == {"malformed line": [1]} and len(result.requests) == 1
    with pytest.raises(TraceFormatError, match=r"row 1 .*'0,\"1,000\",5'.*no more fields than the header's 3"):
        read_trace(path, strict=True)


def test_too_many_fields_on_the_first_data_line_is_rejected_not_truncated(tmp_path):
    # pandas only warned here and dropped the extra field, loading 0,10,5 from '0,10,5,99'.
    result = read_trace(write(tmp_path, HEADER + "\n0,10,5,99\n1,20,6\n"))
    assert result.rejected_rows == {"malformed line": [1]}
    assert [(r.arrival_s, r.prompt_tokens) for r in result.requests] == [(0.0, 20)]


@pytest.mark.parametrize("with_malformed_line", [False, True])
def test_an_over_long_field_is_a_counted_row_error_not_a_lost_line(tmp_path, with_malformed_line):
    # 200,000 characters: over Python csv's 131,072 limit, which made the line vanish. The
    # malformed line sends the file through the line-by-line path too.
    long_digits, long_text = "1" + "0" * 200_000, "x" * 200_000
    lines = [f"0,{long_digits},5", f"1,{long_text},5", "2,30,7"] + (["3,1,1,1"] if with_malformed_line else [])
    path = write(tmp_path, HEADER + "\n" + "\n".join(lines) + "\n")
    result = read_trace(path)
    expected = {"prompt_tokens too large": [1], "non-numeric": [2]}
    assert result.rejected_rows == (expected | {"malformed line": [4]} if with_malformed_line else expected)
    assert [r.prompt_tokens for r in result.requests] == [30]
    with pytest.raises(TraceFormatError) as info:
        read_trace(path, strict=True)
    message = str(info.value)
    assert info.value.row == 1 and "prompt_tokens too large" in message
    assert "(200,001 characters)" in message and len(message) < 400  # the value is cut, not printed whole


def test_a_line_of_bare_commas_is_a_missing_field_but_a_line_of_spaces_is_blank(tmp_path):
    result = read_trace(write(tmp_path, HEADER + "\n0,10,5\n,,\n   \n\n2,20,6\n"))
    assert result.rejected_rows == {"missing field": [2]}
    assert len(result.requests) == 2
    with pytest.raises(TraceFormatError) as info:
        read_trace(write(tmp_path, HEADER + "\n0,10,5\n   \n1,0,5\n"), strict=True)
    assert (info.value.row, info.value.line) == (3, 4)  # the blank row 2 keeps its number


@pytest.mark.parametrize("end", ["\r\n", "\r"])
def test_windows_and_old_mac_line_ends_number_rows_as_lines(tmp_path, end):
    path = write(tmp_path, end.join([HEADER, "0,10,5", '1,"10,5', "2,20,6"]) + end)
    result = read_trace(path)
    assert result.rejected_rows == {"bad quoting": [2]}
    assert [r.prompt_tokens for r in result.requests] == [10, 20]


def test_a_header_naming_a_column_twice_is_an_error(tmp_path):
    with pytest.raises(TraceFormatError, match="column named twice: got 'prompt_tokens'"):
        read_trace(write(tmp_path, "arrival_s,prompt_tokens,output_tokens,prompt_tokens\n0,1,1,2\n"))


def test_a_trailing_comma_is_an_unnamed_column_reported_by_its_number(tmp_path):
    result = read_trace(write(tmp_path, HEADER + ",,\n0,10,5,,\n1,20,6,,\n"))
    assert len(result.requests) == 2
    assert result.ignored_columns == ("(unnamed column 4)", "(unnamed column 5)")


def test_lengths_files_are_split_the_same_way(tmp_path):
    text = "num_prefill_tokens,num_decode_tokens\n10,5\n\"20,6\n30,7\n"
    result = read_lengths(write(tmp_path, text))
    assert result.prompt_tokens.tolist() == [10, 30] and result.rejected_rows == {"bad quoting": [2]}


# Line fragments a hand-edited or corrupted CSV can hold: good rows, quotes everywhere, too many
# or too few fields, blank and space-only lines, huge numbers, bare commas.
FRAGMENTS = ["0,10,5", "1.5,20,6", '"2","30","7"', '3,"40,8', '4,5"0,9', '"5,60",10', "6,70,11,12", "7,80",
             "", "   ", ",,", "8,1" + "0" * 5000 + ",1", "9,x,1", '"', '10,"",1', "11,1,1 "]


def data_lines(text: str) -> int:
    """Non-blank physical lines after the header, counted independently of the reader."""
    lines = re.split(r"\r\n|\r|\n", text)
    if lines and lines[-1] == "":
        lines.pop()
    return sum(1 for line in lines[1:] if line.strip())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=25), st.sampled_from(["\n", "\r\n"]), st.booleans())
def test_loaded_plus_rejected_rows_always_add_up_to_the_data_lines(tmp_path_factory, lines, end, final_end):
    text = end.join([HEADER, *lines]) + (end if final_end else "")
    path = tmp_path_factory.mktemp("lines") / "trace.csv"
    path.write_bytes(text.encode())
    result = read_trace(path)
    assert len(result.requests) + result.num_rejected == data_lines(text)
    rows = sorted(row for numbers in result.rejected_rows.values() for row in numbers)
    assert len(rows) == len(set(rows))  # each rejected row under one reason only
    try:
        strict = read_trace(path, strict=True)
    except TraceFormatError as error:
        assert error.row == rows[0]  # strict stops at the first row lenient mode rejects
    else:
        assert result.num_rejected == 0 and len(strict.requests) == len(result.requests)
