"""`sarathi-sim verify` (the simulator against an engine run or a vLLM bench result) and
`sarathi-sim calibrate` (profile + fit); registered on the main app in `experiments/cli/main.py`."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import numpy as np
import pandas as pd
import typer
from rich.console import Console

from experiments.verification.calibrate import LEDGER_NAME, calibrate as run_calibration
from experiments.cli.console import fail
from experiments.outputs import OutputFolderError, OutputWriteError, RunFolder, write_atomic, write_csv, write_text
from experiments.deployment import build_pricer
from experiments.point import build_cost_model, cost_model_columns, device_name
from experiments.config import AcceptanceFile, ConfigError, SweepConfig, describe_point, load_config
from experiments.verification.fidelity_report import append_ledger, write_fidelity
from experiments.verification.verify import (HEADLINE_E2E, e2e_fidelity, headline_errors, headline_text,
                                             measured_step_times, over_limit, read_measured_steps, signed_error_pct,
                                             signed_headline, simulate_summary, step_fidelity)
from profiler.json_object import read_json_object

console = Console(width=120)


def verify(
    config: Optional[Path] = typer.Argument(None, help="Config YAML (as for `simulate` and `engine run`); "
                                            "omitted with --against-run, whose bundle describes the deployment."),
    engine_run: Optional[Path] = typer.Option(None, "--engine-run", help="An `engine run` directory of CONFIG."),
    run_engine: bool = typer.Option(False, "--run-engine", help="Run CONFIG on the engine first (OUT/engine)."),
    cost_model: Optional[str] = typer.Option(None, "--cost-model", help="profile:DIR or roofline "
                                             "(default: the config's cost_model)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Report directory (default: runs/<name>-verify)."),
    fail_above: Optional[float] = typer.Option(None, "--fail-above", min=0.0, help="Exit 1 when per-step MAPE or "
                                               "|P50 TTFT/TPOT/E2E error| exceeds PCT percent."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="Override a config key: --set trace.qps=4."),
    point: Optional[int] = typer.Option(None, "--point", min=0, help="Which point of the config's variants "
                                        "(default 0)."),
    ledger: Optional[Path] = typer.Option(None, "--ledger", help="Calibration ledger CSV to append to (default: "
                                          f"DIR/{LEDGER_NAME} for profile:DIR, else OUT/{LEDGER_NAME})."),
    forced_acceptance: bool = typer.Option(False, "--forced-acceptance", help="With --run-engine, split-N: "
                                           "accept drafts as engine.acceptance draws them (random weights)."),
    threads: int = typer.Option(1, "--threads", min=1, help="torch CPU threads of --run-engine."),
    device: str = typer.Option("auto", "--device", help="Device of --run-engine: cpu, cuda, cuda:N or auto (cuda "
                               "when available)."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="dtype of --run-engine (default: float32 on the CPU, "
                                        "as the CPU profile; engine.dtype on CUDA)."),
    against_vllm_bench: Optional[Path] = typer.Option(None, "--against-vllm-bench", help="A `vllm bench serve "
                                                      "--save-result --save-detailed` JSON to compare with."),
    trace: Optional[Path] = typer.Option(None, "--trace", help="With --against-vllm-bench: the trace file "
                                         "the benchmark replayed (simulated instead of CONFIG's trace)."),
    top: Optional[int] = typer.Option(None, "--top", min=1, help="With --run-engine: verify the K best points "
                                      "of the config's sweep (each simulated once at its trace's load, no "
                                      "`search:`), each in OUT/point<i>/."),
    against_run: Optional[Path] = typer.Option(None, "--against-run", help="A recorded real-engine run "
                                               "(LLMServingSim bundle: vllm/requests.jsonl and vllm/meta.json, optionally "
                                               "vllm/timeseries.csv and config.json) to simulate and compare with."),
    against_bench: Optional[Path] = typer.Option(None, "--against-bench", help="A benchmark tool's result: "
                                                 "inference-perf stage_<k>_lifecycle_metrics.json (or its folder), "
                                                 "GuideLLM benchmarks.json, AIPerf/genai-perf profile export, vllm bench "
                                                 "JSON; its load is replayed on CONFIG's deployment, stage by stage."),
    bench_config: Optional[Path] = typer.Option(None, "--bench-config", help="With --against-bench: "
                                                "inference-perf's config YAML (its load and data)."),
) -> None:
    """Compare the simulator with a measured run: per step (the cost model prices the engine's
    executed plans) and end to end (the same trace simulated); write fidelity.{json,md,html}.

    With --top K (and --run-engine), the config's points are simulated first and the K best
    (meeting the SLOs, then by goodput and throughput) are each run on the engine and verified,
    in OUT/point<i>/, with a summary in OUT/top.{json,md}."""
    overrides = list(set_ or [])
    engine = EngineOptions(forced_acceptance, threads, device, dtype)
    if ledger is not None and ledger.is_dir():
        fail(f"--ledger {ledger}: is a directory; give the CSV file to append to, e.g. {ledger / LEDGER_NAME}")
    if cost_model:
        overrides.append(f"cost_model={_absolute_cost_model(cost_model)}")
    if against_run is not None:
        others = [flag for flag, given in (("CONFIG", config is not None), ("--engine-run", engine_run is not None),
                                           ("--run-engine", run_engine), ("--against-vllm-bench", against_vllm_bench),
                                           ("--top", top), ("--point", point is not None), ("--trace", trace)) if given]
        if others:
            fail(f"--against-run takes its deployment and trace from the recording; drop {', '.join(others)} "
                 "(change the simulated deployment with --set, e.g. --set cost_model=roofline)")
        if _verify_recorded(against_run, overrides, out, fail_above, ledger):
            raise typer.Exit(1)
        return
    if config is None:
        fail("give CONFIG (a config YAML), or --against-run DIR to compare with a recorded run")
    if against_bench is not None:
        others = [flag for flag, given in (("--engine-run", engine_run is not None), ("--run-engine", run_engine),
                                           ("--against-vllm-bench", against_vllm_bench), ("--top", top),
                                           ("--trace", trace)) if given]
        if others:
            fail(f"--against-bench replays the tool's own load; drop {', '.join(others)}")
        if _verify_bench(config, overrides, point or 0, against_bench, bench_config, out, fail_above, ledger):
            raise typer.Exit(1)
        return
    if against_vllm_bench is not None:
        if trace is None:
            fail("--against-vllm-bench needs --trace FILE, the trace the benchmark replayed")
        if top is not None:
            fail("--top runs the best points on the engine; it cannot be combined with --against-vllm-bench")
        overrides.append(f"trace={{kind: file, path: '{trace.resolve()}'}}")
    if top is not None:
        if not run_engine or engine_run is not None:
            fail("--top K needs --run-engine (each chosen point is run on the engine), not --engine-run")
        if point is not None:
            fail("--top K chooses the points itself; drop --point")
        _verify_top(config, overrides, top, out, fail_above, ledger, engine)
        return
    points = _points(config, overrides)
    chosen = _point(points, point or 0)
    if point is None and len(points) > 1:
        console.print(f"[yellow]note:[/yellow] {config} has several points; verifying point 0 "
                      f"({describe_point(chosen)}); choose with --point K or verify the best with --top K")
    point = point or 0
    out_dir = out or Path("runs") / f"{chosen.name}-verify"
    try:
        failed = _verify_point(config, overrides, point, chosen, out_dir, engine_run, run_engine, fail_above, ledger,
                               engine, against_vllm_bench)[1]
    except (ValueError, OutputWriteError) as exc:
        fail(str(exc))
    if failed:
        raise typer.Exit(1)


def _verify_point(config: Path, overrides: list[str], point: int, chosen: SweepConfig, out_dir: Path,
                  engine_run: Optional[Path], run_engine: bool, fail_above: Optional[float], ledger: Optional[Path],
                  engine: "EngineOptions", against_vllm_bench: Optional[Path] = None):
    """One point's comparison and reports in `out_dir`, claimed as a run folder (only our files,
    one run at a time: `experiments.outputs.RunFolder`); returns `_compare_point`'s result.

    Raises:
        ValueError: the run cannot be compared (no steps, a run of another config, unreadable
            files), or the folder cannot be claimed (`OutputFolderError`).
        OutputWriteError: a report file could not be written (named).
    """
    with RunFolder(out_dir, inputs=[config]) as folder:
        result = _compare_point(config, overrides, point, chosen, out_dir, engine_run, run_engine, fail_above,
                                ledger, engine, against_vllm_bench)
        folder.remove_stale()
    return result


def _compare_point(config: Path, overrides: list[str], point: int, chosen: SweepConfig, out_dir: Path,
                   engine_run: Optional[Path], run_engine: bool, fail_above: Optional[float], ledger: Optional[Path],
                   engine: "EngineOptions", against_vllm_bench: Optional[Path] = None):
    """One point's comparison and reports; returns (headline errors in %, the ones over
    --fail-above, the end-to-end table with signed errors)."""
    if against_vllm_bench is not None:
        steps, e2e, context = None, *_against_vllm(chosen, against_vllm_bench)
    else:
        run_dir = _engine_dir(config, overrides, point, engine_run, run_engine, out_dir, engine)
        steps, e2e, context = _against_engine(chosen, run_dir, out_dir)
    context = {"config": str(config), "point": describe_point(chosen), "model": chosen.model,
               "cost_model": chosen.cost_model, **context, "fail_above_pct": fail_above}
    headline, failed = _report(out_dir, context, steps, e2e, fail_above, ledger or _default_ledger(chosen.cost_model, out_dir))
    return headline, failed, e2e


def _report(out_dir: Path, context: dict, steps, e2e, fail_above: Optional[float], ledger: Path,
            extra_sections=(), extra_figures=()):
    """Write the fidelity reports and the ledger row, print the headline; (headline, over the limit)."""
    headline = headline_errors(steps, e2e)
    failed = over_limit(headline, fail_above) if fail_above is not None else {}
    html_path = write_fidelity(out_dir, context, steps, e2e, headline, failed, extra_sections, extra_figures)
    append_ledger(ledger, context, steps, e2e, passed=not failed)
    console.print(headline_text(signed_headline(steps, e2e)))  # signed: + where the simulator is slower
    console.print(f"wrote fidelity.json, fidelity.md and {html_path.name} in {out_dir}")
    if failed:
        console.print("[red]over --fail-above:[/red] " + ", ".join(f"{k} {v:.1f} %" for k, v in failed.items()))
    return headline, failed


def _verify_recorded(bundle: Path, overrides: list[str], out: Optional[Path], fail_above: Optional[float],
                     ledger: Optional[Path]) -> dict:
    """`verify --against-run`: simulate the recorded deployment on its own trace (engine clock)
    and compare end to end, per request and per second; returns the metrics over --fail-above.
    OUT is claimed as a run folder (`experiments.outputs.RunFolder`)."""
    out_dir = out or Path("runs") / f"{bundle.resolve().name}-verify"
    try:
        with RunFolder(out_dir, inputs=[bundle]) as folder:
            failed = _compare_recorded(bundle, overrides, out_dir, fail_above, ledger)
            folder.remove_stale()
    except (OutputFolderError, OutputWriteError) as exc:
        fail(str(exc))
    return failed


def _compare_recorded(bundle: Path, overrides: list[str], out_dir: Path, fail_above: Optional[float],
                      ledger: Optional[Path]) -> dict:
    """The work of `_verify_recorded` in its claimed folder."""
    import yaml

    from experiments.verification import recorded_run as rr
    from experiments.verification.fidelity_report import timeseries_overlay
    from experiments.verification.ttft_terms import (engine_intake_s, from_intake, term_verdict, ttft_terms,
                                                     with_latencies_of)
    from profiler import get_model_spec
    from experiments.verification.verify import simulate_point

    config_path, trace_path = out_dir / "config.yaml", out_dir / "trace.csv"
    written: list[Path] = []
    try:
        run = rr.read_recorded_run(bundle)
        overridden = frozenset(o.split("=", 1)[0].strip() for o in overrides)
        _check_recorded_config(run, overrides, overridden)  # refuses before writing into OUT
        written.append(rr.write_trace(run, trace_path))
        written.append(write_text(config_path, yaml.safe_dump(rr.bundle_config(run, trace_path.resolve(), overridden),
                                                              sort_keys=False)))
        chosen = _point(load_config(config_path, overrides)[1], 0)
        cost_model = build_cost_model(chosen)
        result = simulate_point(chosen, build_pricer(chosen, cost_model))
        # Simulated requests measured from their engine intake, where vLLM stamps the recording's
        # queued_ts (experiments.verification.ttft_terms.engine_intake_s), not from the replayed arrival.
        lockstep = chosen.engine.data_parallel_size > 1 and get_model_spec(chosen.model).moe is not None
        aligned = from_intake(result.requests, engine_intake_s(result.requests, result.steps, lockstep))
        e2e = e2e_fidelity(with_latencies_of(result.summary, aligned), rr.measured_summary(run))
        per_request = rr.per_request_errors(run, aligned)
        terms = ttft_terms(run.requests, aligned, aligned["replayed_arrival_s"].to_numpy(), "replayed arrival")
    except (ConfigError, ValueError) as exc:
        for path in written:  # a failed run leaves no inputs of a run that did not happen
            path.unlink(missing_ok=True)
        fail(str(exc))
    r, sim = run.requests, aligned
    horizon_s = max(r["completion_s"].max(), sim["completion_s"].max())
    measured_s = rr.per_second(r["arrival_s"].to_numpy(), r["scheduled_s"].to_numpy(), r["completion_s"].to_numpy(),
                               None, horizon_s)
    served = sim[sim["first_scheduled_s"].notna()]
    simulated_s = rr.per_second(served["arrival_s"].to_numpy(), served["first_scheduled_s"].to_numpy(),
                                served["completion_s"].to_numpy(), list(served["token_times_s"]), horizon_s)
    (out_dir / "plots").mkdir(exist_ok=True)
    figure = timeseries_overlay(simulated_s, measured_s, run.timeseries, out_dir / "plots" / "per_second.png")
    per_second = pd.concat({"measured": measured_s.set_index("t"), "simulated": simulated_s.set_index("t")}, axis=1)
    write_atomic(out_dir / "per_second.csv", per_second.to_csv)
    summary = result.summary
    context = {"config": str(config_path), "point": describe_point(chosen), "model": chosen.model,
               "cost_model": chosen.cost_model, **cost_model_columns(chosen, cost_model),
               "source": f"recorded run {bundle}", "device": device_name(chosen),
               "engine": f"vLLM {run.meta.get('vllm_version', '?')}", "requests": len(r),
               "simulated_completed": summary.get("completed"), "simulated_rejected": summary.get("rejected"),
               "simulated_preemptions": summary.get("num_preemptions"), "fail_above_pct": fail_above}
    verdict = term_verdict(terms)
    context["ttft_terms"] = verdict
    console.print(f"TTFT terms (engine clock): {verdict}")
    sections = [("Per request: signed error of each request's latency (simulated − measured) / measured", per_request),
                ("TTFT by engine term (queued → scheduled → first token; schedule_wait_s and prefill_s simulated "
                 "only): " + verdict, terms)]
    return _report(out_dir, context, None, e2e, fail_above, ledger or _default_ledger(chosen.cost_model, out_dir),
                   sections, [figure])[1]


def _verify_bench(config: Path, overrides: list[str], point: int, result: Path, bench_config: Optional[Path],
                  out: Optional[Path], fail_above: Optional[float], ledger: Optional[Path]) -> dict:
    """`verify --against-bench`: CONFIG's point (its deployment; its trace is not used) under the
    tool's load, each stage from an idle engine, against the tool's measurements by the tool's
    definitions (experiments/verification/bench_verify.py); returns the errors over --fail-above."""
    from experiments.verification.bench_runs import read_bench_run
    from experiments.verification.bench_verify import bench_headline, compare_bench, plan_notes

    chosen = _point(_points(config, overrides), point)
    out_dir = out or Path("runs") / f"{chosen.name}-bench-verify"
    try:
        run = read_bench_run(result, bench_config)
        with RunFolder(out_dir, inputs=[config]) as folder:
            cost_model = build_cost_model(chosen)
            table = compare_bench(chosen, run, cost_model)
            headline = bench_headline(table)
            failed = over_limit(headline, fail_above) if fail_above is not None else {}
            context = {"config": str(config), "point": describe_point(chosen), "model": chosen.model,
                       "cost_model": chosen.cost_model, **cost_model_columns(chosen, cost_model),
                       "source": f"{run.tool} {result}", "device": device_name(chosen),
                       "stages": len(run.stages), "replay_notes": plan_notes(run), "fail_above_pct": fail_above}
            write_fidelity(out_dir, context, None, table, headline, failed)
            append_ledger(ledger or _default_ledger(chosen.cost_model, out_dir), context, None, table, passed=not failed)
            folder.remove_stale()
    except (ValueError, OutputFolderError, OutputWriteError) as exc:
        fail(str(exc))
    console.print(", ".join(f"{k} {v:.1f} %" for k, v in headline.items()))
    console.print(f"wrote fidelity.json, fidelity.md and fidelity.html in {out_dir}")
    if failed:
        console.print("[red]over --fail-above:[/red] " + ", ".join(f"{k} {v:.1f} %" for k, v in failed.items()))
    return failed


def _check_recorded_config(run, overrides: list[str], overridden: frozenset[str]) -> None:
    """Load the config `bundle_config` makes of `run` (with its trace) in a scratch folder outside
    OUT; ValueError when it does not load, said against the bundle's file and key
    (`recorded_run.explain_config_error`)."""
    import tempfile

    import yaml

    from experiments.verification import recorded_run as rr

    with tempfile.TemporaryDirectory(prefix="sarathi-verify-") as scratch:
        config_path, trace_path = Path(scratch) / "config.yaml", Path(scratch) / "trace.csv"
        simulated = rr.bundle_config(run, trace_path, overridden)
        rr.write_trace(run, trace_path)
        config_path.write_text(yaml.safe_dump(simulated, sort_keys=False))
        try:
            load_config(config_path, overrides, on_warning=lambda text: None)  # warned once, on the real load
        except ConfigError as exc:
            raise ValueError(rr.explain_config_error(run, str(exc), config_path, overridden)) from None


def _verify_top(config: Path, overrides: list[str], top: int, out: Optional[Path], fail_above: Optional[float],
                ledger: Optional[Path], engine: "EngineOptions") -> None:
    """Simulate every point, verify the `top` best on the engine, write OUT/top.{json,md}; OUT is
    claimed as a run folder, each point<i>/ as one of its own."""
    try:
        base, points = load_config(config, overrides)
    except ConfigError as exc:
        fail(str(exc))
    out_dir = out or Path("runs") / f"{base.name}-verify"
    try:
        with RunFolder(out_dir, inputs=[config]) as folder:
            passed = _verify_top_points(config, overrides, top, points, out_dir, fail_above, ledger, engine)
            folder.remove_stale()
    except (OutputFolderError, OutputWriteError) as exc:
        fail(str(exc))
    if not passed:
        raise typer.Exit(1)


def _verify_top_points(config: Path, overrides: list[str], top: int, points: list[dict], out_dir: Path,
                       fail_above: Optional[float], ledger: Optional[Path], engine: "EngineOptions") -> bool:
    """The work of `_verify_top` in its claimed folder; True when every chosen point passed."""
    from experiments.planning.report import markdown_table
    from experiments.planning.sweep import run_sweep

    plain = [{**p, "search": None} for p in points]  # rank on one simulated run per point
    rows = pd.DataFrame([r.row for r in run_sweep(plain)])
    ranked = rank_points(rows)
    if ranked.empty:
        fail(f"{config}: every point failed in simulation; nothing to verify")
    chosen_rows = []
    for _, row in ranked.head(top).iterrows():
        index = int(row["point_id"])
        console.print(f"[bold]point {index}[/bold]: {row['label']}")
        result = {"point_id": index, "label": row["label"], "slo_met": row.get("slo_met"),
                  "goodput_rps": row.get("goodput_rps"), "throughput_rps": row.get("throughput_rps")}
        try:
            headline, failed, e2e = _verify_point(config, overrides, index, SweepConfig.model_validate(points[index]),
                                                  out_dir / f"point{index}", None, True, fail_above, ledger,
                                                  engine)
        except (ValueError, typer.Exit) as exc:  # this point only: the engine refused or ran nothing
            reason = str(exc) if isinstance(exc, ValueError) else "the engine refused this point (see above)"
            console.print(f"[yellow]point {index} not verified:[/yellow] {reason}")
            chosen_rows.append({**result, "passed": False, "error": reason})
            continue
        signed = dict(zip(e2e["metric"], e2e["error_pct"])) if e2e is not None else {}
        chosen_rows.append({**result, **({"step_mape_pct": headline["step_mape"]} if "step_mape" in headline else {}),
                            **{f"{m}_error_pct": signed.get(m) for m in HEADLINE_E2E}, "passed": not failed})
    summary = pd.DataFrame(chosen_rows)
    write_text(out_dir / "top.json", summary.to_json(orient="records", indent=2))
    write_text(out_dir / "top.md", f"# Verification of the {len(summary)} best points of {config}\n\n"
                                    "Ranked in simulation (meeting the SLOs first, then goodput, then "
                                    "throughput). `step_mape_pct` is a mean absolute error; the `*_error_pct` "
                                    "columns are signed: (simulated − measured) / measured, percent. `passed`: "
                                    + (f"within --fail-above {fail_above:g} %. " if fail_above is not None else
                                       "no gate was set (--fail-above), so only a point that could not be "
                                       "verified fails. ")
                                    + "Each point's full report is in point<i>/fidelity.md.\n\n"
                                    + "\n".join(markdown_table(summary)) + "\n")
    console.print(f"wrote top.json and top.md in {out_dir}")
    return bool(summary["passed"].all())


def rank_points(rows: pd.DataFrame) -> pd.DataFrame:
    """Points that ran, best first: those meeting every SLO (or with no SLO set) before the others,
    then by goodput (requests/s meeting the per-request thresholds), then throughput. Empty when
    no point ran."""
    ok = rows[rows["error"].isna()] if "error" in rows else rows
    if ok.empty or "throughput_rps" not in ok:
        return ok.iloc[0:0]
    meets = ok["slo_met"].map(lambda v: True if v is None or v != v else bool(v)) if "slo_met" in ok else True
    ok = ok.assign(_meets=meets,
                   _goodput=ok["goodput_rps"] if "goodput_rps" in ok else 0.0)
    return ok.sort_values(["_meets", "_goodput", "throughput_rps", "point_id"],
                          ascending=[False, False, False, True]).drop(columns=["_meets", "_goodput"])


def calibrate(
    model: str = typer.Option(..., "--model", help="Built-in model name or a path to an HF config.json."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda."),
    budget_s: float = typer.Option(60.0, "--budget-s", min=1.0, help="Profiling budget, seconds."),
    out: Path = typer.Option(..., "--out", help="Calibration directory (profile, fitted model, fit report)."),
    threads: int = typer.Option(1, "--threads", min=1, help="CPU intra-op threads."),
    block_size: int = typer.Option(16, "--block-size", min=1, help="KV-cache block size of the profiled attention "
                                   "shapes: the engine.block_size of the configs it will price."),
    engine_overhead: bool = typer.Option(True, "--engine-overhead/--no-engine-overhead", help="Also serve a short "
                                         "trace on the engine (on --device) and fit its per-step overhead beyond the ops."),
) -> None:
    """Profile MODEL's ops on this machine and fit the cost model: one calibration directory."""
    try:
        # adopt: the profiler writes its own files; the folder held only ours when claimed
        with RunFolder(out, adopt=True):
            fitted, _ = run_calibration(model, device, budget_s, out, threads=threads, block_size=block_size,
                                        log=console.print, engine_overhead=engine_overhead)
    except (ValueError, OutputWriteError) as exc:
        fail(str(exc))
    console.print((out / "fit_report.md").read_text())
    console.print(f"wrote calibration {out} ({len(fitted.regressors)} ops fitted); verify with "
                  f"`sarathi-sim verify CONFIG --run-engine --cost-model profile:{out}`")


def _against_engine(point: SweepConfig, run_dir: Path, out_dir: Path):
    """Per-step and end-to-end comparisons with the engine run in `run_dir`.

    Raises:
        ValueError: the run was made with other engine, trace or model settings than `point`
            (its `engine.json` names them), or its files cannot be read.
    """
    settings_path = run_dir / "engine.json"
    settings = _read_json(settings_path) if settings_path.is_file() else {}
    _check_same_point(point, settings, settings_path)
    _note_block_size(point)
    plans, measured = read_measured_steps(run_dir)
    pricer = build_pricer(point, build_cost_model(point))
    steps = step_fidelity(plans, measured, pricer)
    simulated = simulate_summary(_with_measured_acceptance(point, run_dir, out_dir), pricer)
    engine_summary = _read_json(run_dir / "summary.json")
    context = {"source": f"engine run {run_dir}", "device": settings.get("device", "unknown"),
               "dtype": settings.get("dtype", ""), "clock": settings.get("clock", ""),
               "timing": settings.get("timing", "wall"), **_host_speed_context(settings, run_dir, steps)}
    return steps, e2e_fidelity(simulated, engine_summary), context


def _host_speed_context(settings: dict, run_dir: Path, steps) -> dict:
    """For a `cpu-normalized` run: the calibration's and the run's probe times, their ratio
    (`host_time_ratio` = run / calibration: above 1 the host ran slower than during the calibration,
    below 1 faster), and the step MAPE the raw CPU times would have given (so the effect of the
    normalisation is in the report, not hidden by it)."""
    if settings.get("timing") != "cpu-normalized":
        return {}
    from profiler.host_speed import seconds_or_none

    raw = measured_step_times(run_dir, normalized=False)
    raw_error = signed_error_pct(steps.frame["predicted_s"].to_numpy(), raw)
    reference, median = settings.get("reference_probe_s"), settings.get("host_probe_s_median")
    numbers = seconds_or_none(reference) is not None and seconds_or_none(median) is not None
    return {"reference_probe_s": reference, "host_probe_s_median": median,
            "host_time_ratio": median / reference if numbers else None,
            "step_mape_unnormalized_pct": float(np.nanmean(np.abs(raw_error)))}


def _note_block_size(point: SweepConfig) -> None:
    """Say so when the calibration profiled attention over another KV block size than the point's:
    the paged gather's cost depends on it, so its prices carry that difference."""
    from profiler.shipped import profile_dir_for

    directory = profile_dir_for(point.cost_model, point.device, point.model)
    sidecar = directory / "profile.json" if directory is not None else None
    profiled = _read_json(sidecar).get("block_size") if sidecar is not None and sidecar.is_file() else None
    if profiled is not None and profiled != point.engine.block_size:
        console.print(f"[yellow]note:[/yellow] {directory} profiled attention over blocks of {profiled} tokens; "
                      f"this point uses engine.block_size {point.engine.block_size} (calibrate --block-size "
                      f"{point.engine.block_size} to match)")


def _against_vllm(point: SweepConfig, result: Path):
    """End-to-end comparison with a vLLM bench result (vLLM logs no plans: no per-step part)."""
    from experiments.verification.vllm_bench import read_vllm_bench, vllm_summary

    frame, duration_s = read_vllm_bench(result)
    simulated = simulate_summary(point, build_pricer(point, build_cost_model(point)))
    if simulated["completed"] != len(frame):
        console.print(f"[yellow]note:[/yellow] the simulation completed {simulated['completed']} requests, "
                      f"{result} has {len(frame)}; is --trace the benchmark's workload?")
    return e2e_fidelity(simulated, vllm_summary(frame, duration_s)), {"source": f"vLLM bench {result}",
                                                                     "device": point.device}


def _check_same_point(point: SweepConfig, settings: dict, settings_path: Path) -> None:
    """Refuse to compare a run with a config it was not made from (`settings`: the run's
    engine.json at `settings_path`): the errors would describe another comparison. Runs without a
    recorded config (older runs) are not checked."""
    recorded = settings.get("config")
    if not isinstance(recorded, dict):
        return
    wanted = point.model_dump(mode="json")
    differ = [f"{section}.{key}" if key else section
              for section in ("model", "trace", "engine")
              for key, mine, theirs in _differences(wanted.get(section), recorded.get(section))]
    if differ:
        shown = ", ".join(differ[:6]) + (" ..." if len(differ) > 6 else "")
        raise ValueError(f"{settings_path}: the engine run was made with other settings than this point "
                         f"({shown} differ); give verify the config and --set overrides of that run")


def _differences(mine, theirs):
    """(key, mine, theirs) for the keys of two config sections that differ ('' for scalars).
    Keys the recorded run lacks (settings added after it was made) are not compared; paths are
    compared by their last two parts (a run recorded on another machine or checkout)."""
    if isinstance(mine, dict) and isinstance(theirs, dict):
        return [(k, mine[k], theirs[k]) for k in sorted(set(mine) & set(theirs))
                if _comparable(mine[k]) != _comparable(theirs[k])]
    return [] if _comparable(mine) == _comparable(theirs) else [("", mine, theirs)]


def _comparable(value):
    if isinstance(value, str) and "/" in value:
        return Path(value).parts[-2:]
    return value


def _with_measured_acceptance(point: SweepConfig, run_dir: Path, out_dir: Path) -> SweepConfig:
    """Split-N: the point with its acceptance replaced by the engine's measured (proposed,
    accepted) pairs (drafts.parquet, written to OUT/acceptance.csv), so that the end-to-end
    comparison isolates timing; other points unchanged.

    Only the rows of the largest grant are kept: a row granted fewer drafts (the token budget or
    the request's last tokens capped it) accepts at most that many, and `EmpiricalAcceptance`
    draws rows whatever a sequence was granted, so those rows under-drew the acceptance of full
    grants (BENCHMARKS.md, run H: 17 % of the rows, 0.845 accepted per full grant against the
    engine's 0.898). A full row capped at a smaller grant is the engine's own law there
    (`PositionalAcceptance.sample` caps the run of accepted drafts at the grant)."""
    drafts_path = run_dir / "drafts.parquet"
    if point.engine.split_n == 0 or not drafts_path.is_file():
        return point
    drafts = pd.read_parquet(drafts_path)
    if drafts.empty:
        return point
    if "drafts_granted" in drafts:  # runs recorded before grants were logged replay every row
        drafts = drafts[drafts["drafts_granted"] == drafts["drafts_granted"].max()]
    csv_path = out_dir / "acceptance.csv"
    write_csv(csv_path, drafts.rename(columns={"drafts_proposed": "proposed", "drafts_accepted": "accepted"})[
        ["proposed", "accepted"]])
    engine = point.engine.model_copy(update={"acceptance": AcceptanceFile(file=str(csv_path.resolve()))})
    return point.model_copy(update={"engine": engine})


@dataclass(frozen=True)
class EngineOptions:
    """How `--run-engine` runs the engine: forced acceptance (split-N with random weights), torch CPU
    threads, device (`auto`: CUDA when available) and dtype (None: float32 on the CPU, as the CPU
    profile is taken; the config's engine.dtype on CUDA)."""

    forced_acceptance: bool = False
    threads: int = 1
    device: str = "auto"
    dtype: Optional[str] = None


def _engine_dir(config: Path, overrides: list[str], point: int, engine_run: Optional[Path], run_engine: bool,
                out_dir: Path, engine: EngineOptions) -> Path:
    if (engine_run is None) == (not run_engine):
        fail("give exactly one of --engine-run DIR or --run-engine")
    if engine_run is not None:
        return engine_run
    from experiments.verification.engine_run import resolve_device, run_config

    try:
        device = resolve_device(engine.device)
        run_dir = run_config(config, out=out_dir / "engine", overrides=overrides, point=point, device=device,
                             dtype=engine.dtype or ("float32" if device == "cpu" else None),
                             forced_acceptance=engine.forced_acceptance, threads=engine.threads)
    except (ConfigError, ValueError) as exc:
        fail(str(exc))
    return run_dir


def _points(config: Path, overrides: list[str]) -> list[dict]:
    try:
        return load_config(config, overrides)[1]
    except ConfigError as exc:
        fail(str(exc))


def _point(points: list[dict], point: int) -> SweepConfig:
    if point >= len(points):
        fail(f"--point {point} is out of range; this config has {len(points)} points")
    return SweepConfig.model_validate(points[point])


def _absolute_cost_model(value: str) -> str:
    prefix = "profile:"
    return prefix + str(Path(value[len(prefix):]).expanduser().resolve()) if value.startswith(prefix) else value


def _default_ledger(cost_model: str, out_dir: Path) -> Path:
    from profiler.shipped import PROFILE_PREFIX

    if cost_model.startswith(PROFILE_PREFIX):
        return Path(cost_model[len(PROFILE_PREFIX):]) / LEDGER_NAME
    return out_dir / LEDGER_NAME


def _read_json(path: Path) -> dict:
    return read_json_object(path, "cannot read")


