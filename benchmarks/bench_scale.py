"""Simulator scale: CPU time and peak memory of one point of N requests (default 1M).

llama-3-8b on h100-sxm (roofline cost model), sarathi chunk 512, requests drawn from the built-in
azure-conv profile at 12.6 QPS (~70 % of this setup's ~18 QPS capacity, BENCHMARKS.md). Peak RSS
is the process's (`resource.getrusage`), so it counts the trace, the run and the output frames.
With `--write DIR` the point writes `requests.parquet` and `steps.parquet` into DIR as it runs
(`run_point(records_dir=)`, as a sweep's points do), so its token times and steps leave memory a
row group at a time; `--at-end` builds the frames in memory and writes them after the run instead
(the way before, for comparison).

`--closed-loop CLIENTS` replaces the open-loop trace by a closed loop of N requests from CLIENTS
clients (`--think-time-s`, prompts uniform 50-2,000 and outputs uniform 20-400 tokens).
`--sweep OUT --cache DIR` runs the point as `sarathi-sim sweep` does (`run_sweep` with the results
cache and records written as it runs, then `write_results`; no report): a first run computes and
stores it, a second one serves it from the cache, so the two give the cost of a cached point;
`--points K` sweeps K such points (trace seeds 0..K-1), `--backend ray` on Ray (the peak RSS is
then the driver's: the points run in Ray's worker processes).
`--cluster PxD` makes the point a prefill/decode disaggregated cluster of P prefill and D decode
replicas (TP1 each; the prefill pool's chunk 2,048, a 50 GB/s link with 0.1 ms latency, as
benchmarks/xpyd_llama3_8b.yaml), e.g. `--cluster 1x1`.

Run from the repo root:
    .venv/bin/python benchmarks/bench_scale.py                         # 1M requests, every record kept
    .venv/bin/python benchmarks/bench_scale.py 1000000 --no-token-times --no-steps
    .venv/bin/python benchmarks/bench_scale.py 100000 --write /tmp/scale   # also write requests/steps.parquet
    .venv/bin/python benchmarks/bench_scale.py 200000 --closed-loop 48 --write /tmp/scale
    .venv/bin/python benchmarks/bench_scale.py 200000 --sweep /tmp/sweep --cache /tmp/cache   # twice: computed, cached
    .venv/bin/python benchmarks/bench_scale.py 100000 --sweep /tmp/sweep --points 4 --backend ray   # needs Ray
    .venv/bin/python benchmarks/bench_scale.py 200000 --cluster 1x1 --write /tmp/scale   # 1P1D
"""
from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

from experiments.config import SweepConfig
from experiments.outputs import write_parquet
from experiments.point import run_point


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("requests", type=int, nargs="?", default=1_000_000)
    parser.add_argument("--qps", type=float, default=12.6)
    parser.add_argument("--no-token-times", action="store_true", help="output.token_times: false")
    parser.add_argument("--no-steps", action="store_true", help="output.steps: false")
    parser.add_argument("--write", type=Path, help="write requests.parquet and steps.parquet into this folder")
    parser.add_argument("--at-end", action="store_true", help="with --write: build the frames, then write them")
    parser.add_argument("--closed-loop", type=int, metavar="CLIENTS", help="a closed loop of CLIENTS clients")
    parser.add_argument("--think-time-s", type=float, default=0.0, help="with --closed-loop: each client's think time")
    parser.add_argument("--sweep", type=Path, help="run the point as a sweep does into this run folder")
    parser.add_argument("--cache", type=Path, help="with --sweep: the results cache folder")
    parser.add_argument("--points", type=int, default=1, help="with --sweep: this many points (trace seeds 0, 1, ...)")
    parser.add_argument("--backend", default="local", help="with --sweep: local or ray (peak RSS: the driver's)")
    parser.add_argument("--cluster", metavar="PxD", help="a disaggregated cluster of P prefill and D decode replicas")
    args = parser.parse_args()
    trace = {"kind": "profile", "name": "azure-conv", "qps": args.qps, "num_requests": args.requests, "seed": 0}
    if args.closed_loop:
        trace = {"kind": "closed_loop", "clients": args.closed_loop, "think_time_s": args.think_time_s,
                 "num_requests": args.requests, "prompt_tokens": [50, 2000], "output_tokens": [20, 400], "seed": 0}
    point = {
        "cost_model": "roofline", "trace": trace,
        "engine": {"scheduler": "sarathi", "chunk_size": 512},
        "output": {"token_times": not args.no_token_times, "steps": not args.no_steps},
    }
    if args.cluster:
        num_prefill, num_decode = (int(n) for n in args.cluster.lower().split("x"))
        point["cluster"] = {"prefill": {"replicas": num_prefill, "engine": {"chunk_size": 2048}},
                            "decode": {"replicas": num_decode}, "link": {"bandwidth_gb_s": 50, "latency_s": 0.0001}}
    if args.sweep is not None:
        points = [{**point, "trace": {**trace, "seed": seed}} for seed in range(args.points)]
        return sweep(points, args.sweep, args.cache, args.backend)
    config = SweepConfig.model_validate(point)
    streamed = args.write is not None and not args.at_end
    start = time.process_time()
    result = run_point(config, records_dir=args.write if streamed else None)
    run_cpu_s = time.process_time() - start
    if args.write and not streamed:
        args.write.mkdir(parents=True, exist_ok=True)
        write_parquet(args.write / "requests.parquet", result.requests)
        if len(result.steps):
            write_parquet(args.write / "steps.parquet", result.steps)
    cpu_s = time.process_time() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    row = result.row
    tokens = int(result.requests["generated_tokens"].sum())
    print(f"{row['num_requests']:,} requests ({tokens:,} output tokens, {row['num_steps']:,} steps), "
          f"token_times={'off' if args.no_token_times else 'on'} steps={'off' if args.no_steps else 'on'}: "
          f"{run_cpu_s:.1f} CPU-s to simulate and summarise{' (files written as it ran)' if streamed else ''} "
          f"({row['num_requests'] / run_cpu_s:,.0f} requests/CPU-s)"
          f"{f', {cpu_s:.1f} CPU-s with the parquet files' if args.write and not streamed else ''}; "
          f"peak RSS {peak_mb:,.0f} MB "
          f"({peak_mb * 1024 / row['num_requests']:.2f} KB/request); P99 TBT {row['tbt_s_p99']:.4f} s, "
          f"P90 TTFT {row['ttft_s_p90']:.4f} s, completed {row['completed']:,}")


def sweep(points: list[dict], out: Path, cache_dir: Path | None, backend: str) -> None:
    """The points through `run_sweep` and `write_results` (a sweep without its report), one
    worker at a time (inline with the local backend)."""
    from experiments.outputs import RunFolder
    from experiments.planning.sweep import remove_point_files, run_sweep, write_results

    start = time.process_time()
    with RunFolder(out) as folder:
        results = run_sweep(points, jobs=1, cache_dir=cache_dir, records_dir=folder.path, backend=backend)
        try:
            write_results(results, folder)
        finally:
            remove_point_files(results)
    cpu_s = time.process_time() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    row = results[0].row
    cached = sum(bool(r.row.get("cached")) for r in results)
    print(f"sweep of {len(results)} point(s) of {row['num_requests']:,} requests on {backend} ({cached} from the cache): "
          f"{cpu_s:.1f} CPU-s in this process, its peak RSS {peak_mb:,.0f} MB "
          f"({peak_mb * 1024 / row['num_requests']:.2f} KB/request of a point); "
          f"first point's P99 TBT {row['tbt_s_p99']:.4f} s, completed {row['completed']:,}")


if __name__ == "__main__":
    main()
