"""The trace file formats this package reads: their columns, time units and sources.

Each format is one `TraceFormat` value; `detect_format` picks one from a file's header. Sources
and units are those of `../shared/traces/README.md`. Lengths-only formats (the `*_stats_*.csv`
files of Vidur, Sarathi-Serve and Etalon) have no arrival column: they give lengths to combine
with an arrival process.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from traces.errors import TraceFormatError
from traces.readers import fields
from traces.readers.row_problems import RowProblems
from traces.readers.jsonl_table import json_keys
from traces.readers.parquet_table import parquet_columns
from traces.readers.table import check_regular_file, csv_header, first_line, is_parquet

# (problems, arrival texts, field) -> arrival in seconds (any origin), shape (n,)
ArrivalParser = Callable[[RowProblems, pd.Series, str], np.ndarray]


def _offsets(units_per_s: float, unit: str) -> ArrivalParser:
    return lambda problems, texts, field: fields.parse_offsets_s(problems, texts, field, units_per_s, unit)


@dataclass(frozen=True)
class TraceFormat:
    """How one trace format names its columns and measures time.

    Attributes:
        name: the `format=` value of `read_trace`.
        arrival, prompt, output: the file's names for arrival time, prompt and output tokens;
            arrival is None for a lengths-only format.
        time_unit: the unit of `arrival`, in words (stated in every reader's docstring).
        parse_arrival_s: turns the arrival column into seconds (None without arrivals).
        source: where the format is defined.
        optional: further columns read when present (canonical `priority`).
        jsonl: True for JSON-lines files (one object per line, no header).
        parquet: True for Parquet files (columns in the schema; `traces.readers.parquet_table`).
        list_keys: JSON keys holding integer lists (Mooncake `hash_ids`).
        ignored: columns the format defines but the simulator does not use (BurstGPT `Model`);
            any other column is unknown: an error in strict mode, reported and ignored otherwise.
    """

    name: str
    arrival: str | None
    prompt: str
    output: str
    time_unit: str
    parse_arrival_s: ArrivalParser | None
    source: str
    optional: tuple[str, ...] = ()
    jsonl: bool = False
    parquet: bool = False
    list_keys: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()

    @property
    def required(self) -> tuple[str, ...]:
        """The columns (or JSON keys) a file must have, in arrival, prompt, output order."""
        return tuple(name for name in (self.arrival, self.prompt, self.output) if name is not None)

    @property
    def known(self) -> frozenset[str]:
        """Every column the format defines: required, optional, list and ignored ones."""
        return frozenset((*self.required, *self.optional, *self.list_keys, *self.ignored))

    @property
    def has_arrivals(self) -> bool:
        """False for lengths-only formats."""
        return self.arrival is not None

    def describe(self) -> str:
        """One line for error messages: name, header and time unit."""
        header = ",".join(self.required) + "".join(f"[,{name}]" for name in (*self.optional, *self.list_keys, *self.ignored))
        kind = "JSON lines with keys " if self.jsonl else "Parquet with columns " if self.parquet else ""
        return f"{self.name}: {kind}{header} ({self.time_unit})"


FORMATS: dict[str, TraceFormat] = {
    spec.name: spec
    for spec in (
        TraceFormat(
            "canonical", "arrival_s", "prompt_tokens", "output_tokens", "seconds",
            _offsets(1.0, "seconds"), "sarathi-sim DESIGN.md, Files",
            optional=("request_id", "priority"),
        ),
        TraceFormat(
            "canonical_jsonl", "arrival_s", "prompt_tokens", "output_tokens", "seconds",
            _offsets(1.0, "seconds"), "sarathi-sim DESIGN.md, Files (JSON lines)",
            optional=("request_id", "priority", "prefix_block_tokens"), jsonl=True, list_keys=("prefix_hash_ids",),
        ),
        TraceFormat(
            "canonical_parquet", "arrival_s", "prompt_tokens", "output_tokens", "seconds",
            _offsets(1.0, "seconds"), "sarathi-sim: the canonical columns as Parquet (`trace convert --to x.parquet`)",
            optional=("request_id", "priority"), parquet=True,
        ),
        TraceFormat(
            "azure", "TIMESTAMP", "ContextTokens", "GeneratedTokens",
            "absolute time YYYY-MM-DD HH:MM:SS.fffffff, 100 ns resolution",
            fields.parse_azure_timestamps_s,
            "Azure/AzurePublicDataset data/AzureLLMInferenceTrace_{code,conv}.csv (Splitwise, ISCA'24); "
            "also the 2024 week-long files (ISO 8601 with a UTC offset) and the 2025 multimodal one",
            ignored=("NumImages",),
        ),
        TraceFormat(
            "vidur", "arrived_at", "num_prefill_tokens", "num_decode_tokens",
            "float seconds from the first request", _offsets(1.0, "seconds"),
            "microsoft/vidur data/processed_traces/splitwise_{code,conv}.csv",
        ),
        TraceFormat(
            "burstgpt", "Timestamp", "Request tokens", "Response tokens", "whole seconds",
            _offsets(1.0, "seconds"), "HPMLL/BurstGPT README (BurstGPT_*.csv)",
            ignored=("Model", "Total tokens", "Log Type"),
        ),
        TraceFormat(
            "mooncake", "timestamp", "input_length", "output_length", "integer milliseconds from trace start",
            _offsets(1000.0, "milliseconds"), "kvcache-ai/Mooncake FAST25-release/traces/*.jsonl",
            jsonl=True, list_keys=("hash_ids",),
        ),
        TraceFormat(
            "lengths", None, "num_prefill_tokens", "num_decode_tokens", "no arrivals (lengths only)", None,
            "microsoft/vidur, microsoft/sarathi-serve, project-etalon/etalon data/processed_traces/*_stats_*.csv",
            ignored=("num_total_tokens", "pd_ratio"),
        ),
        TraceFormat(
            "canonical_lengths", None, "prompt_tokens", "output_tokens", "no arrivals (lengths only)", None,
            "sarathi-sim: the canonical columns without arrival_s", optional=("request_id", "priority"),
        ),
    )
}


def known_formats() -> str:
    """All formats, one `describe()` per line, for error messages."""
    return "; ".join(spec.describe() for spec in FORMATS.values())


def format_by_name(name: str) -> TraceFormat:
    """The format called `name`; ValueError listing the known names otherwise."""
    if name not in FORMATS:
        raise ValueError(f"unknown trace format {name!r}; known: auto, {', '.join(FORMATS)}")
    return FORMATS[name]


def detect_format(path: Path) -> TraceFormat:
    """The format whose required columns all appear in the file's header (or first JSON line).

    When several match, the one with the most required columns wins (a vidur trace
    `arrived_at,num_prefill_tokens,...` is a trace, not a lengths-only file).

    A Parquet file (its magic bytes, PAR1) is canonical_parquet.

    Raises:
        FileNotFoundError, IsADirectoryError, TraceFormatError: not a regular file
            (`table.check_regular_file`: a FIFO or device is never opened).
        TraceFormatError: empty file, or a header that matches no known format (the message
            lists every known header).
    """
    check_regular_file(path)
    if is_parquet(path):
        return FORMATS["canonical_parquet"]
    line = first_line(path) or _first_text_line(path)  # JSON lines may start with blank ones
    if line.lstrip().startswith("{"):
        keys = set(json_keys(line))
        candidates = [spec for spec in FORMATS.values() if spec.jsonl]
    else:
        keys = set(csv_header(path))
        candidates = [spec for spec in FORMATS.values() if not spec.jsonl and not spec.parquet]
    matches = [spec for spec in candidates if set(spec.required) <= keys]
    if matches:
        return max(matches, key=lambda spec: len(spec.required))
    raise TraceFormatError(
        path, field="header", value=line, expected=f"a header of a known trace format: {known_formats()}"
    )


def _first_text_line(path: Path) -> str:
    """The first line that is not blank, stripped ("" when there is none); read line by line."""
    with path.open(encoding="utf-8-sig", errors="replace") as handle:
        return next((line.strip() for line in handle if line.strip()), "")


def check_header(path: Path, spec: TraceFormat) -> None:
    """Raise TraceFormatError naming the missing columns when a CSV or Parquet file lacks `spec`'s
    required ones, or when a Parquet format is asked of a text file."""
    if spec.jsonl:
        return  # JSON lines name their keys per line; a missing key is a missing field of that row
    if spec.parquet and not is_parquet(path):
        raise TraceFormatError(path, field="header", value=first_line(path),
                               expected=f"a Parquet file for format {spec.name} (one begins with PAR1); use format "
                               "auto for a CSV or JSON-lines trace")
    header = parquet_columns(path) if spec.parquet else csv_header(path)
    missing = [name for name in spec.required if name not in header]
    if missing:
        raise TraceFormatError(
            path, field="header", value=",".join(header) if spec.parquet else first_line(path),
            expected=f"the {spec.name} columns {','.join(spec.required)} (missing {','.join(missing)})",
        )
