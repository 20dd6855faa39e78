"""`sarathi-sim search-xpyd CONFIG --gpus N`: the xPyD search (experiments/planning/disaggregation.py).

Every prefill/decode split and per-pool TP (PP, DP, EP) degree of N GPUs, and every colocated layout of them,
searched for the highest rate meeting the config's `goodput:` SLOs on `--attainment` of the
requests, once per seed (`--seeds`, else `search.seeds`: the mean and a 95 % interval per
layout), on local processes or Ray (`--backend`, as `sweep`'s); the table (best mean goodput per
GPU first, and what the intervals resolve), the comparison of the best of each kind and a
plot go into a run folder claimed as `sweep`'s is (`experiments.outputs.RunFolder`: only our
files, one run at a time, every file whole). Registered on the main app in `experiments/cli/main.py`.
"""
from __future__ import annotations

import math
import signal
import time
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape

from experiments.cli import interrupts
from experiments.cli.console import fail
from experiments.cli.options import BackendOption, RayAddressOption

console = Console(width=120)
err_console = Console(stderr=True, width=120)

# What `search:` does not set and the option does not give.
DEFAULT_QPS = (0.5, 8.0)
DEFAULT_NUM_REQUESTS = 1000
DEFAULT_PRECISION = 0.05
DEFAULT_MAX_TRIALS = 16


def search_xpyd(
    config: Path = typer.Argument(..., help="Config YAML with goodput: {ttft_s, tpot_s} (a cluster: block sets the "
                                            "pools' link and engine keys)."),
    gpus: int = typer.Option(..., "--gpus", min=1, help="GPU budget: every layout uses exactly this many."),
    tp: str = typer.Option("1,2,4,8", "--tp", help="Tensor-parallel degrees to try, comma-separated."),
    pp: str = typer.Option("1", "--pp", help="Pipeline-parallel degrees to try, comma-separated (an instance is "
                                             "TP x PP GPUs)."),
    dp: str = typer.Option("1", "--dp", help="Data-parallel degrees of an instance to try, comma-separated (an "
                                             "instance is TP x PP x DP GPUs, DP only at PP 1; a pool's instance is "
                                             "then one vLLM DP engine)."),
    ep: Optional[str] = typer.Option(None, "--ep", help="Expert parallelism of a mixture of experts' instances: off, "
                                                        "on or off,on (default: the config's "
                                                        "engine.enable_expert_parallel)."),
    attainment: float = typer.Option(0.9, "--attainment", min=0.0, max=1.0,
                                     help="Share of requests that must meet every goodput SLO (DistServe: 0.9)."),
    qps: Optional[str] = typer.Option(None, "--qps", help="Starting bracket LOW,HIGH in req/s (default: search.qps, "
                                                          "else 0.5,8)."),
    num_requests: Optional[int] = typer.Option(None, "--num-requests", min=1,
                                               help="Requests per instance of a trial (a layout's replicas × DP "
                                                    "over both pools; default: search.num_requests, else 1000)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default: runs/<name>-xpyd)."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="Override a config key: --set trace.seed=1 "
                                                                 "(repeatable)."),
    point: int = typer.Option(0, "--point", min=0, help="Which point of the config's variants to search from."),
    seeds: Optional[int] = typer.Option(None, "--seeds", help="Searches per layout, the trace's and engine's seeds + 0, "
                                                          "1, ... (default: search.seeds, else 3); 1 to 20."),
    jobs: int = typer.Option(1, "--jobs", min=1, help="Worker processes searching layouts (x seeds) side by side."),
    backend: str = BackendOption,
    ray_address: Optional[str] = RayAddressOption,
    no_cache: bool = typer.Option(False, "--no-cache",
                                  help="Simulate every trial instead of reusing those in OUT/.cache."),
) -> None:
    """Search every xPyD split and colocated layout of --gpus GPUs by goodput per GPU; write the table and a plot.

    Goodput is DistServe's: the highest request rate at which --attainment of the requests meet
    every `goodput:` threshold, here per GPU, as the mean over --seeds searches with its 95 %
    interval; layouts whose intervals overlap are reported as not resolved. The bisection's
    precision, trim, trial cap and seeds come from the config's `search:` when it has one. Each
    trial's simulation is cached in OUT/.cache (as `sweep`'s, by the workers on Ray too), so the
    same command after an interruption resumes; local and Ray give the same table. Exit status: 0 when every layout ran
    (also when none met the SLOs at any tested rate: a warning says so and to lower --qps, as the
    sweep's capacity search does), 1 when a layout failed (its error is in the table; the others
    are written) or an output could not be written, 2 for a bad config or option (--gpus above
    1024 too), 130 when interrupted.
    """
    from experiments.config import ConfigError, SweepConfig, load_config
    from experiments.outputs import CACHE_DIR, RunFolder
    from experiments.planning.backends import BackendError, check_available
    from experiments.planning.disaggregation import (DEFAULT_SEEDS, at_cap_warnings, check_seeds, comparison, plan,
                                                      ranking, search_layouts, search_warnings, write_report)
    from experiments.planning.trial_length import DEFAULT_MAX_SCALE

    try:
        check_available(backend, ray_address)
    except BackendError as exc:
        fail(str(exc))
    try:
        base, points = load_config(config, set_ or [], on_warning=lambda text: err_console.print(
            f"[yellow]warning:[/yellow] {escape(text)}", highlight=False))
    except ConfigError as exc:
        fail(str(exc))
    if point >= len(points):
        fail(f"--point {point} is out of range; this config has {len(points)} points")
    start = SweepConfig.model_validate(points[point])
    tps, pps, dps, eps = _degrees("--tp", tp), _degrees("--pp", pp), _degrees("--dp", dp), _expert_parallel(ep)
    bracket = _bracket(qps, start)
    search_keys = start.search
    seeds = seeds if seeds is not None else (search_keys.seeds if search_keys else DEFAULT_SEEDS)
    try:
        check_seeds(start, seeds)
    except ValueError as exc:
        fail(f"--seeds: {exc}")
    try:  # before the run folder is claimed: bad input leaves nothing behind; searched as planned
        found = plan(start, gpus, tps, pps, dps, eps, seeds)
    except ValueError as exc:
        fail(str(exc))
    # search.qps bounds the search as in `sweep` (its top is the cap); --qps is a starting bracket.
    kwargs = {"attainment": attainment, "qps": bracket,
              "max_qps": bracket[1] if qps is None and search_keys is not None else None,
              "num_requests": num_requests or (search_keys.num_requests if search_keys else DEFAULT_NUM_REQUESTS),
              "precision": search_keys.precision if search_keys else DEFAULT_PRECISION,
              "trim_fraction": search_keys.trim_fraction if search_keys else 0.1,
              "max_trials": search_keys.max_trials if search_keys else DEFAULT_MAX_TRIALS,
              "max_trial_scale": search_keys.max_trial_scale if search_keys else DEFAULT_MAX_SCALE}
    out_dir = out or Path("runs") / f"{base.name}-xpyd"
    # Absolute: Ray workers may run in another working directory.
    kwargs["cache_dir"] = None if no_cache else (out_dir / CACHE_DIR).resolve()
    started = time.perf_counter()
    done = []
    try:
        with RunFolder(out_dir, inputs=[config]) as folder:
            frame = search_layouts(start, found, jobs=jobs, on_done=lambda row: _progress(done, row), seeds=seeds,
                                   backend=backend, ray_address=ray_address, **kwargs)
            folder.attempt(write_report, frame, start, folder.path, attainment, kwargs["num_requests"], found,
                           kwargs["max_trial_scale"],
                           outputs=("disaggregation.csv", "disaggregation.md", "disaggregation.png",
                                    "disaggregation.html"))
            folder.attempt(folder.remove_stale)
            message = folder.failure_message()
    except (ConfigError, ValueError, BackendError) as exc:  # OutputFolderError is a ValueError: the folder's message
        fail(str(exc))
    except KeyboardInterrupt:
        signum = interrupts.handling()  # SIGINT or SIGTERM, said here once (as the sweep's `main._interrupted`)
        kept = "--no-cache: nothing was kept" if no_cache else (
            f"their trials are kept in {kwargs['cache_dir']}, so the same command resumes from them")
        how = "interrupted" if signum == signal.SIGINT else f"terminated ({signal.Signals(signum).name})"
        err_console.print(f"[yellow]{how}:[/yellow] {len(done)} layouts had finished; {kept}. The table and "
                          "plot were not written.", highlight=False)
        raise typer.Exit(128 + signum)
    _print(frame)
    console.print(f"ranking: {ranking(frame)}", highlight=False)
    console.print(comparison(frame), highlight=False)
    ran = frame[frame["error"].isna()]
    if len(ran) and ran["capacity_qps"].isna().all():
        err_console.print(f"[yellow]warning:[/yellow] no layout met the SLOs at any tested rate (every seed failed "
                          f"even {bracket[0]:g} req/s): lower --qps (or search.qps) to find their capacities",
                          highlight=False)
    for text in [*search_warnings(start, seeds, kwargs["num_requests"]),  # also in disaggregation.md
                 *at_cap_warnings(frame, kwargs["max_trial_scale"])]:
        err_console.print(f"[yellow]warning:[/yellow] {escape(text)}", highlight=False)
    if message is not None:
        err_console.print(f"[red]error:[/red] {escape(message)}", highlight=False)
        raise typer.Exit(1)
    console.print(f"wrote disaggregation.csv, .md, .png and .html in {out_dir} "
                  f"({time.perf_counter() - started:.1f} s)", highlight=False)
    failed = int(frame["error"].notna().sum())
    if failed:
        err_console.print(f"[red]{failed} of {len(frame)} layouts failed[/red] (their errors are above and in "
                          "disaggregation.md); exit status 1", highlight=False)
        raise typer.Exit(1)


def _degrees(option: str, text: str) -> tuple[int, ...]:
    """A comma-separated list of parallel degrees >= 1."""
    try:
        degrees = tuple(int(t) for t in text.split(","))
    except ValueError:
        degrees = ()
    if not degrees or min(degrees) < 1:
        fail(f"{option} {text!r}: expected degrees >= 1 separated by commas, e.g. 1,2,4")
    return degrees


def _expert_parallel(text: Optional[str]) -> Optional[tuple[bool, ...]]:
    """--ep off | on | off,on as enable_expert_parallel values; None: the config's."""
    if text is None:
        return None
    values = {"off": False, "on": True}
    words = [w.strip() for w in text.split(",")]
    if not words or any(w not in values for w in words):
        fail(f"--ep {text!r}: expected off, on or off,on")
    return tuple(values[w] for w in words)


def _bracket(qps: Optional[str], point) -> tuple[float, float]:
    """--qps LOW,HIGH, else the point's search.qps, else DEFAULT_QPS; 0 < LOW < HIGH."""
    if qps is None:
        return tuple(point.search.qps) if point.search is not None else DEFAULT_QPS
    try:
        low, high = (float(q) for q in qps.split(","))
    except ValueError:
        fail(f"--qps {qps!r}: expected LOW,HIGH in req/s, e.g. 0.5,8")
    if not 0 < low < high < float("inf"):
        fail(f"--qps {qps!r}: needs 0 < LOW < HIGH")
    return low, high


def _progress(done: list, row: dict) -> None:
    from experiments.planning.disaggregation import per_gpu_text

    done.append(row)
    goodput = ("met the SLOs at no tested rate" if row.get("error") is None and math.isnan(row["goodput_per_gpu_qps"])
               else f"{per_gpu_text(row)} req/s per GPU")
    state = (f"failed: {row['error']}" if row.get("error") else
             f"{goodput} over {row['seeds']} seed{'s' if row['seeds'] > 1 else ''} "
             f"(capacity by seed {row['capacity_by_seed']}), {row['trials']} trials")
    err_console.print(f"[dim]{len(done)}. {escape(row['label'])}: {escape(state)}[/dim]", highlight=False)


def _print(frame) -> None:
    from rich import box
    from rich.table import Table

    from experiments.planning.disaggregation import BEST, per_gpu_text

    table = Table(title="xPyD search: mean goodput per GPU [95 % interval], best first", box=box.SIMPLE_HEAD,
                  title_justify="left")
    for name in ("layout", "kind", "capacity (req/s)", "goodput per GPU (req/s)", "vs the best", "trials"):
        table.add_column(name, justify="left" if name in ("layout", "kind", "vs the best") else "right")
    for _, r in frame.iterrows():
        if isinstance(r["error"], str):
            table.add_row(escape(r["label"]), r["kind"], "[red]failed[/red]", "", "", "")
        else:
            best = r["vs_best"] == BEST and r["goodput_per_gpu_qps"] > 0
            bound = " [yellow](at bound)[/yellow]" if r.get("capacity_at_bound") else ""
            capacity = "below lowest rate" if r["capacity_qps"] != r["capacity_qps"] else f"{r['capacity_qps']:.3f}"
            table.add_row(escape(r["label"]) + (" ★" if best else ""), r["kind"], f"{capacity}{bound}",
                          escape(per_gpu_text(r)), r["vs_best"], str(r["trials"]))
    console.print(table)
    if frame["capacity_at_bound"].any():
        err_console.print("[yellow]warning:[/yellow] a layout marked (at bound) met the SLOs at every rate a seed tried "
                          "(the search's top rate, or its trial cap while doubling): its capacity is only a lower "
                          "bound; raise --qps (or search.qps, search.max_trials)", highlight=False)
    for _, r in frame[frame["error"].notna()].iterrows():
        err_console.print(f"[red]{escape(r['label'])} failed:[/red] {escape(str(r['error']))}", highlight=False)
