"""Which shapes a profile times, in the order that makes a cut-short profile still useful.

Shapes come in three levels, every op's shapes of one level before any of the next, so a budget
that runs out leaves every op covered coarsely rather than a few ops densely:

- level 0: powers of two (GEMM tile multiples) — the skeleton every fit needs;
- level 1: 1.5 × powers of two, and one past each tile boundary (65, 129, 257, ...), where tile
  quantisation makes chunk = tile + 1 much slower than chunk = tile (REFERENCE.md §1.4);
- level 2: log-uniform fill, plus multiples of 64 over the chunk sizes steps usually use
  (256-2048 tokens, REFERENCE.md §1.2, §2.2) and seeded log-uniform (q, c) and (B, c) pairs.

Within a level an op's shapes ascend, so the harness can estimate a shape's cost from the last one.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profiler.ops import DECODE_BATCH, PREFILL_SEQ, Op

# Tile sizes of common GEMM kernels (cuBLAS/CUTLASS and Triton pick 64-256 row tiles).
_TILES = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
_FILL_POINTS = 40  # log-uniform points per 1-D op at level 2
_PAIR_POINTS = 32  # random log-uniform pairs per 2-D op at level 2


@dataclass(frozen=True)
class GridLimits:
    """The largest shapes a profile times.

    Attributes:
        max_tokens: step tokens T (GEMM rows) and prefill chunk q.
        max_seqs: sequences per step (logit rows, decode batch).
        max_context: cached tokens c of one sequence.
        max_kv_tokens: cap on a decode batch's KV tokens B × (c + 1) (memory of one layer's cache).
    """

    max_tokens: int
    max_seqs: int
    max_context: int
    max_kv_tokens: int


def default_limits(max_model_len: int, device_kind: str) -> GridLimits:
    """Grid limits for a device kind.

    CPU (float32, tested in CI): T ≤ 1024, 128 sequences, c ≤ 2048, 32k KV tokens — an 8B model's
    GEMMs at 1024 tokens already take ~1 s a call on two cores. CUDA: up to the step budgets vLLM
    uses on large GPUs (16,384 tokens, REFERENCE.md §2.2), 512 sequences and the model's context.
    """
    if device_kind == "cpu":
        return GridLimits(min(1024, max_model_len), 128, min(2048, max_model_len), 32768)
    return GridLimits(min(16384, max_model_len), 512, max_model_len, 1 << 21)


def _powers(low: int, high: int, factor: float = 2.0) -> list[int]:
    values, v = [], float(low)
    while v <= high:
        values.append(int(round(v)))
        v *= factor
    return values


def _one_d_levels(high: int, dense_low: int = 256, dense_high: int = 2048) -> list[list[int]]:
    level0 = _powers(1, high)
    level1 = [3 * p // 2 for p in _powers(2, high) if 3 * p // 2 <= high]
    level1 += [t + 1 for t in _TILES if t + 1 <= high]
    fill = np.unique(np.round(np.geomspace(1, high, _FILL_POINTS)).astype(int)).tolist()
    fill += list(range(dense_low + 64, min(dense_high, high) + 1, 64))
    levels, seen = [], set()
    for values in (level0, level1, fill):
        fresh = sorted(set(values) - seen)
        seen.update(fresh)
        levels.append(fresh)
    return levels


def _pairs(rng: np.random.Generator, a_high: int, b_low: int, b_high: int, n: int) -> list[tuple[int, int]]:
    """n seeded log-uniform pairs (a in [1, a_high], b in [b_low, b_high]); b = 0 for a fifth."""
    a = np.round(np.exp(rng.uniform(0, np.log(a_high), n))).astype(int)
    b = np.round(np.exp(rng.uniform(np.log(max(b_low, 1)), np.log(max(b_high, 2)), n))).astype(int)
    if b_low == 0:
        b[rng.uniform(size=n) < 0.2] = 0
    return list(zip(a.tolist(), b.tolist()))


def _two_d_levels(op: Op, limits: GridLimits, seed: int) -> list[list[tuple[int, int]]]:
    """Levels of (query_tokens, context_tokens) for prefill, (batch_size, context_tokens) for decode.

    Prefill chunks fit the model's context (q + c ≤ max(max_context, max_tokens)); decode batches
    fit the KV cap (B (c + 1) ≤ max_kv_tokens).
    """
    rng = np.random.default_rng(seed)
    if op.driver == PREFILL_SEQ:
        first, context_low = limits.max_tokens, 0
        coarse = (_powers(16, first, 4), [0] + _powers(256, limits.max_context, 4))
        fine = (_powers(8, first), [0] + _powers(128, limits.max_context))
    else:
        first, context_low = limits.max_seqs, 16
        coarse = (_powers(1, first, 4), _powers(16, limits.max_context, 8))
        fine = (_powers(1, first), _powers(16, limits.max_context))

    def fits(a: int, b: int) -> bool:
        if op.driver == PREFILL_SEQ:
            return a + b <= max(limits.max_context, limits.max_tokens)
        return a * (b + 1) <= limits.max_kv_tokens

    levels, seen = [], set()
    candidates = (
        [(a, b) for a in coarse[0] for b in coarse[1]],
        [(a, b) for a in fine[0] for b in fine[1]],
        _pairs(rng, first, context_low, limits.max_context, _PAIR_POINTS),
    )
    for values in candidates:
        fresh = sorted({v for v in values if fits(*v)} - seen)
        seen.update(fresh)
        levels.append(fresh)
    return levels


def shape_grid(ops: tuple[Op, ...], limits: GridLimits, seed: int = 0) -> list[list[tuple[Op, dict[str, int]]]]:
    """Every (op, shape) to time, as three levels (see the module docstring).

    Args:
        ops: the ops to profile (all_reduce is left out by the caller on one device).
        limits: the largest shapes.
        seed: seeds the random pairs of level 2.

    Returns:
        levels[0..2], each a list of (op, {key column: value}): ops in catalogue order, each op's
        shapes ascending.
    """
    per_op: list[tuple[Op, list[list]]] = []
    for op in ops:
        if op.driver in (PREFILL_SEQ, DECODE_BATCH):
            per_op.append((op, _two_d_levels(op, limits, seed)))
        else:
            high = limits.max_seqs if op.driver == "seqs" else limits.max_tokens
            per_op.append((op, _one_d_levels(high)))
    grid = []
    for level in range(3):
        shapes = []
        for op, levels in per_op:
            for value in levels[level]:
                values = value if isinstance(value, tuple) else (value,)
                shapes.append((op, dict(zip(op.key, values))))
        grid.append(shapes)
    return grid
