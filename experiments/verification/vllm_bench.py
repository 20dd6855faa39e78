"""Read the per-request results of `vllm bench serve --save-result --save-detailed`.

The result JSON (vllm/benchmarks/serve.py, `benchmark()` result dict) holds per request, in
completion order of the benchmark's request list: `input_lens`, `output_lens` (tokens),
`ttfts` (s), `itls` (list of inter-token gaps per request, s) and, in versions that save them,
`e2els` or `latencies` (s); plus the run's `duration` (s). Failed requests have output length 0
and are left out. Without per-request latencies, E2E = TTFT + Σ ITL (vLLM's definition of the
request latency up to the last token).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from profiler.json_object import read_json_object
from simulator.metrics import percentile_stats

REQUIRED_KEYS = ("input_lens", "output_lens", "ttfts", "itls")
LATENCY_KEYS = ("e2els", "latencies")


def read_vllm_bench(path: str | Path) -> tuple[pd.DataFrame, float]:
    """Per-request rows (prompt_tokens, output_tokens, ttft_s, itls_s, e2e_s) and the run's
    duration in seconds (NaN when absent).

    Raises:
        ValueError: unreadable JSON, a missing per-request key (saved without --save-detailed?),
            or lists of different lengths; the message names the file and key.
    """
    path = Path(path)
    data = read_json_object(path, "cannot read vLLM bench result",
                            "expected a JSON object (the result of `vllm bench serve --save-result`)")
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        raise ValueError(f"{path}: no per-request key(s) {', '.join(missing)}; save the result with "
                         "`vllm bench serve --save-result --save-detailed`")
    n = len(data["ttfts"])
    latency_key = next((k for k in LATENCY_KEYS if k in data), None)
    for key in (*REQUIRED_KEYS, *([latency_key] if latency_key else [])):
        if len(data[key]) != n:
            raise ValueError(f"{path}: key {key} has {len(data[key])} entries, ttfts has {n}")
    itls = [np.asarray(gaps, dtype=float) for gaps in data["itls"]]
    ttft = np.asarray([np.nan if t is None else t for t in data["ttfts"]], dtype=float)
    e2e = (np.asarray(data[latency_key], dtype=float) if latency_key
           else ttft + np.array([gaps.sum() for gaps in itls]))
    frame = pd.DataFrame({"prompt_tokens": np.asarray(data["input_lens"], dtype=np.int64),
                          "output_tokens": np.asarray(data["output_lens"], dtype=np.int64),
                          "ttft_s": ttft, "itls_s": itls, "e2e_s": e2e})
    return frame[frame["output_tokens"] > 0].reset_index(drop=True), float(data.get("duration", np.nan))


def vllm_summary(frame: pd.DataFrame, duration_s: float) -> dict[str, float]:
    """The `simulator.metrics.summarize` keys a vLLM bench result defines.

    TPOT per request = (E2E − TTFT) / (output tokens − 1), requests with more than one token
    (vLLM's definition); TBT samples are the ITLs; throughput is over `duration_s`, the
    benchmark's wall time (its makespan).
    """
    multi = frame[frame["output_tokens"] > 1]
    tpot = ((multi["e2e_s"] - multi["ttft_s"]) / (multi["output_tokens"] - 1)).to_numpy()
    gaps = np.concatenate(list(frame["itls_s"])) if len(frame) else np.array([])
    out = {"completed": len(frame), "makespan_s": duration_s,
           "throughput_rps": len(frame) / duration_s if duration_s > 0 else float("nan"),
           "output_throughput_tps": float(frame["output_tokens"].sum()) / duration_s if duration_s > 0 else float("nan")}
    for name, values in (("ttft_s", frame["ttft_s"].to_numpy()), ("tpot_s", tpot), ("tbt_s", gaps),
                         ("e2e_s", frame["e2e_s"].to_numpy())):
        out.update(percentile_stats(name, values))
    return out
