"""Fidelity on this CPU at 30, 60 and 90 % of the simulator's predicted capacity (issue 7's targets).

Run from the repo root after `make test` (which installs torch):
    .venv/bin/python benchmarks/bench_fidelity.py [--budget-s 30] [--num-requests 192] [--out runs/bench_fidelity]
        [--reuse-calibration]

1. `sarathi-sim calibrate` the tiny Llama of tests/data/engine/tiny (profile + fit + engine overhead),
   at the config's KV block size.
2. For each point (sarathi chunk 32, chunk 64, and chunk 32 with split-N 3 at α = 0.5, drafts
   accepted as that model draws them), a capacity search in the simulator with that calibration,
   under the SLO below (P50 scheduling delay: a queueing knee, since the tiny model's steps are
   milliseconds), on the same trace as step 3 (seed 0, `--num-requests`).
3. `sarathi-sim verify --run-engine` of each point at 30, 60 and 90 % of its capacity.
Prints one Markdown row per (point, load): per-step MAPE and the signed P50 TTFT, TPOT, E2E errors
(simulated vs measured), then the step MAPE the raw CPU times would give and the host time ratio:
the run's median probe time over the calibration's (above 1: the host ran slower than during the
calibration). Steps are timed by the serving thread's CPU time scaled to the calibration's host
speed (`engine run --timing auto` = `cpu-normalized` on the CPU with a calibration), as the
profiler times ops.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "data" / "engine" / "tiny_engine.yaml"
SLO = {"scheduling_delay_p50_s": 0.05}
POINTS = {
    "sarathi chunk 32": {"engine.chunk_size": 32},
    "sarathi chunk 64": {"engine.chunk_size": 64},
    "split-N 3, α 0.5 (chunk 32)": {"engine.chunk_size": 32, "engine.split_n": 3, "engine.acceptance": 0.5},
}
LOADS = (0.3, 0.6, 0.9)


def cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "experiments.cli.main", *args], cwd=REPO, check=True,
                   stdout=subprocess.DEVNULL)


def capacity_qps(settings: dict, calibration: Path, out: Path, num_requests: int) -> float:
    config = yaml.safe_load(TINY.read_text())
    config["model"] = str(TINY.parent / config["model"])
    config["slo"] = SLO
    # The search's trials are the verify runs' trace (same seed and request count, scaled in time), so
    # "60 % of capacity" is 60 % of the rate at which that very trace meets the SLO.
    config["search"] = {"qps": [1, 2000], "precision": 0.05, "num_requests": num_requests, "seeds": 1}
    out.parent.mkdir(parents=True, exist_ok=True)
    path = out.parent / f"{out.name}.yaml"  # beside the run folder: sweep refuses one holding its input
    path.write_text(yaml.safe_dump(config))
    cli("sweep", str(path), "--out", str(out), "--no-cache", "--set", f"cost_model=profile:{calibration}",
        *[x for k, v in settings.items() for x in ("--set", f"{k}={v}")])
    return float(pd.read_csv(out / "points.csv")["capacity_qps"].iloc[0])


def verify(settings: dict, calibration: Path, qps: float, out: Path, num_requests: int) -> dict:
    forced = ["--forced-acceptance"] if "engine.split_n" in settings else []
    cli("verify", str(TINY), "--run-engine", "--cost-model", f"profile:{calibration}", "--out", str(out),
        "--set", f"trace.qps={qps:.4g}", "--set", f"trace.num_requests={num_requests}", *forced,
        *[x for k, v in settings.items() for x in ("--set", f"{k}={v}")])
    report = json.loads((out / "fidelity.json").read_text())
    signed = {row["metric"]: row["error_pct"] for row in report["e2e"]}
    context = report["context"]
    return {"step_mape": report["steps"]["all"]["mape_pct"], **{m: signed.get(m) for m in
                                                               ("ttft_s_p50", "tpot_s_p50", "e2e_s_p50")},
            "raw_mape": context.get("step_mape_unnormalized_pct"), "host_time_ratio": context.get("host_time_ratio")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=30.0)
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench_fidelity")
    parser.add_argument("--num-requests", type=int, default=192,
                        help="Poisson requests of the trace (capacity-search trials and engine runs).")
    parser.add_argument("--reuse-calibration", action="store_true", help="Keep OUT/calibration if it exists.")
    args = parser.parse_args()
    calibration = args.out / "calibration"
    block_size = yaml.safe_load(TINY.read_text())["engine"]["block_size"]  # profile the engine's KV blocks
    if not (args.reuse_calibration and (calibration / "engine_overhead.json").is_file()):
        cli("calibrate", "--model", str(TINY.parent / "tiny" / "config.json"), "--device", "cpu",
            "--budget-s", str(args.budget_s), "--block-size", str(block_size), "--out", str(calibration))
    print("| point | capacity QPS (sim) | load | step MAPE % | P50 TTFT % | P50 TPOT % | P50 E2E % "
          "| raw-CPU step MAPE % | host time ratio (run / calibration) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for index, (label, settings) in enumerate(POINTS.items()):
        capacity = capacity_qps(settings, calibration, args.out / f"search{index}", args.num_requests)
        for load in LOADS:
            row = verify(settings, calibration, load * capacity, args.out / f"point{index}-{int(load * 100)}",
                         args.num_requests)
            cells = [f"{row['step_mape']:.1f}"] + [f"{row[m]:+.1f}" if row[m] is not None else "n/a"
                                                   for m in ("ttft_s_p50", "tpot_s_p50", "e2e_s_p50")]
            cells += [f"{row['raw_mape']:.1f}" if row["raw_mape"] is not None else "n/a",
                      f"{row['host_time_ratio']:.2f}×" if row["host_time_ratio"] is not None else "n/a"]
            print(f"| {label} | {capacity:.4g} | {load:.0%} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
