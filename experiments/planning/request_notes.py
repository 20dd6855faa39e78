"""What a sweep report says of its points' requests beyond the summary: points that gave identical
requests, and the sustained throughput beside the makespan one (issue 29, item 6).

Two schedulers often make the same choices: with ample KV cache vllm_v1 and sarathi schedule the
same chunks at every step, so every request's times are equal. The report says so instead of
letting two equal rows look like two measurements. The summary's `throughput_rps` is completions
over the makespan (first arrival to last completion), which includes the drain after the last
arrival; the sustained throughput counts only completions while requests still arrive.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

# The per-request columns that decide "identical": when each request arrived, started, finished.
IDENTITY_COLUMNS = ("arrival_s", "ttft_s", "completion_s", "generated_tokens", "finish_reason")


def identical_groups(requests: pd.DataFrame) -> list[list[int]]:
    """Point ids whose requests are identical in `IDENTITY_COLUMNS` (request by request, in
    request_id order), groups of two or more, in point order; [] without a `point_id` column."""
    if requests is None or not len(requests) or "point_id" not in requests:
        return []
    if not {"arrival_s", "ttft_s"} <= set(requests):  # a frame without request times cannot say
        return []
    columns = [c for c in IDENTITY_COLUMNS if c in requests]
    digests: dict[str, list[int]] = {}
    for point_id, group in requests.groupby("point_id", sort=True):
        group = group.sort_values("request_id") if "request_id" in group else group
        digest = hashlib.sha256()
        for column in columns:
            digest.update(np.ascontiguousarray(group[column].to_numpy().astype(str)).tobytes())
        digests.setdefault(digest.hexdigest(), []).append(int(point_id))
    return [ids for ids in digests.values() if len(ids) > 1]


def identical_lines(requests: pd.DataFrame, labels: dict[int, str]) -> list[str]:
    """One line per group of points with identical requests (`identical_groups`)."""
    return [f"Identical requests: {', '.join(labels.get(i, str(i)) for i in ids)} gave every request the same arrival, "
            "first token and completion time: their schedulers made the same choices at this load (usual when the KV "
            "cache is ample), so they are one measurement, not several." for ids in identical_groups(requests)]


def sustained_throughput_rps(requests: pd.DataFrame) -> pd.Series:
    """Per point id, completions between its first and last arrival / that span (req/s): the rate
    served while the load is on, without the drain; NaN for a point whose span is 0."""
    out = {}
    for point_id, group in requests.groupby("point_id", sort=True):
        arrival = group["arrival_s"].to_numpy(dtype=float)
        first, last = arrival.min(), arrival.max()
        completion = group["completion_s"].to_numpy(dtype=float)
        done = (group["finish_reason"].to_numpy() == "completed") & (completion <= last)
        out[int(point_id)] = done.sum() / (last - first) if last > first else np.nan
    return pd.Series(out, dtype=float)
