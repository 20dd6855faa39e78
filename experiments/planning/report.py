"""The sweep report: Markdown and a self-contained HTML page with matplotlib PNGs.

The points table is split into a few narrow tables (requests and throughput; latency; KV cache),
each led by the point's label, so it fits a page; the recommended row is marked (★, green in
HTML) and every value over its SLO (✗, red in HTML). The recommendation states its rule and its
runner-up (`Recommendation`). The capacity search's report (`experiments.planning.capacity_report`)
shares its tables, page and plot helpers; the header lines (what was run) and cell text of both are
`experiments.planning.report_header`'s.
"""
from __future__ import annotations

import html
import textwrap
import warnings
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.config import SweepConfig, slo_summary_key  # noqa: E402
from experiments.planning.html_page import CSS, image_tag, inline  # noqa: E402
from experiments.planning.report_header import format_cell, header_lines, is_missing  # noqa: E402
from experiments.planning.request_notes import identical_lines, sustained_throughput_rps  # noqa: E402
from experiments.outputs import save_figure, write_text  # noqa: E402
from experiments.planning.tbt_cdf import BinnedCdf, binned_tbt_cdf  # noqa: E402
from simulator.records_parquet import source_schema  # noqa: E402

# The points table, split into narrow tables that fit a page: {column: heading}. Columns a run
# lacks are left out; the rejection breakdown only when some point rejected a request that way.
REQUEST_COLUMNS = {
    "label": "point",
    "completed": "completed",
    "truncated": "truncated",
    "rejected": "rejected",
    "rejected_too_long": "rej. too long",
    "rejected_kv_capacity": "rej. KV capacity",
    "rejected_budget": "rej. budget",
    "offered_qps": "offered QPS",
    "throughput_rps": "req/s (over the makespan)",
    "sustained_throughput_rps": "sustained req/s (while arriving)",
    "goodput_rps": "goodput (req/s)",
    "num_gpus": "GPUs",
    "goodput_rps_per_gpu": "goodput per GPU (req/s)",
    "output_throughput_tps": "out tok/s",
    "slo_met": "SLO met",
    "slo_missed": "SLOs missed",
}
LATENCY_COLUMNS = {
    "label": "point",
    "ttft_s_p50": "TTFT P50",
    "ttft_s_p90": "TTFT P90",
    "tbt_s_p50": "TBT P50",
    "tbt_s_p99": "TBT P99",
    "tpot_s_p50": "TPOT P50",
    "e2e_s_p50": "E2E P50",
    "scheduling_delay_s_p50": "sched delay P50",
}
KV_COLUMNS = {
    "label": "point",
    "num_gpu_blocks": "KV blocks",
    "kv_usage_max": "KV usage max",
    "num_preemptions": "preemptions",
    "recomputed_tokens": "recomputed tokens",  # computed again after preemption, net of prefix-cache hits
    "prefix_cache_hit_rate": "prefix-cache hit rate",  # vLLM's prefix_cache_hits / prefix_cache_queries
    "preempted_cache_hits_tokens": "cache hits after preemption",  # vLLM's preempted hits, counted apart
    # engine.kv_offload points only (simulator.metrics.kv_offload_stats):
    "kv_offload_cpu_hit_rate": "CPU-tier hit rate",  # prompt tokens loaded from host memory / queried
    "kv_offload_load_bytes": "bytes loaded (host to GPU)",
    "kv_offload_store_bytes": "bytes stored (GPU to host)",
    "kv_load_wait_s_mean": "load wait mean (s)",
    "kv_load_wait_s_p99": "load wait P99 (s)",
}
_BREAKDOWN = ("rejected_too_long", "rejected_kv_capacity", "rejected_budget")
_PER_GPU = ("num_gpus", "goodput_rps_per_gpu")  # shown when some point has more than one GPU
_METRIC_NAMES = {"ttft": "TTFT", "tbt": "TBT", "itl": "ITL", "tpot": "TPOT", "e2e": "E2E",
                 "scheduling_delay": "sched delay"}
BEST_MARK, MISS_MARK = "★", "✗"


@dataclass
class ReportTable:
    """One table of the report: headings, cell texts, and marks — `best[i]` for the recommended
    row, `miss[i][j]` for a value over its SLO (rendered ✗ / red)."""

    title: str
    columns: list[str]
    cells: list[list[str]]
    best: list[bool]
    miss: list[list[bool]]


def metric_title(summary_key: str) -> str:
    """'ttft_s_p90' -> 'TTFT P90'; 'scheduling_delay_s_p50' -> 'sched delay P50'."""
    metric, _, pct = summary_key.partition("_s_p")
    return f"{_METRIC_NAMES.get(metric, metric)} P{pct}"


def slo_misses(row: pd.Series, slo: dict[str, float]) -> list[str]:
    """The SLOs a point failed, as 'TBT P99 > 0.1 s' (an undefined metric fails, as in slo_verdicts)."""
    missed = []
    for key, limit in slo.items():
        verdict = row.get(f"slo_{key}")
        if verdict is not None and not is_missing(verdict) and not bool(verdict):
            missed.append(f"{metric_title(slo_summary_key(key))} > {limit:g} s")
    return missed


def hidden_per_gpu_columns(points: pd.DataFrame) -> tuple[str, ...]:
    """The per-GPU columns (`num_gpus`, `goodput_rps_per_gpu`) a table of `points` leaves out: both
    when no point has more than one GPU (they would repeat 1 and the goodput), none otherwise. The
    report's tables and the sweep's terminal table (experiments/cli/main.py) decide alike."""
    multi_gpu = "num_gpus" in points and points["num_gpus"].fillna(1).astype(float).gt(1).any()
    return () if multi_gpu else _PER_GPU


def points_tables(points: pd.DataFrame, slo: dict[str, float], best_id: int | None) -> list[ReportTable]:
    """The sweep's points (those that ran) as the report's three narrow tables; the SLO metrics
    not among the latency columns are added to them."""
    latency = dict(LATENCY_COLUMNS)
    for key in slo:
        latency.setdefault(slo_summary_key(key), metric_title(slo_summary_key(key)))
    hidden = hidden_per_gpu_columns(points)
    requests = {k: v for k, v in REQUEST_COLUMNS.items()
                if (k not in _BREAKDOWN or (k in points and points[k].fillna(0).astype(float).gt(0).any()))
                and k not in hidden}
    data = points.assign(slo_missed=[", ".join(slo_misses(r, slo)) or ("—" if slo else "n/a")
                                     for _, r in points.iterrows()])
    slo_columns = {slo_summary_key(k): k for k in slo}
    tables = []
    for title, columns in (("Requests and throughput", requests), ("Latency (seconds)", latency),
                           ("KV cache", KV_COLUMNS)):
        keys = [k for k in columns if k in data]
        best = [best_id is not None and r["point_id"] == best_id for _, r in data.iterrows()]
        cells, miss = [], []
        for _, row in data.iterrows():
            cells.append([format_cell(row[k]) for k in keys])
            miss.append([k in slo_columns and _is_false(row.get(f"slo_{slo_columns[k]}")) for k in keys])
        tables.append(ReportTable(title, [columns[k] for k in keys], cells, best, miss))
    return tables


def _is_false(value) -> bool:
    return value is not None and not is_missing(value) and not bool(value)


def write_report(points: pd.DataFrame, requests: pd.DataFrame | None, base: SweepConfig, out_dir: Path,
                 devices: tuple = (), token_times: list | None = None) -> Path:
    """Write report.md, report.html and plots/*.png into `out_dir`; return the HTML path.

    `requests`: every point's requests (a `point_id` column), with or without `token_times_s`;
    `token_times`: where the TBT CDF reads the token times instead (requests files or frames,
    `experiments.planning.tbt_cdf`), so `requests` need not hold them; None: from `requests`."""
    plots_dir = out_dir / "plots"
    plots_dir.mkdir(parents=True, exist_ok=True)
    ok = points[points["error"].isna()] if "error" in points else points
    choice = recommendation(points, base.slo)
    best_id = None if choice is None else int(choice.best["point_id"])
    plotted = base.slo or {"tbt_p99_s": None, "ttft_p90_s": None}  # the configured SLO metrics, each with its line
    figures = [_bar(ok, slo_summary_key(key), f"{metric_title(slo_summary_key(key))} (s)", limit,
                    plots_dir / f"{key.removesuffix('_s')}.png", best_id)
               for key, limit in plotted.items() if slo_summary_key(key) in ok]
    have_requests = requests is not None and len(requests) > 0
    if token_times is None and have_requests and "token_times_s" in requests:
        token_times = [requests]
    if have_requests and token_times and any(_has_token_times(s) for s in token_times):  # none: output.token_times false
        figures.append(_tbt_cdf(ok, binned_tbt_cdf(token_times), base.slo.get("tbt_p99_s"), plots_dir / "tbt_cdf.png"))
    if have_requests and len(ok) and {"arrival_s", "completion_s", "finish_reason"} <= set(requests):
        ok = ok.assign(sustained_throughput_rps=ok["point_id"].map(sustained_throughput_rps(requests)))

    tables = points_tables(ok, base.slo, best_id)
    header = header_lines(points, base, devices)
    notes = identical_lines(requests, dict(zip(ok["point_id"].astype(int), ok["label"]))) if have_requests else []
    sections = [("Recommendation", recommendation_lines(choice, points, base.slo) + notes)]
    failed = points[points["error"].notna()] if "error" in points else points.iloc[0:0]
    write_text(out_dir / "report.md", markdown_page("Sweep report", header, sections, tables, failed, figures, out_dir))
    html_path = out_dir / "report.html"
    write_text(html_path, html_report_page(header, sections, tables, failed, figures, base.name))
    return html_path


def slo_margin(points: pd.DataFrame, slo: dict[str, float]) -> pd.Series:
    """Per point, the SLO margin in % of the limit: the smallest (limit − value) / limit × 100 over
    the SLOs (higher is better; ≥ 0 means every SLO is met; −inf where a metric is undefined)."""
    margins = [(1 - points[slo_summary_key(k)].astype(float) / v) * 100 for k, v in slo.items()]
    return pd.concat(margins, axis=1).min(axis=1, skipna=False).fillna(-np.inf)


# Goodput or throughput within this fraction of the best counts as a tie: below saturation every
# point serves the offered load, and such differences are the tail of one sampled trace.
RECOMMEND_TIE_FRACTION = 0.01
# SLO margins within this many points of the limit (%) are ties: one trace's percentiles move so much.
SLO_MARGIN_TIE_POINTS = 5.0
RECOMMEND_RULE = ("among the points meeting every SLO, the highest goodput (when goodput thresholds are set), "
                  "then the highest throughput, each per GPU when the points differ in GPUs, counting values within "
                  "1 % of the best as equal; then the largest SLO margin (the smallest (limit − value) / limit over "
                  "the SLOs, in % of the limit), margins within 5 points counted equal; then the fewest GPUs; then "
                  "the lower point number")
# Metrics compared between the recommendation and its runner-up: (column, lower is better).
_TRADE_METRICS = (("goodput_rps", False), ("throughput_rps", False), ("ttft_s_p90", True), ("ttft_s_p50", True),
                  ("tbt_s_p99", True), ("tpot_s_p50", True), ("e2e_s_p50", True), ("scheduling_delay_s_p50", True))


@dataclass
class Recommendation:
    """The recommended point at this load, the runner-up, and what decided between them.

    Attributes:
        best, runner_up: rows of the points table (runner_up None when one point meets the SLOs).
        decided_by: 'goodput', 'throughput' (per GPU or not, `per_gpu`), 'SLO margin', 'GPUs' or
            'point order' (the first step of `RECOMMEND_RULE` at which the runner-up lost), or
            'the only point meeting every SLO'.
        margin: SLO margin (% of the limit) per point id (of the points meeting every SLO).
        per_gpu: the points differ in GPUs, so goodput and throughput were compared per GPU.
    """

    best: pd.Series
    runner_up: pd.Series | None
    decided_by: str
    margin: dict[int, float]
    per_gpu: bool = False


def recommendation(points: pd.DataFrame, slo: dict[str, float]) -> Recommendation | None:
    """Apply `RECOMMEND_RULE` to the points that ran; None without SLOs or when none meets them."""
    if not slo or "error" in points and points["error"].notna().all():
        return None
    ok = points[points["error"].isna()] if "error" in points else points
    margin_pct = slo_margin(ok, slo)
    meeting = ok[margin_pct >= 0]
    if meeting.empty:
        return None
    margin = {int(pid): float(m) for pid, m in zip(ok["point_id"], margin_pct) if m >= 0}
    per_gpu = "num_gpus" in meeting and meeting["num_gpus"].nunique() > 1
    best, stage = _pick(meeting, margin, per_gpu)
    rest = meeting[meeting["point_id"] != best["point_id"]]
    if rest.empty:
        return Recommendation(best, None, "the only point meeting every SLO", margin, per_gpu)
    runner_up, _ = _pick(rest, margin, per_gpu)
    return Recommendation(best, runner_up, stage(int(runner_up["point_id"])), margin, per_gpu)


def _pick(candidates: pd.DataFrame, margin: dict[int, float], per_gpu: bool):
    """The best row by `RECOMMEND_RULE` and a function giving the step at which another point lost."""
    lost_at: dict[int, str] = {}
    pool = candidates
    for column, name in (("goodput_rps", "goodput"), ("throughput_rps", "throughput")):
        if column not in pool or not pool[column].notna().any():
            continue
        values = pool[column].astype(float) / (pool["num_gpus"].astype(float) if per_gpu else 1.0)
        keep = values >= (1 - RECOMMEND_TIE_FRACTION) * values.max()
        lost_at.update({int(pid): name for pid in pool.loc[~keep, "point_id"]})
        pool = pool[keep]
    margins = pd.Series([margin[int(pid)] for pid in pool["point_id"]], index=pool.index)
    keep = margins >= margins.max() - SLO_MARGIN_TIE_POINTS
    lost_at.update({int(pid): "SLO margin" for pid in pool.loc[~keep, "point_id"]})
    pool = pool[keep]
    gpus = pool["num_gpus"].astype(float) if "num_gpus" in pool else pd.Series(1.0, index=pool.index)
    ordered = pool.assign(_g=gpus).sort_values(["_g", "point_id"])
    best = ordered.iloc[0]
    for _, row in ordered.iloc[1:].iterrows():
        lost_at[int(row["point_id"])] = "GPUs" if row["_g"] > best["_g"] else "point order"
    return candidates.loc[ordered.index[0]], lambda pid: lost_at[pid]


def point_name(row: pd.Series) -> str:
    """A point named in full: 'sarathi chunk=256 (point 1: llama-3-8b on h100-sxm)', or
    'llama-2-70b · a100-80gb · sarathi chunk=256 (point 3)' when its label names them already."""
    label = str(row["label"])
    where = ""
    if "model" in row and not is_missing(row.get("model")):
        model, device = str(row["model"]), str(row.get("device"))
        where = "" if label.startswith(f"{model} · {device} · ") else f"{model} on {device}"
    return f"{label} (point {int(row['point_id'])}{': ' + where if where else ''})"


def recommendation_lines(choice: Recommendation | None, points: pd.DataFrame, slo: dict[str, float]) -> list[str]:
    """The report's (and terminal's) recommendation: the pick, the rule, the runner-up and what
    the pick gives up against it (metrics where the runner-up is better by 10 % or more)."""
    ok = points[points["error"].isna()] if "error" in points else points
    if ok.empty:
        return ["Every point failed (the errors are listed with the points): nothing to recommend."]
    if not slo:
        return ["No SLO is set (`slo:`), so no point is recommended; the tables give every metric."]
    if ok.empty or int(ok["num_requests"].max() or 0) == 0:
        return ["No point ran any request: nothing to judge against the SLOs."]
    if "trace_qps" in ok and ok["trace_qps"].nunique() > 1:
        return load_axis_lines(ok, slo)
    if choice is None:
        return [f"No point meets every SLO at this load ({_slo_text(slo)}): lower the load, relax the SLOs, "
                "or search capacity (`search:`)."]
    best = choice.best
    lines = [f"Recommended at this load: **{point_name(best)}** — {_metrics_text(best)}.",
             f"Rule: {RECOMMEND_RULE}. Only the SLOs set ({_slo_text(slo)}) count; its SLO margin is "
             f"{choice.margin[int(best['point_id'])]:.0f} % of the limit"
             + (" (goodput and throughput compared per GPU: the points differ in GPUs)." if choice.per_gpu else ".")]
    runner = choice.runner_up
    if runner is None:
        lines.append("It is the only point meeting every SLO.")
        return lines
    lines.append(f"Runner-up: **{point_name(runner)}** — {_metrics_text(runner)}; it lost on "
                 f"{_decided_text(choice, best, runner)}.")
    gave_up = _gave_up(best, runner)
    lines.append("Against the runner-up the recommendation gives up " + "; ".join(gave_up) + "."
                 if gave_up else "The runner-up is not better by 10 % or more on any headline metric.")
    return lines


def load_axis_lines(points: pd.DataFrame, slo: dict[str, float]) -> list[str]:
    """The recommendation when the points differ in offered load (`trace.qps` as a sweep axis): a
    load is not a configuration, so one pick per load by `RECOMMEND_RULE`, and a pointer to the
    capacity search for the most load each configuration sustains."""
    lines = ["The points differ in offered load (trace.qps), which is a load, not a configuration: the highest load "
             "would always look best. Per load, by the rule below; for the most load each configuration sustains, "
             "run a capacity search (`search:`)."]
    for qps, group in points.groupby("trace_qps", sort=True):
        choice = recommendation(group, slo)
        lines.append(f"At {qps:g} QPS: " + (f"**{point_name(choice.best)}** — {_metrics_text(choice.best)}."
                                            if choice is not None else f"no point meets every SLO ({_slo_text(slo)})."))
    lines.append(f"Rule: {RECOMMEND_RULE}.")
    return lines


def _decided_text(choice: Recommendation, best: pd.Series, runner: pd.Series) -> str:
    if choice.decided_by == "SLO margin":
        return (f"SLO margin ({choice.margin[int(runner['point_id'])]:.0f} % against "
                f"{choice.margin[int(best['point_id'])]:.0f} % of the limit, more than {SLO_MARGIN_TIE_POINTS:g} "
                "points apart; goodput and throughput within 1 %)")
    if choice.decided_by == "GPUs":
        return (f"GPUs ({int(runner['num_gpus'])} against {int(best['num_gpus'])}; goodput, throughput and SLO "
                "margin equal within the rule's bands)")
    if choice.decided_by in ("goodput", "throughput"):
        column = "goodput_rps" if choice.decided_by == "goodput" else "throughput_rps"
        if choice.per_gpu:
            return (f"{choice.decided_by} per GPU ({format_cell(runner[column] / runner['num_gpus'])} against "
                    f"{format_cell(best[column] / best['num_gpus'])} req/s per GPU)")
        return f"{choice.decided_by} ({format_cell(runner[column])} against {format_cell(best[column])} req/s)"
    return "point order (equal on every step of the rule)"


def _gave_up(best: pd.Series, runner: pd.Series) -> list[str]:
    out = []
    for column, lower_is_better in _TRADE_METRICS:
        if column not in best or is_missing(best.get(column)) or is_missing(runner.get(column)):
            continue
        b, r = float(best[column]), float(runner[column])
        worse = b >= 1.1 * r if lower_is_better else r >= 1.1 * b
        if worse and min(b, r) > 0:
            name = metric_title(column) if "_s_p" in column else column.replace("_rps", "")
            unit = " s" if "_s_p" in column else " req/s"
            out.append(f"{name} {format_cell(b)}{unit} against {format_cell(r)}{unit} "
                       f"({max(b, r) / min(b, r):.1f}× {'higher' if lower_is_better else 'lower'})")
    return out


def _metrics_text(row: pd.Series) -> str:
    parts = [f"{format_cell(row['throughput_rps'])} req/s"]
    if "goodput_rps" in row and not is_missing(row.get("goodput_rps")):
        parts.append(f"goodput {format_cell(row['goodput_rps'])} req/s")
    parts += [f"{metric_title(c)} {format_cell(row[c])} s" for c in ("tbt_s_p99", "ttft_s_p90") if c in row]
    return ", ".join(parts)


def _slo_text(slo: dict[str, float]) -> str:
    return ", ".join(f"{metric_title(slo_summary_key(k))} ≤ {v:g} s" for k, v in slo.items())


def _bar(points: pd.DataFrame, column: str, ylabel: str, slo: float | None, path: Path,
         best_id: int | None = None) -> Path:
    """One horizontal bar per point (labels stay readable however long), the recommended one
    green, with the SLO as a dashed line."""
    values = points[column].astype(float).to_numpy() if column in points else np.zeros(len(points))
    fig, ax = point_bars(points, np.nan_to_num(values), best_id)
    if slo is not None:
        ax.axvline(slo, color="#C44E52", linestyle="--", label=f"SLO {slo:g} s")
        add_legend(ax, loc="lower right", fontsize=8)
    ax.set_xlabel(ylabel)
    ax.set_title(f"{ylabel} per point")
    return save_plot(fig, path)


def point_bars(points: pd.DataFrame, values: np.ndarray, best_id: int | None, xerr=None):
    """A horizontal bar chart of `values`, one bar per point labelled (wrapped) by its label,
    first point on top; the recommended point's bar green (#55A868), the others blue."""
    labels = [textwrap.fill(str(label), 34) for label in points["label"]]
    lines = sum(label.count("\n") + 1 for label in labels)
    fig, ax = plt.subplots(figsize=(7.5, 1.2 + 0.28 * max(lines, 3)))
    colours = ["#55A868" if best_id is not None and int(pid) == best_id else "#4C72B0" for pid in points["point_id"]]
    ax.barh(range(len(labels)), values, xerr=xerr, capsize=3 if xerr is not None else 0, color=colours)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    return fig, ax


def _has_token_times(source) -> bool:
    """Whether a requests frame or file has a `token_times_s` column."""
    return "token_times_s" in (source.columns if isinstance(source, pd.DataFrame) else source_schema(source).names)


def _tbt_cdf(points: pd.DataFrame, cdf: BinnedCdf, slo: float | None, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for _, point in points.iterrows():
        x_s, fraction = cdf.curve(int(point["point_id"]))
        if x_s.size:
            ax.plot(x_s, fraction, label=point["label"])
    if slo is not None:
        ax.axvline(slo, color="#C44E52", linestyle="--", label=f"SLO {slo:g} s")
    ax.set_xscale("log")
    ax.set_xlabel("TBT (s)")
    ax.set_ylabel("fraction of gaps")
    ax.set_title("CDF of time between tokens")
    add_legend(ax, fontsize=8, loc="lower right")
    return save_plot(fig, path)


def add_legend(ax, **kwargs) -> None:
    """A legend when something is labelled: none (and no matplotlib warning 'No artists with
    labels found') when no point drew a line, e.g. every request rejected (all_unservable)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kwargs)


def save_plot(fig, path: Path) -> Path:
    """Write a figure as PNG (110 dpi, tight layout) and release it."""
    with warnings.catch_warnings():  # a layout matplotlib cannot tighten (long labels) is saved as laid out
        warnings.simplefilter("ignore", UserWarning)
        fig.tight_layout()
    try:
        save_figure(fig, path, dpi=110)  # whole or not at all (experiments.outputs)
    finally:
        plt.close(fig)
    return path


def markdown_table(table: pd.DataFrame) -> list[str]:
    """A frame as Markdown table lines, cells by `format_cell`."""
    lines = ["| " + " | ".join(map(str, table.columns)) + " |", "|" + "---|" * len(table.columns)]
    return lines + ["| " + " | ".join(format_cell(v) for v in row) + " |" for _, row in table.iterrows()]


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def _markdown_report_table(table: ReportTable) -> list[str]:
    """A `ReportTable` in Markdown: the recommended row's label bold with ★, a value over its SLO bold with ✗."""
    lines = [f"### {table.title}", "", "| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    for cells, best, miss in zip(table.cells, table.best, table.miss):
        shown = [f"**{c}** {MISS_MARK}" if m else _md_cell(c) for c, m in zip(cells, miss)]
        if best:
            shown[0] = f"**{shown[0]}** {BEST_MARK}"
        lines.append("| " + " | ".join(shown) + " |")
    return lines + [""]


def _legend(tables: list[ReportTable]) -> str | None:
    marks = []
    if any(any(t.best) for t in tables):
        marks.append(f"{BEST_MARK} the recommended point")
    if any(any(any(row) for row in t.miss) for t in tables):
        marks.append(f"{MISS_MARK} a value over its SLO")
    return "; ".join(marks) if marks else None


def markdown_page(title: str, header: list[str], sections: list[tuple[str, list[str]]], tables: list[ReportTable],
              failed: pd.DataFrame, figures: list[Path], out_dir: Path, extra: list[str] = ()) -> str:
    lines = [f"# {title}", ""] + [f"- {line}" for line in header] + [""]
    for name, body in sections:
        lines += [f"## {name}", ""] + [f"- {line}" for line in body] + [""]
    lines += ["## Points", ""]
    legend = _legend(tables)
    if legend:
        lines += [legend + ".", ""]
    for table in tables:
        lines += _markdown_report_table(table)
    lines += list(extra)
    if len(failed):
        lines += ["## Points that failed", ""]
        lines += [f"- **{point_name(row)}:** {row['error']}" for _, row in failed.iterrows()]
        lines.append("")
    lines += [f"![{p.stem}]({p.relative_to(out_dir)})" for p in figures]
    return "\n".join(lines) + "\n"


def _html_report_table(table: ReportTable) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    rows = []
    for cells, best, miss in zip(table.cells, table.best, table.miss):
        tds = []
        for j, (cell, m) in enumerate(zip(cells, miss)):
            text = html.escape(cell) + (f" {BEST_MARK}" if best and j == 0 else "") + (f" {MISS_MARK}" if m else "")
            tds.append(f'<td class="miss" title="over its SLO">{text}</td>' if m else f"<td>{text}</td>")
        rows.append(f'<tr class="best" title="recommended">{"".join(tds)}</tr>' if best else f"<tr>{''.join(tds)}</tr>")
    return f"<h3>{html.escape(table.title)}</h3><div class=\"wrap\"><table><tr>{head}</tr>{''.join(rows)}</table></div>"


def html_report_page(header: list[str], sections: list[tuple[str, list[str]]], tables: list[ReportTable], failed: pd.DataFrame,
                     figures: list[Path], title: str, heading: str = "Sweep report", extra_html: str = "") -> str:
    items = "".join(f"<li>{inline(line)}</li>" for line in header)
    body = "".join(f"<h2>{html.escape(name)}</h2><ul>{''.join(f'<li>{inline(x)}</li>' for x in lines)}</ul>"
                   for name, lines in sections)
    legend = _legend(tables)
    points = "<h2>Points</h2>" + (f'<p class="legend">{html.escape(legend)}.</p>' if legend else "")
    points += "".join(_html_report_table(t) for t in tables) + extra_html
    errors = ""
    if len(failed):
        errors = "<h2>Points that failed</h2><ul>" + "".join(
            f"<li><b>{html.escape(point_name(r))}:</b> {html.escape(str(r['error']))}</li>"
            for _, r in failed.iterrows()) + "</ul>"
    images = "".join(image_tag(p, p.stem) for p in figures)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)} — sarathi-sim</title>
<style>{CSS}</style>
</head><body><h1>{html.escape(heading)}: {html.escape(title)}</h1><ul>{items}</ul>
{body}{points}{errors}{images}</body></html>
"""
