"""Prompt token ids for trace requests, which carry only token counts (and, for prefix caching,
the identity of their prefix blocks)."""
from __future__ import annotations

import numpy as np

from simulator.scheduler.prefix_cache import named_tokens
from traces import Request


def prompt_token_ids(request: Request, vocab_size: int, seed: int = 0) -> list[int]:
    """`request.prompt_tokens` ids drawn uniformly from [0, vocab_size).

    Tokens that `request.prefix_hash_ids` name are drawn per hash block, seeded by (seed, id):
    requests whose ids agree get the same tokens there, so a prefix-cache hit in the engine reads
    the KV of exactly its own prompt's tokens (an id names the whole prefix up to its block's end,
    so drawing a block from its id alone keeps equal prefixes equal; a partial last block takes
    the first tokens of its id's draw). The other tokens are seeded by (seed, request_id). The
    same request always gets the same prompt, whatever order requests arrive in.
    """
    rng = np.random.default_rng([seed, request.request_id])
    ids = rng.integers(0, vocab_size, request.prompt_tokens)
    named = min(named_tokens(request), request.prompt_tokens) if request.prefix_hash_ids else 0
    size = request.prefix_block_tokens
    for k, start in enumerate(range(0, named, size)):
        block = np.random.default_rng([seed, 1, request.prefix_hash_ids[k]]).integers(0, vocab_size, size)
        ids[start : min(start + size, named)] = block[: min(size, named - start)]
    return ids.tolist()
