"""The fidelity report of `sarathi-sim verify`: fidelity.json, fidelity.md, fidelity.html (PNGs
embedded), plots/*.png, and one row appended to the calibration ledger (a CSV, so drift across
dates, library versions and devices stays visible)."""
from __future__ import annotations

import base64
import csv
import datetime as dt
import html
import io
import json
import platform
from importlib import metadata
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.outputs import save_figure, write_csv, write_text  # noqa: E402
from experiments.planning.report import format_cell, markdown_table  # noqa: E402  (the sweep report's cell format)
from experiments.verification.verify import STEP_KINDS, StepComparison  # noqa: E402

LEDGER_LIBRARIES = ("torch", "numpy", "scikit-learn", "triton")
LEDGER_COLUMNS = ("date", "device", "model", "config", "cost_model", "source", "python",
                  *(f"{lib}_version" for lib in LEDGER_LIBRARIES), "step_mape_pct", "step_p95_ape_pct",
                  "ttft_s_p50_error_pct", "tpot_s_p50_error_pct", "e2e_s_p50_error_pct", "ttft_s_p99_error_pct",
                  "throughput_rps_error_pct", "passed", "timing", "reference_probe_s", "host_probe_s_median", "point",
                  "fail_above_pct")


def write_fidelity(out_dir: Path, context: dict, steps: StepComparison | None, e2e: pd.DataFrame | None,
                   headline: dict[str, float], failed: dict[str, float],
                   extra_sections: list[tuple[str, pd.DataFrame]] = (), extra_figures: list[Path] = ()) -> Path:
    """Write fidelity.json / .md / .html and plots/*.png into `out_dir`; return the HTML path.

    Args:
        context: what was compared (config, engine run, cost model, device, ...), printed as is.
        steps: the per-step comparison, or None (e.g. against vLLM, which logs no plans).
        e2e: `experiments.verification.verify.e2e_fidelity` rows, or None.
        headline, failed: headline absolute errors (%) and those over the `--fail-above` limit.
        extra_sections, extra_figures: further (title, table) pairs and PNGs of a comparison
            (e.g. `verify --against-run`'s per-request errors and per-second overlay), shown after
            the standard ones; the tables are also in fidelity.json under "extra".
    """
    plots = out_dir / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    figures = []
    if steps is not None:
        write_csv(out_dir / "steps_fidelity.csv", steps.frame)
        figures.append(_scatter(steps.frame, plots / "step_scatter.png"))
    if e2e is not None:
        figures.append(_e2e_bars(e2e, plots / "e2e_errors.png"))
    document = {"context": context, "headline_abs_error_pct": headline, "over_limit": failed,
                "passed": not failed, "steps": steps.summary() if steps is not None else None,
                "e2e": e2e.to_dict(orient="records") if e2e is not None else None,
                "extra": {title: table.to_dict(orient="records") for title, table in extra_sections}}
    write_text(out_dir / "fidelity.json", json.dumps(document, indent=2, default=_json_default))
    sections = _sections(steps, e2e) + list(extra_sections)
    figures += list(extra_figures)
    write_text(out_dir / "fidelity.md", _markdown(context, headline, failed, sections, figures, out_dir))
    html_path = out_dir / "fidelity.html"
    write_text(html_path, _html(context, headline, failed, sections, figures))
    return html_path


def append_ledger(ledger: Path, context: dict, steps: StepComparison | None, e2e: pd.DataFrame | None,
                  passed: bool) -> dict:
    """Append one row (`LEDGER_COLUMNS`) to the CSV `ledger` (created with a header); return it."""
    row = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "device": context.get("device", ""), "model": context.get("model", ""),
           "config": context.get("config", ""), "cost_model": context.get("cost_model", ""),
           "source": context.get("source", ""), "python": platform.python_version(),
           **{f"{lib}_version": _version(lib) for lib in LEDGER_LIBRARIES}, "passed": passed}
    if steps is not None:
        overall = steps.summary()["all"]
        row.update(step_mape_pct=overall["mape_pct"], step_p95_ape_pct=overall["p95_ape_pct"])
    if e2e is not None:
        errors = dict(zip(e2e["metric"], e2e["error_pct"]))
        for column in LEDGER_COLUMNS:
            metric = column.removesuffix("_error_pct")
            if column.endswith("_error_pct") and metric in errors:
                row[column] = errors[metric]
    row.update({k: context[k] for k in ("timing", "reference_probe_s", "host_probe_s_median", "point", "fail_above_pct")
                if context.get(k) is not None})
    ledger.parent.mkdir(parents=True, exist_ok=True)
    columns = _existing_header(ledger) or LEDGER_COLUMNS  # a ledger begun by an older version keeps its columns
    text = io.StringIO(newline="")  # the ledger with the row appended, replaced whole (experiments.outputs)
    writer = csv.DictWriter(text, fieldnames=columns)
    if columns is LEDGER_COLUMNS:
        writer.writeheader()
    writer.writerow({k: row.get(k, "") for k in columns})
    old = ledger.read_bytes().decode("utf-8") if columns is not LEDGER_COLUMNS else ""  # as written: \r\n rows
    write_text(ledger, old + ("" if not old or old.endswith("\n") else "\n") + text.getvalue(), keep=True)
    return row


def _existing_header(ledger: Path) -> list[str] | None:
    if not ledger.is_file() or ledger.stat().st_size == 0:
        return None
    with ledger.open(newline="") as f:
        return next(csv.reader(f), None)


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return ""


def _json_default(value):
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return str(value)


def _sections(steps: StepComparison | None, e2e: pd.DataFrame | None) -> list[tuple[str, pd.DataFrame]]:
    """(title, table) pairs shown in both the Markdown and the HTML."""
    sections = []
    if steps is not None:
        summary = steps.summary()
        table = pd.DataFrame([{"step kind": kind, **summary[kind]} for kind in ("all", *STEP_KINDS) if kind in summary])
        sections.append(("Per step: the cost model prices the executed plans", table.rename(columns={
            "n": "steps", "mape_pct": "MAPE %", "p95_ape_pct": "P95 |err| %", "max_ape_pct": "max |err| %",
            "mean_signed_pct": "mean signed err %"})))
        scale = summary["run_scale"]
        sections.append(("Per step: how much one speed factor for the whole run explains (diagnostic)",
                         pd.DataFrame([{"median measured / predicted": scale["measured_over_predicted"],
                                        "MAPE % after that factor": scale["mape_after_scale_pct"]}])))
    if e2e is not None:
        sections.append(("End to end: simulator (predicted) against the run (measured)",
                         e2e.rename(columns={"error_pct": "signed err %"})))
    return sections


def _scatter(frame: pd.DataFrame, path: Path) -> Path:
    """Predicted against measured step time (ms), coloured by step kind, with the y = x line."""
    fig, ax = plt.subplots(figsize=(6, 5))
    for kind in STEP_KINDS:
        part = frame[frame["kind"] == kind]
        if len(part):
            ax.scatter(part["measured_s"] * 1e3, part["predicted_s"] * 1e3, s=10, alpha=0.7, label=kind)
    top = 1.05 * max(frame["measured_s"].max(), frame["predicted_s"].max()) * 1e3
    ax.plot([0, top], [0, top], color="grey", lw=1, ls="--", label="predicted = measured")
    ax.set_xlabel("measured step time (ms)")
    ax.set_ylabel("predicted step time (ms)")
    ax.set_title("Per step: predicted against measured")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)
    return path


def _e2e_bars(e2e: pd.DataFrame, path: Path) -> Path:
    """Signed % error per end-to-end metric (horizontal bars)."""
    fig, ax = plt.subplots(figsize=(7, 0.3 * len(e2e) + 1.2))
    errors = e2e["error_pct"].fillna(0.0)
    ax.barh(e2e["metric"], errors, color=["tab:red" if e > 0 else "tab:blue" for e in errors])
    ax.axvline(0, color="black", lw=0.8)
    ax.invert_yaxis()
    ax.set_xlabel("signed error, % of measured (positive: simulator slower)")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)
    return path


SIGN_NOTE = ("Signed errors are (simulated − measured) / measured, in % of the measured value: negative means "
             "the simulator predicts less time than was measured. The measured step times are the engine run's "
             "clock (see timing above).")


def timeseries_overlay(simulated: pd.DataFrame, measured: pd.DataFrame, logged: pd.DataFrame | None,
                       path: Path) -> Path:
    """Running, waiting and generation throughput per second, simulated against measured (the
    recording's request timestamps, same definitions: `recorded_run.per_second`) and, dotted,
    the engine's own logged timeseries when the recording has one."""
    fig, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
    for ax, column, label in zip(axes, ("running", "waiting", "gen_throughput"),
                                 ("running requests", "waiting requests", "output tokens/s")):
        if measured[column].notna().any():  # the recording has no per-token times for the throughput
            ax.plot(measured["t"], measured[column], label="measured (request timestamps)", color="black")
        if logged is not None and column in logged:
            ax.plot(logged["t"], logged[column], label="measured (engine log)", color="gray", linestyle=":")
        ax.plot(simulated["t"], simulated[column], label="simulated", color="tab:blue")
        ax.set_ylabel(label)
    axes[0].legend(fontsize=8)
    axes[-1].set_xlabel("seconds since the first arrival")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path


def _verdict(headline: dict[str, float], failed: dict[str, float], limit_pct: float | None = None) -> str:
    parts = ", ".join(f"{k} {v:.1f} %" for k, v in headline.items())
    if failed:
        return (f"FAILED --fail-above {limit_pct:g} %: " + ", ".join(f"{k} {v:.1f} %" for k, v in failed.items())
                + f" over the limit (headline |errors|: {parts})")
    gate = f"passed --fail-above {limit_pct:g} %" if limit_pct is not None else "no gate (--fail-above not given)"
    return f"{gate}; headline |errors|: {parts}"


def _shown(value) -> str:
    """A context value as the reports print it: floats to 4 significant digits (fidelity.json keeps them whole)."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _markdown(context, headline, failed, sections, figures, out_dir: Path) -> str:
    lines = ["# Fidelity report", ""] + [f"- {k}: {_shown(v)}" for k, v in context.items()]
    lines += ["", f"**{_verdict(headline, failed, context.get('fail_above_pct'))}**", "", SIGN_NOTE, ""]
    for title, table in sections:
        lines += [f"## {title}", "", *markdown_table(table), ""]
    lines += [f"![{p.stem}]({p.relative_to(out_dir)})" for p in figures]
    return "\n".join(lines) + "\n"


def _html(context, headline, failed, sections, figures) -> str:
    items = "".join(f"<li>{html.escape(f'{k}: {_shown(v)}')}</li>" for k, v in context.items())
    body = ""
    for title, table in sections:
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in table.columns)
        rows = "".join("<tr>" + "".join(f"<td>{html.escape(format_cell(v))}</td>" for v in row) + "</tr>"
                       for row in table.itertuples(index=False))
        body += f"<h2>{html.escape(title)}</h2><table><tr>{head}</tr>{rows}</table>"
    images = "".join(f'<img alt="{p.stem}" src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">'
                     for p in figures)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>Fidelity — sarathi-sim</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}img{{max-width:100%;display:block;margin:1em 0}}</style>
</head><body><h1>Fidelity report</h1><ul>{items}</ul>
<p><b>{html.escape(_verdict(headline, failed, context.get("fail_above_pct")))}</b></p><p>{html.escape(SIGN_NOTE)}</p>
{body}{images}</body></html>
"""
