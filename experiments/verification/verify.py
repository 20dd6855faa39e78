"""Verification (DESIGN.md, "one scheduler, two clocks"): the simulator's numbers against a run.

Two comparisons:
- per step (`step_fidelity`): a cost model prices exactly the plans an engine run executed
  (`plans.jsonl`, paired one to one) and the prices are compared with the measured step times;
- end to end (`e2e_fidelity`): the same trace run independently through the simulator and the
  engine (or vLLM); request-level percentiles, throughput and makespan are compared.

Errors are signed, in percent of the measured value: 100 (predicted − measured) / measured.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from profiler.json_object import read_json_object
from simulator.pricing import StepPricer
from simulator.scheduler import BatchPlan

STEP_KINDS = ("prefill-heavy", "mixed", "decode-only", "verify")
E2E_LATENCIES = ("ttft_s", "tpot_s", "tbt_s", "e2e_s", "scheduling_delay_s")
E2E_PERCENTILES = (50, 90, 99)
E2E_RATES = ("throughput_rps", "output_throughput_tps", "makespan_s")
# The headline errors `--fail-above` checks: per-step MAPE and the P50 request latencies (issue 7's targets).
HEADLINE_E2E = ("ttft_s_p50", "tpot_s_p50", "e2e_s_p50")


@dataclass
class StepComparison:
    """Per-step predictions against measurements, one row per executed step.

    Attributes:
        frame: columns step, kind, num_query_tokens, batch_size, measured_s, predicted_s, error_pct.
    """

    frame: pd.DataFrame

    def summary(self) -> dict:
        """MAPE, P95 absolute % error, mean signed % error and step count, overall and per step kind."""
        out = {"all": error_stats(self.frame["error_pct"].to_numpy())}
        for kind in STEP_KINDS:
            errors = self.frame.loc[self.frame["kind"] == kind, "error_pct"].to_numpy()
            if errors.size:
                out[kind] = error_stats(errors)
        out["run_scale"] = self.run_scale()
        return out

    def run_scale(self) -> dict:
        """How much of the error one factor for the whole run explains: `measured_over_predicted`
        (the median ratio) and `mape_after_scale_pct` (the MAPE once every prediction is
        multiplied by it). A run on a host that was uniformly slower or faster than at
        calibration shows a ratio far from 1 and a small remainder; errors in the shape of the
        cost model (by batch, chunk, context) remain after the scale. A diagnostic only: the
        headline MAPE is never rescaled."""
        measured, predicted = self.frame["measured_s"].to_numpy(), self.frame["predicted_s"].to_numpy()
        valid = (measured > 0) & (predicted > 0)
        if not valid.any():
            return {"measured_over_predicted": float("nan"), "mape_after_scale_pct": float("nan")}
        scale = float(np.median(measured[valid] / predicted[valid]))
        remainder = signed_error_pct(predicted[valid] * scale, measured[valid])
        return {"measured_over_predicted": scale, "mape_after_scale_pct": float(np.abs(remainder).mean())}


def error_stats(error_pct: np.ndarray) -> dict:
    """{n, mape_pct, p95_ape_pct, max_ape_pct, mean_signed_pct} of signed % errors (NaN when empty)."""
    error_pct = np.asarray(error_pct, dtype=float)
    if error_pct.size == 0:
        return {"n": 0, "mape_pct": float("nan"), "p95_ape_pct": float("nan"), "max_ape_pct": float("nan"),
                "mean_signed_pct": float("nan")}
    absolute = np.abs(error_pct)
    return {"n": int(error_pct.size), "mape_pct": float(absolute.mean()),
            "p95_ape_pct": float(np.percentile(absolute, 95)), "max_ape_pct": float(absolute.max()),
            "mean_signed_pct": float(error_pct.mean())}


def signed_error_pct(predicted: float | np.ndarray, measured: float | np.ndarray) -> float | np.ndarray:
    """100 (predicted − measured) / measured; NaN where measured is 0 or NaN."""
    predicted = np.asarray(predicted, dtype=float)
    measured = np.asarray(measured, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(measured > 0, 100.0 * (predicted - measured) / measured, np.nan)
    return float(out) if out.ndim == 0 else out


def step_kind(plan: BatchPlan) -> str:
    """The step's kind: `verify` (any draft tokens), `decode-only` (no prefill chunk),
    `prefill-heavy` (prefill tokens are at least half the step's query tokens), else `mixed`."""
    if plan.num_draft_tokens:
        return "verify"
    prefill = plan.num_prefill_tokens
    if prefill == 0:
        return "decode-only"
    return "prefill-heavy" if 2 * prefill >= prefill + plan.num_decode_tokens else "mixed"


def read_measured_steps(run_dir: str | Path) -> tuple[list[BatchPlan], np.ndarray]:
    """An engine run's executed plans and their measured times (seconds), in step order
    (`measured_step_times`).

    Raises:
        ValueError: as `measured_step_times`.
    """
    from gpu_engine.records import read_plans  # the engine's reader; needs no torch

    measured = measured_step_times(run_dir)
    return read_plans(Path(run_dir) / "plans.jsonl"), measured


def measured_step_times(run_dir: str | Path, normalized: bool = True) -> np.ndarray:
    """An engine run's measured step times (seconds), in step order: the measure the run's clock
    used (`engine.json` "timing": the serving thread's CPU time, `measured_cpu_s`, for `cpu`; that
    time × `reference_probe_s` / the step's `host_probe_s` for `cpu-normalized`
    (`profiler.host_speed`), or the CPU time alone if not `normalized`; else the wall time,
    `measured_s`).

    Raises:
        ValueError: no `plans.jsonl` in `run_dir`, an unknown timing, or an entry without the
            times it needs (names the line).
    """
    from profiler.host_speed import seconds_or_none

    path = Path(run_dir) / "plans.jsonl"
    if not path.is_file():
        raise ValueError(f"{path}: no plan log; is {run_dir} the output of `sarathi-sim engine run`?")
    settings_path = Path(run_dir) / "engine.json"
    settings = read_json_object(settings_path, "cannot read") if settings_path.is_file() else {}
    timing = settings.get("timing", "wall")
    if timing not in ("wall", "cpu", "cpu-normalized"):
        raise ValueError(f"{settings_path}: timing {timing!r} is not one of wall, cpu, cpu-normalized")
    keys = {"wall": ("measured_s",), "cpu": ("measured_cpu_s",),
            "cpu-normalized": ("measured_cpu_s", "host_probe_s")}[timing]
    if timing == "cpu-normalized" and not normalized:
        timing, keys = "cpu", ("measured_cpu_s",)
    reference_s = 1.0
    if timing == "cpu-normalized":
        reference_s = seconds_or_none(settings.get("reference_probe_s"))
        if reference_s is None:
            raise ValueError(f"{settings_path}: timing cpu-normalized needs reference_probe_s, a finite positive "
                             f"number of seconds; got {settings.get('reference_probe_s')!r}")
    measured = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not a JSON plan entry ({exc}); is the file truncated?") from None
        missing = [k for k in keys if k not in entry]
        if missing:
            raise ValueError(f"{path}:{number}: plan entry has no {', '.join(missing)} "
                             f"(engine.json says timing {timing!r})")
        values = [seconds_or_none(entry[k], allow_zero=k != "host_probe_s") for k in keys]
        bad = [k for k, v in zip(keys, values) if v is None]
        if bad:
            raise ValueError(f"{path}:{number}: {bad[0]} must be a finite number of seconds (> 0 for host_probe_s), "
                             f"got {entry[bad[0]]!r}")
        measured.append(values[0] * reference_s / values[1] if timing == "cpu-normalized" else values[0])
    return np.asarray(measured)


def step_fidelity(plans: list[BatchPlan], measured_s: np.ndarray, pricer: StepPricer) -> StepComparison:
    """Price each executed plan with `pricer` and pair it with its measured time.

    Args:
        plans: executed plans (`read_measured_steps`), one per step.
        measured_s: float[len(plans)], measured step times in seconds.
        pricer: the step pricer of the point (`experiments.deployment.build_pricer`).
    """
    if len(plans) != len(measured_s):
        raise ValueError(f"{len(plans)} plans but {len(measured_s)} measured step times")
    if not plans:
        raise ValueError("the engine run executed no steps; nothing to verify")
    predicted = np.array([pricer.step_s(p) for p in plans])
    measured = np.asarray(measured_s, dtype=float)
    frame = pd.DataFrame({
        "step": np.arange(len(plans)), "kind": [step_kind(p) for p in plans],
        "num_query_tokens": [int(p.query_tokens.sum()) for p in plans], "batch_size": [len(p) for p in plans],
        "measured_s": measured, "predicted_s": predicted, "error_pct": signed_error_pct(predicted, measured)})
    return StepComparison(frame)


def e2e_fidelity(predicted: dict, measured: dict) -> pd.DataFrame:
    """Predicted against measured request metrics, one row per metric.

    Args:
        predicted, measured: `simulator.metrics.summarize` dicts (keys like `ttft_s_p50`).

    Returns:
        columns metric, predicted, measured, error_pct (signed), for each latency of
        `E2E_LATENCIES` at `E2E_PERCENTILES` and each rate of `E2E_RATES` present in both.
    """
    keys = [f"{name}_p{p}" for name in E2E_LATENCIES for p in E2E_PERCENTILES] + list(E2E_RATES)
    rows = [(k, float(predicted[k]), float(measured[k])) for k in keys if k in predicted and k in measured]
    frame = pd.DataFrame(rows, columns=["metric", "predicted", "measured"])
    frame["error_pct"] = signed_error_pct(frame["predicted"].to_numpy(), frame["measured"].to_numpy())
    return frame


def headline_errors(steps: StepComparison | None, e2e: pd.DataFrame | None) -> dict[str, float]:
    """The errors `--fail-above` checks, in absolute percent: `step_mape` and the P50 TTFT,
    TPOT and E2E of `HEADLINE_E2E` (those that are defined): `signed_headline` without signs."""
    return {k: abs(v) for k, v in signed_headline(steps, e2e).items()}


def signed_headline(steps: StepComparison | None, e2e: pd.DataFrame | None) -> dict[str, float]:
    """The headline errors with their signs, for people: `step_mape` (a mean of absolute errors,
    so unsigned) and the P50 TTFT, TPOT and E2E of `HEADLINE_E2E` as (simulated − measured) /
    measured in percent, + where the simulator is slower. `--fail-above` gates `headline_errors`."""
    out = {}
    if steps is not None:
        out["step_mape"] = steps.summary()["all"]["mape_pct"]
    if e2e is not None:
        for _, row in e2e[e2e["metric"].isin(HEADLINE_E2E)].iterrows():
            if not np.isnan(row["error_pct"]):
                out[row["metric"]] = float(row["error_pct"])
    return out


def headline_text(signed: dict[str, float]) -> str:
    """`signed_headline` as one line: 'step_mape 4.1 %, ttft_s_p50 +24.0 %, tpot_s_p50 -2.3 %'."""
    return ", ".join(f"{k} {v:.1f} %" if k == "step_mape" else f"{k} {v:+.1f} %" for k, v in signed.items())


def over_limit(headline: dict[str, float], limit_pct: float) -> dict[str, float]:
    """The headline errors above `limit_pct`, or not a number (an error that could not be computed
    passes no gate); empty when every one is within it."""
    return {k: v for k, v in headline.items() if not v <= limit_pct}


def simulate_summary(point, pricer: StepPricer) -> dict:
    """Simulate `point`'s trace with `pricer` (as `experiments.point.run_point` does, with this
    pricer); return `simulator.metrics.summarize`'s dict."""
    return simulate_point(point, pricer).summary


def simulate_point(point, pricer: StepPricer):
    """Simulate `point`'s trace with `pricer`; the `simulator.simulate.SimulationResult`."""
    from experiments.deployment import (async_scheduling_on, build_frontend, build_outcome_fn, build_scheduler_config,
                                        build_schedulers, build_step_variance)
    from experiments.point import load_requests
    from simulator.simulate import simulate

    requests, _ = load_requests(point.trace)
    schedulers = build_schedulers(point, build_scheduler_config(point))
    return simulate(requests, schedulers, pricer, outcome_fn=build_outcome_fn(point), router=point.engine.router,
                    seed=point.engine.seed, data_parallel=point.engine.data_parallel_size > 1,
                    async_scheduling=async_scheduling_on(point), frontend=build_frontend(point),
                    step_variance=build_step_variance(point))
