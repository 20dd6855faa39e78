"""Workload profiles: sample synthetic traces whose lengths follow a real trace's distribution.

A profile (`traces/profiles/<name>.json`, written by `traces.profiles.build_profiles`) stores
quantile tables of prompt and output tokens, their Spearman correlation and the source's
arrival statistics. Sampling joins the two marginals with a Gaussian copula, which reproduces
both marginals and the rank correlation without storing the trace.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from traces.generators import poisson_arrivals
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
        mean_rate_qps: the source's mean arrival rate, (n - 1) / span, requests/s.
        num_requests, span_s: the source's request count and span in seconds.
        source: where the figures come from (repository, file, paper, date); license: its licence.
    """

    name: str
    probability: np.ndarray
    prompt_quantiles_tokens: np.ndarray
    output_quantiles_tokens: np.ndarray
    spearman_prompt_output: float
    mean_rate_qps: float
    num_requests: int
    span_s: float
    source: dict
    license: str

    @classmethod
    def from_json(cls, path: str | Path) -> WorkloadProfile:
        """Load and check a profile file (format: `traces.profiles.build_profiles`).

        Raises:
            ValueError: a missing key or an inconsistent table, naming the file.
        """
        path = Path(path)
        data = json.loads(path.read_text())
        try:
            quantiles = data["quantiles"]
            profile = cls(
                name=data["name"],
                probability=np.asarray(quantiles["probability"], dtype=float),
                prompt_quantiles_tokens=np.asarray(quantiles["prompt_tokens"], dtype=float),
                output_quantiles_tokens=np.asarray(quantiles["output_tokens"], dtype=float),
                spearman_prompt_output=float(data["spearman_prompt_output"]),
                mean_rate_qps=float(data["mean_rate_qps"]),
                num_requests=int(data["num_requests"]),
                span_s=float(data["span_s"]),
                source=dict(data["source"]),
                license=str(data["license"]),
            )
        except KeyError as error:
            raise ValueError(f"{path}: workload profile lacks key {error}") from None
        profile._check(path)
        return profile

    def _check(self, path: Path) -> None:
        p = self.probability
        if not (p.size >= 2 and p[0] == 0.0 and p[-1] == 1.0 and np.all(np.diff(p) > 0)):
            raise ValueError(f"{path}: quantiles.probability must rise strictly from 0 to 1")
        for name, values in (("prompt_tokens", self.prompt_quantiles_tokens), ("output_tokens", self.output_quantiles_tokens)):
            if values.shape != p.shape or np.any(np.diff(values) < 0) or values[0] < 1:
                raise ValueError(f"{path}: quantiles.{name} must be {p.size} non-decreasing values >= 1")
        if not -1.0 <= self.spearman_prompt_output <= 1.0:
            raise ValueError(f"{path}: spearman_prompt_output must be in [-1, 1]")

    def sample(self, num_requests: int, qps: float | None = None, seed: int = 0) -> list[Request]:
        """Draw a synthetic trace: Poisson arrivals at `qps`, lengths with this profile's distribution.

        Lengths come from a Gaussian copula: a pair of standard normals with correlation
        r = 2 sin(pi * rho_s / 6), which has Spearman correlation rho_s (Pearson 1907, for the
        bivariate normal), is mapped through the normal CDF to uniforms and then through each
        quantile table by linear (monotone) interpolation, and rounded to whole tokens >= 1.

        Args:
            num_requests: how many requests.
            qps: mean arrival rate in requests/s; None for the source's own `mean_rate_qps`.
            seed: seeds `numpy.random.default_rng`; draws are arrivals, then the normal pairs.

        Returns:
            list[Request] in arrival order, the first at 0.0 s, ids 0..n-1.
        """
        rng = np.random.default_rng(seed)
        arrival_s = poisson_arrivals(self.mean_rate_qps if qps is None else qps, num_requests, rng)
        r = 2.0 * math.sin(math.pi * self.spearman_prompt_output / 6.0)
        z = rng.standard_normal((num_requests, 2))
        z_prompt = z[:, 0]
        z_output = r * z[:, 0] + math.sqrt(1.0 - r * r) * z[:, 1]
        prompt_tokens = self._tokens(_normal_cdf(z_prompt), self.prompt_quantiles_tokens)
        output_tokens = self._tokens(_normal_cdf(z_output), self.output_quantiles_tokens)
        return requests_in_arrival_order(arrival_s, prompt_tokens, output_tokens)

    def _tokens(self, u: np.ndarray, quantiles_tokens: np.ndarray) -> np.ndarray:
        """Inverse CDF by interpolation in the quantile table, as whole tokens >= 1."""
        return np.maximum(np.rint(np.interp(u, self.probability, quantiles_tokens)), 1).astype(np.int64)


def _normal_cdf(z: np.ndarray) -> np.ndarray:
    """Standard normal CDF, Phi(z) = (1 + erf(z / sqrt 2)) / 2, shape of z."""
    return 0.5 * (1.0 + _erf(np.asarray(z) / math.sqrt(2.0)).astype(float))


def builtin_profiles() -> list[str]:
    """Names of the profiles shipped in `traces/profiles/`, sorted."""
    return sorted(path.stem for path in PROFILES_DIR.glob("*.json"))


def load_profile(name: str) -> WorkloadProfile:
    """A built-in profile by name ("azure-conv"), or a profile JSON file by path.

    Raises:
        ValueError: an unknown name (the message lists the built-in names) or a bad file.
    """
    if name in builtin_profiles():
        return WorkloadProfile.from_json(PROFILES_DIR / f"{name}.json")
    if name.endswith(".json") and Path(name).is_file():
        return WorkloadProfile.from_json(name)
    raise ValueError(f"unknown workload profile {name!r}; built-in: {', '.join(builtin_profiles())}, or a path to a .json file")
