"""Lenient loading says per rejected row the same reason strict mode stops at (grouped by reason).

Breaker pass D, d15: a Mooncake row whose `hash_ids` held strings or floats was counted only as
"malformed line" by the lenient loader, while strict mode named `hash_ids` and what is valid.
"""
from __future__ import annotations

import json

import pytest

from traces import TraceFormatError, read_trace

ROW = {"timestamp": 0, "input_length": 1024, "output_length": 10}


def _mooncake(tmp_path, hash_ids: list) -> object:
    lines = [json.dumps({**ROW, "timestamp": 10 * i, "hash_ids": ids}) for i, ids in enumerate(hash_ids)]
    path = tmp_path / "mooncake.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_bad_hash_ids_are_rejected_under_their_own_reason_in_lenient_mode(tmp_path):
    # Rows 3 (strings), 7 (a float), 10 (a string) are bad; negatives, huge ints, [] and null are fine.
    path = _mooncake(tmp_path, [[1, 2], [1, 2, 3], ["a", "b"], [1, -2], [], None, [1.5, 2], [1, 1], [10**30, 2], "1,2"])
    (tmp_path / "broken.jsonl").write_text(path.read_text() + "not json\n")
    loaded = read_trace(tmp_path / "broken.jsonl", format="mooncake")
    assert loaded.rejected_rows == {"hash_ids not a list of integers": [3, 7, 10], "malformed line": [11]}
    assert loaded.summary().splitlines()[2:] == ["  rejected 3 x hash_ids not a list of integers: rows 3, 7, 10",
                                                 "  rejected 1 x malformed line: rows 11"]
    assert [r.prefix_hash_ids for r in loaded.requests] == [(1, 2), (1, 2, 3), (1, -2), (), (), (1, 1), (10**30, 2)]
    with pytest.raises(TraceFormatError) as info:
        read_trace(path, format="mooncake", strict=True)
    assert str(info.value) == (f"{path}: row 3 (file line 3): field 'hash_ids': hash_ids not a list of integers: "
                               "got '[\"a\", \"b\"]'; expected a list of integers (prefix-block hashes), or absent")
    assert (info.value.row, info.value.field, info.value.reason) == (3, "hash_ids", "hash_ids not a list of integers")


def test_a_bad_prefix_hash_ids_of_a_canonical_jsonl_trace_names_that_key(tmp_path):
    path = tmp_path / "trace.jsonl"
    rows = [{"arrival_s": 0.0, "prompt_tokens": 10, "output_tokens": 5, "prefix_hash_ids": [3, 4]},
            {"arrival_s": 1.0, "prompt_tokens": 10, "output_tokens": 5, "prefix_hash_ids": {"a": 1}},
            # The first failed check counts: the list before the bad prompt length.
            {"arrival_s": 2.0, "prompt_tokens": 0, "output_tokens": 5, "prefix_hash_ids": [True]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    loaded = read_trace(path)
    assert loaded.rejected_rows == {"prefix_hash_ids not a list of integers": [2, 3]}
    assert [r.prefix_hash_ids for r in loaded.requests] == [(3, 4)]
    with pytest.raises(TraceFormatError, match=r"row 2 \(file line 2\): field 'prefix_hash_ids': prefix_hash_ids "
                                               r"not a list of integers: got '\{\"a\": 1\}'"):
        read_trace(path, strict=True)
