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
    per_draft_s × draft tokens, seconds.

    Fitted by median (quantile 0.5) regression to measured − fitted-model step times of
    calibration runs (`measure_engine_overhead`), so that steps slowed by other processes on a
    shared CPU do not pull it up; the coefficients are clipped at 0.
    """

    per_step_s: float
    per_seq_s: float
    per_token_s: float
    per_draft_s: float = 0.0  # absent from calibrations made before split-N was calibrated

    def step_s(self, num_seqs: int, num_tokens: int, num_drafts: int = 0) -> float:
        return self.per_step_s + self.per_seq_s * num_seqs + self.per_token_s * num_tokens + self.per_draft_s * num_drafts

    @classmethod
    def fit(cls, num_seqs: np.ndarray, num_tokens: np.ndarray, residual_s: np.ndarray,
            num_drafts: np.ndarray | None = None) -> "EngineOverhead":
        """Median regression of residual_s (float[n], s) on [1, num_seqs, num_tokens, num_drafts]
        (without drafts, per_draft_s is 0)."""
        from sklearn.linear_model import QuantileRegressor

        columns = [num_seqs, num_tokens] + ([num_drafts] if num_drafts is not None and np.any(num_drafts) else [])
        fit = QuantileRegressor(quantile=0.5, alpha=0.0, solver="highs").fit(
            np.column_stack(columns).astype(float), residual_s)
        return cls(*(float(max(c, 0.0)) for c in (fit.intercept_, *fit.coef_)))

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
                   float(data.get("per_draft_s", 0.0)))


class WithEngineOverhead:
    """A `CostModel` (profiler protocol) plus the engine's measured per-step overhead."""

    def __init__(self, cost_model, overhead: EngineOverhead):
        self.cost_model, self.overhead = cost_model, overhead

    def predict_step_s(self, query_tokens: np.ndarray, context_tokens: np.ndarray, is_prefill: np.ndarray) -> float:
        """The wrapped model's step time plus `EngineOverhead.step_s`, seconds. A decode entry
        computing q > 1 tokens is a verify of q − 1 drafts."""
        return (self.cost_model.predict_step_s(query_tokens, context_tokens, is_prefill)
                + self.overhead.step_s(len(query_tokens), int(np.sum(query_tokens)),
                                       draft_tokens(query_tokens, is_prefill)))


def draft_tokens(query_tokens, is_prefill) -> int:
    """Draft tokens in a step: sum of q − 1 over its non-prefill entries (a plain decode has q = 1)."""
    return sum(q - 1 for q, prefill in zip(np.asarray(query_tokens).tolist(), np.asarray(is_prefill).tolist())
               if not prefill)
