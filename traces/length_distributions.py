"""Distributions of prompt or output lengths in tokens, each clipped to [min_tokens, max_tokens].

Every distribution samples whole token counts (int64, shape (n,)) from a caller's
`numpy.random.Generator`, so a seed fixes the draws. Continuous draws are rounded to the
nearest integer and then clipped: values below `min_tokens` (default 1; a request has at
least one token of each kind) become `min_tokens`, values above `max_tokens` (default
2**31 - 1) become `max_tokens`. Clipping piles the cut-off mass onto the bounds; it does not
redraw.

`length_distribution(spec, field)` builds one from a config value: an int (fixed), a
`[low, high]` pair (uniform, inclusive) or a mapping `{dist: NAME, ..., min: , max: }`; see
`DISTRIBUTIONS` for the names and their keys.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from traces.arrivals import check_count
from traces.lengths_table import LengthsTable, lengths_table_of_file, lengths_table_of_profile
from traces.readers.fields import MAX_TOKENS

# Bounded Zipf tabulates its CDF over max - min + 1 values; past this it would cost > 80 MB.
MAX_ZIPF_SUPPORT = 10_000_000


@dataclass(frozen=True)
class LengthDistribution:
    """Base of the token-length distributions: clipping bounds and the sampling entry point.

    Attributes:
        min_tokens: the smallest length returned, >= 1.
        max_tokens: the largest length returned, >= min_tokens; None for MAX_TOKENS (2**31 - 1,
            the bound the readers put on a length: `traces.readers.fields`).
    """

    min_tokens: int = 1
    max_tokens: int | None = None
    name: ClassVar[str] = ""
    # Parameters in tokens, besides min and max: each must be <= MAX_TOKENS to sample.
    sizes: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        _check_int(self.min_tokens, "min", low=1)
        if self.max_tokens is not None:
            _check_int(self.max_tokens, "max", low=self.min_tokens, low_name="min")

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n lengths in tokens, int64, shape (n,), within [min_tokens, max_tokens]."""
        check_count(n, "n")
        self.check_sizes()
        return self.clip(self._draw(n, rng))

    def check_sizes(self) -> None:
        """ValueError naming the first parameter in tokens above MAX_TOKENS (2**31 - 1).

        Checked when sampling rather than when built, so a config's own, tighter bound speaks
        first (`experiments.config`). Without it a normal of mean 1e308 cast its draws to
        -9.2e18 tokens, a log-normal of std 1e300 raised OverflowError, and a fixed 2**40
        tokens passed.
        """
        for attribute in ("min_tokens", "max_tokens", *self.sizes):
            value = getattr(self, attribute)
            if value is not None and value > MAX_TOKENS:
                name = {"min_tokens": "min", "max_tokens": "max"}.get(attribute, attribute)
                raise ValueError(f"{self.name} {name} must be at most {MAX_TOKENS} tokens (the longest length a "
                                 f"trace may hold), got {value!r}")

    def clip(self, values: np.ndarray) -> np.ndarray:
        """Round to whole tokens and clip to [min_tokens, max_tokens]; int64, shape of `values`."""
        upper = MAX_TOKENS if self.max_tokens is None else self.max_tokens
        return np.clip(np.rint(np.asarray(values, dtype=float)), self.min_tokens, upper).astype(np.int64)

    def _draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError


@dataclass(frozen=True)
class FixedLength(LengthDistribution):
    """Always `tokens` (then clipped)."""

    tokens: int = 512
    name: ClassVar[str] = "fixed"
    sizes: ClassVar[tuple[str, ...]] = ("tokens",)

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_int(self.tokens, "tokens", low=1)

    def _draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.full(n, self.tokens, dtype=np.int64)


@dataclass(frozen=True)
class UniformLength(LengthDistribution):
    """Uniform over the integers low..high, both included (then clipped)."""

    low: int = 1
    high: int = 1
    name: ClassVar[str] = "uniform"
    sizes: ClassVar[tuple[str, ...]] = ("low", "high")

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_int(self.low, "low", low=1)
        _check_int(self.high, "high", low=self.low, low_name="low")

    def _draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(self.low, self.high, size=n, endpoint=True, dtype=np.int64)


@dataclass(frozen=True)
class NormalLength(LengthDistribution):
    """Normal with `mean` and standard deviation `std` in tokens, rounded and clipped."""

    mean: float = 512.0
    std: float = 0.0
    name: ClassVar[str] = "normal"
    sizes: ClassVar[tuple[str, ...]] = ("mean", "std")

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_real(self.mean, "mean", positive=False)
        _check_real(self.std, "std", positive=False)

    def _draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.normal(self.mean, self.std, size=n)


@dataclass(frozen=True)
class LogNormalLength(LengthDistribution):
    """Log-normal with `mean` and standard deviation `std` in tokens (before clipping).

    With s² = ln(1 + std² / mean²) and mu = ln(mean) − s² / 2, ln(X) ~ Normal(mu, s) has
    E[X] = mean and SD[X] = std (the log-normal moments; Johnson, Kotz & Balakrishnan,
    Continuous Univariate Distributions, vol. 1, ch. 14). The median is exp(mu).
    """

    mean: float = 512.0
    std: float = 0.0
    name: ClassVar[str] = "lognormal"
    sizes: ClassVar[tuple[str, ...]] = ("mean", "std")  # so (std / mean)**2 stays finite

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_real(self.mean, "mean", positive=False, low=1.0)  # a mean under 1 token is no length
        _check_real(self.std, "std", positive=False)

    def _draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        s2 = math.log1p((self.std / self.mean) ** 2)
        return rng.lognormal(math.log(self.mean) - s2 / 2.0, math.sqrt(s2), size=n)


@dataclass(frozen=True)
class ZipfLength(LengthDistribution):
    """Bounded Zipf over min_tokens..max_tokens: P(min + k − 1) ∝ 1 / k^theta for rank k ≥ 1.

    Short lengths are the most likely; `theta` > 0 sets how fast the probability falls. This is
    the bounded Zipf of Vidur's `ZipfRequestLengthGenerator` (microsoft/vidur, without its
    scrambling), sampled exactly by inverting the tabulated CDF. `max_tokens` is required.
    """

    theta: float = 1.0
    name: ClassVar[str] = "zipf"

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_real(self.theta, "theta", positive=True)
        if self.max_tokens is None:
            raise ValueError("zipf needs max (the largest length of its support)")
        if self.max_tokens - self.min_tokens + 1 > MAX_ZIPF_SUPPORT:
            raise ValueError(f"zipf support max - min + 1 must be <= {MAX_ZIPF_SUPPORT:,} lengths")

    def _draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        ranks = np.arange(1, self.max_tokens - self.min_tokens + 2, dtype=float)
        cdf = np.cumsum(ranks ** -self.theta)
        index = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")
        return self.min_tokens + np.minimum(index, ranks.size - 1)


@dataclass(frozen=True)
class EmpiricalLength(LengthDistribution):
    """The lengths of a real source: a lengths or trace file, or a built-in workload profile.

    From a file, lengths are drawn uniformly from its valid rows (a bootstrap: every value the
    file holds, with its frequency). From a profile, they are drawn through the profile's
    quantile table (inverse CDF, linear between the stored quantiles). `column` says which
    length: "prompt" or "output". Exactly one of `file` and `profile` is set. The source is read
    on first use, so building the distribution does no I/O beyond checking a profile's name.
    Used for both prompt and output, one source keeps its prompt/output correlation
    (`traces.length_pairs`).
    """

    file: str | None = None
    profile: str | None = None
    column: str = "prompt"
    name: ClassVar[str] = "empirical"

    def __post_init__(self) -> None:
        super().__post_init__()
        if (self.file is None) == (self.profile is None):
            raise ValueError("empirical needs exactly one of file (a lengths or trace file) and profile (a name)")
        if self.column not in ("prompt", "output"):
            raise ValueError(f"column must be 'prompt' or 'output', got {self.column!r}")
        if self.profile is not None:
            from traces.workload_profile import check_profile_name

            check_profile_name(self.profile)

    def table(self) -> LengthsTable:
        """The source's lengths (read once per file and process)."""
        return lengths_table_of_file(self.file) if self.file is not None else lengths_table_of_profile(self.profile)

    def _draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.table().sample_column(self.column, n, rng)


# name -> class; a mapping spec `{dist: NAME, ...}` takes the class's own fields as keys.
DISTRIBUTIONS: dict[str, type[LengthDistribution]] = {
    cls.name: cls for cls in (FixedLength, UniformLength, NormalLength, LogNormalLength, ZipfLength, EmpiricalLength)
}
_CLIP_KEYS = {"min": "min_tokens", "max": "max_tokens"}


def length_distribution(spec: Any, field: str = "prompt") -> LengthDistribution:
    """Build a distribution from a config value for the `field` ("prompt" or "output") lengths.

    Args:
        spec: a `LengthDistribution` (returned as is); an int (fixed tokens); a [low, high] pair
            (uniform, inclusive); or a mapping with `dist` and that distribution's keys:
            fixed {tokens}, uniform {low, high}, normal {mean, std}, lognormal {mean, std},
            zipf {theta, max}, empirical {file | profile}; every one also takes min and max.
        field: which length the spec describes; empirical sources read that column.

    Raises:
        ValueError: the message says what is wrong and what is valid (unknown dist, unknown or
            missing key, a bad value).
    """
    if isinstance(spec, LengthDistribution):
        return spec
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        return FixedLength(tokens=int(spec))
    if isinstance(spec, (list, tuple)) and len(spec) == 2:
        return UniformLength(low=spec[0], high=spec[1])
    if isinstance(spec, dict):
        return _from_mapping(spec, field)
    raise ValueError(
        f"{field} length must be an int (fixed), a [low, high] pair (uniform) or a mapping "
        f"{{dist: {' | '.join(DISTRIBUTIONS)}, ...}}, got {spec!r}"
    )


def _from_mapping(spec: dict, field: str) -> LengthDistribution:
    name = spec.get("dist")
    if name not in DISTRIBUTIONS:
        raise ValueError(f"unknown length distribution {name!r}; valid dist: {', '.join(DISTRIBUTIONS)}")
    cls = DISTRIBUTIONS[name]
    keys = [f.name for f in dataclasses.fields(cls) if f.name not in ("min_tokens", "max_tokens", "column")]
    unknown = set(spec) - {"dist", *keys, *_CLIP_KEYS}
    if unknown:
        raise ValueError(f"{name} does not take {', '.join(sorted(unknown))}; its keys: {', '.join([*keys, 'min', 'max'])}")
    missing = [key for key in _required_keys(cls) if key not in spec]
    if missing:
        raise ValueError(f"{name} needs {', '.join(missing)}; its keys: {', '.join([*keys, 'min', 'max'])}")
    kwargs = {_CLIP_KEYS.get(key, key): value for key, value in spec.items() if key != "dist"}
    if cls is EmpiricalLength:
        kwargs["column"] = field
    return cls(**kwargs)


def _required_keys(cls: type[LengthDistribution]) -> list[str]:
    """Keys a mapping must give: the distribution's parameters (empirical: one of two, checked later)."""
    required = {
        FixedLength: ["tokens"], UniformLength: ["low", "high"], NormalLength: ["mean", "std"],
        LogNormalLength: ["mean", "std"], ZipfLength: ["theta", "max"], EmpiricalLength: [],
    }
    return required[cls]


def _check_int(value: Any, name: str, low: int, low_name: str | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        bound = f"{low_name} ({low})" if low_name else str(low)
        raise ValueError(f"{name} must be a whole number of tokens >= {bound}, got {value!r}")


def _check_real(value: Any, name: str, positive: bool, low: float = 0.0) -> None:
    """A finite number >= low (> low when `positive`); its upper bound is checked when sampling."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float, np.number)) and math.isfinite(value)
    if not ok or value < low or (positive and value == low):
        raise ValueError(f"{name} must be a finite number {'>' if positive else '>='} {low:g}, got {value!r}")


def sample_lengths(
    prompt: LengthDistribution, output: LengthDistribution, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """n (prompt, output) lengths in tokens, int64, two arrays of shape (n,).

    When both are `EmpiricalLength`s of the same source (one file, or one profile), they are
    drawn jointly, so the source's prompt/output correlation is kept (a lengths file's rows are
    resampled whole; a profile uses its copula); each is then clipped to its own bounds.
    Otherwise prompt lengths are drawn first, then output lengths, independently.
    """
    if _same_source(prompt, output):
        prompt.check_sizes()
        output.check_sizes()
        prompt_tokens, output_tokens = prompt.table().sample_pairs(n, rng)
        return prompt.clip(prompt_tokens), output.clip(output_tokens)
    return prompt.sample(n, rng), output.sample(n, rng)


def _same_source(prompt: LengthDistribution, output: LengthDistribution) -> bool:
    return (
        isinstance(prompt, EmpiricalLength) and isinstance(output, EmpiricalLength)
        and (prompt.column, output.column) == ("prompt", "output")
        and (prompt.file, prompt.profile) == (output.file, output.profile)
    )
