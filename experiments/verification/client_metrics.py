"""Latency metrics as benchmark clients compute them from a streamed response, beside the engine's.

A client sees a response as chunks: (arrival time, tokens in it). A chunk may carry no token (the
role-only first chunk of an OpenAI chat stream) or several (a detokenizer flush, a speculative
step); the tools define their metrics over those chunks, so "ITL" means different things. Five
client quantities cover every tool read here, each per request (seconds; `send` is the client's
send time of the request, after any wait for a concurrency slot):

- `ttft_s`: first chunk with a token − send;
- `e2e_s`: last chunk − send;
- `tpot_s`: (last chunk − first token chunk) / (tokens − 1), requests with >= 2 tokens (the mean
  time per output token after the first);
- `ntpot_s`: e2e_s / tokens (normalised time per output token, first token included);
- `chunk_gap_s`: the gaps between consecutive chunks with tokens, all requests pooled (a
  per-chunk "ITL": ~40 us when a server flushes one token per chunk in bursts, even though the
  true per-token time is ~19 ms; issue 31).

`TOOL_METRICS` names which quantity each tool's metric is, with the tool's code path. The
simulator's token times (one per token; tokens of one engine step share a time) are turned into
chunks one per step (`simulator.metrics.emissions`), so a simulated run is measured by the tool's
definition, never the measured run converted to the engine's. What the simulator cannot see is a
server or network splitting one step's tokens over several chunks: a tool's per-chunk ITL of
such a run has no simulated counterpart of the same meaning; `chunk_gap_s` then compares only
when the server sent one chunk per step.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.metrics import percentile_stats

CLIENT_QUANTITIES = ("ttft_s", "e2e_s", "tpot_s", "ntpot_s", "chunk_gap_s")

# tool -> {the tool's metric name: (client quantity, the tool's definition and code path)}.
TOOL_METRICS: dict[str, dict[str, tuple[str, str]]] = {
    "vllm-bench": {
        "ttft": ("ttft_s", "first chunk with content − send (vllm/benchmarks/lib/endpoint_request_func.py, "
                           "RequestFuncOutput.ttft)"),
        "tpot": ("tpot_s", "(latency − ttft) / (output_len − 1), output_len > 1 (vllm/benchmarks/serve.py "
                           "calculate_metrics)"),
        "itl": ("chunk_gap_s", "gap between consecutive content chunks, pooled (RequestFuncOutput.itl)"),
        "e2el": ("e2e_s", "end of the stream − send (RequestFuncOutput.latency)"),
    },
    "inference-perf": {
        "time_to_first_token": ("ttft_s", "output_token_times[0] − start (inference_perf/reportgen/base.py)"),
        "time_per_output_token": ("tpot_s", "(last − first output_token_time) / (output tokens − 1)"),
        "normalized_time_per_output_token": ("ntpot_s", "(end − start) / output tokens"),
        "inter_token_latency": ("chunk_gap_s", "consecutive output_token_times deltas (per chunk), pooled"),
        "request_latency": ("e2e_s", "end − start"),
    },
    "guidellm": {
        "time_to_first_token_ms": ("ttft_s", "first token iteration − request_start "
                                             "(src/guidellm/schemas/request_stats.py)"),
        "inter_token_latency_ms": ("tpot_s", "(last − first token iteration) / (output tokens − 1)"),
        "time_per_output_token_ms": ("ntpot_s", "(last token iteration − request_start) / output tokens"),
        "request_latency": ("e2e_s", "request_end − request_start"),
    },
    "aiperf": {
        "time_to_first_token": ("ttft_s", "first response − request start (aiperf/metrics/types/ttft_metric.py)"),
        "inter_token_latency": ("tpot_s", "(request_latency − ttft) / (output sequence length − 1) "
                                          "(aiperf/metrics/types/inter_token_latency_metric.py)"),
        "request_latency": ("e2e_s", "final response − request start "
                                     "(aiperf/metrics/types/request_latency_metric.py)"),
    },
}


def stream_metrics(chunks: list[tuple[float, int]], sent_s: float = 0.0) -> dict[str, object]:
    """One response's client quantities from its chunks (module docstring).

    Args:
        chunks: (arrival time in seconds, tokens in the chunk >= 0), in arrival order.
        sent_s: the request's send time.

    Returns:
        {"tokens": int, "ttft_s", "e2e_s", "tpot_s", "ntpot_s": float (NaN where undefined),
        "chunk_gap_s": float64 array of the gaps between chunks with tokens}.

    Raises:
        ValueError: a negative token count, or chunks out of time order.
    """
    times = np.array([t for t, _ in chunks], dtype=float)
    counts = np.array([n for _, n in chunks], dtype=np.int64)
    if (counts < 0).any():
        raise ValueError("a chunk cannot carry a negative number of tokens")
    if times.size > 1 and (np.diff(times) < 0).any():
        raise ValueError("chunks must be in arrival order")
    with_tokens = times[counts > 0]
    tokens = int(counts.sum())
    if tokens == 0:
        return {"tokens": 0, "ttft_s": np.nan, "e2e_s": np.nan, "tpot_s": np.nan, "ntpot_s": np.nan,
                "chunk_gap_s": np.zeros(0)}
    e2e = float(times[-1] - sent_s)
    return {"tokens": tokens, "ttft_s": float(with_tokens[0] - sent_s), "e2e_s": e2e,
            "tpot_s": float(with_tokens[-1] - with_tokens[0]) / (tokens - 1) if tokens > 1 else np.nan,
            "ntpot_s": e2e / tokens, "chunk_gap_s": np.diff(with_tokens)}


def client_sent_s(requests: pd.DataFrame) -> np.ndarray:
    """(N,) each request's send time shifted so that its engine token times give the client's
    times: `arrival_s` − `frontend_out_s` (behind vLLM's front end every token reaches the client
    `frontend_out_s` after the engine emits it, `simulator.frontend`; the records' `ttft_s` and
    `e2e_s` include it, their `token_times_s` are the engine's); `arrival_s` where the records have
    no front end. A token time minus it is the client's latency from the send; gaps are unchanged."""
    sent = requests["arrival_s"].to_numpy(dtype=np.float64)
    if "frontend_out_s" in requests:
        sent = sent - np.nan_to_num(requests["frontend_out_s"].to_numpy(dtype=np.float64))
    return sent


def client_quantities(sent_s: np.ndarray, times: np.ndarray, lengths: np.ndarray) -> dict[str, np.ndarray]:
    """`CLIENT_QUANTITIES` of a run of simulated requests at once, each engine step one chunk
    (tokens of one step share a time, `simulator.metrics.emissions`), as `stream_metrics` gives
    them for one response.

    Args:
        sent_s: (R,) send times, seconds (`client_sent_s`).
        times: flat float64 token times of the R requests, request after request (seconds).
        lengths: (R,) tokens per request (>= 0); requests with 0 tokens are left out.

    Returns:
        {"ttft_s", "e2e_s", "tpot_s" (NaN for one-token requests), "ntpot_s": (R',) arrays over
        the requests with tokens; "chunk_gap_s": the gaps between consecutive distinct token times
        inside each request, pooled}.
    """
    has = lengths > 0
    ends = np.cumsum(lengths)
    starts = ends - lengths
    first, last = times[starts[has]], times[ends[has] - 1]
    sent, n = sent_s[has], lengths[has].astype(np.float64)
    e2e = last - sent
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(n > 1, (last - first) / (n - 1), np.nan)
    gaps = np.diff(times)
    inside = np.ones(gaps.size, dtype=bool)
    boundaries = ends[:-1][ends[:-1] > 0] - 1  # gap index from a request's last token to the next's first
    inside[boundaries[boundaries < gaps.size]] = False
    return {"ttft_s": first - sent, "e2e_s": e2e, "tpot_s": tpot, "ntpot_s": e2e / n,
            "chunk_gap_s": gaps[inside & (gaps > 0)]}


_CHUNK_REQUESTS = 4096


def client_quantity_stats(sent_s: np.ndarray, token_times) -> dict[str, dict[str, float]]:
    """Per client quantity, its `percentile_stats` (`<quantity>_mean`, `_p50` ...; NaN for an
    empty sample) over every request with a token, the token times read `_CHUNK_REQUESTS`
    requests at a time (memory: one float per request and quantity, one per chunk gap).

    Args:
        sent_s: (N,) each request's send time (`client_sent_s`), in the records' row order.
        token_times: the records' token times in that order (`simulator.records_parquet.SeriesTokenTimes`
            or `ParquetTokenTimes`).
    """
    pooled: dict[str, list[np.ndarray]] = {name: [] for name in CLIENT_QUANTITIES}
    start = 0
    for times, lengths in token_times.chunks(np.arange(sent_s.size), _CHUNK_REQUESTS):
        part = client_quantities(sent_s[start:start + lengths.size], times, lengths)
        start += lengths.size
        for name, values in part.items():
            pooled[name].append(values)
    return {name: percentile_stats(name, np.concatenate(parts) if parts else np.zeros(0), scratch=True)
            for name, parts in pooled.items()}


def simulated_client_summary(requests: pd.DataFrame) -> dict[str, float]:
    """`<quantity>_mean` / `_p50` ... of the client quantities of a simulation's requests, each
    response's chunks being its engine steps (`simulator.metrics.emissions`), sent at `arrival_s`
    and received `frontend_out_s` after the engine emits them (`client_sent_s`);
    `client_quantity_stats` of the frame.

    Args:
        requests: a simulation's request records with `arrival_s` and `token_times_s` (run with
            token times kept); requests without tokens (rejected) are left out.

    Raises:
        ValueError: records without `token_times_s`.
    """
    if "token_times_s" not in requests:
        raise ValueError("the simulation kept no token times; run it with keep_token_times=True")
    from simulator.records_parquet import SeriesTokenTimes  # pyarrow: not at config load (experiments.config.output)
    stats = client_quantity_stats(client_sent_s(requests), SeriesTokenTimes(requests["token_times_s"]))
    return {key: value for name in CLIENT_QUANTITIES for key, value in stats[name].items()}


def tool_quantity(tool: str, metric: str) -> tuple[str, str]:
    """(client quantity, definition) of `tool`'s `metric` (`TOOL_METRICS`).

    Raises:
        ValueError: an unknown tool or metric, naming the known ones.
    """
    if tool not in TOOL_METRICS:
        raise ValueError(f"unknown benchmark tool {tool!r}; known: {', '.join(TOOL_METRICS)}")
    if metric not in TOOL_METRICS[tool]:
        raise ValueError(f"{tool} has no metric {metric!r} here; known: {', '.join(TOOL_METRICS[tool])}")
    return TOOL_METRICS[tool][metric]
