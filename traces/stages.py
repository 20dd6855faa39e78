"""Load profiles in stages: back-to-back intervals, each with its own rate (or a linear ramp) and
arrival process, as benchmark clients send load.

Stage k covers [start_k, start_k + duration_k), start_0 = 0 and start_{k+1} = start_k +
duration_k (contiguous: no gap, no overlap). Within a stage the rate is `rate` requests/s, or,
with `rate_end`, a linear ramp r(t) = rate + (rate_end - rate) t / duration. Every process is a
unit-rate process in *operational time* u mapped to clock time by the inverse of the stage's
cumulative intensity Λ(t) = ∫ r (Λ(t) = rate t for a flat stage, rate t + (rate_end - rate)
t² / (2 duration) for a ramp):

- `constant`: u = 0, 1, 2, ... while u < Λ(duration): arrival i at exactly i / rate on a flat
  stage, so a stage of rate r and duration d holds ceil(r d) arrivals (r d when whole);
- `poisson`: u = cumulative Exp(1) gaps from 0 (the first arrival of a stage is one gap after
  its start), kept while u < Λ(duration): a Poisson process of intensity r(t) on the stage, its
  count random;
- `gamma`: the same with Gamma(γ, 1/γ) gaps (mean 1, CV 1/sqrt(γ); vLLM's `--burstiness` γ).

How the tools define their stages (read in their source; this module is the exact, seeded
semantics the simulator uses, not a copy of their timers):

- inference-perf (kubernetes-sigs/inference-perf 7de5ef2, `inference_perf/config/loadgen/config.py`
  `StandardLoadStage{rate, duration}`, `loadgen/load_generator.py` `run_stage`): a stage sends
  int(rate × duration) requests; its `constant` timer (`loadgen/load_timer.py`
  `ConstantLoadTimer`) draws exponential gaps normalised to sum to the duration, its `poisson`
  timer draws a Poisson count per second spread the same way. Each stage then waits for its
  requests to finish and sleeps `load.interval` (default 1 s) before the next: the engine is
  drained between stages. `verify --against-bench` replays such a run stage by stage
  (experiments/verification/bench_runs/inference_perf.py).
- GuideLLM (vllm-project/guidellm, `src/guidellm/scheduler/strategies.py`): `constant@r` sends
  request k (k = 1, 2, ...) at start + k / r, `poisson@r` after Exp(r) gaps (seeded `random`);
  a sweep is a sequence of separate benchmarks, each its own stage.
- `vllm bench serve` (vllm-project/vllm 009e6d4, `vllm/benchmarks/serve.py` `get_request`):
  one rate for all requests, gaps Gamma(γ, 1/(r γ)) rescaled so the n-th request is sent at
  n / r; `--ramp-up-strategy linear|exponential` changes the rate *per request index*
  (`_get_current_request_rate`: progress = i / (n - 1)), not per second: `vllm_ramp_times`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from traces.arrivals import ARRIVAL_PROCESSES, check_positive
from traces.time_bounds import MAX_QPS, MAX_SPAN_S, MIN_BURSTINESS, short_number

# A stage may hold at most this many arrivals (rate × duration): a typing error such as a rate
# of 1e6 for 1e6 s would otherwise allocate terabytes before anything could say so.
MAX_STAGE_REQUESTS = 50_000_000


@dataclass(frozen=True)
class LoadStage:
    """One stage of a load profile (module docstring).

    Attributes:
        rate: requests per second at the stage's start, > 0 (at most `MAX_QPS`).
        duration_s: seconds the stage lasts, > 0.
        rate_end: requests per second at the stage's end (a linear ramp from `rate`); None: flat.
        arrival: "constant", "poisson" or "gamma"; None: the profile's.
        burstiness: gamma's shape γ (>= MIN_BURSTINESS); None: the profile's (1.0 if none).

    Raises:
        ValueError: a rate, duration or burstiness out of range, or an unknown arrival process;
            the message names the key.
    """

    rate: float
    duration_s: float
    rate_end: float | None = None
    arrival: str | None = None
    burstiness: float | None = None

    def __post_init__(self) -> None:
        check_positive(self.rate, "rate")
        check_positive(self.duration_s, "duration_s")
        for name in ("rate", "rate_end"):
            value = getattr(self, name)
            if value is not None:
                check_positive(value, name)
                if value > MAX_QPS:
                    raise ValueError(f"{name} must be <= {short_number(MAX_QPS)} requests/s, got {value!r}")
        if self.duration_s > MAX_SPAN_S:
            raise ValueError(f"duration_s must be <= {short_number(MAX_SPAN_S)} s (31.7 years), got {self.duration_s!r}")
        if self.arrival is not None and self.arrival not in ARRIVAL_PROCESSES:
            raise ValueError(f"unknown arrival {self.arrival!r}; valid: {', '.join(ARRIVAL_PROCESSES)}")
        if self.burstiness is not None:
            check_positive(self.burstiness, "burstiness")
            if self.burstiness < MIN_BURSTINESS:
                raise ValueError(f"burstiness must be >= {MIN_BURSTINESS:g}, got {self.burstiness!r}")
        if self.expected_requests > MAX_STAGE_REQUESTS:
            raise ValueError(f"a stage of {self.expected_requests:.3g} requests (rate x duration_s) is more than the "
                             f"{MAX_STAGE_REQUESTS:,} a stage may hold; check the units (rate is per second)")

    @property
    def expected_requests(self) -> float:
        """Λ(duration): the mean number of arrivals, (rate + rate_end) / 2 × duration for a ramp."""
        end = self.rate if self.rate_end is None else self.rate_end
        return 0.5 * (self.rate + end) * self.duration_s

    def clock_times_s(self, operational: np.ndarray) -> np.ndarray:
        """Seconds from the stage's start of the operational times `operational` (Λ⁻¹, module
        docstring), shape as given."""
        if self.rate_end is None or self.rate_end == self.rate:
            return operational / self.rate
        # Λ(t) = a t + b t² with a = rate, b = (rate_end - rate) / (2 d): the root of b t² + a t - u
        # written as 2u / (a + sqrt(a² + 4bu)), exact for b of either sign, no cancellation.
        a, b = self.rate, (self.rate_end - self.rate) / (2.0 * self.duration_s)
        return 2.0 * operational / (a + np.sqrt(np.maximum(a * a + 4.0 * b * operational, 0.0)))


def check_stages(stages: list[LoadStage]) -> None:
    """ValueError unless `stages` is a non-empty list of `LoadStage` whose total span is at most
    MAX_SPAN_S (the bound every trace keeps)."""
    if not stages:
        raise ValueError("stages must hold at least one stage ({rate: R, duration_s: D})")
    total_s = math.fsum(stage.duration_s for stage in stages)
    if total_s > MAX_SPAN_S:
        raise ValueError(f"the stages last {total_s:.3g} s in all, more than the {short_number(MAX_SPAN_S)} s a trace may span")


def stage_starts_s(stages: list[LoadStage]) -> np.ndarray:
    """Start of each stage in seconds, shape (len(stages) + 1,): the last entry is the profile's end."""
    return np.concatenate([[0.0], np.cumsum([stage.duration_s for stage in stages])])


def staged_arrivals(stages: list[LoadStage], rng: np.random.Generator, arrival: str = "poisson",
                    burstiness: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Arrival times in seconds and the stage of each, for a profile of `stages` (module docstring).

    Args:
        stages: the stages in order, back to back from 0 s.
        rng: draws the random processes, stage after stage (a constant stage draws nothing).
        arrival, burstiness: the profile's process and gamma shape, which a stage's own override.

    Returns:
        (arrival_s float64 shape (n,), non-decreasing; stage int64 shape (n,), the index of the
        stage each arrival falls in).

    Raises:
        ValueError: as `check_stages`, an unknown process, or burstiness given to a non-gamma stage.
    """
    check_stages(stages)
    if arrival not in ARRIVAL_PROCESSES:
        raise ValueError(f"unknown arrival {arrival!r}; valid: {', '.join(ARRIVAL_PROCESSES)}")
    starts = stage_starts_s(stages)
    times, index = [], []
    for k, stage in enumerate(stages):
        process = stage.arrival or arrival
        shape = stage.burstiness if stage.burstiness is not None else burstiness
        if shape is not None and process != "gamma":
            raise ValueError(f"stage {k}: burstiness applies to the gamma arrival process only, not {process!r}")
        local = stage.clock_times_s(_operational_times(stage.expected_requests, process, shape or 1.0, rng))
        # A ramp's root may round a hair past the stage end; no arrival leaves its stage.
        local = local[local < stage.duration_s]
        times.append(starts[k] + local)
        index.append(np.full(local.size, k, dtype=np.int64))
    return np.concatenate(times), np.concatenate(index)


def _operational_times(total: float, process: str, shape: float, rng: np.random.Generator) -> np.ndarray:
    """Unit-rate arrival times in [0, total): 0, 1, 2, ... (constant), or cumulative unit-mean gaps."""
    if process == "constant":
        return np.arange(math.ceil(total - 1e-9 * max(total, 1.0)), dtype=float)
    out, drawn = [], 0.0
    batch = max(16, int(total + 4.0 * math.sqrt(total / shape) + 16))  # one draw covers the stage almost always
    while True:
        gaps = rng.exponential(1.0, batch) if process == "poisson" or shape == 1.0 else rng.gamma(shape, 1.0 / shape, batch)
        cumulative = drawn + np.cumsum(gaps)
        inside = cumulative[cumulative < total]
        out.append(inside)
        if inside.size < batch:
            return np.concatenate(out)
        drawn = float(cumulative[-1])


def vllm_ramp_times(num_requests: int, start_rps: float, end_rps: float, strategy: str = "linear",
                    burstiness: float | None = None, rng: np.random.Generator | None = None) -> np.ndarray:
    """Send times in seconds of `vllm bench serve --ramp-up-strategy` (module docstring), shape (n,).

    Request i's rate is start + (end - start) p (linear) or start (end / start)^p (exponential),
    p = i / max(n - 1, 1); its delay after the previous one is 1 / rate_i (burstiness None:
    vLLM's `--burstiness inf`) or a Gamma(γ, 1 / (rate_i γ)) draw; times are cumulative from
    the first delay (vLLM sends request 0 after its own delay) and, with a ramp, not rescaled.

    Raises:
        ValueError: an unknown strategy, a rate <= 0, or randomness asked without `rng`.
    """
    check_positive(start_rps, "ramp_up_start_rps")
    check_positive(end_rps, "ramp_up_end_rps")
    progress = np.arange(num_requests, dtype=float) / max(num_requests - 1, 1)
    if strategy == "linear":
        rates = start_rps + (end_rps - start_rps) * progress
    elif strategy == "exponential":
        rates = start_rps * (end_rps / start_rps) ** progress
    else:
        raise ValueError(f"unknown ramp_up_strategy {strategy!r}; valid: linear, exponential")
    if burstiness is None:
        delays = 1.0 / rates
    else:
        if rng is None:
            raise ValueError("a gamma ramp (burstiness set) needs a seeded rng")
        delays = rng.gamma(burstiness, 1.0 / (rates * burstiness))
    return np.cumsum(delays)
