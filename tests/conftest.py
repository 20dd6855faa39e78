"""Shared fixtures: the public data in ../shared (skipped cleanly where absent) and tiny cost models."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"

# Without a GPU the Triton kernel runs in Triton's interpreter, which must be chosen before triton is
# first imported (transformers may import it): here, before any test module is collected.
if importlib.util.find_spec("torch") is not None and "TRITON_INTERPRET" not in os.environ:
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"


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


def tiny_checkpoint(tmp_path_factory, config: dict, name: str):
    """A Hugging Face checkpoint of seeded random float64 weights (seed 0) for `config` (a config.json
    object), written by the engine (`gpu_engine.checkpoint.save_checkpoint`); its directory."""
    import json

    import torch

    from gpu_engine.build import build_model
    from gpu_engine.checkpoint import load_model_args, save_checkpoint
    from gpu_engine.runner import cpu_threads

    config_dir = tmp_path_factory.mktemp(f"{name}-config")
    (config_dir / "config.json").write_text(json.dumps(config))
    with cpu_threads(1):
        model = build_model(load_model_args(config_dir), dtype=torch.float64, device="cpu", seed=0)
        return save_checkpoint(model, tmp_path_factory.mktemp(name))


def seeded_prompts(lengths: tuple[int, ...], vocab_size: int = 256, seed: int = 7) -> dict[int, list[int]]:
    """Request id -> random token ids, one prompt of each length (seeded)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    return {rid: torch.randint(0, vocab_size, (n,), generator=g).tolist() for rid, n in enumerate(lengths)}
