"""The xPyD search: for a GPU budget and per-request TTFT/TPOT SLOs, the prefill/decode split and
per-pool tensor parallelism with the most goodput per GPU, against the best colocated layout of
the same GPUs (Sarathi-style chunked prefill, the point's `engine:`).

Goodput as DistServe defines it (Zhong et al., OSDI'24, §2.1 and §6.1): the highest request
rate at which at least `attainment` (90 % in its experiments) of the requests meet *both* the
TTFT and the TPOT SLO, divided by the GPUs used. Here the SLOs are the config's `goodput:`
thresholds (`ttft_s`, `tpot_s`; `e2e_s` too if set), the rate is found by the project's
bisection (`experiments.planning.capacity.find_capacity`) on trials of `num_requests` with warm-up
and drain trimmed, and a rejected request counts as missing its SLOs.

Each layout's search is repeated for `seeds` seeds (as the colocated capacity search's
`search.seeds`): repetition k runs the point with its trace's and engine's seeds + k, so one
seed is exactly the point as configured. A layout's capacity is the mean over its seeds with a
Student-t 95 % interval (`experiments.planning.capacity.confidence_interval`, shared with the
capacity search); the ranking and the best-of-each-kind comparison say where two intervals
overlap (the difference is not resolved at these seeds) instead of ranking on the means alone.

Run (experiments/cli/xpyd.py):
    .venv/bin/sarathi-sim search-xpyd CONFIG.yaml --gpus 8 [--tp 1,2] [--pp 1,2] [--dp 1,2] [--ep off,on]
                                      [--seeds 3] [--out DIR] [--jobs N] [--backend local|ray [--ray-address ADDR]]

writes, into a run folder (`experiments.outputs.RunFolder`, every file whole),
`disaggregation.csv` (one row per layout: kind, label, GPUs, capacity and goodput per GPU with
their intervals, capacity by seed, how it stands against the best, trials, error),
`disaggregation.md` (the table, best first, what the intervals resolve, the best
disaggregated layout against the best colocated one, the sustained-load rule, warnings and the
best layout's deploy commands), `disaggregation.html` (the same as one page) and
`disaggregation.png` (goodput per GPU of every layout, with its interval).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
from pydantic import ValidationError

from experiments.config import (SearchConfig, SweepConfig, cluster_label, describe_point, repetition_seed_problem,
                                validation_problems)
from experiments.planning.capacity import confidence_interval, find_capacity, short_trials_warning
from experiments.planning.repetitions import file_trace_seeds_warning, seeds_note, trial_point
from experiments.planning.layouts import MAX_LAYOUT_GPUS, layout_problem
from experiments.planning.layouts import Layout as ParallelLayout
from experiments.planning.search import capacity_row
from experiments.planning.deploy import deploy_commands
from experiments.planning.steady_state import drift_floor_s, rule_text, run_until_decided
from experiments.planning.trial_length import DEFAULT_MAX_SCALE, trial_length
from experiments.point import run_point
from profiler import get_model_spec

DEFAULT_ATTAINMENT = 0.9  # DistServe's SLO attainment target
# Seeds per layout: the capacity search's `search.seeds`, its default and bound.
DEFAULT_SEEDS = SearchConfig.model_fields["seeds"].default
MAX_SEEDS = next(m.le for m in SearchConfig.model_fields["seeds"].metadata if getattr(m, "le", None) is not None)


@dataclass
class Layout:
    """One way to use the GPUs: `kind` "colocated" or "disaggregated", its point, its GPUs."""

    kind: str
    point: SweepConfig
    gpus: int

    @property
    def label(self) -> str:
        """'colocated 2x TP2', 'colocated 1x TP2 DP2 EP4', or the pools' (`cluster_label`)."""
        if self.kind == "colocated":
            e = self.point.engine
            shape = ParallelLayout(e.tensor_parallel_size, e.pipeline_parallel_size, e.data_parallel_size,
                                   e.enable_expert_parallel)
            return f"colocated {e.replicas}x {shape_label(shape)}"
        return cluster_label(self.point)


def shape_label(shape: ParallelLayout) -> str:
    """An instance shape as the labels write it (`cluster_label`'s pools): 'TP2', 'TP1 DP2 EP2'."""
    pp = f" PP{shape.pipeline_parallel_size}" if shape.pipeline_parallel_size > 1 else ""
    dp = f" DP{shape.data_parallel_size}" if shape.data_parallel_size > 1 else ""
    ep = f" EP{shape.data_parallel_size * shape.tensor_parallel_size}" if shape.enable_expert_parallel else ""
    return f"TP{shape.tensor_parallel_size}{pp}{dp}{ep}"


def instance_shapes(model, gpus: int, tensor_parallel_sizes=(1, 2, 4, 8), pipeline_parallel_sizes=(1,),
                    data_parallel_sizes=(1,), expert_parallel=(False,)) -> list[ParallelLayout]:
    """The instance shapes (one engine, replicas 1) of at most `gpus` GPUs crossing the degrees,
    by TP, then PP, DP, EP: TP × PP × DP GPUs, DP > 1 only without PP (not modelled together,
    `experiments.config._check_parallel_layout`), EP only for a mixture of experts and only
    where DP × TP > 1 (EP 1 is no expert parallelism: that shape once, EP off). Shapes the model
    cannot take (`experiments.planning.layouts.layout_problem`: TP not splitting its heads, PP
    above its layers, an MoE's EP above its experts or TP not dividing its expert width) are
    left out.

    Raises:
        ValueError: expert parallelism asked of a dense model.
    """
    if any(expert_parallel) and model.moe is None:
        raise ValueError(f"expert parallelism (--ep on): {model.name} is a dense model (no experts)")
    shapes: list[ParallelLayout] = []
    for tp in sorted(set(tensor_parallel_sizes)):
        for pp in sorted(set(pipeline_parallel_sizes)):
            for dp in sorted(set(data_parallel_sizes)):
                if tp * pp * dp > gpus or (dp > 1 and pp > 1):
                    continue
                for ep in sorted(set(expert_parallel)):
                    shape = ParallelLayout(tp, pp, dp, bool(ep) and dp * tp > 1)
                    if shape not in shapes and layout_problem(model, shape) is None:
                        shapes.append(shape)
    return shapes


def layouts(base: SweepConfig, gpus: int, tensor_parallel_sizes: tuple[int, ...] = (1, 2, 4, 8),
            pipeline_parallel_sizes: tuple[int, ...] = (1,), data_parallel_sizes: tuple[int, ...] = (1,),
            expert_parallel: tuple[bool, ...] | None = None) -> list[Layout]:
    """Every layout of exactly `gpus` GPUs, an instance being one of `instance_shapes` (TP × PP ×
    DP GPUs; `expert_parallel` None: the base engine's `enable_expert_parallel`): colocated
    replicas of one instance shape (a DP engine only alone: replicas of a DP group are not
    modelled), and xPyD with x·size_p + y·size_d = gpus (x, y >= 1), each pool's instances one
    vLLM engine of that shape (a DP instance: its ranks behind vLLM's DP balancer,
    simulator/disaggregated.py). The pools keep the base's `cluster:` settings (link, chunk
    sizes, ...) if it has one, else a prefill pool with the base engine and a decode pool the
    same; the layout sets their parallel keys (TP, PP, DP, EP), in place of the base's (a base's
    `engine.data_parallel_size` or a pool's is not kept: an instance is exactly its shape's GPUs).

    For a dense model a DP instance's ranks are independent engines (vLLM
    vllm/v1/engine/core.py `run_engine_core`), so DP D of a dense model is close to D replicas
    and differs only by vLLM's balancer against the pool's router; for a mixture of experts the
    ranks share the MoE layers and step in lockstep, a layout of its own.

    Raises:
        ValueError: gpus outside 1..`MAX_LAYOUT_GPUS` (as `layouts: {gpus: N}`), expert
            parallelism for a dense model, no valid layout (e.g. only TP degrees the model cannot
            use), or a layout the base's other settings rule out (naming the layout and the key).
    """
    if gpus < 1 or gpus > MAX_LAYOUT_GPUS:
        raise ValueError(f"GPU budget (--gpus) {gpus}: expected 1 to {MAX_LAYOUT_GPUS} GPUs (as layouts.gpus)")
    model = get_model_spec(base.model)
    if expert_parallel is None:
        expert_parallel = (base.engine.enable_expert_parallel,)
    shapes = instance_shapes(model, gpus, tensor_parallel_sizes, pipeline_parallel_sizes, data_parallel_sizes,
                             expert_parallel)
    tree = base.model_dump(exclude_unset=True)
    tree.pop("variants", None)
    engine = dict(tree.get("engine", {}))
    engine.pop("replicas", None)
    engine.pop("num_gpus", None)  # the check of a shape the layout replaces: its GPUs are `gpus`
    cluster = tree.pop("cluster", None) or {}
    # A cluster's pools set their own router and read no overlap weight (`experiments.config.
    # check_cluster` refuses one beside cluster:): the colocated engine's stay out of the xPyD points,
    # and so do its parallel keys: each pool's are its shape's.
    pool_engine = {k: v for k, v in engine.items()
                   if k not in ("router", "router_overlap_weight", *_parallel_keys(ParallelLayout()))}
    found = []
    for shape in shapes:
        replicas = gpus // shape.gpus
        if gpus % shape.gpus == 0 and (shape.data_parallel_size == 1 or replicas == 1):
            colocated = {**tree, "engine": {**engine, **_parallel_keys(shape), "replicas": replicas,
                                            "router": engine.get("router", "least_outstanding")}}
            label = f"colocated {replicas}x {shape_label(shape)}"
            found.append(Layout("colocated", _validated(colocated, label), gpus))
    for shape_p in shapes:
        for shape_d in shapes:
            for x in range(1, gpus // shape_p.gpus + 1):
                rest = gpus - x * shape_p.gpus
                if rest < shape_d.gpus or rest % shape_d.gpus:
                    continue
                pools = {}
                for name, replicas, shape in (("prefill", x, shape_p), ("decode", rest // shape_d.gpus, shape_d)):
                    spec = dict(cluster.get(name, {}))
                    spec["replicas"] = replicas
                    spec["engine"] = {**spec.get("engine", {}), **_parallel_keys(shape)}
                    pools[name] = spec
                point = {**tree, "engine": pool_engine, "cluster": {**cluster, **pools}}
                label = f"{x}P({shape_label(shape_p)}) {rest // shape_d.gpus}D({shape_label(shape_d)})"
                found.append(Layout("disaggregated", _validated(point, label), gpus))
    if not found:
        raise ValueError(f"no layout of {gpus} GPUs with tensor_parallel_size in {tensor_parallel_sizes}, "
                         f"pipeline_parallel_size in {pipeline_parallel_sizes} and data_parallel_size in "
                         f"{data_parallel_sizes} for {model.name}")
    return found


def _validated(tree: dict, layout: str) -> SweepConfig:
    """A layout's point, or ValueError naming the layout and each bad key (not pydantic's dump)."""
    try:
        return SweepConfig.model_validate(tree)
    except ValidationError as exc:
        raise ValueError(f"layout {layout} cannot run from this config: {validation_problems(exc)}") from None


def _parallel_keys(shape: ParallelLayout) -> dict:
    """An instance shape as the engine keys that set it."""
    return {"tensor_parallel_size": shape.tensor_parallel_size, "pipeline_parallel_size": shape.pipeline_parallel_size,
            "data_parallel_size": shape.data_parallel_size, "enable_expert_parallel": shape.enable_expert_parallel}


def slo_attainment(requests: pd.DataFrame, thresholds_s: dict[str, float], trim_fraction: float) -> float:
    """Share of the requests arriving inside the trimmed window that completed within every
    threshold (`ttft_s`, `tpot_s`, `e2e_s`: seconds; a one-token request has no TPOT and meets
    that one). Rejected or truncated requests miss. NaN for no requests.

    Raises:
        ValueError: an unknown threshold key.
    """
    arrivals = requests["arrival_s"].to_numpy()
    if arrivals.size == 0:
        return math.nan
    margin = trim_fraction * (arrivals.max() - arrivals.min())
    window = (arrivals >= arrivals.min() + margin) & (arrivals <= arrivals.max() - margin)
    met = requests["finish_reason"].to_numpy() == "completed"
    for key, limit in thresholds_s.items():
        if key not in ("ttft_s", "tpot_s", "e2e_s"):
            raise ValueError(f"unknown SLO threshold {key!r}; valid: ttft_s, tpot_s, e2e_s")
        values = requests[key].to_numpy()
        met &= (values <= limit) | (np.isnan(values) & (key == "tpot_s"))
    return float(met[window].mean())


def layout_capacity(layout: Layout, thresholds_s: dict[str, float], attainment: float = DEFAULT_ATTAINMENT,
                    qps: tuple[float, float] = (0.5, 8.0), num_requests: int = 1000, seed: int | None = None,
                    precision: float = 0.05, trim_fraction: float = 0.1, max_trials: int = 16,
                    max_qps: float | None = None, cache_dir: Path | None = None, seed_offset: int = 0,
                    max_trial_scale: int = DEFAULT_MAX_SCALE):
    """Highest QPS at which `layout` meets `attainment` (`slo_attainment`), by bisection from the
    bracket `qps`, whose top is doubled while it passes up to `max_qps` (default 64 × qps[1]).
    Each trial is the point's trace at that rate, `num_requests` per instance long (`experiments.
    planning.trial_length`: the same requests per instance whatever the layout, rerun at
    `max_trial_scale` × the requests when undecided), and passes only in steady state
    (`experiments.planning.steady_state`, the sweep's capacity search's rule), seeded by `seed` (None:
    the trace's own `seed`) + `seed_offset`; the engine's `seed` (random routers, speculative
    acceptance) gets `seed_offset` added too (`search`'s repetition k: `experiments.planning.
    repetitions.repetition_point`, shared with the sweep's capacity search). With `cache_dir`, each
    trial's simulation goes through the sweep's results cache there
    (`experiments.planning.sweep.simulate_cached`: keyed by the trial's config without its
    SLOs), so a search run again, e.g. after an interruption, reuses it.

    Returns:
        `experiments.planning.capacity.CapacityResult` (capacity NaN when even qps[0] fails,
        `max_qps` when even that passes; `at_cap`: the trials still undecided at the cap).
    """
    def at(rate: float, size: int) -> SweepConfig:  # a file trace is time-scaled to the rate, cut to `size`
        return trial_point(layout.point, seed_offset, rate, size, trace_seed=seed)

    run = run_point
    if cache_dir is not None:
        from experiments.planning.results_cache import ResultsCache
        from experiments.planning.sweep import simulate_cached

        cache = ResultsCache(cache_dir)

        def run(point: SweepConfig, point_id: int, trim: float):
            return simulate_cached(point, point_id, trim, cache=cache)

    served: dict[float, float] = {}
    at_cap: list[tuple[float, str]] = []

    length = trial_length(layout.point, num_requests, max_trial_scale)
    floor_s = drift_floor_s(thresholds_s)

    def passes(rate: float) -> bool:
        def run_at(size: int):
            result = run(at(rate, size), 0, trim_fraction)
            served[rate] = result.row["throughput_rps"]
            return result

        def record(trial) -> None:
            if trial.at_cap:
                at_cap.append((rate, trial.verdict.value))

        return run_until_decided(run_at, lambda r: slo_attainment(r.requests, thresholds_s, trim_fraction) >= attainment,
                                 length.base, length.next, trim_fraction, floor_s, record)

    result = find_capacity(passes, qps[0], qps[1], precision=precision, max_qps=max_qps or 64 * qps[1],
                           max_trials=max_trials, served_qps=served.get)
    result.at_cap = at_cap
    return result


def search(base: SweepConfig, gpus: int, tensor_parallel_sizes=(1, 2, 4, 8), jobs: int = 1,
           on_done: Callable[[dict], None] | None = None, pipeline_parallel_sizes=(1,), seeds: int = DEFAULT_SEEDS,
           backend: str = "local", ray_address: str | None = None, data_parallel_sizes=(1,),
           expert_parallel: tuple[bool, ...] | None = None, **capacity_kwargs) -> pd.DataFrame:
    """Capacity and goodput per GPU of every layout (`layouts` of the TP, PP and DP degrees and
    expert parallelism off/on), each
    searched `seeds` times (repetition k: the trace's and engine's seeds + k, `layout_capacity`'s
    `seed_offset`), best mean first. Every layout × seed is one task of the sweep's runner
    (`experiments.planning.sweep._run_all`): inline for one local job, else `jobs` worker
    processes, or Ray tasks with `backend="ray"` (`experiments.planning.backends.make_pool`);
    the results do not depend on where they ran. `on_done(row)` is called as each layout's last
    seed ends.

    Columns (capacities in req/s, goodput per GPU = capacity / GPUs):
        kind, label, point, gpus, seeds;
        capacity_qps: mean over seeds, a seed that met the SLOs at no tested rate counting 0
            (its capacity is below the bracket: 0 understates it, never overstates), NaN when
            no seed did; capacity_ci_low, capacity_ci_high: the Student-t 95 % interval of the
            per-seed capacities (`confidence_interval`, as the capacity search's
            `experiments.planning.search.capacity_row`; NaN with one seed, and every stat and
            goodput column NaN where no seed met the SLOs); capacity_ci_high_bracket: the same
            interval's top for the rates each seed's bisection failed at (the true capacity lies
            below that rate: with a 5 % precision several seeds often land on the same passing
            rate, a zero-width interval that alone would over-claim), +inf where a seed never
            failed; capacity_by_seed;
        goodput_per_gpu_qps, goodput_per_gpu_ci_low, goodput_per_gpu_ci_high (= the capacity
            columns / GPUs, the high from capacity_ci_high_bracket): the interval the ranking
            compares;
        vs_best (`standing`); capacity_at_bound (a seed's search failed no trial: it passed at
        the search's top rate, or ran out of trials while doubling; a lower bound only);
        seeds_below_lowest_rate; trials (over all seeds); error (the reason a layout
        could not run, e.g. a model that does not fit its TP degree; None else). Failed layouts
        sort last; the others still finish.

    Raises:
        ValueError: `base` has no `goodput:` thresholds (the SLOs the search meets), a
            closed-loop trace (its load is a number of clients, not a rate), seeds outside 1..20
            (`check_seeds`), or `layouts`'.
        experiments.planning.backends.BackendError: the backend cannot start (Ray missing or
            unreachable).
    """
    found = plan(base, gpus, tensor_parallel_sizes, pipeline_parallel_sizes, data_parallel_sizes, expert_parallel,
                 seeds)
    return search_layouts(base, found, jobs=jobs, on_done=on_done, seeds=seeds, backend=backend,
                          ray_address=ray_address, **capacity_kwargs)


def search_layouts(base: SweepConfig, found: list[Layout], jobs: int = 1, on_done: Callable[[dict], None] | None = None,
                   seeds: int = DEFAULT_SEEDS, backend: str = "local", ray_address: str | None = None,
                   **capacity_kwargs) -> pd.DataFrame:
    """`search` of layouts already planned (`plan`'s, with `base` and `seeds` as planned: the CLI
    plans before claiming its run folder, then searches what it planned instead of building and
    validating every layout again). Same columns, order and errors as `search` after its `plan`."""
    from experiments.planning.sweep import _run_all  # the sweep's runner: inline, a process pool, or Ray

    calls = {(i, k): (_safe_layout_capacity, (layout, base.goodput, {**capacity_kwargs, "seed_offset": k}))
             for i, layout in enumerate(found) for k in range(seeds)}
    outcomes: dict[int, dict[int, object]] = {i: {} for i in range(len(found))}
    rows: dict[int, dict] = {}
    for (i, k), outcome in _run_all(calls, max(1, min(jobs, len(calls))), backend, ray_address):
        outcomes[i][k] = outcome
        if len(outcomes[i]) == seeds:
            rows[i] = layout_row(found[i], [outcomes[i][k] for k in range(seeds)])
            if on_done is not None:
                on_done(rows[i])
    return ranked([rows[i] for i in range(len(found))])


def ranked(rows: list[dict]) -> pd.DataFrame:
    """`layout_row`s as `search`'s frame: best mean goodput per GPU first (colocated before
    disaggregated on a tie, failed layouts last), with `vs_best` (`standing`)."""
    frame = pd.DataFrame(rows)
    # Failed layouts after those that ran (both have NaN goodput where every seed was below the bracket).
    frame = frame.assign(failed=frame["error"].notna()).sort_values(
        ["failed", "goodput_per_gpu_qps", "kind"], ascending=[True, False, True], ignore_index=True,
        na_position="last").drop(columns="failed")
    frame["vs_best"] = standing(frame)
    return frame


def plan(base: SweepConfig, gpus: int, tensor_parallel_sizes=(1, 2, 4, 8), pipeline_parallel_sizes=(1,),
         data_parallel_sizes=(1,), expert_parallel: tuple[bool, ...] | None = None,
         seeds: int = DEFAULT_SEEDS) -> list[Layout]:
    """The layouts `search` would run, after its checks (the CLI calls it before claiming a run
    folder, so bad input leaves nothing behind).

    Raises:
        ValueError: no `goodput:` thresholds, a closed-loop trace, bad seeds (`check_seeds`),
            or `layouts`'.
    """
    from experiments.config import ClosedLoopTrace

    if not base.goodput:
        raise ValueError("the xPyD search meets the goodput: thresholds (ttft_s, tpot_s); the config sets none")
    if isinstance(base.trace, ClosedLoopTrace):
        raise ValueError(f"the xPyD search sets a request rate; a {base.trace.kind} trace is sized by its clients "
                         "instead: use an open-loop trace (profile, synthetic, poisson, file)")
    check_seeds(base, seeds)
    return layouts(base, gpus, tensor_parallel_sizes, pipeline_parallel_sizes, data_parallel_sizes, expert_parallel)


def check_seeds(base: SweepConfig, seeds: int) -> None:
    """`seeds` as `search.seeds` takes it (1..20), and every repetition's seed a valid one.

    Raises:
        ValueError: seeds not a whole number in 1..20, or trace/engine seed + seeds − 1 above
            2**32 − 1 (numpy's legacy RandomState, `experiments.config.repetition_seed_problem`).
    """
    if isinstance(seeds, bool) or not isinstance(seeds, int) or not 1 <= seeds <= MAX_SEEDS:
        raise ValueError(f"seeds {seeds!r}: expected a whole number from 1 to {MAX_SEEDS} (as search.seeds); "
                         "each layout's search runs once per seed")
    problem = repetition_seed_problem(base, seeds)
    if problem is not None:
        raise ValueError(problem)


def layout_row(layout: Layout, outcomes: list) -> dict:
    """A layout's row of `search` from its per-seed outcomes (`CapacityResult`, or the error
    text of a seed that could not run: the whole layout is then failed, with the first error)."""
    row = {"kind": layout.kind, "label": layout.label, "point": describe_point(layout.point), "gpus": layout.gpus,
           "seeds": len(outcomes)}
    errors = [o for o in outcomes if isinstance(o, str)]
    if errors:
        row.update(dict.fromkeys(_STAT_COLUMNS, math.nan), capacity_by_seed=None, capacity_at_bound=False,
                   seeds_below_lowest_rate=0, trials=sum(len(o.trials) for o in outcomes if not isinstance(o, str)),
                   error=errors[0])
        return row
    capacities = [o.capacity_qps for o in outcomes]
    # The sweep's capacity row: a seed below the bracket counts 0, every seed below is NaN throughout.
    stats = capacity_row(layout.label, 0, capacities, math.inf)
    mean, low, high = stats["capacity_qps"], stats["capacity_ci_low"], stats["capacity_ci_high"]
    failed_at = [_failed_at(o) for o in outcomes]
    if len(outcomes) < 2 or math.isnan(mean):  # no interval, or no capacity to bound
        bracket_high = math.nan
    elif math.inf in failed_at:  # a seed that never failed: no upper end
        bracket_high = math.inf
    else:
        bracket_high = confidence_interval(failed_at)[2]
    row.update(capacity_qps=mean, capacity_ci_low=low, capacity_ci_high=high,
               capacity_ci_high_bracket=bracket_high, capacity_by_seed=stats["capacity_by_seed"],
               goodput_per_gpu_qps=mean / layout.gpus, goodput_per_gpu_ci_low=low / layout.gpus,
               goodput_per_gpu_ci_high=bracket_high / layout.gpus,
               capacity_at_bound=math.inf in failed_at, seeds_below_lowest_rate=stats["seeds_below_lowest_rate"],
               trials=sum(len(o.trials) for o in outcomes), **_at_cap_columns(outcomes), error=None)
    return row


def _at_cap_columns(outcomes: list) -> dict:
    """`trials_at_cap` (over seeds) and `at_cap_qps` ('21.7 passed, 22.6 failed', as the sweep's
    capacity rows, `experiments.planning.search.sustained_summary`) of a layout's bisections."""
    capped = [(qps, verdict) for o in outcomes for qps, verdict in getattr(o, "at_cap", [])]
    return {"trials_at_cap": len(capped), "at_cap_qps": ", ".join(f"{qps:.4g} {verdict}" for qps, verdict in capped)}


def at_cap_warnings(frame: pd.DataFrame, cap_scale: int) -> list[str]:
    """One line per layout with trials still undecided at the cap (`cap_scale` × the first trial's
    requests), as the sweep's capacity report words it (`experiments.planning.capacity_report`)."""
    if "trials_at_cap" not in frame:
        return []
    return [f"{r['label']}: {int(r['trials_at_cap'])} trial(s) still undecided at the cap of {cap_scale}× the first "
            f"trial's requests (rate and verdict: {r['at_cap_qps']}); a trial that still drifted or fell short of the "
            "offered rate failed, one short only of effectively independent samples was judged on its SLOs at that "
            "length. Raise search.max_trial_scale to decide them on longer trials."
            for _, r in frame[frame["trials_at_cap"].fillna(0) > 0].iterrows()]


_STAT_COLUMNS = ("capacity_qps", "capacity_ci_low", "capacity_ci_high", "capacity_ci_high_bracket",
                 "goodput_per_gpu_qps", "goodput_per_gpu_ci_low", "goodput_per_gpu_ci_high")


def _failed_at(result) -> float:
    """The lowest rate above a bisection's capacity at which its trial failed (the capacity lies
    below it), the lowest rate tried when even that failed, +inf when no trial failed."""
    capacity = 0.0 if math.isnan(result.capacity_qps) else result.capacity_qps
    failed = [qps for qps, ok in result.trials if not ok and qps > capacity]
    return min(failed) if failed else math.inf


def _safe_layout_capacity(layout: Layout, thresholds_s: dict[str, float], capacity_kwargs: dict):
    """`layout_capacity`, or the error text of a layout that cannot run (the sweep's rule: a
    point's own failure is its result; anything else is a bug and propagates)."""
    from experiments.planning.sweep import POINT_ERRORS, _error_text

    try:
        return layout_capacity(layout, thresholds_s, **capacity_kwargs)
    except POINT_ERRORS as exc:
        return _error_text(exc)


# How a layout stands against the best (first) one, `search`'s vs_best column.
BEST, UNRESOLVED, BELOW, NO_INTERVAL = "best", "not resolved", "below", "no interval (one seed)"
NONE_MET = "none met the SLOs"  # every layout that ran: no tested rate met the SLOs, so none is best
# Where the lowest rate fails, what to change (the capacity search's advice, experiments.planning.capacity_report).
LOWER_QPS = "lower --qps (or search.qps) to measure"


def intervals_overlap(a, b) -> bool:
    """Whether two rows' goodput-per-GPU intervals ([ci_low, ci_high], bounds included) overlap:
    their difference is then not resolved at these seeds. False when either has none (NaN)."""
    return bool(a["goodput_per_gpu_ci_low"] <= b["goodput_per_gpu_ci_high"]
                and b["goodput_per_gpu_ci_low"] <= a["goodput_per_gpu_ci_high"])


def standing(frame: pd.DataFrame) -> list[str | None]:
    """For each row of a sorted `search` frame: `best` (the first layout that ran and met the SLOs
    at some tested rate), `not resolved` (its interval overlaps the best's), `below` (its
    interval lies wholly below the best's), `no interval (one seed)`, `none met the SLOs` for
    every layout that ran when none met them at any tested rate (none is best: 0 against 0), or
    None for a layout that could not run."""
    ran = frame["error"].isna()
    if not ran.any():
        return [None] * len(frame)
    if not _met_some_rate(frame[ran]).any():
        return [NONE_MET if ok else None for ok in ran]
    first = frame.index[ran & _met_some_rate(frame)][0]
    best = frame.loc[first]
    labels = []
    for (i, row), ok in zip(frame.iterrows(), ran):
        if not ok:
            labels.append(None)
        elif i == first:
            labels.append(BEST)
        elif row["seeds"] < 2:
            labels.append(NO_INTERVAL)
        else:
            labels.append(UNRESOLVED if intervals_overlap(row, best) else BELOW)
    return labels


def ranking(frame: pd.DataFrame) -> str:
    """One sentence: what the intervals resolve about the first place of a `search` frame."""
    ran = frame[frame["error"].isna()]
    if ran.empty:
        return "no layout ran"
    if not _met_some_rate(ran).any():
        return (f"no layout met the SLOs at any tested rate (every seed of the {len(ran)} that ran failed even the "
                f"lowest rate), so none is ranked: {LOWER_QPS} them")
    best, seeds = ran.iloc[0], int(ran.iloc[0]["seeds"])
    if len(ran) == 1:
        return f"only {best['label']} ran"
    if seeds < 2:
        return ("one seed per layout: no confidence intervals, so no difference in this ranking is resolved "
                "(--seeds ≥ 2, or search.seeds, gives 95 % intervals)")
    tied = ran[ran["vs_best"] == UNRESOLVED]
    if tied.empty:
        return (f"{best['label']} leads: its 95 % interval over {seeds} seeds lies above every other layout's "
                "(resolved)")
    names = ", ".join(tied["label"].iloc[:4]) + (", …" if len(tied) > 4 else "")
    return (f"{best['label']} has the highest mean, but its 95 % interval over {seeds} seeds overlaps those of "
            f"{len(tied)} other layout{'s' if len(tied) > 1 else ''} ({names}): their order is not resolved at "
            f"{seeds} seeds (more seeds or longer trials may resolve it)")


def comparison(frame: pd.DataFrame) -> str:
    """One sentence: the best disaggregated layout against the best colocated one (among the
    layouts that ran), by mean goodput per GPU, and whether their intervals resolve it. No
    ratio where a kind has no layout to compare: none searched, every one failed (the first's
    error is given), or none met the SLOs at any tested rate (its capacity lies below the
    bracket, not at 0: a ratio would be 0/0 or x/0)."""
    ran = frame[frame["error"].isna()] if "error" in frame else frame
    for kind in ("disaggregated", "colocated"):
        searched = frame[frame["kind"] == kind]
        if searched.empty:
            return f"no {kind} layout was searched (none of these GPUs and degrees), so the kinds are not compared"
        if not (ran["kind"] == kind).any():
            first = searched.iloc[0]
            return (f"every {kind} layout failed ({len(searched)}; {first['label']}: {first['error']}), so the kinds "
                    "are not compared")
    best = {kind: ran[ran["kind"] == kind].iloc[0] for kind in ("disaggregated", "colocated")}
    met = {kind: bool(pd.notna(row["capacity_qps"])) for kind, row in best.items()}
    if not any(met.values()):
        return f"no layout met the SLOs at any tested rate, so there is no ratio: {LOWER_QPS} them"
    if not all(met.values()):
        kind = next(kind for kind, ok in met.items() if ok)
        other = next(kind for kind, ok in met.items() if not ok)
        label = best[kind]["label"].removeprefix("colocated ")
        return (f"best {kind} {label}: {per_gpu_text(best[kind])} req/s per GPU; no {other} layout met the SLOs at "
                f"any tested rate (its capacity lies below the lowest), so there is no ratio: {LOWER_QPS} it")
    d, c = best["disaggregated"], best["colocated"]
    ratio = f"{d['goodput_per_gpu_qps'] / c['goodput_per_gpu_qps']:.2f}×"
    seeds = int(min(d["seeds"], c["seeds"]))
    if seeds < 2:
        verdict = "one seed: no interval, so whether this difference is real is not known (--seeds ≥ 2 gives one)"
    elif intervals_overlap(d, c):
        verdict = f"their 95 % intervals overlap: the difference is not resolved at {seeds} seeds"
    else:
        ahead = "disaggregated" if d["goodput_per_gpu_qps"] > c["goodput_per_gpu_qps"] else "colocated"
        verdict = f"their 95 % intervals do not overlap: {ahead} is ahead at {seeds} seeds"
    return (f"best disaggregated {d['label']}: {per_gpu_text(d)} req/s per GPU; best colocated "
            f"{c['label'].removeprefix('colocated ')}: {per_gpu_text(c)} req/s per GPU; ratio {ratio}; {verdict}")


def _met_some_rate(rows: pd.DataFrame) -> pd.Series:
    """Whether each `search` row met the SLOs at some tested rate (a capacity; NaN: every seed
    failed even the lowest rate, or the layout could not run)."""
    return rows["capacity_qps"].notna()


def per_gpu_text(row) -> str:
    """Mean goodput per GPU, with its interval where it has one: `1.234 [1.100, 1.300]`; `none
    (below the lowest rate)` where no seed met the SLOs at any tested rate."""
    if math.isnan(row["goodput_per_gpu_qps"]):
        return "none (below the lowest rate)"
    text = f"{row['goodput_per_gpu_qps']:.3f}"
    if row["seeds"] >= 2:
        text += f" [{_bound(row['goodput_per_gpu_ci_low'])}, {_bound(row['goodput_per_gpu_ci_high'])}]"
    return text


def _bound(value: float) -> str:
    return "∞" if value == math.inf else f"{value:.3f}"


def search_warnings(base: SweepConfig, seeds: int, num_requests: int | None) -> list[str]:
    """The cautions of a search's settings, for the terminal and disaggregation.md alike: trials
    shorter than `capacity.SHORT_TRIAL_REQUESTS` (`short_trials_warning`, the sweep's capacity
    report's), and several seeds of a file trace (`repetitions.file_trace_seeds_warning`)."""
    found = [short_trials_warning(num_requests, "--num-requests (or search.num_requests)")
             if num_requests is not None else None,
             file_trace_seeds_warning(base, seeds, "--seeds (or search.seeds)")]
    return [text for text in found if text]


def write_report(frame: pd.DataFrame, base: SweepConfig, out: Path, attainment: float,
                 num_requests: int | None = None, layouts: list[Layout] | None = None,
                 max_trial_scale: int = DEFAULT_MAX_SCALE) -> list[Path]:
    """disaggregation.csv, .md, .html and .png in `out` (each written atomically,
    `experiments.outputs`); a layout that could not run is a row with its error, and has no bar.
    The .md's warnings are `search_warnings` (trials of `num_requests` per instance; None: not
    known, no trial-length caution) and `at_cap_warnings` (trials undecided at the
    `max_trial_scale` cap); it states the sustained-load rule, and with `layouts` (the searched
    ones) the best layout's deploy commands (`experiments.planning.deploy.deploy_commands`). The
    .html is the .md as one page (`html_page.markdown_page`), the plot embedded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.outputs import save_figure, write_csv, write_text
    from experiments.planning.html_page import markdown_page

    out.mkdir(parents=True, exist_ok=True)
    slos = ", ".join(f"{k} ≤ {v:g} s" for k, v in base.goodput.items())
    seeds = int(frame["seeds"].iloc[0])
    lines = [f"# xPyD search: {base.model} on {frame['gpus'].iloc[0]} GPUs", "",
             f"Goodput = the highest rate at which ≥ {attainment:.0%} of requests meet {slos} "
             "(DistServe's definition), per GPU.", "",
             f"Each layout searched with {seeds_note(base, seeds)}: the mean, and the Student-t 95 % interval over "
             "the seeds (experiments.planning.capacity.confidence_interval), its top taken over the rates each "
             "seed's bisection failed at (the capacity lies below them); a seed that met the SLOs at no tested "
             "rate counts as 0. Layouts whose intervals overlap are not told apart.", "",
             f"Ranking: {ranking(frame)}.", "", f"{comparison(frame)}.", "",
             *_sustained_lines(base, num_requests, max_trial_scale),
             *(line for text in [*search_warnings(base, seeds, num_requests), *at_cap_warnings(frame, max_trial_scale)]
               for line in (f"Warning: {text}", "")),
             "| layout | kind | capacity (req/s) | goodput per GPU (req/s) | vs the best | capacity by seed | trials |",
             "|---|---|---|---|---|---|---|"]
    failed = frame["error"].notna()
    for (_, r), bad in zip(frame.iterrows(), failed):
        if bad:
            lines.append(f"| {r['label']} | {r['kind']} | failed: {_cell(r['error'])} | | | | |")
        else:
            bound = " (a seed failed no trial: a lower bound)" if r.get("capacity_at_bound") else ""
            capacity = "below the lowest rate" if math.isnan(r["capacity_qps"]) else f"{r['capacity_qps']:.3f}"
            if seeds >= 2 and not math.isnan(r["capacity_qps"]):
                capacity += f" [{_bound(r['capacity_ci_low'])}, {_bound(r['capacity_ci_high_bracket'])}]"
            lines.append(f"| {r['label']} | {r['kind']} | {capacity}{bound} | {per_gpu_text(r)} | {r['vs_best']} | "
                         f"{r['capacity_by_seed']} | {r['trials']} |")
    lines += _deploy_lines(frame, layouts)
    ran = frame[~failed]
    fig, ax = plt.subplots(figsize=(8, 0.35 * max(len(ran), 1) + 1.2))
    colours = ["tab:blue" if k == "disaggregated" else "tab:orange" for k in ran["kind"]]
    mean = np.nan_to_num(ran["goodput_per_gpu_qps"].to_numpy(), nan=0.0)  # below the lowest rate: no bar
    # Error bars to the interval's ends (none for one seed; an unbounded top drawn to the mean).
    low = np.nan_to_num(mean - ran["goodput_per_gpu_ci_low"].to_numpy(), nan=0.0)
    high = np.nan_to_num(ran["goodput_per_gpu_ci_high"].to_numpy() - mean, nan=0.0, posinf=0.0)
    ax.barh(ran["label"][::-1], mean[::-1], xerr=[low[::-1], high[::-1]], color=colours[::-1], capsize=3)
    ax.set_xlabel(f"goodput per GPU (req/s at {attainment:.0%} SLO attainment; 95 % interval over {seeds} seeds)"
                  if seeds >= 2 else f"goodput per GPU (req/s at {attainment:.0%} SLO attainment; one seed)")
    ax.set_title("xPyD (blue) vs colocated (orange)")
    fig.tight_layout()
    lines += ["", "![goodput per GPU](disaggregation.png)"]
    try:  # the page embeds the plot, so it comes last
        written = [write_csv(out / "disaggregation.csv", frame),
                   write_text(out / "disaggregation.md", "\n".join(lines) + "\n"),
                   save_figure(fig, out / "disaggregation.png", dpi=110)]
    finally:
        plt.close(fig)
    written.append(write_text(out / "disaggregation.html", markdown_page(lines, f"xPyD search: {base.model}", out)))
    return written


def _sustained_lines(base: SweepConfig, num_requests: int | None, max_trial_scale: int) -> list[str]:
    """The trial length and the sustained-load rule every layout's trials were judged by."""
    trials = (f"Trials: {num_requests:,} requests per instance (a layout's replicas × DP over both pools, so every "
              f"instance sees as many), rerun once at {max_trial_scale}× the requests when undecided. "
              if num_requests is not None else "")
    return [f"{trials}Sustained-load rule: {rule_text(base.goodput)}.", ""]


def _deploy_lines(frame: pd.DataFrame, layouts: list[Layout] | None) -> list[str]:
    """'## Deploy the best layout' with its commands, when the best layout ran and is known."""
    ran = frame[frame["error"].isna()] if "error" in frame else frame
    if layouts is None or ran.empty or not ran["capacity_qps"].notna().any():
        return []
    best = next((layout for layout in layouts if layout.label == ran.iloc[0]["label"]), None)
    if best is None:
        return []
    try:
        commands = deploy_commands(best.point)
    except ValueError as exc:  # a model without a known repository: say so instead of a command
        return ["", f"## Deploy {best.label}", "", f"No command: {exc}"]
    return ["", f"## Deploy {best.label}", "", "```bash", *commands, "```"]


def _cell(text) -> str:
    """A Markdown table cell of free text (no pipes, one line)."""
    return " ".join(str(text).replace("|", "/").split())
