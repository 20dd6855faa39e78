"""Prompt token ids for trace requests, which carry only token counts."""
from __future__ import annotations

import numpy as np

from traces import Request


def prompt_token_ids(request: Request, vocab_size: int, seed: int = 0) -> list[int]:
    """`request.prompt_tokens` ids drawn uniformly from [0, vocab_size), seeded by (seed, request_id).

    The same request always gets the same prompt, whatever order requests arrive in.
    """
    rng = np.random.default_rng([seed, request.request_id])
    return rng.integers(0, vocab_size, request.prompt_tokens).tolist()
