"""Trace-file readers: formats, validation, and the `TraceLoadResult` they report."""
from traces.readers.by_format import (
    read_azure_csv,
    read_burstgpt_csv,
    read_canonical_csv,
    read_mooncake_jsonl,
    read_vidur_csv,
)
from traces.readers.formats import FORMATS, TraceFormat
from traces.readers.load_result import LengthsLoadResult, TraceLoadResult
from traces.readers.read_lengths import read_lengths
from traces.readers.read_trace import read_trace

__all__ = [
    "FORMATS",
    "LengthsLoadResult",
    "TraceFormat",
    "TraceLoadResult",
    "read_azure_csv",
    "read_burstgpt_csv",
    "read_canonical_csv",
    "read_lengths",
    "read_mooncake_jsonl",
    "read_trace",
    "read_vidur_csv",
]
