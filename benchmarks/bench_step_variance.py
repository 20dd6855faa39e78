"""Step-time variance against the recorded real vLLM runs (issue 27 item 4): fit, then held-out tails.

For each recorded run in `../shared/validation/llmservingsim/` (vLLM 0.19, RTX PRO 6000; copies of
casys-kaist/LLMServingSim's bundles, MIT; never copied into the project):
1. simulate it as `verify --against-run` does (no variance) and fit `step_variance.cv` from its
   per-request TPOT residuals (`simulator.step_variance.fit_cv_from_tpot`);
2. simulate it again with the cv fitted on the *other* run (held out) and with the mean of both
   (pooled), each over `--seeds` seeds (engine.seed 0 .. K-1), and print the signed error of
   TTFT / TPOT / E2E percentiles against the recording: the mean over seeds ± their standard
   deviation, beside the deterministic run's.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_step_variance.py [--seeds 5] [--out FILE.csv]

Step by step with variance (no windows): about 1 CPU-s a run of 300 requests.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from experiments.cli.verify import _point
from experiments.config import load_config
from experiments.deployment import build_pricer
from experiments.point import build_cost_model
from experiments.verification import recorded_run as rr
from experiments.verification.verify import simulate_point
from simulator.step_variance import fit_cv_from_tpot

RUNS = Path(__file__).resolve().parents[2] / "shared" / "validation" / "llmservingsim"
BUNDLES = ("RTXPRO6000_Qwen3-32B_tp2", "RTXPRO6000_Qwen3-30B-A3B_dp2ep2")
METRICS = ("ttft_s_p50", "ttft_s_p90", "ttft_s_p99", "tpot_s_p50", "tpot_s_p90", "e2e_s_p50", "e2e_s_p90", "e2e_s_p99")


def simulate_bundle(run: rr.RecordedRun, folder: Path, overrides: list[str]):
    """The recording simulated as `verify --against-run` does, with `overrides` (--set style)."""
    trace = rr.write_trace(run, folder / "trace.csv")
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump(rr.bundle_config(run, trace.resolve()), sort_keys=False))
    point = _point(load_config(config, overrides)[1], 0)
    return simulate_point(point, build_pricer(point, build_cost_model(point)))


def errors(summary: dict, measured: dict) -> dict:
    return {m: 100.0 * (summary[m] - measured[m]) / measured[m] for m in METRICS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    runs = {name: rr.read_recorded_run(RUNS / name) for name in BUNDLES}
    rows, fitted = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        base = {}
        for name, run in runs.items():
            folder = Path(tmp) / name
            folder.mkdir()
            result = simulate_bundle(run, folder, [])
            sim = result.requests.sort_values("request_id").reset_index(drop=True)
            fitted[name] = fit_cv_from_tpot(run.requests["tpot_s"], sim["tpot_s"], run.requests["output_tokens"])
            base[name] = errors(result.summary, rr.measured_summary(run))
            rows.append({"run": name, "cv": 0.0, "cv from": "none", "seeds": 1,
                         **{f"{m} %": v for m, v in base[name].items()}})
            print(f"{name}: cv fitted from its per-request TPOT = {fitted[name]:.3f}")
        pooled = float(np.mean(list(fitted.values())))
        for name, run in runs.items():
            other = next(n for n in runs if n != name)
            for label, cv in ((f"held out ({other})", fitted[other]), ("pooled", pooled)):
                per_seed = []
                for seed in range(args.seeds):
                    folder = Path(tmp) / f"{name}-{label[:4]}-{seed}"
                    folder.mkdir()
                    result = simulate_bundle(run, folder, [f"step_variance.cv={cv}", f"engine.seed={seed}"])
                    per_seed.append(errors(result.summary, rr.measured_summary(run)))
                frame = pd.DataFrame(per_seed)
                row = {"run": name, "cv": round(cv, 4), "cv from": label, "seeds": args.seeds}
                for m in METRICS:
                    row[f"{m} %"] = frame[m].mean()
                    row[f"{m} sd"] = frame[m].std(ddof=1) if args.seeds > 1 else float("nan")
                rows.append(row)
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 250, "display.max_columns", 40, "display.float_format", "{:.1f}".format):
        print(table.to_string(index=False))
    if args.out:
        table.to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
