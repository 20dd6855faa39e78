"""Load any supported trace file into validated, arrival-ordered `Request`s."""
from __future__ import annotations

import os

from traces.ordering import requests_in_arrival_order
from traces.readers.load_result import TraceLoadResult
from traces.readers.parse_file import RowFilter, parse_file
from traces.readers.read_cache import read_through


def read_trace(
    path: str | os.PathLike, format: str = "auto", strict: bool = False, where: RowFilter | None = None
) -> TraceLoadResult:
    """Read a trace file, validate every row and return the valid requests in arrival order.

    Formats and time units (`../shared/traces/README.md`; `format=` names):
    canonical `arrival_s,prompt_tokens,output_tokens[,request_id,priority]` (seconds);
    canonical_jsonl, the same keys as JSON lines plus `prefix_hash_ids` (seconds);
    canonical_parquet, the canonical columns as Parquet (detected by its PAR1 magic bytes);
    azure `TIMESTAMP,ContextTokens,GeneratedTokens` (absolute, 100 ns; the 2024 week-long ISO
    8601 layout too); vidur `arrived_at,num_prefill_tokens,num_decode_tokens` (float seconds);
    burstgpt `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type` (whole
    seconds); mooncake JSON lines `timestamp,input_length,output_length,hash_ids` (milliseconds).
    "auto" picks the format from the header. Arrivals are returned in seconds, the earliest at
    0.0 whatever the file's origin (absolute time, epoch seconds or relative), sorted stably
    (file order among ties); request ids are 0..n-1 in that order, so a canonical file's own
    request_id column is not kept.

    A row is rejected when a field is missing, empty or NaN ("missing field"), not a finite
    number ("non-numeric"), an arrival is negative ("negative arrival") or unparsable ("bad
    timestamp"), a token count is below 1 ("prompt_tokens < 1", "output_tokens < 1": BurstGPT's
    failed requests with `Response tokens` 0 land here), not whole or too large, the line
    has too many fields or is not a JSON object ("malformed line"), or a CSV field has a quote
    that does not enclose it whole ("bad quoting"; `traces.readers.csv_table`). Arrivals are
    bounded (`traces.time_bounds`): above 1e10 s as read ("arrival too large"), more than 1e9 s
    from the lower median of the others ("arrival far from the others"), or a well-formed Azure
    time outside 1677-2262 ("timestamp out of range"). Every non-blank data line is loaded,
    rejected or filtered. A 1-token prompt is valid. Columns the format does not define are an
    error in strict mode and listed in `ignored_columns` otherwise.

    Args:
        path: the trace file.
        format: "auto" or a name of `traces.readers.FORMATS` with arrivals.
        strict: raise on the first unknown column or bad row instead of skipping and counting.
        where: keep only rows whose column holds one of the values, e.g. BurstGPT
            `{"Model": ["ChatGPT"], "Log Type": ["Conversation log"]}`; the others are counted
            in `filtered_rows` (not validated, not rejected).

    Returns:
        TraceLoadResult; a header-only file gives 0 requests.

    Raises:
        FileNotFoundError: no file at `path` (the message names it); IsADirectoryError: a folder.
        TraceFormatError: not a regular file (a FIFO, a device: never opened).
        TraceFormatError: strict mode and a bad row (naming row, field, value, what is valid) or
            an unknown column; in any mode an unknown/incomplete header, a lengths-only file, a
            `where` column the file lacks, or a file that is not UTF-8 text.
        ValueError: an unknown `format` name.
    """
    # The same file read again (a sweep's points, a search's trials): a copy of the last result
    # when its bytes are the same (traces/readers/read_cache.py).
    return read_through(path, _options_key(format, strict, where), lambda: _read_trace(path, format, strict, where))


def _options_key(format: str, strict: bool, where: RowFilter | None) -> tuple | None:
    """The reader's options as a key of `read_through`; None (not kept) for a filter whose values
    are not plain lists or tuples of strings (a generator would be used up by the key)."""
    if where is None:
        return format, bool(strict), None
    if not all(isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v) for v in where.values()):
        return None
    return format, bool(strict), tuple((str(k), tuple(v)) for k, v in where.items())


def _read_trace(path, format: str, strict: bool, where: RowFilter | None) -> TraceLoadResult:
    parsed = parse_file(path, format, strict, where, need_arrivals=True)
    columns = parsed.columns
    requests = requests_in_arrival_order(
        columns["arrival_s"], columns["prompt_tokens"], columns["output_tokens"], columns["priority"],
        parsed.prefix_hash_ids, columns.get("prefix_block_tokens"),
    )
    return TraceLoadResult(requests=requests, **parsed.row_account())
