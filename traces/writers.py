"""Write requests as a canonical trace: CSV `arrival_s,prompt_tokens,output_tokens[,priority]`, JSON lines or Parquet."""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import pandas as pd

from traces.request import Request

# File suffix -> layout. All three are read back by `read_trace` (Parquet as `canonical_parquet`),
# Parquet (pyarrow) with the same columns and dtypes (float64 seconds, int64 tokens).
LAYOUTS = {".csv": "csv", ".jsonl": "jsonl", ".parquet": "parquet"}


def layout_of(path: str | os.PathLike) -> str:
    """The layout a canonical trace at `path` is written in, from its suffix.

    Raises:
        ValueError: a suffix other than .csv, .jsonl or .parquet (named, with the valid ones).
    """
    suffix = Path(path).suffix.lower()
    if suffix not in LAYOUTS:
        raise ValueError(f"{path}: cannot tell the layout from the suffix {suffix or '(none)'!r}; "
                         f"use one of {', '.join(LAYOUTS)}")
    return LAYOUTS[suffix]


def write_canonical(requests: Sequence[Request], path: str | os.PathLike, layout: str | None = None) -> Path:
    """Write `requests` as a canonical trace at `path`; CSV and JSON lines read back identically.

    `layout` ("csv", "jsonl", "parquet") defaults to the suffix's (`layout_of`). JSON lines hold
    one object per request with keys `arrival_s, prompt_tokens, output_tokens` (plus `priority`
    when any is non-zero, `prefix_hash_ids` when any request has them, and `prefix_block_tokens`,
    the tokens per hash block, where it is not 512); CSV and Parquet the same columns except the
    hashes (and their block size). Arrivals are in seconds, written with Python's shortest
    round-trip float repr (CSV, JSON) or as float64 (Parquet), so reading back gives the same
    floats. The file is written in place: callers that must never leave a partial file write a
    temporary one and rename it (`experiments.outputs.write_atomic`).

    Returns:
        the path written.

    Raises:
        ValueError: an unknown layout or suffix.
        OSError: the file cannot be written.
    """
    path = Path(path)
    layout = layout or layout_of(path)
    if layout == "parquet":
        canonical_frame(requests).to_parquet(path, index=False)
        return path
    with path.open("w", encoding="utf-8", newline="") as handle:
        write_canonical_text(requests, handle, layout)
    return path


def write_canonical_text(requests: Sequence[Request], stream: TextIO, layout: str = "csv") -> None:
    """Write `requests` to a text stream (standard output) as canonical CSV or JSON lines.

    Raises:
        ValueError: a layout other than "csv" or "jsonl" (Parquet is binary: write a file).
    """
    if layout == "jsonl":
        columns = _columns(requests)
        with_hashes = any(request.prefix_hash_ids for request in requests)
        for request in requests:
            record = {name: getattr(request, name) for name in columns}
            if with_hashes:
                record["prefix_hash_ids"] = list(request.prefix_hash_ids)
                if request.prefix_block_tokens != 512:  # read back as 512 (Mooncake's) when absent
                    record["prefix_block_tokens"] = request.prefix_block_tokens
            stream.write(json.dumps(record) + "\n")
    elif layout == "csv":
        canonical_frame(requests).to_csv(stream, index=False, lineterminator="\n")
    else:
        raise ValueError(f"unknown text layout {layout!r}; valid: csv, jsonl")


def canonical_frame(requests: Sequence[Request]) -> pd.DataFrame:
    """The canonical columns as a frame: arrival_s (float64), prompt_tokens, output_tokens[, priority] (int64)."""
    columns = _columns(requests)
    frame = pd.DataFrame({name: [getattr(request, name) for request in requests] for name in columns}, columns=columns)
    return frame.astype({"arrival_s": "float64", **{name: "int64" for name in columns[1:]}})


def _columns(requests: Sequence[Request]) -> list[str]:
    with_priority = any(request.priority for request in requests)
    return ["arrival_s", "prompt_tokens", "output_tokens"] + (["priority"] if with_priority else [])
