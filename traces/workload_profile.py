"""Workload profiles: sample synthetic traces whose lengths follow a real trace's distribution.

A profile (`traces/profiles/<name>.json`, written by `traces.profiles.build_profiles`) stores
quantile tables of prompt and output tokens, their Spearman correlation and the source's
arrival statistics (none for lengths-only sources such as ShareGPT: the rate then comes from
the caller). Sampling joins the two marginals with a Gaussian copula, which reproduces both
marginals and the rank correlation without storing the trace.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from traces.arrivals import arrival_times_s
from traces.ordering import requests_in_arrival_order
from traces.request import Request

PROFILES_DIR = Path(__file__).resolve().parent / "profiles"

_erf = np.frompyfunc(math.erf, 1, 1)  # numpy has no erf; math.erf per value costs ~0.1 us


@dataclass(frozen=True, eq=False)
class WorkloadProfile:
    """Length distribution and arrival statistics of a real trace.

    Attributes:
        name: the profile's name ("azure-conv").
        probability: quantile levels, shape (k,), strictly increasing from 0.0 to 1.0.
        prompt_quantiles_tokens, output_quantiles_tokens: the token counts at those levels,
            shape (k,), non-decreasing (level 0 is the minimum, level 1 the maximum).
        spearman_prompt_output: Spearman rank correlation of prompt and output tokens.
        mean_rate_qps: the source's mean arrival rate, (n - 1) / span, requests/s; None for a
            lengths-only source.
        num_requests: the source's request (row) count.
        span_s: its span in seconds; None for a lengths-only source.
        source: where the figures come from (repository, file, paper, date); license: its licence.
        gap_cv: coefficient of variation of the source's inter-arrival gaps (1 for Poisson);
            None for a lengths-only source or an undefined CV.
    """

    name: str
    probability: np.ndarray
    prompt_quantiles_tokens: np.ndarray
    output_quantiles_tokens: np.ndarray
    spearman_prompt_output: float
    mean_rate_qps: float | None
    num_requests: int
    span_s: float | None
    source: dict
    license: str
    gap_cv: float | None = None

    @classmethod
    def from_json(cls, path: str | Path) -> WorkloadProfile:
        """Load and check a profile file (format: `traces.profiles.build_profiles`).

        Raises:
            ValueError: text that is not a JSON object (not JSON, nested too deeply, an integer
                of over 4,300 digits), a missing key, a value of the wrong type, or an
                inconsistent table, naming the file.
            OSError: the file cannot be read.
        """
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, RecursionError) as error:  # JSONDecodeError, UnicodeDecodeError, int digits
            raise ValueError(f"{path}: not a workload profile: not readable as JSON ({type(error).__name__}: "
                             f"{str(error)[:120]})") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}: not a workload profile: a JSON {type(data).__name__}, expected an object")
        try:
            quantiles = data["quantiles"]
            profile = cls(
                name=data["name"],
                probability=np.asarray(quantiles["probability"], dtype=float),
                prompt_quantiles_tokens=np.asarray(quantiles["prompt_tokens"], dtype=float),
                output_quantiles_tokens=np.asarray(quantiles["output_tokens"], dtype=float),
                spearman_prompt_output=float(data["spearman_prompt_output"]),
                mean_rate_qps=_float_or_none(data["mean_rate_qps"]),
                num_requests=int(data["num_requests"]),
                span_s=_float_or_none(data["span_s"]),
                source=dict(data["source"]),
                license=str(data["license"]),
                gap_cv=_float_or_none(data.get("gap_cv")),
            )
        except KeyError as error:
            raise ValueError(f"{path}: workload profile lacks key {error}") from None
        except (TypeError, ValueError) as error:  # a list where a number belongs, "x" as a float...
            raise ValueError(f"{path}: workload profile holds a value of the wrong type ({error})") from None
        profile._check(path)
        return profile

    def _check(self, path: Path) -> None:
        p = self.probability
        for name, values in (("probability", p), ("prompt_tokens", self.prompt_quantiles_tokens),
                             ("output_tokens", self.output_quantiles_tokens)):
            if values.ndim != 1 or not np.all(np.isfinite(values)):
                raise ValueError(f"{path}: quantiles.{name} must be a list of finite numbers")
        if not (p.size >= 2 and p[0] == 0.0 and p[-1] == 1.0 and np.all(np.diff(p) > 0)):
            raise ValueError(f"{path}: quantiles.probability must rise strictly from 0 to 1")
        for name, values in (("prompt_tokens", self.prompt_quantiles_tokens), ("output_tokens", self.output_quantiles_tokens)):
            if values.shape != p.shape or np.any(np.diff(values) < 0) or values[0] < 1:
                raise ValueError(f"{path}: quantiles.{name} must be {p.size} non-decreasing values >= 1")
        if not -1.0 <= self.spearman_prompt_output <= 1.0:  # NaN fails this too
            raise ValueError(f"{path}: spearman_prompt_output must be in [-1, 1]")

    @property
    def has_arrivals(self) -> bool:
        """False for a lengths-only source (no rate of its own)."""
        return self.mean_rate_qps is not None

    def sample(
        self,
        num_requests: int,
        qps: float | None = None,
        seed: int = 0,
        arrival: str = "poisson",
        burstiness: float | None = None,
    ) -> list[Request]:
        """Draw a synthetic trace: arrivals at `qps`, lengths with this profile's joint distribution.

        Args:
            num_requests: how many requests.
            qps: mean arrival rate in requests/s; None for the source's own `mean_rate_qps`.
            seed: seeds `numpy.random.default_rng`; draws are arrivals, then the lengths.
            arrival, burstiness: the arrival process, as `traces.arrivals.arrival_times_s`.

        Returns:
            list[Request] in arrival order, the first at 0.0 s, ids 0..n-1.

        Raises:
            ValueError: qps None for a lengths-only profile; a bad arrival process or rate.
        """
        if qps is None and not self.has_arrivals:
            raise ValueError(f"profile {self.name!r} has lengths only (no arrivals): give qps")
        rng = np.random.default_rng(seed)
        arrival_s = arrival_times_s(arrival, self.mean_rate_qps if qps is None else qps, num_requests, rng, burstiness)
        prompt_tokens, output_tokens = self.sample_pairs(num_requests, rng)
        return requests_in_arrival_order(arrival_s, prompt_tokens, output_tokens)

    def sample_pairs(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """n joint (prompt, output) lengths in tokens >= 1, int64, shapes (n,) and (n,).

        A Gaussian copula: a pair of standard normals with correlation r = 2 sin(pi * rho_s / 6),
        which has Spearman correlation rho_s (Pearson 1907, for the bivariate normal), is mapped
        through the normal CDF to uniforms and then through each quantile table by linear
        (monotone) interpolation, and rounded to whole tokens >= 1. Draws: one (n, 2) normal array.
        """
        r = 2.0 * math.sin(math.pi * self.spearman_prompt_output / 6.0)
        z = rng.standard_normal((n, 2))
        z_prompt = z[:, 0]
        z_output = r * z[:, 0] + math.sqrt(1.0 - r * r) * z[:, 1]
        return (
            self._tokens(_normal_cdf(z_prompt), self.prompt_quantiles_tokens),
            self._tokens(_normal_cdf(z_output), self.output_quantiles_tokens),
        )

    def sample_column(self, column: str, n: int, rng: np.random.Generator) -> np.ndarray:
        """n lengths in tokens of one marginal ("prompt" or "output"), by inverse CDF of uniforms."""
        table = self.prompt_quantiles_tokens if column == "prompt" else self.output_quantiles_tokens
        return self._tokens(rng.random(n), table)

    def _tokens(self, u: np.ndarray, quantiles_tokens: np.ndarray) -> np.ndarray:
        """Inverse CDF by interpolation in the quantile table, as whole tokens >= 1."""
        return np.maximum(np.rint(np.interp(u, self.probability, quantiles_tokens)), 1).astype(np.int64)


def _float_or_none(value: object) -> float | None:
    return None if value is None else float(value)


def _normal_cdf(z: np.ndarray) -> np.ndarray:
    """Standard normal CDF, Phi(z) = (1 + erf(z / sqrt 2)) / 2, shape of z."""
    return 0.5 * (1.0 + _erf(np.asarray(z) / math.sqrt(2.0)).astype(float))


def builtin_profiles() -> list[str]:
    """Names of the profiles shipped in `traces/profiles/`, sorted."""
    return sorted(path.stem for path in PROFILES_DIR.glob("*.json"))


def check_profile_name(name: str) -> None:
    """ValueError (listing the built-in names) unless `name` is built in or a .json file path."""
    if name not in builtin_profiles() and not (name.endswith(".json") and Path(name).is_file()):
        raise ValueError(
            f"unknown workload profile {name!r}; built-in: {', '.join(builtin_profiles())}, or a path to a .json file"
        )


def load_profile(name: str) -> WorkloadProfile:
    """A built-in profile by name ("azure-conv"), or a profile JSON file by path.

    Raises:
        ValueError: an unknown name (the message lists the built-in names) or a bad file.
    """
    check_profile_name(name)
    if name in builtin_profiles():
        return WorkloadProfile.from_json(PROFILES_DIR / f"{name}.json")
    return WorkloadProfile.from_json(name)
