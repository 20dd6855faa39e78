"""Read a JSON-lines trace into a `RawTable`: one row per non-blank line, numbered by file line.

A line that is not a JSON object is a row error ("malformed line") saying why, never an
exception: text that is not JSON, an array or a number, nesting deeper than Python's parser
allows (RecursionError), or an integer of more digits than Python converts (ValueError past
`sys.get_int_max_str_digits()`, 4,300 by default) — that integer is kept as text instead, so a
4,301-digit `input_length` is "too large" for its field like any other huge count; so is a
float that overflows (1e400). A list key (`hash_ids`) holding anything but a list of integers is
a row error of its own ("hash_ids not a list of integers"), kept in `RawTable.bad_lists`.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from traces.readers.table import RawTable, not_utf8

_NOT_AN_OBJECT = "a JSON object, one per line"
_TOO_DEEP = "a JSON object nested less deeply (this line nests deeper than Python's JSON parser can follow)"
# Integers longer than this stay text: under Python's default limit of 4,300 digits for int(str).
_MAX_INT_DIGITS = 4000


def read_jsonl_table(path: Path, columns: list[str], list_keys: list[str]) -> RawTable:
    """Selected keys of a JSON-lines file as text, rows numbered by file line (from 1).

    Args:
        columns: keys read as text (absent or null -> "").
        list_keys: keys holding lists of integers, returned in `extra` as tuples ((), if absent);
            a value that is not such a list is () there and its JSON text in `bad_lists`.

    Raises:
        TraceFormatError: the file is not UTF-8 text.
    """
    texts: dict[str, list[str]] = {key: [] for key in columns}
    extra: dict[str, list] = {key: [] for key in list_keys}
    bad_lists: dict[str, list[str]] = {key: [] for key in list_keys}
    first_row_of_key: dict[str, int | None] = {}
    lines, line_texts, line_problems = [], [], []
    try:
        with path.open(encoding="utf-8-sig") as handle:
            for line_number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                record, problem = json_object(line)
                lines.append(line_number)
                line_texts.append(line.strip() if problem else "")
                line_problems.append(problem)
                for key in record.keys() - first_row_of_key.keys():
                    first_row_of_key[key] = line_number
                for key in columns:
                    value = record.get(key)
                    texts[key].append("" if value is None else str(value))
                for key in list_keys:
                    ids = _int_tuple(record.get(key))
                    # A bad prefix-hash list is a row error of its own reason (`bad_list_reason`),
                    # not silently dropped, nor a "malformed line": the line is a JSON object.
                    bad_lists[key].append("" if ids is not None else _json_text(record[key], line))
                    extra[key].append(ids or ())
    except UnicodeDecodeError as error:
        raise not_utf8(path, error) from None
    line_numbers = np.asarray(lines, dtype=np.int64)
    frame = pd.DataFrame(texts, dtype=str)
    return RawTable(frame, line_numbers, line_numbers, np.asarray(line_texts, dtype=object),
                    np.asarray(line_problems, dtype=object), {}, extra, first_row_of_key,
                    bad_lists={key: np.asarray(texts, dtype=object) for key, texts in bad_lists.items()})


def json_keys(line: str) -> list[str]:
    """Keys of the JSON object on `line`; [] when it is not one."""
    return list(json_object(line)[0])


def json_object(line: str) -> tuple[dict, str]:
    """The JSON object on `line` and "", or {} and what a valid line would have been."""
    try:
        record = json.loads(line, parse_float=_float_or_text)
    except RecursionError:
        return {}, _TOO_DEEP
    except json.JSONDecodeError:
        return {}, _NOT_AN_OBJECT
    except ValueError:
        # int(str) refused a huge integer: parse again keeping such integers as their text.
        try:
            record = json.loads(line, parse_float=_float_or_text, parse_int=_int_or_text)
        except RecursionError:
            return {}, _TOO_DEEP
    return (record, "") if isinstance(record, dict) else ({}, _NOT_AN_OBJECT)


def _float_or_text(text: str) -> float | str:
    # 1e400 would become inf, reported as the text "inf"; kept as written it is "too large".
    value = float(text)
    return value if math.isfinite(value) else text


def _int_or_text(text: str) -> int | str:
    return int(text) if len(text) <= _MAX_INT_DIGITS else text


def _int_tuple(value: object) -> tuple[int, ...] | None:
    # () when absent or null; None when not a list of integers (the row is then rejected, naming the key).
    # set(map(type, ...)) runs in C (a generator of isinstance calls was half the load time); bools are not ints.
    if value is None:
        return ()
    if isinstance(value, list) and (not value or set(map(type, value)) == {int}):
        return tuple(value)
    return None


BAD_LIST_EXPECTED = "a list of integers (prefix-block hashes), or absent"


def bad_list_reason(key: str) -> str:
    """The reason a row whose `key` is not a list of integers is rejected under ("hash_ids not a
    list of integers"), in `TraceLoadResult.rejected_rows` and in the strict-mode error."""
    return f"{key} not a list of integers"


def _json_text(value: object, line: str) -> str:
    # The value as the file wrote it, for the message; the whole line if it nests too deep to write back.
    try:
        return json.dumps(value, ensure_ascii=False)
    except (RecursionError, ValueError):
        return line.strip()
