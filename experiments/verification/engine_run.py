"""Serving a config's trace on the real engine (gpu_engine): the work behind `sarathi-sim engine run`,
also used by `calibrate` (its engine-overhead runs) and `verify --run-engine`.

The same config as `simulate`: its trace, scheduler, KV pool and split-N settings drive the
shared scheduler; the engine executes every plan on the device. torch is imported only when a
run starts, so the rest of the CLI works without it.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Optional, Sequence

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from experiments.config import DraftModel, SweepConfig, describe_point, load_config
from experiments.deployment import build_acceptance_model, build_scheduler_config
from experiments.outputs import RunFolder, write_staged, write_text
from experiments.point import load_requests
from gpu_engine.clock import TIMINGS

_WIDTH = max(shutil.get_terminal_size((120, 24)).columns, 120)
console = Console(width=_WIDTH)
err_console = Console(stderr=True, width=_WIDTH)

SUMMARY_KEYS = ("completed", "rejected", "num_steps", "makespan_s", "output_throughput_tps", "ttft_s_p50",
                "tbt_s_p99", "tpot_s_p50", "num_preemptions", "kv_usage_max")


def run_config(config: Path, *, out: Optional[Path] = None, overrides: Sequence[str] = (), point: int = 0,
               realtime: bool = False, weights: Optional[Path] = None, device: str = "auto",
               dtype: Optional[str] = None, attention: str = "auto", forced_acceptance: bool = False,
               temperature: float = 0.0, max_kv_gib: float = 4.0, threads: Optional[int] = None,
               timing: str = "auto") -> Path:
    """Serve point `point` of `config` (with `overrides`, as `--set`) on the engine and write its run
    directory (default runs/<name>-engine): the simulator's request and step tables, plans, drafts,
    outputs and engine.json. The options are `sarathi-sim engine run`'s.

    Returns:
        The run directory.

    Raises:
        ConfigError: the config or an override is invalid (names file, key and line).
        ValueError: an option or the point is one the engine cannot run (says what is valid);
            `experiments.outputs.OutputFolderError`: the run folder holds files the tool did not
            write or another run holds it.
        experiments.outputs.OutputWriteError: an output could not be written (named).
    """
    _, points = load_config(config, overrides)
    if point >= len(points):
        raise ValueError(f"--point {point} is out of range; this config has {len(points)} points")
    chosen = SweepConfig.model_validate(points[point])
    _check_supported(chosen)
    if timing not in ("auto", *TIMINGS):
        raise ValueError(f"--timing {timing!r}: valid values are auto, {', '.join(TIMINGS)}")
    if realtime and timing.startswith("cpu"):
        raise ValueError(f"--timing {timing} applies to --fast runs; a --realtime run lives on the wall clock")
    check_weights(weights)
    out_dir = out or Path("runs") / f"{chosen.name}-engine"
    started = time.time()
    try:
        with RunFolder(out_dir, inputs=[config]) as folder:  # only our files there, one run at a time
            _serve(chosen, out_dir, realtime=realtime, weights=weights, device=device, dtype=dtype, attention=attention,
                   forced=forced_acceptance, temperature=temperature, max_kv_gib=max_kv_gib, threads=threads,
                   timing=timing)
            folder.remove_stale()
    except KeyboardInterrupt:
        err_console.print(f"[yellow]interrupted:[/yellow] {interrupted_note(out_dir, started)}", highlight=False,
                          soft_wrap=True)
        raise typer.Exit(128 + signal.SIGINT) from None
    return out_dir


def check_weights(weights: Optional[Path]) -> None:
    """Refuse a `--weights` that is not a checkpoint folder before anything is built.

    Raises:
        ValueError: no such folder, a file rather than a folder, or a folder without a
            *.safetensors file (each named, with what --weights takes).
    """
    if weights is None:
        return
    takes = "--weights takes a Hugging Face checkpoint folder (config.json + *.safetensors)"
    if not weights.exists():
        raise ValueError(f"--weights {weights}: no such folder; {takes}")
    if not weights.is_dir():
        raise ValueError(f"--weights {weights}: not a folder; {takes}")
    if not any(weights.glob("*.safetensors")):
        raise ValueError(f"--weights {weights}: no *.safetensors file in this folder; {takes}")


def interrupted_note(out_dir: Path, started_at: float) -> str:
    """What an interrupted run left in `out_dir`: the files it wrote (each whole: outputs are
    renamed into place) or none. `started_at` is the run's start, epoch seconds."""
    ours = sorted(p.name for p in out_dir.iterdir()  # not the manifest, lock or temporaries (all dot files)
                  if p.is_file() and not p.name.startswith(".") and p.stat().st_mtime >= started_at)
    if not ours:
        return (f"the engine run stopped before writing its outputs; nothing was written to {out_dir} (files of an "
                "earlier run there are as they were)")
    return (f"the engine run stopped while writing its outputs; {out_dir} holds a partial run: {', '.join(ours)} "
            "(each written whole), the rest not written. Run it again for a complete run directory")


def _serve(point: SweepConfig, out_dir: Path, *, realtime: bool, weights: Optional[Path], device: str,
           dtype: Optional[str], attention: str, forced: bool, temperature: float, max_kv_gib: float,
           threads: Optional[int], timing: str = "auto") -> Path:
    import torch

    from gpu_engine.build import DTYPES, attention_fn, build_engine, build_model
    from gpu_engine.checkpoint import load_model_args
    from gpu_engine.clock import FastClock, WallClock
    from gpu_engine.driver import run_trace
    from gpu_engine.model import ModelArgs
    from profiler import get_model_spec
    from profiler.host_speed import calibration_probe_s

    if threads:
        torch.set_num_threads(threads)
    torch_device = torch.device(resolve_device(device))
    dtype_name = dtype or point.engine.dtype
    if dtype_name not in DTYPES:
        raise ValueError(f"--dtype {dtype_name!r} is not supported by the engine; valid: {', '.join(DTYPES)}")
    model_dir = _model_dir(point.model)
    # The model as served: a quantised checkpoint or engine.quantization runs FP8 linears (gpu_engine/fp8_linear.py).
    args = load_model_args(model_dir) if model_dir else ModelArgs.for_builtin(get_model_spec(point.model).served(
        point.engine.quantization))
    checkpoint = weights or (model_dir if model_dir and any(model_dir.glob("*.safetensors")) else None)
    requests, info = load_requests(point.trace)
    if not isinstance(requests, list):
        raise ValueError("closed-loop traces are not supported by the engine yet; use a file, profile or poisson trace")
    max_kv_bytes = (torch.cuda.mem_get_info(torch_device)[0] * 0.9 if torch_device.type == "cuda"
                    else max_kv_gib * 2**30)
    # The engine keeps every layer's KV for every token in one block table (gpu_engine.engine): no
    # hybrid KV cache groups, as vLLM with --disable-hybrid-kv-cache-manager; windows are masked.
    scheduler_config = dataclasses.replace(build_scheduler_config(point), kv_groups=None)
    check_fits_memory(args.spec, DTYPES[dtype_name].itemsize, scheduler_config, torch_device,
                      available_memory_bytes(torch_device), max_kv_bytes)
    model = build_model(args, dtype=DTYPES[dtype_name], device=torch_device, checkpoint_dir=checkpoint,
                        seed=point.engine.seed, attention=attention)
    engine = build_engine(model, point.engine.scheduler, scheduler_config, temperature=temperature,
                          forced_acceptance=build_acceptance_model(point) if forced else None, seed=point.engine.seed,
                          max_kv_bytes=int(max_kv_bytes))
    # CPU time is the step's own work only when torch computes on this thread.
    one_cpu_thread = torch_device.type == "cpu" and torch.get_num_threads() == 1
    if timing.startswith("cpu") and not one_cpu_thread:
        raise ValueError(f"--timing {timing} counts the serving thread's CPU time, which is a step's time only on "
                         f"the CPU with one torch thread (here: {torch_device}, {torch.get_num_threads()} threads); "
                         "use --threads 1 on the CPU, or --timing wall")
    reference_probe_s = calibration_probe_s(point.cost_model) if timing != "wall" and one_cpu_thread else None
    if timing == "auto":
        timing = ("cpu-normalized" if reference_probe_s else "cpu") if one_cpu_thread else "wall"
    if timing == "cpu-normalized" and not reference_probe_s:
        raise ValueError(f"--timing cpu-normalized needs cost_model: profile:DIR of a calibration that recorded "
                         f"host_probe_s (sarathi-sim calibrate on the CPU, one thread); cost_model is "
                         f"{point.cost_model!r}")
    clock = WallClock() if realtime else FastClock(timing, reference_probe_s=reference_probe_s)
    started = time.perf_counter()
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console) as progress:
        task = progress.add_task(f"engine {describe_point(point)} on {torch_device}", total=len(requests))
        result = run_trace(engine, requests, clock, on_finished=lambda _: progress.advance(task))
    wall_s = time.perf_counter() - started
    write_staged(out_dir, result.write)  # each file whole or not at all
    settings = {"config": point.model_dump(mode="json"), "device": str(torch_device), "dtype": dtype_name,
                "weights": str(checkpoint) if checkpoint else f"random (seed {point.engine.seed})",
                "attention": attention_fn(attention, torch_device).__name__, "torch_threads": torch.get_num_threads(),
                "clock": "wall" if realtime else "fast",
                "timing": "wall" if realtime else timing, **_host_speed(clock), "forced_acceptance": forced,
                "temperature": temperature, "wall_s": wall_s, "torch": torch.__version__, **info}
    write_text(out_dir / "engine.json", json.dumps(settings, indent=2, default=str))
    _print_summary(result.summary, wall_s)
    if info.get("trace_rows_rejected"):  # counted in engine.json; said here too, as `simulate` does
        err_console.print(f"[yellow]note:[/yellow] {info['trace_rows_rejected']} trace rows were skipped as invalid: "
                          f"{info.get('trace_rows_rejected_detail', '')}", highlight=False)
    return out_dir


def available_memory_bytes(device) -> int:
    """Memory free for the engine on `device` (a torch.device): CUDA's free memory, or on the CPU
    the host's available memory (Linux /proc/meminfo `MemAvailable`: free plus reclaimable cache;
    elsewhere the free pages)."""
    if device.type == "cuda":
        import torch

        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_fits_memory(spec, dtype_bytes: int, sched_config, device, available_bytes: int,
                      max_kv_bytes: float) -> None:
    """Refuse, before allocating anything, a model whose weights and KV pool do not fit.

    Weights: `spec.num_params` × `dtype_bytes`; KV pool: `num_gpu_blocks` × `block_size` ×
    `spec.kv_bytes_per_token(dtype_bytes)` (as `gpu_engine.kv_cache.KVCache.bytes_needed`).

    Raises:
        ValueError: the weights alone, or weights + KV pool, exceed `available_bytes`; or the KV
            pool exceeds `max_kv_bytes` (--max-kv-gib on the CPU, 90 % of free memory on CUDA).
            One line, naming the sizes in GiB and what to change.
    """
    gib = 2**30
    weights = spec.num_params * dtype_bytes
    kv = sched_config.num_gpu_blocks * sched_config.block_size * spec.kv_bytes_per_token(dtype_bytes)
    where = f"{device} ({available_bytes / gib:.1f} GiB available)"
    if weights > available_bytes:
        raise ValueError(f"{spec.name} does not fit on {where}: its weights alone take {weights / gib:.1f} GiB "
                         f"at {dtype_bytes} bytes per parameter; use a smaller model, a 2-byte --dtype, "
                         "or a larger device")
    if kv > max_kv_bytes:
        raise ValueError(f"a KV pool of {sched_config.num_gpu_blocks} blocks of {sched_config.block_size} tokens "
                         f"takes {kv / gib:.2f} GiB, over the {max_kv_bytes / gib:.2f} GiB allowed (--max-kv-gib on "
                         "the CPU); set engine.num_gpu_blocks")
    if weights + kv > available_bytes:
        raise ValueError(f"{spec.name} does not fit on {where}: weights {weights / gib:.1f} GiB + KV pool "
                         f"{kv / gib:.1f} GiB ({sched_config.num_gpu_blocks} blocks); set a smaller "
                         "engine.num_gpu_blocks or --max-kv-gib, or use a smaller model")


def _host_speed(clock) -> dict:
    """engine.json's record of a cpu-normalized run: the calibration's probe time and this run's
    (median, min, max over its probes), seconds; their ratio is how much slower the host ran."""
    tracker = getattr(clock, "host_speed", None)
    if tracker is None:
        return {}
    probes = tracker.summary()
    return {"reference_probe_s": clock.reference_probe_s, "host_probe_s_median": probes["median_s"],
            "host_probe_s_min": probes["min_s"], "host_probe_s_max": probes["max_s"], "host_probes": probes["probes"]}


def resolve_device(device: str) -> str:
    """The torch device `engine run` uses for `--device`: `auto` is `cuda` when torch sees a GPU,
    else `cpu`; `cpu`, `cuda` and `cuda:N` are checked against this machine.

    Raises:
        ValueError: another value, or a CUDA device torch does not see (names what is valid).
    """
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return device
    if device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit()):
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(device[5:]) if ":" in device else 0
        if index >= count:
            raise ValueError(f"--device {device}: torch sees {count} CUDA device(s) on this machine; "
                             "use --device cpu" + (f" or cuda:0..cuda:{count - 1}" if count else ""))
        return device
    raise ValueError(f"--device {device!r}: valid values are auto, cpu, cuda, cuda:N")


def _model_dir(model: str) -> Optional[Path]:
    """The directory of a model given as a path (to a config.json or its directory); None for a built-in name."""
    path = Path(model)
    if path.is_file():
        return path.parent
    return path if path.is_dir() else None


def _check_supported(point: SweepConfig) -> None:
    e = point.engine
    unsupported = {"replicas": e.replicas != 1, "tensor_parallel_size": e.tensor_parallel_size != 1,
                   "pipeline_parallel_size": e.pipeline_parallel_size != 1, "kv_cache_dtype": e.kv_cache_dtype not in ("auto", "bf16", "bfloat16"),
                   "draft": isinstance(e.draft, DraftModel)}
    bad = [key for key, is_bad in unsupported.items() if is_bad]
    if bad:
        raise ValueError(f"the engine runs one replica on one device with n-gram drafting and a bf16-class KV cache; "
              f"engine.{', engine.'.join(bad)} not supported (set them to their defaults)")


def _print_summary(summary: dict, wall_s: float) -> None:
    parts = [f"{k}={summary[k]:.4g}" if isinstance(summary[k], float) else f"{k}={summary[k]}" for k in SUMMARY_KEYS]
    console.print(f"engine run in {wall_s:.1f} s wall: " + ", ".join(parts))


