"""The `CostModel` protocol: how long one iteration (one `BatchPlan`) takes on a device."""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class CostModel(Protocol):
    """Prices one forward step of a batch (DESIGN.md, "Core types and interfaces").

    profiler/ imports nothing from simulator/: a step is described by three aligned arrays, one
    entry per scheduled sequence.
    """

    def predict_step_s(
        self,
        query_tokens: np.ndarray,
        context_tokens: np.ndarray,
        is_prefill: np.ndarray,
    ) -> float:
        """Duration of one step in seconds.

        The three arguments are aligned numpy arrays or plain lists (the simulator passes each
        plan's lists; a model may convert them with `step_arrays`).

        Args:
            query_tokens: int array, shape (num_seqs,): tokens each sequence computes this step
                (a prefill chunk, 1 for a decode, 1 + drafts for a speculative verify).
            context_tokens: int array, shape (num_seqs,): tokens already in the KV cache before
                this step (the query attends to context + itself, causally).
            is_prefill: bool array, shape (num_seqs,): True for prompt (or recompute) chunks.

        Returns:
            Step duration in seconds (> 0 for a non-empty batch).
        """
        ...


def step_arrays(query_tokens: np.ndarray, context_tokens: np.ndarray,
                is_prefill: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The three step arrays as (float64, float64, bool) numpy arrays, checked to align.

    Raises:
        ValueError: the arrays differ in shape (the message gives the three shapes).
    """
    q = np.asarray(query_tokens, dtype=np.float64)
    c = np.asarray(context_tokens, dtype=np.float64)
    prefill = np.asarray(is_prefill, dtype=bool)
    if not q.shape == c.shape == prefill.shape:
        raise ValueError(f"query_tokens, context_tokens, is_prefill must align; got shapes "
                         f"{q.shape}, {c.shape}, {prefill.shape}")
    return q, c, prefill
