"""`sarathi-sim calibrate`: profile the model's ops on this machine and fit the cost model, in one
step (the profiler's `run_profile` then `fit_directory`). The profile's `cpu_overhead` op is the
engine's per-step host overhead (scheduling, input preparation, sampling), so the fitted model
prices it too. The directory it writes is the calibration directory: `cost_model: profile:DIR`,
and `sarathi-sim verify --cost-model profile:DIR` appends its ledger there (`ledger.csv`)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import yaml

from experiments.outputs import write_text
from profiler.engine_overhead import EngineOverhead, draft_tokens, unpriced_attention_calls
from profiler.json_object import read_json_object
from profiler.profile_data import SIDECAR, ProfileError

LEDGER_NAME = "ledger.csv"


def calibrate(model: str, device: str, budget_s: float, out_dir: Path, *, threads: int = 1, seed: int = 0,
              block_size: int = 16, engine_overhead: bool = False,
              log: Callable[[str], None] = print) -> tuple[object, pd.DataFrame]:
    """Profile `model` on `device` within `budget_s` seconds into `out_dir` (attention over KV blocks of
    `block_size` tokens, and the engine-overhead runs with that block size), then fit it there;
    with `engine_overhead`, also measure the engine's per-step overhead on `device`
    (`measure_engine_overhead`).

    Returns:
        (the `FittedCostModel`, its held-out errors per op from `profiler.fit_report`).

    Raises:
        ValueError: unknown model or device, a budget too small, or a fit that fails (the
            profiler's message, naming the file or op).
    """
    from profiler import get_model_spec
    from profiler.fit_report import fit_directory
    from profiler.harness import run_profile

    run_profile(get_model_spec(model), device, budget_s, out_dir, num_threads=threads, seed=seed,
                block_size=block_size, log=log)
    fitted, errors = fit_directory(out_dir)
    if engine_overhead:
        overhead = measure_engine_overhead(out_dir, model, threads=threads, device=device)
        log(f"engine overhead per step: {overhead.per_step_s * 1e3:.3f} ms + {overhead.per_seq_s * 1e6:.1f} µs/seq "
            f"+ {overhead.per_token_s * 1e6:.2f} µs/token + {overhead.per_draft_s * 1e6:.1f} µs/draft token "
            f"+ {overhead.per_attention_call_s * 1e6:.1f} µs/unpriced attention call "
            "(median regression on the residuals, coefficients clipped at 0)")
    return fitted, errors


# The calibration workload the engine serves to measure its overhead: short Poisson requests at a
# rate that keeps the batch full, on a seed the shipped configs do not use.
OVERHEAD_TRACE = {"kind": "poisson", "qps": 200, "num_requests": 48, "prompt_tokens": [8, 96],
                  "output_tokens": [4, 32], "seed": 101}
# Its engine settings; the block size is the calibration's (the profiled one) and the pool holds
# OVERHEAD_KV_TOKENS tokens whatever the block size.
OVERHEAD_ENGINE = {"scheduler": "sarathi", "chunk_size": 64, "max_num_seqs": 12, "max_model_len": 256}
OVERHEAD_KV_TOKENS = 2048


# The same workload with split-N 3 (drafts proposed and accepted as α = 0.5 draws them): its
# verify steps measure the host work per draft token (proposing, checking, bookkeeping).
OVERHEAD_SPLIT_N = {"split_n": 3, "acceptance": 0.5}


def profile_meta(calibration_dir: Path) -> dict:
    """The calibration's profile sidecar (`profile.json`) as a dict.

    Raises:
        ProfileError: no such file (as `Profile.load` says it), or one that is unreadable, not
            JSON or not a JSON object (named, with what was wrong: `read_json_object`).
    """
    sidecar = Path(calibration_dir) / SIDECAR
    if not sidecar.is_file():
        raise ProfileError(f"{calibration_dir}: not a calibration directory (no {SIDECAR}); "
                           "create one with `sarathi-sim calibrate`")
    return read_json_object(sidecar, error=ProfileError)


def profile_block_size(calibration_dir: Path) -> int:
    """The KV block size (tokens) the calibration's attention was profiled with (`block_size` of
    its `profile.json`, which `run_profile` records).

    Raises:
        ProfileError: as `profile_meta`, or `block_size` is missing or not a positive integer
            (the file and key named).
    """
    path = Path(calibration_dir) / SIDECAR
    block_size = profile_meta(calibration_dir).get("block_size")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ProfileError(f"{path}: block_size must be a positive integer (the KV block size, in tokens, the "
                           f"attention was profiled with), got {block_size!r}; profile again with `sarathi-sim "
                           "calibrate`")
    return block_size


def profiled_device(calibration_dir: Path) -> str | dict:
    """The `device:` of a config priced by this calibration: the built-in name the profile
    records (`profiler.shipped.measured_device`), else the measured host described inline under
    the profile's device key (`cpu`) with its measured FLOP/s, bandwidth and memory (profile.json
    `rates`, `device.memory_gib`), as tests/data/engine/tiny_engine.yaml describes it: a profile
    prices only the device it was measured on, which the config check enforces. The figures only
    size what the profile does not price (the overhead runs set their KV pool, `num_gpu_blocks`);
    a profile without recorded rates gets modest host figures (10 GB/s, 0.1 TFLOP/s, 16 GiB)."""
    from profiler.device_spec import BUILTIN_DEVICES
    from profiler.shipped import measured_device

    meta = profile_meta(calibration_dir)
    key, _ = measured_device(meta)
    if key in BUILTIN_DEVICES:
        return key
    rates, device = meta.get("rates") or {}, meta.get("device") or {}
    bandwidth_gb_s = float(rates.get("mem_bandwidth_bytes_per_s", 1e10)) / 1e9
    return {"name": key or device.get("name") or "cpu", "memory_gib": float(device.get("memory_gib") or 16),
            "dense_bf16_tflops": float(rates.get("peak_flops", 1e11)) / 1e12,
            "memory_bandwidth_gb_per_s": bandwidth_gb_s,
            "gpu_link": {"kind": "pcie", "gb_per_s_per_direction": bandwidth_gb_s},
            "host_link": {"gb_per_s_per_direction": bandwidth_gb_s}}


def measure_engine_overhead(calibration_dir: Path, model: str, *, threads: int = 1,
                            device: str = "cpu") -> EngineOverhead:
    """Serve `OVERHEAD_TRACE` on the engine (on `device`, "cpu" or "cuda", in the profile's dtype:
    float32 or bf16), plainly and with split-N (`OVERHEAD_SPLIT_N`), price the executed plans with
    the fitted model of `calibration_dir`, fit `EngineOverhead` to the residuals and save it there.
    The runs are kept in `calibration_dir/overhead_run` and `overhead_run_split_n` (their plans are
    the evidence)."""
    from experiments.verification.engine_run import run_config
    from experiments.verification.verify import read_measured_steps
    from profiler.harness import DTYPES
    from profiler.shipped import load_fitted

    fitted = load_fitted(calibration_dir)
    block_size = profile_block_size(calibration_dir)
    kv_pool = {"block_size": block_size, "num_gpu_blocks": -(-OVERHEAD_KV_TOKENS // block_size)}
    seqs, tokens, drafts, calls, residuals = [], [], [], [], []
    for name, extra, forced in (("overhead_run", {}, False), ("overhead_run_split_n", OVERHEAD_SPLIT_N, True)):
        config = calibration_dir / f"{name}.yaml"
        # cost_model names this calibration: on one CPU thread the engine then times its steps at
        # the calibration's host speed (`cpu-normalized`), as the profile's ops were.
        write_text(config, yaml.safe_dump({"name": "engine-overhead", "model": str(Path(model).resolve())
                                          if Path(model).exists() else model,
                                          "device": profiled_device(calibration_dir),
                                          "cost_model": f"profile:{Path(calibration_dir).resolve()}",
                                          "trace": OVERHEAD_TRACE, "engine": {**OVERHEAD_ENGINE, **kv_pool, **extra}}))
        run_dir = calibration_dir / name
        run_config(config, out=run_dir, device=device, dtype=DTYPES[device][0], forced_acceptance=forced,
                   threads=threads)
        plans, measured = read_measured_steps(run_dir)
        predicted = np.array([fitted.predict_step_s(p.query_tokens, p.context_tokens, p.is_prefill) for p in plans])
        seqs += [len(p) for p in plans]
        tokens += [int(p.query_tokens.sum()) for p in plans]
        drafts += [draft_tokens(p.query_tokens, p.is_prefill) for p in plans]
        calls += [unpriced_attention_calls(p.query_tokens, p.is_prefill) for p in plans]
        residuals.append(measured - predicted)
    overhead = EngineOverhead.fit(np.array(seqs), np.array(tokens), np.concatenate(residuals), np.array(drafts),
                                 np.array(calls))
    overhead.save(calibration_dir)
    return overhead
