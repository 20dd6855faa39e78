"""A point's latencies by a benchmark tool's definitions, as points.csv columns (`output.client_metrics`).

Users check a plan against their own benchmark runs, whose TTFT, ITL and TPOT are not the engine's
(`experiments/verification/client_metrics.py`: vllm bench's and inference-perf's ITL are gaps
between streamed chunks, GuideLLM's and AIPerf's ITL are vLLM's TPOT, GuideLLM's TPOT includes the
first token). With `output.client_metrics: [vllm-bench, ...]` a point's row gets, per tool and
metric of `TOOL_METRICS`, `<tool>_<metric>_s_mean` and `_p50` ... `_p99.9` (tool and metric names
with `-` as `_`, a trailing `_ms` dropped: every value is in seconds), computed as
`client_metrics.stream_metrics` computes them for one response, each engine step a chunk
(tokens of one step share a time), sent at the request's `arrival_s` and received
`frontend_out_s` after the engine emits each (`client_sent_s`), over every request that
produced a token. What the simulator cannot see (a server splitting one step's tokens over
several chunks) is said in `client_metrics`' docstring.

The quantities are `client_metrics.client_quantity_stats`, the same code `verify --against-bench`
uses, its token times read a chunk of requests at a time (from the frame, or from the point's
requests file when the run streamed them there).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from experiments.verification.client_metrics import TOOL_METRICS, client_quantity_stats, client_sent_s


def client_column_prefix(tool: str, metric: str) -> str:
    """'vllm-bench', 'itl' -> 'vllm_bench_itl_s'; 'guidellm', 'time_to_first_token_ms' ->
    'guidellm_time_to_first_token_s'."""
    name = metric[:-3] if metric.endswith("_ms") else metric
    return f"{tool.replace('-', '_')}_{name}_s"


def client_columns(tools: list[str], sent_s: np.ndarray, token_times) -> dict[str, float]:
    """points.csv columns of `tools`' metrics (module docstring).

    Args:
        tools: names of `TOOL_METRICS` (checked by the config).
        sent_s: (N,) every request's send time as the client sees it (`client_sent_s`), in the
            records' row order.
        token_times: the records' token times (`simulator.records_parquet.SeriesTokenTimes` or
            `ParquetTokenTimes`, rows in the same order).

    Returns:
        {"<tool>_<metric>_s_mean": ..., "..._p50": ...} for every tool and metric.
    """
    stats = client_quantity_stats(sent_s, token_times)
    out: dict[str, float] = {}
    for tool in tools:
        for metric, (quantity, _) in TOOL_METRICS[tool].items():
            prefix = client_column_prefix(tool, metric)
            for key, value in stats[quantity].items():
                out[prefix + key[len(quantity):]] = value
    return out


def point_client_columns(tools: list[str], requests: pd.DataFrame, requests_file=None) -> dict[str, float]:
    """`client_columns` of a point's records: the frame's `token_times_s`, or `requests_file`'s
    when the run wrote them there (the frame then has none). {} without tools.

    Raises:
        ValueError: tools given but neither source holds token times (`output.token_times: false`
            is refused with client metrics by the config; this guards other callers)."""
    if not tools:
        return {}
    from simulator.records_parquet import ParquetTokenTimes, SeriesTokenTimes
    if "token_times_s" in requests:
        source = SeriesTokenTimes(requests["token_times_s"])
    elif requests_file is not None:
        source = ParquetTokenTimes(requests_file)
    else:
        raise ValueError("output.client_metrics needs the requests' token times (output.token_times: true)")
    return client_columns(tools, client_sent_s(requests), source)
