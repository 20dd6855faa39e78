"""The handed H100 grid: 90 real closed-loop vLLM 0.12 points of Qwen3-32B bf16 on H100 SXM (issue 27).

Data: `../shared/validation/aiconfigurator_silicon/qwen3_32b_h100_vllm0.12_agg.csv` (ai-dynamo/aiconfigurator
`silicon_sample.csv` at 095f58a, Apache-2.0; never copied into the project). Each row is TP 2/4/8 × ISL × OSL ×
`batch_size` concurrent clients, with the mean client-side TTFT and TPOT in ms.

The client, as the data's publisher sends load (the grid's rows do not record which tool ran): N =
`batch_size` closed-loop clients (`--max-concurrency N` / `--concurrency N`) over a saturating rate, so all N
first requests go at t = 0 and each client sends its next request when its previous one completes
(`traces.closed_loop.ClosedLoopWorkload`, think time 0; each tool's rule is in `traces.concurrency`); fixed
ISL/OSL with `ignore_eos`; means over every measured request, the first wave included. How many requests
(`--requests-per-client`, default 10): AIConfigurator's eval runners send 10 × N
(`src/aiconfigurator/eval/benchmarks/bench_serving_runner.py`: `num_prompts` N × 10, no warm-up;
`genai_perf_runner.py`: `--request-count` N × 10 after `--warmup-request-count` N × 2; ai-dynamo/aiconfigurator
commit 5e16187), its generator's benchmark script 50 × N (`generator/config/backend_templates/benchmark/
bench_run.sh.j2`: AIPerf `--num-requests` N × 50 after a 2 × N warm-up). AIPerf waits for every warm-up
response before profiling starts (ai-dynamo/aiperf `docs/tutorials/warmup.md` at 6d492f9, "Grace
Period"), so the measured run starts in phase on an idle engine, as without a warm-up: in this simulator
(no cold-start costs, no prefix hits) a drained warm-up changes nothing. `--warmup-per-client K` is the
other case, a warm-up the load runs straight through: K × N requests issued first and left out of the
means (ids 0 .. K·N-1, issue order).

The engine (`--engine`): `vllm-default`, vLLM 0.12's H100 defaults for the API server (token budget 8,192,
max_num_seqs 1,024: `experiments.vllm_defaults`), or `aic-generator`, the flags AIConfigurator's generator
writes for an aggregated vLLM worker (`engine_settings`). `cost_model: auto`, random prompts (no prefix hits).
Extra `--set`-style keys (`engine.async_scheduling=false`) apply to every point. A point is *saturated* when
the simulated KV pool cannot hold every client's request at full length (N × ceil((ISL + OSL) / block) > the
pool's blocks): there requests wait for KV, and the targets exempt it. `--spread` is a diagnostic of the
client-start assumption: client k of N starts at k/N of the in-phase run's mean E2E.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_h100_grid.py [--out runs/h100_grid.csv] [--tp 2] \
        [--requests-per-client 10] [--engine vllm-default|aic-generator] [--warmup-per-client 0] \
        [--set KEY=VALUE ...]

Prints one row per point (measured and simulated TTFT / TPOT, signed errors) and the counts within the
targets (TTFT 20 %, TPOT 10 %) below saturation; writes the table to `--out` (CSV).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
GRID = REPO.parent / "shared" / "validation" / "aiconfigurator_silicon" / "qwen3_32b_h100_vllm0.12_agg.csv"
if not GRID.exists():
    GRID = Path("/work/shared/validation/aiconfigurator_silicon/qwen3_32b_h100_vllm0.12_agg.csv")


# AIConfigurator's generator for an aggregated vLLM worker (ai-dynamo/aiconfigurator
# `src/aiconfigurator/generator/rule_plugin/benchmark/vllm.rule` at 2b264ba, mapped by
# `generator/config/backend_config_mapping.yaml`): max_num_tokens (vLLM's --max-num-batched-tokens) =
# max_batch_size + ISL + 1500, max_batch_size (--max-num-seqs) the point's batch size.
AIC_GENERATOR_EXTRA_TOKENS = 1500


def engine_settings(row, engine: str) -> dict:
    """The `engine:` token budget and sequence cap of a point: vLLM 0.12's H100 defaults for the
    API server (`vllm-default`: 8,192 / 1,024) or AIConfigurator's generated flags (`aic-generator`)."""
    clients = int(row.batch_size)
    if engine == "aic-generator":
        return {"chunk_size": clients + int(row.isl) + AIC_GENERATOR_EXTRA_TOKENS, "max_num_seqs": clients}
    if engine != "vllm-default":
        raise ValueError(f"--engine must be vllm-default or aic-generator, got {engine!r}")
    return {"chunk_size": 8192, "max_num_seqs": 1024}


def point_config(row, requests_per_client: int, warmup_per_client: int = 0, engine: str = "vllm-default") -> dict:
    clients = int(row.batch_size)
    return {
        "name": f"tp{row.tp_size}-isl{row.isl}-osl{row.osl}-c{clients}",
        "model": "qwen3-32b", "device": "h100-sxm", "cost_model": "auto",
        "trace": {"kind": "closed_loop", "clients": clients, "think_time_s": 0.0,
                  "num_requests": clients * (requests_per_client + warmup_per_client),
                  "prompt_tokens": int(row.isl), "output_tokens": int(row.osl), "seed": 0},
        "engine": {"scheduler": "vllm_v1", **engine_settings(row, engine), "tensor_parallel_size": int(row.tp_size)},
    }


def simulate_point(config: dict, overrides: list[str], spread_s: float = 0.0, warmup_requests: int = 0) -> dict:
    """Mean client TTFT / TPOT (ms) and E2E (s) of one point, over requests issued after the first
    `warmup_requests` (the warm-up a tool leaves out), and whether it is saturated (module docstring)."""
    import experiments.point as point_module
    from experiments.config import SweepConfig, load_config
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "point.yaml"
        path.write_text(yaml.safe_dump(config))
        _, points = load_config(path, overrides, on_warning=lambda text: None)
    load = point_module.load_requests
    if spread_s > 0:  # the diagnostic: clients start spread over `spread_s` instead of all at 0
        def spread_load(trace, *args):
            workload, info = load(trace, *args)
            c = min(workload.num_clients, workload.num_requests)
            workload.initial_requests = lambda: [workload._issue(k, k * spread_s / c) for k in range(c)]
            return workload, info
        point_module.load_requests = spread_load
    try:
        result = point_module.run_point(SweepConfig.model_validate(points[0]))
    finally:
        point_module.load_requests = load
    r = result.requests
    done = r[(r["finish_reason"] != "rejected") & (r["request_id"] >= warmup_requests)]
    out = {"sim_ttft_ms": float(done["ttft_s"].mean() * 1e3), "sim_tpot_ms": float(done["tpot_s"].mean() * 1e3),
           "sim_e2e_s": float(done["e2e_s"].mean())}
    trace = config["trace"]
    blocks_per_request = -(-(trace["prompt_tokens"] + trace["output_tokens"]) // int(result.row["block_size"]))
    out["saturated"] = trace["clients"] * blocks_per_request > int(result.row["num_gpu_blocks"])
    if "engine_ttft_s" in done:
        out["sim_engine_ttft_ms"] = float(done["engine_ttft_s"].mean() * 1e3)
        # TTFT term by term (simulator/records.py), and the first wave (the clients' first requests,
        # sent together at t = 0) apart from the rest
        for term in ("frontend_in_s", "queue_s", "schedule_wait_s", "prefill_s", "frontend_out_s"):
            out[f"sim_{term.removesuffix('_s')}_ms"] = float(done[term].mean() * 1e3)
    first = done["request_id"] < warmup_requests + trace["clients"]
    out["sim_ttft_first_wave_ms"] = float(done.loc[first, "ttft_s"].mean() * 1e3)
    out["sim_ttft_after_first_wave_ms"] = float(done.loc[~first, "ttft_s"].mean() * 1e3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    parser.add_argument("--tp", type=int, action="append", help="only these TP sizes")
    parser.add_argument("--requests-per-client", type=int, default=10, help="measured requests per client")
    parser.add_argument("--engine", default="vllm-default", choices=("vllm-default", "aic-generator"),
                        help="token budget / sequence cap: vLLM's H100 defaults or AIConfigurator's generated flags")
    parser.add_argument("--warmup-per-client", type=int, default=0, help="warm-up requests per client, left out")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--spread", action="store_true", help="diagnostic: clients spread over one request's life")
    args = parser.parse_args()
    grid = pd.read_csv(GRID)
    if args.tp:
        grid = grid[grid.tp_size.isin(args.tp)]
    rows = []
    for row in grid.itertuples():
        config = point_config(row, args.requests_per_client, args.warmup_per_client, args.engine)
        warmup = int(row.batch_size) * args.warmup_per_client
        sim = simulate_point(config, args.overrides, warmup_requests=warmup)
        if args.spread:
            sim = simulate_point(config, args.overrides, sim["sim_e2e_s"], warmup)
        rows.append({"tp": row.tp_size, "isl": row.isl, "osl": row.osl, "clients": row.batch_size,
                     "real_ttft_ms": row.silicon_ttft_ms, "real_tpot_ms": row.silicon_tpot_ms, **sim})
        r = rows[-1]
        r["ttft_err"] = r["sim_ttft_ms"] / r["real_ttft_ms"] - 1
        r["tpot_err"] = r["sim_tpot_ms"] / r["real_tpot_ms"] - 1
        print(f"tp{r['tp']} isl{r['isl']} osl{r['osl']} c{r['clients']}: TTFT {r['real_ttft_ms']:.0f} vs "
              f"{r['sim_ttft_ms']:.0f} ms ({r['ttft_err']:+.1%}), TPOT {r['real_tpot_ms']:.1f} vs "
              f"{r['sim_tpot_ms']:.1f} ms ({r['tpot_err']:+.1%}){' saturated' if r['saturated'] else ''}", flush=True)
    table = pd.DataFrame(rows)
    print(summary(table))
    if args.out:
        table.to_csv(args.out, index=False)


def summary(table: pd.DataFrame) -> str:
    """The medians and the counts within the targets, over every point and below saturation."""
    below = table[~table.saturated]
    lines = [f"median |TTFT err| {np.median(np.abs(table.ttft_err)):.1%} (signed {np.median(table.ttft_err):+.1%}), "
             f"median |TPOT err| {np.median(np.abs(table.tpot_err)):.1%} (signed {np.median(table.tpot_err):+.1%})"]
    for label, part in (("all", table), ("below saturation", below)):
        ttft_ok, tpot_ok = np.abs(part.ttft_err) <= 0.2, np.abs(part.tpot_err) <= 0.1
        lines.append(f"{label} ({len(part)} points): TTFT within 20 % {ttft_ok.sum()}, TPOT within 10 % "
                     f"{tpot_ok.sum()}, both {(ttft_ok & tpot_ok).sum()}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
