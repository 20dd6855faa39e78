"""The composed cost model of a calibration directory: a fitted model of the profiled ops plus the
engine's measured per-step overhead beyond them (`engine_overhead.json`, written by
`experiments.verification.calibrate.measure_engine_overhead`). `cost_model: profile:DIR` is this
model whenever DIR holds an overhead file, for every command."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from profiler.atomic_write import write_text_whole
from profiler.json_object import read_json_object

OVERHEAD_FILE = "engine_overhead.json"


@dataclass(frozen=True)
class EngineOverhead:
    """The engine's per-step time beyond the profiled ops (scheduler call, Python dispatch, record
    keeping, draft handling): per_step_s + per_seq_s × sequences + per_token_s × query tokens +
    per_draft_s × draft tokens + per_attention_call_s × unpriced attention calls, seconds.

    The last term is the attention calls the engine makes that the fitted model's attention does
    not price (`unpriced_attention_calls`): the engine's torch attention
    (`gpu_engine.attention.paged_attention_torch`) runs the one-token queries (decodes) as one
    batched call but each verify (a decode entry of 1 + drafts queries) as a call of its own, per
    layer, while `profiler.fitted.FittedCostModel` prices every decode entry, verifies included,
    within one batched `attention_decode` call (as vLLM's varlen kernel runs them). Without it,
    steps of several verifies were under-priced by ≈ 50 µs per such call on the tiny CPU model
    (calibration of BENCHMARKS.md run H, split-N overhead run and the split-N 90 % point: median
    residual +5 / +59 / +122 µs at 1 / 2 / 3 extra calls without a prefill chunk; +13 / +55 / +77 µs
    at 2 / 3 / 4 with one), which a term per draft or per sequence cannot follow because a verify's
    extra call does not depend on its draft count and is absent for the first verify of a step
    without decodes. On the Triton path (CUDA) every sequence shares one kernel launch, so its fit
    comes out near 0.

    Fitted by median (quantile 0.5) regression to measured − fitted-model step times of
    calibration runs (`measure_engine_overhead`), so that steps slowed by other processes on a
    shared CPU do not pull it up; the coefficients are clipped at 0.
    """

    per_step_s: float
    per_seq_s: float
    per_token_s: float
    per_draft_s: float = 0.0  # absent from calibrations made before split-N was calibrated
    per_attention_call_s: float = 0.0  # absent from calibrations made before 2026-12-01 run J

    def step_s(self, num_seqs: int, num_tokens: int, num_drafts: int = 0, num_attention_calls: int = 0) -> float:
        """Overhead (s) of a step of `num_seqs` sequences, `num_tokens` query tokens, `num_drafts`
        draft tokens and `num_attention_calls` unpriced attention calls (`unpriced_attention_calls`)."""
        return (self.per_step_s + self.per_seq_s * num_seqs + self.per_token_s * num_tokens
                + self.per_draft_s * num_drafts + self.per_attention_call_s * num_attention_calls)

    @classmethod
    def fit(cls, num_seqs: np.ndarray, num_tokens: np.ndarray, residual_s: np.ndarray,
            num_drafts: np.ndarray | None = None, num_attention_calls: np.ndarray | None = None) -> "EngineOverhead":
        """Median regression of residual_s (float[n], s) on [1, num_seqs, num_tokens, num_drafts,
        num_attention_calls] (a column that is absent or all 0 gets coefficient 0)."""
        from sklearn.linear_model import QuantileRegressor

        optional = [c if c is not None and np.any(c) else None for c in (num_drafts, num_attention_calls)]
        columns = [num_seqs, num_tokens] + [c for c in optional if c is not None]
        fit = QuantileRegressor(quantile=0.5, alpha=0.0, solver="highs").fit(
            np.column_stack(columns).astype(float), residual_s)
        coefficients = iter(float(max(c, 0.0)) for c in (fit.intercept_, *fit.coef_))
        per_step_s, per_seq_s, per_token_s = next(coefficients), next(coefficients), next(coefficients)
        per_draft_s, per_call_s = (next(coefficients) if c is not None else 0.0 for c in optional)
        return cls(per_step_s, per_seq_s, per_token_s, per_draft_s, per_call_s)

    def save(self, directory: Path) -> Path:
        return write_text_whole(Path(directory) / OVERHEAD_FILE, json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, directory: Path) -> "EngineOverhead | None":
        """The overhead saved in `directory`, or None when there is none.

        Raises:
            ValueError: the file exists but is not a readable JSON object or lacks a coefficient
                (names the file and key).
        """
        path = Path(directory) / OVERHEAD_FILE
        if not path.is_file():
            return None
        data = read_json_object(path)
        missing = [k for k in ("per_step_s", "per_seq_s", "per_token_s") if k not in data]
        if missing:
            raise ValueError(f"{path}: missing key(s) {', '.join(missing)}")
        return cls(float(data["per_step_s"]), float(data["per_seq_s"]), float(data["per_token_s"]),
                   float(data.get("per_draft_s", 0.0)), float(data.get("per_attention_call_s", 0.0)))


class WithEngineOverhead:
    """A `CostModel` (profiler protocol) plus the engine's measured per-step overhead."""

    def __init__(self, cost_model, overhead: EngineOverhead):
        self.cost_model, self.overhead = cost_model, overhead

    def predict_step_s(self, query_tokens: np.ndarray, context_tokens: np.ndarray, is_prefill: np.ndarray) -> float:
        """The wrapped model's step time plus `EngineOverhead.step_s`, seconds. A decode entry
        computing q > 1 tokens is a verify of q − 1 drafts."""
        overhead = self.overhead  # a term whose coefficient is 0 (no drafts fitted, a Triton fit) adds 0: not counted
        drafts = draft_tokens(query_tokens, is_prefill) if overhead.per_draft_s else 0
        calls = unpriced_attention_calls(query_tokens, is_prefill) if overhead.per_attention_call_s else 0
        return (self.cost_model.predict_step_s(query_tokens, context_tokens, is_prefill)
                + overhead.step_s(len(query_tokens), int(np.sum(query_tokens)), drafts, calls))


def draft_tokens(query_tokens, is_prefill) -> int:
    """Draft tokens in a step: sum of q − 1 over its non-prefill entries (a plain decode has q = 1)."""
    return sum(q - 1 for q, prefill in zip(np.asarray(query_tokens).tolist(), np.asarray(is_prefill).tolist())
               if not prefill)


def unpriced_attention_calls(query_tokens, is_prefill) -> int:
    """Attention calls (per layer) the engine's torch path makes beyond those the fitted model
    prices, for one step.

    The engine (`gpu_engine.attention.paged_attention_torch`) makes one call for all one-query
    entries (decodes, and a prompt's last-token chunk) if any, plus one per entry of q > 1 queries
    (prefill chunk or verify); `FittedCostModel` prices one call per prefill chunk of q > 1 and one
    batched decode call for all other entries. The difference is V − 1 for V verifies and no
    one-query entry, V otherwise (0 without verifies): e.g. 3 verifies + 1 decode + 1 chunk → 3
    calls (engine 5, priced 2); 3 verifies alone → 2 (engine 3, priced 1)."""
    q, prefill = np.asarray(query_tokens), np.asarray(is_prefill, dtype=bool)
    verifies = int(np.count_nonzero(~prefill & (q > 1)))
    return verifies - 1 if verifies and not np.any(q == 1) else verifies
