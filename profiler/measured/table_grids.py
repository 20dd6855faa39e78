"""Curves and grids the measured cost model reads its tables through
(`profiler.measured.cost_model.MeasuredCostModel`): a one-key log-log curve, a source's GEMM
(m, n, k) grid, a mixed-attention table's three grids, and the width of an element-wise op in the
model a table was measured for.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from profiler.measured.grid import LogGrid
from profiler.measured.tables import MeasuredTableError, MeasuredTables

Curve = Callable[[float], tuple[float, bool]]


def _one_d(table: pd.DataFrame, key: str, source: str, roofline: Callable[[float], float]) -> Curve:
    """A curve t(x) over one key, log-log interpolated, roofline-scaled past its ends."""
    grid = LogGrid.from_frame(table, [key], source=source)
    lo, hi = grid.lower[0], grid.upper[0]

    def curve(x: float) -> tuple[float, bool]:
        t, out = grid(x)
        if out and (x < lo or x > hi):
            edge = lo if x < lo else hi
            t *= roofline(x) / roofline(edge)
        return t, out
    return curve


def _measured_width(op: str, source: MeasuredTables) -> float:
    """Width (elements per token) of `op` in the model a layer_ops table was measured for."""
    m, tp = source.model, source.tensor_parallel_size or 1
    heads, kv = m.num_attention_heads // tp, m.kv_heads_per_rank(tp)
    return {"layernorm": m.hidden_size, "final_layernorm": m.hidden_size, "embedding": m.hidden_size,
            "residual_add": m.hidden_size, "act_fn": m.intermediate_size / tp,
            "rotary_emb": (heads + kv) * m.head_dim, "qk_norm": (heads + kv) * m.head_dim}[op]


def _gemm_grid(source: MeasuredTables, roofline: Callable[..., np.ndarray], table: str = "gemm") -> LogGrid:
    """The (m, n, k) grid of a source's GEMM table (`gemm`, `gemm_fp8`, `gemm_fp8_block`), built
    once per tables object and table (kept on it: the shipped tables are loaded once per process,
    so every point's model shares the grid; `roofline` fills its unmeasured cells and depends only
    on the device and this table)."""
    key = "_gemm_grid" if table == "gemm" else f"_gemm_grid_{table}"
    grid = source.__dict__.get(key)
    if grid is None:
        grid = source.__dict__[key] = LogGrid.from_frame(source.tables[table], ["m", "n", "k"],
                                                         source=f"{source.label} {table}", roofline=roofline)
    return grid


def _mixed_grids(rows: pd.DataFrame, label: str, chunk_roofline, decode_roofline):
    """(prefill-only t(q, c), decode-only t(B, c), mixed t(q, c, B, c_d)) from a mixed_attention
    table, on its power-of-two grid (chunk 16·2^i, contexts 0 and 16·2^i, decodes 2^i); the
    table's in-between points (its ×1.5 skew grid) are not used for the grid."""
    pow2 = lambda v, base: (v > 0) & (np.log2(np.maximum(v, 1) / base) % 1 == 0) & (v >= base)  # noqa: E731
    r = rows[pow2(rows["prefill_tokens"], 16) | (rows["prefill_tokens"] == 0)]
    r = r[pow2(r["prefill_context_tokens"], 16) | (r["prefill_context_tokens"] == 0)]
    r = r[pow2(r["num_decodes"], 1) | (r["num_decodes"] == 0)]
    r = r[pow2(r["decode_context_tokens"], 16) | (r["decode_context_tokens"] == 0)]
    prefill = r[(r["num_decodes"] == 0) & (r["prefill_tokens"] > 0)]
    decode = r[(r["prefill_tokens"] == 0) & (r["num_decodes"] > 0)]
    both = r[(r["prefill_tokens"] > 0) & (r["num_decodes"] > 0)]
    for part, name in ((prefill, "prefill-only"), (decode, "decode-only"), (both, "mixed")):
        if part.empty:
            raise MeasuredTableError(f"{label} mixed_attention: no {name} rows on the power-of-two grid")
    return (LogGrid.from_frame(prefill, ["prefill_tokens", "prefill_context_tokens"], source=f"{label} prefill",
                               roofline=chunk_roofline),
            LogGrid.from_frame(decode, ["num_decodes", "decode_context_tokens"], source=f"{label} decode",
                               roofline=decode_roofline),
            LogGrid.from_frame(both, ["prefill_tokens", "prefill_context_tokens", "num_decodes", "decode_context_tokens"],
                               fill_axis=2, source=f"{label} mixed",
                               roofline=lambda q, c, b, cd: chunk_roofline(q, c) + decode_roofline(b, cd)))
