"""The capacity search's report: the capacity table (mean over seeds, 95 % interval, per GPU,
fleet), the ranking rule and its runner-up, warnings (short trials, the search bound, trials at
the length cap, the lowest rate's verdict), the fleet lines and the plots (capacity bars, chunk ×
N heatmap, burstiness headroom, Pareto frontier, latency against QPS). Shares the sweep report's
tables, cells, page and plot helpers (`experiments.planning.report`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.config import SweepConfig, slo_summary_key  # noqa: E402
from experiments.planning.capacity import short_trials_warning  # noqa: E402
from experiments.planning.fleet import fleet_rule_text  # noqa: E402
from experiments.planning.steady_state import rule_text  # noqa: E402
from experiments.planning.repetitions import file_trace_seeds_warning, seeds_note  # noqa: E402
from experiments.planning.search import pareto_frontier, policy_table  # noqa: E402
from experiments.outputs import write_text  # noqa: E402
from experiments.planning.report import (  # noqa: E402  (the sweep report's tables, page and plots)
    ReportTable, add_legend, html_report_page, markdown_page, metric_title, point_bars, point_name, save_plot,
)
from experiments.planning.report_header import (  # noqa: E402  (the header lines and cells both reports use)
    cost_model_lines, deployment_line, device_lines, format_cell, is_missing, layout_lines,
)


CAPACITY_COLUMNS = {
    "label": "point",
    "capacity_qps": "capacity (QPS)",
    "capacity_ci_low": "95 % CI low",
    "capacity_ci_high": "95 % CI high",
    "capacity_by_seed": "by seed",
    "sustained_throughput_rps": "sustained req/s at capacity",
    "capacity_at_bound": "at search bound",
    "num_gpus": "GPUs",
    "capacity_per_gpu_qps": "QPS per GPU",
    "fleet_replicas": "copies for target",
    "fleet_sizing_qps": "sized from (QPS a copy)",
    "fleet_gpus": "GPUs for target",
    "fleet_usd_per_hour": "fleet $ / hour",
    "usd_per_million_output_tokens": "$ / M output tokens",
}


PER_GPU_RULE = ("the points differ in GPUs, so the highest capacity per GPU (mean capacity over seeds / the point's "
                "GPUs: replicas × TP × PP × DP, or every pool's); ties go to the lower point number")
PER_DOLLAR_RULE = ("the points differ in GPUs or devices and fleet.gpu_hour_usd prices them, so the cheapest fleet for "
                   "the target (USD per hour, each device at its price; the fleet rule below); then the highest "
                   "capacity per GPU, then the lower point number")


def capacity_ranking(ranked: pd.DataFrame) -> tuple[pd.DataFrame, str, tuple[str, str]]:
    """The points with a capacity, best first, the rule that ranked them, and (the column it
    compared, its unit): per dollar (`PER_DOLLAR_RULE`) when the points differ in GPUs or
    devices and a fleet is priced, per GPU (`PER_GPU_RULE`) when they differ in GPUs, else by
    capacity (`CAPACITY_RULE`)."""
    differ = any(c in ranked and ranked[c].nunique() > 1 for c in ("num_gpus", "device"))
    if differ and "fleet_usd_per_hour" in ranked and ranked["fleet_usd_per_hour"].notna().all():
        return (ranked.sort_values(["fleet_usd_per_hour", "capacity_per_gpu_qps", "point_id"],
                                   ascending=[True, False, True]), PER_DOLLAR_RULE, ("fleet_usd_per_hour", "USD/h"))
    if "num_gpus" in ranked and ranked["num_gpus"].nunique() > 1 and "capacity_per_gpu_qps" in ranked:
        return (ranked.sort_values(["capacity_per_gpu_qps", "point_id"], ascending=[False, True]), PER_GPU_RULE,
                ("capacity_per_gpu_qps", "QPS per GPU"))
    return (ranked.sort_values(["capacity_qps", "point_id"], ascending=[False, True]), CAPACITY_RULE,
            ("capacity_qps", "QPS"))


CAPACITY_RULE = ("the highest capacity (mean over seeds) among the points that met the SLOs at some load; "
                 "ties go to the lower point number")


@dataclass
class CapacitySummary:
    """What a capacity search found, as the report and the terminal say it.

    Attributes:
        header: how capacity was measured (deployment, SLOs, trials, seeds).
        recommendation: the pick (named in full), the rule, the runner-up, the policy check, the
            fleet and the load-dependent policy; each a line.
        warnings: what could make the numbers misleading (short trials, a capacity at the search
            bound, failed points, points meeting no SLO, one seed).
        command: `vllm serve MODEL FLAGS` of the recommended point, or None.
        best_id: its point id, or None.
    """

    header: list[str]
    recommendation: list[str]
    warnings: list[str]
    command: str | None
    best_id: int | None


def capacity_summary(points: pd.DataFrame, base: SweepConfig, slo: dict[str, float],
                     policy_check: pd.DataFrame | None = None, loads: pd.DataFrame | None = None,
                     devices: tuple = ()) -> CapacitySummary:
    """Summarise a capacity search's points table (`run_capacity_sweep`) by `CAPACITY_RULE`."""
    s = base.search
    ok = points[points["error"].isna()] if "error" in points else points
    if "capacity_qps" not in ok:
        ok = ok.assign(capacity_qps=np.nan)
    header = [
        deployment_line(points, base, "(what prices each step is stated below)"),
        *cost_model_lines(ok), *device_lines(ok, base, devices), *layout_lines(base),
        f"Capacity = highest QPS meeting every SLO ({', '.join(f'{k} ≤ {v:g}' for k, v in slo.items())}"
        f"{'' if base.slo else ', Sarathi-Serve strict defaults for this model size'}) in steady state, by bisection "
        f"to {s.precision:.1%} precision within {list(s.qps)} QPS on trials of {_trial_sizes_text(ok, s)}; "
        f"{s.trim_fraction:.0%} warm-up and drain trimmed; {_seeds_text(base, s.seeds)}.",
        f"Sustained-load rule: {rule_text(slo)}.",
    ]
    warnings = _cap_warnings(ok)
    short = short_trials_warning(s.num_requests)
    if short:
        warnings.append(short)
    if s.seeds == 1:
        warnings.append("One seed: the capacities have no confidence interval (search.seeds ≥ 2 gives one).")
    file_seeds = file_trace_seeds_warning(base, s.seeds)
    if file_seeds:
        warnings.append(file_seeds)
    failed = points[points["error"].notna()] if "error" in points else points.iloc[0:0]
    if len(failed):
        warnings.append(f"{len(failed)} of {len(points)} points failed (errors under 'Points that failed'): "
                        + ", ".join(failed["label"].astype(str)) + ".")
    never = ok[ok["capacity_qps"].isna()]
    if len(never):
        warnings.append(f"Meets the SLOs at no load searched (not even {s.qps[0]:g} QPS): "
                        + "; ".join(_with_lowest_rate_verdict(r) for _, r in never.iterrows()) + ".")
    if "seeds_below_lowest_rate" in ok:  # counted 0 in the mean (experiments.planning.search.capacity_row)
        some = ok[ok["capacity_qps"].notna() & (ok["seeds_below_lowest_rate"].fillna(0) > 0)]
        if len(some):
            warnings.append(f"Some seeds met the SLOs at no load searched (not even {s.qps[0]:g} QPS) and count 0 in "
                            "the mean: " + "; ".join(_with_lowest_rate_verdict(r, f"{int(r['seeds_below_lowest_rate'])} "
                                                                                  f"of {s.seeds}")
                                                     for _, r in some.iterrows())
                            + "; lower search.qps to measure them.")
    ranked, rule, (column, unit) = capacity_ranking(ok[ok["capacity_qps"].notna()])
    if ranked.empty:  # the fleet line says it is not sized, and why
        return CapacitySummary(header, ["No point meets the SLOs even at the lowest load searched.",
                                        *_fleet_lines(ok, base)], warnings, None, None)
    best = ranked.iloc[0]
    at_bound = _is_true(best.get("capacity_at_bound"))
    lines = [f"Recommended: **{point_name(best)}** — capacity {best['capacity_qps']:.3g} QPS"
             f"{_interval_text(best)}{' (at the top of the searched range: raise search.qps)' if at_bound else ''}.",
             f"Rule: {rule}."]
    for _, row in ranked.iterrows():  # every point at the bound, not only the recommended one
        if _is_true(row.get("capacity_at_bound")):
            warnings.append(f"{row['label']} passed at the top of search.qps ({s.qps[1]:g} QPS): its capacity is "
                            "only a lower bound; raise search.qps.")
    if len(ranked) > 1:
        runner = ranked.iloc[1]
        overlap = _intervals_overlap(best, runner)
        if column == "capacity_qps":
            versus = f", {(1 - runner[column] / best[column]):.1%} less"
        else:  # by the rule's metric: less per GPU, more USD an hour
            change = 1 - runner[column] / best[column] if column == "capacity_per_gpu_qps" else \
                runner[column] / best[column] - 1
            versus = (f"; {format_cell(runner[column])} {unit} against {format_cell(best[column])}, "
                      f"{change:.1%} {'less' if column == 'capacity_per_gpu_qps' else 'more'}")
        lines.append(f"Runner-up: **{point_name(runner)}** — capacity {runner['capacity_qps']:.3g} QPS"
                     f"{_interval_text(runner)}{versus}"
                     + ("; the 95 % intervals overlap, so the difference is within seed noise." if overlap else "."))
    command = best.get("vllm_command")
    command = None if is_missing(command) else str(command)
    if command is None:  # a model with no known repository: the flags, for the user's own MODEL
        lines.append(f"vLLM flags: `{best['vllm_flags']}`")
    if policy_check is not None and len(policy_check):
        value = policy_check.iloc[0].get("capacity_qps", float("nan"))
        lines.append(f"vLLM runs its own (v1) policy, not `{best['scheduler']}`: the same flags simulated "
                     f"under `vllm_v1` give a capacity of {format_cell(value)} QPS.")
    lines += _fleet_lines(ok, base)
    if loads is not None and len(loads):
        bands = policy_table(loads)
        metric = "goodput" if loads["goodput_rps"].notna().any() else "throughput"
        lines.append(f"Load-dependent policy (best {metric} among points meeting every SLO, per QPS band): "
                     + "; ".join(f"{format_cell(r['QPS from'])}–{format_cell(r['QPS to'])} QPS → {r['best point']}"
                                 for _, r in bands.iterrows()) + ".")
    return CapacitySummary(header, lines, warnings, command, int(best["point_id"]))


def _with_lowest_rate_verdict(row: pd.Series, count: str = "") -> str:
    """'p0 (1 of 3: at 1 QPS (seed 2) …)': a point's label with the seeds below the searched range
    and why its lowest rate failed (`experiments.planning.search.lowest_rate_verdict`), where known."""
    verdict = row.get("lowest_rate_verdict")
    verdict = None if is_missing(verdict) else verdict
    inside = ": ".join(text for text in (count, verdict) if text)
    return f"{row['label']} ({inside})" if inside else str(row["label"])


def _trial_sizes_text(ok: pd.DataFrame, s) -> str:
    """'2,048 requests per instance (a point's first trial, rerun at the cap when undecided: 2,048 →
    8,192)', with each distinct first/cap pair of the points (their instances differ)."""
    pairs = []
    if {"trial_requests_first", "trial_requests_cap"} <= set(ok):
        for first, cap in ok[["trial_requests_first", "trial_requests_cap"]].dropna().drop_duplicates().itertuples(
                index=False):
            pairs.append(f"{int(first):,}" + (f" → {int(cap):,}" if cap > first else ""))
    sizes = f" (a point's first trial, rerun at the cap when undecided: {'; '.join(pairs)})" if pairs else ""
    return (f"{s.num_requests:,} requests per instance (replicas × DP, every pool of a cluster){sizes}; "
            f"search.max_trial_scale {s.max_trial_scale}×")


def _cap_warnings(ok: pd.DataFrame) -> list[str]:
    """One line per point with trials undecided at the cap (`sustained_summary`'s `at_cap_qps`)."""
    if "trials_at_cap" not in ok:
        return []
    lines = []
    for _, row in ok[ok["trials_at_cap"].fillna(0) > 0].iterrows():
        lines.append(f"{row['label']}: {int(row['trials_at_cap'])} trial(s) still undecided at the cap of "
                     f"{int(row['trial_requests_cap']):,} requests (QPS and verdict: {row['at_cap_qps']}); a trial that "
                     "still drifted or fell short of the offered rate failed, one short only of effectively independent "
                     "samples was judged on its SLOs at that length. Raise search.max_trial_scale to decide them on "
                     "longer trials.")
    return lines


def _fleet_lines(ok: pd.DataFrame, base: SweepConfig) -> list[str]:
    """The fleet line: the point needing the fewest GPUs (the cheapest where priced) for the target,
    the sizing rule (`experiments.planning.fleet`), and why a point has no fleet."""
    if base.fleet is None:
        return []
    rule = f"Fleet rule: {fleet_rule_text(base.fleet.target_qps, base.fleet.headroom)}."
    if "fleet_gpus" not in ok or not ok["fleet_gpus"].notna().any():
        problems = ok["fleet_problem"].dropna() if "fleet_problem" in ok else pd.Series(dtype=object)
        return [f"Fleet for {base.fleet.target_qps:g} QPS: not sized — {problems.iloc[0]}." if len(problems) else
                f"Fleet for {base.fleet.target_qps:g} QPS: not sized (no point has a capacity)."]
    sized = ok[ok["fleet_gpus"].notna()]
    priced = "fleet_usd_per_hour" in sized and sized["fleet_usd_per_hour"].notna().all()
    cheapest = sized.loc[sized["fleet_usd_per_hour" if priced else "fleet_gpus"].astype(float).idxmin()]
    price = f", ${cheapest['fleet_usd_per_hour']:.4g}/hour" if priced else ""
    bound = _is_true(cheapest.get("capacity_at_bound"))
    below = cheapest.get("seeds_below_lowest_rate")
    below = 0 if is_missing(below) else int(below)
    most = "at most " if bound or below else ""
    notes = []
    if bound:
        notes.append("its capacity is only a lower bound (it passed at the top of search.qps), so the fleet may be "
                     "smaller")
    if below:  # counted 0 in the interval the fleet is sized from (experiments.planning.search.capacity_row)
        notes.append(f"{below} of {base.search.seeds} seeds met the SLOs at no load searched (not even "
                     f"{base.search.qps[0]:g} QPS) and count 0 in the capacity it is sized from, which "
                     "understates it, so the fleet may be smaller: lower search.qps to size it")
    return [f"Fleet for {base.fleet.target_qps:g} QPS: {'cheapest' if priced else 'fewest GPUs'} with "
            f"**{cheapest['label']}** — {most}{int(cheapest['fleet_replicas'])} copies of its deployment, "
            f"{most}{int(cheapest['fleet_gpus'])} GPUs{price}, sized from {cheapest['fleet_sizing_qps']:.3g} QPS a copy "
            "(copies assumed to add capacity linearly behind a router)" + "".join(f"; {note}" for note in notes) + ".",
            rule]


def _is_true(value) -> bool:
    return value is not None and not is_missing(value) and bool(value)


def _seeds_text(base: SweepConfig, seeds: int) -> str:
    """What the search's seeds are: the base's (`repetitions.seeds_note`) where it has no
    variants (a variant may set its own trace or seeds), else the rule every point follows."""
    if seeds == 1:
        return "one seed (each point's own trace and engine seeds), so no interval"
    if base.variants:
        return f"the 95 % interval is over {seeds} seeds (repetition k: each point's trace and engine seeds + k)"
    return f"the 95 % interval is over {seeds_note(base, seeds)}"


def _interval_text(row: pd.Series) -> str:
    """' (95 % interval LOW–HIGH)'; '' with one seed; a zero-width one (every seed the same
    capacity: a file trace replayed with no random draws, or seeds on one bisection rate) said to
    be no confidence interval, not shown as one."""
    low, high = row.get("capacity_ci_low"), row.get("capacity_ci_high")
    if is_missing(low) or is_missing(high):
        return ""
    if float(low) == float(high):
        return " (every seed gave the same capacity: a zero-width interval, not a confidence interval)"
    return f" (95 % interval {float(low):.3g}–{float(high):.3g})"


def _intervals_overlap(a: pd.Series, b: pd.Series) -> bool:
    values = [a.get("capacity_ci_low"), a.get("capacity_ci_high"), b.get("capacity_ci_low"), b.get("capacity_ci_high")]
    if any(is_missing(v) for v in values):
        return False
    return float(values[2]) <= float(values[1]) and float(values[0]) <= float(values[3])


def capacity_table(points: pd.DataFrame, best_id: int | None) -> ReportTable:
    """The capacity per point (points that ran), the recommended row marked."""
    keys = [k for k in CAPACITY_COLUMNS if k in points]
    cells = [[format_cell(row[k]) for k in keys] for _, row in points.iterrows()]
    best = [best_id is not None and int(row["point_id"]) == best_id for _, row in points.iterrows()]
    return ReportTable("Capacity per point", [CAPACITY_COLUMNS[k] for k in keys], cells, best,
                       [[False] * len(keys) for _ in cells])


def write_capacity_report(points: pd.DataFrame, trials: pd.DataFrame, base: SweepConfig, slo: dict[str, float],
                          out_dir: Path, policy_check: pd.DataFrame | None = None,
                          loads: pd.DataFrame | None = None, devices: tuple = ()) -> Path:
    """report.md / report.html of a capacity search: capacity per point with its interval, the
    latency-vs-QPS curves of the bisection trials with the SLO lines, the recommended point (by
    `CAPACITY_RULE`, with its runner-up) and its `vllm serve` command, and the warnings of
    `capacity_summary`; `policy_check` is the recommended point re-searched under vllm_v1."""
    plots_dir = out_dir / "plots"
    plots_dir.mkdir(parents=True, exist_ok=True)
    ok = points[points["error"].isna()] if "error" in points else points
    if "capacity_qps" not in ok:  # every point failed: the report lists the errors only
        ok = ok.assign(capacity_qps=np.nan, capacity_ci_low=np.nan, capacity_ci_high=np.nan)
    summary = capacity_summary(points, base, slo, policy_check, loads, devices)
    figures = [_capacity_bars(ok, plots_dir / "capacity.png", summary.best_id)]
    heatmap = _chunk_n_heatmap(ok, plots_dir / "capacity_chunk_x_n.png")
    if heatmap is not None:
        figures.append(heatmap)
    if loads is not None and len(loads):
        figures.append(_pareto_plot(loads, plots_dir / "pareto.png"))
    if "burstiness" in ok and ok["burstiness"].nunique() > 1:
        figures.append(_burst_headroom(ok, plots_dir / "capacity_vs_burstiness.png"))
    for key, limit in slo.items():  # the configured SLO metrics, each with its limit
        metric = slo_summary_key(key)
        if len(trials) and metric in trials:
            figures.append(_latency_vs_qps(trials, metric, limit, plots_dir / f"{metric}_vs_qps.png"))
    recommendation = summary.recommendation + ([f"Serve it with: `{summary.command}`"] if summary.command else [])
    sections = [("Recommendation", recommendation)] + ([("Warnings", summary.warnings)] if summary.warnings else [])
    tables = [capacity_table(ok, summary.best_id)]
    failed = points[points["error"].notna()] if "error" in points else points.iloc[0:0]
    write_text(out_dir / "report.md", markdown_page("Capacity report", summary.header, sections, tables, failed,
                                                 figures, out_dir))
    html_path = out_dir / "report.html"
    write_text(html_path, html_report_page(summary.header, sections, tables, failed, figures, base.name, "Capacity report"))
    return html_path


def _chunk_n_heatmap(points: pd.DataFrame, path: Path) -> Path | None:
    """Capacity over chunk size × split-N, when the points vary both (one scheduler)."""
    if not {"chunk_size", "split_n", "capacity_qps"} <= set(points) or points["scheduler"].nunique() != 1:
        return None
    grid = points.pivot_table(index="split_n", columns="chunk_size", values="capacity_qps", aggfunc="max")
    if grid.shape[0] < 2 or grid.shape[1] < 2:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.6))
    image = ax.imshow(grid.to_numpy(dtype=float), cmap="viridis", aspect="auto", origin="lower")
    ax.set_xticks(range(grid.shape[1]), [str(c) for c in grid.columns])
    ax.set_yticks(range(grid.shape[0]), [str(n) for n in grid.index])
    for (r, c), value in np.ndenumerate(grid.to_numpy(dtype=float)):
        ax.text(c, r, format_cell(value), ha="center", va="center", color="white", fontsize=8)
    ax.set_xlabel("chunk size (tokens)")
    ax.set_ylabel("split-N")
    ax.set_title("Capacity (QPS) by chunk size × split-N")
    fig.colorbar(image, ax=ax)
    return save_plot(fig, path)


def _burst_headroom(points: pd.DataFrame, path: Path) -> Path:
    """Capacity against the coefficient of variation of inter-arrival gaps, CV = 1/sqrt(γ) for
    gamma arrivals of shape γ (vLLM's --burstiness; γ = 1 is Poisson, CV 1)."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    data = points.assign(cv=1 / np.sqrt(points["burstiness"].astype(float)))
    settings = [c for c in ("scheduler", "chunk_size", "split_n") if c in data]
    for key, group in data.groupby(settings, sort=False, dropna=False):
        group = group.sort_values("cv")
        ax.errorbar(group["cv"], group["capacity_qps"], yerr=_capacity_errors(group),
                    marker="o", capsize=3, label=" ".join(str(k) for k in np.atleast_1d(key)))
    ax.set_xlabel("inter-arrival CV (1 = Poisson)")
    ax.set_ylabel("capacity (QPS)")
    ax.set_title("Burst headroom: capacity vs burstiness")
    add_legend(ax, fontsize=7, loc="upper right")
    return save_plot(fig, path)


def _capacity_errors(points: pd.DataFrame) -> np.ndarray:
    """(2, n) error-bar lengths below and above each capacity from its interval (0 where undefined)."""
    values = points["capacity_qps"].astype(float).to_numpy()
    low = values - points["capacity_ci_low"].astype(float).to_numpy()
    high = points["capacity_ci_high"].astype(float).to_numpy() - values
    return np.nan_to_num(np.vstack([low, high]))


def _pareto_plot(loads: pd.DataFrame, path: Path) -> Path:
    """Throughput vs P99 TBT of every point at every grid load, with the Pareto frontier."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for label, group in loads.groupby("label", sort=False):
        ax.scatter(group["tbt_s_p99"], group["throughput_rps"], label=label, s=18)
    frontier = pareto_frontier(loads)
    ax.plot(frontier["tbt_s_p99"], frontier["throughput_rps"], color="black", linewidth=1, label="Pareto frontier")
    ax.set_xscale("log")
    ax.set_xlabel("P99 TBT (s)")
    ax.set_ylabel("throughput (req/s)")
    ax.set_title("Throughput vs P99 TBT over the QPS grid")
    add_legend(ax, fontsize=7, loc="lower right")
    return save_plot(fig, path)


def _capacity_bars(points: pd.DataFrame, path: Path, best_id: int | None = None) -> Path:
    values = points["capacity_qps"].astype(float).to_numpy()
    fig, ax = point_bars(points, np.nan_to_num(values), best_id, xerr=_capacity_errors(points))
    ax.set_xlabel("capacity (QPS)")
    ax.set_title("Capacity per point (95 % interval over seeds)")
    return save_plot(fig, path)


def _latency_vs_qps(trials: pd.DataFrame, metric: str, slo: float | None, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 3.6))
    first_seed = trials[trials["seed"] == trials["seed"].min()]
    if "trial_requests" in first_seed:  # a lengthened trial: its longest run decided it
        first_seed = first_seed.sort_values("trial_requests").drop_duplicates(["label", "trial_qps"], keep="last")
    for label, group in first_seed.groupby("label", sort=False):
        group = group.sort_values("trial_qps")
        ax.plot(group["trial_qps"], group[metric], marker="o", label=label)
    if slo is not None:
        ax.axhline(slo, color="#C44E52", linestyle="--", label=f"SLO {slo:g} s")
    ax.set_xlabel("QPS")
    ax.set_ylabel(f"{metric_title(metric)} (s)")
    if (first_seed[metric].astype(float) > 0).any():  # a log axis of no positive value warns and shows nothing
        ax.set_yscale("log")
    ax.set_title(f"{metric_title(metric)} of the bisection trials (first seed)")
    add_legend(ax, fontsize=8, loc="upper left")
    return save_plot(fig, path)
