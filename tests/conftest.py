"""Shared fixtures: the public data in ../shared (skipped cleanly where absent) and tiny cost models."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"


def shared_path(*parts: str) -> Path:
    """Path under ../shared; skips the test with a reason when the file is not there."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"public data not present: {path} (the project's ../shared folder is needed)")
    return path


class ConstantCostModel:
    """Every step takes `step_s` seconds: isolates scheduling logic from pricing."""

    prices_without_counting = True  # no step counts: the simulator's windows may price ahead

    def __init__(self, step_s: float = 0.01):
        self.step_s = step_s

    def predict_step_s(self, query_tokens: np.ndarray, context_tokens: np.ndarray, is_prefill: np.ndarray) -> float:
        return self.step_s if len(query_tokens) else 0.0


@pytest.fixture
def constant_cost() -> ConstantCostModel:
    return ConstantCostModel(0.01)


def greedy_continuations(hf_model, prompts: dict[int, list[int]], num_new: int) -> dict[int, list[int]]:
    """transformers' greedy `generate` of exactly `num_new` tokens after each prompt (the engine's
    reference outputs): request id -> the new token ids."""
    import torch

    out = {}
    for rid, ids in prompts.items():
        x = torch.tensor([ids])  # an explicit mask: token 0 in a prompt must not read as padding
        generated = hf_model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=num_new,
                                      min_new_tokens=num_new, do_sample=False, pad_token_id=0)
        out[rid] = generated[0, len(ids):].tolist()
    return out
