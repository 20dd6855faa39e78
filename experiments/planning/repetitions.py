"""Repetitions of a capacity search: which seeds repetition k runs, and what they vary.

Both capacity searches repeat their bisection `seeds` times for a 95 % interval: the sweep's
(`experiments.planning.search`, config `search.seeds`) and the xPyD search's
(`experiments.planning.disaggregation`, `--seeds`). Repetition k runs the point with its trace's
`seed` + k and its engine's `seed` + k, so repetition 0 is exactly the point as configured and a
`--set trace.seed=7` moves every repetition (7, 8, 9), as rerunning the point by hand would.

A file trace has no seed: every repetition replays the same requests and only the engine's random
draws vary (speculative acceptance with `split_n`, a `random` router). Its interval is then no
confidence interval over the workload, and with neither draw every repetition repeats the same
simulation (a zero-width "interval"): `file_trace_seeds_warning` says so, and the reports give it.
"""
from __future__ import annotations

from experiments.config import FileTrace, SweepConfig, repetition_seed_problem


def repetition_point(point: SweepConfig, k: int, trace_seed: int | None = None) -> SweepConfig:
    """`point` as repetition `k` runs it: the trace's seed (`trace_seed` in its place when given)
    + k, where the trace has one (a file trace has none: it is replayed unchanged), and the
    engine's seed + k (its random routers and speculative acceptance).

    Raises:
        ValueError: a seed + k above 2**32 − 1, the largest seed (`experiments.config.
            repetition_seed_problem`, which checks a whole search's when the config loads).
    """
    has_seed = "seed" in type(point.trace).model_fields
    if trace_seed is not None and has_seed:
        point = point.model_copy(update={"trace": point.trace.model_copy(update={"seed": trace_seed})})
    problem = repetition_seed_problem(point, k + 1)
    if problem is not None:
        raise ValueError(problem)
    update = {"engine": point.engine.model_copy(update={"seed": point.engine.seed + k})}
    if has_seed:
        update["trace"] = point.trace.model_copy(update={"seed": point.trace.seed + k})
    return point.model_copy(update=update)


def trial_point(point: SweepConfig, k: int, qps: float, num_requests: int,
                trace_seed: int | None = None) -> SweepConfig:
    """Repetition `k` of `point` (`repetition_point`) at `qps`, cut to `num_requests`: the
    trace's `num_requests` where it draws its requests (profile, synthetic), its `max_requests`
    where it reads them from a file (a trace or lengths file); one rule for both capacity searches."""
    repeated = repetition_point(point, k, trace_seed)
    fields = type(repeated.trace).model_fields
    size = "num_requests" if "num_requests" in fields else "max_requests"
    return repeated.model_copy(update={"trace": repeated.trace.model_copy(update={"qps": qps, size: num_requests})})


def seeds_note(point: SweepConfig, seeds: int) -> str:
    """Which seeds the repetitions run, e.g. '3 seeds (trace seeds 7–9, engine seeds 0–2)'; for a
    file trace with several, that they vary only the engine's random draws."""
    trace_seed = getattr(point.trace, "seed", None)
    plural = "s" if seeds > 1 else ""
    engine = f"engine seeds {point.engine.seed}–{point.engine.seed + seeds - 1}" if seeds > 1 else \
        f"engine seed {point.engine.seed}"
    if trace_seed is None:
        varied = ("; the trace is a file, replayed the same for every seed: the seeds vary only the engine's random "
                  "draws (speculative acceptance, random routers)") if seeds > 1 else ""
        return f"{seeds} seed{plural} ({engine}){varied}"
    trace = f"trace seeds {trace_seed}–{trace_seed + seeds - 1}" if seeds > 1 else f"trace seed {trace_seed}"
    return f"{seeds} seed{plural} ({trace}, {engine})"


def file_trace_seeds_warning(point: SweepConfig, seeds: int, seeds_key: str = "search.seeds") -> str | None:
    """The warning for several repetitions of a file trace (None otherwise): the same requests
    every seed, so the interval covers only the engine's random draws; without any, every seed
    repeats one simulation and a zero-width interval is no confidence interval."""
    if seeds < 2 or not isinstance(point.trace, FileTrace):
        return None
    return (f"The trace is a file, replayed the same for each of the {seeds} seeds: the seeds vary only the engine's "
            "random draws (speculative acceptance with split_n, a random router), so the 95 % interval does not "
            "cover the sampling of requests. Without such draws every seed repeats the same simulation (the same "
            f"capacity, a zero-width interval that is not a confidence interval): {seeds_key} 1 gives that capacity "
            f"at 1/{seeds} of the work; for an interval over the workload, use a profile or synthetic trace.")
