"""The sweep report: Markdown and a self-contained HTML page with matplotlib PNGs."""
from __future__ import annotations

import base64
import html
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.config import SweepConfig, slo_summary_key  # noqa: E402
from experiments.planning.search import pareto_frontier, policy_table  # noqa: E402
from simulator.metrics import gap_samples_s  # noqa: E402

TABLE_COLUMNS = {
    "label": "point",
    "completed": "completed",
    "rejected_too_long": "rej. too long",
    "rejected_kv_capacity": "rej. KV capacity",
    "rejected_budget": "rej. budget",
    "offered_qps": "offered QPS",
    "throughput_rps": "req/s",
    "goodput_rps": "goodput (req/s)",
    "output_throughput_tps": "out tok/s",
    "ttft_s_p50": "TTFT P50 (s)",
    "ttft_s_p90": "TTFT P90 (s)",
    "tbt_s_p50": "TBT P50 (s)",
    "tbt_s_p99": "TBT P99 (s)",
    "tpot_s_p50": "TPOT P50 (s)",
    "e2e_s_p50": "E2E P50 (s)",
    "scheduling_delay_s_p50": "sched delay P50 (s)",
    "num_preemptions": "preemptions",
    "num_gpu_blocks": "KV blocks",
    "kv_usage_max": "KV usage max",
    "slo_met": "SLO met",
}


def write_report(points: pd.DataFrame, requests: pd.DataFrame | None, base: SweepConfig, out_dir: Path) -> Path:
    """Write report.md, report.html and plots/*.png into `out_dir`; return the HTML path."""
    plots_dir = out_dir / "plots"
    plots_dir.mkdir(parents=True, exist_ok=True)
    ok = points[points["error"].isna()] if "error" in points else points
    figures = [
        _bar(ok, "tbt_s_p99", "P99 TBT (s)", base.slo.get("tbt_p99_s"), plots_dir / "tbt_p99.png"),
        _bar(ok, "ttft_s_p90", "P90 TTFT (s)", base.slo.get("ttft_p90_s"), plots_dir / "ttft_p90.png"),
    ]
    if requests is not None and len(requests):
        figures.append(_tbt_cdf(ok, requests, base.slo.get("tbt_p99_s"), plots_dir / "tbt_cdf.png"))

    table = ok[[c for c in TABLE_COLUMNS if c in ok]].rename(columns=TABLE_COLUMNS)
    header = _header_lines(points, base)
    failed = points[points["error"].notna()] if "error" in points else points.iloc[0:0]
    (out_dir / "report.md").write_text(_markdown(header, table, failed, figures, out_dir))
    html_path = out_dir / "report.html"
    html_path.write_text(_html(header, table, failed, figures, base.name))
    return html_path


def slo_headroom(points: pd.DataFrame, slo: dict[str, float]) -> pd.Series:
    """Per point, the worst ratio of a metric to its SLO (< 1 means every SLO is met)."""
    ratios = [points[slo_summary_key(k)].astype(float) / v for k, v in slo.items()]
    return pd.concat(ratios, axis=1).max(axis=1, skipna=False).fillna(np.inf)


def recommend(points: pd.DataFrame, slo: dict[str, float]) -> pd.Series | None:
    """At this load, the point meeting every SLO with the most headroom (None if none meets them).

    Headroom is the worst metric/SLO ratio; lower is better. Below saturation every point
    serves the offered load, so throughput does not separate them; the tightest SLO does.
    (Capacity — the highest load meeting the SLOs — is found by the capacity search.)
    """
    if not slo or "error" in points and points["error"].notna().all():
        return None
    ok = points[points["error"].isna()] if "error" in points else points
    ratio = slo_headroom(ok, slo)
    if not (ratio <= 1).any():
        return None
    return ok.loc[ratio.idxmin()]


def _header_lines(points: pd.DataFrame, base: SweepConfig) -> list[str]:
    ok = points[points["error"].isna()] if "error" in points else points
    lines = [
        f"Model **{base.model}** on **{base.device}**; cost model **{base.cost_model}** "
        "(the roofline model from datasheet figures until a measured profile is shipped: "
        "latencies are estimates, not measurements).",
    ]
    if ok.empty:
        return lines + ["Every point failed: see the errors below."]
    first = ok.iloc[0]
    lines.append(f"Trace: {first.get('trace_source', base.trace.kind)}; {int(first['num_requests'])} requests, "
                 f"offered {format_cell(first.get('offered_qps', float('nan')))} QPS (measured over the arrivals: "
                 "(n − 1) / span; a sampled Poisson trace differs slightly from its nominal rate).")
    skipped = int(first.get("trace_rows_rejected", 0) or 0)
    if skipped:
        lines.append(f"Trace rows skipped as invalid: {skipped} ({first.get('trace_rows_rejected_detail', '')}).")
    slo = ", ".join(f"{k} ≤ {v:g}" for k, v in base.slo.items()) or "none set"
    lines.append(f"SLOs (percentiles over the whole run): {slo}.")
    if base.goodput:
        thresholds = ", ".join(f"{k} ≤ {v:g}" for k, v in base.goodput.items())
        lines.append(f"Goodput = completed requests per second meeting every per-request threshold ({thresholds}).")
    pools = sorted(set(int(b) for b in ok["num_gpu_blocks"]))
    lines.append(f"KV pool: {', '.join(map(str, pools))} blocks of {base.engine.block_size} tokens per replica "
                 "(differs by point when the token budget changes the activation memory).")
    best = recommend(points, base.slo)
    if int(ok["num_requests"].max()) == 0:
        lines.append("The trace has no requests: nothing to judge against the SLOs.")
    elif best is not None:
        lines.append(f"Recommended at this load: **{best['label']}** — meets every SLO with the most "
                     f"headroom ({best['throughput_rps']:.3g} req/s, P99 TBT {best['tbt_s_p99']:.3g} s, "
                     f"P90 TTFT {best['ttft_s_p90']:.3g} s). Headroom counts only the SLOs above.")
    elif base.slo:
        lines.append("No point meets every SLO at this load.")
    return lines


def _bar(points: pd.DataFrame, column: str, ylabel: str, slo: float | None, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 3.6))
    values = points[column].astype(float).to_numpy() if column in points else np.zeros(len(points))
    ax.bar(points["label"], np.nan_to_num(values), color="#4C72B0")
    if slo is not None:
        ax.axhline(slo, color="#C44E52", linestyle="--", label=f"SLO {slo:g} s")
        ax.legend(loc="upper right")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{ylabel} per point")
    ax.tick_params(axis="x", rotation=20)
    return _save(fig, path)


def _tbt_cdf(points: pd.DataFrame, requests: pd.DataFrame, slo: float | None, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for _, point in points.iterrows():
        times = requests.loc[requests["point_id"] == point["point_id"], "token_times_s"]
        samples = np.sort(gap_samples_s(times)[0])
        if samples.size:
            ax.plot(samples, np.arange(1, samples.size + 1) / samples.size, label=point["label"])
    if slo is not None:
        ax.axvline(slo, color="#C44E52", linestyle="--", label=f"SLO {slo:g} s")
    ax.set_xscale("log")
    ax.set_xlabel("TBT (s)")
    ax.set_ylabel("fraction of gaps")
    ax.set_title("CDF of time between tokens")
    ax.legend(fontsize=8, loc="lower right")
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    """Write a figure as PNG (110 dpi, tight layout) and release it."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def format_cell(value) -> str:
    """A table cell: yes/no for booleans, 4 significant digits, 'n/a' for NaN (undefined)."""
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (float, np.floating)):
        return "n/a" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def markdown_table(table: pd.DataFrame) -> list[str]:
    """A frame as Markdown table lines, cells by `format_cell`."""
    lines = ["| " + " | ".join(map(str, table.columns)) + " |", "|" + "---|" * len(table.columns)]
    return lines + ["| " + " | ".join(format_cell(v) for v in row) + " |" for _, row in table.iterrows()]


def _markdown(header, table, failed, figures, out_dir: Path) -> str:
    lines = ["# Sweep report", ""] + [f"- {line}" for line in header] + [""]
    lines += markdown_table(table)
    for _, row in failed.iterrows():
        lines.append(f"\n**Point {row['label']} failed:** {row['error']}")
    lines.append("")
    lines += [f"![{p.stem}]({p.relative_to(out_dir)})" for p in figures]
    return "\n".join(lines) + "\n"


def _html(header, table, failed, figures, title: str) -> str:
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(format_cell(v))}</td>" for v in r) + "</tr>"
                   for _, r in table.iterrows())
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    items = "".join(f"<li>{html.escape(line).replace('**', '')}</li>" for line in header)
    errors = "".join(f"<p><b>Point {html.escape(str(r['label']))} failed:</b> {html.escape(str(r['error']))}</p>"
                     for _, r in failed.iterrows())
    images = "".join(
        f'<img alt="{p.stem}" src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">'
        for p in figures)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)} — sarathi-sim</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}img{{max-width:100%;display:block;margin:1em 0}}</style>
</head><body><h1>Sweep report: {html.escape(title)}</h1><ul>{items}</ul>
<table><tr>{head}</tr>{rows}</table>{errors}{images}</body></html>
"""


# ----- capacity search ------------------------------------------------------------------------
CAPACITY_COLUMNS = {
    "label": "point",
    "capacity_qps": "capacity (QPS)",
    "capacity_ci_low": "95 % CI low",
    "capacity_ci_high": "95 % CI high",
    "capacity_by_seed": "by seed",
    "capacity_at_bound": "at search bound",
    "fleet_replicas": "replicas for target",
    "fleet_gpus": "GPUs for target",
    "usd_per_million_output_tokens": "$ / M output tokens",
}


def write_capacity_report(points: pd.DataFrame, trials: pd.DataFrame, base: SweepConfig, slo: dict[str, float],
                          out_dir: Path, policy_check: pd.DataFrame | None = None,
                          loads: pd.DataFrame | None = None) -> Path:
    """report.md / report.html of a capacity search: capacity per point with its interval, the
    latency-vs-QPS curves of the bisection trials with the SLO lines, the recommended point and
    its `vllm serve` flags; `policy_check` is the recommended point re-searched under vllm_v1."""
    plots_dir = out_dir / "plots"
    plots_dir.mkdir(parents=True, exist_ok=True)
    ok = points[points["error"].isna()] if "error" in points else points
    if "capacity_qps" not in ok:  # every point failed: the report lists the errors only
        ok = ok.assign(capacity_qps=np.nan, capacity_ci_low=np.nan, capacity_ci_high=np.nan)
    figures = [_capacity_bars(ok, plots_dir / "capacity.png")]
    heatmap = _chunk_n_heatmap(ok, plots_dir / "capacity_chunk_x_n.png")
    if heatmap is not None:
        figures.append(heatmap)
    if loads is not None and len(loads):
        figures.append(_pareto_plot(loads, plots_dir / "pareto.png"))
    if "burstiness" in ok and ok["burstiness"].nunique() > 1:
        figures.append(_burst_headroom(ok, plots_dir / "capacity_vs_burstiness.png"))
    for metric, key in (("tbt_s_p99", "tbt_p99_s"), ("scheduling_delay_s_p50", "scheduling_delay_p50_s"),
                        ("ttft_s_p90", "ttft_p90_s")):
        if len(trials) and metric in trials:
            figures.append(_latency_vs_qps(trials, metric, slo.get(key), plots_dir / f"{metric}_vs_qps.png"))
    s = base.search
    header = [
        f"Model **{base.model}** on **{base.device}**; cost model **{base.cost_model}** (roofline estimates).",
        f"Capacity = highest QPS meeting every SLO ({', '.join(f'{k} ≤ {v:g}' for k, v in slo.items())}"
        f"{'' if base.slo else ', Sarathi-Serve strict defaults for this model size'}), by bisection on trials of "
        f"{s.num_requests} requests to {s.precision:.1%} precision within {list(s.qps)} QPS; "
        f"{s.trim_fraction:.0%} warm-up and drain trimmed; {s.seeds} seeds give the 95 % interval.",
    ]
    if s.num_requests < 1000:
        header.append(f"Caution: trials of {s.num_requests} requests are short. Overload shows as a growing queue "
                      "(scheduling delay), which short trials rarely build, so these capacities may be overstated; "
                      "Sarathi-Serve uses 2,048 requests per trial.")
    table = ok[[c for c in CAPACITY_COLUMNS if c in ok]].rename(columns=CAPACITY_COLUMNS)
    if base.fleet is not None and "fleet_gpus" in ok and ok["fleet_gpus"].notna().any():
        cheapest = ok.loc[ok["fleet_gpus"].idxmin()]
        price = f" at ${base.fleet.gpu_hour_usd:g}/GPU-hour" if base.fleet.gpu_hour_usd else ""
        bound = cheapest.get("capacity_at_bound") == True  # noqa: E712 (numpy bool or NaN)
        most = "at most " if bound else ""
        header.append(f"Fleet for {base.fleet.target_qps:g} QPS: fewest GPUs with **{cheapest['label']}** — "
                      f"{most}{int(cheapest['fleet_replicas'])} replicas, {most}{int(cheapest['fleet_gpus'])} GPUs{price} "
                      "(replicas assumed to add capacity linearly behind the router)"
                      + ("; its capacity is only a lower bound (it passed at the top of search.qps), so the fleet "
                         "may be smaller" if bound else "") + ".")
    if len(ok) and ok["capacity_qps"].notna().any():
        best = ok.loc[ok["capacity_qps"].idxmax()]
        bound = " (at the top of the searched range: raise search.qps)" if best.get("capacity_at_bound") else ""
        header.append(f"Recommended: **{best['label']}** — capacity {best['capacity_qps']:.3g} QPS{bound}. "
                      f"vLLM flags: `{best['vllm_flags']}`")
        if policy_check is not None and len(policy_check):
            check = policy_check.iloc[0]
            value = check.get("capacity_qps", float("nan"))
            header.append(f"vLLM runs its own (v1) policy, not `{best['scheduler']}`: the same flags simulated "
                          f"under `vllm_v1` give a capacity of {format_cell(value)} QPS.")
    else:
        header.append("No point meets the SLOs even at the lowest load searched.")
    if loads is not None and len(loads):
        bands = policy_table(loads)
        metric = "goodput" if loads["goodput_rps"].notna().any() else "throughput"
        header.append(f"Load-dependent policy (best {metric} among points meeting every SLO, per QPS band): "
                      + "; ".join(f"{format_cell(r['QPS from'])}–{format_cell(r['QPS to'])} QPS → {r['best point']}"
                                  for _, r in bands.iterrows()) + ".")
    failed = points[points["error"].notna()] if "error" in points else points.iloc[0:0]
    (out_dir / "report.md").write_text(_markdown(header, table, failed, figures, out_dir))
    html_path = out_dir / "report.html"
    html_path.write_text(_html(header, table, failed, figures, base.name))
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
    return _save(fig, path)


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
    ax.legend(fontsize=7, loc="upper right")
    return _save(fig, path)


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
    ax.legend(fontsize=7, loc="lower right")
    return _save(fig, path)


def _capacity_bars(points: pd.DataFrame, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 3.6))
    values = points["capacity_qps"].astype(float).to_numpy()
    ax.bar(points["label"], np.nan_to_num(values), yerr=_capacity_errors(points), capsize=4, color="#4C72B0")
    ax.set_ylabel("capacity (QPS)")
    ax.set_title("Capacity per point (95 % interval over seeds)")
    ax.tick_params(axis="x", rotation=20)
    return _save(fig, path)


def _latency_vs_qps(trials: pd.DataFrame, metric: str, slo: float | None, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 3.6))
    first_seed = trials[trials["seed"] == trials["seed"].min()]
    for label, group in first_seed.groupby("label", sort=False):
        group = group.sort_values("trial_qps")
        ax.plot(group["trial_qps"], group[metric], marker="o", label=label)
    if slo is not None:
        ax.axhline(slo, color="#C44E52", linestyle="--", label=f"SLO {slo:g} s")
    ax.set_xlabel("QPS")
    ax.set_ylabel(metric.replace("_s_", " (s) ").upper())
    ax.set_yscale("log")
    ax.set_title(f"{metric} of the bisection trials (first seed)")
    ax.legend(fontsize=8, loc="upper left")
    return _save(fig, path)
