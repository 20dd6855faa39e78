"""The xPyD search: for a GPU budget and per-request TTFT/TPOT SLOs, the prefill/decode split and
per-pool tensor parallelism with the most goodput per GPU, against the best colocated layout of
the same GPUs (Sarathi-style chunked prefill, the point's `engine:`).

Goodput as DistServe defines it (Zhong et al., OSDI'24, §2.1 and §6.1): the highest request
rate at which at least `attainment` (90 % in its experiments) of the requests meet *both* the
TTFT and the TPOT SLO, divided by the GPUs used. Here the SLOs are the config's `goodput:`
thresholds (`ttft_s`, `tpot_s`; `e2e_s` too if set), the rate is found by the project's
bisection (`experiments.planning.capacity.find_capacity`) on trials of `num_requests` with warm-up
and drain trimmed, and a rejected request counts as missing its SLOs.

Run (experiments/cli/xpyd.py):
    .venv/bin/sarathi-sim search-xpyd CONFIG.yaml --gpus 8 [--tp 1,2] [--out DIR] [--jobs N]

writes, into a run folder (`experiments.outputs.RunFolder`, every file whole),
`disaggregation.csv` (one row per layout: kind, label, GPUs, capacity, goodput per GPU, trials,
error), `disaggregation.md` (the table, best first, and the best disaggregated layout against
the best colocated one) and `disaggregation.png` (goodput per GPU of every layout).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from experiments.config import SweepConfig, cluster_label, describe_point
from experiments.planning.capacity import find_capacity
from experiments.planning.layouts import tp_pp_problem
from experiments.point import run_point
from profiler import get_model_spec

DEFAULT_ATTAINMENT = 0.9  # DistServe's SLO attainment target


@dataclass
class Layout:
    """One way to use the GPUs: `kind` "colocated" or "disaggregated", its point, its GPUs."""

    kind: str
    point: SweepConfig
    gpus: int

    @property
    def label(self) -> str:
        if self.kind == "colocated":
            e = self.point.engine
            pp = f" PP{e.pipeline_parallel_size}" if e.pipeline_parallel_size > 1 else ""
            return f"colocated {e.replicas}x TP{e.tensor_parallel_size}{pp}"
        return cluster_label(self.point)


def layouts(base: SweepConfig, gpus: int, tensor_parallel_sizes: tuple[int, ...] = (1, 2, 4, 8),
            pipeline_parallel_sizes: tuple[int, ...] = (1,)) -> list[Layout]:
    """Every layout of exactly `gpus` GPUs, an instance being TP × PP GPUs (each (TP, PP) of the
    two lists): colocated replicas of one instance shape, and xPyD with x·(TP_p·PP_p) +
    y·(TP_d·PP_d) = gpus (x, y >= 1). The pools keep the base's `cluster:` settings (link, chunk
    sizes, ...) if it has one, else a prefill pool with the base engine and a decode pool the
    same. TP degrees the model's heads do not split into, and PP degrees above its layers, are
    skipped.

    Raises:
        ValueError: gpus < 1, or no valid layout (e.g. only TP degrees the model cannot use).
    """
    if gpus < 1:
        raise ValueError(f"gpus must be >= 1, got {gpus}")
    model = get_model_spec(base.model)
    shapes = [(tp, pp) for tp in sorted(set(tensor_parallel_sizes)) for pp in sorted(set(pipeline_parallel_sizes))
              if tp * pp <= gpus and pp >= 1 and tp_pp_problem(model, tp, pp) is None]
    tree = base.model_dump(exclude_unset=True)
    tree.pop("variants", None)
    engine = dict(tree.get("engine", {}))
    engine.pop("replicas", None)
    cluster = tree.pop("cluster", None) or {}
    # A cluster's pools set their own router and read no overlap weight (`experiments.config.
    # check_cluster` refuses one beside cluster:): the colocated engine's stay out of the xPyD points.
    pool_engine = {k: v for k, v in engine.items() if k not in ("router", "router_overlap_weight")}
    found = []
    for tp, pp in shapes:
        if gpus % (tp * pp) == 0:
            colocated = {**tree, "engine": {**engine, "tensor_parallel_size": tp, "pipeline_parallel_size": pp,
                                            "replicas": gpus // (tp * pp),
                                            "router": engine.get("router", "least_outstanding")}}
            found.append(Layout("colocated", SweepConfig.model_validate(colocated), gpus))
    for shape_p in shapes:
        for shape_d in shapes:
            size_p, size_d = shape_p[0] * shape_p[1], shape_d[0] * shape_d[1]
            for x in range(1, gpus // size_p + 1):
                rest = gpus - x * size_p
                if rest < size_d or rest % size_d:
                    continue
                pools = {}
                for name, replicas, (tp, pp) in (("prefill", x, shape_p), ("decode", rest // size_d, shape_d)):
                    spec = dict(cluster.get(name, {}))
                    spec["replicas"] = replicas
                    spec["engine"] = {**spec.get("engine", {}), "tensor_parallel_size": tp, "pipeline_parallel_size": pp}
                    pools[name] = spec
                point = {**tree, "engine": pool_engine, "cluster": {**cluster, **pools}}
                found.append(Layout("disaggregated", SweepConfig.model_validate(point), gpus))
    if not found:
        raise ValueError(f"no layout of {gpus} GPUs with tensor_parallel_size in {tensor_parallel_sizes} and "
                         f"pipeline_parallel_size in {pipeline_parallel_sizes} for {model.name}")
    return found


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
                    max_qps: float | None = None, cache_dir: Path | None = None):
    """Highest QPS at which `layout` meets `attainment` (`slo_attainment`), by bisection from the
    bracket `qps`, whose top is doubled while it passes up to `max_qps` (default 64 × qps[1]).
    Each trial is the point's trace at that rate, `num_requests` long, seeded by `seed` (None:
    the trace's own `seed`). With `cache_dir`, each trial's simulation goes through the sweep's
    results cache there (`experiments.planning.sweep.simulate_cached`: keyed by the trial's
    config without its SLOs), so a search run again, e.g. after an interruption, reuses it.

    Returns:
        `experiments.planning.capacity.CapacityResult` (capacity NaN when even qps[0] fails,
        `max_qps` when even that passes).
    """
    trace = layout.point.trace
    fields = type(trace).model_fields
    size = {"num_requests" if "num_requests" in fields else "max_requests": num_requests}
    if "seed" in fields and seed is not None:
        size["seed"] = seed

    def at(rate: float) -> SweepConfig:  # a file trace is time-scaled to the rate, cut to num_requests
        return layout.point.model_copy(update={"trace": trace.model_copy(update={"qps": rate, **size})})

    run = run_point
    if cache_dir is not None:
        from experiments.planning.results_cache import ResultsCache
        from experiments.planning.sweep import simulate_cached

        cache = ResultsCache(cache_dir)

        def run(point: SweepConfig, point_id: int, trim: float):
            return simulate_cached(point, point_id, trim, cache=cache)

    served: dict[float, float] = {}

    def passes(rate: float) -> bool:
        result = run(at(rate), 0, trim_fraction)
        served[rate] = result.row["throughput_rps"]
        return slo_attainment(result.requests, thresholds_s, trim_fraction) >= attainment

    return find_capacity(passes, qps[0], qps[1], precision=precision, max_qps=max_qps or 64 * qps[1],
                         max_trials=max_trials, served_qps=served.get)


def search(base: SweepConfig, gpus: int, tensor_parallel_sizes=(1, 2, 4, 8), jobs: int = 1,
           on_done: Callable[[dict], None] | None = None, pipeline_parallel_sizes=(1,),
           **capacity_kwargs) -> pd.DataFrame:
    """Capacity and goodput per GPU of every layout (`layouts` of the TP and PP degrees), best first; `jobs` worker
    processes search layouts side by side (the results do not depend on it); `on_done(row)` is
    called as each layout's search ends.

    Columns: kind, label, point, gpus, capacity_qps, goodput_per_gpu_qps (capacity / GPUs; 0
    when even the lowest rate fails; NaN for a layout that could not run), capacity_at_bound
    (it passed at the search's top rate: a lower bound only), trials, error (the reason a layout
    could not run, e.g. a model that does not fit its TP degree; None else). Failed layouts
    sort last; the others still finish.

    Raises:
        ValueError: `base` has no `goodput:` thresholds (the SLOs the search meets), a
            closed-loop trace (its load is a number of clients, not a rate), or `layouts`'.
    """
    from experiments.config import ClosedLoopTrace
    from experiments.planning.sweep import _run_all  # the sweep's runner: inline, or a process pool

    if not base.goodput:
        raise ValueError("the xPyD search meets the goodput: thresholds (ttft_s, tpot_s); the config sets none")
    if isinstance(base.trace, ClosedLoopTrace):
        raise ValueError(f"the xPyD search sets a request rate; a {base.trace.kind} trace is sized by its clients "
                         "instead: use an open-loop trace (profile, synthetic, poisson, file)")
    bracket = capacity_kwargs.get("qps", (0.5, 8.0))
    capacity_kwargs = {**capacity_kwargs, "max_qps": capacity_kwargs.get("max_qps") or 64 * bracket[1]}
    found = layouts(base, gpus, tensor_parallel_sizes, pipeline_parallel_sizes)
    calls = {i: (_safe_layout_capacity, (layout, base.goodput, capacity_kwargs)) for i, layout in enumerate(found)}
    rows: dict[int, dict] = {}
    for i, outcome in _run_all(calls, max(1, min(jobs, len(calls))), "local", None):
        layout = found[i]
        row = {"kind": layout.kind, "label": layout.label, "point": describe_point(layout.point), "gpus": gpus}
        if isinstance(outcome, str):
            row.update(capacity_qps=math.nan, goodput_per_gpu_qps=math.nan, capacity_at_bound=False, trials=0,
                       error=outcome)
        else:
            capacity = outcome.capacity_qps
            row.update(capacity_qps=capacity, goodput_per_gpu_qps=0.0 if math.isnan(capacity) else capacity / gpus,
                       capacity_at_bound=bool(capacity >= capacity_kwargs["max_qps"]), trials=len(outcome.trials),
                       error=None)
        rows[i] = row
        if on_done is not None:
            on_done(row)
    frame = pd.DataFrame([rows[i] for i in range(len(found))])
    return frame.sort_values(["goodput_per_gpu_qps", "kind"], ascending=[False, True], ignore_index=True,
                             na_position="last")


def _safe_layout_capacity(layout: Layout, thresholds_s: dict[str, float], capacity_kwargs: dict):
    """`layout_capacity`, or the error text of a layout that cannot run (the sweep's rule: a
    point's own failure is its result; anything else is a bug and propagates)."""
    from experiments.planning.sweep import POINT_ERRORS, _error_text

    try:
        return layout_capacity(layout, thresholds_s, **capacity_kwargs)
    except POINT_ERRORS as exc:
        return _error_text(exc)


def comparison(frame: pd.DataFrame) -> str:
    """One sentence: the best disaggregated layout against the best colocated one (among the
    layouts that ran)."""
    ran = frame[frame["error"].isna()] if "error" in frame else frame
    best = {kind: ran[ran["kind"] == kind].iloc[0] for kind in ("disaggregated", "colocated")
            if (ran["kind"] == kind).any()}
    if len(best) < 2:
        return "only one kind of layout was searched"
    d, c = best["disaggregated"], best["colocated"]
    if c["goodput_per_gpu_qps"] > 0:
        ratio = f"{d['goodput_per_gpu_qps'] / c['goodput_per_gpu_qps']:.2f}×"
    else:
        ratio = "∞ (colocated meets the SLOs at no tested rate)"
    return (f"best disaggregated {d['label']}: {d['goodput_per_gpu_qps']:.3f} req/s per GPU; best colocated "
            f"{c['label']}: {c['goodput_per_gpu_qps']:.3f} req/s per GPU; ratio {ratio}")


def write_report(frame: pd.DataFrame, base: SweepConfig, out: Path, attainment: float) -> list[Path]:
    """disaggregation.csv, .md and .png in `out` (each written atomically, `experiments.outputs`);
    a layout that could not run is a row with its error, and has no bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.outputs import save_figure, write_csv, write_text

    out.mkdir(parents=True, exist_ok=True)
    slos = ", ".join(f"{k} ≤ {v:g} s" for k, v in base.goodput.items())
    lines = [f"# xPyD search: {base.model} on {frame['gpus'].iloc[0]} GPUs", "",
             f"Goodput = the highest rate at which ≥ {attainment:.0%} of requests meet {slos} "
             "(DistServe's definition), per GPU.", "", comparison(frame), "",
             "| layout | kind | capacity (req/s) | goodput per GPU (req/s) | trials |", "|---|---|---|---|---|"]
    failed = frame["error"].notna() if "error" in frame else pd.Series(False, index=frame.index)
    for (_, r), bad in zip(frame.iterrows(), failed):
        if bad:
            lines.append(f"| {r['label']} | {r['kind']} | failed: {_cell(r['error'])} | | |")
        else:
            bound = " (at the search's top rate: a lower bound)" if r.get("capacity_at_bound") else ""
            lines.append(f"| {r['label']} | {r['kind']} | {r['capacity_qps']:.3f}{bound} | "
                         f"{r['goodput_per_gpu_qps']:.3f} | {r['trials']} |")
    ran = frame[~failed]
    fig, ax = plt.subplots(figsize=(8, 0.35 * max(len(ran), 1) + 1.2))
    colours = ["tab:blue" if k == "disaggregated" else "tab:orange" for k in ran["kind"]]
    ax.barh(ran["label"][::-1], ran["goodput_per_gpu_qps"][::-1], color=colours[::-1])
    ax.set_xlabel(f"goodput per GPU (req/s at {attainment:.0%} SLO attainment)")
    ax.set_title("xPyD (blue) vs colocated (orange)")
    fig.tight_layout()
    written = [write_csv(out / "disaggregation.csv", frame),
               write_text(out / "disaggregation.md", "\n".join(lines) + "\n"),
               save_figure(fig, out / "disaggregation.png", dpi=110)]
    plt.close(fig)
    return written


def _cell(text) -> str:
    """A Markdown table cell of free text (no pipes, one line)."""
    return " ".join(str(text).replace("|", "/").split())
