"""Command-line options that several `sarathi-sim` commands take alike (`sweep`, `search-xpyd`)."""
from __future__ import annotations

import typer

# Where the work runs (experiments.planning.backends.make_pool): the same results either way.
BackendOption = typer.Option("local", "--backend",
                             help="Where the work runs: local (worker processes) or ray (a Ray cluster; "
                                  "pip install 'sarathi-sim\\[ray]').")  # \\[: literal bracket in rich help
RayAddressOption = typer.Option(None, "--ray-address",
                                help="Ray cluster to join (e.g. auto, ray://head:10001); "
                                     "default: start Ray on this machine.")
