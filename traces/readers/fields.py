"""Vectorised parsing and validation of one trace column at a time (texts in, numbers out).

Every function takes the column as text exactly as read, flags bad rows in a `RowProblems` and
returns numbers for all rows (garbage where flagged; callers keep only valid rows).
Reason labels are the keys of `TraceLoadResult.rejected_rows`.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from traces.readers.row_problems import RowProblems
from traces.time_bounds import MAX_ARRIVAL_S, MAX_SPAN_S, short_number

MISSING = "missing field"
NON_NUMERIC = "non-numeric"
NEGATIVE_ARRIVAL = "negative arrival"
BAD_TIMESTAMP = "bad timestamp"
MALFORMED = "malformed line"
BAD_QUOTING = "bad quoting"
ARRIVAL_TOO_LARGE = "arrival too large"
ARRIVAL_OUTLIER = "arrival far from the others"
TIMESTAMP_OUT_OF_RANGE = "timestamp out of range"

QUOTING_EXPECTED = ('a field without double quotes, or one wholly inside a pair of them ("..." with "" for a '
                    'quote inside): a stray quote would hide the lines after it')
SPAN_EXPECTED = (f"an arrival within {short_number(MAX_SPAN_S)} s (31.7 years) of the trace's median arrival: no public trace "
                 "spans more than months, so this is a typing or unit error")

# A decimal number (what pandas would parse) that came out non-finite: too large, not garbage.
_DECIMAL = r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"

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
    """Floats, shape (n,); flags empty/NaN text as MISSING and other non-numeric text as NON_NUMERIC.

    A decimal number too large for float64 ("1e400", a 4,301-digit integer) is returned as
    +-inf, unflagged, for the caller's range check to name it "too large"; "inf" text is
    NON_NUMERIC.
    """
    stripped, missing = _missing(texts)
    problems.flag(missing, MISSING, field, texts, expected)
    numbers = pd.to_numeric(stripped.where(~missing), errors="coerce").to_numpy(dtype=float, na_value=np.nan, copy=True)
    odd = ~missing & ~np.isfinite(numbers)
    if odd.any():
        huge = odd & stripped.str.fullmatch(_DECIMAL).to_numpy(dtype=bool, na_value=False)
        numbers[huge] = np.where(stripped[huge].str.startswith("-"), -np.inf, np.inf)
        odd &= ~huge
    problems.flag(odd, NON_NUMERIC, field, texts, expected)
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
        problems.flag(numbers < 1, f"{name} < 1", field, texts, expected)
        problems.flag(finite & (numbers != np.floor(numbers)), f"{name} not a whole number", field, texts, expected)
        problems.flag(numbers > MAX_TOKENS, f"{name} too large", field, texts, expected)
    return np.where(problems.valid & finite, numbers, 0).astype(np.int64)


def parse_priority(problems: RowProblems, texts: pd.Series, field: str) -> np.ndarray:
    """Priorities as int64, shape (n,); the column is optional per row, so empty means 0."""
    expected = f"a whole number from -{MAX_TOKENS} to {MAX_TOKENS} (empty for 0)"
    stripped, missing = _missing(texts)
    numbers = pd.to_numeric(stripped.where(~missing, "0"), errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    with np.errstate(invalid="ignore"):
        whole = np.isfinite(numbers) & (numbers == np.floor(numbers)) & (np.abs(numbers) <= MAX_TOKENS)
    problems.flag(~whole, "priority not a whole number", field, texts, expected)
    return np.where(whole, numbers, 0).astype(np.int64)


def parse_offsets_s(problems: RowProblems, texts: pd.Series, field: str, units_per_s: float, unit: str) -> np.ndarray:
    """Arrival offsets in seconds, shape (n,), from numbers in `unit` (>= 0) divided by `units_per_s`.

    Values above MAX_ARRIVAL_S seconds are "arrival too large", and values more than MAX_SPAN_S
    from the others "arrival far from the others" (`flag_outlying_arrivals`), both bounds of
    `traces.time_bounds`. Dividing (5999 / 1000 = 5.999) rather than multiplying by 1e-3 keeps
    whole milliseconds at the float nearest the decimal value.
    """
    expected = f"a number of {unit} from 0 to {short_number(MAX_ARRIVAL_S * units_per_s)}"
    numbers = parse_numbers(problems, texts, field, expected)
    with np.errstate(invalid="ignore"):
        problems.flag(numbers < 0, NEGATIVE_ARRIVAL, field, texts, expected)
        problems.flag(numbers > MAX_ARRIVAL_S * units_per_s, ARRIVAL_TOO_LARGE, field, texts,
                      f"{expected} ({short_number(MAX_ARRIVAL_S)} s: Unix epoch seconds in the year 2286)")
    arrival_s = numbers / units_per_s
    flag_outlying_arrivals(problems, arrival_s, texts, field)
    return arrival_s


def flag_outlying_arrivals(problems: RowProblems, arrival_s: np.ndarray, texts: pd.Series, field: str) -> None:
    """Flag rows whose arrival is more than MAX_SPAN_S from the lower median of the valid ones.

    The lower median (element (n - 1) // 2 of the sorted arrivals) is a real row's arrival, so
    with two rows a second 1e308 s after a first at 0 is the one rejected, and a single typo in
    either direction is rejected however far it lies. Every arrival kept is then within
    2 * MAX_SPAN_S of any other (2e18 ns, under the 9.2e18 of int64).

    Args:
        arrival_s: arrivals in seconds from any origin, shape (n,); NaN or inf where already flagged.
    """
    valid = problems.valid & np.isfinite(arrival_s)
    if not valid.any():
        return
    values = arrival_s[valid]
    middle = (values.size - 1) // 2
    median_s = np.partition(values, middle)[middle]
    with np.errstate(invalid="ignore"):
        problems.flag(valid & (np.abs(arrival_s - median_s) > MAX_SPAN_S), ARRIVAL_OUTLIER, field, texts, SPAN_EXPECTED)


def parse_azure_timestamps_s(problems: RowProblems, texts: pd.Series, field: str) -> np.ndarray:
    """Arrival times in seconds after the earliest valid timestamp, shape (n,), exact to 1 ns.

    Timestamps are parsed with the 2023 trace's explicit format to integer nanoseconds, and the
    differences are taken in integers before converting to float seconds, so no precision is
    lost to float64 epoch values (about 2e-7 s resolution at 1.7e9 s). Rows that do not match
    that format are retried as ISO 8601 (the 2024 week-long and 2025 multimodal traces carry a
    UTC offset or `Z`); naive times are taken as UTC so both kinds compare. A well-formed time
    outside pandas' nanosecond range (years 1677 to 2262; a year-1 date) is "timestamp out of
    range", and one more than MAX_SPAN_S from the others is rejected as in
    `flag_outlying_arrivals` before any difference is taken (so none overflows int64).
    """
    expected = "a timestamp YYYY-MM-DD HH:MM:SS.fffffff"
    stripped, missing = _missing(texts)
    problems.flag(missing, MISSING, field, texts, expected)
    candidates = stripped.where(~missing)
    exact = pd.to_datetime(candidates, format=AZURE_TIMESTAMP_FORMAT, errors="coerce")
    times = _utc_ns(exact.dt.tz_localize("UTC"))
    retry = times.isna().to_numpy() & ~missing
    if retry.any():
        times[retry] = _utc_ns(pd.to_datetime(candidates[retry], format="ISO8601", utc=True, errors="coerce"))
    unparsed = times.isna().to_numpy()
    out_of_range = np.zeros(len(texts), dtype=bool)
    out_of_range[unparsed & ~missing] = _valid_but_out_of_range(stripped[unparsed & ~missing])
    problems.flag(out_of_range, TIMESTAMP_OUT_OF_RANGE, field, texts,
                  f"{expected} from {pd.Timestamp.min:%Y-%m-%d %H:%M:%S} to {pd.Timestamp.max:%Y-%m-%d %H:%M:%S} (nanosecond times)")
    problems.flag(unparsed & ~missing, BAD_TIMESTAMP, field, texts, expected)
    ns = times.to_numpy(dtype="datetime64[ns]").astype(np.int64)  # NaT -> int64 min, flagged above
    flag_outlying_arrivals(problems, np.where(unparsed, np.nan, ns / 1e9), texts, field)
    valid = problems.valid & ~unparsed
    if not valid.any():
        return np.zeros(len(texts))
    offsets_ns = np.zeros(len(texts), dtype=np.int64)
    offsets_ns[valid] = ns[valid] - ns[valid].min()
    return offsets_ns / 1e9


def _utc_ns(times: pd.Series) -> pd.Series:
    """UTC times at nanosecond resolution, NaT for any outside that range.

    pandas 3 parses a batch holding a year-1 or year-275760 time at a coarser unit, and casting
    that batch to nanoseconds raises OutOfBoundsDatetime; the times outside are dropped first.
    """
    inside = times.between(pd.Timestamp.min.tz_localize("UTC"), pd.Timestamp.max.tz_localize("UTC"))
    return times.where(inside).astype("datetime64[ns, UTC]")


def _valid_but_out_of_range(texts: pd.Series) -> np.ndarray:
    """Mask of texts that parse as timestamps once their year is replaced by 2000 (year 1, 3000)."""
    if texts.empty:
        return np.zeros(0, dtype=bool)
    moved = texts.str.replace(r"^[+-]?\d{1,6}-", "2000-", regex=True)
    exact = pd.to_datetime(moved, format=AZURE_TIMESTAMP_FORMAT, errors="coerce")
    iso = pd.to_datetime(moved, format="ISO8601", utc=True, errors="coerce")
    return (exact.notna() | iso.notna()).to_numpy()
