"""Vectorised parsing and validation of one trace column at a time (texts in, numbers out).

Every function takes the column as text exactly as read, flags bad rows in a `RowProblems` and
returns numbers for all rows (garbage where flagged; callers keep only valid rows).
Reason labels are the keys of `TraceLoadResult.rejected_rows`.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from traces.readers.row_problems import RowProblems

MISSING = "missing field"
NON_NUMERIC = "non-numeric"
NEGATIVE_ARRIVAL = "negative arrival"
BAD_TIMESTAMP = "bad timestamp"
MALFORMED = "malformed line"

# Text that pandas and spreadsheets write for "no value"; compared lower-cased and stripped.
_MISSING_TEXTS = ["", "nan", "na", "n/a", "null", "none", "<na>"]

# Above 2**31 tokens a length is a corrupt value, not a prompt; it would also overflow int32 users.
MAX_TOKENS = 2**31 - 1

# The Azure LLM inference trace 2023 writes `2023-11-16 18:15:46.6805900`: 7 fractional digits
# (100 ns), no time zone (Azure/AzurePublicDataset, AzureLLMInferenceDataset2023.md).
AZURE_TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f"


def _missing(texts: pd.Series) -> tuple[pd.Series, np.ndarray]:
    """Stripped texts and the mask of rows that hold no value."""
    stripped = texts.fillna("").astype(str).str.strip()
    return stripped, stripped.str.lower().isin(_MISSING_TEXTS).to_numpy()


def parse_numbers(problems: RowProblems, texts: pd.Series, field: str, expected: str) -> np.ndarray:
    """Floats, shape (n,); flags empty/NaN text as MISSING and other non-finite text as NON_NUMERIC."""
    stripped, missing = _missing(texts)
    problems.flag(missing, MISSING, field, texts, expected)
    numbers = pd.to_numeric(stripped.where(~missing), errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    problems.flag(~missing & ~np.isfinite(numbers), NON_NUMERIC, field, texts, expected)
    return numbers


def parse_tokens(problems: RowProblems, texts: pd.Series, field: str, name: str) -> np.ndarray:
    """Token counts as int64, shape (n,); must be whole numbers in [1, MAX_TOKENS].

    `name` is the canonical field (prompt_tokens / output_tokens) used in reason labels, such as
    "prompt_tokens < 1"; `field` is the column as the file names it.
    """
    expected = f"a whole number of tokens from 1 to {MAX_TOKENS}"
    numbers = parse_numbers(problems, texts, field, expected)
    finite = np.isfinite(numbers)
    with np.errstate(invalid="ignore"):
        problems.flag(finite & (numbers < 1), f"{name} < 1", field, texts, expected)
        problems.flag(finite & (numbers != np.floor(numbers)), f"{name} not a whole number", field, texts, expected)
        problems.flag(finite & (numbers > MAX_TOKENS), f"{name} too large", field, texts, expected)
    return np.where(problems.valid & finite, numbers, 0).astype(np.int64)


def parse_priority(problems: RowProblems, texts: pd.Series, field: str) -> np.ndarray:
    """Priorities as int64, shape (n,); the column is optional per row, so empty means 0."""
    expected = "a whole number (empty for 0)"
    stripped, missing = _missing(texts)
    numbers = pd.to_numeric(stripped.where(~missing, "0"), errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    with np.errstate(invalid="ignore"):
        whole = np.isfinite(numbers) & (numbers == np.floor(numbers)) & (np.abs(numbers) <= MAX_TOKENS)
    problems.flag(~whole, "priority not a whole number", field, texts, expected)
    return np.where(whole, numbers, 0).astype(np.int64)


def parse_offsets_s(problems: RowProblems, texts: pd.Series, field: str, units_per_s: float, unit: str) -> np.ndarray:
    """Arrival offsets in seconds, shape (n,), from numbers in `unit` (>= 0) divided by `units_per_s`.

    Dividing (5999 / 1000 = 5.999) rather than multiplying by 1e-3 keeps whole milliseconds
    at the float nearest the decimal value.
    """
    expected = f"a number of {unit} >= 0"
    numbers = parse_numbers(problems, texts, field, expected)
    with np.errstate(invalid="ignore"):
        problems.flag(np.isfinite(numbers) & (numbers < 0), NEGATIVE_ARRIVAL, field, texts, expected)
    return numbers / units_per_s


def parse_azure_timestamps_s(problems: RowProblems, texts: pd.Series, field: str) -> np.ndarray:
    """Arrival times in seconds after the earliest parsed timestamp, shape (n,), exact to 1 ns.

    Timestamps are parsed with the 2023 trace's explicit format to integer nanoseconds, and the
    differences are taken in integers before converting to float seconds, so no precision is
    lost to float64 epoch values (about 2e-7 s resolution at 1.7e9 s). Rows that do not match
    that format are retried as ISO 8601 (the 2024 week-long and 2025 multimodal traces carry a
    UTC offset or `Z`); naive times are taken as UTC so both kinds compare.
    """
    expected = "a timestamp YYYY-MM-DD HH:MM:SS.fffffff"
    stripped, missing = _missing(texts)
    problems.flag(missing, MISSING, field, texts, expected)
    candidates = stripped.where(~missing)
    exact = pd.to_datetime(candidates, format=AZURE_TIMESTAMP_FORMAT, errors="coerce")
    times = exact.dt.tz_localize("UTC").astype("datetime64[ns, UTC]")
    retry = times.isna().to_numpy() & ~missing
    if retry.any():
        iso = pd.to_datetime(candidates[retry], format="ISO8601", utc=True, errors="coerce")
        times[retry] = iso.astype("datetime64[ns, UTC]")
    unparsed = times.isna().to_numpy()
    problems.flag(unparsed & ~missing, BAD_TIMESTAMP, field, texts, expected)
    if unparsed.all():
        return np.zeros(len(texts))
    offsets_ns = (times - times.min()).to_numpy(dtype="timedelta64[ns]").astype(np.int64)
    return np.where(unparsed, 0, offsets_ns) / 1e9
