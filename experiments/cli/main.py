"""The `sarathi-sim` command line: `simulate` one point, `sweep` all points of a config."""
from __future__ import annotations

import copy
import shutil
import time
from pathlib import Path
from typing import List, Optional

import pandas as pd
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from experiments.planning.backends import BackendError, check_available
from experiments.config import ConfigError, SweepConfig, describe_point, load_config
from experiments.cli.console import fail
from experiments.cli.engine import engine_app
from experiments.planning.report import format_cell, recommend, write_capacity_report, write_report
from experiments.planning.search import search_slo
from experiments.planning.sweep import (config_as_run, run_capacity_sweep, run_sweep, sweep_requests,
                                        write_capacity_results, write_results)
from experiments.outputs import CACHE_DIR, OutputFolderError, RunFolder
from experiments.cli.profile import fit, profile
from experiments.cli.trace import trace_app
from experiments.cli.verify import calibrate, verify

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Capacity planning for LLM serving: simulate chunked prefill, paged KV and schedulers.")
app.add_typer(trace_app, name="trace")
app.add_typer(engine_app, name="engine")
app.command()(profile)
app.command()(fit)
app.command()(calibrate)
app.command()(verify)
# Wide enough for the points table when output is piped (rich defaults to 80 columns then).
_WIDTH = max(shutil.get_terminal_size((120, 24)).columns, 120)
console = Console(width=_WIDTH)
err_console = Console(stderr=True, width=_WIDTH)

SetOption = typer.Option(None, "--set", help="Override a config key: --set trace.qps=4 (repeatable).")


@app.command()
def sweep(
    config: Path = typer.Argument(..., help="Sweep config YAML (see experiments/configs/)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default: runs/<name>)."),
    set_: Optional[List[str]] = SetOption,
    jobs: Optional[int] = typer.Option(None, "--jobs", min=1, help="Worker processes (default: CPUs)."),
    no_cache: bool = typer.Option(False, "--no-cache",
                                  help="Recompute every point instead of reusing finished ones from OUT/.cache."),
    backend: str = typer.Option("local", "--backend",
                                help="Where points run: local (worker processes) or ray (a Ray cluster; "
                                     "pip install 'sarathi-sim\\[ray]')."),  # \\[: literal bracket in rich help
    ray_address: Optional[str] = typer.Option(None, "--ray-address",
                                              help="Ray cluster to join (e.g. auto, ray://head:10001); "
                                                   "default: start Ray on this machine."),
) -> None:
    """Simulate every point of CONFIG in parallel; write tables and a report.

    Finished points are cached in OUT/.cache, so a sweep that was interrupted resumes where it
    stopped; a point whose config changed is recomputed.
    """
    try:
        check_available(backend, ray_address)
    except BackendError as exc:
        fail(str(exc))
    base, points = _load(config, set_)
    out_dir = out or Path("runs") / base.name
    try:
        _run(base, points, out_dir, jobs, None if no_cache else out_dir / CACHE_DIR, backend, ray_address,
             config=config)
    except BackendError as exc:
        fail(str(exc))


@app.command()
def simulate(
    config: Path = typer.Argument(..., help="Config YAML."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default: runs/<name>-point<K>)."),
    set_: Optional[List[str]] = SetOption,
    point: int = typer.Option(0, "--point", min=0,
                              help="Which point to run: K-th of the expanded variants (default 0, the first); "
                                   "with no variants, the base config."),
) -> None:
    """Simulate one point of CONFIG (its first point unless --point K)."""
    base, points = _load(config, set_)
    if point >= len(points):
        labels = ", ".join(f"{i}: {describe_point(SweepConfig.model_validate(p))}" for i, p in enumerate(points))
        fail(f"--point {point} is out of range; this config has {len(points)} points ({labels})")
    _run(base, [points[point]], out or Path("runs") / f"{base.name}-point{point}", jobs=1, config=config)


def _load(config: Path, overrides: Optional[List[str]]):
    try:
        return load_config(config, overrides or [])
    except ConfigError as exc:
        fail(str(exc))


def _run(base: SweepConfig, points: list[dict], out_dir: Path, jobs: Optional[int],
         cache_dir: Optional[Path] = None, backend: str = "local", ray_address: Optional[str] = None,
         config: Optional[Path] = None) -> None:
    """Claim `out_dir` (`experiments.outputs.RunFolder`: only our files in it, one run at a time,
    the input `config` never written), run the points or the capacity search, write the outputs."""
    try:
        with RunFolder(out_dir, inputs=[config] if config else ()) as folder:
            if base.search is not None:
                _run_capacity(base, points, folder, jobs, cache_dir, backend, ray_address)
            else:
                _run_points(base, points, folder, jobs, cache_dir, backend, ray_address)
    except OutputFolderError as exc:
        fail(str(exc))


def _run_points(base: SweepConfig, points: list[dict], folder: RunFolder, jobs: Optional[int],
                cache_dir: Optional[Path], backend: str, ray_address: Optional[str]) -> None:
    started = time.perf_counter()
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err_console, transient=False) as progress:
        task = progress.add_task(f"simulating {base.name}", total=len(points))
        results = run_sweep(points, jobs=jobs, on_done=lambda i, row: progress.advance(task), cache_dir=cache_dir,
                            backend=backend, ray_address=ray_address)
    table = write_results(results, folder, config_as_run(base))
    folder.attempt(write_report, table, sweep_requests(results), base, folder.path, outputs=REPORT_FILES)
    _print_table(table, base)
    _finish(folder, table, cache_dir, started)
    if "error" in table and table["error"].notna().all():
        raise typer.Exit(1)


SHORT_COLUMNS = {"label": "point", "completed": "completed", "rejected": "rejected", "throughput_rps": "req/s",
                 "goodput_rps": "goodput/s", "ttft_s_p90": "TTFT p90 s", "tbt_s_p99": "TBT p99 s",
                 "tpot_s_p50": "TPOT p50 s", "slo_met": "SLO met"}


def _run_capacity(base: SweepConfig, points: list[dict], folder: RunFolder, jobs: Optional[int],
                  cache_dir: Optional[Path], backend: str = "local", ray_address: Optional[str] = None) -> None:
    """`search:` in the config: capacity per point by bisection, then the report."""
    started = time.perf_counter()
    slo = search_slo(base)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err_console) as progress:
        task = progress.add_task(f"capacity search {base.name}", total=len(points) * base.search.seeds)
        if base.search.loads:
            progress.console.print(f"then {len(points) * len(base.search.loads)} runs on the QPS grid {base.search.loads}")
        table, trials, loads = run_capacity_sweep(points, jobs, lambda i, row: progress.advance(task), cache_dir,
                                                  backend, ray_address)
        policy_check = None
        best = table.loc[table["capacity_qps"].idxmax()] if table.get("capacity_qps", pd.Series()).notna().any() else None
        if best is not None and best["scheduler"] == "sarathi":
            twin = copy.deepcopy(points[int(best["point_id"])])
            twin["engine"] = {**twin.get("engine", {}), "scheduler": "vllm_v1"}
            progress.update(task, total=progress.tasks[0].total + base.search.seeds)
            twin.setdefault("search", {})["loads"] = []
            policy_check, _, _ = run_capacity_sweep([twin], jobs, lambda i, row: progress.advance(task), cache_dir,
                                                    backend, ray_address)
    write_capacity_results(table, trials, folder, config_as_run(base), loads)
    folder.attempt(write_capacity_report, table, trials, base, slo, folder.path, policy_check, loads,
                   outputs=REPORT_FILES)
    view = table.reindex(columns=["label", "capacity_qps", "capacity_ci_low", "capacity_ci_high", "error"])
    console.print(view.to_string(index=False))
    _finish(folder, table, cache_dir, started)


REPORT_FILES = ("report.md", "report.html")


def _finish(folder: RunFolder, table: pd.DataFrame, cache_dir: Optional[Path], started: float) -> None:
    """Remove an earlier run's outputs this run did not rewrite, say what was written, and what
    could not be (then exit 1: the finished points are still finished, and cached when the cache
    could be written)."""
    folder.remove_stale()
    top = [name for name in folder.written if "/" not in name]
    if top:
        console.print(f"wrote {', '.join(top)} in {folder.path} ({time.perf_counter() - started:.1f} s)")
    unstored = table["cache_error"].dropna() if "cache_error" in table else pd.Series(dtype=object)
    if len(unstored):
        err_console.print(f"[yellow]note:[/yellow] the results cache {cache_dir} could not be written for "
                          f"{len(unstored)} of {len(table)} points ({unstored.iloc[0]}); a rerun recomputes them",
                          highlight=False)
    message = folder.failure_message()
    if message is not None:
        ran = int(table["error"].isna().sum()) if "error" in table else len(table)
        kept = (f"; the results of the finished points are kept in {cache_dir}, so a rerun after freeing "
                "space only writes the outputs") if cache_dir is not None and not len(unstored) else ""
        err_console.print(f"[red]error:[/red] {escape(message)}. {ran} of {len(table)} points finished "
                          f"(the table above){kept}", highlight=False)
        raise typer.Exit(1)


def _print_table(points: pd.DataFrame, base: SweepConfig) -> None:
    columns = {k: v for k, v in SHORT_COLUMNS.items() if k in points}
    table = Table(title=f"{base.name}: {len(points)} points")
    for c in columns.values():
        table.add_column(c, no_wrap=True)
    failed = points[points["error"].notna()] if "error" in points else points.iloc[0:0]
    for _, row in points.drop(index=failed.index).iterrows():
        table.add_row(*[format_cell(row[c]) for c in columns])
    console.print(table)
    for _, row in failed.iterrows():  # in full, not squeezed into a table cell
        err_console.print(f"[red]point {row['point_id']} ({row['label']}) failed:[/red] {row['error']}",
                          highlight=False)
    skipped = points.get("trace_rows_rejected")
    if skipped is not None and skipped.fillna(0).max() > 0:
        err_console.print(f"[yellow]note:[/yellow] {int(skipped.max())} trace rows were skipped as invalid "
                          "(see the report; strict: true stops at the first)", highlight=False)
    best = recommend(points, base.slo)
    if best is not None:
        console.print(f"recommended at this load: [bold]{best['label']}[/bold] (meets every SLO with the most headroom)")




def main() -> None:  # pragma: no cover - console-script shim
    app()


if __name__ == "__main__":  # pragma: no cover
    app()
