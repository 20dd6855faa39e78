"""Trace loading speed: the whole Mooncake conversation and Azure conv traces (target: each < 1 s).

Run from the repo root, with ../shared beside the checkout (results go in BENCHMARKS.md with
this command):
    .venv/bin/python benchmarks/bench_traces.py
Reports the best and the median of 7 loads, wall and CPU time, each a full `read_trace`
(read, validate every row, sort, build the Request list; the per-process copy of the last file
read is cleared before each), after one warm-up load; and a repeated read of the same file (the
kept result's copy, traces/readers/read_cache.py).
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

from traces import load_profile, read_lengths, read_trace
from traces.readers import read_cache

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
FILES = {
    "mooncake conversation (12,031 JSON lines)": SHARED / "mooncake" / "conversation_trace.jsonl",
    "azure conv 2023 (19,366 rows)": SHARED / "azure_public_dataset" / "AzureLLMInferenceTrace_conv.csv",
    "azure code 2023 (8,819 rows)": SHARED / "azure_public_dataset" / "AzureLLMInferenceTrace_code.csv",
}
LENGTHS = SHARED / "etalon" / "bwb_stats_llama2_tokenizer_filtered_v2.csv"


def timed(load, repeats: int = 7) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of `repeats` calls of `load`, after one warm-up call."""
    load()
    wall, cpu = [], []
    for _ in range(repeats):
        start_wall, start_cpu = time.perf_counter(), time.process_time()
        load()
        wall.append(time.perf_counter() - start_wall)
        cpu.append(time.process_time() - start_cpu)
    return wall, cpu


def report(label: str, load) -> None:
    wall, cpu = timed(load)
    print(f"{label}: wall best {min(wall):.3f} s, median {statistics.median(wall):.3f} s; "
          f"CPU best {min(cpu):.3f} s")


def main() -> None:
    for label, path in FILES.items():
        if not path.is_file():
            print(f"{label}: skipped, {path} not present")
            continue
        report(label, lambda path=path: (read_cache.clear(), read_trace(path)))
        report(f"{label}, read again", lambda path=path: read_trace(path))
    if LENGTHS.is_file():
        report("bwb lengths-only file (33,768 rows)", lambda: read_lengths(LENGTHS))
    profile = load_profile("azure-conv")
    report("azure-conv profile, sample 2,048 requests", lambda: profile.sample(2_048, qps=16.0))


if __name__ == "__main__":
    main()
