"""Attention rows at a head count the measured tables lack, interpolated across query heads.

AIConfigurator measures context and decode attention at query-head counts per rank of 1, 2, 4,
8, 12, 16, 24, 32, 40, 48, 64 (with KV heads 1–8 each); models with 7 query heads per KV head
(Yi-34B: 56/8; Qwen2.5-7B: 28/4, and their TP shards 28/4, 14/2, 7/1) fall between them and were
priced by the roofline. At a fixed KV-head count and head_dim, an attention kernel's work grows
in proportion to the query heads (FLOPs ∝ query heads × query-key pairs; the KV read is the
same), so its time is interpolated linearly in the query heads between the two measured counts
that bracket it, cell by cell over the (batch, tokens) points both tables measured. Never
extrapolated: a count outside the measured ones, or a KV-head count / head_dim the table lacks,
stays unpriced here (the caller falls back to the roofline and says so).

Only grouped-query rows (more query heads than KV heads) bracket a count: a multi-head row (as
many query as KV heads) runs another decode path on A100, L40S and RTX PRO 6000 — predicting 2
query heads over 1 KV head from the 1/1 and 4/1 rows is 62–166 % off there. Held out on the
shipped AIConfigurator tables (each grouped-query count predicted from its two grouped-query
neighbours, `benchmarks/bench_head_interpolation.py`, BENCHMARKS.md): mean MAPE 0.9–3.4 % for
decode and 2.0–6.4 % for context attention per card, every count within 9 % but one (h100-sxm
decode, head_dim 64, 12 over 4 KV heads: 20.7 %), over gaps as wide or wider than those bridged
in use (40→64 to predict 48; 48→64 bridges 56).
"""
from __future__ import annotations

import pandas as pd

KEYS = ("num_heads", "num_kv_heads", "head_dim")


def rows_at_heads(rows: pd.DataFrame, num_heads: int, num_kv_heads: int, head_dim: int,
                  point_keys: tuple[str, ...]) -> tuple[pd.DataFrame, str | None]:
    """The attention rows of one head configuration (per TP rank), measured or interpolated.

    Args:
        rows: an attention table (`context_attention`, `decode_attention` or their `_fp8_kv`
            forms; columns `num_heads`, `num_kv_heads`, `head_dim`, the `point_keys` and
            `time_s` in seconds), rows at any head counts.
        num_heads, num_kv_heads, head_dim: the model's per-rank query heads, KV heads, head size.
        point_keys: the columns of a measured point besides the heads, e.g.
            ("batch_size", "kv_tokens").

    Returns:
        (rows, note): the measured rows at exactly these heads (note None); else rows at
        `num_heads` interpolated linearly in the query heads, at the points both bracketing
        grouped-query counts measured (note: "interpolated between N and M query heads"); else
        an empty frame and None (no bracketing pair at these KV heads and head_dim, or a
        multi-head target: not priced here).
    """
    exact = rows[(rows["num_heads"] == num_heads) & (rows["num_kv_heads"] == num_kv_heads)
                 & (rows["head_dim"] == head_dim)]
    if not exact.empty:
        return exact, None
    # Grouped-query rows only (more query than KV heads): a multi-head row (as many of each)
    # runs another decode path on several cards (module docstring).
    same = rows[(rows["num_kv_heads"] == num_kv_heads) & (rows["head_dim"] == head_dim)
                & (rows["num_heads"] > num_kv_heads)]
    counts = sorted(int(h) for h in same["num_heads"].unique()) if num_heads > num_kv_heads else []
    below = [h for h in counts if h < num_heads]
    above = [h for h in counts if h > num_heads]
    if not below or not above:
        return rows.iloc[0:0], None
    low, high = below[-1], above[0]
    times = {h: same[same["num_heads"] == h].groupby(list(point_keys))["time_s"].mean() for h in (low, high)}
    common = times[low].index.intersection(times[high].index)
    if common.empty:
        return rows.iloc[0:0], None
    weight = (num_heads - low) / (high - low)
    time_s = (1.0 - weight) * times[low][common] + weight * times[high][common]
    out = time_s.reset_index()
    out.insert(0, "head_dim", head_dim)
    out.insert(0, "num_kv_heads", num_kv_heads)
    out.insert(0, "num_heads", num_heads)
    return out, f"interpolated between {low} and {high} query heads"
