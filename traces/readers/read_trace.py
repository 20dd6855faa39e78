"""Load any supported trace file into validated, arrival-ordered `Request`s."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np

from traces.readers import fields
from traces.readers.formats import TraceFormat, check_header, detect_format, format_by_name
from traces.readers.load_result import TraceLoadResult
from traces.readers.row_problems import RowProblems
from traces.readers.table import RawTable, read_csv_table, read_jsonl_table
from traces.ordering import requests_in_arrival_order


def read_trace(path: str | os.PathLike, format: str = "auto", strict: bool = False) -> TraceLoadResult:
    """Read a trace file, validate every row and return the valid requests in arrival order.

    Formats and time units (`../shared/traces/README.md`; `format=` names):
    canonical `arrival_s,prompt_tokens,output_tokens[,request_id,priority]` (seconds);
    azure `TIMESTAMP,ContextTokens,GeneratedTokens` (absolute, 100 ns);
    vidur `arrived_at,num_prefill_tokens,num_decode_tokens` (float seconds);
    burstgpt `Timestamp,...,Request tokens,Response tokens,...` (whole seconds);
    mooncake JSON lines `timestamp,input_length,output_length,hash_ids` (milliseconds).
    "auto" picks the format from the header. Arrivals are returned in seconds, the earliest at
    0.0, sorted stably (file order among ties); request ids are 0..n-1 in that order, so a
    canonical file's own request_id column is not kept.

    A row is rejected when a field is missing, empty or NaN ("missing field"), not a finite
    number ("non-numeric"), an arrival is negative ("negative arrival") or unparsable ("bad
    timestamp"), a token count is below 1 ("prompt_tokens < 1", "output_tokens < 1"), not whole
    or too large, or the line has too many fields ("malformed line"). A 1-token prompt is valid.

    Args:
        path: the trace file.
        format: "auto" or one of canonical, azure, vidur, burstgpt, mooncake.
        strict: raise on the first bad row instead of skipping and counting bad rows.

    Returns:
        TraceLoadResult; a header-only file gives 0 requests.

    Raises:
        FileNotFoundError: no file at `path` (the message names it).
        TraceFormatError: strict mode and a bad row (naming row, field, value, what is valid);
            or, in any mode, an unknown/incomplete header or a file that is not UTF-8 text.
        ValueError: an unknown `format` name.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(errno.ENOENT, "trace file not found", str(path))
    spec = detect_format(path) if format == "auto" else format_by_name(format)
    check_header(path, spec)
    table = read_jsonl_table(path, list(spec.required), list(spec.list_keys)) if spec.jsonl else read_csv_table(path)
    problems = RowProblems(table.row_numbers, table.line_numbers)
    columns = _parse_columns(spec, table, problems)
    error = problems.first_error(path)
    if strict and error is not None:
        raise error
    valid = problems.valid
    hashes = table.extra.get(spec.list_keys[0]) if spec.list_keys else None
    requests = requests_in_arrival_order(
        columns["arrival_s"][valid],
        columns["prompt_tokens"][valid],
        columns["output_tokens"][valid],
        columns["priority"][valid],
        None if hashes is None else [ids for ids, ok in zip(hashes, valid) if ok],
    )
    return TraceLoadResult(requests, problems.rejected_rows(), path, spec.name)


def _parse_columns(spec: TraceFormat, table: RawTable, problems: RowProblems) -> dict[str, np.ndarray]:
    """Parse the columns in check order (line, arrival, prompt, output, priority)."""
    frame = table.frame
    expected = "a JSON object" if spec.jsonl else "no more fields than the header"
    problems.flag(table.malformed, fields.MALFORMED, "(whole line)", table.line_texts, expected)
    columns = {
        "arrival_s": spec.parse_arrival_s(problems, frame[spec.arrival], spec.arrival),
        "prompt_tokens": fields.parse_tokens(problems, frame[spec.prompt], _label(spec.prompt, "prompt_tokens"), "prompt_tokens"),
        "output_tokens": fields.parse_tokens(problems, frame[spec.output], _label(spec.output, "output_tokens"), "output_tokens"),
    }
    if "priority" in spec.optional and "priority" in frame.columns:
        columns["priority"] = fields.parse_priority(problems, frame["priority"], "priority")
    else:
        columns["priority"] = np.zeros(len(frame), dtype=np.int64)
    return columns


def _label(column: str, canonical: str) -> str:
    # Errors name the column as the user's file spells it, and our name when that differs.
    return column if column == canonical else f"{column} ({canonical})"
