"""The `sarathi-sim` command line: `simulate` one point, `sweep` all points of a config."""
from __future__ import annotations

import copy
import io
import shutil
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from experiments.planning.backends import BackendError, check_available
from experiments.cli import interrupts
from experiments.cli.console import fail
from experiments.cli.lazy import LazyGroup
from experiments.cli.options import BackendOption, RayAddressOption
from experiments.outputs import CACHE_DIR, OutputFolderError, RunFolder

if TYPE_CHECKING:  # pandas, the config models and the planning code load when a command runs
    import pandas as pd

    from experiments.config import SweepConfig


class _Commands(LazyGroup):
    """The app's group: sweep, simulate (below) and the lazily imported other commands."""

    # name: (module, attribute, short help as `--help` lists it; tests check it against the command's own)
    lazy = {
        "flags": ("experiments.cli.flags", "flags", "Print the complete `vllm serve MODEL ...` command of a point "
                  "of a finished run."),
        "trace": ("experiments.cli.trace", "trace_app", "Inspect a trace or lengths file (stats) or write it as a "
                  "canonical trace (convert)."),
        "engine": ("experiments.cli.engine", "engine_app", "Run a config's trace on the real torch engine (gpu_engine)."),
        "profile": ("experiments.cli.profile", "profile_app", "Time the model's ops on this machine, or "
                    "`profile import` public kernel tables."),
        "fit": ("experiments.cli.profile", "fit", "Fit per-op regressors to DIRECTORY; write cost_model.joblib and "
                "fit_report.{md,json} there."),
        "calibrate": ("experiments.cli.verify", "calibrate", "Profile MODEL's ops on this machine and fit the cost "
                      "model: one calibration directory."),
        "search-xpyd": ("experiments.cli.xpyd", "search_xpyd", "Search every xPyD split and colocated layout of "
                        "--gpus GPUs by goodput per GPU; write the table and a plot."),
        "verify": ("experiments.cli.verify", "verify", "Compare the simulator with a measured run: per step (the "
                   "cost model prices the engine's executed plans) and end to end (the same trace simulated); write "
                   "fidelity.{json,md,html}."),
    }


class _App(typer.Typer):
    """The app as the `sarathi-sim` script calls it: under one handler of Ctrl-C and SIGTERM
    (`interrupts.run_command`: exit 130 / 143 whenever one came, wherever it landed). Tests'
    CliRunner invokes the command itself, with Python's defaults."""

    def __call__(self, *args, **kwargs):
        return interrupts.run_command(lambda: super(_App, self).__call__(*args, **kwargs))


app = _App(cls=_Commands, add_completion=False, no_args_is_help=True, rich_markup_mode=None,
           help="Capacity planning for LLM serving: simulate chunked prefill, paged KV and schedulers.")


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"sarathi-sim {version('sarathi-sim')}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Capacity planning for LLM serving: simulate chunked prefill, paged KV and schedulers."""


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
    backend: str = BackendOption,
    ray_address: Optional[str] = RayAddressOption,
) -> None:
    """Simulate every point of CONFIG in parallel; write tables and a report.

    Finished points are cached in OUT/.cache, so a sweep that was interrupted resumes where it
    stopped; a point whose config changed is recomputed. Exit status: 0 when every point ran, 1
    when a point failed (the others' results are still written) or an output could not be
    written, 2 for a bad config or option, 130 when interrupted (Ctrl-C), 143 when terminated (SIGTERM).
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
    from experiments.config import SweepConfig, describe_point

    base, points = _load(config, set_)
    if point >= len(points):
        labels = ", ".join(f"{i}: {describe_point(SweepConfig.model_validate(p))}" for i, p in enumerate(points))
        fail(f"--point {point} is out of range; this config has {len(points)} points ({labels})")
    _run(base, [points[point]], out or Path("runs") / f"{base.name}-point{point}", jobs=1, config=config,
         point_ids=[point])  # numbered as in the sweep: the report's "point K" is --point K


def _load(config: Path, overrides: Optional[List[str]]):
    from experiments.config import ConfigError, load_config

    try:
        return load_config(config, overrides or [], on_warning=lambda text: err_console.print(
            f"[yellow]warning:[/yellow] {escape(text)}", highlight=False))
    except ConfigError as exc:
        fail(str(exc))


def _run(base: SweepConfig, points: list[dict], out_dir: Path, jobs: Optional[int],
         cache_dir: Optional[Path] = None, backend: str = "local", ray_address: Optional[str] = None,
         config: Optional[Path] = None, point_ids: Optional[List[int]] = None) -> None:
    """Claim `out_dir` (`experiments.outputs.RunFolder`: only our files in it, one run at a time,
    the input `config` never written), run the points or the capacity search, write the outputs.
    Ctrl-C or SIGTERM stops it (`_interrupted`)."""
    folder = None
    try:
        with RunFolder(out_dir, inputs=[config] if config else ()) as folder:
            if base.search is not None:
                _run_capacity(base, points, folder, jobs, cache_dir, backend, ray_address, point_ids)
            else:
                _run_points(base, points, folder, jobs, cache_dir, backend, ray_address, point_ids)
    except OutputFolderError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        _interrupted(cache_dir, folder.completed() if folder is not None else [])


# Finished and total units (points, or point × seed searches) of the run in progress, for Ctrl-C.
_TALLY = {"done": 0, "total": 0, "unit": "points"}


def _count(total: int, unit: str) -> None:
    _TALLY.update(done=0, total=total, unit=unit)


def _interrupted(cache_dir: Optional[Path], written: List[str]) -> None:
    """Ctrl-C or SIGTERM: say what was kept (finished points are in the cache, and `written`, the
    outputs of this run already in place, each whole) and exit 128 + the signal (130, 143)."""
    signum = interrupts.handling()  # a second Ctrl-C no longer cuts this short
    done, total, unit = _TALLY["done"], _TALLY["total"], _TALLY["unit"]
    if cache_dir is not None:
        kept = (f"their results are kept in {cache_dir}, so the same command resumes from them"
                if done else f"nothing finished, so nothing was added to {cache_dir}")
    else:
        kept = "--no-cache: nothing was kept"
    how = "interrupted" if signum == signal.SIGINT else f"terminated ({signal.Signals(signum).name})"
    outputs = (f"Of this run's outputs only {', '.join(written)} were written (the earlier run's are removed)."
               if written else "The tables and report of this run were not written.")
    err_console.print(f"[yellow]{how}:[/yellow] {done} of {total} {unit} had finished; {kept}. {escape(outputs)}",
                      highlight=False)
    raise typer.Exit(128 + signum)


def _done(progress: Progress, task, advance: int = 1, **fields) -> None:
    """A progress callback's step: advance the bar, count for Ctrl-C, and stop here when a signal
    was swallowed where it landed (`interrupts.check`)."""
    _TALLY["done"] += advance
    progress.update(task, advance=advance, **fields)
    if progress.disable:  # stderr is no terminal (a log file, a pipe): a line per step instead of a bar
        state = next(t for t in progress.tasks if t.id == task)
        elapsed = time.strftime("%H:%M:%S", time.gmtime(state.elapsed or 0))
        err_console.print(f"{state.description}: {int(state.completed)}/{int(state.total)} {_TALLY['unit']} done"
                          f"{state.fields.get('trials_text', '')} ({elapsed})", markup=False, highlight=False)
    interrupts.check()


def _run_points(base: SweepConfig, points: list[dict], folder: RunFolder, jobs: Optional[int],
                cache_dir: Optional[Path], backend: str, ray_address: Optional[str],
                point_ids: Optional[List[int]] = None) -> None:
    from experiments.planning.report import write_report
    from experiments.planning.report_header import point_devices
    from experiments.planning.sweep import (config_as_run, one_run_only, remove_point_files, requests_sources, run_sweep,
                                            sweep_requests, write_results)

    started = time.perf_counter()
    _count(len(points), "points")
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err_console, transient=False,
                  disable=not err_console.is_terminal) as progress:
        task = progress.add_task(f"simulating {base.name}", total=len(points))
        results = run_sweep(points, jobs=jobs, on_done=lambda i, row: _done(progress, task), cache_dir=cache_dir,
                            backend=backend, ray_address=ray_address, point_ids=point_ids,
                            records_dir=folder.path)  # each point's records written as it runs
    try:
        interrupts.check()  # a signal swallowed in the last point: no outputs of a stopped run
        with one_run_only(folder):
            table = write_results(results, folder, config_as_run(base))
            folder.attempt(lambda: write_report(table, sweep_requests(results, token_times=False), base, folder.path,
                                                point_devices(points), token_times=requests_sources(results)),
                           outputs=REPORT_FILES)
    finally:
        remove_point_files(results)
    _print_table(table, base)
    _finish(folder, table, cache_dir, started)
    _exit_if_failed(table)


def _exit_if_failed(table: pd.DataFrame) -> None:
    """Exit 1 when a point failed (its error was printed; the other points' outputs are written)."""
    failed = int(table["error"].notna().sum()) if "error" in table else 0
    if failed:
        err_console.print(f"[red]{failed} of {len(table)} points failed[/red] (their errors are above and in the "
                          "report); exit status 1", highlight=False)
        raise typer.Exit(1)


SHORT_COLUMNS = {"label": "point", "completed": "completed", "truncated": "truncated", "rejected": "rejected",
                 "throughput_rps": "req/s", "goodput_rps": "goodput/s", "num_gpus": "GPUs",
                 "goodput_rps_per_gpu": "goodput/s/GPU", "ttft_s_p90": "TTFT P90 s", "tbt_s_p99": "TBT P99 s",
                 "tpot_s_p50": "TPOT P50 s", "slo_met": "SLO met"}


def _run_capacity(base: SweepConfig, points: list[dict], folder: RunFolder, jobs: Optional[int],
                  cache_dir: Optional[Path], backend: str = "local", ray_address: Optional[str] = None,
                  point_ids: Optional[List[int]] = None) -> None:
    """`search:` in the config: capacity per point by bisection, then the report; points numbered
    by `point_ids` (default 0, 1, ...: `simulate --point K` numbers its one point K)."""
    import pandas as pd

    from experiments.planning.capacity_report import write_capacity_report
    from experiments.planning.report_header import point_devices
    from experiments.planning.search import search_slo
    from experiments.planning.sweep import config_as_run, one_run_only, run_capacity_sweep, write_capacity_results

    started = time.perf_counter()
    slo = search_slo(base)
    _count(len(points) * base.search.seeds, "point × seed searches")
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("searches done{task.fields[trials_text]}"), TimeElapsedColumn(),
                  console=err_console, disable=not err_console.is_terminal) as progress:
        # A search's trials are counted when it finishes (the workers report nothing sooner), so
        # the bar counts searches done and, once some are, the trials they ran.
        task = progress.add_task(f"capacity search {base.name}", total=len(points) * base.search.seeds, trials=0,
                                 trials_text="")

        def on_done(i: int, row: dict) -> None:  # one point × seed search finished, with its trials
            trials = progress.tasks[0].fields["trials"] + row.get("trials", 0)
            _done(progress, task, trials=trials, trials_text=f" · {trials} trials in them" if trials else "")
        if base.search.loads:
            progress.console.print(f"then {len(points) * len(base.search.loads)} runs on the QPS grid {base.search.loads}")
        ids = list(range(len(points))) if point_ids is None else point_ids
        table, trials, loads = run_capacity_sweep(points, jobs, on_done, cache_dir, backend, ray_address, ids)
        policy_check = None
        best = table.loc[table["capacity_qps"].idxmax()] if table.get("capacity_qps", pd.Series()).notna().any() else None
        if best is not None and best["scheduler"] == "sarathi":
            twin = copy.deepcopy(points[ids.index(int(best["point_id"]))])
            twin["engine"] = {**twin.get("engine", {}), "scheduler": "vllm_v1"}
            progress.update(task, total=progress.tasks[0].total + base.search.seeds)
            _TALLY["total"] += base.search.seeds
            twin.setdefault("search", {})["loads"] = []
            policy_check, _, _ = run_capacity_sweep([twin], jobs, on_done, cache_dir, backend, ray_address)
    interrupts.check()  # a signal swallowed in the last search: no outputs of a stopped run
    with one_run_only(folder):
        write_capacity_results(table, trials, folder, config_as_run(base), loads)
        folder.attempt(write_capacity_report, table, trials, base, slo, folder.path, policy_check, loads,
                       point_devices(points), outputs=REPORT_FILES)
    _print_capacity(table, base, slo, policy_check, loads)
    _finish(folder, table, cache_dir, started)
    _exit_if_failed(table)


REPORT_FILES = ("report.md", "report.html")


def _finish(folder: RunFolder, table: pd.DataFrame, cache_dir: Optional[Path], started: float) -> None:
    """Remove an earlier run's outputs this run did not rewrite, say what was written, and what
    could not be (then exit 1: the finished points are still finished, and cached when the cache
    could be written)."""
    import pandas as pd

    folder.attempt(folder.remove_stale)  # its manifest may not be writable either
    top = [name for name in folder.completed() if "/" not in name]  # not one that failed: said below
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


def _terminal_tables(title: str, columns: dict[str, str], rows: list[list[str]], best: list[bool],
                     miss: list[list[bool]]) -> list[Table]:
    """Rich tables that never elide a value: every cell keeps its full width (min_width), the
    point label folds instead of being cut with '…', and when the columns do not fit the console
    side by side they are split over several tables, each led by the label."""
    from rich import box

    keys = list(columns)
    shown = []
    for cells, is_best, marks in zip(rows, best, miss):
        texts = [escape(c) + (" ✗" if m else "") for c, m in zip(cells, marks)]
        texts = [f"[red]{t}[/red]" if m else t for t, m in zip(texts, marks)]
        texts[0] += " ★" if is_best else ""
        shown.append(texts)

    def build(group: list[int], part: str) -> Table:
        table = Table(title=title + part, box=box.SIMPLE_HEAD, title_justify="left")
        for j in [0] + group:
            width = max([len(r[j]) + (2 if any(m[j] for m in miss) else 0) for r in rows] + [1])
            if j == 0:
                table.add_column(columns[keys[0]], overflow="fold", min_width=min(width + 2, 30))
            else:
                table.add_column(columns[keys[j]], overflow="fold", min_width=width, justify="right")
        for texts, is_best in zip(shown, best):
            table.add_row(*[texts[j] for j in [0] + group], style="bold" if is_best else None)
        return table

    def natural_width(table: Table) -> int:  # as rendered with room to spare: rich's own measure
        wide = Console(width=10_000, file=io.StringIO(), color_system=None)
        wide.print(table)
        return max(map(len, wide.file.getvalue().splitlines()))

    # Rich does not keep a table within the width once its cells' min widths exceed it (the last
    # columns are cut off): split before that, wherever the natural width would overflow.
    groups: list[list[int]] = [[]]
    for j in range(1, len(keys)):
        if groups[-1] and natural_width(build(groups[-1] + [j], "")) > console.width:
            groups.append([])
        groups[-1].append(j)
    return [build(g, f" ({n + 1}/{len(groups)})" if len(groups) > 1 else "") for n, g in enumerate(groups)]


def _print_table(points: pd.DataFrame, base: SweepConfig) -> None:
    from experiments.planning.report import (format_cell, hidden_per_gpu_columns, metric_title, recommendation,
                                             recommendation_lines, slo_misses)
    from experiments.planning.report_header import ignored_trace_columns
    from experiments.config import slo_summary_key
    from traces.readers.load_result import UNUSED_NOTE

    hidden = hidden_per_gpu_columns(points)  # per GPU only when some point has more than one, as in report.md
    columns = {k: v for k, v in SHORT_COLUMNS.items() if k in points and k not in hidden}
    for key in base.slo:  # every SLO's metric has a column, so the ✗ marks show which failed
        columns.setdefault(slo_summary_key(key), metric_title(slo_summary_key(key)).replace("sched ", "") + " s")
    zero = [c for c in ("truncated", "rejected") if c in columns and not points[c].fillna(0).astype(float).gt(0).any()]
    for column in zero:  # room for the numbers that differ; the footnote says they are 0
        del columns[column]
    failed = points[points["error"].notna()] if "error" in points else points.iloc[0:0]
    ran = points.drop(index=failed.index)
    choice = recommendation(points, base.slo)
    slo_column = {slo_summary_key(k): k for k in base.slo}
    rows, best, miss = [], [], []
    for _, row in ran.iterrows():
        missed = slo_misses(row, base.slo)
        rows.append([format_cell(row[c]) for c in columns])
        best.append(choice is not None and row["point_id"] == choice.best["point_id"])
        miss.append([c in slo_column and any(m.startswith(metric_title(c) + " ") for m in missed) for c in columns])
    if len(ran):  # no table of headers only when every point failed: the failures below say it all
        title = f"{base.name}: {len(points)} point{'' if len(points) == 1 else 's'}"
        for table in _terminal_tables(title, columns, rows, best, miss):
            console.print(table)
    else:
        err_console.print(f"[red]every point of {escape(base.name)} failed ({len(points)} of {len(points)}):[/red]",
                          highlight=False)
    notes = (["★ recommended"] if any(best) else []) + (["✗ over its SLO"] if any(any(m) for m in miss) else [])
    notes += [f"{' and '.join(zero)}: 0 at every point"] if zero and len(ran) else []
    if notes:
        console.print("; ".join(notes), style="dim", highlight=False)
    for _, row in failed.iterrows():  # in full, not squeezed into a table cell
        err_console.print(f"[red]point {row['point_id']} ({escape(str(row['label']))}) failed:[/red] "
                          f"{escape(str(row['error']))}", highlight=False)
    skipped = points.get("trace_rows_rejected")
    if skipped is not None and skipped.fillna(0).max() > 0:
        err_console.print(f"[yellow]note:[/yellow] {int(skipped.max())} trace rows were skipped as invalid "
                          "(see the report; strict: true stops at the first)", highlight=False)
    ignored = ignored_trace_columns(points)
    if ignored:
        err_console.print(f"[yellow]warning:[/yellow] the trace's unknown columns were ignored: {escape(ignored)} "
                          "(see the report; trace.strict: true refuses them)", highlight=False)
    unused = ignored_trace_columns(points, "trace_unused_columns")
    if unused:
        err_console.print(f"[yellow]note:[/yellow] the trace's {escape(unused)} column is not used: {UNUSED_NOTE}",
                          highlight=False)
    truncated = points.get("truncated")
    if truncated is not None and truncated.fillna(0).astype(float).gt(0).any():
        err_console.print(f"[yellow]note:[/yellow] {int(truncated.fillna(0).sum())} requests were truncated at "
                          "max_model_len (on_too_long: truncate; column 'truncated', not counted as completed)",
                          highlight=False)
    for line in recommendation_lines(choice, points, base.slo):
        console.print(_rich_text(line), highlight=False)


def _rich_text(line: str) -> str:
    """A report line (Markdown **bold**, `code`) as rich markup."""
    import re

    text = escape(line)
    text = re.sub(r"\*\*(.+?)\*\*", r"[bold]\1[/bold]", text)
    return re.sub(r"`(.+?)`", r"[cyan]\1[/cyan]", text)


def _print_capacity(table: pd.DataFrame, base: SweepConfig, slo: dict, policy_check, loads) -> None:
    """The capacity search in the terminal: capacity per point (the recommended row marked), the
    failed points, the recommendation with its rule and runner-up, the warnings, and the
    `vllm serve` command to paste."""
    from experiments.planning.capacity_report import CAPACITY_COLUMNS, capacity_summary
    from experiments.planning.report import format_cell

    summary = capacity_summary(table, base, slo, policy_check, loads)
    ran = table[table["error"].isna()] if "error" in table else table
    columns = {k: v for k, v in CAPACITY_COLUMNS.items() if k in ran}
    rows = [[format_cell(row[c]) for c in columns] for _, row in ran.iterrows()]
    best = [summary.best_id is not None and int(row["point_id"]) == summary.best_id for _, row in ran.iterrows()]
    if len(ran):
        for part in _terminal_tables(f"{base.name}: capacity of {len(table)} points", columns, rows, best,
                                     [[False] * len(columns) for _ in rows]):
            console.print(part)
    else:  # no table of headers only: the failures below say it all
        err_console.print(f"[red]every point of {escape(base.name)} failed ({len(table)} of {len(table)}):[/red]",
                          highlight=False)
    failed = table[table["error"].notna()] if "error" in table else table.iloc[0:0]
    for _, row in failed.iterrows():
        err_console.print(f"[red]point {row['point_id']} ({escape(str(row['label']))}) failed:[/red] "
                          f"{escape(str(row['error']))}", highlight=False)
    for line in summary.header[-2:]:  # what capacity means here: the SLOs, trials, and the sustained-load rule
        console.print(_rich_text(line), style="dim", highlight=False)
    for line in summary.recommendation:
        console.print(_rich_text(line), highlight=False)
    for line in summary.warnings:
        err_console.print(f"[yellow]warning:[/yellow] {_rich_text(line)}", highlight=False)
    if summary.command:
        console.print("serve the recommended point with:", highlight=False)
        console.print(summary.command, markup=False, highlight=False, soft_wrap=True)  # one line, to paste


def main() -> None:  # pragma: no cover - console-script shim
    app()


if __name__ == "__main__":  # pragma: no cover
    app()
