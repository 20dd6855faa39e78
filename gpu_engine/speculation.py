"""Verification of draft tokens against the model's choices at the verify positions.

A verify step feeds the pending token and k drafts d_1..d_k; the model's choices t_0..t_k come out
of the same forward pass (t_i follows d_1..d_i). With a acceptances the sequence gains
d_1..d_a and the bonus t_a: a + 1 tokens (DESIGN.md "Split-N"). Greedy verification accepts the
matching prefix; forced acceptance (timing studies) takes a from a `simulator.acceptance` model.
"""
from __future__ import annotations

from typing import Sequence


def accepted_prefix(drafts: Sequence[int], targets: Sequence[int]) -> int:
    """Number of leading drafts equal to the model's choice at their position (greedy verification).

    Accepting exactly these keeps the output identical to plain decoding with the same sampler.
    """
    accepted = 0
    for draft, target in zip(drafts, targets):
        if draft != target:
            break
        accepted += 1
    return accepted


def emitted_tokens(drafts: Sequence[int], targets: Sequence[int], accepted: int) -> list[int]:
    """The a accepted drafts followed by the model's token after them: a + 1 tokens.

    Args:
        drafts: the k proposed tokens.
        targets: the k + 1 tokens the model chose at the verify positions.
        accepted: a, 0 <= a <= k.
    """
    return list(drafts[:accepted]) + [targets[accepted]]
