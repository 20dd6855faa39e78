"""Fit a profile directory and report each op's error on shapes the fit did not see.

Held-out shapes: per op, the distinct shapes in sorted order, every fifth one (index 2, 7, 12, ...)
— never the smallest or the largest, so the check is interpolation inside the profiled range
(extrapolation is checked separately on Vidur's GPU rows). The held-out errors come from a fit on
the other shapes; the saved model is then refitted on every shape.

Writes next to the profile: `cost_model.joblib` (the `FittedCostModel`), `fit_report.json` and
`fit_report.md` (per op: rows, MAPE, P95 and max absolute percentage error on held-out shapes,
and the tuned roofline terms used for unprofiled ops).
"""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pandas as pd

from profiler.atomic_write import write_text_whole
from profiler.fitted import MIN_ROWS, FittedCostModel, check_fit_coverage, fit_op, op_features
from profiler.profile_data import Profile

MODEL_FILE = "cost_model.joblib"
REPORT_JSON = "fit_report.json"
REPORT_MD = "fit_report.md"
_HOLD_OUT_EVERY = 5


def held_out_mask(rows: pd.DataFrame, key: tuple[str, ...]) -> np.ndarray:
    """True for the rows whose shape is held out (every fifth distinct shape, never the ends)."""
    shapes = rows[list(key)].drop_duplicates().sort_values(list(key)).apply(tuple, axis=1).tolist()
    held = {s for i, s in enumerate(shapes) if i % _HOLD_OUT_EVERY == 2 and i < len(shapes) - 1}
    return rows[list(key)].apply(tuple, axis=1).isin(held).to_numpy()


def percentage_errors(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """|predicted − measured| / measured × 100, (n,)."""
    return np.abs(np.asarray(predicted) - np.asarray(measured)) / np.asarray(measured) * 100.0


def held_out_errors(profile: Profile, statistic: str = "median", **params) -> pd.DataFrame:
    """Per op with enough rows: held-out MAPE, P95 and max APE (%) of a fit on the other shapes.

    Returns:
        Columns op, family, rows, held_out, mape_pct, p95_ape_pct, max_ape_pct (NaN errors where
        the op has too few rows to hold any out).
    """
    catalogue, rates = profile.catalogue, profile.meta["rates"]
    records = []
    for op in catalogue.ops:
        rows = profile.rows(op.name)
        if len(rows) < MIN_ROWS:
            continue
        mask = held_out_mask(rows, op.key)
        record = {"op": op.name, "family": op.family, "rows": len(rows), "held_out": int(mask.sum()),
                  "mape_pct": np.nan, "p95_ape_pct": np.nan, "max_ape_pct": np.nan}
        if mask.any() and (~mask).sum() >= MIN_ROWS:
            reg = fit_op(catalogue, rates, op, rows[~mask], statistic, **params)
            test = rows[mask]
            X = op_features(catalogue, rates, op, {k: test[k].to_numpy() for k in op.key})
            errors = percentage_errors(reg.predict(X), test[f"time_{statistic}_s"].to_numpy())
            record.update(mape_pct=errors.mean(), p95_ape_pct=np.percentile(errors, 95), max_ape_pct=errors.max())
        records.append(record)
    return pd.DataFrame.from_records(records)


def fit_directory(directory: str | Path, statistic: str = "median") -> tuple[FittedCostModel, pd.DataFrame]:
    """Fit the profile in `directory`, write the model and the report there.

    Returns:
        (the model fitted on every shape, the held-out error table).

    Raises:
        profile_data.ProfileError: as `Profile.load`, or a profile too thin to fit
            (`fitted.check_fit_coverage`: a layer GEMM or attention op with fewer than
            `MIN_ROWS` shapes); nothing is written then.
        atomic_write.OutputWriteError: the model or a report file could not be written (named;
            each file is written whole or not at all, so the previous one stays).
    """
    directory = Path(directory)
    profile = Profile.load(directory)
    check_fit_coverage(profile, directory)
    errors = held_out_errors(profile, statistic)
    model = FittedCostModel.fit(profile, statistic, source=str(directory))
    model.save(directory / MODEL_FILE)
    report = {
        "created_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "profile": str(directory), "statistic": statistic,
        "model": profile.meta["model"].get("name"), "device": profile.meta["device"].get("name"),
        "fitted_ops": sorted(model.regressors),
        "fallback_ops": [op.name for op in profile.catalogue.ops if op.name not in model.regressors
                         and op.family not in ("all_reduce", "cpu_overhead")],  # ring model, constant
        "fallback_roofline": model.fallback.__dict__,
        "held_out": errors.to_dict(orient="records"),
    }
    write_text_whole(directory / REPORT_JSON, json.dumps(report, indent=2, default=float) + "\n")
    write_text_whole(directory / REPORT_MD, _markdown(report, errors))
    return model, errors


def _markdown(report: dict, errors: pd.DataFrame) -> str:
    lines = [f"# Fit report: {report['model']} on {report['device']}", "",
             f"Profile `{report['profile']}`, fitted on the {report['statistic']} time per call, "
             f"{report['created_utc']}. Errors are on held-out shapes (every fifth distinct shape "
             "of each op, fitted on the rest).", "",
             "| op | family | rows | held out | MAPE % | P95 APE % | max APE % |", "|---|---|---|---|---|---|---|"]
    for r in errors.itertuples():
        lines.append(f"| {r.op} | {r.family} | {r.rows} | {r.held_out} | {r.mape_pct:.1f} | "
                     f"{r.p95_ape_pct:.1f} | {r.max_ape_pct:.1f} |")
    fb = report["fallback_roofline"]
    fallback = ", ".join(report["fallback_ops"]) or "none"
    lines += ["", f"Ops without {MIN_ROWS} profiled shapes ({fallback}) are priced by the roofline tuned on the "
              "profiled ones: "
              f"{fb['flops_efficiency']:.2f} of peak FLOP/s, {fb['bandwidth_efficiency']:.2f} of bandwidth "
              f"(GEMM, attention), {fb['elementwise_bandwidth_efficiency']:.2f} (element-wise), "
              f"{fb['kernel_latency_s'] * 1e6:.1f} µs a launch.", ""]
    return "\n".join(lines)
