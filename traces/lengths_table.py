"""Where empirical lengths come from: a table of observed (prompt, output) pairs, or a profile.

Both kinds answer the same two questions: n draws of one column, and n joint (prompt, output)
draws that keep the source's correlation. `ObservedLengths` holds the rows of a file and
resamples them; `traces.workload_profile.WorkloadProfile` holds quantile tables and a rank
correlation and draws through a Gaussian copula.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from traces.readers.read_lengths import read_lengths
from traces.workload_profile import load_profile


class LengthsTable(Protocol):
    """A source of empirical lengths (`ObservedLengths` or `WorkloadProfile`)."""

    def sample_column(self, column: str, n: int, rng: np.random.Generator) -> np.ndarray:
        """n lengths in tokens of `column` ("prompt" or "output"), shape (n,)."""

    def sample_pairs(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """n joint (prompt, output) lengths in tokens, two arrays of shape (n,)."""


@dataclass(frozen=True, eq=False)
class ObservedLengths:
    """The valid rows of a lengths or trace file, resampled uniformly with replacement.

    Attributes:
        prompt_tokens, output_tokens: the file's lengths, int64, shape (rows,), rows >= 1.
        source: the file, for messages.
    """

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    source: str

    def __post_init__(self) -> None:
        if self.prompt_tokens.size == 0:
            raise ValueError(f"{self.source}: no valid rows to draw empirical lengths from")

    def sample_column(self, column: str, n: int, rng: np.random.Generator) -> np.ndarray:
        """n draws of one column (a bootstrap of its values), int64, shape (n,)."""
        values = self.prompt_tokens if column == "prompt" else self.output_tokens
        return values[rng.integers(0, values.size, size=n)]

    def sample_pairs(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """n rows drawn with replacement, their prompt and output together, each shape (n,)."""
        rows = rng.integers(0, self.prompt_tokens.size, size=n)
        return self.prompt_tokens[rows], self.output_tokens[rows]


def lengths_table_of_file(path: str | os.PathLike) -> ObservedLengths:
    """The lengths of a file (any format `read_lengths` reads), read once per file version.

    Raises:
        FileNotFoundError / TraceFormatError: as `read_lengths` (lenient: bad rows are skipped).
        ValueError: the file has no valid row.
    """
    path = Path(path).expanduser().resolve()
    stat = path.stat() if path.is_file() else None
    return _cached_file_table(str(path), stat and (stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=16)
def _cached_file_table(path: str, version: object) -> ObservedLengths:
    loaded = read_lengths(path)
    return ObservedLengths(loaded.prompt_tokens, loaded.output_tokens, path)


@functools.lru_cache(maxsize=32)
def lengths_table_of_profile(name: str):
    """The workload profile called `name` (built-in name or .json path), loaded once."""
    return load_profile(name)
