"""`read_trace` keeps the last file's result by the digest of its bytes (traces/readers/read_cache.py):
read again it is a copy, never stale (a changed file is read afresh), never shared with a caller."""
from __future__ import annotations

import importlib
import os

import pytest

from traces import TraceFormatError, read_trace
from traces.readers import read_cache

read_trace_module = importlib.import_module("traces.readers.read_trace")  # the package exports its function by that name


@pytest.fixture(autouse=True)
def fresh_cache():
    read_cache.clear()
    yield
    read_cache.clear()


def _write(path, rows: str) -> None:
    path.write_text("arrival_s,prompt_tokens,output_tokens\n" + rows)


def _counting_parse(monkeypatch) -> list:
    calls = []
    parse = read_trace_module.parse_file

    def counted(*args, **kwargs):
        calls.append(args[0])
        return parse(*args, **kwargs)
    monkeypatch.setattr(read_trace_module, "parse_file", counted)
    return calls


def _rows(result) -> list[tuple]:
    return [(r.request_id, r.arrival_s, r.prompt_tokens, r.output_tokens) for r in result.requests]


def test_same_bytes_read_once_and_a_changed_file_read_again(tmp_path, monkeypatch):
    path = tmp_path / "t.csv"
    _write(path, "2.0,5,3\n0.5,7,1\nx,1,1\n")
    calls = _counting_parse(monkeypatch)
    first = read_trace(path)
    again = read_trace(path)
    assert len(calls) == 1  # the second read parsed nothing
    assert _rows(first) == _rows(again) == [(0, 0.0, 7, 1), (1, 1.5, 5, 3)]
    assert again.rejected_rows == first.rejected_rows == {"non-numeric": [3]}
    assert again.requests is not first.requests and again.rejected_rows is not first.rejected_rows
    stat = path.stat()
    _write(path, "2.0,5,3\n0.5,7,2\nx,1,1\n")  # one byte changed, same size and times
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    changed = read_trace(path)
    assert len(calls) == 2 and _rows(changed)[0] == (0, 0.0, 7, 2)
    assert read_trace(path, strict=False) is not None and len(calls) == 2  # the options are the same
    with pytest.raises(TraceFormatError, match="non-numeric"):
        read_trace(path, strict=True)  # other options: read, and its error raised (never kept)
    assert len(calls) == 3


def test_a_caller_changing_its_result_changes_nothing_kept(tmp_path):
    path = tmp_path / "t.csv"
    _write(path, "0,5,3\n1,7,1\n-1,2,2\n")
    first = read_trace(path)
    first.requests.clear()
    first.rejected_rows["negative arrival"].append(99)
    again = read_trace(path)
    assert _rows(again) == [(0, 0.0, 5, 3), (1, 1.0, 7, 1)]
    assert again.rejected_rows == {"negative arrival": [3]}


def test_not_kept_when_the_file_changes_during_the_read_or_is_too_big(tmp_path, monkeypatch):
    path = tmp_path / "t.csv"
    _write(path, "0,5,3\n1,7,1\n")
    calls = _counting_parse(monkeypatch)
    parse = read_trace_module.parse_file

    def parse_then_change(*args, **kwargs):
        parsed = parse(*args, **kwargs)
        _write(path, "0,5,3\n1,7,9\n")  # written while it was read
        return parsed
    monkeypatch.setattr(read_trace_module, "parse_file", parse_then_change)
    assert _rows(read_trace(path))[1] == (1, 1.0, 7, 1)
    monkeypatch.setattr(read_trace_module, "parse_file", parse)
    assert _rows(read_trace(path))[1] == (1, 1.0, 7, 9)  # read afresh: the first was not kept
    monkeypatch.setattr(read_cache, "MAX_CACHED_REQUESTS", 1)
    read_cache.clear()
    calls = _counting_parse(monkeypatch)
    read_trace(path)
    read_trace(path)
    assert len(calls) == 2  # two valid rows, over the bound: never kept


def test_the_filter_is_part_of_the_key(tmp_path, monkeypatch):
    path = tmp_path / "b.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                    "0,ChatGPT,5,3,8,Conversation log\n1,GPT-4,7,1,8,Conversation log\n2,ChatGPT,2,2,4,API log\n")
    calls = _counting_parse(monkeypatch)
    chat = read_trace(path, where={"Model": ["ChatGPT"]})
    gpt4 = read_trace(path, where={"Model": ["GPT-4"]})
    assert [r.prompt_tokens for r in chat.requests] == [5, 2] and [r.prompt_tokens for r in gpt4.requests] == [7]
    assert read_trace(path, where={"Model": ["GPT-4"]}).filtered_rows == {"Model not in ['GPT-4']": [1, 3]}
    assert len(calls) == 2
    read_trace(path, where={"Model": (m for m in ["GPT-4"])})  # a generator: not a key, read as given
    assert len(calls) == 3
