"""One reader per trace format, for callers that know what they hold and want just the requests.

Each returns `list[Request]` sorted stably by arrival, the first at 0.0 s, ids 0..n-1. They
default to strict=True because a plain list cannot report skipped rows; use `read_trace` for
lenient loading with a count of what was rejected.
"""
from __future__ import annotations

import os
from collections.abc import Sequence

from traces.readers.read_trace import read_trace
from traces.request import Request


def read_canonical_csv(path: str | os.PathLike, strict: bool = True) -> list[Request]:
    """Canonical CSV `arrival_s,prompt_tokens,output_tokens[,request_id,priority]`, arrivals in seconds.

    Source: sarathi-sim DESIGN.md ("Files"). Raises as `read_trace`.
    """
    return read_trace(path, format="canonical", strict=strict).requests


def read_azure_csv(path: str | os.PathLike, strict: bool = True) -> list[Request]:
    """Azure LLM inference trace `TIMESTAMP,ContextTokens,GeneratedTokens`.

    TIMESTAMP is absolute time `YYYY-MM-DD HH:MM:SS.fffffff` (7 fractional digits, 100 ns, no
    time zone), turned into seconds after the first request exactly, via integer nanoseconds.
    Source: Azure/AzurePublicDataset, data/AzureLLMInferenceTrace_{code,conv}.csv (Splitwise,
    ISCA'24; CC-BY-4.0). Raises as `read_trace`.
    """
    return read_trace(path, format="azure", strict=strict).requests


def read_vidur_csv(path: str | os.PathLike, strict: bool = True) -> list[Request]:
    """Vidur `splitwise_*.csv`: `arrived_at,num_prefill_tokens,num_decode_tokens`, arrivals in float seconds.

    Source: microsoft/vidur, data/processed_traces/ (MIT). Raises as `read_trace`.
    """
    return read_trace(path, format="vidur", strict=strict).requests


def read_burstgpt_csv(
    path: str | os.PathLike,
    strict: bool = True,
    models: Sequence[str] | None = None,
    log_types: Sequence[str] | None = None,
) -> list[Request]:
    """BurstGPT `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`, whole seconds.

    `models` keeps only rows whose `Model` is listed ("ChatGPT", "GPT-4"), `log_types` only rows
    whose `Log Type` is ("Conversation log", "API log"); None keeps all. Rows with `Response
    tokens` 0 (failed requests) are errors here (strict); `read_trace` counts and skips them.
    Source: HPMLL/BurstGPT README (CC-BY-4.0). Raises as `read_trace`.
    """
    return read_trace(path, format="burstgpt", strict=strict, where=burstgpt_filter(models, log_types)).requests


def burstgpt_filter(models: Sequence[str] | None, log_types: Sequence[str] | None) -> dict[str, list[str]]:
    """The `where=` of `read_trace` that keeps the given BurstGPT models and log types (None: all)."""
    where = {}
    if models is not None:
        where["Model"] = list(models)
    if log_types is not None:
        where["Log Type"] = list(log_types)
    return where


def read_mooncake_jsonl(path: str | os.PathLike, strict: bool = True) -> list[Request]:
    """Mooncake JSON lines `timestamp,input_length,output_length,hash_ids`, timestamps in milliseconds.

    `hash_ids` (512-token prefix blocks) become `Request.prefix_hash_ids`. Rows are numbered by
    file line. Source: kvcache-ai/Mooncake, FAST25-release/traces/ (Apache-2.0). Raises as `read_trace`.
    """
    return read_trace(path, format="mooncake", strict=strict).requests
