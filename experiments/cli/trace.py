"""`sarathi-sim trace stats|convert`: look at a trace or lengths file, or turn it into canonical form."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Optional

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from experiments.cli.console import fail
from experiments.outputs import save_figure, write_atomic
from traces import (LengthsLoadResult, TraceFormatError, TraceLoadResult, TraceSummary, cut, lengths_with_arrivals,
                    read_lengths, read_trace, scale_to_qps, summarize_lengths, summarize_requests, write_canonical)
from traces.readers.formats import detect_format, format_by_name
from traces.writers import LAYOUTS, layout_of, write_canonical_text

trace_app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                        help="Inspect a trace or lengths file (stats) or write it as a canonical trace (convert).")
_WIDTH = max(shutil.get_terminal_size((120, 24)).columns, 120)
console = Console(width=_WIDTH)
_PLOT_SUFFIXES = (".png", ".svg", ".pdf")

FileArgument = typer.Argument(..., exists=True, dir_okay=False, help="Trace or lengths file (format from its header).")
FormatOption = typer.Option("auto", "--format", help="Override the detected format (canonical, azure, vidur, "
                            "burstgpt, mooncake, canonical_jsonl, canonical_parquet, lengths, canonical_lengths).")
StrictOption = typer.Option(False, "--strict", help="Stop at the first bad row or unknown column instead of skipping.")


@trace_app.command()
def stats(
    file: Path = FileArgument,
    max_model_len: Optional[int] = typer.Option(None, "--max-model-len", min=1,
                                                help="Count requests with prompt + output > N."),
    plot: bool = typer.Option(False, "--plot", help="Also write histograms of lengths and gaps as a PNG."),
    plot_to: Optional[Path] = typer.Option(None, "--plot-to", help="Plot file, .png, .svg or .pdf (implies --plot; "
                                                               "default: <FILE stem>.stats.png here)."),
    format: str = FormatOption,
    strict: bool = StrictOption,
    force: bool = typer.Option(False, "--force", help="Replace the plot file if it exists (else an existing "
                                                      "file is refused, left as it is)."),
) -> None:
    """Count, span, mean QPS, burstiness (CV of gaps), length percentiles; rejected rows by reason.

    The plot is written whole or not at all (`save_figure`: a temporary file in its folder, then
    renamed), never over FILE itself, nor over any existing file unless --force is given.
    """
    path = None
    if plot or plot_to is not None:  # --plot-to alone was ignored without a word
        path = _output_file("--plot-to", plot_to or Path(f"{file.stem}.stats.png"), file, _PLOT_SUFFIXES,
                            f"{file.stem}.stats.png", force)
    loaded = _read(file, format, strict)
    if isinstance(loaded, TraceLoadResult):
        summary = summarize_requests(loaded.requests, max_model_len)
        arrivals_s = np.array([r.arrival_s for r in loaded.requests])
    else:
        summary = summarize_lengths(loaded.prompt_tokens, loaded.output_tokens, None, max_model_len)
        arrivals_s = None
    _print_stats(loaded, summary)
    if path is not None:
        try:
            _plot(loaded, arrivals_s, path)
        except OSError as exc:
            fail(str(exc))
        console.print(f"wrote {path}", highlight=False, markup=False)


@trace_app.command()
def convert(
    file: Path = FileArgument,
    to: str = typer.Option(..., "--to", help="Output file: .csv (canonical CSV), .jsonl (canonical JSON lines) or "
                                             ".parquet; - writes canonical CSV to standard output."),
    format: str = FormatOption,
    strict: bool = StrictOption,
    max_requests: Optional[int] = typer.Option(None, "--max-requests", min=1, help="Keep the first N requests."),
    qps: Optional[float] = typer.Option(None, "--qps",
                                        help="Time-scale a trace to this mean rate; required for a lengths-only "
                                             "file (Poisson arrivals at this rate)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the Poisson arrivals given to a lengths-only file."),
    force: bool = typer.Option(False, "--force", help="Replace the --to file if it exists (else an existing "
                                                      "file is refused, left as it is)."),
) -> None:
    """Write FILE as a canonical trace (arrival_s in seconds from 0, prompt_tokens, output_tokens).

    The output is written whole or not at all (a temporary file in its folder, then renamed), never
    over FILE itself, nor over any existing file unless --force is given; its folder must exist.
    With --to - the trace goes to standard output and the summary to standard error.
    """
    to_stdout = to == "-"
    target = None if to_stdout else _output_file("--to", Path(to).expanduser(), file, tuple(LAYOUTS), f"{file.stem}.csv",
                                                 force)
    loaded = _read(file, format, strict)
    try:
        if isinstance(loaded, TraceLoadResult):
            requests = cut(loaded.requests, max_requests=max_requests)
            requests = requests if qps is None else scale_to_qps(requests, qps)
        elif qps is None:
            fail(f"{file} has lengths only (no arrivals): give --qps for Poisson arrivals at that rate")
        else:
            rows = slice(None, max_requests)
            requests = lengths_with_arrivals(loaded.prompt_tokens[rows], loaded.output_tokens[rows], qps, seed)
    except ValueError as exc:
        fail(str(exc))
    report = Console(stderr=True, width=_WIDTH) if to_stdout else console
    if to_stdout:
        _write_stdout(requests)
    else:
        try:
            write_atomic(target, lambda tmp: write_canonical(requests, tmp, layout_of(target)))
        except OSError as exc:  # OutputWriteError names the file and the system's reason
            fail(str(exc))
    # markup=False: file and column names are the user's text ("[red]x.csv" prints as written).
    report.print(loaded.summary(), highlight=False, markup=False)
    report.print(f"wrote {len(requests)} requests to {'standard output' if to_stdout else target}", highlight=False,
                 markup=False)


def _write_stdout(requests: list) -> None:
    """Canonical CSV on standard output; a closed pipe (`| head`) ends quietly, a failed write is an error."""
    try:
        write_canonical_text(requests, sys.stdout)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader stopped early, as `head` does: not an error of ours. Point stdout at
        # /dev/null so Python's own flush at exit does not complain about the closed pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0)
    except OSError as exc:
        fail(f"standard output could not be written ({exc.strerror or exc})")


def _output_file(option: str, path: Path, source: Path, suffixes: tuple[str, ...], default_name: str,
                 force: bool) -> Path:
    """An output path checked before any work: a file with one of `suffixes`, in a folder that
    exists, not the input `source` by any name (symlink or hard link), and no existing file (or
    link, even dangling) unless `force` (the command's --force). Errors end the command."""
    if path.is_dir():
        fail(f"{option} {path} is a folder; give a file in it, e.g. {option} {path / default_name}")
    if not path.parent.is_dir():
        fail(f"{option} {path}: folder {path.parent} does not exist (create it first)")
    if path.suffix.lower() not in suffixes:
        also = ", or - for standard output" if option == "--to" else ""
        fail(f"{option} {path}: unknown suffix {path.suffix or '(none)'!r}; use {', '.join(suffixes)}{also}")
    if path.resolve() == source.resolve() or (path.exists() and os.path.samefile(path, source)):
        fail(f"{option} {path} is the input file; choose another path")
    if os.path.lexists(path) and not force:  # a link, even dangling, is a name in use
        fail(f"{option} {path} already exists; it is left as it is: give another path, or --force to replace it")
    return path


def _read(file: Path, format: str, strict: bool) -> TraceLoadResult | LengthsLoadResult:
    """TraceLoadResult for traces, LengthsLoadResult for lengths-only files; errors end the command."""
    try:
        spec = detect_format(file) if format == "auto" else format_by_name(format)
        if spec.has_arrivals:
            return read_trace(file, format=spec.name, strict=strict)
        return read_lengths(file, format=spec.name, strict=strict)
    except (TraceFormatError, ValueError, OSError) as exc:
        fail(str(exc))


def _print_stats(loaded: TraceLoadResult | LengthsLoadResult, summary: TraceSummary) -> None:
    """What was loaded and skipped (every rejection reason, filter, ignored column), then the stats."""
    # markup=False: file and column names are the user's text ("[red]x.csv" prints as written).
    console.print(f"{loaded.path} ({loaded.format}): loaded {summary.num_requests}, rejected {loaded.num_rejected}",
                  highlight=False, markup=False)
    for line in loaded.report_lines():
        console.print(line, highlight=False, markup=False)
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    for label, value in summary.lines():
        table.add_row(label, value)
    console.print(table)


def _plot(loaded: TraceLoadResult | LengthsLoadResult, arrivals_s: np.ndarray | None, path: Path) -> None:
    """Histograms of prompt and output tokens, and of the non-zero gaps when there are arrivals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if isinstance(loaded, TraceLoadResult):
        prompt = np.array([r.prompt_tokens for r in loaded.requests])
        output = np.array([r.output_tokens for r in loaded.requests])
    else:
        prompt, output = loaded.prompt_tokens, loaded.output_tokens
    panels = [("prompt tokens", prompt), ("output tokens", output)]
    gaps_s = np.diff(arrivals_s) if arrivals_s is not None else np.array([])
    if gaps_s.size and gaps_s.max() > 0:
        panels.append(("inter-arrival gap (s), gaps > 0", gaps_s[gaps_s > 0]))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6))
    for ax, (label, values) in zip(np.atleast_1d(axes), panels):
        low, high = (float(values.min()), float(values.max())) if values.size else (1.0, 1.0)
        wide = high > 10 * low  # log-spaced bins only where the values span more than a decade
        ax.hist(values, bins=np.geomspace(low, high, 50) if wide else 50)
        if wide:
            ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("requests")
    fig.suptitle(f"{loaded.path.name} ({loaded.format})")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)


