"""`sarathi-sim engine run CONFIG`: replay a config's trace on the real engine (gpu_engine).

The same config as `simulate`: its trace, scheduler, KV pool and split-N settings drive the
shared scheduler; the engine executes every plan on the device. torch is imported only when the
command runs, so the rest of the CLI works without it.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from experiments.cli.console import fail
from experiments.config import ConfigError
from experiments.outputs import OutputWriteError
from experiments.verification.engine_run import run_config

engine_app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                         help="Run a config's trace on the real torch engine (gpu_engine).")
console = Console(width=max(shutil.get_terminal_size((120, 24)).columns, 120))


@engine_app.command()
def run(
    config: Path = typer.Argument(..., help="Config YAML (as for `simulate`)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default: runs/<name>-engine)."),
    realtime: bool = typer.Option(False, "--realtime/--fast",
                                  help="Requests arrive on the wall clock, or as fast as possible (idle gaps skipped)."),
    timing: str = typer.Option("auto", "--timing",
                               help="--fast step times: wall, cpu (the serving thread's CPU time: steady on a shared "
                                    "machine, as the profiler times CPU ops), cpu-normalized (CPU time at the host "
                                    "speed of the calibration named by cost_model: profile:DIR) or auto "
                                    "(cpu-normalized, else cpu, on the CPU with one torch thread; else wall)."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="Override a config key: --set trace.qps=4."),
    point: int = typer.Option(0, "--point", min=0, help="Which point of the config's variants to run."),
    weights: Optional[Path] = typer.Option(None, "--weights", help="HF checkpoint directory (config.json + "
                                           "*.safetensors); default: the model directory if it holds weights, "
                                           "else seeded random weights."),
    device: str = typer.Option("auto", "--device", help="cpu, cuda, cuda:N or auto (cuda when available)."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="float32, bf16, float16, float64 (default: engine.dtype)."),
    attention: str = typer.Option("auto", "--attention", help="torch, triton or auto (triton on CUDA)."),
    forced_acceptance: bool = typer.Option(False, "--forced-acceptance", help="Split-N: accept drafts as "
                                           "engine.acceptance draws them instead of verifying (random weights)."),
    temperature: float = typer.Option(0.0, "--temperature", min=0.0, help="0 is greedy."),
    max_kv_gib: float = typer.Option(4.0, "--max-kv-gib", help="Largest KV pool to allocate on the CPU (GiB)."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="torch CPU threads."),
) -> None:
    """Serve CONFIG's trace on the engine; write the simulator's request and step tables, plans and drafts."""
    try:
        run_dir = run_config(config, out=out, overrides=set_ or [], point=point, realtime=realtime, weights=weights,
                             device=device, dtype=dtype, attention=attention, forced_acceptance=forced_acceptance,
                             temperature=temperature, max_kv_gib=max_kv_gib, threads=threads, timing=timing)
    except (ConfigError, ValueError, OutputWriteError) as exc:  # OutputFolderError is a ValueError
        fail(str(exc))
    console.print(f"wrote {run_dir}/requests.parquet, steps.parquet, drafts.parquet, plans.jsonl, outputs.jsonl, "
                  "summary.json, engine.json")
