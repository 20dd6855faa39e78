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


# Hopper's block-FP8 GEMM (DeepGEMM, vLLM 0.19 `vllm/utils/deep_gemm.py`:
# `should_use_deepgemm_for_fp8_linear`, `get_col_major_tma_aligned_tensor`) reads the activations'
# per-token-group scales, fp32 and column-major, by TMA, whose global addresses must be 16-byte
# aligned (DeepGEMM's `get_tma_aligned_size`): 4 scales, so a GEMM whose m is not a multiple of 4
# pays for an aligned copy. AIConfigurator's h100_sxm / h200 `gemm_fp8_block` rows show it as a
# step: m = 8, 12, 16 run ~9 µs faster than m = 9, 13, 17 (n = k = 8192: 36 vs 46 µs), and m = 4096
# 514 µs against 566 µs at 4097. Interpolating across the step misses by the step (21-22 % held-out
# MAPE along m); within each class, 3.1 % (h100) / 4.2 % (h200) (benchmarks/bench_quantized.py).
SCALE_TMA_ALIGNMENT_ROWS = 4


def _m_class_curve(column: pd.DataFrame, source: str, roofline: Callable[[float], float]) -> Curve:
    """t(m) over a GEMM table's m column, interpolated within m's alignment class
    (`SCALE_TMA_ALIGNMENT_ROWS`) when the table measured both classes (two rows or more each), else
    over every row as `_one_d`.

    An unaligned m above the last unaligned row is the aligned curve at m times the misalignment
    ratio measured at that row (t(m_u) / t_aligned(m_u)): the aligned rows reach higher (h100:
    unaligned to 4353, aligned to 32768), and the step is a copy of the scales that grows with m as
    the GEMM does. Below the first unaligned row (m = 1 on the tables read) the unaligned curve is
    extended as `_one_d` extends. `column`: rows with "m" and "time_s"."""
    aligned = (column["m"].to_numpy() % SCALE_TMA_ALIGNMENT_ROWS) == 0
    if aligned.sum() < 2 or (~aligned).sum() < 2:
        return _one_d(column, "m", source, roofline)
    on = _one_d(column[aligned], "m", f"{source} (m a multiple of {SCALE_TMA_ALIGNMENT_ROWS})", roofline)
    off = _one_d(column[~aligned], "m", f"{source} (m not a multiple of {SCALE_TMA_ALIGNMENT_ROWS})", roofline)
    top = float(column["m"][~aligned].max())
    ratio = off(top)[0] / on(top)[0]

    def curve(m: float) -> tuple[float, bool]:
        if round(m) % SCALE_TMA_ALIGNMENT_ROWS == 0:
            return on(m)
        if m <= top:
            return off(m)
        t, out = on(m)
        return t * ratio, out
    return curve


def _gemm_m_curve(column: pd.DataFrame, table: str, source: str, roofline: Callable[[float], float]) -> Curve:
    """t(m) of one GEMM shape from `table`'s m column: `_m_class_curve` for `gemm_fp8_block`
    (DeepGEMM's scale alignment step), else `_one_d` over m (the bf16 and per-tensor FP8 rows show
    no step at m = 9, 13, 17 against 8, 12, 16)."""
    if table == "gemm_fp8_block":
        return _m_class_curve(column, source, roofline)
    return _one_d(column, "m", source, roofline)


# vLLM's custom all-reduce takes a message while `inp_size < self.max_size`, 8 MiB by default
# (`CustomAllreduce.__init__(..., max_size=8192 * 1024)` and `should_custom_ar` in
# vllm/distributed/device_communicators/custom_all_reduce.py, vLLM 0.14-0.19; two GPUs or NVLink
# fully connected only); larger ones go to NCCL. The tables' rows are powers of two, so 4 MiB and
# 8 MiB sit on either side of the switch: on a100-80gb (vLLM 0.14 rows) the graph all-reduce jumps
# 41.5 -> 118.0 µs at TP 4, and a message between them interpolated across the jump.
CUSTOM_ALL_REDUCE_MAX_BYTES = 8 * 1024 * 1024


def _all_reduce_curve(rows: pd.DataFrame, source: str, roofline: Callable[[float], float]) -> Curve:
    """t(bytes) of one all-reduce from a table's rows of one GPU count and mode ("size_bytes",
    "time_s"), never interpolated across `CUSTOM_ALL_REDUCE_MAX_BYTES`: a message below it is read
    from the rows below it and one at or above it from the rows at or above it, as `_one_d` reads
    each. A message between the last row below the switch (4 MiB on the tables read) and the switch
    is that row scaled by the ring model (`roofline`), as the custom all-reduce's two-shot
    algorithm moves bytes in proportion; it is not flagged off the grid (the gap is at most the
    rows' own factor of two, as an interpolation's). Rows on one side only, or rows that do not
    jump across the switch (`_slower_past_switch`): `_one_d` over all."""
    sizes = rows["size_bytes"].to_numpy()
    below = sizes < CUSTOM_ALL_REDUCE_MAX_BYTES
    if not below.any() or below.all() or not _slower_past_switch(rows, below):
        return _one_d(rows, "size_bytes", source, roofline)
    custom = _one_d(rows[below], "size_bytes", f"{source} (custom all-reduce)", roofline)
    nccl = _one_d(rows[~below], "size_bytes", f"{source} (NCCL)", roofline)
    top = float(sizes[below].max())

    def curve(size_bytes: float) -> tuple[float, bool]:
        if size_bytes >= CUSTOM_ALL_REDUCE_MAX_BYTES:
            return nccl(size_bytes)
        t, out = custom(size_bytes)
        return t, out and size_bytes <= top
    return curve


def _slower_past_switch(rows: pd.DataFrame, below: np.ndarray) -> bool:
    """Whether the rows jump across the switch by more than the size does: one all-reduce algorithm
    takes at most proportionally longer for a larger message (latency + bytes / bandwidth), so a
    time ratio above the size ratio between the last row below the switch and the first at or
    above it is another, slower algorithm taking over (a100-80gb TP 4: 118.0 / 41.5 µs for 8 / 4
    MiB). Where the rows show no such jump the switch is not where vLLM changes algorithm on that
    card (Hopper TP 8: vLLM 0.19 caps the custom all-reduce at 256 KiB there,
    `CUSTOM_ALL_REDUCE_MAX_SIZES` in `all_reduce_utils.py`, and symmetric-memory all-reduce runs
    on both sides of 8 MiB) and the rows are interpolated as one curve."""
    lo = rows[below].loc[rows["size_bytes"][below].idxmax()]
    hi = rows[~below].loc[rows["size_bytes"][~below].idxmin()]
    return float(hi["time_s"]) / float(lo["time_s"]) > float(hi["size_bytes"]) / float(lo["size_bytes"])


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
