"""Simulator scale: CPU time and peak memory of one point of N requests (default 1M).

llama-3-8b on h100-sxm (roofline cost model), sarathi chunk 512, requests drawn from the built-in
azure-conv profile at 12.6 QPS (~70 % of this setup's ~18 QPS capacity, BENCHMARKS.md). Peak RSS
is the process's (`resource.getrusage`), so it counts the trace, the run and the output frames.
With `--write DIR` the point writes `requests.parquet` and `steps.parquet` into DIR as it runs
(`run_point(records_dir=)`, as a sweep's points do), so its token times and steps leave memory a
row group at a time; `--at-end` builds the frames in memory and writes them after the run instead
(the way before, for comparison).

Run from the repo root:
    .venv/bin/python benchmarks/bench_scale.py                         # 1M requests, every record kept
    .venv/bin/python benchmarks/bench_scale.py 1000000 --no-token-times --no-steps
    .venv/bin/python benchmarks/bench_scale.py 100000 --write /tmp/scale   # also write requests/steps.parquet
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
    args = parser.parse_args()
    config = SweepConfig.model_validate({
        "cost_model": "roofline",
        "trace": {"kind": "profile", "name": "azure-conv", "qps": args.qps, "num_requests": args.requests, "seed": 0},
        "engine": {"scheduler": "sarathi", "chunk_size": 512},
        "output": {"token_times": not args.no_token_times, "steps": not args.no_steps},
    })
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


if __name__ == "__main__":
    main()
