"""N-gram prompt-lookup drafting: propose the tokens that followed the sequence's last n-gram before.

No model and no device work (DESIGN.md "Split-N": draft cost ≈ 0). As transformers' prompt lookup
decoding (`PromptLookupCandidateGenerator`): try the longest n-gram first, take its earliest earlier
occurrence in prompt + generated tokens, and propose up to k of the tokens that followed it.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


class NgramProposer:
    """Proposes 0..k draft tokens by matching the last n tokens (n from `max_n` down to `min_n`).

    Raises:
        ValueError: min_n < 1 or max_n < min_n.
    """

    def __init__(self, min_n: int = 1, max_n: int = 3):
        if min_n < 1 or max_n < min_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
        self.min_n, self.max_n = min_n, max_n

    def propose(self, token_ids: Sequence[int], num_tokens: int) -> list[int]:
        """Up to `num_tokens` draft tokens to follow `token_ids`; [] when no n-gram recurs.

        Args:
            token_ids: the sequence so far (prompt + generated), oldest first.
            num_tokens: the most drafts wanted (the plan's `num_draft_tokens`).
        """
        if num_tokens <= 0:
            return []
        tokens = np.asarray(token_ids, dtype=np.int64)
        for n in range(min(self.max_n, len(tokens) - 1), self.min_n - 1, -1):
            # Windows starting at 0..len-1-n: every occurrence of the tail except the tail itself.
            windows = sliding_window_view(tokens[:-1], n)
            hits = np.flatnonzero((windows == tokens[-n:]).all(axis=1))
            if hits.size:
                start = int(hits[0]) + n
                return tokens[start : start + num_tokens].tolist()
        return []
