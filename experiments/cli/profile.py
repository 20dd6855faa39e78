"""`sarathi-sim profile` (time the model's ops on this machine), `sarathi-sim profile import`
(public kernel tables into a measured-table directory) and `sarathi-sim fit` (fit a cost model to
a profile directory); registered on the main app in `experiments/cli/main.py`."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import typer
from rich.console import Console

console = Console()


def profile(
    ctx: typer.Context,
    model: str = typer.Option(None, "--model", help="Built-in model name or a path to an HF config.json (or its folder)."),
    device: str = typer.Option("cpu", "--device", help="cpu (float32) or cuda (bf16, the first GPU)."),
    budget_s: float = typer.Option(60.0, "--budget-s", min=1.0, help="Wall-clock budget of the timing loop, seconds."),
    out: Path = typer.Option(None, "--out", help="Profile directory to write (CSV per op family + profile.json)."),
    tensor_parallel_size: int = typer.Option(1, "--tp", min=1, help="Time one rank's shards at this TP degree."),
    threads: int = typer.Option(1, "--threads", min=1, help="CPU intra-op threads (1: timed by thread CPU time)."),
    seed: int = typer.Option(0, "--seed", help="Seeds inputs and the random shapes."),
    block_size: int = typer.Option(16, "--block-size", min=1, help="KV-cache block size of the attention and "
                                   "input-preparation shapes: the engine's engine.block_size."),
) -> None:
    """Time every op of MODEL over a shape grid that fits --budget-s; write a profile directory.
    (`sarathi-sim profile import --help`: import public kernel tables instead.)"""
    if ctx.invoked_subcommand is not None:  # `profile import ...`
        return
    if model is None or out is None:
        console.print("[red]error:[/red] sarathi-sim profile needs --model and --out "
                      "(or a sub-command: sarathi-sim profile import ...)", soft_wrap=True)
        raise typer.Exit(2)
    from profiler import get_model_spec
    from profiler.harness import run_profile

    try:
        spec = get_model_spec(model)
        with budget_progress(f"profiling {spec.name} on {device}", budget_s) as log:
            run_profile(spec, device, budget_s, out, tensor_parallel_size=tensor_parallel_size,
                        num_threads=threads, seed=seed, block_size=block_size, log=log)
    except (ValueError, OSError) as exc:  # OutputWriteError names the file
        console.print(f"[red]error:[/red] {exc}", soft_wrap=True)
        raise typer.Exit(2)
    console.print(f"wrote {out}; fit it with: sarathi-sim fit {out}")


@contextmanager
def budget_progress(description: str, budget_s: float):
    """A progress bar over the profiler's time budget (the timing loop fills it, then re-times
    shapes in rounds until the budget is spent), with the profiler's log lines printed above it.
    Yields the `log` callable to hand to `run_profile`. Display only: nothing timed depends on it."""
    import threading
    import time

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    started = time.monotonic()
    done = threading.Event()
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                  TextColumn("{task.completed:.0f}/{task.total:.0f} s of the budget"), TimeElapsedColumn(),
                  console=Console(stderr=True)) as progress:
        task = progress.add_task(description, total=budget_s)

        def tick() -> None:
            while not done.wait(0.5):
                progress.update(task, completed=min(time.monotonic() - started, budget_s))

        ticker = threading.Thread(target=tick, daemon=True)
        ticker.start()
        try:
            yield progress.console.print
        finally:
            done.set()
            ticker.join()
            progress.update(task, completed=budget_s)


def fit(
    directory: Path = typer.Argument(..., help="A profile directory (from `sarathi-sim profile`)."),
    statistic: str = typer.Option("median", "--statistic", help="Per-call time to fit: median | min | mean."),
) -> None:
    """Fit per-op regressors to DIRECTORY; write cost_model.joblib and fit_report.{md,json} there."""
    from profiler.fit_report import REPORT_MD, fit_directory

    try:
        model, errors = fit_directory(directory, statistic)
    except (ValueError, OSError) as exc:  # OutputWriteError names the file
        console.print(f"[red]error:[/red] {exc}", soft_wrap=True)
        raise typer.Exit(2)
    console.print((directory / REPORT_MD).read_text())
    console.print(f"wrote {directory}/cost_model.joblib ({len(model.regressors)} ops fitted); "
                  f"use it with `cost_model: profile:{directory}`")


# `sarathi-sim profile` is a group: without a sub-command it times this machine (`profile` above);
# `sarathi-sim profile import` reads a public kernel database.
profile_app = typer.Typer(add_completion=False, rich_markup_mode=None, help="Time the model's ops on this machine, or `profile import` "
                                                    "public kernel tables.")
profile_app.callback(invoke_without_command=True)(profile)


@profile_app.command("import")
def profile_import(
    source: Path = typer.Argument(..., help="AIConfigurator system folder (…/aiconfigurator/h100_sxm), LLMServingSim "
                                            "variant folder (…/RTXPRO6000/Qwen/Qwen3-32B/bf16) or Vidur mlp.csv."),
    kind: str = typer.Option(..., "--from", help="aiconfigurator | llmservingsim | vidur."),
    out: Path = typer.Option(..., "--out", help="Measured-table directory to write (CSVs + measured.json)."),
    device: str = typer.Option(None, "--device", help="Built-in device key (default: from the source's folders)."),
    model: str = typer.Option(None, "--model", help="Built-in model or config.json: checked against the tables "
                                                    "(required for llmservingsim)."),
    tensor_parallel_size: int = typer.Option(1, "--tp", min=1, help="TP degree to read (llmservingsim, vidur) "
                                                                    "and to check coverage at."),
    all_reduce: Path = typer.Option(None, "--all-reduce", help="Vidur all_reduce.csv of the same GPU."),
) -> None:
    """Import a public kernel database into a measured-table directory; use it with
    `cost_model: measured:DIR` (several: measured:DIR1,DIR2, preferred first)."""
    from profiler import get_model_spec
    from profiler.importers import import_source
    from profiler.measured.tables import check_output_folder

    try:
        check_output_folder(out)  # before the import's work; save checks it again
        spec = get_model_spec(model) if model else None
        tables = import_source(kind, source, model=spec, device=device, tensor_parallel_size=tensor_parallel_size,
                               all_reduce_csv=all_reduce)
        tables.save(out)
    except (ValueError, OSError) as exc:
        console.print(f"[red]error:[/red] {exc}", soft_wrap=True)
        raise typer.Exit(2)
    rows = ", ".join(f"{name} {len(t)}" for name, t in tables.tables.items())
    dropped = tables.meta.get("dropped_rows") or {}
    too_fast = tables.meta.get("dropped_faster_than_datasheet") or {}
    console.print(f"wrote {out}: {tables.label}, licence {tables.meta['licence']}; rows: {rows}"
                  + (f"; dropped (NaN or non-positive time or size): {dropped}" if dropped else "")
                  + (f"; dropped (faster than the datasheet roofline): {too_fast}" if too_fast else ""), soft_wrap=True)
    for skipped in tables.meta.get("datasheet_checks_skipped") or []:
        console.print(f"note: {skipped}", soft_wrap=True)
    console.print(f"use it with `cost_model: measured:{out}`")
