"""`sarathi-sim flags RUN_DIR --point K`: the `vllm serve` command of a point of a finished run.

The point is read back from the run's points table (points.parquet, else points.csv): the model and
the engine settings it ran with, after variants and `--set`, so the command is the one of what was
simulated, not a re-reading of the config file. Registered on the main app in `experiments/cli/main.py`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from experiments.cli.console import fail

err_console = Console(stderr=True, width=120)


def flags(
    run_dir: Path = typer.Argument(..., help="A finished run folder of `sweep` or `simulate` (holds points.parquet)."),
    point: Optional[int] = typer.Option(None, "--point", min=0,
                                        help="The point's number (point_id in points.csv; the report names it). "
                                             "May be left out when the run has one point."),
) -> None:
    """Print the complete `vllm serve MODEL ...` command of a point of a finished run."""
    import pandas as pd

    from experiments.planning.vllm_flags import served_point_from_row, vllm_caveats, vllm_serve_command

    table = _points_table(run_dir)
    ids = [int(i) for i in table["point_id"]]
    listing = ", ".join(f"{i}: {label}" for i, label in zip(ids, table["label"]))
    if point is None:
        if len(table) != 1:
            fail(f"{run_dir} holds {len(table)} points; choose one with --point K ({listing})")
        point = ids[0]
    if point not in ids:
        fail(f"--point {point}: {run_dir} has no such point; its points are {listing}")
    row = table[table["point_id"] == point].iloc[0]
    error = row.get("error")
    if isinstance(error, str) and error and not pd.isna(error):
        fail(f"point {point} ({row['label']}) did not run ({error}); it has no command to serve")
    cluster = row.get("cluster")  # a disaggregated point (simulator/disaggregated.py) is not one command
    if isinstance(cluster, str) and cluster:
        fail(f"point {point} ({row['label']}) is a disaggregated cluster ({cluster}): one `vllm serve` would not "
             "be it; serve each pool's instances with a KV connector (vLLM --kv-transfer-config, e.g. NixlConnector)")
    try:
        served = served_point_from_row(row.to_dict())
        command = vllm_serve_command(served)
    except ValueError as exc:
        fail(f"point {point} ({row['label']}) of {run_dir}: {exc}")
    print(command)  # plain stdout, never wrapped: it is pasted into a shell
    for note in vllm_caveats(served):
        err_console.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False)


def _points_table(run_dir: Path):
    """The run's points table, read from points.parquet (types kept) or points.csv."""
    import pandas as pd

    if not run_dir.is_dir():
        fail(f"{run_dir}: not a folder; give the --out folder of a finished `sarathi-sim sweep` or `simulate`")
    for name, read in (("points.parquet", pd.read_parquet), ("points.csv", pd.read_csv)):
        path = run_dir / name
        if path.is_file():
            try:
                table = read(path)
            except (OSError, ValueError) as exc:
                fail(f"{path}: cannot be read ({exc})")
            if not {"point_id", "label"} <= set(table.columns):
                fail(f"{path}: not a sarathi-sim points table (no point_id and label columns)")
            return table
    fail(f"{run_dir}: holds no points.parquet or points.csv; give the --out folder of a finished "
         "`sarathi-sim sweep` or `simulate`")
