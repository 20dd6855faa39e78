"""Per-stage columns of a staged load profile's row (`trace: {kind: stages}`, traces/stages.py)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.metrics import percentile_stats
from simulator.scheduler import COMPLETED

STAGE_LATENCIES = ("ttft_s", "tpot_s", "e2e_s")
STAGE_PERCENTILES = ("p50", "p90", "p99")


def stage_columns(requests: pd.DataFrame, starts_s: np.ndarray) -> dict[str, float]:
    """`stage<k>_*` columns for each stage k of a profile whose stages start at `starts_s`
    (shape (K + 1,), the last entry its end): a request belongs to the stage its arrival (send
    time) falls in.

    Columns per stage: `requests` (arrived), `completed`, `offered_qps` (arrived / the stage's
    seconds), latencies `ttft_s`, `tpot_s`, `e2e_s` at p50, p90, p99 over the
    requests that produced tokens (NaN when none), and `output_throughput_tps` (tokens those
    requests produced / the stage's seconds: a stage's own load, whatever spills past its end).
    """
    starts_s = np.asarray(starts_s, dtype=float)
    arrival = requests["arrival_s"].to_numpy()
    stage = np.searchsorted(starts_s, arrival, side="right") - 1
    served = requests["generated_tokens"].to_numpy() > 0
    out: dict[str, float] = {}
    for k in range(len(starts_s) - 1):
        mine = stage == k
        seconds = starts_s[k + 1] - starts_s[k]
        prefix = f"stage{k}_"
        out[prefix + "requests"] = int(mine.sum())
        out[prefix + "completed"] = int((requests["finish_reason"].to_numpy()[mine] == COMPLETED).sum())
        out[prefix + "offered_qps"] = float(mine.sum()) / seconds
        done = mine & served
        for name in STAGE_LATENCIES:
            stats = percentile_stats(name, requests[name].to_numpy()[done])
            out.update({prefix + f"{name}_{p}": stats[f"{name}_{p}"] for p in STAGE_PERCENTILES})
        out[prefix + "output_throughput_tps"] = float(requests["generated_tokens"].to_numpy()[done].sum()) / seconds
    return out
